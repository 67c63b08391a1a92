package e2e

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/itlmon/itlmon/collector/demo"
	"github.com/itlmon/itlmon/internal/freeport"
	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// The edge Worker (wasm/edge) under the real workerd runtime: Chromium →
// workerd (the Go Worker) → the origin (the demo APIs behind the origin
// middleware). Both the middleware and the Worker report to an edgeSink,
// which decodes their timelines with wasm/beacon.

const (
	edgeSite = "e2e"
	edgeKey  = "edge-e2e-key-0123456789"
	// cfBlobHeader is the request header workerd takes request.cf from (the
	// socket's cfBlobHeader option); Cloudflare sets request.cf itself.
	cfBlobHeader = "cf-blob"
)

// edgeCF is the request.cf the tests inject, and what the edge must report.
var edgeCF = beacon.Edge{Colo: "FRA", Country: "DE", Region: "Hesse", RegionCode: "HE", City: "Frankfurt am Main",
	ASN: 3320, HTTPProto: "HTTP/2", TLSVersion: "TLSv1.3", ClientTCPRTTMs: 17}

func edgeCFJSON() string {
	b, _ := json.Marshal(map[string]any{"colo": edgeCF.Colo, "country": edgeCF.Country, "region": edgeCF.Region,
		"regionCode": edgeCF.RegionCode, "city": edgeCF.City, "asn": edgeCF.ASN, "httpProtocol": edgeCF.HTTPProto,
		"tlsVersion": edgeCF.TLSVersion, "clientTcpRtt": edgeCF.ClientTCPRTTMs, "timezone": "Europe/Berlin"})
	return string(b)
}

// edgeSink stands in for the collector's /v1/origin: it checks the key,
// decodes each batch and keeps the timelines in arrival order.
type edgeSink struct {
	URL     string
	changed changes // a timeline or an error recorded
	mu      sync.Mutex
	recs    []beacon.Origin
	errs    []string
}

func startEdgeSink(t *testing.T) *edgeSink {
	t.Helper()
	s, h := newEdgeSink()
	s.URL, _ = serve(t, h)
	return s
}

// newEdgeSink is an edgeSink and its handler, not yet served.
func newEdgeSink() (*edgeSink, http.Handler) {
	s := &edgeSink{}
	return s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(code int, msg string) {
			s.mu.Lock()
			s.errs = append(s.errs, msg)
			s.mu.Unlock()
			s.changed.Notify()
			http.Error(w, msg, code)
		}
		if r.Method != http.MethodPost || r.URL.Path != origin.Path || r.URL.Query().Get("site") != edgeSite {
			fail(http.StatusNotFound, "unexpected "+r.Method+" "+r.URL.String())
			return
		}
		if r.Header.Get(origin.HeaderKey) != edgeKey {
			fail(http.StatusForbidden, "wrong key")
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			fail(http.StatusBadRequest, err.Error())
			return
		}
		b, err := beacon.DecodeOriginBatch(body, beacon.DefaultLimits)
		if err != nil {
			fail(http.StatusBadRequest, err.Error())
			return
		}
		s.mu.Lock()
		s.recs = append(s.recs, b.Records...)
		s.mu.Unlock()
		s.changed.Notify()
		w.WriteHeader(http.StatusNoContent)
	})
}

// pair waits for the origin's and the edge's timeline of stream id.
func (s *edgeSink) pair(t *testing.T, id string) (o, e beacon.Origin) {
	t.Helper()
	var haveO, haveE bool
	var errs []string
	s.changed.Wait(15*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, r := range s.recs {
			switch {
			case r.ID == id && r.Vantage == beacon.VantageOrigin:
				o, haveO = r, true
			case r.ID == id && r.Vantage == beacon.VantageEdge:
				e, haveE = r, true
			}
		}
		errs = slices.Clone(s.errs)
		return len(errs) > 0 || haveO && haveE
	})
	if len(errs) > 0 {
		t.Fatalf("sink refused posts: %q", errs)
	}
	if !haveO || !haveE {
		t.Fatalf("stream %s: origin timeline %v, edge timeline %v within 15 s", id, haveO, haveE)
	}
	return o, e
}

// origin waits for the origin's timeline of stream id.
func (s *edgeSink) origin(t *testing.T, id string) beacon.Origin {
	t.Helper()
	var o beacon.Origin
	if !s.changed.Wait(15*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, r := range s.recs {
			if r.ID == id && r.Vantage == beacon.VantageOrigin {
				o = r
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no origin timeline for %s within 15 s", id)
	}
	return o
}

// next waits for the first stream id after the first `after` timelines that
// has both an origin and an edge timeline, and returns it.
func (s *edgeSink) next(t *testing.T, after int) string {
	t.Helper()
	var id string
	if !s.changed.Wait(15*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		seen := map[string]int{}
		for _, r := range s.recs[min(after, len(s.recs)):] {
			if seen[r.ID] |= 1 << r.Vantage; seen[r.ID] == 3 && id == "" {
				id = r.ID
			}
		}
		return id != ""
	}) {
		s.mu.Lock()
		var got []string
		for _, r := range s.recs[min(after, len(s.recs)):] {
			got = append(got, r.Vantage.String()+" "+r.ID+" "+meter.Status(r.Status).String())
		}
		s.mu.Unlock()
		t.Fatalf("no new stream with both timelines within 15 s; new timelines: %q", got)
	}
	return id
}

func (s *edgeSink) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

// originStarts holds when each stream's request reached the origin's
// middleware, by stream id, to the microsecond (its timeline's StartUnixMs
// is in milliseconds).
type originStarts struct {
	m       sync.Map
	changed changes
}

func (st *originStarts) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		h.ServeHTTP(w, r)
		st.m.Store(w.Header().Get(origin.HeaderStream), t0) // the middleware set it
		st.changed.Notify()
	})
}

func (st *originStarts) get(t *testing.T, id string) time.Time {
	t.Helper()
	var t0 time.Time
	if !st.changed.Wait(5*time.Second, func() bool {
		v, ok := st.m.Load(id)
		if ok {
			t0 = v.(time.Time)
		}
		return ok
	}) {
		t.Fatalf("no origin start for stream %q", id)
	}
	return t0
}

// startEdgeOrigin is StartOrigin with the demo APIs behind the origin
// middleware, which reports to sink.
func startEdgeOrigin(t *testing.T, sink *edgeSink) (*Origin, *originStarts) {
	t.Helper()
	rp, err := origin.New(origin.Config{Collector: sink.URL, Site: edgeSite, Key: edgeKey, FlushInterval: 20 * time.Millisecond, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rp.Shutdown(ctx)
	})
	o, starts := &Origin{mux: http.NewServeMux(), site: edgeSite}, &originStarts{}
	o.mux.HandleFunc("GET /{$}", o.page)
	for _, a := range demo.APIs() {
		o.mux.Handle(a.Path(), starts.wrap(rp.Handler(demo.Endpoint(a))))
	}
	o.mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	})
	o.URL, _ = serve(t, o.mux)
	return o, starts
}

// postThrough POSTs body to url with the injected request.cf, reads the
// response to its end and returns it (its body closed).
func postThrough(t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set(cfBlobHeader, edgeCFJSON())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// workerd is the real workerd runtime serving the Go edge Worker (URL) and,
// for comparison, a plain JavaScript pass-through Worker (JSURL), both in
// front of the same origin.
type workerd struct {
	URL, JSURL string
	// BareURL is the same Go Worker measuring nothing (ITLMON_ROUTES set
	// to a path no request takes), to tell the meter's cost from the rest.
	BareURL string
	cmd     *exec.Cmd
	log     *syncBuf
}

// edgeDir is where `make edge` put the Worker.
func edgeDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("ITLMON_EDGE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "bin", "edge")
	}
	for _, f := range []string{"app.wasm", "wasm_exec.js", "worker.mjs"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			requireReal(t, "edge Worker (run make edge)", err)
		}
	}
	return dir
}

// passThroughJS is the plain JavaScript Worker the Go one is compared with:
// the same proxying, nothing measured.
const passThroughJS = `export default {
  async fetch(req, env) {
    const u = new URL(req.url), o = new URL(env.ITLMON_ORIGIN);
    u.protocol = o.protocol; u.host = o.host;
    return fetch(new Request(u, req), { redirect: "manual" });
  },
};
`

// startWorkerd runs workerd with a generated capnp config: three sockets on
// freeport ports, each taking request.cf from the cf-blob header. goVars
// are set on the Go Worker (URL) besides the usual ones.
func startWorkerd(t testing.TB, originURL, collectorURL string, goVars ...[2]string) *workerd {
	t.Helper()
	bin := os.Getenv("WORKERD_BIN")
	if _, err := os.Stat(bin); bin == "" || err != nil {
		requireReal(t, "workerd (WORKERD_BIN, make deps-workerd)", errors.Join(errors.New("not installed"), err))
	}
	src := edgeDir(t)
	dir := t.TempDir()
	for _, f := range []string{"app.wasm", "wasm_exec.js", "worker.mjs"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "passthrough.mjs"), []byte(passThroughJS), 0o644); err != nil {
		t.Fatal(err)
	}
	goAddr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	jsAddr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	bareAddr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	vars := [][2]string{{"ITLMON_ORIGIN", originURL}, {"ITLMON_COLLECTOR", collectorURL}, {"ITLMON_SITE", edgeSite},
		{"ITLMON_KEY", edgeKey}, {"ITLMON_ROUTES", "/v1/*,/api/*"}}
	capnpBindings := func(vars [][2]string) string {
		var bindings []string
		for _, v := range vars {
			bindings = append(bindings, fmt.Sprintf("(name = %q, text = %q)", v[0], v[1]))
		}
		return strings.Join(bindings, ", ")
	}
	bare := append(slices.Clone(vars[:len(vars)-1]), [2]string{"ITLMON_ROUTES", "/not-measured"})
	vars = append(vars, goVars...)
	config := `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "edge", worker = .edgeWorker),
    (name = "js", worker = .jsWorker),
    (name = "bare", worker = .bareWorker),
    (name = "net", network = (allow = ["public", "private", "local"])),
  ],
  sockets = [
    (name = "edge", address = "` + goAddr + `", http = (cfBlobHeader = "` + cfBlobHeader + `"), service = "edge"),
    (name = "js", address = "` + jsAddr + `", http = (cfBlobHeader = "` + cfBlobHeader + `"), service = "js"),
    (name = "bare", address = "` + bareAddr + `", http = (cfBlobHeader = "` + cfBlobHeader + `"), service = "bare"),
  ],
);
const edgeWorker :Workerd.Worker = (
  modules = [
    (name = "worker.mjs", esModule = embed "worker.mjs"),
    (name = "wasm_exec.js", esModule = embed "wasm_exec.js"),
    (name = "app.wasm", wasm = embed "app.wasm"),
  ],
  compatibilityDate = "2025-01-01",
  bindings = [` + capnpBindings(vars) + `],
  globalOutbound = "net",
);
const bareWorker :Workerd.Worker = (
  modules = [
    (name = "worker.mjs", esModule = embed "worker.mjs"),
    (name = "wasm_exec.js", esModule = embed "wasm_exec.js"),
    (name = "app.wasm", wasm = embed "app.wasm"),
  ],
  compatibilityDate = "2025-01-01",
  bindings = [` + capnpBindings(bare) + `],
  globalOutbound = "net",
);
const jsWorker :Workerd.Worker = (
  modules = [(name = "passthrough.mjs", esModule = embed "passthrough.mjs")],
  compatibilityDate = "2025-01-01",
  bindings = [(name = "ITLMON_ORIGIN", text = "` + originURL + `")],
  globalOutbound = "net",
);
`
	if err := os.WriteFile(filepath.Join(dir, "config.capnp"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	w := &workerd{URL: "http://" + goAddr, JSURL: "http://" + jsAddr, BareURL: "http://" + bareAddr, log: &syncBuf{}}
	w.cmd = exec.Command(bin, "serve", filepath.Join(dir, "config.capnp"), "--verbose")
	w.cmd.Stdout, w.cmd.Stderr = w.log, w.log
	if err := w.cmd.Start(); err != nil {
		t.Fatalf("start workerd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- w.cmd.Wait() }()
	t.Cleanup(func() {
		w.cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("workerd log:\n%s", w.log.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range []string{goAddr, jsAddr, bareAddr} {
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			select {
			case err := <-exited:
				exited <- err
				t.Fatalf("workerd exited: %v\n%s", err, w.log.String())
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("workerd not listening on %s after 30 s:\n%s", addr, w.log.String())
			}
		}
	}
	return w
}

// rss is the workerd process's resident set size now, in bytes.
func (w *workerd) rss(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(w.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatalf("workerd rss: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("workerd rss: no VmRSS")
	return 0
}

// cpu is the workerd process's CPU time so far (user + system).
func (w *workerd) cpu(t testing.TB) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(w.cmd.Process.Pid) + "/stat")
	if err != nil {
		t.Fatalf("workerd cpu: %v", err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// edgeTab opens the page through base (the Worker or the origin) in a new
// tab whose every request carries the injected request.cf.
func edgeTab(t *testing.T, base string) context.Context {
	t.Helper()
	ctx := OwnTab(t) // extra headers
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Call(sctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("network.enable: %v", err)
	}
	if _, err := chromedp.Call(sctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{cfBlobHeader: edgeCFJSON()}}); err != nil {
		t.Fatalf("extra headers: %v", err)
	}
	err := chromedp.Do(sctx, chromedp.Navigate(base+"/?nomodule=1"),
		chromedp.Poll[chromedp.Void](`window.e2e && typeof e2e.stream === 'function'`))
	if err != nil {
		t.Fatalf("open %s: %v", base, err)
	}
	return ctx
}

// medianGap is the median gap between consecutive emit times, microseconds.
func medianGap(emits []uint32) float64 {
	if len(emits) < 2 {
		return -1
	}
	gaps := make([]float64, 0, len(emits)-1)
	for i := 1; i < len(emits); i++ {
		gaps = append(gaps, float64(emits[i]-emits[i-1]))
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2]
}

// TestEdgeWorker: through the Go Worker under workerd, the page reads exactly
// the bytes the origin sent, the OpenAI JS SDK streams and aborts as without
// the Worker (the abort reaches the origin), and the Worker posts an edge
// timeline with the injected request.cf whose events match the origin's.
func TestEdgeWorker(t *testing.T) {
	Browser(t)
	sink := startEdgeSink(t)
	o, _ := startEdgeOrigin(t, sink)
	wd := startWorkerd(t, o.URL, sink.URL)
	ctx := edgeTab(t, wd.URL)

	// wantPair checks one stream's two timelines against each other.
	wantPair := func(t *testing.T, id string, status meter.Status) (beacon.Origin, beacon.Origin) {
		t.Helper()
		or, ed := sink.pair(t, id)
		if ed.Status != uint8(status) || or.Status != uint8(status) {
			t.Fatalf("status: edge %v, origin %v, want %v", meter.Status(ed.Status), meter.Status(or.Status), status)
		}
		if status == meter.StatusComplete && (ed.Events != or.Events || ed.ContentEvents != or.ContentEvents || ed.Bytes != or.Bytes || ed.Format != or.Format) {
			t.Fatalf("edge saw %d events (%d content, %d bytes, format %d); origin emitted %d (%d, %d, %d)",
				ed.Events, ed.ContentEvents, ed.Bytes, ed.Format, or.Events, or.ContentEvents, or.Bytes, or.Format)
		}
		wantEdge := edgeCF
		wantEdge.HeadersUs = ed.Edge.HeadersUs
		if ed.Edge != wantEdge || ed.Edge.HeadersUs == beacon.NoTime || ed.Route != or.Route || ed.HTTPStatus != or.HTTPStatus {
			t.Fatalf("edge record: facts %+v route %q status %d; want facts %+v, route %q, status %d", ed.Edge, ed.Route, ed.HTTPStatus, edgeCF, or.Route, or.HTTPStatus)
		}
		return or, ed
	}

	t.Run("bytes", func(t *testing.T) {
		for _, tc := range []struct{ name, query, mode string }{
			{"crlf", "tokens=30&interval_ms=5&crlf=1", "reader"},
			{"multibyte split across writes", "tokens=40&interval_ms=5&split=1", "reader"},
			{"comments and DONE", "tokens=30&interval_ms=5&comments=1", "reader"},
			{"all at once, text()", "tokens=30&interval_ms=2&crlf=1&comments=1&split=1", "text"},
			{"bursts", "tokens=48&interval_ms=10&burst=8&split=1", "reader"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := sink.len()
				wantN, wantSum := wantBody(t, tc.query)
				got := RunStream(t, ctx, StreamOpts{Query: tc.query, Mode: tc.mode})
				if got.Error != "" || got.Status != 200 {
					t.Fatalf("page: status %d error %q", got.Status, got.Error)
				}
				if got.Bytes != wantN || got.SHA256 != wantSum {
					t.Fatalf("page read %d bytes sha256 %s through the Worker, origin sent %d bytes sha256 %s", got.Bytes, got.SHA256, wantN, wantSum)
				}
				if !strings.HasPrefix(got.ContentType, "text/event-stream") {
					t.Fatalf("content type %q through the Worker", got.ContentType)
				}
				wantPair(t, sink.next(t, before), meter.StatusComplete)
			})
		}
	})

	t.Run("stream id kept and exposed", func(t *testing.T) {
		before := sink.len()
		resp := postThrough(t, wd.URL+"/v1/chat/completions?tokens=3&interval_ms=1", `{"model":"m","stream":true}`)
		id := resp.Header.Get(origin.HeaderStream)
		if !strings.Contains(resp.Header.Get(origin.HeaderExpose), origin.HeaderStream) || id == "" {
			t.Fatalf("headers through the Worker: %s %q, %s %q", origin.HeaderStream, id, origin.HeaderExpose, resp.Header.Get(origin.HeaderExpose))
		}
		if got := sink.next(t, before); got != id {
			t.Fatalf("timelines for %q, the response carried %q (the Worker must keep the origin's id)", got, id)
		}
	})

	// The AI SDK's data stream is text/plain: measured at both by its header.
	t.Run("AI SDK data stream", func(t *testing.T) {
		before := sink.len()
		resp := postThrough(t, wd.URL+demo.VercelData.Path()+"?tokens=5&interval_ms=1", `{"model":"m"}`)
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") || resp.Header.Get(origin.HeaderDataStream) != "v1" {
			t.Fatalf("through the Worker: Content-Type %q, %s %q", ct, origin.HeaderDataStream, resp.Header.Get(origin.HeaderDataStream))
		}
		or, ed := wantPair(t, sink.next(t, before), meter.StatusComplete)
		if meter.Format(ed.Format) != meter.FormatVercelAIData || ed.ContentEvents != 5 {
			t.Fatalf("edge: format %v, %d content events (origin: %v, %d); want %v, 5",
				meter.Format(ed.Format), ed.ContentEvents, meter.Format(or.Format), or.ContentEvents, meter.FormatVercelAIData)
		}
	})

	t.Run("edge ITL matches the origin's", func(t *testing.T) {
		before := sink.len()
		got := RunStream(t, ctx, StreamOpts{Query: "tokens=60&interval_ms=25"})
		if got.Error != "" {
			t.Fatalf("page error %q", got.Error)
		}
		or, ed := wantPair(t, sink.next(t, before), meter.StatusComplete)
		if len(ed.EmitUs) != len(or.EmitUs) || len(ed.EmitUs) != 60 {
			t.Fatalf("content event times: edge %d, origin %d, want 60", len(ed.EmitUs), len(or.EmitUs))
		}
		eg, og := medianGap(ed.EmitUs), medianGap(or.EmitUs)
		t.Logf("median ITL: edge %.1f ms, origin %.1f ms; edge TTFB %d µs, headers %d µs, reads %d (max %d events per read)",
			eg/1e3, og/1e3, ed.TTFBUs, ed.Edge.HeadersUs, ed.Flushes, ed.MaxEventsPerFlush)
		if d := eg - og; d > 2000 || d < -2000 {
			t.Fatalf("median ITL at the edge %.1f ms, at the origin %.1f ms: more than 2 ms apart", eg/1e3, og/1e3)
		}
		if ed.ITL.Count() != or.ITL.Count() {
			t.Fatalf("ITL samples: edge %d, origin %d", ed.ITL.Count(), or.ITL.Count())
		}
	})

	t.Run("openai sdk", func(t *testing.T) {
		want := serveOpenAISDK(t, o)
		direct := edgeTab(t, o.URL)
		viaDirect := Eval[sdkResult](t, direct, sdkCall(false))
		viaEdge := Eval[sdkResult](t, ctx, sdkCall(false))
		if viaDirect.Text != want || viaEdge.Text != want || viaEdge.Chunks != viaDirect.Chunks || viaEdge.Err != "" {
			t.Fatalf("SDK stream through the Worker %q (%d chunks, err %q), direct %q (%d chunks); want %q",
				viaEdge.Text, viaEdge.Chunks, viaEdge.Err, viaDirect.Text, viaDirect.Chunks, want)
		}
		abDirect := Eval[sdkResult](t, direct, sdkCall(true))
		before := sink.len()
		abEdge := Eval[sdkResult](t, ctx, sdkCall(true))
		if abEdge.Err != abDirect.Err || abEdge.Chunks != abDirect.Chunks || abEdge.Chunks != 5 {
			t.Fatalf("SDK abort through the Worker: %d chunks, error %q; direct: %d chunks, error %q", abEdge.Chunks, abEdge.Err, abDirect.Chunks, abDirect.Err)
		}
		// The origin pauses 1 s before its 5th token: it stored the abort and
		// never sent that token only if the abort reached it through the Worker.
		or, ed := wantPair(t, sink.next(t, before), meter.StatusAborted)
		if or.ContentEvents >= 25 || ed.ContentEvents > or.ContentEvents {
			t.Fatalf("after the abort: origin emitted %d content events, edge saw %d; want fewer than 25", or.ContentEvents, ed.ContentEvents)
		}
		t.Logf("SDK abort after 5 chunks: %q both ways; origin stopped after %d content events (%d µs), edge after %d (%d µs)", abEdge.Err, or.ContentEvents, or.DurationUs, ed.ContentEvents, ed.DurationUs)
		// The same abort through the JavaScript pass-through Worker, for
		// the record: when the origin learns of it depends on workerd.
		before = sink.len()
		abJS := Eval[sdkResult](t, edgeTab(t, wd.JSURL), sdkCall(true))
		var found *beacon.Origin
		if !sink.changed.Wait(15*time.Second, func() bool {
			sink.mu.Lock()
			defer sink.mu.Unlock()
			for _, r := range sink.recs[before:] {
				if r.Status == uint8(meter.StatusAborted) {
					found = &r
				}
			}
			return found != nil
		}) {
			t.Fatalf("through the JS pass-through Worker: no aborted origin timeline")
		}
		t.Logf("through the JS pass-through Worker: %d chunks; origin stopped after %d content events (%d µs)", abJS.Chunks, found.ContentEvents, found.DurationUs)
	})

	// A client that goes away while the origin is silent: through the Go
	// Worker workerd notices it at the next chunk it sends the client (the
	// origin's 3rd token, after its pause; the pass-through, whose body
	// workerd pipes itself, noticed at once here), and the origin learns it
	// then, well before its 6th token (200 ms apart).
	t.Run("abort reaches the origin", func(t *testing.T) {
		for _, w := range []struct{ name, url string }{{"go", wd.URL}, {"js", wd.JSURL}} {
			rctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(rctx, "POST", w.url+"/v1/chat/completions?tokens=6&interval_ms=200&pause_at=2&pause_ms=1500", strings.NewReader(`{"model":"m","stream":true}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			id := resp.Header.Get(origin.HeaderStream)
			buf := make([]byte, 4096)
			var got []byte
			for strings.Count(string(got), `"content":"`) < 2 {
				n, err := resp.Body.Read(buf)
				if got = append(got, buf[:n]...); err != nil {
					t.Fatalf("%s: read before the abort: %v", w.name, err)
				}
			}
			cancel()
			resp.Body.Close()
			or := sink.origin(t, id)
			if or.Status != uint8(meter.StatusAborted) || or.ContentEvents >= 6 {
				t.Fatalf("%s Worker: origin stored %v after %d content events, want aborted before the 6th", w.name, meter.Status(or.Status), or.ContentEvents)
			}
			t.Logf("%s Worker: the origin stored the abort at %d ms (it paused 1500 ms after its 2nd token)", w.name, or.DurationUs/1000)
		}
	})
}

// TestEdgeReport (ITLMON_BENCH_REPORT=1, make bench): the Worker's size
// against Cloudflare's limits, and the CPU and wall time workerd spends per
// request on the Go Worker (a new Go instance per request, proxying, the
// meter, the timeline's POST) against a plain JavaScript pass-through Worker
// in the same workerd run. CPU is the workerd process's user+system time
// over the requests (10 ms ticks, so many requests), wall time is the
// client's, request to last byte.
func TestEdgeReport(t *testing.T) {
	if os.Getenv("ITLMON_BENCH_REPORT") != "1" {
		t.Skip("report: set ITLMON_BENCH_REPORT=1 (make bench)")
	}
	dir := edgeDir(t)
	raw, gz := 0, 0
	{
		var all []byte
		for _, f := range []string{"app.wasm", "wasm_exec.js", "worker.mjs"} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			raw += len(b)
			all = append(all, b...)
		}
		gz = gzipLen(t, all)
	}
	sink := startEdgeSink(t)
	o, starts := startEdgeOrigin(t, sink)
	wd := startWorkerd(t, o.URL, sink.URL)
	const n = 40
	// measure is one row's CPU (workerd's, per request) and wall time (p50).
	type measure struct{ cpuPerReq, wallMs float64 }
	run := func(name, base, path string, body bool) measure {
		do := func() time.Duration {
			var req *http.Request
			if body {
				req, _ = http.NewRequest("POST", base+path, strings.NewReader(`{"model":"m","stream":true}`))
			} else {
				req, _ = http.NewRequest("GET", base+path, nil)
			}
			req.Header.Set(cfBlobHeader, edgeCFJSON())
			start := time.Now()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%s: status %d", name, resp.StatusCode)
			}
			return time.Since(start)
		}
		posts := base == wd.URL && body // the Go Worker and the origin post a timeline each per stream
		warm := sink.len()
		for range 3 {
			do()
		}
		if posts { // the warm-up's timeline POSTs
			sink.changed.Wait(15*time.Second, func() bool { return sink.len() >= warm+2*3 })
		}
		before := sink.len()
		cpu0 := wd.cpu(t)
		walls := make([]float64, 0, n)
		for range n {
			walls = append(walls, float64(do().Microseconds())/1e3)
		}
		if posts { // the timelines' POSTs are part of the Go Worker's work
			sink.changed.Wait(15*time.Second, func() bool { return sink.len() >= before+2*n })
		}
		cpu := wd.cpu(t) - cpu0
		slices.Sort(walls)
		return measure{float64(cpu.Microseconds()) / 1e3 / n, walls[n/2]}
	}
	// Each row: the Go Worker and the JavaScript pass-through in turn, two
	// rounds, the best of each (the machine is shared: the lower figure is
	// the one less disturbed).
	stream := "/v1/chat/completions?tokens=200&interval_ms=0"
	type row struct {
		name     string
		goURL    string
		path     string
		body     bool
		goal     float64 // at most this many times the pass-through's CPU
		goM, jsM measure
	}
	rows := []row{
		{name: "route not measured, small JSON (/plain)", goURL: wd.URL, path: "/plain", goal: 1.2},
		{name: "route not measured, 200-event SSE stream", goURL: wd.BareURL, path: stream, body: true, goal: 1.2},
		{name: "measured 200-event SSE stream, timeline posted", goURL: wd.URL, path: stream, body: true, goal: 2},
	}
	best := func(a, b measure) measure {
		if a.cpuPerReq == 0 || b.cpuPerReq < a.cpuPerReq {
			return b
		}
		return a
	}
	for range 2 {
		for i := range rows {
			r := &rows[i]
			r.goM = best(r.goM, run(r.name, r.goURL, r.path, r.body))
			r.jsM = best(r.jsM, run(r.name, wd.JSURL, r.path, r.body))
		}
	}

	// Added latency per chunk: a stream of 50 tokens 20 ms apart, 8 times
	// each way; each content event's arrival at the client minus its emit
	// at the origin (when the request reached the middleware plus the
	// event's emit time), on the same machine's clock.
	lat := func(base string) float64 {
		var all []float64
		for range 8 {
			req, _ := http.NewRequest("POST", base+"/v1/chat/completions?tokens=50&interval_ms=20", strings.NewReader(`{"model":"m","stream":true}`))
			req.Header.Set(cfBlobHeader, edgeCFJSON())
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var arrivals []time.Time
			buf := make([]byte, 64<<10)
			for {
				k, err := resp.Body.Read(buf)
				now := time.Now()
				for range strings.Count(string(buf[:k]), `"delta":{"content":`) {
					arrivals = append(arrivals, now)
				}
				if err != nil {
					break
				}
			}
			resp.Body.Close()
			id := resp.Header.Get(origin.HeaderStream)
			or, t0 := sink.origin(t, id), starts.get(t, id)
			if len(or.EmitUs) != len(arrivals) {
				t.Fatalf("%s: %d content events read, the origin emitted %d", base, len(arrivals), len(or.EmitUs))
			}
			for i, at := range arrivals {
				emit := t0.Add(time.Duration(or.EmitUs[i]) * time.Microsecond)
				all = append(all, float64(at.Sub(emit).Microseconds())/1e3)
			}
		}
		slices.Sort(all)
		return all[len(all)/2]
	}
	direct, viaJS, viaGo := lat(o.URL), lat(wd.JSURL), lat(wd.URL)

	var b strings.Builder
	fmt.Fprintf(&b, "edge Worker report (workerd %s, %d requests each, sequential, best of 2 rounds; one Go runtime per isolate)\n", workerdVersion(), n)
	fmt.Fprintf(&b, "  size: %.2f MB raw, %.2f MB gzip (Cloudflare: 64 MB uncompressed on every plan)\n", float64(raw)/1e6, float64(gz)/1e6)
	fmt.Fprintf(&b, "  %-48s %12s %12s %7s %6s %12s %12s\n", "CPU per request (workerd's)", "Go ms/req", "JS ms/req", "ratio", "goal", "Go wall p50", "JS wall p50")
	for _, r := range rows {
		fmt.Fprintf(&b, "  %-48s %12.2f %12.2f %6.2fx %5.1fx %12.1f %12.1f\n", r.name, r.goM.cpuPerReq, r.jsM.cpuPerReq,
			r.goM.cpuPerReq/max(r.jsM.cpuPerReq, 0.01), r.goal, r.goM.wallMs, r.jsM.wallMs)
	}
	fmt.Fprintf(&b, "  (CPU in 10 ms ticks of the whole workerd process over %d requests: +-%.2f ms/req)\n", n, 10.0/n)
	fmt.Fprintf(&b, "  added latency per chunk, origin emit -> client read, median of 8 streams x 50 events 20 ms apart:\n")
	fmt.Fprintf(&b, "    direct %.2f ms; JS pass-through %.2f ms (%+.2f); Go Worker %.2f ms (%+.2f); Go over the pass-through %+.2f ms (goal +0.10)\n",
		direct, viaJS, viaJS-direct, viaGo, viaGo-direct, viaGo-viaJS)
	t.Log("\n" + b.String())
}

func gzipLen(t *testing.T, b []byte) int {
	t.Helper()
	var buf strings.Builder
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(b)
	zw.Close()
	return buf.Len()
}

func workerdVersion() string {
	out, err := exec.Command(os.Getenv("WORKERD_BIN"), "--version").CombinedOutput()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}
