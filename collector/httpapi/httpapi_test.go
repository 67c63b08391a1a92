package httpapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/andybalholm/brotli"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

type fakeReader struct {
	got     collector.StreamFilter
	streams []collector.Stream
	err     error
}

func (f *fakeReader) LatestStreams(_ context.Context, flt collector.StreamFilter) ([]collector.Stream, error) {
	f.got = flt
	return f.streams, f.err
}

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func mustNew(t *testing.T, cfg Config) http.Handler {
	t.Helper()
	cfg.Now = func() time.Time { return now }
	mux, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return mux
}

func get(t *testing.T, h http.Handler, url string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestStreamsParams(t *testing.T) {
	fr := &fakeReader{}
	h := mustNew(t, Config{Streams: fr, HasSite: func(k string) bool { return k == "demo" }})
	tests := []struct {
		url       string
		status    int
		errSubstr string
	}{
		{"/api/streams", 400, "missing site"},
		{"/api/streams?site=nope", 404, "unknown site"},
		{"/api/streams?site=demo&since=abc", 400, "bad since"},
		{"/api/streams?site=demo&since=-5m", 400, "bad since"},
		{"/api/streams?site=demo&since=400d", 400, "bad since"},
		{"/api/streams?site=demo&limit=0", 400, "bad limit"},
		{"/api/streams?site=demo&limit=x", 400, "bad limit"},
		{"/api/streams?site=demo", 200, ""},
	}
	for _, tt := range tests {
		rec := get(t, h, tt.url)
		if got, want := rec.Code, tt.status; got != want {
			t.Errorf("%s: status = %d, want %d (%s)", tt.url, got, want, rec.Body)
		}
		if tt.errSubstr != "" && !strings.Contains(rec.Body.String(), tt.errSubstr) {
			t.Errorf("%s: body %q does not say %q", tt.url, rec.Body, tt.errSubstr)
		}
	}
}

func TestStreamsFilterAndBody(t *testing.T) {
	s := collector.Stream{Site: "demo", Country: "DE", Browser: "Chrome", BrowserMajor: 142, ReceivedAt: now}
	s.StreamID[0] = 0xab
	s.TTFBUs, s.TTFCUs, s.TTFTUs, s.DurationUs = 1500, 2000, beacon.NoTime, 90000
	s.Model = "gpt-x"
	s.Format, s.Status, s.End, s.HeadersUs = uint8(meter.FormatOpenAIChat), uint8(meter.StatusComplete), uint8(meter.EndClosedAfterEnd), 1200
	s.TTFTCause = uint8(meter.CauseNetwork)
	s.Stalls, s.StalledUs = 2, 550_500
	s.StallsByCause[meter.CauseNetwork], s.StalledByCause[meter.CauseNetwork] = 1, 250_000
	s.StallsByCause[meter.CausePage], s.StalledByCause[meter.CausePage] = 1, 300_500
	s.StallList = []beacon.Stall{{StartUs: 1_000_000, EndUs: 1_250_000, Cause: uint8(meter.CauseNetwork), NextReadEvents: 4},
		{StartUs: 2_000_000, EndUs: 2_300_500, Cause: uint8(meter.CausePage), NextReadEvents: 1}}
	fr := &fakeReader{streams: []collector.Stream{s}}
	h := mustNew(t, Config{Streams: fr})
	rec := get(t, h, "/api/streams?site=demo&since=10m&limit=5000")
	if rec.Code != 200 {
		t.Fatalf("status = %d: %s", rec.Code, rec.Body)
	}
	if got, want := fr.got, (collector.StreamFilter{Site: "demo", Since: now.Add(-10 * time.Minute), Limit: MaxStreamsLimit}); got != want {
		t.Fatalf("filter = %+v, want %+v", got, want)
	}
	var body struct {
		Count   int
		Streams []map[string]any
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if got, want := body.Count, 1; got != want {
		t.Fatalf("count = %d, want %d", got, want)
	}
	st := body.Streams[0]
	for k, want := range map[string]any{"stream_id": "ab000000000000000000000000000000", "ttfb_ms": 1.5,
		"ttft_ms": nil, "duration_ms": 90.0, "country": "DE", "browser": "Chrome", "model": "gpt-x",
		"format": "openai_chat", "status": "complete", "end": "closed_after_end", "headers_ms": 1.2,
		"before_headers": false, "ttft_cause": "network"} {
		if got := st[k]; got != want {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
	for k, want := range map[string]string{
		"stalls_by_cause":     `{"network":1,"origin":0,"page":1,"unknown":0}`,
		"stalled_ms_by_cause": `{"network":250,"origin":0,"page":300.5,"unknown":0}`,
		"stall_list": `[{"cause":"network","end_ms":1250,"next_read_events":4,"start_ms":1000},` +
			`{"cause":"page","end_ms":2300.5,"next_read_events":1,"start_ms":2000}]`,
	} {
		if got, _ := json.Marshal(st[k]); string(got) != want {
			t.Errorf("%s = %s, want %s", k, got, want)
		}
	}
}

// A request the user gave up on before the response headers: names, the
// time waited, and before_headers.
func TestStreamsBeforeHeaders(t *testing.T) {
	s := collector.Stream{Site: "demo", ReceivedAt: now}
	s.TTFBUs, s.TTFCUs, s.TTFTUs, s.HeadersUs, s.DurationUs = beacon.NoTime, beacon.NoTime, beacon.NoTime, beacon.NoTime, 4_250_000
	s.Status, s.End, s.Format = uint8(meter.StatusAborted), uint8(meter.EndAbort), 200
	h := mustNew(t, Config{Streams: &fakeReader{streams: []collector.Stream{s}}})
	rec := get(t, h, "/api/streams?site=demo")
	var body struct{ Streams []map[string]any }
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || len(body.Streams) != 1 {
		t.Fatalf("body %s: %v", rec.Body, err)
	}
	for k, want := range map[string]any{"status": "aborted", "end": "abort", "headers_ms": nil, "duration_ms": 4250.0,
		"before_headers": true, "http_status": 0.0, "format": "unknown", "ttft_cause": "none"} {
		if got := body.Streams[0][k]; got != want {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
}

func TestStreamsStoreError(t *testing.T) {
	h := mustNew(t, Config{Streams: &fakeReader{err: errors.New("connection refused")}})
	if got, want := get(t, h, "/api/streams?site=demo").Code, 503; got != want {
		t.Fatalf("status = %d, want %d", got, want)
	}
}

func TestHealthReady(t *testing.T) {
	var readyErr error
	h := mustNew(t, Config{Ready: func(context.Context) error { return readyErr }})
	if got := get(t, h, "/healthz").Code; got != 200 {
		t.Fatalf("healthz = %d", got)
	}
	if got := get(t, h, "/readyz").Code; got != 200 {
		t.Fatalf("readyz = %d", got)
	}
	if got := get(t, h, "/api/health").Code; got != 200 {
		t.Fatalf("/api/health = %d", got)
	}
	readyErr = errors.New("clickhouse: dial tcp 10.1.2.3:9000: refused")
	// Public: ready or not, never the reason (it names internal hosts).
	rec := get(t, h, "/readyz")
	if rec.Code != 503 || rec.Body.String() != "not ready\n" {
		t.Fatalf("readyz = %d %q, want 503 \"not ready\" alone", rec.Code, rec.Body)
	}
	// The read side says why.
	rec = get(t, h, "/api/health")
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "10.1.2.3:9000") {
		t.Fatalf("/api/health = %d %q, want 503 with the cause", rec.Code, rec.Body)
	}
}

func TestAssets(t *testing.T) {
	wasm := []byte("\x00asm\x01\x00\x00\x00 module bytes")
	dist := fstest.MapFS{
		"itl.wasm":     {Data: wasm},
		"itl.wasm.br":  {Data: []byte("brotli bytes")},
		"wasm_exec.js": {Data: []byte("// wasm_exec")},
	}
	static := fstest.MapFS{
		"itl.js":        {Data: []byte("// loader")},
		"itl-module.js": {Data: []byte("// module host")},
		"itl-worker.js": {Data: []byte("// module worker")},
		"index.html":    {Data: []byte("<h1>itlmon</h1>")},
	}
	demo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("demo " + r.Method)) })
	h := mustNew(t, Config{Dist: dist, Static: static, Demo: demo})
	if rec := get(t, h, "/demo/x"); rec.Body.String() != "demo GET" {
		t.Errorf("/demo/x = %q, want the demo handler", rec.Body)
	}
	req := httptest.NewRequest("POST", "/demo/v1/chat/completions", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Body.String() != "demo POST" {
		t.Errorf("POST /demo/... = %q, want the demo handler", rec.Body)
	}
	req = httptest.NewRequest("POST", "/index.html", nil)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 405 {
		t.Errorf("POST /index.html = %d, want 405", rec.Code)
	}

	tests := []struct {
		path, accept, wantEnc, wantType string
	}{
		{"/itl.wasm", "gzip, deflate, br", "br", "application/wasm"},
		{"/itl.wasm", "gzip", "gzip", "application/wasm"},
		{"/itl.wasm", "br;q=0, gzip", "gzip", "application/wasm"},
		{"/itl.wasm", "", "", "application/wasm"},
		{"/itl.js", "br, gzip", "br", "text/javascript; charset=utf-8"}, // compressed at start (no .br beside it)
		{"/itl.js", "gzip", "gzip", "text/javascript; charset=utf-8"},
		{"/itl-module.js", "gzip", "gzip", "text/javascript; charset=utf-8"},
		{"/itl-worker.js", "", "", "text/javascript; charset=utf-8"},
		{"/wasm_exec.js", "", "", "text/javascript; charset=utf-8"},
	}
	for _, tt := range tests {
		rec := get(t, h, tt.path, "Accept-Encoding", tt.accept)
		if rec.Code != 200 {
			t.Fatalf("%s: status %d", tt.path, rec.Code)
		}
		hd := rec.Header()
		if got := hd.Get("Content-Encoding"); got != tt.wantEnc {
			t.Errorf("%s (%s): Content-Encoding = %q, want %q", tt.path, tt.accept, got, tt.wantEnc)
		}
		if got := hd.Get("Content-Type"); got != tt.wantType {
			t.Errorf("%s: Content-Type = %q, want %q", tt.path, got, tt.wantType)
		}
		if got := hd.Get("Access-Control-Allow-Origin"); got != "*" {
			t.Errorf("%s: Access-Control-Allow-Origin = %q, want *", tt.path, got)
		}
		if got := hd.Get("Timing-Allow-Origin"); got != "*" {
			t.Errorf("%s: Timing-Allow-Origin = %q, want *", tt.path, got)
		}
		if hd.Get("ETag") == "" || hd.Get("Cache-Control") == "" {
			t.Errorf("%s: no ETag or Cache-Control", tt.path)
		}
		if tt.wantEnc == "br" && tt.path == "/itl.js" {
			b, err := io.ReadAll(brotli.NewReader(rec.Body))
			if err != nil {
				t.Fatal(err)
			}
			if plain := get(t, h, tt.path).Body.String(); string(b) != plain || plain == "" {
				t.Errorf("/itl.js: the brotli variant decodes to %d bytes that differ from the %d served plain", len(b), len(plain))
			}
		}
		if tt.wantEnc == "gzip" {
			zr, err := gzip.NewReader(rec.Body)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(zr)
			if tt.path == "/itl.wasm" && string(b) != string(wasm) {
				t.Errorf("gunzipped itl.wasm = %q, want the module", b)
			}
		}
	}
	// Revalidation.
	etag := get(t, h, "/itl.wasm", "Accept-Encoding", "br").Header().Get("ETag")
	if got := get(t, h, "/itl.wasm", "Accept-Encoding", "br", "If-None-Match", etag).Code; got != 304 {
		t.Errorf("If-None-Match: status = %d, want 304", got)
	}
	if got := get(t, h, "/itl.wasm", "Accept-Encoding", "gzip", "If-None-Match", etag).Code; got != 200 {
		t.Errorf("If-None-Match with the br tag on a gzip request: status = %d, want 200", got)
	}
	if rec := get(t, h, "/"); rec.Code != 200 || !strings.Contains(rec.Body.String(), "itlmon") {
		t.Errorf("/ = %d %q", rec.Code, rec.Body)
	}
}

// TestAssetsPrecompressed: the compressed copies `make wasm` writes beside a
// script are served as they are, and copies of another version of the
// script (a build cut between them and the script) are not: the collector
// compresses the script itself instead.
func TestAssetsPrecompressed(t *testing.T) {
	compressed := func(enc string, b []byte) []byte {
		var buf bytes.Buffer
		var w io.WriteCloser
		if enc == "br" {
			w = brotli.NewWriterLevel(&buf, 1) // not what the collector makes (11)
		} else {
			w, _ = gzip.NewWriterLevel(&buf, 1)
		}
		w.Write(b)
		w.Close()
		return buf.Bytes()
	}
	loader := []byte(strings.Repeat("// the loader, as make wasm wrote it\n", 20))
	host := []byte(strings.Repeat("// the module host, this version\n", 20))
	old := []byte(strings.Repeat("// the module host, the version before\n", 20))
	dist := fstest.MapFS{
		"itl.js":           {Data: loader},
		"itl.js.br":        {Data: compressed("br", loader)},
		"itl.js.gz":        {Data: compressed("gzip", loader)},
		"itl-module.js":    {Data: host},
		"itl-module.js.br": {Data: compressed("br", old)},
		"itl-module.js.gz": {Data: compressed("gzip", old)},
	}
	h := mustNew(t, Config{Dist: dist, Static: fstest.MapFS{}})
	decode := func(enc string, b []byte) []byte {
		var r io.Reader = brotli.NewReader(bytes.NewReader(b))
		if enc == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			r = zr
		}
		got, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, enc := range []string{"br", "gzip"} {
		rec := get(t, h, "/itl.js", "Accept-Encoding", enc)
		if got := rec.Header().Get("Content-Encoding"); got != enc {
			t.Fatalf("/itl.js (%s): Content-Encoding %q", enc, got)
		}
		if !bytes.Equal(rec.Body.Bytes(), dist["itl.js."+map[string]string{"br": "br", "gzip": "gz"}[enc]].Data) {
			t.Errorf("/itl.js (%s): %d bytes served, not the %s copy beside it", enc, rec.Body.Len(), enc)
		}
		rec = get(t, h, "/itl-module.js", "Accept-Encoding", enc)
		if got := rec.Header().Get("Content-Encoding"); got != enc {
			t.Fatalf("/itl-module.js (%s): Content-Encoding %q", enc, got)
		}
		if got := decode(enc, rec.Body.Bytes()); !bytes.Equal(got, host) {
			t.Errorf("/itl-module.js (%s): decodes to %q..., want the script served plain (its copies beside it are of another version)", enc, got[:min(len(got), 40)])
		}
	}
}
