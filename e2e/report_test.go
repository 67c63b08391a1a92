package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/itlmon/itlmon/web"
)

// TestBrowserReport prints the browser module's size and cost report (make
// bench sets ITLMON_BENCH_REPORT=1): what the page's load costs (the loader
// alone: bytes requested from the collector before the load event ended and
// the loader's own run, against the same page without itlmon; see
// loadCost), itl.wasm raw / gzip / brotli, time to ready in Chromium (module
// requested -> ready to parse), and the cost added per
// chunk, measured in the same page in the same run: one local stream of N SSE
// chunks read through the page's plain Response and through the shim (the
// page's stream pulling the original plus the module's per-chunk work).
// The cost is measured twice, with the module in its Worker (the default)
// and on the main thread (worker: false). Both are main-thread time: what the
// page pays. Targets: the loader <= 15 KB brotli, itl.wasm <= 485 KB brotli,
// <= 10 µs per chunk (the default mode). It reports; it does not assert
// timings.
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
	var ready []float64
	for range loads {
		if !OpenPage(t, ctx, o.PageURL(map[string]any{"testHooks": true}, false)) {
			t.Fatal("itlmon did not become ready")
		}
		ready = append(ready, Eval[float64](t, ctx, `itlmon.timing.readyAt - itlmon.timing.loadAt`))
	}
	// The same reads with the module in its Worker (the default) and on the
	// main thread (worker: false, or where a page forbids workers), in two
	// tabs side by side.
	mainCtx := NewTab(t)
	var mainReady []float64
	for range loads {
		if !OpenPage(t, mainCtx, o.PageURL(map[string]any{"testHooks": true, "worker": false}, false)) {
			t.Fatal("itlmon did not become ready on the main thread")
		}
		mainReady = append(mainReady, Eval[float64](t, mainCtx, `itlmon.timing.readyAt - itlmon.timing.loadAt`))
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
	fmt.Printf("  %-40s %11.1f ms   (median of %d loads, min %.1f, max %.1f)\n", "time to ready (module requested -> ready)",
		median(ready), loads, slices.Min(ready), slices.Max(ready))
	fmt.Printf("  %-40s %11.1f ms   (median of %d loads, min %.1f, max %.1f)\n", "  the same, module on the main thread",
		median(mainReady), loads, slices.Min(mainReady), slices.Max(mainReady))
	worker.print("module in its Worker (default)", "posting batches to the Worker", true)
	mainThread.print("module on the main thread", "in the Go module (meter)", false)
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
	return Eval[cost](t, ctx, costJS)
}

// print reports the added cost per chunk: the median over rounds of the
// paired difference (each round reads the stream once each way, back to
// back, the order alternating), so drifts in the machine's speed cancel out.
func (c cost) print(title, feedLabel string, target bool) {
	us := func(ms float64) float64 { return ms * 1000 / float64(c.N) }
	var added, plain []float64
	for i := range c.With {
		added = append(added, us(c.With[i]-c.Plain[i]))
		plain = append(plain, us(c.Plain[i]))
	}
	perChunk, plainChunk := median(added), median(plain)
	fmt.Printf("  %s:\n", title)
	fmt.Printf("  %-40s %11.2f µs   (%d chunks x %d rounds; quartiles %.2f-%.2f)\n", "  one plain read, per chunk",
		plainChunk, c.N, len(plain), quartile(plain, 1), quartile(plain, 3))
	verdict := ""
	if target {
		verdict = "<= 10 µs OVER "
		if perChunk <= 10 {
			verdict = "<= 10 µs ok "
		}
	}
	fmt.Printf("  %-40s %11.2f µs   %s(quartiles %.2f-%.2f; %.2fx a plain read)\n", "  added per chunk (main thread)",
		perChunk, verdict, quartile(added, 1), quartile(added, 3), perChunk/plainChunk)
	fmt.Printf("  %-40s %11.2f µs   (%d batches)\n", "    of which "+feedLabel, c.FeedUs, c.FeedCalls)
	fmt.Printf("  %-40s %11.2f µs   (the page's stream pulling the network's, stamping, staging)\n", "    of which in JavaScript",
		perChunk-c.FeedUs)
}

// costJS reads N local SSE chunks through a plain Response and through the
// shim, back to back in each of R rounds (alternating which goes first), and
// returns the times. Each read gets a fresh chunk, as from the network.
const costJS = `(async () => {
  const N = 5000, R = 31;
  const enc = new TextEncoder();
  const chunks = [];
  for (let i = 0; i < N; i++) chunks.push(enc.encode('data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"content":" tok' + i + '"},"finish_reason":null}]}\n\n'));
  const mk = () => { let i = 0; return new Response(new ReadableStream({ pull(c) { if (i < N) c.enqueue(chunks[i++].slice()); else c.close(); } }, { highWaterMark: 0 }), { headers: { 'content-type': 'text/event-stream' } }); };
  const read = async (resp) => { const r = resp.body.getReader(); let n = 0; for (;;) { const x = await r.read(); if (x.done) break; n += x.value.byteLength; } return n; };
  const run = async (wrapped) => { const resp = mk(); const t = performance.now(); await read(wrapped ? itlmon._wrap(resp, '/bench/stream') : resp); return performance.now() - t; };
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

// loadCosts is the page's load with and without itlmon, paired by round.
type loadCosts struct {
	With, Without []pageLoad
	Collector     string
	Brotli        map[string]int // brotli -q 11 sizes of the page-side scripts (0: no brotli)
}

// loadCost loads the same page with the tag as the README says (synchronous
// in <head>, from the real collector, which serves it gzip-compressed) and
// without it, alternately, with the browser cache off (a first visit), and
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
	ctx := NewTab(t)
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("network domain: %v", err)
	}
	if _, err := chromedp.Call(ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		t.Fatalf("disable the cache: %v", err)
	}
	const rounds = 9
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
	for i := range rounds {
		if i%2 == 0 {
			lc.With = append(lc.With, load(with))
			lc.Without = append(lc.Without, load(without))
		} else {
			lc.Without = append(lc.Without, load(without))
			lc.With = append(lc.With, load(with))
		}
	}
	for _, name := range []string{"itl.js", "itl-module.js", "itl-worker.js"} {
		b, err := fs.ReadFile(web.Static(), name)
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
	fmt.Printf("  %-40s %14s   (transfer, median of %d first visits: %s)\n", "requested from the collector before load",
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
	fmt.Printf("  %-40s %11.2f ms   (median; quartiles %.2f-%.2f)\n", "the loader's own run (main thread)",
		median(loaderMs), quartile(loaderMs, 1), quartile(loaderMs, 3))
	fmt.Printf("  %-40s %+11.1f ms   (median of paired loads; quartiles %+.1f to %+.1f)\n", "DOMContentLoaded, with - without",
		median(dcl), quartile(dcl, 1), quartile(dcl, 3))
	fmt.Printf("  %-40s %+11.1f ms   (median of paired loads; quartiles %+.1f to %+.1f)\n", "load event end, with - without",
		median(load), quartile(load, 1), quartile(load, 3))
}
