package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/itlmon/itlmon/collector/demo"
)

// wantBody returns the exact bytes the demo endpoint sends for query q.
func wantBody(t *testing.T, q string) (n int, sum string) {
	t.Helper()
	vals, err := url.ParseQuery(q)
	if err != nil {
		t.Fatalf("query %q: %v", q, err)
	}
	p, err := demo.ParseParams(vals, "", []byte(`{"model":"e2e-model"}`))
	if err != nil {
		t.Fatalf("params %q: %v", q, err)
	}
	b := p.Body()
	h := sha256.Sum256(b)
	return len(b), hex.EncodeToString(h[:])
}

// TestByteIdentity: what the page reads through the wrapped fetch is exactly
// what the server sent, for awkward framings and every way of reading a body.
func TestByteIdentity(t *testing.T) {
	t.Parallel()
	o, ctx := modulePage(t)
	cases := []struct{ name, query, mode string }{
		{"crlf", "tokens=30&interval_ms=5&crlf=1", "reader"},
		{"multibyte split across writes", "tokens=40&interval_ms=5&split=1", "reader"},
		{"comments and DONE", "tokens=30&interval_ms=5&comments=1", "reader"},
		{"all at once, text()", "tokens=30&interval_ms=2&crlf=1&comments=1&split=1", "text"},
		{"for await", "tokens=30&interval_ms=5&split=1&comments=1", "forawait"},
		{"clone", "tokens=30&interval_ms=5&crlf=1&split=1", "clone"},
		{"bursts", "tokens=48&interval_ms=10&burst=8&split=1", "reader"},
		{"BYOB reader", "tokens=30&interval_ms=5&split=1&burst=3", "byob"},
		{"clone, then a BYOB reader", "tokens=30&interval_ms=5&split=1", "clonebyob"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantN, wantSum := wantBody(t, tc.query)
			got := RunStream(t, ctx, StreamOpts{Query: tc.query, Mode: tc.mode})
			if got.Error != "" {
				t.Fatalf("page error: %s", got.Error)
			}
			if got.Bytes != wantN || got.SHA256 != wantSum {
				t.Fatalf("page read %d bytes sha256 %s, server sent %d bytes sha256 %s", got.Bytes, got.SHA256, wantN, wantSum)
			}
			if (tc.mode == "clone" || tc.mode == "clonebyob") && (got.CloneBytes != wantN || got.CloneSHA256 != wantSum) {
				t.Fatalf("clone read %d bytes sha256 %s, want %d %s", got.CloneBytes, got.CloneSHA256, wantN, wantSum)
			}
			if got.Status != 200 || got.URL != o.URL+"/v1/chat/completions?"+tc.query || got.Type != "basic" || got.Redirected {
				t.Fatalf("response facts: status %d url %q type %q redirected %v", got.Status, got.URL, got.Type, got.Redirected)
			}
		})
	}
	sums := PageSummaries(t, ctx)
	if got, want := len(sums), len(cases); got != want {
		t.Fatalf("itlmon.onStream summaries = %d, want %d (one per measured stream)", got, want)
	}
}

// bothPages runs js in the test page without the module and then with it
// (each in a new tab) and returns both results, and the tab with the module.
func bothPages[T any](t *testing.T, o *Origin, js string) (without, with T, ctx context.Context) {
	t.Helper()
	for _, module := range []bool{false, true} {
		ctx = NewTab(t)
		if ready := OpenPage(t, ctx, o.PageURL(nil, !module)); ready != module {
			t.Fatalf("itlmon ready = %v, want %v", ready, module)
		}
		if module {
			with = Eval[T](t, ctx, js)
		} else {
			without = Eval[T](t, ctx, js)
		}
	}
	return without, with, ctx
}

// TestPassThroughUnmatched: responses that do not match are not wrapped (the
// page gets the original Response object's behaviour, including json()).
func TestPassThroughUnmatched(t *testing.T) {
	t.Parallel()
	_, ctx := modulePage(t)
	got := Eval[map[string]any](t, ctx, `(async () => {
		const r = await fetch('/plain?x=1');
		return { ok: (await r.json()).ok, wrapped: !(r instanceof Response) || Object.getOwnPropertyNames(r).includes('url') };
	})()`)
	if got["ok"] != true || got["wrapped"] != false {
		t.Fatalf("plain fetch = %v, want ok and not wrapped", got)
	}
	if n := len(PageSummaries(t, ctx)); n != 0 {
		t.Fatalf("summaries = %d, want 0 (nothing measured)", n)
	}
	// Errors are the page's own: a refused connection rejects with TypeError.
	name := Eval[string](t, ctx, `fetch('http://127.0.0.1:1/x').then(() => 'resolved', e => e.name)`)
	if name != "TypeError" {
		t.Fatalf("fetch to a closed port rejected with %q, want TypeError", name)
	}
}

// TestModuleMissingOrCrashing: when /itl.wasm is a 404, or the module panics
// or exits, the page's fetch keeps working and bodies stay intact.
func TestModuleMissingOrCrashing(t *testing.T) {
	t.Parallel()
	o := StartOrigin(t)
	const q = "tokens=20&interval_ms=5"
	wantN, wantSum := wantBody(t, q)
	check := func(t *testing.T, ctx context.Context) {
		t.Helper()
		got := RunStream(t, ctx, StreamOpts{Query: q})
		if got.Error != "" || got.Bytes != wantN || got.SHA256 != wantSum {
			t.Fatalf("page read %d bytes sha %s err %q, want %d %s", got.Bytes, got.SHA256, got.Error, wantN, wantSum)
		}
	}

	t.Run("itl.wasm 404", func(t *testing.T) {
		a := StartAssets(t, "itl.wasm")
		o.SetCollector(a.URL, "e2e")
		ctx := NewTab(t)
		if OpenPage(t, ctx, o.PageURL(nil, false)) {
			t.Fatal("itlmon ready without itl.wasm")
		}
		if Eval[bool](t, ctx, `window.fetch !== itlmon.originalFetch`) {
			t.Fatal("fetch replaced although the module failed to load")
		}
		check(t, ctx)
	})
	// Both where the module runs: in its Worker (default) and on the main thread.
	for _, init := range []map[string]any{{"testHooks": true}, {"testHooks": true, "worker": false}} {
		mode := "worker"
		if init["worker"] == false {
			mode = "main thread"
		}
		t.Run("panic in callback, "+mode, func(t *testing.T) {
			a := StartAssets(t)
			o.SetCollector(a.URL, "e2e")
			ctx := NewTab(t)
			if !OpenPage(t, ctx, o.PageURL(init, false)) {
				t.Fatal("itlmon did not become ready")
			}
			if r := Eval[any](t, ctx, `itlmon._crash('callback')`); r != nil {
				t.Fatalf("_crash('callback') = %v, want null (recovered)", r)
			}
			check(t, ctx)
			if !Eval[bool](t, ctx, `itlmon.active`) {
				t.Fatal("module off after a recovered panic")
			}
		})
		t.Run("module exits, "+mode, func(t *testing.T) {
			a := StartAssets(t)
			o.SetCollector(a.URL, "e2e")
			ctx := NewTab(t)
			if !OpenPage(t, ctx, o.PageURL(init, false)) {
				t.Fatal("itlmon did not become ready")
			}
			Eval[bool](t, ctx, `(async () => { await itlmon._crash('exit'); for (let i = 0; i < 100 && itlmon.active; i++) await new Promise(r => setTimeout(r, 50)); return true; })()`)
			check(t, ctx)
			if Eval[bool](t, ctx, `itlmon.active`) {
				t.Fatal("module still active after the Go program exited")
			}
			check(t, ctx)
		})
	}
}

// TestConfig: sampleRate, optOut, match.urls and the model field, in the page.
func TestConfig(t *testing.T) {
	t.Parallel()
	o := StartOrigin(t)
	a := StartAssets(t)
	o.SetCollector(a.URL, "e2e")
	open := func(t *testing.T, init map[string]any) context.Context {
		t.Helper()
		ctx := NewTab(t)
		if !OpenPage(t, ctx, o.PageURL(init, false)) && init["optOut"] != true {
			t.Fatal("itlmon did not become ready")
		}
		return ctx
	}
	t.Run("sampleRate 0 measures nothing", func(t *testing.T) {
		ctx := open(t, map[string]any{"sampleRate": 0})
		RunStream(t, ctx, StreamOpts{Query: "tokens=5&interval_ms=1"})
		if n := len(PageSummaries(t, ctx)); n != 0 {
			t.Fatalf("summaries = %d, want 0", n)
		}
	})
	t.Run("optOut keeps the page's fetch", func(t *testing.T) {
		ctx := open(t, map[string]any{"optOut": true})
		if !Eval[bool](t, ctx, `window.fetch === itlmon.originalFetch && !itlmon.active`) {
			t.Fatal("fetch wrapped although opted out")
		}
		RunStream(t, ctx, StreamOpts{Query: "tokens=5&interval_ms=1"})
		if n := len(PageSummaries(t, ctx)); n != 0 {
			t.Fatalf("summaries = %d, want 0", n)
		}
	})
	t.Run("match.urls measures a JSON endpoint", func(t *testing.T) {
		ctx := open(t, map[string]any{"match": map[string]any{"urls": []string{"/plain"}}})
		Eval[bool](t, ctx, `fetch('/plain?secret=1').then(r => r.json()).then(j => j.ok)`)
		s := PageSummaries(t, ctx)
		if len(s) != 1 || s[0].URL != o.URL+"/plain" {
			t.Fatalf("summaries = %+v, want one for %s/plain (no query)", s, o.URL)
		}
	})
	t.Run("model only from the top-level field", func(t *testing.T) {
		ctx := open(t, nil)
		got := Eval[[]string](t, ctx, `(async () => {
			const bodies = ['{"messages":[{"model":"nested"}],"model":"top\\u002d1"}', '{"x":{"model":"nested"}}', '{"model": 42}'];
			for (const b of bodies) await (await fetch('/v1/chat/completions?tokens=2&interval_ms=1', {method: 'POST', body: b})).text();
			await itlmon.settled();
			return e2e.summaries.map(s => s.model);
		})()`)
		if want := []string{"top-1", "", ""}; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("models = %q, want %q", got, want)
		}
	})
}

// TestRedirected: a measured response that followed a redirect keeps its
// final url and redirected flag, which the Response constructor would drop.
func TestRedirected(t *testing.T) {
	t.Parallel()
	o := StartOrigin(t)
	o.Handle("/r", http.RedirectHandler("/v1/chat/completions?tokens=3&interval_ms=1", http.StatusFound))
	a := StartAssets(t)
	o.SetCollector(a.URL, "e2e")
	for _, module := range []bool{false, true} {
		ctx := NewTab(t)
		if got := OpenPage(t, ctx, o.PageURL(nil, !module)); got != module {
			t.Fatalf("itlmon ready = %v, want %v", got, module)
		}
		got := Eval[map[string]any](t, ctx, `fetch('/r').then(async r => ({ url: r.url, redirected: r.redirected, type: r.type, status: r.status, n: (await r.text()).length, measured: (window.itlmon && await itlmon.settled(), e2e.summaries.length) }))`)
		want := map[string]any{"url": o.URL + "/v1/chat/completions?tokens=3&interval_ms=1", "redirected": true, "type": "basic", "status": float64(200)}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("module %v: %s = %v, want %v", module, k, got[k], v)
			}
		}
		if m := Eval[int](t, ctx, `(window.itlmon ? itlmon.settled() : Promise.resolve()).then(() => e2e.summaries.length)`); module && m != 1 {
			t.Errorf("summaries = %d, want 1", m)
		}
	}
}

// TestAbortDiscardsQueued: aborting a fetch errors its body at once, even
// when chunks have arrived that the page has not read yet (Fetch's "abort the
// fetch"). The module reads ahead of the page, so without care the page would
// still be handed those chunks after the abort (the OpenAI SDK showed it).
func TestAbortDiscardsQueued(t *testing.T) {
	t.Parallel()
	o := StartOrigin(t)
	a := StartAssets(t)
	o.SetCollector(a.URL, "e2e")
	const js = `(async () => {
		const ac = new AbortController();
		const r = await fetch('/v1/chat/completions?tokens=200&interval_ms=5', { signal: ac.signal });
		const reader = r.body.getReader();
		await reader.read();
		await new Promise(res => setTimeout(res, 400)); // more of the stream arrives meanwhile, unread
		ac.abort();
		let after = 0, err = '';
		try { for (;;) { const x = await reader.read(); if (x.done) break; after++; } } catch (e) { err = e.name; }
		await new Promise(res => setTimeout(res, 50));
		if (window.itlmon) await itlmon.settled();
		return { after, err, status: (e2e.summaries[0] || {}).status || '' };
	})()`
	type result struct {
		After  int    `json:"after"`
		Err    string `json:"err"`
		Status string `json:"status"`
	}
	without, with, _ := bothPages[result](t, o, js)
	if with.After != without.After || with.Err != without.Err {
		t.Fatalf("after abort: with itlmon %d chunks, error %q; without %d chunks, error %q", with.After, with.Err, without.After, without.Err)
	}
	if without.Err != "AbortError" {
		t.Fatalf("without itlmon: error %q after abort, want AbortError", without.Err)
	}
	if with.Status != "aborted" {
		t.Fatalf("itlmon status after abort = %q, want aborted", with.Status)
	}
}

// TestPageGlobalsAndClone: the module leaves no globals of Go's wasm_exec.js
// on the page (fs, process, path, Go: a page testing `typeof process` must
// see what it saw before), and a measured response's clone() keeps url,
// redirected and type, and its headers stay immutable, as without it.
func TestPageGlobalsAndClone(t *testing.T) {
	t.Parallel()
	o := StartOrigin(t)
	o.Handle("/r2", http.RedirectHandler("/v1/chat/completions?tokens=3&interval_ms=1", http.StatusFound))
	a := StartAssets(t)
	o.SetCollector(a.URL, "e2e")
	const js = `(async () => {
		const r = await fetch('/r2');
		const c = r.clone();
		let immutable = false;
		try { r.headers.set('x-itlmon-test', '1'); } catch (e) { immutable = true; }
		const n = (await c.text()).length + (await r.text()).length;
		await new Promise(res => setTimeout(res, 50));
		if (window.itlmon) await itlmon.settled();
		return { globals: [typeof fs, typeof process, typeof path, typeof Go].join(','),
			clone: [c.url, c.redirected, c.type, c.status].join(' '), immutable: immutable, n: n, measured: e2e.summaries.length };
	})()`
	type result struct {
		Globals   string `json:"globals"`
		Clone     string `json:"clone"`
		Immutable bool   `json:"immutable"`
		N         int    `json:"n"`
		Measured  int    `json:"measured"`
	}
	without, with, _ := bothPages[result](t, o, js)
	if with.Globals != without.Globals || with.Clone != without.Clone || with.Immutable != without.Immutable || with.N != without.N {
		t.Fatalf("with itlmon %+v, without %+v: want the same globals, clone and headers", with, without)
	}
	if with.Measured != 1 {
		t.Fatalf("measured streams = %d, want 1", with.Measured)
	}
}

// TestAbortListeners: the module listens for aborts on the page's signal only
// while an abort can still change what the page reads. A page that reuses one
// signal for every request does not collect a listener per request, and an
// abort after the whole body arrived, with chunks the page has not read yet,
// still errors the body, as without the module.
func TestAbortListeners(t *testing.T) {
	t.Parallel()
	o := StartOrigin(t)
	a := StartAssets(t)
	o.SetCollector(a.URL, "e2e")
	// The gated answer sends its first chunk, then the rest once the page
	// asks for it (/v1/release): what the page's first read gets is that
	// chunk at most, whatever the machine's load, and the rest is unread.
	var mu sync.Mutex
	gates := map[string]chan struct{}{}
	gate := func(key string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if gates[key] == nil {
			gates[key] = make(chan struct{})
		}
		return gates[key]
	}
	o.Handle("/v1/gated", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		chunks := leaveChunks()
		io.WriteString(w, chunks[0])
		rc.Flush()
		select {
		case <-gate(r.URL.Query().Get("gate")):
		case <-r.Context().Done():
			return
		}
		for _, c := range chunks[1:] {
			io.WriteString(w, c)
			rc.Flush()
		}
	}))
	o.Handle("/v1/release", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(gate(r.URL.Query().Get("gate")))
		w.WriteHeader(http.StatusNoContent)
	}))
	// The body is complete once its resource timing entry is there (added
	// at the response's end, read or not): then the page aborts.
	const arrivedJS = `(async () => {
		const ac = new AbortController();
		const key = Math.random().toString(36).slice(2), url = '/v1/gated?gate=' + key;
		const r = await fetch(url, { signal: ac.signal });
		const reader = r.body.getReader();
		await reader.read();
		await fetch('/v1/release?gate=' + key);
		const full = new URL(url, location.href).href;
		for (let i = 0; !performance.getEntriesByName(full).length; i++) {
			if (i > 2000) throw new Error('the body did not arrive in 20 s');
			await new Promise(res => setTimeout(res, 10));
		}
		ac.abort();
		let after = 0, err = '';
		try { for (;;) { const x = await reader.read(); if (x.done) break; after++; } } catch (e) { err = e.name; }
		return { after, err };
	})()`
	type result struct {
		After int    `json:"after"`
		Err   string `json:"err"`
	}
	without, with, ctx := bothPages[result](t, o, arrivedJS)
	// One signal for many requests, each body read to its end.
	n := Eval[int](t, ctx, `(async () => {
		window.shared = new AbortController();
		for (let i = 0; i < 8; i++) {
			const r = await fetch('/v1/chat/completions?tokens=3&interval_ms=1', { signal: shared.signal });
			const reader = r.body.getReader();
			while (!(await reader.read()).done) {}
		}
		await new Promise(res => setTimeout(res, 50));
		if (window.itlmon) await itlmon.settled();
		return e2e.summaries.length;
	})()`)
	if n < 9 {
		t.Fatalf("itlmon measured %d streams, want 9", n)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	left, err := chromedp.Run(sctx, chromedp.EvaluateAsDevTools[int](`(getEventListeners(shared.signal).abort || []).length`))
	cancel()
	if err != nil {
		t.Fatalf("getEventListeners: %v", err)
	}
	if left != 0 {
		t.Fatalf("%d abort listeners left on a signal whose 8 bodies were read to the end, want 0", left)
	}
	if without.Err != "AbortError" || with != without {
		t.Fatalf("abort after the body arrived: with itlmon %+v, without %+v (want AbortError both)", with, without)
	}
}
