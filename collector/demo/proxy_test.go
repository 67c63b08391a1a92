package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// flushRecorder records what a handler wrote between its flushes.
type flushRecorder struct {
	header   http.Header
	status   int
	pending  bytes.Buffer
	segments [][]byte
}

func (r *flushRecorder) Header() http.Header { return r.header }
func (r *flushRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *flushRecorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.pending.Write(p)
}
func (r *flushRecorder) Flush() {
	if r.pending.Len() > 0 {
		r.segments = append(r.segments, bytes.Clone(r.pending.Bytes()))
		r.pending.Reset()
	}
}

// originSink is a collector's POST /v1/origin that keeps the timelines.
type originSink struct {
	mu   sync.Mutex
	recs []beacon.Origin
}

func (s *originSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b, err := beacon.DecodeOriginBatch(body, beacon.DefaultLimits)
	if err != nil || r.Header.Get(origin.HeaderKey) != "k" || r.URL.Query().Get("site") != "demo" {
		http.Error(w, "bad batch", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.recs = append(s.recs, b.Records...)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// TestProxyBuffers: the demo endpoints inside the real origin middleware,
// behind Proxy: the page gets the origin's exact bytes, passed on only in
// whole buffers (the rest at the end), with the stream id exposed to the
// page's origin; the origin's timeline shows one content event per flush
// (none of its gaps zero-length), as the origin emitted them.
func TestProxyBuffers(t *testing.T) {
	sink := &originSink{}
	col := httptest.NewServer(sink)
	defer col.Close()
	rep, err := origin.New(origin.Config{Collector: col.URL, Site: "demo", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(Handler(Options{Origin: rep.Handler}))
	defer up.Close()
	const page = "http://page.example"
	proxy := Proxy(ProxyConfig{Upstream: up.URL, Origins: []string{page}})

	const size = 512
	req := httptest.NewRequest("POST", "/demo/v1/chat/completions?buffer=512", strings.NewReader(`{"model":"x","tokens":40,"interval_ms":1}`))
	req.Header.Set("Origin", page)
	req.Header.Set("Content-Type", "application/json")
	rec := &flushRecorder{header: http.Header{}}
	proxy.ServeHTTP(rec, req)
	rec.Flush()

	p := DefaultParams()
	p.Model, p.Tokens = "x", 40
	if got := bytes.Join(rec.segments, nil); !bytes.Equal(got, p.Body()) {
		t.Fatalf("body through the proxy differs from the origin's:\n%s\nwant\n%s", got, p.Body())
	}
	if len(rec.segments) < 3 {
		t.Fatalf("%d flushed segments, want several buffers", len(rec.segments))
	}
	for i, s := range rec.segments[:len(rec.segments)-1] {
		if len(s)%size != 0 {
			t.Errorf("segment %d: %d bytes, want whole buffers of %d", i, len(s), size)
		}
	}
	id := rec.header.Get(origin.HeaderStream)
	if rec.status != 200 || id == "" || rec.header.Get("Access-Control-Allow-Origin") != page ||
		!strings.Contains(rec.header.Get("Access-Control-Expose-Headers"), origin.HeaderStream) {
		t.Errorf("status %d, headers %v: want 200, the stream id, exposed to %s", rec.status, rec.header, page)
	}

	if err := rep.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.recs) != 1 || sink.recs[0].ID != id {
		t.Fatalf("origin timelines %+v, want the stream %s's", sink.recs, id)
	}
	o := sink.recs[0]
	if o.ContentEvents != 40 || o.ITL.Count() != 39 || o.ITL.ZeroCount() != 0 || o.Route != "/demo/v1/chat/completions" {
		t.Errorf("origin timeline: %d content events, %d gaps (%d zero-length), route %q; want 40, 39 (0), the demo path",
			o.ContentEvents, o.ITL.Count(), o.ITL.ZeroCount(), o.Route)
	}
}

// TestProxyRefuses: CORS for the listed origins only; only the demo's
// streaming paths; a bad buffer size is the request's error.
func TestProxyRefuses(t *testing.T) {
	up := httptest.NewServer(Handler(Options{}))
	defer up.Close()
	proxy := Proxy(ProxyConfig{Upstream: up.URL, Origins: []string{"http://ok.example"}})
	do := func(method, target, from string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, target, nil)
		if from != "" {
			req.Header.Set("Origin", from)
			req.Header.Set("Access-Control-Request-Method", "POST")
		}
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, req)
		return rec
	}
	if rec := do("OPTIONS", "/demo/v1/messages", "http://ok.example"); rec.Code != 204 || rec.Header().Get("Access-Control-Allow-Origin") != "http://ok.example" ||
		!strings.Contains(rec.Header().Get("Access-Control-Allow-Headers"), "Content-Type") {
		t.Errorf("preflight from a listed origin: %d %v", rec.Code, rec.Header())
	}
	if rec := do("OPTIONS", "/demo/v1/messages", "http://other.example"); rec.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from another origin allowed: %v", rec.Header())
	}
	if rec := do("GET", "/dashboard/", ""); rec.Code != 404 {
		t.Errorf("GET /dashboard/ through the proxy = %d, want 404", rec.Code)
	}
	if rec := do("GET", "/demo/v1/chat/completions?buffer=0", ""); rec.Code != 400 {
		t.Errorf("buffer=0 = %d, want 400", rec.Code)
	}
	if rec := do("GET", "/demo/api/chat?tokens=2&interval_ms=0&buffer=7", ""); rec.Code != 200 || rec.Header().Get("Content-Type") != "application/x-ndjson" {
		t.Errorf("NDJSON through the proxy: %d %v", rec.Code, rec.Header())
	}
}

// TestConfig: the page learns the proxy's URL on the host it was loaded
// from.
func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		host string
		port int
		want string
	}{
		{"127.0.0.1:8080", 4321, "http://127.0.0.1:4321"},
		{"[::1]:8080", 4321, "http://[::1]:4321"},
		{"chat.example", 4321, "http://chat.example:4321"},
		{"127.0.0.1:8080", 0, ""},
	} {
		req := httptest.NewRequest("GET", ConfigPath, nil)
		req.Host = tc.host
		rec := httptest.NewRecorder()
		Handler(Options{ProxyPort: tc.port}).ServeHTTP(rec, req)
		var got struct{ Proxy string }
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Proxy != tc.want {
			t.Errorf("host %s, port %d: %s (%v), want proxy %q", tc.host, tc.port, rec.Body, err, tc.want)
		}
	}
}
