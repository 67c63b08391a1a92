package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/itlmon/itlmon/e2e/browsers"
	"github.com/itlmon/itlmon/web"
)

// TestBrowserReport prints the browser module's size and cost report (make
// bench sets ITLMON_BENCH_REPORT=1), each figure next to its goal and its
// baseline from the same run (the machine may be busy: a ratio to a
// baseline holds where an absolute time does not):
//   - what the page's load costs, installed with the inline snippet and with
//     the one synchronous tag, against the same page without itlmon (paired
//     loads; see loadCost). Goal: the load event at most 3 ms later.
//   - itl.wasm raw / gzip / brotli.
//   - time to ready in Chromium (module requested -> ready to parse), on a
//     page whose app streams at once, against that page's own first fetch
//     (issued -> body end): streams before ready are queued, so ready matters
//     only as long as the queue holds (see firstFetch).
//   - the main-thread cost added per chunk, measured in the same page in the
//     same run: one local stream of N SSE chunks read through the page's
//     plain Response and through the shim (the page's stream pulling the
//     original plus the module's per-chunk work), with the module in its
//     Worker (the default) and on the main thread (worker: false). Goal: at
//     most 1.0x a plain read of the same chunk, in both modes.
//
// Best, median and worst are over the rounds (paired loads, paired reads).
// It reports; it does not assert timings.
func TestBrowserReport(t *testing.T) {
	if os.Getenv("ITLMON_BENCH_REPORT") == "" {
		t.Skip("report only: set ITLMON_BENCH_REPORT=1 (make bench)")
	}
	dist := moduleDist(t)
	raw := mustRead(t, dist, "itl.wasm")
	gz, err := fs.ReadFile(dist, "itl.wasm.gz")
	if err != nil {
		var b bytes.Buffer
		w, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		w.Write(raw)
		w.Close()
		gz = b.Bytes()
	}
	br, _ := fs.ReadFile(dist, "itl.wasm.br")

	o := StartOrigin(t)
	lc := loadCost(t, o)
	a := StartAssets(t)
	o.SetCollector(a.URL, "bench")
	ctx := NewTab(t)

	const loads = 5
	ready, mainReady := firstFetch(t, o, a, false, loads), firstFetch(t, o, a, true, loads)
	// The same reads with the module in its Worker (the default) and on the
	// main thread (worker: false, or where a page forbids workers), in two
	// tabs side by side.
	if !OpenPage(t, ctx, o.PageURL(map[string]any{"testHooks": true}, false)) {
		t.Fatal("itlmon did not become ready")
	}
	mainCtx := NewTab(t)
	if !OpenPage(t, mainCtx, o.PageURL(map[string]any{"testHooks": true, "worker": false}, false)) {
		t.Fatal("itlmon did not become ready on the main thread")
	}
	worker, mainThread := browserCost(t, ctx), browserCost(t, mainCtx)

	kb := func(n int) string { return fmt.Sprintf("%.0f KB", float64(n)/1000) }
	verdict := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "OVER"
	}
	brS, brOK := "n/a (no brotli)", true
	if len(br) > 0 {
		brS, brOK = kb(len(br)), len(br) <= 485_000
	}
	fmt.Printf("\nitlmon browser module report (%s)\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("  %-40s %14s   %s\n", "metric", "value", "target")
	lc.print(kb, verdict)
	fmt.Printf("  %-40s %14s\n", "itl.wasm raw", kb(len(raw)))
	fmt.Printf("  %-40s %14s\n", "itl.wasm gzip -9", kb(len(gz)))
	fmt.Printf("  %-40s %14s   <= 485 KB %s\n", "itl.wasm brotli -q 11", brS, verdict(brOK))
	ready.print("module in its Worker (default)")
	mainReady.print("module on the main thread")
	worker.print("module in its Worker (default)", "posting batches to the Worker")
	mainThread.print("module on the main thread", "in the Go module (meter)")
	fmt.Println()
}

// cost is what costJS measured in one tab.
type cost struct {
	N           int
	With, Plain []float64 // ms per run, paired by round
	FeedUs      float64   // main-thread time handing batches to the module, per chunk
	FeedCalls   int
}

func browserCost(t *testing.T, ctx context.Context) cost {
	// Minutes on a busy machine: N chunks x R rounds x 2.
	return evalFor[cost](t, browsers.ChromiumTab(ctx, nil), 10*time.Minute, costJS)
}

// bmw formats the best, median and worst of v (lowest is best) with format f.
func bmw(f string, v []float64) string {
	return fmt.Sprintf("best "+f+", median "+f+", worst "+f, slices.Min(v), median(v), slices.Max(v))
}

// print reports the added cost per chunk: per round, the paired difference
// (each round reads the stream once each way, back to back, the order
// alternating), so drifts in the machine's speed cancel out, and its ratio
// to that round's plain read (the baseline). Goal: at most 1.0x.
func (c cost) print(title, feedLabel string) {
	us := func(ms float64) float64 { return ms * 1000 / float64(c.N) }
	var added, plain, ratio []float64
	for i := range c.With {
		added = append(added, us(c.With[i]-c.Plain[i]))
		plain = append(plain, us(c.Plain[i]))
		ratio = append(ratio, (c.With[i]-c.Plain[i])/c.Plain[i])
	}
	perChunk, r := median(added), median(ratio)
	fmt.Printf("  %s, per chunk (%d chunks x %d rounds):\n", title, c.N, len(plain))
	fmt.Printf("  %-40s %11.2f µs   baseline (%s)\n", "  one plain read", median(plain), bmw("%.2f", plain))
	fmt.Printf("  %-40s %11.2f µs   (%s)\n", "  added by itlmon (main thread)", perChunk, bmw("%.2f", added))
	fmt.Printf("  %-40s %11.2fx      goal <= 1.00x %s (%s)\n", "  added / plain read", r, okOver(r <= 1), bmw("%.2fx", ratio))
	fmt.Printf("  %-40s %11.2f µs   (%d batches)\n", "    of which "+feedLabel, c.FeedUs, c.FeedCalls)
	fmt.Printf("  %-40s %11.2f µs   (the page's stream pulling the original, stamping, staging)\n", "    of which in JavaScript",
		perChunk-c.FeedUs)
}

func okOver(ok bool) string {
	if ok {
		return "ok"
	}
	return "OVER"
}

// readyCosts is firstFetch's result: per load, the module's time from
// request to ready and the page's own first fetch (issued -> body end).
type readyCosts struct {
	Ready, First []float64
	ReadyFirst   int // loads where the module was ready before that fetch's body ended
}

// firstFetch loads a page installed with the snippet whose app streams at
// once (a streamed completion of 20 tokens 10 ms apart, issued by its
// module script: the stream that starts the module), n times, and returns
// the module's time from request to ready against that fetch's own time.
func firstFetch(t *testing.T, o *Origin, a *Assets, mainThread bool, n int) readyCosts {
	t.Helper()
	init := template.JS("")
	path := "/first-fetch"
	if mainThread {
		init, path = "{ worker: false }", "/first-fetch-main"
	}
	pageURL := servePage(t, o, path, loaderPage{Src: a.URL + "/itl.js", Snippet: true, Init: init, App: `
		e2e.result = (async () => {
			const t0 = performance.now();
			await (await fetch('/v1/chat/completions?tokens=20&interval_ms=10')).text();
			const first = performance.now() - t0, end = performance.now();
			if (!(await itlmon.ready)) return { error: itlmon.timing.error };
			return { first, ready: itlmon.timing.readyAt - itlmon.timing.loadAt, readyFirst: itlmon.timing.readyAt < end };
		})();`})
	ctx := NewTab(t)
	var rc readyCosts
	for range n {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := chromedp.Do(sctx, chromedp.Navigate(pageURL))
		cancel()
		if err != nil {
			t.Fatalf("navigate %s: %v", pageURL, err)
		}
		r := Eval[struct {
			First, Ready float64
			ReadyFirst   bool
			Error        string
		}](t, ctx, `(async () => { while (!window.e2e || !e2e.result) await new Promise(r => setTimeout(r, 5)); return await e2e.result; })()`)
		if r.Error != "" {
			t.Fatalf("itlmon did not become ready: %s", r.Error)
		}
		rc.Ready, rc.First = append(rc.Ready, r.Ready), append(rc.First, r.First)
		if r.ReadyFirst {
			rc.ReadyFirst++
		}
	}
	return rc
}

func (rc readyCosts) print(title string) {
	var ratio []float64
	for i := range rc.Ready {
		ratio = append(ratio, rc.Ready[i]/rc.First[i])
	}
	fmt.Printf("  time to ready, %s (%d loads, the page's app streaming at once):\n", title, len(rc.Ready))
	fmt.Printf("  %-40s %11.1f ms   baseline (%s)\n", "  the page's first fetch, issued -> end", median(rc.First), bmw("%.1f", rc.First))
	fmt.Printf("  %-40s %11.1f ms   (%s)\n", "  module requested -> ready", median(rc.Ready), bmw("%.1f", rc.Ready))
	fmt.Printf("  %-40s %11.2fx      (%s; ready before that fetch ended in %d of %d loads)\n", "  ready / first fetch", median(ratio),
		bmw("%.2fx", ratio), rc.ReadyFirst, len(rc.Ready))
}

// costJS reads N local SSE chunks through a plain Response and through the
// shim, back to back in each of R rounds (alternating which goes first), and
// returns the times. Each read gets a fresh chunk, as from the network. A
// read of the in-memory stream resolves in a microtask, so each stream read
// is one task: the page gets a task of its own between them, as a page
// reading the network does between reads, in which the Worker's messages
// (its mirror, the buffers it gives back) are handled. Without it they waited
// for the end of all the rounds (2026-12-06), and the page kept every
// stream's copy and allocated every stage.
const costJS = `(async () => {
  const N = 5000, R = 101;
  const enc = new TextEncoder();
  const chunks = [];
  for (let i = 0; i < N; i++) chunks.push(enc.encode('data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"content":" tok' + i + '"},"finish_reason":null}]}\n\n'));
  const mk = () => { let i = 0; return new Response(new ReadableStream({ pull(c) { if (i < N) c.enqueue(chunks[i++].slice()); else c.close(); } }, { highWaterMark: 0 }), { headers: { 'content-type': 'text/event-stream' } }); };
  const read = async (resp) => { const r = resp.body.getReader(); let n = 0; for (;;) { const x = await r.read(); if (x.done) break; n += x.value.byteLength; } return n; };
  const run = async (wrapped) => { await new Promise(r => setTimeout(r, 0)); const resp = mk(); const t = performance.now(); await read(wrapped ? itlmon._wrap(resp, '/bench/stream') : resp); return performance.now() - t; };
  await run(false); await run(true); await run(false); await run(true);
  const With = [], Plain = [];
  const f0 = itlmon.timing.feedMs, o0 = itlmon.timing.feedOps, c0 = itlmon.timing.feedCalls;
  for (let k = 0; k < R; k++) {
    if (k % 2) { With.push(await run(true)); Plain.push(await run(false)); }
    else { Plain.push(await run(false)); With.push(await run(true)); }
  }
  return { N: N, With: With, Plain: Plain,
    FeedUs: (itlmon.timing.feedMs - f0) * 1000 / (itlmon.timing.feedOps - o0), FeedCalls: itlmon.timing.feedCalls - c0 };
})()`

func mustRead(t *testing.T, fsys fs.FS, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return b
}

func median(v []float64) float64 { return quartile(v, 2) }

// quartile returns the q-th quartile of v (nearest rank).
func quartile(v []float64, q int) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)*q/4, len(s)-1)]
}

// pageLoad is what the page saw of one load (loaderPage, e2e.atLoad).
type pageLoad struct {
	Entries []struct {
		Name     string  `json:"name"`
		Transfer float64 `json:"transfer"`
		Ms       float64 `json:"ms"` // request start -> response end
	} `json:"entries"`
	DCL      float64 `json:"dcl"`      // domContentLoadedEventEnd
	Load     float64 `json:"load"`     // loadEventEnd
	LoaderMs float64 `json:"loaderMs"` // itl.js's own top-level run, -1 without it
}

// loadCosts is the page's load with itlmon's snippet (Snippet), with its
// one tag (With) and without itlmon, by round.
type loadCosts struct {
	Snippet, With, Without []pageLoad
	Collector              string
	Brotli                 map[string]int // brotli -q 11 sizes of the page-side scripts (0: no brotli)
}

// loadCost loads the same page with the inline snippet (which loads itl.js
// after the load event), with the one tag (synchronous in <head>), both
// from the real collector, which serves itl.js gzip-compressed, and without
// either, in turns, with the browser cache off (a first visit), and
// keeps what was requested from the collector before the load event ended
// (Resource Timing transfer sizes), the loader's own run (performance.now()
// around its top-level code: its parse and compile are not in it, but are in
// the DOMContentLoaded and load times compared) and the page's
// DOMContentLoaded and load event times.
func loadCost(t *testing.T, o *Origin) loadCosts {
	t.Helper()
	c := StartCollector(t)
	with := servePage(t, o, "/cost", loaderPage{Src: c.URL + "/itl.js", Head: true})
	without := servePage(t, o, "/cost-none", loaderPage{Src: c.URL + "/itl.js"})
	snippet := servePage(t, o, "/cost-snippet", loaderPage{Src: c.URL + "/itl.js", Snippet: true})
	ctx := OwnTab(t) // the cache disabled
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("network domain: %v", err)
	}
	if _, err := chromedp.Call(ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		t.Fatalf("disable the cache: %v", err)
	}
	const rounds = 12
	lc := loadCosts{Collector: c.URL, Brotli: map[string]int{}}
	load := func(u string) pageLoad {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, chromedp.Navigate(u)); err != nil {
			t.Fatalf("navigate %s: %v", u, err)
		}
		return Eval[pageLoad](t, ctx, `(async () => {
			while (!window.e2e || !e2e.atLoad) await new Promise(r => setTimeout(r, 5));
			const nav = performance.getEntriesByType('navigation')[0];
			return { entries: e2e.atLoad, dcl: nav.domContentLoadedEventEnd, load: nav.loadEventEnd,
				loaderMs: window.itlmon ? itlmon.timing.loaderMs : -1 };
		})()`)
	}
	// Each round loads the three pages, starting with a different one.
	for i := range rounds {
		for k := range 3 {
			switch (i + k) % 3 {
			case 0:
				lc.Snippet = append(lc.Snippet, load(snippet))
			case 1:
				lc.With = append(lc.With, load(with))
			case 2:
				lc.Without = append(lc.Without, load(without))
			}
		}
	}
	for _, name := range []string{"itl-snippet.js", "itl.js", "itl-module.js", "itl-worker.js"} {
		b, err := fs.ReadFile(web.Dist(), name) // as served (make wasm: without comments)
		if errors.Is(err, fs.ErrNotExist) {
			b, err = fs.ReadFile(web.Static(), name)
		}
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		if out, err := brotliSize(b); err == nil {
			lc.Brotli[name] = out
		}
	}
	return lc
}

// brotliSize returns the size of b compressed by the brotli command at -q 11.
func brotliSize(b []byte) (int, error) {
	cmd := exec.Command("brotli", "-c", "-q", "11")
	cmd.Stdin = bytes.NewReader(b)
	out, err := cmd.Output()
	return len(out), err
}

func (lc loadCosts) print(kb func(int) string, verdict func(bool) string) {
	var bytesWith, fetchMs, loaderMs, dcl, load []float64
	var names []string
	for i, w := range lc.With {
		n := 0.0
		names = names[:0]
		for _, e := range w.Entries {
			if strings.HasPrefix(e.Name, lc.Collector+"/") {
				n += e.Transfer
				names = append(names, strings.TrimPrefix(e.Name, lc.Collector+"/"))
				if strings.HasSuffix(e.Name, "/itl.js") {
					fetchMs = append(fetchMs, e.Ms)
				}
			}
		}
		bytesWith = append(bytesWith, n)
		loaderMs = append(loaderMs, w.LoaderMs)
		dcl = append(dcl, w.DCL-lc.Without[i].DCL)
		load = append(load, w.Load-lc.Without[i].Load)
	}
	for _, w := range lc.Without {
		for _, e := range w.Entries {
			if strings.HasPrefix(e.Name, lc.Collector+"/") {
				names = append(names, "(without itlmon!) "+e.Name)
			}
		}
	}
	br := lc.Brotli["itl.js"]
	fmt.Printf("  %-40s %14s   (transfer, median of %d first visits: %s)\n", "one tag: from the collector before load",
		kb(int(median(bytesWith))), len(lc.With), strings.Join(names, ", "))
	if br > 0 {
		fmt.Printf("  %-40s %14s   <= 15 KB %s\n", "the loader, itl.js, brotli -q 11", kb(br), verdict(br <= 15_000))
		fmt.Printf("  %-40s %14s   (itl-module.js %s, itl-worker.js %s)\n", "fetched lazily, brotli -q 11",
			kb(lc.Brotli["itl-module.js"]+lc.Brotli["itl-worker.js"]), kb(lc.Brotli["itl-module.js"]), kb(lc.Brotli["itl-worker.js"]))
	}
	if len(fetchMs) > 0 {
		fmt.Printf("  %-40s %11.1f ms   (median; quartiles %.1f-%.1f: the parser waits for it)\n", "fetching itl.js (request -> response end)",
			median(fetchMs), quartile(fetchMs, 1), quartile(fetchMs, 3))
	}
	fmt.Printf("  %-40s %11.2f ms   (%s)\n", "the loader's own run (main thread)", median(loaderMs), bmw("%.2f", loaderMs))
	// The snippet's page: nothing may come from the collector before load.
	var early []string
	var sDCL, sLoad []float64
	for i, w := range lc.Snippet {
		for _, e := range w.Entries {
			if strings.HasPrefix(e.Name, lc.Collector+"/") {
				early = append(early, strings.TrimPrefix(e.Name, lc.Collector+"/"))
			}
		}
		sDCL = append(sDCL, w.DCL-lc.Without[i].DCL)
		sLoad = append(sLoad, w.Load-lc.Without[i].Load)
	}
	fmt.Printf("  page load, with - without itlmon (%d paired first visits; baseline: the one tag, same run):\n", len(lc.Snippet))
	fmt.Printf("  %-40s %+11.1f ms   goal <= +3 ms %s (%s; one tag: %+.1f)\n", "  load event end, snippet", median(sLoad),
		okOver(median(sLoad) <= 3), bmw("%+.1f", sLoad), median(load))
	fmt.Printf("  %-40s %+11.1f ms   (%s; one tag: %+.1f)\n", "  DOMContentLoaded, snippet", median(sDCL), bmw("%+.1f", sDCL), median(dcl))
	fmt.Printf("  %-40s %+11.1f ms   (%s)\n", "  load event end, one tag", median(load), bmw("%+.1f", load))
	fmt.Printf("  %-40s %+11.1f ms   (%s)\n", "  DOMContentLoaded, one tag", median(dcl), bmw("%+.1f", dcl))
	if len(early) > 0 {
		fmt.Printf("  %-40s %14s\n", "  snippet: requested before load (!)", strings.Join(early, ", "))
	}
	if br := lc.Brotli["itl-snippet.js"]; br > 0 {
		fmt.Printf("  %-40s %14s   (inline in the page)\n", "  the snippet, brotli -q 11", kb(br))
	}
}
