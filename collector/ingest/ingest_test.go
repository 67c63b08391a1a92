package ingest

import (
	"bytes"
	"context"
	"errors"
	mrand "math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/enrich"
	"github.com/itlmon/itlmon/internal/benchrec"
	"github.com/itlmon/itlmon/internal/memnet"
	"github.com/itlmon/itlmon/wasm/beacon"
)

const (
	pageOrigin = "https://chat.example.com"
	firefoxUA  = "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"
)

// fakeSink is a unit-test collector.Sink: it records submissions and calls
// done from another goroutine, at once or when released.
type fakeSink struct {
	mu      sync.Mutex
	got     [][]collector.Stream
	hold    bool
	held    []func(error)
	failErr error // done(failErr)
	block   chan struct{}

	in, maxIn atomic.Int32 // Submit calls running, and the most at once

	ctxMade []bool // per Submit: whether its waitContext had been looked at (made) by then
}

func (f *fakeSink) Submit(ctx context.Context, b *collector.Batch, done func(error)) error {
	n := f.in.Add(1)
	defer f.in.Add(-1)
	for m := f.maxIn.Load(); n > m && !f.maxIn.CompareAndSwap(m, n); m = f.maxIn.Load() {
	}
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if wc, ok := ctx.(*waitContext); ok {
		wc.mu.Lock()
		f.ctxMade = append(f.ctxMade, wc.ctx != nil)
		wc.mu.Unlock()
	}
	f.got = append(f.got, b.Streams()) // copies: b is the caller's past Submit
	if f.hold {
		f.held = append(f.held, done)
		return nil
	}
	err := f.failErr
	go done(err)
	return nil
}

func (f *fakeSink) release() {
	f.mu.Lock()
	held := f.held
	f.held, f.hold = nil, false
	f.mu.Unlock()
	for _, d := range held {
		go d(nil)
	}
}

func (f *fakeSink) submitted() [][]collector.Stream {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]collector.Stream(nil), f.got...)
}

type fixture struct {
	h      *Handler
	ln     *memnet.Listener // the handler's server listens here, in memory
	url    string           // the server's base URL (any host: every dial goes to ln)
	client *http.Client     // dials ln
	sink   *fakeSink
	reg    *prometheus.Registry
}

func newFixture(t testing.TB, mod func(*Config)) *fixture {
	t.Helper()
	e, err := enrich.New(enrich.Options{TrustProxy: true})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{sink: &fakeSink{}, reg: prometheus.NewRegistry()}
	cfg := Config{
		Sites:      []Site{{Key: "chat", Origins: []string{pageOrigin}}, {Key: "open", Origins: []string{"*"}}},
		Sink:       f.sink,
		Enricher:   e,
		Registerer: f.reg,
		Logger:     zerolog.Nop(),
	}
	if mod != nil {
		mod(&cfg)
	}
	if f.h, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	f.h.Register(mux)
	// The server and its clients talk over memnet, so a test can run the
	// handler inside a testing/synctest bubble (fake time); outside one it
	// runs on the real clock.
	f.ln = memnet.Listen()
	f.url = "http://collector.test"
	srv := &http.Server{Handler: mux}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(f.ln)
	}()
	tr := &http.Transport{DialContext: f.ln.DialContext}
	f.client = &http.Client{Transport: tr}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		f.h.Shutdown(ctx)
		tr.CloseIdleConnections()
		srv.Close()
		<-served
	})
	return f
}

// post sends a request to the handler's server.
func (f *fixture) post(t *testing.T, path, origin string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", f.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (f *fixture) wsURL(site string) string {
	return "ws" + strings.TrimPrefix(f.url, "http") + "/v1/ws?site=" + site
}

// wsDialer dials the handler's server.
func (f *fixture) wsDialer() *websocket.Dialer {
	return &websocket.Dialer{NetDialContext: f.ln.DialContext, HandshakeTimeout: 45 * time.Second}
}

func (f *fixture) dial(t *testing.T, site, origin string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	h.Set("User-Agent", firefoxUA)
	h.Set("CF-IPCountry", "DE")
	c, resp, err := f.wsDialer().Dial(f.wsURL(site), h)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, resp, err
}

func (f *fixture) rejected(reason string) float64 {
	return value(f.h.m.rejected.WithLabelValues(reason))
}

func testRecord(i byte) beacon.Record {
	r := beacon.Record{
		StartUnixMs: 1_790_000_000_000 + int64(i),
		PageOrigin:  pageOrigin,
		PagePath:    "/chat",
		URLOrigin:   "https://api.example.com",
		URLPath:     "/v1/chat/completions",
		Model:       "gpt-test",
		HTTPProto:   "h2",
		ContentType: "text/event-stream",
		HTTPStatus:  200,
		TTFBUs:      12_000, TTFCUs: 15_000, TTFTUs: 20_000, DurationUs: 900_000,
		Events: 42, ContentEvents: 40, Tokens: 40, Reads: 40, Bytes: 4096,
	}
	r.StreamID[0], r.StreamID[15] = 0xa0, i
	return r
}

func mustBatch(t testing.TB, seq uint64, site string, n int) []byte {
	t.Helper()
	b := beacon.Batch{Seq: seq, Site: site, Client: beacon.Client{ConnType: "4g", Release: "v1"}}
	for i := 0; i < n; i++ {
		b.Records = append(b.Records, testRecord(byte(i)))
	}
	p, err := b.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readAck(t *testing.T, c *websocket.Conn) beacon.Ack {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(time.Minute)) // a hang fails the test; longer than any timeout under test
	mt, p, err := c.ReadMessage()
	if err != nil {
		t.Fatalf("read ack: %v", err)
	}
	if mt != websocket.BinaryMessage {
		t.Fatalf("ack message type = %d, want binary", mt)
	}
	a, err := beacon.DecodeAck(p)
	if err != nil {
		t.Fatalf("decode ack: %v", err)
	}
	return a
}

// readClose reads until the server's close frame and returns it with the
// acks that came before it.
func readClose(t *testing.T, c *websocket.Conn) (*websocket.CloseError, []beacon.Ack) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(time.Minute)) // a hang fails the test; longer than any timeout under test
	var acks []beacon.Ack
	for {
		_, p, err := c.ReadMessage()
		if err == nil {
			a, err := beacon.DecodeAck(p)
			if err != nil {
				t.Fatalf("decode ack: %v", err)
			}
			acks = append(acks, a)
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("read: %v, want a close frame", err)
		}
		return ce, acks
	}
}

func TestAdmission(t *testing.T) {
	f := newFixture(t, nil)
	tests := []struct {
		name, site, origin string
		status             int
		reason             string
	}{
		{"missing site", "", pageOrigin, 400, ReasonBadRequest},
		{"unknown site", "nope", pageOrigin, 404, ReasonSite},
		{"wrong origin", "chat", "https://evil.example.net", 403, ReasonOrigin},
		{"missing origin", "chat", "", 403, ReasonOrigin},
		{"origin with other port", "chat", "https://chat.example.com:8443", 403, ReasonOrigin},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.rejected(tt.reason)
			_, resp, err := f.dial(t, tt.site, tt.origin)
			if err == nil {
				t.Fatal("dial succeeded, want a refused upgrade")
			}
			if resp == nil || resp.StatusCode != tt.status {
				t.Fatalf("status = %v, want %d", resp, tt.status)
			}
			if got := f.rejected(tt.reason) - before; got != 1 {
				t.Errorf("rejected{%s} grew by %v, want 1", tt.reason, got)
			}
		})
	}
	// Allowed: exact origin, default port spelled out, any origin for "*".
	for _, tc := range []struct{ site, origin string }{{"chat", pageOrigin}, {"chat", "https://CHAT.example.com:443"}, {"open", ""}} {
		if _, _, err := f.dial(t, tc.site, tc.origin); err != nil {
			t.Errorf("dial %s from %q: %v", tc.site, tc.origin, err)
		}
	}
}

// TestAcksReleasedTogether: the acks of many batches made durable at once
// (one insert) all arrive, each whole, and free their in-flight slots: a
// connection then sends past maxInFlight more.
func TestAcksReleasedTogether(t *testing.T) { synctest.Test(t, testAcksReleasedTogether) }

func testAcksReleasedTogether(t *testing.T) {
	f := newFixture(t, nil)
	f.sink.hold = true
	c, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	const n = maxInFlight
	for seq := uint64(1); seq <= n; seq++ {
		if err := c.WriteMessage(websocket.BinaryMessage, mustBatch(t, seq, "chat", 1)); err != nil {
			t.Fatal(err)
		}
	}
	synctest.Wait() // the connection waits for acks
	if got := len(f.sink.submitted()); got != n {
		t.Fatalf("%d batches submitted, want %d", got, n)
	}
	f.sink.release()
	seen := map[uint64]bool{}
	for range n {
		a := readAck(t, c)
		if a.Reject != beacon.RejectNone || a.Seq < 1 || a.Seq > n || seen[a.Seq] {
			t.Fatalf("ack %+v: want each of 1..%d once, accepted", a, n)
		}
		seen[a.Seq] = true
	}
	for seq := uint64(n + 1); seq <= 2*n+1; seq++ {
		if err := c.WriteMessage(websocket.BinaryMessage, mustBatch(t, seq, "chat", 1)); err != nil {
			t.Fatal(err)
		}
		if a := readAck(t, c); a.Seq != seq || a.Reject != beacon.RejectNone {
			t.Fatalf("ack = %+v, want %d accepted: the released slots were not freed", a, seq)
		}
	}
}

// TestHandOverBoundedByCPUs: however many connections have a batch ready,
// at most one goroutine per CPU Go runs on builds and hands over a batch at
// once (the others wait their turn, so the store's writer is not starved),
// and every batch is stored and acked.
func TestHandOverBoundedByCPUs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	synctest.Test(t, testHandOverBoundedByCPUs)
}

func testHandOverBoundedByCPUs(t *testing.T) {
	f := newFixture(t, nil)
	block := make(chan struct{})
	f.sink.block = block
	const conns = 6
	cs := make([]*websocket.Conn, conns)
	for i := range cs {
		c, _, err := f.dial(t, "chat", pageOrigin)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WriteMessage(websocket.BinaryMessage, mustBatch(t, uint64(i+1), "chat", 2)); err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	synctest.Wait() // every connection has its batch and waits: in the sink or for its turn
	if in, most := f.sink.in.Load(), f.sink.maxIn.Load(); in != 2 || most != 2 {
		t.Fatalf("%d batches being handed over, at most %d at once; want 2 (GOMAXPROCS)", in, most)
	}
	close(block)
	for i, c := range cs {
		if a := readAck(t, c); a.Seq != uint64(i+1) || a.Reject != beacon.RejectNone {
			t.Fatalf("connection %d: ack %+v, want %d accepted", i, a, i+1)
		}
	}
	if got := len(f.sink.submitted()); got != conns {
		t.Fatalf("%d batches stored, want %d", got, conns)
	}
}

func TestAckAfterDurable(t *testing.T) { synctest.Test(t, testAckAfterDurable) }

func testAckAfterDurable(t *testing.T) {
	f := newFixture(t, nil)
	f.sink.hold = true
	c, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteMessage(websocket.BinaryMessage, mustBatch(t, 7, "chat", 3)); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	if got := len(f.sink.submitted()); got != 1 {
		t.Fatalf("%d batches submitted, want 1", got)
	}
	// The sink holds the batch: nothing may be acked yet.
	if got := value(f.h.m.acked); got != 0 {
		t.Fatalf("acked = %v before the batch was durable", got)
	}
	f.sink.release()
	if got, want := readAck(t, c), (beacon.Ack{Seq: 7}); got != want {
		t.Fatalf("ack = %+v, want %+v", got, want)
	}
	if got, want := value(f.h.m.acked), 3.0; got != want {
		t.Fatalf("acked = %v, want %v", got, want)
	}

	subs := f.sink.submitted()
	s := subs[0][0]
	if s.Site != "chat" || s.Browser != "Firefox" || s.BrowserMajor != 133 || s.OS != "Linux" || s.Device != "desktop" ||
		s.Country != "DE" || s.ConnType != "4g" || s.Release != "v1" || s.Model != "gpt-test" || s.ReceivedAt.IsZero() {
		t.Fatalf("stream = %+v, want enriched chat/Firefox 133/Linux/desktop/DE/4g/v1", s)
	}
}

func TestPipelinedAcks(t *testing.T) {
	f := newFixture(t, nil)
	c, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 20; seq++ {
		if err := c.WriteMessage(websocket.BinaryMessage, mustBatch(t, seq, "", 2)); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[uint64]bool{}
	for len(seen) < 20 {
		seen[readAck(t, c).Seq] = true
	}
	if got, want := value(f.h.m.accepted), 40.0; got != want {
		t.Fatalf("accepted = %v, want %v", got, want)
	}
}

// TestInFlightBound: a client that pipelines many batches gets every ack,
// even when the store completes them in one burst, and the reader stops at
// maxInFlight unacked batches (backpressure per connection).
func TestInFlightBound(t *testing.T) { synctest.Test(t, testInFlightBound) }

func testInFlightBound(t *testing.T) {
	f := newFixture(t, nil)
	f.sink.hold = true
	c, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	const batches = 200
	go func() {
		for seq := uint64(1); seq <= batches; seq++ {
			if c.WriteMessage(websocket.BinaryMessage, mustBatch(t, seq, "chat", 1)) != nil {
				return
			}
		}
	}()
	synctest.Wait() // a reader that ignored the bound would have submitted more by now
	if got := len(f.sink.submitted()); got != maxInFlight {
		t.Fatalf("submitted %d batches with none acked, want the bound %d", got, maxInFlight)
	}
	f.sink.release()
	seen := map[uint64]bool{}
	for len(seen) < batches {
		a := readAck(t, c)
		if a.Reject != beacon.RejectNone {
			t.Fatalf("ack %+v, want accepted", a)
		}
		seen[a.Seq] = true
	}
	if got := f.rejected(ReasonSlowConsumer); got != 0 {
		t.Fatalf("rejected{slow_consumer} = %v, want 0", got)
	}
}

func TestRejectedFrames(t *testing.T) {
	f := newFixture(t, nil)
	good := mustBatch(t, 1, "chat", 1)
	random := bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 16)
	oversized := append(mustBatch(t, 5, "chat", 1), make([]byte, beacon.DefaultLimits.MaxBytes)...)
	const noAck = -1
	tests := []struct {
		name   string
		mt     int
		frame  []byte
		code   int
		reason string
		text   string
		ack    int // the Reject acked before the close, noAck for none
	}{
		{"text frame", websocket.TextMessage, []byte("hello"), websocket.CloseUnsupportedData, ReasonTextFrame, "text frame", noAck},
		{"oversized", websocket.BinaryMessage, oversized, websocket.CloseMessageTooBig, ReasonTooBig, "too big", int(beacon.RejectLimit)},
		{"random bytes", websocket.BinaryMessage, random, websocket.CloseUnsupportedData, ReasonDecodeMagic, "bad batch", noAck},
		{"unknown version", websocket.BinaryMessage, withVersion(t, good, 99), websocket.CloseUnsupportedData, ReasonVersion, "version", noAck},
		{"truncated", websocket.BinaryMessage, good[:len(good)/2], websocket.CloseUnsupportedData, ReasonDecodeTruncated, "bad batch", int(beacon.RejectMalformed)},
		{"other site", websocket.BinaryMessage, mustBatch(t, 2, "open", 1), websocket.ClosePolicyViolation, ReasonSiteMismatch, "site", int(beacon.RejectSite)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.rejected(tt.reason)
			c, _, err := f.dial(t, "chat", pageOrigin)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.WriteMessage(tt.mt, tt.frame); err != nil {
				t.Fatal(err)
			}
			ce, acks := readClose(t, c)
			if ce.Code != tt.code || !strings.Contains(ce.Text, tt.text) {
				t.Fatalf("close = %d %q, want %d with %q", ce.Code, ce.Text, tt.code, tt.text)
			}
			if tt.ack == noAck && len(acks) != 0 {
				t.Fatalf("acks = %+v, want none", acks)
			}
			if tt.ack != noAck && (len(acks) != 1 || int(acks[0].Reject) != tt.ack) {
				t.Fatalf("acks = %+v, want one with reject %v", acks, beacon.Reject(tt.ack))
			}
			if got := f.rejected(tt.reason) - before; got != 1 {
				t.Fatalf("rejected{%s} grew by %v, want 1", tt.reason, got)
			}
		})
	}
	if got, want := len(f.sink.submitted()), 0; got != want {
		t.Fatalf("submitted = %d, want %d", got, want)
	}
}

func TestRateLimit(t *testing.T) { synctest.Test(t, testRateLimit) }

func testRateLimit(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.ConnRate, c.ConnBurst, c.MaxRateWait = 1, 5, 10*time.Millisecond
	})
	c, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	c.WriteMessage(websocket.BinaryMessage, mustBatch(t, 1, "chat", 5))
	if got := readAck(t, c).Seq; got != 1 {
		t.Fatalf("ack = %d, want 1", got)
	}
	c.WriteMessage(websocket.BinaryMessage, mustBatch(t, 2, "chat", 5))
	ce, acks := readClose(t, c)
	if ce.Code != websocket.CloseTryAgainLater || !strings.HasPrefix(ce.Text, "retry-after=1; rate limit") {
		t.Fatalf("close = %d %q, want 1013 rate limit", ce.Code, ce.Text)
	}
	if len(acks) != 1 || acks[0] != (beacon.Ack{Seq: 2, Reject: beacon.RejectOverload}) {
		t.Fatalf("acks = %+v, want seq 2 RejectOverload", acks)
	}
	if got := f.rejected(ReasonRateLimit); got != 1 {
		t.Fatalf("rejected{rate_limit} = %v, want 1", got)
	}
}

func TestStoreFailureClosesWithoutAck(t *testing.T) {
	f := newFixture(t, nil)
	f.sink.failErr = errors.New("disk full")
	c, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	c.WriteMessage(websocket.BinaryMessage, mustBatch(t, 1, "chat", 1))
	ce, acks := readClose(t, c)
	if ce.Code != websocket.CloseInternalServerErr {
		t.Fatalf("close = %d %q, want 1011", ce.Code, ce.Text)
	}
	if len(acks) != 1 || acks[0] != (beacon.Ack{Seq: 1, Reject: beacon.RejectRetry}) {
		t.Fatalf("acks = %+v, want seq 1 RejectRetry (never RejectNone)", acks)
	}
}

func TestShutdownAcksPendingThenCloses(t *testing.T) {
	synctest.Test(t, testShutdownAcksPendingThenCloses)
}

func testShutdownAcksPendingThenCloses(t *testing.T) {
	f := newFixture(t, nil)
	f.sink.hold = true
	c, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	c.WriteMessage(websocket.BinaryMessage, mustBatch(t, 3, "chat", 1))
	synctest.Wait()
	if got := len(f.sink.submitted()); got != 1 {
		t.Fatalf("%d batches submitted, want 1", got)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- f.h.Shutdown(ctx)
	}()
	synctest.Wait() // Shutdown waits for the pending batch
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) with a batch pending", err)
	default:
	}
	f.sink.release()
	if got := readAck(t, c); got != (beacon.Ack{Seq: 3}) {
		t.Fatalf("ack = %+v, want seq 3 accepted", got)
	}
	if ce, _ := readClose(t, c); ce.Code != websocket.CloseGoingAway {
		t.Fatalf("close = %d %q, want 1001", ce.Code, ce.Text)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n := f.h.Connections(); n != 0 {
		t.Fatalf("connections after Shutdown = %d", n)
	}
	if _, resp, err := f.dial(t, "chat", pageOrigin); err == nil || resp.StatusCode != 503 {
		t.Fatalf("dial after Shutdown: %v %v, want 503", resp, err)
	}
}

func TestBeaconPost(t *testing.T) {
	f := newFixture(t, nil)
	post := func(site, origin string, body []byte) *http.Response {
		req, _ := http.NewRequest("POST", f.url+"/v1/beacon?site="+site, bytes.NewReader(body))
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		req.Header.Set("User-Agent", firefoxUA)
		resp, err := f.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	tests := []struct {
		name, site, origin string
		body               []byte
		status             int
	}{
		{"ok", "chat", pageOrigin, mustBatch(t, 1, "chat", 2), 204},
		{"wrong origin", "chat", "https://evil.example.net", mustBatch(t, 1, "chat", 2), 403},
		{"unknown site", "nope", pageOrigin, mustBatch(t, 1, "chat", 2), 404},
		{"garbage", "chat", pageOrigin, []byte("garbage"), 400},
		{"too big", "chat", pageOrigin, make([]byte, beacon.DefaultLimits.MaxBytes+10), 413},
	}
	for _, tt := range tests {
		if got := post(tt.site, tt.origin, tt.body).StatusCode; got != tt.status {
			t.Errorf("%s: status = %d, want %d", tt.name, got, tt.status)
		}
	}
	if got, want := len(f.sink.submitted()), 1; got != want {
		t.Fatalf("submitted = %d, want %d", got, want)
	}
	resp := post("chat", pageOrigin, mustBatch(t, 2, "chat", 1))
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != pageOrigin {
		t.Fatalf("Access-Control-Allow-Origin = %q, want %q", got, pageOrigin)
	}
}

func TestParseSite(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		ok   bool
	}{
		{"demo=http://127.0.0.1:8080", []string{"http://127.0.0.1:8080"}, true},
		{"chat=https://a.example.com,https://B.example.com:443/", []string{"https://a.example.com", "https://b.example.com"}, true},
		{"any=*", []string{"*"}, true},
		{"chat", nil, false},
		{"=https://a.example.com", nil, false},
		{"chat=ftp://a.example.com", nil, false},
		{"chat=https://a.example.com/path", nil, false},
		{"bad key=https://a.example.com", nil, false},
	}
	for _, tt := range tests {
		s, err := ParseSite(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParseSite(%q) err = %v, want ok=%v", tt.in, err, tt.ok)
			continue
		}
		if tt.ok && strings.Join(s.Origins, " ") != strings.Join(tt.want, " ") {
			t.Errorf("ParseSite(%q) origins = %q, want %q", tt.in, s.Origins, tt.want)
		}
	}
}

func TestBucket(t *testing.T) {
	t0 := time.Unix(0, 0)
	b := newBucket(10, 20)
	if w, ok := b.reserve(t0, 20, time.Second); !ok || w != 0 {
		t.Fatalf("burst: wait %v ok %v", w, ok)
	}
	if w, ok := b.reserve(t0, 5, time.Second); !ok || w != 500*time.Millisecond {
		t.Fatalf("over burst: wait %v ok %v, want 500ms", w, ok)
	}
	if _, ok := b.reserve(t0, 50, time.Second); ok {
		t.Fatal("reserve beyond maxWait succeeded")
	}
	if w, ok := b.reserve(t0.Add(2*time.Second), 10, time.Second); !ok || w != 0 {
		t.Fatalf("after refill: wait %v ok %v", w, ok)
	}
	var nilBucket *bucket
	if _, ok := nilBucket.reserve(t0, 1e6, 0); !ok {
		t.Fatal("nil bucket limited")
	}
}

func TestOnceLog(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	l := &onceLog{log: zerolog.New(&buf), interval: time.Minute, now: func() time.Time { return now }, last: map[string]*logState{}}
	for i := 0; i < 100; i++ {
		l.warn(ReasonOrigin, "x")
	}
	l.warn(ReasonTooBig, "y")
	now = now.Add(2 * time.Minute)
	l.warn(ReasonOrigin, "x")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if got, want := len(lines), 3; got != want {
		t.Fatalf("log lines = %d, want %d:\n%s", got, want, buf.String())
	}
	if !strings.Contains(lines[2], `"suppressed":99`) {
		t.Fatalf("third line %s does not count the 99 suppressed", lines[2])
	}
}

// withVersion returns a copy of a frame with its version byte set to v,
// checked through PeekKind so a change of the header layout fails here.
func withVersion(t testing.TB, frame []byte, v uint8) []byte {
	t.Helper()
	out := append([]byte(nil), frame...)
	out[3] = v
	if _, got, err := beacon.PeekKind(out); got != v {
		t.Fatalf("PeekKind of the patched frame: version %d (%v), want %d: header layout changed", got, err, v)
	}
	return out
}

// value reads a counter or gauge.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic("BUG: " + err.Error())
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

func TestPeekSeq(t *testing.T) {
	frame := mustBatch(t, 1234567, "chat", 1)
	if seq, ok := peekSeq(frame); !ok || seq != 1234567 {
		t.Fatalf("peekSeq = %d %v, want 1234567 (beacon header layout changed?)", seq, ok)
	}
	for _, bad := range [][]byte{nil, []byte("garbage"), frame[:beaconHeaderLen], withVersion(t, frame, 9)} {
		if seq, ok := peekSeq(bad); ok {
			t.Errorf("peekSeq(%x) = %d, want none", bad, seq)
		}
	}
}

// BenchmarkFrame is the per-frame CPU work of ingest: check a 20-record
// batch, enrich it and build the sink's batch (no network, no store), as
// for the frames of one WebSocket connection (whose enrichment is
// remembered from frame to frame: enrich.Memo).
// "bare": records of counts and strings only; "typical": each also with
// the two histograms and the 39-stamp timeline of a 120-token answer.
func BenchmarkFrame(b *testing.B) {
	e, err := enrich.New(enrich.Options{TrustProxy: true})
	if err != nil {
		b.Fatal(err)
	}
	h, err := New(Config{Sites: []Site{{Key: "chat", Origins: []string{pageOrigin}}}, Sink: &fakeSink{},
		Enricher: e, Registerer: prometheus.NewRegistry(), Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	const n = 20
	hdr := http.Header{}
	hdr.Set("User-Agent", firefoxUA)
	hdr.Set("CF-IPCountry", "DE")
	site := h.sites["chat"]
	for _, typical := range []bool{false, true} {
		name := "bare"
		bt := beacon.Batch{Seq: 1, Site: "chat", Client: beacon.Client{ConnType: "4g", Release: "v1"}}
		for i := range n {
			r := testRecord(byte(i))
			if typical {
				name = "typical"
				benchrec.Answer(&r, mrand.New(mrand.NewPCG(uint64(i), 1)))
			}
			bt.Records = append(bt.Records, r)
		}
		frame, err := bt.AppendBinary(nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			var memo enrich.Memo
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				sc := getScratch()
				bt, wire, _, err := sc.dec.CheckBatchWire(frame, h.limits)
				if err != nil {
					b.Fatal(err)
				}
				if s := h.batch(&sc.out, bt, wire, site, hdr, "81.2.69.160:5000", &memo, time.Now()); len(s.Records) != n {
					b.Fatal("lost records")
				}
				putScratch(sc)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*b.N), "ns/record")
		})
	}
}

// TestBadRecordLeftOut: a record whose own bytes are wrong (here a model
// that is not UTF-8, as a byte-cut string made it) is left out alone and
// counted; the batch is acknowledged and the records around it are stored,
// by WebSocket and by beacon.
func TestBadRecordLeftOut(t *testing.T) {
	f := newFixture(t, nil)
	batch := func(seq uint64) []byte {
		b := beacon.Batch{Seq: seq, Site: "chat"}
		for i := range 3 {
			b.Records = append(b.Records, testRecord(byte(i)))
		}
		b.Records[1].Model = "gpt-tesX"
		p, err := b.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Replace(p, []byte("gpt-tesX"), []byte("gpt-tes\xff"), 1)
	}
	c, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteMessage(websocket.BinaryMessage, batch(9)); err != nil {
		t.Fatal(err)
	}
	if got, want := readAck(t, c), (beacon.Ack{Seq: 9}); got != want {
		t.Fatalf("ack = %+v, want %+v", got, want)
	}
	resp := f.post(t, "/v1/beacon?site=chat", pageOrigin, batch(10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("beacon status %d, want 204", resp.StatusCode)
	}
	subs := f.sink.submitted()
	if len(subs) != 2 {
		t.Fatalf("%d batches submitted, want 2", len(subs))
	}
	for _, sub := range subs {
		if len(sub) != 2 || sub[0].StreamID[15] != 0 || sub[1].StreamID[15] != 2 || sub[1].Model != "gpt-test" {
			t.Fatalf("stored %d streams (%+v), want records 0 and 2", len(sub), sub)
		}
	}
	if got := f.rejected(ReasonRecord); got != 2 {
		t.Fatalf("rejected{record} = %v, want 2", got)
	}
	if got := f.rejected(ReasonDecodeInvalid); got != 0 {
		t.Fatalf("rejected{decode_invalid} = %v, want 0", got)
	}
}

// TestStreamsKeepTheirWire: the batches handed to the sink carry their
// records' wires, so the store can keep each record's values as they came:
// every one, copied at Submit (Batch.Streams: the frame's buffer is reused
// for the next frames), makes a batch of one that is byte for byte the
// encoder's batch of the record as sent, histograms and timeline included
// (ingest checks them but leaves them in the wire, beacon.CheckBatchWire).
func TestStreamsKeepTheirWire(t *testing.T) {
	f := newFixture(t, nil)
	c, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	client := beacon.Client{ConnType: "4g", Release: "v1"}
	sent := map[[16]byte]beacon.Record{}
	for seq := uint64(1); seq <= 3; seq++ {
		b := beacon.Batch{Seq: seq, Site: "chat", Client: client}
		for i := range 4 {
			r := testRecord(byte(4*seq) + byte(i))
			for k := range 40 {
				r.ITL.Record(float64(20_000 + 500*k))
				r.Timeline = append(r.Timeline, beacon.Stamp{AtUs: uint32(20_000 * (k + 1)), Read: uint32(k), Content: true})
			}
			sent[r.StreamID] = r
			b.Records = append(b.Records, r)
		}
		frame, err := b.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WriteMessage(websocket.BinaryMessage, frame); err != nil {
			t.Fatal(err)
		}
		readAck(t, c)
	}
	subs := f.sink.submitted()
	if len(subs) != 3 {
		t.Fatalf("%d batches submitted, want 3", len(subs))
	}
	for _, sub := range subs {
		for i := range sub {
			st := &sub[i]
			p, err := beacon.AppendRecordBatch(nil, st.Site, &client, &st.Record, st.Wire)
			if err != nil {
				t.Fatalf("stream %x: %v", st.StreamID, err)
			}
			// The frames are canonical (the encoder's): the copy is byte for
			// byte the encoder's batch of the record sent.
			want, err := (&beacon.Batch{Site: st.Site, Client: client, Records: []beacon.Record{sent[st.StreamID]}}).AppendBinary(nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p, want) {
				t.Fatalf("stream %x: batch of one differs from the encoder's", st.StreamID)
			}
		}
	}
}
