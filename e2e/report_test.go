package e2e

import (
	"bytes"
	"compress/gzip"
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
// TransformStream plus the module's per-chunk work). Targets: <= 500 KB
// brotli, <= 10 µs per chunk. It reports; it does not assert timings.
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
	type cost struct {
		N                 int
		WithMs, WithoutMs float64
		WithAll, Without  []float64
		FeedUs            float64 // time inside the module's feed, per chunk
		FeedCalls         int
	}
	c := Eval[cost](t, ctx, costJS)
	perChunk := (c.WithMs - c.WithoutMs) * 1000 / float64(c.N)

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
	fmt.Printf("  %-40s %11.1f ms   (%d chunks, median of %d)\n", "read a local stream, plain", c.WithoutMs, c.N, len(c.Without))
	fmt.Printf("  %-40s %11.1f ms\n", "read the same stream through itlmon", c.WithMs)
	fmt.Printf("  %-40s %11.2f µs   (this machine's speed: the added cost is %.1f× it)\n", "one plain read, per chunk",
		c.WithoutMs*1000/float64(c.N), perChunk/(c.WithoutMs*1000/float64(c.N)))
	fmt.Printf("  %-40s %11.2f µs   <= 10 µs %s\n", "added per chunk", perChunk, verdict(perChunk <= 10))
	fmt.Printf("  %-40s %11.2f µs   (%d batched calls)\n\n", "  of which in the Go module (meter)", c.FeedUs, c.FeedCalls)
}

// costJS reads N local SSE chunks through a plain Response and through the
// shim, alternating, and returns the medians. Each read gets a fresh chunk, as
// from the network (the shim's byte stream takes over the chunk's buffer).
const costJS = `(async () => {
  const N = 5000, R = 9;
  const enc = new TextEncoder();
  const chunks = [];
  for (let i = 0; i < N; i++) chunks.push(enc.encode('data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"content":" tok' + i + '"},"finish_reason":null}]}\n\n'));
  const mk = () => { let i = 0; return new Response(new ReadableStream({ pull(c) { if (i < N) c.enqueue(chunks[i++].slice()); else c.close(); } }, { highWaterMark: 0 }), { headers: { 'content-type': 'text/event-stream' } }); };
  const read = async (resp) => { const r = resp.body.getReader(); let n = 0; for (;;) { const x = await r.read(); if (x.done) break; n += x.value.byteLength; } return n; };
  const run = async (wrapped) => { const resp = mk(); const t = performance.now(); await read(wrapped ? itlmon._wrap(resp, '/bench/stream') : resp); return performance.now() - t; };
  await run(false); await run(true);
  const withAll = [], without = [];
  const f0 = itlmon.timing.feedMs, o0 = itlmon.timing.feedOps, c0 = itlmon.timing.feedCalls;
  for (let k = 0; k < R; k++) { without.push(await run(false)); withAll.push(await run(true)); }
  const med = a => a.slice().sort((x, y) => x - y)[a.length >> 1];
  return { N: N, WithMs: med(withAll), WithoutMs: med(without), WithAll: withAll, Without: without,
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

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
