package e2e

// Issue 5's scenarios: where did the stutter come from. Each scenario streams
// a known cadence from an origin wrapped in collector/origin's middleware,
// through what the scenario puts in between (nothing, Debian nginx with
// buffering and gzip, nginx told not to buffer, the jitter proxy, an origin
// that pauses), and checks what the client measured, what the origin
// reported, and how collector/join attributes the difference.
//
// TestAttributionHTTP reads the streams with a Go client feeding wasm/meter
// (the browser module's measuring code), so it needs no browser. The browser
// scenarios (TestAttributionBrowser) run the same cases in headless Chromium
// through the real collector and ClickHouse. Both print a table of injected
// vs measured (go test -v, and `make bench`).

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector/join"
	"github.com/itlmon/itlmon/collector/origin"
	"github.com/itlmon/itlmon/e2e/jitterproxy"
	"github.com/itlmon/itlmon/e2e/nginx"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// The origin's cadence in every scenario.
const (
	attrTokens  = 40
	attrCadence = 20 * time.Millisecond
	attrPause   = 600 * time.Millisecond // scenario 6, before token attrTokens/2
	attrSite    = "attr"
	attrKey     = "attr-origin-key"
	// attrAttempts: tries of a scenario whose origin stalled on its own.
	attrAttempts = 3
)

// attrStreamHandler streams attrTokens OpenAI chat chunks attrCadence apart,
// flushing each. Query: pause=MS before the middle token; accel=no sends
// X-Accel-Buffering: no.
func attrStreamHandler(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	pause, _ := strconv.Atoi(q.Get("pause"))
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	if q.Get("accel") == "no" {
		w.Header().Set("X-Accel-Buffering", "no")
	}
	rc := http.NewResponseController(w)
	io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n")
	rc.Flush()
	for i := range attrTokens {
		d := attrCadence
		if i == attrTokens/2 && pause > 0 {
			d = time.Duration(pause) * time.Millisecond
		}
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"token%d \"}}]}\n\n", i)
		rc.Flush()
	}
	io.WriteString(w, "data: [DONE]\n\n")
	rc.Flush()
}

// originSink receives the origin reporter's batches (a stand-in for the
// collector's /v1/origin in the HTTP-level test) and hands out timelines by id.
type originSink struct {
	srv  *httptest.Server
	mu   sync.Mutex
	byID map[string]beacon.Origin
	cond *sync.Cond
}

func startOriginSink(t *testing.T) *originSink {
	s := &originSink{byID: map[string]beacon.Origin{}}
	s.cond = sync.NewCond(&s.mu)
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(origin.HeaderKey) != attrKey {
			http.Error(w, "bad key", http.StatusForbidden)
			return
		}
		body, _ := io.ReadAll(r.Body)
		b, err := beacon.DecodeOriginBatch(body, beacon.Limits{})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		for _, o := range b.Records {
			s.byID[o.ID] = o
		}
		s.cond.Broadcast()
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *originSink) wait(t *testing.T, id string) beacon.Origin {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	go func() { time.Sleep(10 * time.Second); s.cond.Broadcast() }()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if o, ok := s.byID[id]; ok {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("origin timeline %q not reported within 10s", id)
		}
		s.cond.Wait()
	}
}

// startAttrOrigin serves attrStreamHandler behind the middleware, reporting
// to collectorURL.
func startAttrOrigin(t *testing.T, collectorURL string) (url string, rp *origin.Reporter) {
	t.Helper()
	rp, err := origin.New(origin.Config{Collector: collectorURL, Site: attrSite, Key: attrKey,
		FlushInterval: 50 * time.Millisecond, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rp.Shutdown(ctx)
	})
	mux := http.NewServeMux()
	mux.Handle("/v1/chat/completions", rp.Handler(http.HandlerFunc(attrStreamHandler)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL, rp
}

// clientRead fetches url and measures it as the browser module does: each
// read stamped on arrival (since t0, just before the request) into a Meter.
// Go's transport asks for gzip and decompresses, as a browser does.
func clientRead(t *testing.T, url string) (beacon.Record, string) {
	t.Helper()
	t0 := time.Now()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m := meter.New(meter.Options{ContentType: resp.Header.Get("Content-Type")})
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		at := time.Since(t0)
		if n > 0 {
			m.Feed(buf[:n], at)
		}
		if err == io.EOF {
			m.End(at, meter.StatusComplete, resp.StatusCode)
			break
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	}
	s := m.Summary()
	id := resp.Header.Get(origin.HeaderStream)
	if id == "" {
		id = resp.Header.Get(origin.HeaderRequestID)
	}
	return recordOf(&s, id), id
}

// recordOf is the browser module's summary-to-record copy (wasm/browser
// fillRecord), for the Go client.
func recordOf(s *meter.Summary, id string) beacon.Record {
	us := func(d time.Duration) uint32 {
		if d < 0 {
			return beacon.NoTime
		}
		return uint32(d / time.Microsecond)
	}
	r := beacon.Record{OriginID: id, Format: uint8(s.Format), Status: uint8(s.Status), HTTPStatus: uint16(s.HTTPStatus),
		TTFBUs: us(s.TTFB), TTFCUs: us(s.TTFC), TTFTUs: us(s.TTFT), DurationUs: us(s.Duration),
		Events: uint32(s.Events), ContentEvents: uint32(s.ContentEvents), Tokens: uint32(s.Tokens), Reads: uint32(s.Reads),
		Bytes: uint64(s.Bytes), GapP50Us: us(s.GapP50), GapP95Us: us(s.GapP95), GapP99Us: us(s.GapP99), GapMaxUs: us(s.GapMax),
		TPOTUs: us(s.TPOT), TokensPerSec: float32(s.TokensPerSec), Stalls: uint32(s.Stalls), StalledUs: uint64(s.StalledFor / time.Microsecond),
		Jank: float32(s.Jank), Smooth: s.Smooth, EventsPerRead: float32(s.EventsPerRead), MaxEventsPerRead: uint32(s.MaxEventsPerRead),
		BytesPerRead: float32(s.BytesPerRead), SubFloorShare: float32(s.SubFloorShare), TTFTCause: uint8(s.TTFTCause),
		ITL: s.ITL, TimelineDropped: uint32(s.TimelineDropped)}
	for i := range meter.NumCauses {
		r.StallsByCause[i] = uint32(s.StallsByCause[i])
		r.StalledByCause[i] = uint64(s.StalledByCause[i] / time.Microsecond)
	}
	for _, st := range s.StallList {
		r.StallList = append(r.StallList, beacon.Stall{StartUs: us(st.Start), EndUs: us(st.End), Cause: uint8(st.Cause), NextReadEvents: st.NextReadEvents})
	}
	for _, st := range s.Timeline {
		r.Timeline = append(r.Timeline, beacon.Stamp{AtUs: us(st.At), Read: st.Read, Content: st.Content})
	}
	return r
}

// attrRow is one line of the injected-vs-measured table.
type attrRow struct {
	name, injected                    string
	clientTTFT, originTTFT, added     time.Duration
	clientP50, clientP99, originP50   time.Duration
	eventsPerRead, eventsPerFlush     float64
	reads, stalls, subFloorPct        int
	byCause                           [meter.NumCauses]uint32
	clientTTFTCause, refinedTTFTCause meter.Cause
	clientCauses                      [meter.NumCauses]uint32
}

var causeNames = [meter.NumCauses]string{"-", "unknown", "network", "page", "origin"}

func usDur(us uint32) time.Duration {
	if us == beacon.NoTime {
		return -1
	}
	return time.Duration(us) * time.Microsecond
}

func (r attrRow) String() string {
	var causes []string
	for c := 1; c < meter.NumCauses; c++ {
		if r.byCause[c] > 0 {
			causes = append(causes, fmt.Sprintf("%s:%d", causeNames[c], r.byCause[c]))
		}
	}
	var client []string
	for c := 1; c < meter.NumCauses; c++ {
		if r.clientCauses[c] > 0 {
			client = append(client, fmt.Sprintf("%s:%d", causeNames[c], r.clientCauses[c]))
		}
	}
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) }
	return fmt.Sprintf("%-22s %-34s %8s %8s %8s %7s %7s %7s %6.1f %6.1f %5d %3d%% %6d  %-16s %-16s %s→%s",
		r.name, r.injected, ms(r.clientTTFT), ms(r.originTTFT), ms(r.added), ms(r.clientP50), ms(r.clientP99), ms(r.originP50),
		r.eventsPerRead, r.eventsPerFlush, r.reads, r.subFloorPct, r.stalls, strings.Join(client, ","), strings.Join(causes, ","),
		causeNames[r.clientTTFTCause], causeNames[r.refinedTTFTCause])
}

const attrHeader = "scenario               injected                           TTFTms  oTTFTms addTTFT  p50ms   p99ms  oP50ms  ev/rd ev/fl reads sub<  stalls  client-causes    joined-causes    TTFT cause"

func attrTable(t *testing.T, title string, rows []attrRow) {
	var b strings.Builder
	b.WriteString("attribution scenario table (" + title + "): injected vs measured\n")
	b.WriteString(attrHeader + "\n")
	for _, r := range rows {
		b.WriteString(r.String() + "\n")
	}
	t.Log(b.String())
}

func newAttrRow(name, injected string, c *beacon.Record, o *beacon.Origin, r *join.Result) attrRow {
	row := attrRow{name: name, injected: injected,
		clientTTFT: usDur(c.TTFTUs), originTTFT: usDur(r.OriginTTFTUs), added: time.Duration(r.AddedTTFTUs) * time.Microsecond,
		clientP50: usDur(c.GapP50Us), clientP99: usDur(c.GapP99Us), originP50: usDur(r.OriginGapP50Us),
		eventsPerRead: float64(c.EventsPerRead), eventsPerFlush: float64(r.OriginEventsPerFlush),
		reads: int(c.Reads), stalls: int(c.Stalls), subFloorPct: int(100*c.SubFloorShare + 0.5),
		byCause: r.StallsByCause, clientCauses: c.StallsByCause,
		clientTTFTCause: meter.Cause(c.TTFTCause), refinedTTFTCause: meter.Cause(r.TTFTCause)}
	return row
}

// TestAttributionHTTP runs scenarios 1, 2, 3, 4 and 6 with a Go client (5
// needs a page's main thread: TestAttributionBrowser).
func TestAttributionHTTP(t *testing.T) {
	sink := startOriginSink(t)
	originURL, _ := startAttrOrigin(t, sink.srv.URL)
	upstream := strings.TrimPrefix(originURL, "http://")
	var rows []attrRow
	t.Cleanup(func() { attrTable(t, "Go client + wasm/meter + collector/join", rows) })

	type check func(t *testing.T, c *beacon.Record, o *beacon.Origin, r *join.Result)
	for _, sc := range []struct {
		name, injected string
		via            func(t *testing.T) string // base URL the client fetches through
		query          string
		check          check
	}{
		{"1 direct", "nothing", func(*testing.T) string { return originURL }, "", func(t *testing.T, c *beacon.Record, o *beacon.Origin, r *join.Result) {
			wantNoStalls(t, c, r)
			if r.AddedTTFTUs > 100_000 || r.AddedTTFTUs < 0 {
				t.Errorf("added TTFT %d µs, want near zero (0..100 ms)", r.AddedTTFTUs)
			}
			if d := r.AddedP50Us; d > 5_000 || d < -5_000 {
				t.Errorf("added ITL p50 %d µs, want near zero (within 5 ms)", d)
			}
		}},
		{"2 nginx buffer+gzip", "proxy_buffering on; gzip on", func(t *testing.T) string {
			return nginx.Start(t, nginx.Options{Upstream: upstream, Buffering: true, Gzip: true}).URL()
		}, "", func(t *testing.T, c *beacon.Record, o *beacon.Origin, r *join.Result) {
			wantOriginSmooth(t, o, r)
			if c.EventsPerRead < 10 || c.GapP50Us > 1000 {
				t.Errorf("events/read %.1f, ITL p50 %d µs; want re-chunked (>= 10, < 1 ms)", c.EventsPerRead, c.GapP50Us)
			}
			if minTTFT := uint32(0.8 * float64(o.DurationUs)); c.TTFTUs < minTTFT {
				t.Errorf("client TTFT %d µs, want near the stream's duration %d µs", c.TTFTUs, o.DurationUs)
			}
			if meter.Cause(r.TTFTCause) != meter.CauseNetwork {
				t.Errorf("TTFT cause %s, want network", causeNames[r.TTFTCause])
			}
		}},
		{"3 nginx accel=no", "as 2, X-Accel-Buffering: no", func(t *testing.T) string {
			return nginx.Start(t, nginx.Options{Upstream: upstream, Buffering: true, Gzip: true}).URL()
		}, "accel=no", func(t *testing.T, c *beacon.Record, o *beacon.Origin, r *join.Result) {
			wantOriginSmooth(t, o, r)
			wantNoStalls(t, c, r)
			if c.EventsPerRead > 1.5 || c.GapP50Us < uint32(attrCadence/time.Microsecond/2) {
				t.Errorf("events/read %.2f, ITL p50 %d µs; want streamed (<= 1.5, about %v)", c.EventsPerRead, c.GapP50Us, attrCadence)
			}
		}},
		{"4 jitter proxy", "hold 10% of reads 250-450ms, seed 5", func(t *testing.T) string {
			p, err := jitterproxy.Start(jitterproxy.Config{Upstream: upstream, Seed: 5,
				Delay: jitterproxy.Spikes(0.1, 250*time.Millisecond, 450*time.Millisecond)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			return p.URL()
		}, "", func(t *testing.T, c *beacon.Record, o *beacon.Origin, r *join.Result) {
			wantOriginSmooth(t, o, r)
			if c.Stalls == 0 || c.MaxEventsPerRead < 2 || c.SubFloorShare == 0 {
				t.Errorf("stalls %d, max events/read %d, sub-floor share %.2f; want bursts and sub-floor gaps", c.Stalls, c.MaxEventsPerRead, c.SubFloorShare)
			}
			if r.StallsByCause[meter.CauseNetwork] != c.Stalls {
				t.Errorf("stalls by cause %v, want all %d network", r.StallsByCause, c.Stalls)
			}
		}},
		{"6 origin pause", "origin sleeps 600ms mid-stream", func(*testing.T) string { return originURL }, "pause=600", func(t *testing.T, c *beacon.Record, o *beacon.Origin, r *join.Result) {
			if c.Stalls != 1 || r.StallsByCause[meter.CauseOrigin] != 1 {
				t.Errorf("client stalls %d, by cause %v; want exactly one, origin", c.Stalls, r.StallsByCause)
			}
			if len(c.StallList) == 1 {
				if d := usDur(c.StallList[0].EndUs - c.StallList[0].StartUs); d < attrPause || d > attrPause+150*time.Millisecond {
					t.Errorf("stall of %v, want about %v", d, attrPause)
				}
			}
		}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			base := sc.via(t)
			wantOriginStalls := uint32(0)
			if strings.Contains(sc.query, "pause=") {
				wantOriginStalls = 1
			}
			for attempt := 1; ; attempt++ {
				c, id := clientRead(t, base+"/v1/chat/completions?"+sc.query)
				if id == "" {
					t.Fatal("no stream id header reached the client")
				}
				o := sink.wait(t, id)
				if c.ContentEvents != attrTokens || o.ContentEvents != attrTokens {
					t.Fatalf("content events client %d, origin %d; want %d", c.ContentEvents, o.ContentEvents, attrTokens)
				}
				r := join.Attribute(&c, &o)
				// The origin's own timeline is the ground truth of what it
				// emitted: when it stalled where the scenario injected
				// nothing, the machine starved it (2 shared cores); run the
				// scenario again rather than judge the path on that run.
				if r.OriginStalls != wantOriginStalls && attempt < attrAttempts {
					t.Logf("attempt %d: the origin itself stalled %d times (machine load), again", attempt, r.OriginStalls)
					continue
				}
				rows = append(rows, newAttrRow(sc.name, sc.injected, &c, &o, &r))
				sc.check(t, &c, &o, &r)
				return
			}
		})
	}
}

func wantNoStalls(t *testing.T, c *beacon.Record, r *join.Result) {
	t.Helper()
	if c.Stalls != 0 {
		t.Errorf("client stalls %d (%v), want none", c.Stalls, r.StallsByCause)
	}
}

func wantOriginSmooth(t *testing.T, o *beacon.Origin, r *join.Result) {
	t.Helper()
	if r.OriginStalls != 0 || r.OriginEventsPerFlush > 1.01 || r.OriginGapP50Us < uint32(attrCadence/time.Microsecond) {
		t.Errorf("origin stalls %d, events/flush %.2f, p50 %d µs; want smooth at %v", r.OriginStalls, r.OriginEventsPerFlush, r.OriginGapP50Us, attrCadence)
	}
}
