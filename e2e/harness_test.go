// Package e2e runs itlmon end to end: real headless Chromium (chromedp; the
// core scenarios, TestEngines*, also in Firefox ESR and WebKitGTK through
// e2e/browsers, see engine_test.go), the real collector (`itlmon serve`,
// built from collector/cmd/itlmon, with its embedded ClickHouse engine) and
// an origin server on another port, so the page is cross-origin to the
// collector as in production.
//
// The harness (this file) is shared by every e2e test in the package:
//
//	Browser(t)                       the package's one Chromium (started in TestMain): its headless
//	                                 shell (browsers.ChromiumPath); skips or fails
//	                                 (ITLMON_REQUIRE_REAL=1) when Chromium is missing
//	FullBrowserTab(t) context.Context a tab of the full Chromium (started on first use), for what the
//	                                 shell leaves out: the back/forward cache
//	testCert                         the self-signed certificate (e2e/nginx.SelfSigned) that Browser
//	                                 trusts, for HTTPS proxies (nginx.Options.TLS)
//	NewTab(t) context.Context        a tab on a blank page, back to a pool at cleanup (OwnTab: one
//	                                 closed at cleanup, for tests that change the tab's state)
//	StartOrigin(t) *Origin           the page's server: /, /v1/chat/completions and collector/demo's
//	                                 other cadence-controlled APIs, /plain; Origin.Handle adds routes,
//	                                 Origin.SetCollector points the page's tag at a collector
//	StartAssets(t, opts) *Assets     a bare server for itl.js / wasm_exec.js / itl.wasm with CORS
//	                                 (404 or replaced files on demand), no ingest
//	StartCollector(t, sites...)      the real collector (`itlmon serve --demo --site ...`) on a free
//	                                 loopback port and a t.TempDir() data root; Stop/Start/Restart
//	                                 keep port and data (collector_test.go). Its Main lives in
//	                                 package main, so it runs as the built binary (engineExe).
//	SharedCollector(t) (c, site)     the package's one collector (started at first use) and a site key of
//	                                 the test's own on it, any page origin allowed: for tests that only
//	                                 store and read back (sharedCollectorPage: collectorPage on it)
//	c.Streams / StreamByID           read back through /api/streams
//	OpenPage(t, ctx, url)            navigate and wait until itlmon is ready (or definitely off)
//	RunStream(t, ctx, StreamOpts)    make the page fetch and read a stream; what the page saw
//	WaitStreams(t, c, site, n)       poll /api/streams until n streams are stored, with a deadline
//	Eventually(within, every, cond)  wait on a condition another process knows; changes.Wait on one the
//	                                 test's own servers record (wait_test.go): never a fixed wait
//	PageSummaries(t, ctx)            what itlmon.onStream gave the page
//	startWorkerd(t, origin, sink)    the real workerd running the edge Worker (bin/edge, make edge), the same
//	                                 Worker measuring nothing, and a JS pass-through Worker (edge_test.go);
//	                                 edgeTab(t, base) a tab whose requests carry an injected request.cf
//	BrowserEngine(t, name), NewPage  a browser of any engine and a page of it; OpenIn, StreamIn,
//	                                 SummariesIn, EvalIn are the helpers above for any engine's page
//	                                 (the chromedp ones are these on browsers.ChromiumTab)
//
// The page (Origin "/") loads `<script src="{collector}/itl.js" data-site="{site}" async>`
// and exposes window.e2e.stream(query, opts), which fetches /v1/chat/completions?{query},
// reads the body (reader loop, text(), for await, or clone), and returns its own t0-based
// TTFT, the byte count and the SHA-256 of every byte it read.
package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"html/template"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/demo"
	"github.com/itlmon/itlmon/e2e/browsers"
	"github.com/itlmon/itlmon/e2e/nginx"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/web"
)

var (
	browserCtx context.Context // the shared browser; nil when it could not start
	browserErr error
	// testCert is the certificate the shared browser trusts (and no other
	// unknown one): Chromium is launched with its public key hash in
	// --ignore-certificate-errors-spki-list, so pages served with it count
	// as valid HTTPS, secure contexts without certificate errors.
	testCert *nginx.Cert
)

func TestMain(m *testing.M) {
	// The embedded engines chtest.Cluster starts run as re-execs of this
	// test binary (TestClusterBalanced).
	chdb.MaybeRunChild()
	code := func() int {
		flag.Parse()
		defer tabs.close()   // NewTab's pool
		defer closeEngines() // Firefox and WebKit, launched by the first test that asks (engine_test.go)
		defer stopShared()   // the shared collector (SharedCollector), started by the first test that asks
		defer chtest.Stop()  // the seeded engine directory (chtest.SeedEngineDir)
		if testing.Short() {
			browserErr = errSkipShort
			return m.Run()
		}
		if os.Getenv("ITLMON_NO_BROWSERS") == "1" {
			browserErr = errNoBrowsers
			return m.Run()
		}
		chromiumPath, err := browsers.ChromiumPath()
		if err != nil {
			browserErr = err
			return m.Run()
		}
		// The certificate must exist before the browser starts; chromedp
		// gives the browser a --user-data-dir, without which Chromium
		// ignores the SPKI list.
		certDir, err := os.MkdirTemp("", "itlmon-e2e-cert")
		if err != nil {
			browserErr = err
			return m.Run()
		}
		defer os.RemoveAll(certDir)
		if testCert, err = nginx.SelfSigned(certDir); err != nil {
			browserErr = err
			return m.Run()
		}
		// Chromium's own temporary files (a directory per run, which it
		// leaves behind when it is killed) go in certDir too.
		browserTmp = filepath.Join(certDir, "tmp")
		if err := os.Mkdir(browserTmp, 0o700); err != nil {
			browserErr = err
			return m.Run()
		}
		defer closeFullBrowser() // started by the first test that asks (FullBrowser)
		ctx, cancel, err := launchChromium(chromiumPath)
		if err != nil {
			browserErr = err
			return m.Run()
		}
		defer cancel()
		browserCtx = ctx
		return m.Run()
	}()
	os.Exit(code)
}

// browserTmp is where the browsers launchChromium starts keep their
// temporary files (removed after them, with the test certificate's directory).
var browserTmp string

// launchChromium starts the Chromium at path, headless, trusting testCert,
// and returns its browser context (the first chromedp.Run's) and what
// closes it.
func launchChromium(path string) (context.Context, context.CancelFunc, error) {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Env("TMPDIR=" + browserTmp),
		chromedp.Flag("ignore-certificate-errors-spki-list", testCert.SPKIHash),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	// The first Run starts the browser; never give its context a timeout.
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		return nil, nil, err
	}
	return ctx, func() { cancel(); cancelAlloc() }, nil
}

// The full browser (browsers.FullChromiumPath), for the pages that need
// what the headless shell of the shared browser leaves out: started by
// the first test that asks (FullBrowser), closed after the tests.
var (
	fullOnce   sync.Once
	fullCtx    context.Context
	fullErr    error
	fullCancel context.CancelFunc = func() {}
)

// FullBrowser returns the full Chromium's browser context, for a test of
// what only the full browser has (its back/forward cache); the shared
// browser (Browser) is Chromium's headless shell.
func FullBrowser(t testing.TB) context.Context {
	t.Helper()
	Browser(t) // the same skips, and testCert
	fullOnce.Do(func() {
		if _, err := os.Stat(browsers.FullChromiumPath); err != nil {
			fullErr = err
			return
		}
		ctx, cancel, err := launchChromium(browsers.FullChromiumPath)
		if err != nil {
			fullErr = err
			return
		}
		fullCtx, fullCancel = ctx, cancel
	})
	if fullErr != nil {
		requireReal(t, "full browser", fullErr)
	}
	return fullCtx
}

// FullBrowserTab opens a tab of the full browser (FullBrowser) for t alone,
// closed when t ends.
func FullBrowserTab(t testing.TB) context.Context {
	t.Helper()
	return tabOf(t, FullBrowser(t))
}

func closeFullBrowser() { fullCancel() }

// requireReal skips t when a real part is missing, or fails it when
// ITLMON_REQUIRE_REAL=1 (make test).
func requireReal(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("ITLMON_REQUIRE_REAL") == "1" {
		t.Fatalf("%s: %v (ITLMON_REQUIRE_REAL=1)", what, err)
	}
	t.Skipf("%s: %v", what, err)
}

var (
	errSkipShort  = errors.New("end-to-end tests do not run with -short")
	errNoBrowsers = errors.New("browser tests skipped: ITLMON_NO_BROWSERS=1 (make check)")
)

// Browser returns the package's shared browser context.
func Browser(t testing.TB) context.Context {
	t.Helper()
	if errors.Is(browserErr, errSkipShort) || errors.Is(browserErr, errNoBrowsers) {
		t.Skip(browserErr.Error())
	}
	if browserCtx == nil {
		requireReal(t, "browser", browserErr)
	}
	return browserCtx
}

// NewTab gives t a tab of the shared browser, on a blank page of its own
// (no history, nothing of another test's), for t's pages. When t ends the tab
// goes back to a pool for the next test, on that blank page, or is closed if t
// failed. The returned context has no deadline; derive one per step.
//
// A new tab cost the full Chromium about a CPU-second on this machine (its
// page and renderer, the DevTools session; the headless shell costs less),
// navigating a tab to another port of 127.0.0.1 (the same site: the same
// renderer) about a third of that, and the e2e tests open over a hundred. A test that changes the tab itself, not
// its page (viewport emulation, bindings, scripts on new documents, extra
// headers, the cache, DevTools domains), takes OwnTab instead.
func NewTab(t testing.TB) context.Context {
	t.Helper()
	browser := Browser(t)
	ctx, cancel, err := tabs.take(browser)
	if err != nil {
		t.Fatalf("new tab: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() || !tabs.put(ctx, cancel) {
			cancel()
		}
	})
	return ctx
}

// OwnTab opens a tab of the shared browser for t alone, closed when t ends:
// for a test that changes the tab's own state (see NewTab).
func OwnTab(t testing.TB) context.Context {
	t.Helper()
	return tabOf(t, Browser(t))
}

// tabOf opens a tab of browser for t alone, closed when t ends.
func tabOf(t testing.TB, browser context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("new tab: %v", err)
	}
	return ctx
}

// tabs are the tabs NewTab gave tests that passed, each on the blank page,
// its history reset (its earlier pages out of the back/forward cache too).
var tabs tabPool

type tabPool struct {
	mu    sync.Mutex
	idle  []pooledTab
	blank string       // the blank page's URL, served by srv
	srv   *http.Server // started with the first tab, closed by TestMain
}

type pooledTab struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// take returns a pooled tab, or a new one on the blank page.
func (p *tabPool) take(browser context.Context) (context.Context, context.CancelFunc, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		tab := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return tab.ctx, tab.cancel, nil
	}
	blank, err := p.blankURL()
	p.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := chromedp.NewContext(browser)
	// The first Do opens the tab for as long as ctx lives: never with a timeout.
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		return nil, nil, err
	}
	sctx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if err := chromedp.Do(sctx, chromedp.Navigate(blank)); err != nil {
		cancel()
		return nil, nil, err
	}
	return ctx, cancel, nil
}

// put takes the tab back: it loads the blank page and forgets its history;
// false if it could not (then the caller closes it).
func (p *tabPool) put(ctx context.Context, cancel context.CancelFunc) bool {
	p.mu.Lock()
	blank := p.blank
	p.mu.Unlock()
	sctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := chromedp.Do(sctx, chromedp.Navigate(blank)); err != nil {
		return false
	}
	if _, err := chromedp.Call(sctx, page.ResetNavigationHistory, cdp.Empty{}); err != nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = append(p.idle, pooledTab{ctx, cancel})
	return true
}

// blankURL starts the blank page's server on first use; p.mu is held.
func (p *tabPool) blankURL() (string, error) {
	if p.srv != nil {
		return p.blank, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, "<!doctype html><title>e2e blank</title>")
	}), ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln)
	p.blank = "http://" + ln.Addr().String() + "/"
	return p.blank, nil
}

// close closes the pooled tabs and the blank page's server (TestMain).
func (p *tabPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, tab := range p.idle {
		tab.cancel()
	}
	p.idle = nil
	if p.srv != nil {
		p.srv.Close()
	}
}

// serve starts h on 127.0.0.1:0 and returns its base URL.
func serve(t testing.TB, h http.Handler) (string, *http.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), srv
}

// Origin is the page's own server (the chat app being monitored).
type Origin struct {
	URL string
	mux *http.ServeMux

	mu        sync.Mutex
	collector string // where the page's tag loads itl.js from and sends to
	site      string
}

// StartOrigin starts the page's server on its own port. Routes: "/" the test
// page, "/v1/chat/completions" the demo SSE endpoint (cadence from the query;
// see collector/demo) and the demo's other APIs ("/v1/responses",
// "/v1/messages", "/api/ui-chat", "/api/chat", "/api/data-chat"), "/plain" a JSON response
// itlmon must not wrap.
func StartOrigin(t testing.TB) *Origin {
	t.Helper()
	o := &Origin{mux: http.NewServeMux(), site: "e2e"}
	o.mux.HandleFunc("GET /{$}", o.page)
	for _, a := range demo.APIs() {
		o.mux.Handle(a.Path(), demo.Endpoint(a))
	}
	o.mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	})
	o.URL, _ = serve(t, o.mux)
	return o
}

// Handle adds a route to the origin (for scenarios beyond the demo stream).
func (o *Origin) Handle(pattern string, h http.Handler) { o.mux.Handle(pattern, h) }

// SetCollector sets the base URL the page's <script> tag loads itl.js from
// (and so the collector it reports to), and the site key.
func (o *Origin) SetCollector(base, site string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.collector, o.site = base, site
}

// PageURL returns the test page's URL. init, when not nil, is passed to
// itlmon.init (JSON-encoded) once itl.js has loaded. noModule leaves out the
// <script> tag: the same page without itlmon.
func (o *Origin) PageURL(init map[string]any, noModule bool) string {
	return o.pageURL(init, noModule, "")
}

// PageURLWithCSP is PageURL for a page served with this Content-Security-Policy.
func (o *Origin) PageURLWithCSP(init map[string]any, csp string) string {
	return o.pageURL(init, false, csp)
}

func (o *Origin) pageURL(init map[string]any, noModule bool, csp string) string {
	q := url.Values{}
	if csp != "" {
		q.Set("csp", csp)
	}
	if init != nil {
		b, _ := json.Marshal(init)
		q.Set("init", string(b))
	}
	if noModule {
		q.Set("nomodule", "1")
	}
	if len(q) == 0 {
		return o.URL + "/"
	}
	return o.URL + "/?" + q.Encode()
}

// asksMainThread reports whether a page's init options (JSON) say worker: false.
func asksMainThread(init string) bool { return strings.Contains(init, `"worker":false`) }

func (o *Origin) page(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	data := struct {
		Src, Site, Init string
		NoModule        bool
		MainThread      bool // data-worker="false"
	}{Src: o.collector + "/itl.js", Site: o.site, Init: r.URL.Query().Get("init"), NoModule: r.URL.Query().Get("nomodule") == "1" || o.collector == ""}
	data.MainThread = asksMainThread(data.Init)
	o.mu.Unlock()
	if data.Init == "" {
		data.Init = "null"
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache") // not no-store: that keeps a page out of the back/forward cache
	if csp := r.URL.Query().Get("csp"); csp != "" {
		w.Header().Set("Content-Security-Policy", csp)
	}
	if err := pageTmpl.Execute(w, data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>itlmon e2e</title>
<script>
window.e2e = { summaries: [], loaded: false };
window.e2eInit = JSON.parse({{.Init}});
function e2eLoaded() {
  e2e.loaded = true;
  if (window.e2eInit) itlmon.init(window.e2eInit);
  itlmon.onStream(function (s) { e2e.summaries.push(s); });
}
</script>
{{if not .NoModule}}<script src="{{.Src}}" data-site="{{.Site}}"{{if .MainThread}} data-worker="false"{{end}} async onload="e2eLoaded()" onerror="e2e.loaded = 'error'"></script>{{end}}
<script>
function hex(buf) { return Array.from(new Uint8Array(buf), function (b) { return b.toString(16).padStart(2, '0'); }).join(''); }
// e2e.stream fetches /v1/chat/completions?query and reads the body the way
// opts.mode says: "reader" (default), "text", "forawait", "byob" (a BYOB
// reader with 700-byte views), "clone" (reads a clone, then the original),
// "clonebyob" (reads a clone, then the original with a BYOB reader). opts.abortAfterMs aborts through an AbortController.
// opts.cancelAfterDone (reader mode) cancels the body once it has read the "data: [DONE]" event, as the
// OpenAI JS SDK 7.x does, without waiting for its end.
// It resolves once the summaries are out (itlmon.settled), unless opts.unsettled: then once read.
e2e.stream = async function (query, opts) {
  opts = opts || {};
  var ctrl = new AbortController();
  var out = { ttftMs: -1, bytes: 0, sha256: '', error: '', errorName: '', status: 0, reads: 0, url: '', type: '', redirected: false, ctype: '', slowGaps: 0, maxGapMs: 0, cancelled: false };
  var parts = [], text = '', dec = new TextDecoder(), last = -1;
  var t0 = performance.now();
  var seen = function (u8) {
    var now = performance.now();
    if (last >= 0 && now - last > 100) out.slowGaps++;
    if (last >= 0 && now - last > out.maxGapMs) out.maxGapMs = now - last;
    last = now;
    parts.push(u8); out.bytes += u8.byteLength; out.reads++;
    if (out.ttftMs < 0) { text += dec.decode(u8, { stream: true }); if (text.indexOf('"delta":{"content":') >= 0) out.ttftMs = performance.now() - t0; }
  };
  var body = JSON.stringify({ model: opts.model || 'e2e-model', stream: true, messages: [{ role: 'user', content: 'hi' }] });
  try {
    var pending = fetch((opts.path || '/v1/chat/completions') + '?' + query, {
      method: 'POST', signal: ctrl.signal, headers: { 'Content-Type': 'application/json' }, body: body,
    });
    // The abort's timer starts once fetch was called: the stream's start
    // (stamped in the call) is before it, so the time waited is at least
    // abortAfterMs however late a busy machine ran the call.
    if (opts.abortAfterMs) setTimeout(function () { ctrl.abort(); }, opts.abortAfterMs);
    var resp = await pending;
    out.status = resp.status; out.url = resp.url; out.type = resp.type; out.redirected = resp.redirected;
    out.ctype = resp.headers.get('content-type') || '';
    var mode = opts.mode || 'reader';
    if (mode === 'text') {
      var s = await resp.text(); out.ttftMs = performance.now() - t0;
      seen(new TextEncoder().encode(s)); out.reads = -1;
    } else if (mode === 'forawait') {
      for await (var c of resp.body) seen(c);
    } else if (mode === 'byob' || mode === 'clonebyob') {
      if (mode === 'clonebyob') { // cloning swaps the original's body for a tee branch
        var b1 = new Uint8Array(await resp.clone().arrayBuffer());
        out.cloneBytes = b1.byteLength;
        out.cloneSha256 = hex(await crypto.subtle.digest('SHA-256', b1));
      }
      var br = resp.body.getReader({ mode: 'byob' });
      for (;;) { var x = await br.read(new Uint8Array(700)); if (x.done) break; seen(x.value.slice()); }
    } else {
      if (mode === 'clone') {
        var copy = resp.clone();
        var b2 = new Uint8Array(await copy.arrayBuffer());
        out.cloneBytes = b2.byteLength;
        out.cloneSha256 = hex(await crypto.subtle.digest('SHA-256', b2));
      }
      var reader = resp.body.getReader(), tail = '', tailDec = new TextDecoder();
      for (;;) {
        var r = await reader.read(); if (r.done) break; seen(r.value);
        if (opts.cancelAfterDone) {
          tail = (tail + tailDec.decode(r.value, { stream: true })).slice(-64);
          if (/data: \[DONE\]\r?\n\r?\n$/.test(tail)) { await reader.cancel(); out.cancelled = true; break; }
        }
      }
    }
  } catch (e) { out.error = String(e && e.message || e); out.errorName = e && e.name || ''; }
  var all = new Uint8Array(out.bytes), off = 0;
  parts.forEach(function (p) { all.set(p, off); off += p.byteLength; });
  out.sha256 = hex(await crypto.subtle.digest('SHA-256', all));
  if (window.itlmon && !opts.unsettled) await itlmon.settled(); // this stream's summary, if measured, is in e2e.summaries
  return out;
};
</script></head><body><p>itlmon e2e page</p></body></html>`))

// modulePage opens the test page, with the module served by an assets
// server (no collector), in a new tab, and waits until the module is ready.
func modulePage(t *testing.T) (*Origin, context.Context) {
	t.Helper()
	o := StartOrigin(t)
	a := StartAssets(t)
	o.SetCollector(a.URL, "e2e")
	ctx := NewTab(t)
	if !OpenPage(t, ctx, o.PageURL(nil, false)) {
		t.Fatal("itlmon did not become ready")
	}
	return o, ctx
}

// Assets serves the browser module (itl.js, itl-module.js, itl-worker.js,
// wasm_exec.js, itl.wasm) with
// CORS and no ingest, for tests about loading rather than storing.
type Assets struct {
	URL      string
	Missing  map[string]bool          // names answered with 404
	Override map[string][]byte        // names served with these bytes instead
	Hold     map[string]chan struct{} // names answered (or refused) once the channel is closed; set before use
	Asked    map[string]chan struct{} // closed when the name is first asked for; set before use

	mu    sync.Mutex
	asked map[string]bool
}

// StartAssets starts an assets server. Files come, as the collector serves
// them, from the build (make wasm: the module, the scripts without their
// comments): $ITLMON_E2E_DIST if set, else web.Dist(); then web.Static()
// (the scripts as written).
func StartAssets(t testing.TB, missing ...string) *Assets {
	t.Helper()
	if testing.Short() {
		t.Skip(errSkipShort.Error())
	}
	a := &Assets{Missing: map[string]bool{}, Override: map[string][]byte{}, Hold: map[string]chan struct{}{}, Asked: map[string]chan struct{}{}, asked: map[string]bool{}}
	for _, m := range missing {
		a.Missing[m] = true
	}
	dist := moduleDist(t)
	a.URL, _ = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		name := strings.TrimPrefix(path.Clean(r.URL.Path), "/")
		if c := a.Asked[name]; c != nil {
			a.mu.Lock()
			if !a.asked[name] {
				a.asked[name] = true
				close(c)
			}
			a.mu.Unlock()
		}
		if hold := a.Hold[name]; hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		if a.Missing[name] {
			http.NotFound(w, r)
			return
		}
		var b []byte
		var err error
		if o, ok := a.Override[name]; ok {
			b = o
		} else if b, err = fs.ReadFile(dist, name); err != nil {
			b, err = fs.ReadFile(web.Static(), name)
		}
		if err != nil {
			http.NotFound(w, r)
			return
		}
		switch path.Ext(name) {
		case ".js":
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		case ".wasm":
			w.Header().Set("Content-Type", "application/wasm")
		}
		w.Write(b)
	}))
	return a
}

// moduleDist returns where the built module lives; it fails t when itl.wasm
// is missing (run make wasm).
func moduleDist(t testing.TB) fs.FS {
	t.Helper()
	dist := web.Dist()
	if d := os.Getenv("ITLMON_E2E_DIST"); d != "" {
		dist = os.DirFS(d)
	}
	if _, err := fs.Stat(dist, "itl.wasm"); err != nil {
		t.Fatalf("browser module not built: %v (run make wasm, then rebuild the test)", err)
	}
	return dist
}

// OpenPage navigates ctx's tab to pageURL and waits until itlmon is ready
// (true) or has definitely turned itself off (false): OpenIn for a chromedp
// tab.
func OpenPage(t testing.TB, ctx context.Context, pageURL string) bool {
	t.Helper()
	return OpenIn(t, browsers.ChromiumTab(ctx, nil), pageURL)
}

// StreamOpts asks the page for one stream.
type StreamOpts struct {
	Query        string // cadence, see collector/demo (tokens=200&interval_ms=20...)
	Mode         string // reader (default), text, forawait, byob, clone, clonebyob
	AbortAfterMs int
	// CancelAfterDone cancels the body once the page has read `data: [DONE]`
	// (reader mode), as the OpenAI JS SDK 7.x does.
	CancelAfterDone bool
	Model           string
	Path            string // default /v1/chat/completions
}

// PageRead is what the page saw of one stream, measured by the page itself.
type PageRead struct {
	TTFTMs      float64 `json:"ttftMs"` // before fetch -> the read holding the first content delta
	Bytes       int     `json:"bytes"`
	SHA256      string  `json:"sha256"`
	Error       string  `json:"error"`
	ErrorName   string  `json:"errorName"`
	Status      int     `json:"status"`
	Reads       int     `json:"reads"`
	URL         string  `json:"url"`
	Type        string  `json:"type"`
	Redirected  bool    `json:"redirected"`
	ContentType string  `json:"ctype"`
	CloneBytes  int     `json:"cloneBytes"`
	CloneSHA256 string  `json:"cloneSha256"`
	SlowGaps    int     `json:"slowGaps"`  // gaps over 100 ms between the page's own reads (see slowGapMs)
	MaxGapMs    float64 `json:"maxGapMs"`  // the longest gap between the page's own reads
	Cancelled   bool    `json:"cancelled"` // the page cancelled the body after [DONE] (CancelAfterDone)
}

// slowGapMs is the page's own witness of a starved machine: a gap over it
// between the page's reads (or an SDK's content items) where the stream's
// cadence (6-20 ms) has no pause. It is half the stall threshold, not the
// threshold: the page handles a read after the module stamped it, so a read
// it handled late shortens the gap it sees after that read while the stamped
// gap is over 200 ms (CI stored a stall in a smooth stream the page saw no
// gap over 200 ms in). Hiding 100 ms of a gap takes a read handled 100 ms
// late, and that shows as a gap over 100 ms before it. The pages' scripts
// write the number out.
const slowGapMs = 100

// RunStream makes the page fetch and read one stream and returns what it saw.
func RunStream(t testing.TB, ctx context.Context, o StreamOpts) PageRead {
	t.Helper()
	return StreamIn(t, browsers.ChromiumTab(ctx, nil), o)
}

// Summary is what itlmon.onStream gave the page for one stream.
type Summary struct {
	ID            string  `json:"id"`
	URL           string  `json:"url"`
	Model         string  `json:"model"`
	Status        string  `json:"status"`
	TTFTMs        float64 `json:"ttftMs"`
	ContentEvents int     `json:"contentEvents"`
	Reads         int     `json:"reads"`
	Bytes         float64 `json:"bytes"`
	ITLP50Ms      float64 `json:"itlP50Ms"`
	ITLP99Ms      float64 `json:"itlP99Ms"`
	Stalls        int     `json:"stalls"`
	StalledMs     float64 `json:"stalledMs"`
	TokensPerSec  float64 `json:"tokensPerSec"`
	Smooth        bool    `json:"smooth"`
}

// PageSummaries returns the summaries itlmon.onStream delivered so far.
func PageSummaries(t testing.TB, ctx context.Context) []Summary {
	t.Helper()
	return SummariesIn(t, browsers.ChromiumTab(ctx, nil))
}

// Eval evaluates a JS expression (awaiting a promise) in the tab.
func Eval[T any](t testing.TB, ctx context.Context, expr string) T {
	t.Helper()
	return EvalIn[T](t, browsers.ChromiumTab(ctx, nil), expr)
}
