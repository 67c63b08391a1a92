package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/heapprofiler"
	"github.com/chromedp/chromedp"

	"github.com/itlmon/itlmon/collector/demo"
	"github.com/itlmon/itlmon/e2e/nginx"
	"github.com/itlmon/itlmon/web"
)

// The loader's own behaviour (web/static/itl.js): fetch wrapped from the
// moment the tag runs, the module loaded lazily, clients handed itlmon.fetch,
// requests measured from the moment they are issued, and how a body's end is
// told apart (end of body, abort, cancel, collected).

// loaderPage is a page installed as the README and docs/browser-module.md say: the inline snippet
// in <head> (Snippet; it loads itl.js from Src itself), the tag synchronous in
// <head>, before the app's scripts (Head), or added by the app itself later
// (the app calls addTag()). App is a module script run after the tag. The
// page records its resource entries at the end of its load event
// (e2e.atLoad), its console.info lines (e2e.hints) and every summary.
type loaderPage struct {
	Src     string // itl.js URL
	Head    bool
	Snippet bool
	Debug   bool
	Init    template.JS // options for itlmon.init before anything else, or empty
	App     template.JS
	Nonce   string      // when set, every script carries it and the page's CSP allows scripts by this nonce only
	Before  template.JS // a script of the page's own before itlmon's (a fetch wrapper older than it), or empty
}

// snippetJS is the inline snippet (web/static/itl-snippet.js) as pages paste it.
var snippetJS = func() template.JS {
	b, err := fs.ReadFile(web.Static(), "itl-snippet.js")
	if err != nil {
		panic("BUG: the snippet is not embedded: " + err.Error())
	}
	return template.JS(b)
}()

var loaderTmpl = template.Must(template.New("loader").Funcs(template.FuncMap{"snippet": func() template.JS { return snippetJS }}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>itlmon loader e2e</title>
<script{{if .Nonce}} nonce="{{.Nonce}}"{{end}}>
window.e2e = { summaries: [], hints: [], atLoad: null };
(function () {
  var info = console.info;
  console.info = function () { e2e.hints.push([].join.call(arguments, ' ')); return info.apply(console, arguments); };
})();
window.addTag = function () {
  return new Promise(function (resolve, reject) {
    var s = document.createElement('script');
    s.src = {{.Src}};
    s.setAttribute('data-site', 'e2e');
    {{if .Debug}}s.setAttribute('data-debug', '');{{end}}
    s.onload = function () { itlmon.onStream(function (x) { e2e.summaries.push(x); }); resolve(); };
    s.onerror = reject;
    document.head.appendChild(s);
  });
};
</script>
{{if .Before}}<script{{if .Nonce}} nonce="{{.Nonce}}"{{end}}>{{.Before}}</script>{{end}}
{{if .Head}}<script src="{{.Src}}" data-site="e2e"{{if .Debug}} data-debug{{end}}{{if .Nonce}} nonce="{{.Nonce}}"{{end}}></script>{{end}}
{{if .Snippet}}<script data-src="{{.Src}}" data-site="e2e"{{if .Debug}} data-debug{{end}}{{if .Nonce}} nonce="{{.Nonce}}"{{end}}>{{snippet}}</script>{{end}}
{{if or .Head .Snippet}}<script{{if .Nonce}} nonce="{{.Nonce}}"{{end}}>
e2e.wrappedAtOnce = itlmon.active && window.fetch !== itlmon.originalFetch;
{{if .Init}}itlmon.init({{.Init}});{{end}}
itlmon.onStream(function (s) { e2e.summaries.push(s); });
</script>{{end}}
<script{{if .Nonce}} nonce="{{.Nonce}}"{{end}}>
addEventListener('load', function () {
  // After every other load listener: what was requested before the load event ended.
  setTimeout(function () { e2e.atLoad = performance.getEntriesByType('resource').map(function (e) { return { name: e.name, size: e.encodedBodySize, transfer: e.transferSize, ms: e.responseEnd - e.startTime }; }); });
});
</script>
<script type="module"{{if .Nonce}} nonce="{{.Nonce}}"{{end}}>{{.App}}</script>
</head><body><p>itlmon loader e2e</p></body></html>`))

// servePage adds the page at path to the origin.
func servePage(t *testing.T, o *Origin, path string, p loaderPage) string {
	t.Helper()
	var b bytes.Buffer
	if err := loaderTmpl.Execute(&b, p); err != nil {
		t.Fatalf("page template: %v", err)
	}
	o.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.Nonce != "" {
			w.Header().Set("Content-Security-Policy", "script-src 'nonce-"+p.Nonce+"' 'wasm-unsafe-eval'")
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.Write(b.Bytes())
	}))
	return o.URL + path
}

// serveOpenAI serves the OpenAI JS SDK ($OPENAI_JS_DIR) at /openai/ on the origin.
func serveOpenAI(t *testing.T, o *Origin) {
	t.Helper()
	dir := os.Getenv("OPENAI_JS_DIR")
	if _, err := os.Stat(filepath.Join(dir, "index.mjs")); dir == "" || err != nil {
		requireReal(t, "openai JS SDK (OPENAI_JS_DIR)", errors.Join(errors.New("run make deps-openai-js"), err))
	}
	files := http.StripPrefix("/openai/", http.FileServer(http.Dir(dir)))
	o.Handle("/openai/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".mjs") {
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		}
		files.ServeHTTP(w, r)
	}))
}

// sdkVersion returns the version of the SDK at $OPENAI_JS_DIR.
func sdkVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(os.Getenv("OPENAI_JS_DIR"), "package.json"))
	if err != nil {
		t.Fatalf("openai JS SDK: %v", err)
	}
	var pkg struct{ Version string }
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatalf("openai JS SDK package.json: %v", err)
	}
	return pkg.Version
}

// navigate opens pageURL in a new tab.
func navigate(t *testing.T, pageURL string) context.Context {
	t.Helper()
	ctx := NewTab(t)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatalf("navigate %s: %v", pageURL, err)
	}
	return ctx
}

// pageSummary is a summary with the fields these tests look at.
type pageSummary struct {
	Summary
	End        string  `json:"end"`
	HeadersMs  float64 `json:"headersMs"`
	DurationMs float64 `json:"durationMs"`
	HTTPStatus int     `json:"httpStatus"`
}

const sdkOpts = `{ apiKey: 'sk-test', baseURL: location.origin + '/v1', dangerouslyAllowBrowser: true, maxRetries: 0 }`

// TestClientBeforeModule: an SDK client constructed while the page loads
// (the tag in <head>, the client in the app's module script right after it)
// keeps the fetch it saw then, which is the shim: its stream, started long
// before the module is ready, is stamped and queued, and measured in full
// once the module has loaded.
func TestClientBeforeModule(t *testing.T) {
	t.Parallel()
	o := StartOrigin(t)
	serveOpenAI(t, o)
	a := StartAssets(t)
	pageURL := servePage(t, o, "/early", loaderPage{Src: a.URL + "/itl.js", Head: true, App: template.JS(`
		import OpenAI from '/openai/index.mjs';
		const client = new OpenAI(` + sdkOpts + `);
		e2e.result = (async () => {
			const startedAt = performance.now();
			const stream = await client.chat.completions.create({ model: 'sdk-model', stream: true, messages: [{ role: 'user', content: 'hi' }] },
				{ query: { tokens: 25, interval_ms: 5 } });
			let text = '';
			for await (const c of stream) text += (c.choices[0] && c.choices[0].delta && c.choices[0].delta.content) || '';
			await itlmon.ready;
			await itlmon.settled();
			return { text, startedAt, loadAt: itlmon.timing.loadAt, readyAt: itlmon.timing.readyAt, summaries: e2e.summaries };
		})();`)})
	ctx := navigate(t, pageURL)
	type result struct {
		Text      string        `json:"text"`
		StartedAt float64       `json:"startedAt"`
		LoadAt    float64       `json:"loadAt"`
		ReadyAt   float64       `json:"readyAt"`
		Summaries []pageSummary `json:"summaries"`
	}
	got := Eval[result](t, ctx, `(async () => { while (!window.e2e || !e2e.result) await new Promise(r => setTimeout(r, 5)); return await e2e.result; })()`)
	var want strings.Builder
	for i := range 25 {
		want.WriteString(demo.Token(i))
	}
	if got.Text != want.String() {
		t.Fatalf("SDK text = %q, want %q", got.Text, want.String())
	}
	if got.ReadyAt <= got.StartedAt {
		t.Fatalf("module ready at %.1f ms, before the stream started at %.1f ms: this test wants a stream queued for the module", got.ReadyAt, got.StartedAt)
	}
	if len(got.Summaries) != 1 || got.Summaries[0].ContentEvents != 25 || got.Summaries[0].Model != "sdk-model" || got.Summaries[0].Status != "complete" {
		t.Fatalf("summaries = %+v, want one complete stream of 25 content events, model sdk-model", got.Summaries)
	}
	t.Logf("stream started at %.1f ms, module loading from %.1f ms, ready at %.1f ms", got.StartedAt, got.LoadAt, got.ReadyAt)
}

// TestLateTagClientFetch: with the tag added after the app made its
// clients, a client given the late-tag-safe itlmon.fetch is measured, one
// that kept the page's fetch is not, and in debug mode the page gets one
// console hint naming the fix.
func TestLateTagClientFetch(t *testing.T) {
	t.Parallel()
	o := StartOrigin(t)
	serveOpenAI(t, o)
	a := StartAssets(t)
	pageURL := servePage(t, o, "/late", loaderPage{Src: a.URL + "/itl.js", Debug: true, App: template.JS(`
		import OpenAI from '/openai/index.mjs';
		const plain = new OpenAI(` + sdkOpts + `); // keeps the page's fetch: itl.js has not run
		const handed = new OpenAI({ ...` + sdkOpts + `, fetch: (...a) => (globalThis.itlmon?.fetch ?? fetch)(...a) });
		e2e.result = (async () => {
			const before = typeof window.itlmon;
			await addTag();
			const run = async (client, model, n) => {
				const s = await client.chat.completions.create({ model, stream: true, messages: [{ role: 'user', content: 'hi' }] },
					{ query: { tokens: n, interval_ms: 5 } });
				let k = 0;
				for await (const c of s) k++;
				return k;
			};
			const plainChunks = await run(plain, 'plain-model', 10);
			const handedChunks = await run(handed, 'handed-model', 12);
			await itlmon.settled();
			for (let i = 0; i < 100 && !e2e.hints.length; i++) await new Promise(r => setTimeout(r, 20));
			await new Promise(r => setTimeout(r, 200)); // a second hint would show
			return { before, plainChunks, handedChunks, summaries: e2e.summaries, hints: e2e.hints };
		})();`)})
	ctx := navigate(t, pageURL)
	type result struct {
		Before       string        `json:"before"`
		PlainChunks  int           `json:"plainChunks"`
		HandedChunks int           `json:"handedChunks"`
		Summaries    []pageSummary `json:"summaries"`
		Hints        []string      `json:"hints"`
	}
	got := Eval[result](t, ctx, `(async () => { while (!window.e2e || !e2e.result) await new Promise(r => setTimeout(r, 5)); return await e2e.result; })()`)
	if got.Before != "undefined" {
		t.Fatalf("itlmon was %s before the tag was added", got.Before)
	}
	if got.PlainChunks == 0 || got.HandedChunks == 0 {
		t.Fatalf("SDK chunks: plain %d, handed %d", got.PlainChunks, got.HandedChunks)
	}
	if len(got.Summaries) != 1 || got.Summaries[0].Model != "handed-model" || got.Summaries[0].ContentEvents != 12 || got.Summaries[0].Status != "complete" {
		t.Fatalf("summaries = %+v, want one: the client given itlmon.fetch, 12 content events, complete", got.Summaries)
	}
	if len(got.Hints) != 1 || !strings.Contains(got.Hints[0], "/v1/chat/completions") || !strings.Contains(got.Hints[0], "itlmon?.fetch") {
		t.Fatalf("console.info hints = %q, want one naming the endpoint and itlmon.fetch", got.Hints)
	}
}

// TestModuleAfterLoad: the page's load costs the loader alone: fetch is
// wrapped as soon as the tag (or the snippet) ran, nothing but itl.js is
// requested from the collector before the load event ends (nothing at all
// with the snippet, which loads itl.js after it), and the module follows
// when the page is idle.
func TestModuleAfterLoad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		snippet bool
		atLoad  string // requested from the collector before the load event ended
	}{{"tag", false, "itl.js"}, {"snippet", true, ""}} {
		t.Run(tc.name, func(t *testing.T) {
			o := StartOrigin(t)
			a := StartAssets(t)
			pageURL := servePage(t, o, "/idle", loaderPage{Src: a.URL + "/itl.js", Head: !tc.snippet, Snippet: tc.snippet})
			ctx := navigate(t, pageURL)
			if !Eval[bool](t, ctx, `itlmon.ready`) {
				t.Fatalf("itlmon did not become ready: %s", Eval[string](t, ctx, `itlmon.timing.error`))
			}
			if !Eval[bool](t, ctx, `e2e.wrappedAtOnce`) {
				t.Fatal("window.fetch was not the shim right after the tag ran")
			}
			// itlmon.fetch works as a method of whatever object a client keeps it in.
			if got := Eval[int](t, ctx, `(async () => {
				const client = { fetch: itlmon.fetch };
				await (await client.fetch('/v1/chat/completions?tokens=2&interval_ms=1')).text();
				await itlmon.settled();
				return e2e.summaries.length;
			})()`); got != 1 {
				t.Fatalf("a stream through client.fetch = itlmon.fetch: %d summaries, want 1", got)
			}
			atLoad := Eval[[]string](t, ctx, `(async () => { while (!e2e.atLoad) await new Promise(r => setTimeout(r, 5)); return e2e.atLoad.map(e => e.name); })()`)
			var ours []string
			for _, n := range atLoad {
				if strings.HasPrefix(n, a.URL+"/") {
					ours = append(ours, strings.TrimPrefix(n, a.URL+"/"))
				}
			}
			if got := strings.Join(ours, ","); got != tc.atLoad {
				t.Fatalf("requested from the collector before the load event ended: %q, want %q", got, tc.atLoad)
			}
			after := Eval[[]string](t, ctx, `performance.getEntriesByType('resource').map(e => e.name)`)
			var loaded []string
			for _, n := range after {
				if strings.HasPrefix(n, a.URL+"/") {
					loaded = append(loaded, strings.TrimPrefix(n, a.URL+"/"))
				}
			}
			if got := strings.Join(loaded, ","); !strings.Contains(got, "itl.js") || !strings.Contains(got, "itl-module.js") || !strings.Contains(got, "itl.wasm") {
				t.Fatalf("requested once ready: %q, want itl.js, itl-module.js and itl.wasm", loaded)
			}
			if at, ld := Eval[float64](t, ctx, `itlmon.timing.loadAt`), Eval[float64](t, ctx, `performance.getEntriesByType('navigation')[0].loadEventEnd`); at < ld {
				t.Fatalf("module loading began at %.1f ms, before the load event ended at %.1f ms", at, ld)
			}
		})
	}
}

// holdModule makes a's itl-module.js wait until release is called (or the
// test ends): the module stays "loading" meanwhile.
func holdModule(t *testing.T, a *Assets) (release func()) { return holdAsset(t, a, "itl-module.js") }

// holdAsset makes a's file name wait until release is called (or the test
// ends).
func holdAsset(t *testing.T, a *Assets, name string) (release func()) {
	hold := make(chan struct{})
	a.Hold[name] = hold
	released := false
	release = func() {
		if !released {
			released = true
			close(hold)
		}
	}
	t.Cleanup(release)
	return release
}

// TestWorkerSlowDownload: a download of itl.wasm that takes longer than the
// bound of the Worker's start (set through testWorkerWaitMs to 3 s, for a
// download held 4 s from its request) leaves the module in its Worker: the
// bound counts from the moment the Worker has the module. Counted from the
// Worker's creation, the page fell back to the main thread, which waited
// for the same bytes, on every network slower than the bound (at 50 KB/s,
// itl.wasm's ~460 KB take 9 s).
func TestWorkerSlowDownload(t *testing.T) {
	t.Parallel()
	o := StartOrigin(t)
	a := StartAssets(t)
	asked := make(chan struct{})
	a.Asked["itl.wasm"] = asked
	release := holdAsset(t, a, "itl.wasm")
	o.SetCollector(a.URL, "e2e")
	ctx := navigate(t, o.PageURL(map[string]any{"testHooks": true, "testWorkerWaitMs": 3000}, false))
	select {
	case <-asked:
	case <-time.After(30 * time.Second):
		t.Fatal("itl.wasm was not asked for")
	}
	time.Sleep(4 * time.Second) // sleep: the download's length (the scenario: longer than the bound), not a wait
	release()
	if !Eval[bool](t, ctx, `(async () => { while (!window.itlmon) await new Promise(r => setTimeout(r, 5)); return await itlmon.ready; })()`) {
		t.Fatalf("itlmon not ready: %s", Eval[string](t, ctx, `itlmon.timing.error`))
	}
	if mode, werr := Eval[string](t, ctx, `itlmon.timing.mode`), Eval[string](t, ctx, `itlmon.timing.workerError`); mode != "worker" || werr != "" {
		t.Fatalf("the module runs in mode %q (Worker error %q), want worker", mode, werr)
	}
}

// TestQueueBound: while the module loads, streams are stamped and queued up
// to a bound (8 MB). When a read does not fit, the stream that takes the
// most of it goes unmeasured, and is counted, with its bytes untouched; the
// room it took is given back. So a stream read beside it (their reads queued
// interleaved, and cut into batches where a third stream ended) and a
// stream after it are measured once the module is ready, every byte.
func TestQueueBound(t *testing.T) {
	t.Parallel()
	o := StartOrigin(t)
	a := StartAssets(t)
	release := holdModule(t, a)
	o.SetCollector(a.URL, "e2e")
	ctx := navigate(t, o.PageURL(nil, false))
	const (
		big   = "tokens=60000&interval_ms=0"
		paced = "tokens=2000&interval_ms=1"
		tiny  = "tokens=3&interval_ms=1"
	)
	bigN, bigSum := wantBody(t, big)
	if bigN <= 8<<20 {
		t.Fatalf("the big stream is %d bytes: not past the queue's bound", bigN)
	}
	pacedN, pacedSum := wantBody(t, paced)
	tinyN, tinySum := wantBody(t, tiny)
	type reads struct {
		Paced PageRead `json:"paced"`
		Tiny  PageRead `json:"tiny"`
	}
	gotBig := Eval[PageRead](t, ctx, `(async () => {
		while (!window.itlmon || !e2e.loaded) await new Promise(r => setTimeout(r, 5));
		const opts = { unsettled: true }; // the summaries wait for the module
		window.queued = { paced: e2e.stream(`+jsString(paced)+`, opts) };
		await new Promise(r => setTimeout(r, 50));
		const big = e2e.stream(`+jsString(big)+`, opts);
		queued.tiny = e2e.stream(`+jsString(tiny)+`, opts);
		return await big;
	})()`)
	if gotBig.Error != "" || gotBig.Bytes != bigN || gotBig.SHA256 != bigSum {
		t.Fatalf("big stream: page read %d bytes sha %s err %q, want %d %s", gotBig.Bytes, gotBig.SHA256, gotBig.Error, bigN, bigSum)
	}
	n := Eval[int](t, ctx, `(async () => {
		const r = await fetch('/v1/chat/completions?tokens=5&interval_ms=1', { method: 'POST', body: '{"model":"small","stream":true}' });
		return (await r.text()).length;
	})()`)
	if n == 0 {
		t.Fatal("small stream: empty body")
	}
	type state struct {
		ReadyAt    float64 `json:"readyAt"`
		Unmeasured int     `json:"unmeasured"`
		Summaries  int     `json:"summaries"`
	}
	st := Eval[state](t, ctx, `({ readyAt: itlmon.timing.readyAt, unmeasured: itlmon.timing.unmeasured, summaries: e2e.summaries.length })`)
	if st.ReadyAt != -1 || st.Unmeasured != 1 || st.Summaries != 0 {
		t.Fatalf("while the module was held: %+v; want not ready, 1 stream (the big one) unmeasured, no summaries yet", st)
	}
	release()
	if !Eval[bool](t, ctx, `itlmon.ready`) {
		t.Fatalf("itlmon did not become ready: %s", Eval[string](t, ctx, `itlmon.timing.error`))
	}
	got := Eval[reads](t, ctx, `(async () => ({ paced: await queued.paced, tiny: await queued.tiny }))()`)
	for _, c := range []struct {
		name string
		got  PageRead
		n    int
		sum  string
	}{{"paced", got.Paced, pacedN, pacedSum}, {"tiny", got.Tiny, tinyN, tinySum}} {
		if c.got.Error != "" || c.got.Bytes != c.n || c.got.SHA256 != c.sum {
			t.Fatalf("%s stream: page read %d bytes sha %s err %q, want %d %s", c.name, c.got.Bytes, c.got.SHA256, c.got.Error, c.n, c.sum)
		}
	}
	byEvents := map[int]Summary{}
	sums := PageSummaries(t, ctx)
	for _, s := range sums {
		byEvents[s.ContentEvents] = s
	}
	if len(sums) != 3 || len(byEvents) != 3 {
		t.Fatalf("summaries = %+v, want 3: the paced, tiny and small streams", sums)
	}
	for _, w := range []struct {
		events int
		model  string
		bytes  int
	}{{2000, "e2e-model", pacedN}, {3, "e2e-model", tinyN}, {5, "small", n}} {
		s, ok := byEvents[w.events]
		if !ok || s.Model != w.model || s.Status != "complete" || int(s.Bytes) != w.bytes {
			t.Errorf("the stream of %d content events: %+v (found %v), want model %s, complete, %d bytes", w.events, s, ok, w.model, w.bytes)
		}
	}
}

// TestModuleFailsWhileQueued: when the module fails to load while streams
// are queued for it, the queue is dropped, the page gets its own fetch back,
// and a stream in flight reads to its end with its bytes intact.
func TestModuleFailsWhileQueued(t *testing.T) {
	t.Parallel()
	o := StartOrigin(t)
	a := StartAssets(t, "itl-module.js")
	release := holdModule(t, a)
	o.SetCollector(a.URL, "e2e")
	ctx := navigate(t, o.PageURL(nil, false))
	const q = "tokens=100&interval_ms=10"
	wantN, wantSum := wantBody(t, q)
	Eval[bool](t, ctx, `(async () => {
		while (!window.itlmon || !e2e.loaded) await new Promise(r => setTimeout(r, 5));
		window.inFlight = e2e.stream(`+jsString(q)+`);
		await new Promise(r => setTimeout(r, 300)); // a third of it read and queued
		return true;
	})()`)
	if !Eval[bool](t, ctx, `itlmon.active && itlmon.timing.loadAt > 0 && itlmon.timing.readyAt === -1`) {
		t.Fatal("want the shim active and the module requested, not ready, while the stream is read")
	}
	release() // itl-module.js: 404
	if Eval[bool](t, ctx, `itlmon.ready`) {
		t.Fatal("itlmon ready without itl-module.js")
	}
	got := Eval[PageRead](t, ctx, `inFlight`)
	if got.Error != "" || got.Bytes != wantN || got.SHA256 != wantSum {
		t.Fatalf("the stream in flight: page read %d bytes sha %s err %q, want %d %s", got.Bytes, got.SHA256, got.Error, wantN, wantSum)
	}
	type state struct {
		Restored  bool   `json:"restored"`
		Error     string `json:"error"`
		Summaries int    `json:"summaries"`
	}
	st := Eval[state](t, ctx, `({ restored: window.fetch === itlmon.originalFetch, error: itlmon.timing.error, summaries: e2e.summaries.length })`)
	if !st.Restored || st.Error != "not loaded" || st.Summaries != 0 {
		t.Fatalf("after the module failed to load: %+v; want the page's fetch back, error \"not loaded\", no summaries", st)
	}
}

// TestNonceCSP: on a page whose Content-Security-Policy allows scripts by
// nonce only, the scripts the loader adds later (itl-module.js, and
// wasm_exec.js for the main-thread fallback: a blob: Worker is refused
// there) carry the tag's nonce, and streams are measured.
func TestNonceCSP(t *testing.T) {
	t.Parallel()
	o := StartOrigin(t)
	a := StartAssets(t)
	pageURL := servePage(t, o, "/nonce", loaderPage{Src: a.URL + "/itl.js", Head: true, Nonce: "e2e-nonce-1"})
	ctx := navigate(t, pageURL)
	if !Eval[bool](t, ctx, `(async () => { while (!window.itlmon) await new Promise(r => setTimeout(r, 5)); return itlmon.ready; })()`) {
		t.Fatalf("itlmon did not become ready: %s", Eval[string](t, ctx, `itlmon.timing.error`))
	}
	if mode := Eval[string](t, ctx, `itlmon.timing.mode`); mode != "main" {
		t.Fatalf("mode %q, want main (the policy refuses blob: workers)", mode)
	}
	got := Eval[pageSummary](t, ctx, `(async () => {
		await (await fetch('/v1/chat/completions?tokens=7&interval_ms=2')).text();
		await itlmon.settled();
		return e2e.summaries[e2e.summaries.length - 1];
	})()`)
	if got.Status != "complete" || got.ContentEvents != 7 {
		t.Fatalf("summary %+v, want complete with 7 content events", got)
	}
}

// storedPage starts a collector for site e2e whose page origin is front (the
// origin itself, or the proxy before it), and opens o's test page through
// front in a new tab, with the module ready and batches sent every 200 ms.
func storedPage(t *testing.T, o *Origin, front string) (*Collector, context.Context) {
	t.Helper()
	c := StartCollector(t, "e2e="+front)
	o.SetCollector(c.URL, "e2e")
	ctx := NewTab(t)
	if !OpenPage(t, ctx, strings.Replace(o.PageURL(map[string]any{"flushMs": 200}, false), o.URL, front, 1)) {
		t.Fatalf("itlmon did not become ready: %s", Eval[string](t, ctx, `itlmon.timing.error`))
	}
	return c, ctx
}

// sharedStoredPage is storedPage on the shared collector (SharedCollector):
// it returns the test's site key too.
func sharedStoredPage(t *testing.T, o *Origin, front string) (*Collector, context.Context, string) {
	t.Helper()
	c, site := SharedCollector(t)
	o.SetCollector(c.URL, site)
	ctx := NewTab(t)
	if !OpenPage(t, ctx, strings.Replace(o.PageURL(map[string]any{"flushMs": 200}, false), o.URL, front, 1)) {
		t.Fatalf("itlmon did not become ready: %s", Eval[string](t, ctx, `itlmon.timing.error`))
	}
	return c, ctx, site
}

// slowHeaders answers a streamed completion only after wait (or never, when
// the client leaves first); with hangUp, it closes the connection without
// an answer instead.
func slowHeaders(wait time.Duration, hangUp bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return
		}
		if hangUp {
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
				}
			}
			return
		}
		demo.Completions().ServeHTTP(w, r)
	})
}

// TestBeforeHeaders: a request that looks like a streamed completion is
// measured from the moment it is issued, so one that ends before any
// response headers arrive is stored: aborted by the page (the user gave up
// while a buffering proxy held the answer), or a network error, with the
// time waited and no headers.
func TestBeforeHeaders(t *testing.T) {
	t.Parallel()
	Browser(t)
	o := StartOrigin(t)
	o.Handle("/slow/v1/chat/completions", slowHeaders(30*time.Second, false))
	o.Handle("/slow/v1/other", slowHeaders(30*time.Second, false))
	o.Handle("/hangup/api/chat", slowHeaders(300*time.Millisecond, true))
	c, ctx, site := sharedStoredPage(t, o, o.URL)
	type result struct {
		Err     string        `json:"err"`
		Summary []pageSummary `json:"summary"`
	}
	run := func(path, body string, abortMs int) result {
		t.Helper()
		return Eval[result](t, ctx, `(async (path, body, abortMs) => {
			const n = e2e.summaries.length, ac = new AbortController();
			const p = fetch(path, { method: 'POST', body, signal: ac.signal, headers: { 'Content-Type': 'application/json' } });
			if (abortMs) setTimeout(() => ac.abort(), abortMs); // after the fetch was issued
			let err = '';
			try { await p; } catch (e) { err = e.name; }
			await itlmon.settled();
			return { err, summary: e2e.summaries.slice(n) };
		})(`+jsString(path)+`, `+jsString(body)+`, `+strconv.Itoa(abortMs)+`)`)
	}

	// Aborted after 400 ms: an OpenAI-style body asking for a stream.
	ab := run("/slow/v1/chat/completions?tokens=5", `{"model":"wait-model","stream":true,"messages":[]}`, 400)
	if ab.Err != "AbortError" || len(ab.Summary) != 1 {
		t.Fatalf("abort before headers: page error %q, summaries %+v; want AbortError and one summary", ab.Err, ab.Summary)
	}
	// The page's clock has 100 µs steps (jittered): waits are compared with 1 ms to spare.
	if s := ab.Summary[0]; s.Status != "aborted" || s.End != "abort" || s.HeadersMs != -1 || s.HTTPStatus != 0 || s.DurationMs < 399 || s.Model != "wait-model" {
		t.Fatalf("abort before headers: summary %+v; want aborted/abort, headersMs -1, HTTP status 0, >= 400 ms waited", s)
	}
	// A network error before the headers: an Ollama-style endpoint (POST
	// /api/chat, whose body need not say stream: its default is true).
	ne := run("/hangup/api/chat", `{"model":"hang-model","messages":[]}`, 0)
	if ne.Err != "TypeError" || len(ne.Summary) != 1 {
		t.Fatalf("network error before headers: page error %q, summaries %+v; want TypeError and one summary", ne.Err, ne.Summary)
	}
	if s := ne.Summary[0]; s.Status != "error" || s.End != "error" || s.HeadersMs != -1 || s.DurationMs < 299 {
		t.Fatalf("network error before headers: summary %+v; want error/error, headersMs -1, >= 300 ms waited", s)
	}
	// Not streams: a body that says stream: false, one whose "stream" is
	// not at its top level (on a path that is no endpoint), and a GET.
	if r := run("/slow/v1/other", `{"model":"m","options":{"stream":true}}`, 100); r.Err != "AbortError" || len(r.Summary) != 0 {
		t.Fatalf("nested stream: true aborted: error %q, summaries %+v; want AbortError and none", r.Err, r.Summary)
	}
	if r := run("/slow/v1/chat/completions", `{"model":"m","stream":false}`, 100); r.Err != "AbortError" || len(r.Summary) != 0 {
		t.Fatalf("stream: false aborted: error %q, summaries %+v; want AbortError and none", r.Err, r.Summary)
	}
	if n := Eval[int](t, ctx, `(async () => { const n = e2e.summaries.length, ac = new AbortController(); setTimeout(() => ac.abort(), 100);
		try { await fetch('/slow/v1/chat/completions', { signal: ac.signal }); } catch (e) {} await itlmon.settled(); return e2e.summaries.length - n; })()`); n != 0 {
		t.Fatalf("an aborted GET gave %d summaries, want 0", n)
	}

	rows := WaitStreams(t, c, site, 2)
	r := StreamByID(t, rows, ab.Summary[0].ID)
	if r.Status != statusAborted || r.HTTPStatus != 0 || r.ContentEvents != 0 || r.TTFBMs != nil || r.DurationMs == nil || *r.DurationMs < 399 {
		t.Fatalf("stored abort before headers: %+v; want aborted, HTTP status 0, no bytes, >= 400 ms", r)
	}
	if r.URLPath != "/slow/v1/chat/completions" || r.Model != "wait-model" {
		t.Fatalf("stored url_path %q model %q", r.URLPath, r.Model)
	}
	StreamByID(t, rows, ne.Summary[0].ID)
}

// TestBeforeHeadersBufferingProxy: behind nginx with proxy_buffering on and
// gzip on text/event-stream, the response headers arrive only with the whole
// answer, at its end (measured: e2e/nginx). A user who gives up before then
// is the worst experience there is: stored as aborted before the first byte
// (no headers, HTTP status 0) with the time waited, and counted by the read
// side the dashboard and `gate rum` share (/api/summary: before_headers).
func TestBeforeHeadersBufferingProxy(t *testing.T) {
	t.Parallel()
	nginx.RequireReal(t)
	Browser(t)
	o := StartOrigin(t)
	o.Handle("/v1/attr", http.HandlerFunc(attrStreamHandler)) // no X-Accel-Buffering (the demo sends it)
	px := nginx.Start(t, nginx.Options{Upstream: o.URL, Buffering: true, Gzip: true})
	c, ctx, site := sharedStoredPage(t, o, px.URL())
	// 100 tokens at attrCadence: the proxy answers after ~2 s; the page gives up at 800 ms.
	read := RunStream(t, ctx, StreamOpts{Path: "/v1/attr", Query: "tokens=100", AbortAfterMs: 800})
	if read.ErrorName != "AbortError" || read.Status != 0 || read.Bytes != 0 {
		t.Fatalf("page: status %d, %d bytes, error %q (%s); want an AbortError before the headers", read.Status, read.Bytes, read.ErrorName, read.Error)
	}
	rows := WaitStreams(t, c, site, 1)
	r := rows[0]
	if r.Status != statusAborted || r.End != "abort" || !r.BeforeHeaders || r.HeadersMs != nil || r.HTTPStatus != 0 ||
		r.TTFBMs != nil || r.Bytes != 0 || r.DurationMs == nil || *r.DurationMs < 799 || *r.DurationMs > 1900 {
		t.Fatalf("stored %+v (duration %v); want aborted/abort before the headers, HTTP 0, no bytes, 800 ms to 1.9 s waited", r, deref64(r.DurationMs))
	}
	// The rollup is written by a materialized view after the raw row's part
	// is committed (ClickHouse does not commit the two together), so the row
	// can be readable a moment before the rollup counts it: poll.
	type report struct {
		Streams       int64   `json:"streams"`
		Aborted       int64   `json:"aborted"`
		BeforeHeaders int64   `json:"before_headers"`
		WaitMs        float64 `json:"before_headers_wait_ms"`
	}
	var rep report
	Eventually(10*time.Second, 50*time.Millisecond, func() bool {
		resp, err := http.Get(c.URL + "/api/summary?site=" + site + "&since=1h")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/api/summary: %s: %s", resp.Status, b)
		}
		var sum struct {
			Report report `json:"report"`
		}
		if err := json.Unmarshal(b, &sum); err != nil {
			t.Fatalf("/api/summary: %v", err)
		}
		rep = sum.Report
		return rep.Streams > 0
	})
	if rep.Streams != 1 || rep.Aborted != 1 || rep.BeforeHeaders != 1 || rep.WaitMs < 799 {
		t.Fatalf("/api/summary report %+v; want 1 stream, aborted before the headers after >= 800 ms", rep)
	}
}

func deref64(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestBodyNetworkError: a body that fails mid-stream (the connection drops
// after three content events, no terminal event) is stored as a network
// error once its grace has passed without a pagehide (see endOnError in
// itl.js), and settled() waits for it. The connection drops once the page
// says it has read the three events (/drop/read): a stream that errors
// discards the chunks queued in it and not read yet (the Streams standard's
// error, with or without itlmon), so a page slower than the network sees the
// error first (a fresh-clone CI, 2026-12-06, on a busy machine: a TypeError
// after 0 bytes, 2 ms after the headers, the three events sent over 60 ms
// before the drop).
func TestBodyNetworkError(t *testing.T) {
	t.Parallel()
	Browser(t)
	o := StartOrigin(t)
	read := make(chan struct{})
	var readOnce sync.Once
	o.Handle("/drop/read", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		readOnce.Do(func() { close(read) })
		w.WriteHeader(http.StatusNoContent)
	}))
	o.Handle("/drop/v1/chat/completions", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", demo.Token(i))
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond) // sleep: the stream's cadence (the origin's side of the scenario), not a wait
		}
		select {
		case <-read:
		case <-r.Context().Done():
			return
		}
		if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
			c.Close() // mid-body: the chunked encoding never ends
		}
	}))
	c, ctx, site := sharedStoredPage(t, o, o.URL)
	type result struct {
		Err     string        `json:"err"`
		Bytes   int           `json:"bytes"`
		Summary []pageSummary `json:"summary"`
	}
	got := Eval[result](t, ctx, `(async () => {
		const n = e2e.summaries.length;
		let err = '', bytes = 0;
		try {
			const r = await fetch('/drop/v1/chat/completions', { method: 'POST', body: '{"stream":true}' });
			const rd = r.body.getReader(), dec = new TextDecoder();
			let text = '', told = false;
			for (;;) {
				const x = await rd.read();
				if (x.done) break;
				bytes += x.value.byteLength;
				text += dec.decode(x.value, { stream: true });
				if (!told && text.split('data: ').length > 3) { told = true; await fetch('/drop/read'); }
			}
		} catch (e) { err = e.name; }
		await itlmon.settled();
		return { err, bytes, summary: e2e.summaries.slice(n) };
	})()`)
	if got.Err != "TypeError" || got.Bytes == 0 || len(got.Summary) != 1 {
		t.Fatalf("page: error %q after %d bytes, summaries %+v; want TypeError after some bytes and one summary", got.Err, got.Bytes, got.Summary)
	}
	s := got.Summary[0]
	if s.Status != "error" || s.End != "error" || s.ContentEvents != 3 || s.HeadersMs < 0 {
		t.Fatalf("summary %+v; want error/error with 3 content events and headers", s)
	}
	r := StreamByID(t, WaitStreams(t, c, site, 1), s.ID)
	if r.Status != "error" || r.ContentEvents != 3 || r.HTTPStatus != 200 {
		t.Fatalf("stored %+v; want error, 3 content events, HTTP 200", r)
	}
}

// TestCancelAfterDone: an SDK that stops reading at its terminal event and
// cancels the body (the OpenAI JS SDK 7 after `data: [DONE]`, while the
// origin has not ended the body yet) completed its answer: the stream is
// complete, closed after its end, not aborted.
func TestCancelAfterDone(t *testing.T) {
	t.Parallel()
	o := StartOrigin(t)
	serveOpenAI(t, o)
	if v := sdkVersion(t); !strings.HasPrefix(v, "7.") {
		requireReal(t, "openai JS SDK 7 (OPENAI_JS_DIR)", errors.New("version "+v+" does not cancel the body after [DONE]; run make deps-openai-js"))
	}
	// The demo stream, then a pause between [DONE] and the end of the body.
	o.Handle("/tail/v1/chat/completions", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := demo.ParseParams(r.URL.Query(), "", nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for _, ev := range strings.SplitAfter(string(p.Body()), "\n\n") {
			if ev == "" {
				continue
			}
			w.Write([]byte(ev))
			f.Flush()
			time.Sleep(5 * time.Millisecond) // sleep: the stream's cadence (the origin's side of the scenario), not a wait
		}
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
	}))
	a := StartAssets(t)
	o.SetCollector(a.URL, "e2e")
	ctx := NewTab(t)
	if !OpenPage(t, ctx, o.PageURL(nil, false)) {
		t.Fatal("itlmon did not become ready")
	}
	type result struct {
		Chunks  int         `json:"chunks"`
		Summary pageSummary `json:"summary"`
		N       int         `json:"n"`
	}
	got := Eval[result](t, ctx, `(async () => {
		const { default: OpenAI } = await import('/openai/index.mjs');
		const client = new OpenAI({ apiKey: 'sk-test', baseURL: location.origin + '/tail/v1', dangerouslyAllowBrowser: true, maxRetries: 0 });
		const stream = await client.chat.completions.create({ model: 'sdk-model', stream: true, messages: [] }, { query: { tokens: 20, interval_ms: 5 } });
		let chunks = 0;
		for await (const c of stream) chunks++;
		await itlmon.settled();
		return { chunks, n: e2e.summaries.length, summary: e2e.summaries[e2e.summaries.length - 1] };
	})()`)
	if s := got.Summary; got.N != 1 || s.Status != "complete" || s.End != "closed_after_end" || s.ContentEvents != 20 {
		t.Fatalf("after the SDK cancelled at [DONE]: %d summaries, last %+v; want one complete/closed_after_end with 20 content events", got.N, s)
	}
}

// TestCollectedBodies: a body the page drops unread does not hold its
// measurement open for good, and a body the page is still reading is never
// ended, whatever the engine's FinalizationRegistry says. A collected body
// marks its stream; marked streams end (as cancelled, at their last read)
// when their slot is needed, at pagehide, or after a long silence (_sweep
// runs that check at once here).
func TestCollectedBodies(t *testing.T) {
	// Not parallel: it waits for the garbage collector of the renderer other
	// tabs share.
	o := StartOrigin(t)
	a := StartAssets(t)
	o.SetCollector(a.URL, "e2e")
	ctx := NewTab(t)
	if !OpenPage(t, ctx, o.PageURL(map[string]any{"testHooks": true}, false)) {
		t.Fatal("itlmon did not become ready")
	}

	// A stream the page is reading, marked collected as JavaScriptCore has
	// done: a sweep does not end it, and it is measured to its end.
	type reading struct {
		Ended   int         `json:"ended"`
		Summary pageSummary `json:"summary"`
	}
	got := Eval[reading](t, ctx, `(async () => {
		const r = await fetch('/v1/chat/completions?tokens=100&interval_ms=10');
		const reader = r.body.getReader();
		let reads = 0, ended = -1;
		for (;;) {
			const x = await reader.read();
			if (x.done) break;
			if (++reads === 20) { itlmon._collected(); await new Promise(r => setTimeout(r, 50)); ended = itlmon._sweep(0); }
		}
		await itlmon.settled();
		return { ended, summary: e2e.summaries[e2e.summaries.length - 1] };
	})()`)
	if got.Ended != 0 || got.Summary.Status != "complete" || got.Summary.ContentEvents != 100 {
		t.Fatalf("a stream being read, marked collected: the sweep ended %d; summary %+v; want 0 ended and a complete stream of 100", got.Ended, got.Summary)
	}

	// Long streams, never read: the shim reads ahead until its queue is full
	// and then waits for the page, which has let go of the responses.
	open := Eval[float64](t, ctx, `(async () => {
		for (let i = 0; i < 3; i++) await fetch('/v1/chat/completions?tokens=2000&interval_ms=2');
		await new Promise(r => setTimeout(r, 1500));
		return (await itlmon._stats()).open;
	})()`)
	if open != 3 {
		t.Fatalf("%v streams open before the collection, want 3", open)
	}
	// A collection, then a look whether the module was told (its
	// FinalizationRegistry callbacks run some time after the collection).
	if !Eventually(20*time.Second, 100*time.Millisecond, func() bool {
		if Eval[int](t, ctx, `itlmon.timing.collected`) >= 3 {
			return true
		}
		if _, err := chromedp.Call(ctx, heapprofiler.CollectGarbage, cdp.Empty{}); err != nil {
			t.Fatalf("collect garbage: %v", err)
		}
		return false
	}) {
		t.Fatalf("%d bodies reported collected 20 s after they were dropped, want 3", Eval[int](t, ctx, `itlmon.timing.collected`))
	}
	if n := Eval[float64](t, ctx, `itlmon._stats().then(s => s.open)`); n != 3 {
		t.Fatalf("%v streams open after their bodies were collected, want 3: a collected body only marks its stream", n)
	}
	if n := Eval[int](t, ctx, `itlmon._sweep(0)`); n != 3 {
		t.Fatalf("the sweep ended %d streams, want 3", n)
	}
	if n := Eval[float64](t, ctx, `itlmon._stats().then(s => s.open)`); n != 0 {
		t.Fatalf("%v streams open after the sweep, want 0", n)
	}
	var aborted int
	for _, s := range PageSummaries(t, ctx) {
		if s.Status == "aborted" {
			aborted++
		}
	}
	if aborted != 3 {
		t.Fatalf("%d summaries with status aborted, want 3", aborted)
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
