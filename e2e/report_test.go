package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"testing"
	"time"
)

// TestBrowserReport prints the browser module's size and cost report (make
// bench sets ITLMON_BENCH_REPORT=1): itl.wasm raw / gzip / brotli, time to
// ready in Chromium (loader start -> fetch wrapped), and the cost added per
// chunk, measured in the same page in the same run: one local stream of N SSE
// chunks read through the page's plain Response and through the shim (the
// page's stream pulling the original plus the module's per-chunk work).
// The cost is measured twice, with the module in its Worker (the default)
// and on the main thread (worker: false). Both are main-thread time: what the
// page pays. Targets: <= 500 KB brotli, <= 10 µs per chunk (the default
// mode). It reports; it does not assert timings.
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
	a := StartAssets(t)
	o.SetCollector(a.URL, "bench")
	ctx := NewTab(t)

	const loads = 5
	var ready []float64
	for range loads {
		if !OpenPage(t, ctx, o.PageURL(map[string]any{"testHooks": true}, false)) {
			t.Fatal("itlmon did not become ready")
		}
		ready = append(ready, Eval[float64](t, ctx, `itlmon.timing.readyAt - itlmon.timing.loaderStart`))
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
		mainReady = append(mainReady, Eval[float64](t, mainCtx, `itlmon.timing.readyAt - itlmon.timing.loaderStart`))
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
		brS, brOK = kb(len(br)), len(br) <= 500_000
	}
	fmt.Printf("\nitlmon browser module report (%s)\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("  %-40s %14s   %s\n", "metric", "value", "target")
	fmt.Printf("  %-40s %14s\n", "itl.wasm raw", kb(len(raw)))
	fmt.Printf("  %-40s %14s\n", "itl.wasm gzip -9", kb(len(gz)))
	fmt.Printf("  %-40s %14s   <= 500 KB %s\n", "itl.wasm brotli -q 11", brS, verdict(brOK))
	fmt.Printf("  %-40s %11.1f ms   (median of %d loads, min %.1f, max %.1f)\n", "time to ready (loader start -> wrapped)",
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
