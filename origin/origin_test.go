package origin

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/itlmon/itlmon/internal/memnet"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// The tests run in testing/synctest bubbles: the servers are real
// http.Servers on an in-memory network (memnet), so the reporter's timer
// and backoff and the handlers' pauses pass on the bubble's fake clock, and
// the tests check exact times.

// startServer serves h over memnet and returns its URL, a client that
// reaches it, and a func that stops it (also run at cleanup).
func startServer(t *testing.T, h http.Handler) (url string, client *http.Client, stop func()) {
	t.Helper()
	ln := memnet.Listen()
	srv := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	tr := &http.Transport{DialContext: ln.DialContext}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			srv.Close()
			<-served
			tr.CloseIdleConnections()
		})
	}
	t.Cleanup(stop)
	return "http://origin.test", &http.Client{Transport: tr, Timeout: DefaultTimeout}, stop
}

// fakeCollector is a real HTTP server decoding what reporters post to
// /v1/origin. status, when set, answers instead of 204 (for retry tests).
type fakeCollector struct {
	url     string
	client  *http.Client // reaches the collector
	stop    func()       // takes the collector down
	mu      sync.Mutex
	batches []*beacon.OriginBatch
	posts   int
	status  []int // answers of the first posts
	got     chan beacon.Origin
}

func newFakeCollector(t *testing.T, key string) *fakeCollector {
	c := &fakeCollector{got: make(chan beacon.Origin, 1000)}
	c.url, c.client, c.stop = startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != Path || r.URL.Query().Get("site") != "chat" || r.Header.Get(HeaderKey) != key {
			http.Error(w, "bad path, site or key", http.StatusForbidden)
			return
		}
		body, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.posts++
		if len(c.status) > 0 {
			st := c.status[0]
			c.status = c.status[1:]
			c.mu.Unlock()
			http.Error(w, "injected", st)
			return
		}
		b, err := beacon.DecodeOriginBatch(body, beacon.Limits{})
		if err != nil {
			c.mu.Unlock()
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.batches = append(c.batches, b)
		c.mu.Unlock()
		for _, o := range b.Records {
			c.got <- o
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	return c
}

func (c *fakeCollector) next(t *testing.T) beacon.Origin {
	t.Helper()
	select {
	case o := <-c.got:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no origin timeline reached the collector within 10s")
		return beacon.Origin{}
	}
}

func newReporter(t *testing.T, c *fakeCollector, edit func(*Config)) *Reporter {
	t.Helper()
	cfg := Config{Collector: c.url, Client: c.client, Site: "chat", Key: "k", FlushInterval: 20 * time.Millisecond, Logf: t.Logf}
	if edit != nil {
		edit(&cfg)
	}
	rp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rp.Shutdown(context.Background()) })
	return rp
}

// serve runs h behind the middleware on a real server and returns the
// response headers and body.
func serve(t *testing.T, rp *Reporter, h http.HandlerFunc) (http.Header, string) {
	t.Helper()
	url, client, stop := startServer(t, rp.Handler(h))
	defer stop()
	resp, err := client.Get(url + "/v1/chat/completions?user=secret")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header, string(b)
}

func chatEvent(i int) string {
	return fmt.Sprintf("data: {\"choices\":[{\"delta\":{\"content\":\"tok%d \"}}]}\n\n", i)
}

const (
	tokens = 8
	every  = 15 * time.Millisecond
)

// sseHandler streams tokens chat events `every` apart, flushing each
// through flush, then [DONE].
func sseHandler(flush func(http.ResponseWriter)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Add(HeaderExpose, "X-Trace")
		for i := range tokens {
			if i > 0 {
				time.Sleep(every)
			}
			io.WriteString(w, chatEvent(i))
			flush(w)
		}
		io.WriteString(w, "data: [DONE]\n\n")
		flush(w)
	}
}

var hexID = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestSSEFlushPerToken(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flush func(http.ResponseWriter)
	}{
		{"http.Flusher", func(w http.ResponseWriter) { w.(http.Flusher).Flush() }},
		{"ResponseController", func(w http.ResponseWriter) {
			if err := http.NewResponseController(w).Flush(); err != nil {
				panic(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newFakeCollector(t, "k")
				rp := newReporter(t, c, nil)
				h, body := serve(t, rp, sseHandler(tc.flush))
				id := h.Get(HeaderStream)
				if !hexID.MatchString(id) {
					t.Fatalf("%s = %q, want 32 hex digits", HeaderStream, id)
				}
				if got, want := h.Values(HeaderExpose), []string{"X-Trace", HeaderStream}; strings.Join(got, "|") != strings.Join(want, "|") {
					t.Fatalf("%s = %q, want %q (appended)", HeaderExpose, got, want)
				}
				if !strings.HasSuffix(body, "data: [DONE]\n\n") || strings.Count(body, "data:") != tokens+1 {
					t.Fatalf("body changed by the middleware: %q", body)
				}
				o := c.next(t)
				if o.ID != id {
					t.Fatalf("record id %q, want the header's %q", o.ID, id)
				}
				if got, want := o.Route, "/v1/chat/completions"; got != want {
					t.Fatalf("Route = %q, want %q (no query)", got, want)
				}
				if o.ContentEvents != tokens || o.Events != tokens+1 || o.Flushes != tokens+1 || o.MaxEventsPerFlush != 1 {
					t.Fatalf("content %d, events %d, flushes %d, max/flush %d; want %d, %d, %d, 1",
						o.ContentEvents, o.Events, o.Flushes, o.MaxEventsPerFlush, tokens, tokens+1, tokens+1)
				}
				if got, want := meter.Format(o.Format), meter.FormatOpenAIChat; got != want {
					t.Fatalf("Format = %d, want %d", got, want)
				}
				if o.Status != uint8(meter.StatusComplete) || o.HTTPStatus != 200 {
					t.Fatalf("Status, HTTPStatus = %d, %d; want complete, 200", o.Status, o.HTTPStatus)
				}
				if len(o.EmitUs) != tokens || o.EmitsDropped != 0 || o.TTFTUs != o.EmitUs[0] {
					t.Fatalf("EmitUs = %v (dropped %d), TTFT %d", o.EmitUs, o.EmitsDropped, o.TTFTUs)
				}
				for k := 1; k < tokens; k++ { // the handler slept `every` between tokens
					if gap := time.Duration(o.EmitUs[k]-o.EmitUs[k-1]) * time.Microsecond; gap != every {
						t.Fatalf("emit gap %d = %v, want the handler's sleep %v", k, gap, every)
					}
				}
				if got, want := o.ITL.Count(), uint64(tokens-1); got != want {
					t.Fatalf("ITL.Count() = %d, want %d", got, want)
				}
			})
		})
	}
}

// A handler that never flushes: each write is an emit at its write time.
func TestNeverFlushes(t *testing.T) { synctest.Test(t, testNeverFlushes) }

func testNeverFlushes(t *testing.T) {
	c := newFakeCollector(t, "k")
	rp := newReporter(t, c, nil)
	serve(t, rp, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		for i := range 5 {
			if i > 0 {
				time.Sleep(every)
			}
			fmt.Fprintf(w, "{\"message\":{\"content\":\"t%d\"},\"done\":false}\n", i)
		}
	})
	o := c.next(t)
	if o.ContentEvents != 5 || o.Flushes != 5 || len(o.EmitUs) != 5 {
		t.Fatalf("content %d, flushes %d, emits %v; want 5, 5 (one per write), 5", o.ContentEvents, o.Flushes, o.EmitUs)
	}
	for k := 1; k < 5; k++ {
		if gap := time.Duration(o.EmitUs[k]-o.EmitUs[k-1]) * time.Microsecond; gap != every {
			t.Fatalf("emit gap %d = %v, want %v (write times, not the end)", k, gap, every)
		}
	}
}

// Writes between flushes are emitted together at the flush.
func TestEventsPerFlush(t *testing.T) { synctest.Test(t, testEventsPerFlush) }

func testEventsPerFlush(t *testing.T) {
	c := newFakeCollector(t, "k")
	rp := newReporter(t, c, nil)
	serve(t, rp, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 12 {
			io.WriteString(w, chatEvent(i))
			if i%4 == 3 {
				time.Sleep(every)
				w.(http.Flusher).Flush()
			}
		}
	})
	o := c.next(t)
	if o.ContentEvents != 12 || o.Flushes != 3 || o.MaxEventsPerFlush != 4 {
		t.Fatalf("content %d, flushes %d, max/flush %d; want 12, 3, 4", o.ContentEvents, o.Flushes, o.MaxEventsPerFlush)
	}
	for k := 1; k < 12; k++ {
		if same := o.EmitUs[k] == o.EmitUs[k-1]; same != (k%4 != 0) {
			t.Fatalf("emits %v: events of one flush must share its time, flushes differ", o.EmitUs)
		}
	}
}

func TestReusesRequestID(t *testing.T) { synctest.Test(t, testReusesRequestID) }

func testReusesRequestID(t *testing.T) {
	c := newFakeCollector(t, "k")
	rp := newReporter(t, c, nil)
	h, _ := serve(t, rp, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderRequestID, "req_8f3a")
		w.Header().Set(HeaderExpose, "X-A, X-B")
		sseHandler(func(w http.ResponseWriter) { w.(http.Flusher).Flush() })(w, r)
	})
	if got := h.Get(HeaderStream); got != "" {
		t.Fatalf("%s = %q, want none when the app sets %s", HeaderStream, got, HeaderRequestID)
	}
	if got, want := strings.Join(h.Values(HeaderExpose), "|"), "X-A, X-B|X-Trace|"+HeaderRequestID; got != want {
		t.Fatalf("%s = %q, want %q", HeaderExpose, got, want)
	}
	if o := c.next(t); o.ID != "req_8f3a" {
		t.Fatalf("record id %q, want the app's request id", o.ID)
	}
}

func TestExposeHeader(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, "X-Itlmon-Stream"},
		{[]string{"X-A"}, "X-A|X-Itlmon-Stream"},
		{[]string{"X-A, x-itlmon-stream"}, "X-A, x-itlmon-stream"},
		{[]string{"*"}, "*|X-Itlmon-Stream"},
	} {
		h := http.Header{}
		for _, v := range tc.in {
			h.Add(HeaderExpose, v)
		}
		ExposeHeader(h, HeaderStream)
		if got := strings.Join(h.Values(HeaderExpose), "|"); got != tc.want {
			t.Fatalf("ExposeHeader(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestValidID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"req_1", true}, {"", false}, {"a b", false}, {"a,b", false}, {strings.Repeat("x", MaxIDLen), true},
		{strings.Repeat("x", MaxIDLen+1), false}, {"é", false},
	} {
		if got := ValidID(tc.id); got != tc.want {
			t.Fatalf("ValidID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}

// Responses that are not streams pass through untouched and unreported.
func TestNotStreaming(t *testing.T) { synctest.Test(t, testNotStreaming) }

func testNotStreaming(t *testing.T) {
	c := newFakeCollector(t, "k")
	rp := newReporter(t, c, nil)
	h, body := serve(t, rp, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	})
	if h.Get(HeaderStream) != "" || h.Get(HeaderExpose) != "" || body != `{"ok":true}` {
		t.Fatalf("non-stream response changed: %v %q", h, body)
	}
	if err := rp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := rp.Stats(); st.Queued != 0 {
		t.Fatalf("Queued = %d, want 0", st.Queued)
	}
}

// The AI SDK's data stream (text/plain, told by its header) is measured
// by default: its parts are its events, its text parts the content, each
// emitted when it was written.
func TestDataStream(t *testing.T) { synctest.Test(t, testDataStream) }

func testDataStream(t *testing.T) {
	c := newFakeCollector(t, "k")
	rp := newReporter(t, c, nil)
	h, body := serve(t, rp, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set(HeaderDataStream, "v1")
		io.WriteString(w, `f:{"messageId":"msg-1"}`+"\n")
		for i := range 4 {
			time.Sleep(every)
			fmt.Fprintf(w, "0:\"t%d \"\n", i)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, `d:{"finishReason":"stop","usage":{"promptTokens":3,"completionTokens":5}}`+"\n")
	})
	if !hexID.MatchString(h.Get(HeaderStream)) || !strings.HasPrefix(body, `f:{"messageId":"msg-1"}`) {
		t.Fatalf("%s = %q, body %q: want a measured stream, its body as written", HeaderStream, h.Get(HeaderStream), body)
	}
	o := c.next(t)
	if got, want := meter.Format(o.Format), meter.FormatVercelAIData; got != want || o.ContentEvents != 4 || o.Events != 6 ||
		len(o.EmitUs) != 4 || o.Status != uint8(meter.StatusComplete) {
		t.Fatalf("format %v, %d content events of %d, emits %v, status %d; want %v, 4 of 6, 4, complete",
			got, o.ContentEvents, o.Events, o.EmitUs, o.Status, want)
	}
	for k := 1; k < 4; k++ { // the handler slept `every` between text parts
		if gap := time.Duration(o.EmitUs[k]-o.EmitUs[k-1]) * time.Microsecond; gap != every {
			t.Fatalf("emit gap %d = %v, want the handler's sleep %v", k, gap, every)
		}
	}
}

// The wrapper keeps the ResponseWriter's optional interfaces working.
func TestUnwrapAndHijack(t *testing.T) { synctest.Test(t, testUnwrapAndHijack) }

func testUnwrapAndHijack(t *testing.T) {
	c := newFakeCollector(t, "k")
	rp := newReporter(t, c, nil)
	var deadlineErr, hijackErr error
	serve(t, rp, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		deadlineErr = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute))
		var conn io.Closer
		var rw *bufio.ReadWriter
		conn, rw, hijackErr = http.NewResponseController(w).Hijack()
		if hijackErr == nil {
			rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			rw.Flush()
			conn.Close()
		}
	})
	if deadlineErr != nil {
		t.Fatalf("SetWriteDeadline through the wrapper: %v", deadlineErr)
	}
	if hijackErr != nil {
		t.Fatalf("Hijack through the wrapper: %v", hijackErr)
	}
	if err := rp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := rp.Stats(); st.Queued != 0 {
		t.Fatalf("a hijacked connection was reported: Queued = %d", st.Queued)
	}
}

func TestClientAbort(t *testing.T) { synctest.Test(t, testClientAbort) }

func testClientAbort(t *testing.T) {
	c := newFakeCollector(t, "k")
	rp := newReporter(t, c, nil)
	started := make(chan struct{})
	url, client, _ := startServer(t, rp.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, chatEvent(0))
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
	})))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	resp.Body.Close()
	if o := c.next(t); o.Status != uint8(meter.StatusAborted) || o.ContentEvents != 1 {
		t.Fatalf("Status %d, content %d; want aborted, 1", o.Status, o.ContentEvents)
	}
}

func TestNewErrors(t *testing.T) {
	for _, cfg := range []Config{{}, {Collector: "http://x"}, {Collector: "ftp://x", Site: "s"}, {Collector: "::", Site: "s"}} {
		if _, err := New(cfg); err == nil {
			t.Fatalf("New(%+v): no error", cfg)
		}
	}
}

// Beyond MaxEmits the emit list stops: no later (stall neighbourhood)
// stamps that would make a gap between non-adjacent events.
func TestMaxEmits(t *testing.T) { synctest.Test(t, testMaxEmits) }

func testMaxEmits(t *testing.T) {
	c := newFakeCollector(t, "k")
	rp := newReporter(t, c, func(cfg *Config) { cfg.MaxEmits = 10 })
	serve(t, rp, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 30 {
			if i == 20 {
				time.Sleep(time.Duration(meter.StallThreshold) + 10*time.Millisecond)
			}
			io.WriteString(w, chatEvent(i))
			w.(http.Flusher).Flush()
		}
	})
	o := c.next(t)
	if len(o.EmitUs) != 10 || o.EmitsDropped != 20 || o.ContentEvents != 30 {
		t.Fatalf("emits %d, dropped %d, content %d; want 10, 20, 30", len(o.EmitUs), o.EmitsDropped, o.ContentEvents)
	}
	for k := 1; k < len(o.EmitUs); k++ {
		if gap := o.EmitUs[k] - o.EmitUs[k-1]; gap > uint32(meter.StallThreshold/meter.Microsecond) {
			t.Fatalf("emit gap %d = %d µs: the list is not the contiguous first 10", k, gap)
		}
	}
}

// TestRoutePaths: the stored route loses its ids by the shared rule
// (beacon.RedactPath) unless Config.Paths says otherwise, and never has the
// query.
func TestRoutePaths(t *testing.T) {
	const path = "/v1/threads/550e8400-e29b-41d4-a716-446655440000/runs/12345/stream"
	for _, tc := range []struct {
		name  string
		paths func(string) string
		want  string
	}{
		{"default", nil, "/v1/threads/:id/runs/:id/stream"},
		{"raw", RawPaths, path},
		{"function", func(p string) string { return strings.ToUpper(p[:3]) }, "/V1"},
		{"panicking function", func(string) string { panic("app bug") }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newFakeCollector(t, "k")
				rp := newReporter(t, c, func(cfg *Config) { cfg.Paths = tc.paths })
				url, client, _ := startServer(t, rp.Handler(sseHandler(func(w http.ResponseWriter) { w.(http.Flusher).Flush() })))
				resp, err := client.Get(url + path + "?conversation=secret")
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if got := c.next(t).Route; got != tc.want {
					t.Fatalf("Route = %q, want %q", got, tc.want)
				}
			})
		})
	}
}
