package e2e

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	cdplog "github.com/chromedp/cdproto/log"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/query"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// seedStream measures a synthetic stream (content events ttft, then each gap
// apart; reads as given: each read carries the events listed) with the
// browser module's meter, as the module would.
func seedStream(ttft time.Duration, gaps []time.Duration) beacon.Record {
	m := meter.New(meter.Options{ContentType: "text/event-stream"})
	ev := []byte(`data: {"choices":[{"index":0,"delta":{"content":"tok "}}]}` + "\n\n")
	at := meter.Duration(ttft)
	m.Feed(ev, at)
	for _, g := range gaps {
		at += meter.Duration(g)
		m.Feed(ev, at)
	}
	m.Feed([]byte("data: [DONE]\n\n"), at+meter.Millisecond)
	m.End(at+2*meter.Millisecond, meter.StatusComplete, 200)
	s := m.Summary()
	r := recordOf(&s, "")
	crand.Read(r.StreamID[:])
	return r
}

// seedDashboard inserts what the dashboard's compare and causes views need
// beside the scenarios' real streams: releases r1 and r1b of one cadence
// (24 streams each, 25 ms ± 20 % gaps) and r2 slower (40 ms, TTFT +300 ms).
func seedDashboard(t *testing.T, db *store.DB) {
	t.Helper()
	rng := rand.New(rand.NewPCG(15, 15))
	now := time.Now().UTC()
	var ss []collector.Stream
	add := func(r beacon.Record, ago time.Duration, release, browser string) {
		r.URLOrigin, r.URLPath, r.HTTPProto, r.Model = "https://api.seed.example", "/v1/chat/completions", "h2", "gpt-seed"
		ss = append(ss, collector.Stream{Record: r, Site: attrSite, ReceivedAt: now.Add(-ago), Release: release,
			Country: "DE", Region: "DE-BE", Browser: browser, OS: "Linux", Device: "desktop"})
	}
	gaps := func(n int, every time.Duration) []time.Duration {
		g := make([]time.Duration, n)
		for i := range g {
			g[i] = time.Duration(float64(every) * (0.8 + 0.4*rng.Float64()))
		}
		return g
	}
	for i := range 24 {
		ago := time.Duration(2+i%25) * time.Minute
		add(seedStream(300*time.Millisecond+time.Duration(rng.IntN(100))*time.Millisecond, gaps(30, 25*time.Millisecond)), ago, "r1", "Chrome")
		add(seedStream(300*time.Millisecond+time.Duration(rng.IntN(100))*time.Millisecond, gaps(30, 25*time.Millisecond)), ago, "r1b", "Chrome")
		add(seedStream(600*time.Millisecond+time.Duration(rng.IntN(100))*time.Millisecond, gaps(30, 40*time.Millisecond)), ago, "r2", "Firefox")
	}
	if err := store.InsertDirect(context.Background(), db.Conn(), ss); err != nil {
		t.Fatalf("seed: %v", err)
	}
}

// consoleWatch collects a tab's console errors, uncaught exceptions and
// browser log errors (failed loads).
type consoleWatch struct {
	mu   sync.Mutex
	errs []string
}

func watchConsole(t *testing.T, tab context.Context) *consoleWatch {
	t.Helper()
	w := &consoleWatch{}
	err := chromedp.Listen(tab, func(ev any) {
		var msg string
		switch e := ev.(type) {
		case *cdpruntime.EventConsoleAPICalled:
			if e.Type == cdpruntime.ConsoleAPICalledTypeError || e.Type == cdpruntime.ConsoleAPICalledTypeAssert {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				msg = "console." + string(e.Type) + ": " + strings.Join(parts, " ")
			}
		case *cdpruntime.EventExceptionThrown:
			msg = "exception: " + e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError {
				msg = "log: " + e.Entry.Text + " " + e.Entry.URL
			}
		}
		if msg != "" {
			w.mu.Lock()
			w.errs = append(w.errs, msg)
			w.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return w
}

func (w *consoleWatch) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.errs
	w.errs = nil
	return e
}

// shotsDir is where the dashboard test saves its screenshots:
// $ITLMON_SCREENSHOTS, or a new temporary directory, kept (and logged)
// only when the test fails.
func shotsDir(t *testing.T) string {
	if d := os.Getenv("ITLMON_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d, err := os.MkdirTemp("", "itlmon-dashboard-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dashboard screenshots kept in %s", d)
			return
		}
		os.RemoveAll(d)
	})
	return d
}

// fullBuffersNginx makes nginx pass a response on in full buffers: with
// proxy_buffering on (its default) and the upstream spoken to in HTTP/1.0
// (its default proxy_http_version), the response is not chunked, so its
// event pipe hands a buffer downstream only once the buffer is full or the
// response ended (a chunked HTTP/1.1 response is passed on chunk by chunk,
// buffered or not). 1 KB buffers make attrStream's 2.2 KB answer span
// three; production's 4-8 KB buffers do the same to longer answers.
const fullBuffersNginx = "proxy_http_version 1.0; proxy_buffer_size 1k; proxy_buffers 4 1k;"

// wantStoredFullBuffers checks a stream stored as nginx's full buffers
// deliver it: several reads of several events each, evenly (none with the
// whole answer, none beyond twice the mean), none larger than a buffer,
// while the origin itself streamed smoothly.
func wantStoredFullBuffers(t *testing.T, s attrStored) {
	t.Helper()
	if s.Reads < 2 || s.EventsPerRead < 5 || s.MaxEventsPerRead >= s.ContentEvents || float32(s.MaxEventsPerRead) > 2*s.EventsPerRead || s.BytesPerRead > 1024 {
		t.Errorf("%d reads, %.2f events/read, max %d, %.0f bytes/read; want reads of 1 KB buffers (several, even, none above 1024 bytes)",
			s.Reads, s.EventsPerRead, s.MaxEventsPerRead, s.BytesPerRead)
	}
	if s.OriginStalls != 0 || s.EventsPerFlush > 1.01 {
		t.Errorf("origin stalls %d, events/flush %.2f; want the origin smooth", s.OriginStalls, s.EventsPerFlush)
	}
}

// gzipBlocksQuery is a long answer (6,000 chunks 0.2 ms apart, random
// words: about 330 KB of SSE that gzip makes about 38 KB) for nginx's
// buffered gzip, which passes on about 16 KB of compressed output at a
// time (a short answer stays in the encoder until it ends: scenario 2).
const gzipBlocksQuery = "tokens=6000&every=200&words=random"

// wantStoredGzipBlocks checks a stream stored as nginx's buffered gzip
// delivers a long answer: the whole answer neither in one read nor a few
// events a read, but a few backlogs of hundreds of events, evenly.
func wantStoredGzipBlocks(t *testing.T, s attrStored) {
	t.Helper()
	if s.Reads < 2 || s.EventsPerRead < 100 || s.MaxEventsPerRead >= s.ContentEvents || float32(s.MaxEventsPerRead) > 2*s.EventsPerRead {
		t.Errorf("%d reads, %.2f events/read, max %d; want a few even backlogs of hundreds of events", s.Reads, s.EventsPerRead, s.MaxEventsPerRead)
	}
}

// logReads logs how a stored stream was read (the figures docs/dashboard.md's
// re-chunking table quotes).
func logReads(t *testing.T, path string, s attrStored) {
	t.Helper()
	t.Logf("%s: %d reads, %.2f events/read, max %d, %.0f bytes/read, ITL p50 %d µs, sub-floor %.2f, stalls %d (%v), TTFT %v µs (%s)",
		path, s.Reads, s.EventsPerRead, s.MaxEventsPerRead, s.BytesPerRead, s.GapP50, s.SubFloor, s.Stalls, s.ByCause, deref32(s.TTFTUs), s.TTFTCause)
}

func deref32(p *uint32) any {
	if p == nil {
		return nil
	}
	return *p
}

// dashboardRuns are the real streams dashboardViews shows, streamed and
// stored by TestAttributionBrowser: its scenarios 2 (nginx buffering +
// gzip), 4 (the jitter proxy), 5 (the busy page) and 6 (a 600 ms origin
// pause), and the dashboard's other real re-chunkers (nginx buffering +
// brotli, nginx passing the answer on in full buffers, nginx buffering +
// gzip on a long answer), with their proxies' URLs.
type dashboardRuns struct {
	buffered, jittered, busy, paused         attrStored
	brotlied, full, blocks                   attrStored
	real                                     int // real streams stored, runs again not counted
	brotliURL, fullURL, blocksURL, jitterURL string
}

// dashboardViews checks the stored figures of the re-chunkers, seeds
// releases and page stalls beside the real streams, then opens every
// dashboard view in Chromium: each renders without console errors; the
// causes show origin, network and page; re-chunking names each proxy's read
// pattern with its diagnosis, in the stored figures and on the page
// (buffering + gzip or brotli: one read at the end, with the
// X-Accel-Buffering fix; full buffers and gzip blocks: steady, with the
// proxy_http_version fix; the jitter proxy: held); the paused stream's view
// shades its gap `origin` with the origin's emit times drawn; compare flags
// the seeded regression and not two samples of one cadence; the views fit
// a phone-width screen. Screenshots go to shotsDir.
func dashboardViews(t *testing.T, p *attrPage, runs dashboardRuns) {
	paused, buffered, brotlied, full, blocks, jittered, busy := runs.paused, runs.buffered, runs.brotlied, runs.full, runs.blocks, runs.jittered, runs.busy
	wantStoredCoalesced(t, brotlied)
	logReads(t, "nginx buffering + gzip", buffered)
	logReads(t, "nginx buffering + brotli", brotlied)
	wantStoredFullBuffers(t, full)
	logReads(t, "nginx full 1 KB buffers", full)
	wantStoredGzipBlocks(t, blocks)
	logReads(t, "nginx buffering + gzip, long answer", blocks)
	logReads(t, "jitter proxy", jittered)
	if jittered.Stalls == 0 || jittered.JoinedByCause[meter.CauseNetwork] == 0 {
		t.Errorf("jitter proxy: stalls %d, joined causes %v; want network stalls", jittered.Stalls, jittered.JoinedByCause)
	}
	if busy.Stalls == 0 || busy.ByCause[meter.CausePage] == 0 {
		t.Errorf("busy page: stalls %d, causes %v; want page stalls", busy.Stalls, busy.ByCause)
	}
	var pausedID, nginxOrigin string
	if err := p.col.DB.Conn().QueryRow(context.Background(), "SELECT lower(hex(stream_id)) FROM itl_streams WHERE site = ? AND origin_id = ?",
		attrSite, paused.OriginID).Scan(&pausedID); err != nil {
		t.Fatalf("paused stream id: %v", err)
	}
	if err := p.col.DB.Conn().QueryRow(context.Background(), "SELECT toString(url_origin) FROM itl_streams WHERE site = ? AND origin_id = ?",
		attrSite, buffered.OriginID).Scan(&nginxOrigin); err != nil {
		t.Fatalf("nginx stream: %v", err)
	}
	seedDashboard(t, p.col.DB)

	dir := shotsDir(t)
	tab := OwnTab(t) // its viewport is emulated
	console := watchConsole(t, tab)
	base := p.col.URL + "/dashboard/"
	step := func(what string, a ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, a...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	poll := func(what, expr string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, 20*time.Second)
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Poll[string](expr, chromedp.WithPollingInterval(50*time.Millisecond)))
		if err != nil {
			body, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector("main").innerText`))
			t.Fatalf("%s: %v\npage:\n%s", what, err, body)
		}
		return v
	}
	shot := func(name string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, 20*time.Second)
		defer cancel()
		// Let the charts settle (uPlot draws on the next frame).
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, chromedp.EvalAwaitPromise)); err != nil {
			t.Fatalf("frame: %v", err)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	open := func(view string, q url.Values) {
		t.Helper()
		q.Set("site", attrSite)
		q.Set("since", "1h")
		if view != "" {
			q.Set("view", view)
		}
		step("open "+view, chromedp.Navigate(base+"?"+q.Encode()))
	}
	noErrors := func(view string) {
		t.Helper()
		// The banner shows API errors; the console must be clean.
		if b := poll(view+" banner", `(() => { const b = document.querySelector("#banner"); return b.hidden || !b.classList.contains("err") ? "ok" : b.textContent })()`); b != "ok" {
			t.Errorf("%s: banner %q", view, b)
		}
		if errs := console.take(); len(errs) > 0 {
			t.Errorf("%s: console errors:\n%s", view, strings.Join(errs, "\n"))
		}
	}
	// blueJS is a JavaScript function of image data and a pixel's offset in
	// it: whether the pixel's blue stands out (the dashboard's accent, and
	// the page cause's colour).
	const blueJS = `((d, i) => d[i + 3] > 40 && d[i + 2] - d[i] > 60)`
	// drawn checks that the uPlot in #id has its x scale set (uPlot commits
	// its scales after construction: a failed draw leaves them null) and
	// returns the share of the plot's sampled pixels whose blue stands out
	// (the accent: heat cells, the p50 line, events).
	drawn := func(id string) float64 {
		t.Helper()
		v := poll(id+" drawn", `(() => {
			const u = document.querySelector("#`+id+`")._u;
			if (!u || u.scales.x.min == null || u.scales.x.max == null || !(u.scales.x.max > u.scales.x.min)) return null;
			const b = u.bbox, img = u.ctx.getImageData(b.left, b.top, b.width, b.height).data;
			let n = 0, blue = 0;
			for (let y = 0; y < b.height; y += 3) for (let x = 0; x < b.width; x += 3) {
				const i = 4 * (y * b.width + x); n++;
				if (`+blueJS+`(img, i)) blue++;
			}
			return String(blue / n) })()`)
		var share float64
		fmt.Sscan(v, &share)
		return share
	}
	// bandDrawn returns, for the series labelled label of the stacked chart
	// in #id, how many of the plot's pixels lie inside its band (between its
	// top and the top of the series stacked under it, the lines between the
	// points as uPlot draws them, clear of both lines' strokes) and how many
	// of those are blue (as drawn's). Measured against the data rather than
	// the whole plot: the band's share of the plot is the page stalls' share
	// of the busiest bucket, which is the machine's (CI's slow run: 0.2 %).
	bandDrawn := func(id, label string) (inside, blue int) {
		t.Helper()
		v := poll(id+" band", `(() => {
			const u = document.querySelector("#`+id+`")._u;
			if (!u || u.scales.x.min == null || u.scales.x.max == null || !(u.scales.x.max > u.scales.x.min)) return null;
			const si = u.series.findIndex(s => s.label === `+strconv.Quote(label)+`);
			if (si < 1) return "no series";
			const xs = u.data[0], top = u.data[si], bot = u.data[si + 1] || xs.map(() => 0);
			const b = u.bbox, img = u.ctx.getImageData(b.left, b.top, b.width, b.height).data;
			const px = (v, k) => u.valToPos(v, k, true);
			let inside = 0, blue = 0;
			for (let i = 0; i + 1 < xs.length; i++) {
				const xa = px(xs[i], "x"), xb = px(xs[i + 1], "x");
				// A line 1 px wide spans sqrt(1 + slope²) px of a column.
				const edge = (a, c) => 1 + Math.hypot(1, (px(c, "y") - px(a, "y")) / (xb - xa));
				const mTop = edge(top[i], top[i + 1]), mBot = edge(bot[i], bot[i + 1]);
				for (let x = Math.ceil(xa); x < xb; x++) {
					if (x < b.left || x >= b.left + b.width) continue;
					const f = (x - xa) / (xb - xa);
					const yTop = px(top[i] + f * (top[i + 1] - top[i]), "y"), yBot = px(bot[i] + f * (bot[i + 1] - bot[i]), "y");
					for (let y = Math.ceil(yTop + mTop); y < yBot - mBot; y++) {
						if (y < b.top || y >= b.top + b.height) continue;
						const j = 4 * ((y - b.top) * b.width + (x - b.left));
						inside++;
						if (`+blueJS+`(img, j)) blue++;
					}
				}
			}
			return inside + " " + blue })()`)
		if _, err := fmt.Sscan(v, &inside, &blue); err != nil {
			t.Fatalf("%s band: %s", id, v)
		}
		return inside, blue
	}
	step("viewport", chromedp.EmulateViewport(1280, 900))

	// Overview: uPlot draws the ITL quantiles.
	open("", url.Values{})
	poll("overview chart", `(() => { const u = document.querySelector("#chart")._u; return u && u.series.length === 6 && u.data[0].length > 0 ? "ok" : null })()`)
	// The real streams and 72 seeded, and one more for each scenario run
	// again (a run the machine's load spoiled is stored too).
	var stored uint64
	if err := p.col.DB.Conn().QueryRow(context.Background(), "SELECT count() FROM itl_streams WHERE site = ?", attrSite).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if want := uint64(runs.real + 72); stored < want {
		t.Errorf("%d streams stored, want at least %d (%d real + 72 seeded)", stored, want, runs.real)
	}
	if got := poll("streams tile", `(() => { const v = document.querySelector('.tile[data-k="streams"] .v').textContent; return v === "—" ? null : v })()`); got != strconv.FormatUint(stored, 10) {
		t.Errorf("streams tile = %s, want the %d stored", got, stored)
	}
	drawn("chart")
	shot("1-overview")
	noErrors("overview")

	// Hover shows the values in the legend; a drag zooms on time, and the
	// zoom is in the URL, so the next view opens zoomed the same.
	box := evalJSON[[]float64](t, tab, `(() => { const u = document.querySelector("#chart")._u, r = u.over.getBoundingClientRect(); return [r.left, r.top, r.width, r.height] })()`)
	x0, y0 := box[0]+box[2]*0.3, box[1]+box[3]*0.5
	x1 := box[0] + box[2]*0.7
	step("hover", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, x0, y0))
	if got := poll("legend value", `(() => { const v = document.querySelector("#chart .u-legend .u-series:nth-child(4) .u-value"); return v && /ms$/.test(v.textContent) ? v.textContent : null })()`); got == "" {
		t.Errorf("legend shows no p99 value on hover")
	}
	step("drag", chromedp.MouseEvent(input.DispatchMouseEventTypeMousePressed, x0, y0, chromedp.ButtonLeft, chromedp.ClickCount(1)),
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, (x0+x1)/2, y0, chromedp.ButtonLeft), chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, x1, y0, chromedp.ButtonLeft),
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseReleased, x1, y0, chromedp.ButtonLeft, chromedp.ClickCount(1)))
	zoom := poll("zoom in url", `new URLSearchParams(location.search).get("zoom")`)
	var zFrom, zTo int64
	if _, err := fmt.Sscanf(zoom, "%d-%d", &zFrom, &zTo); err != nil || zTo <= zFrom {
		t.Fatalf("zoom = %q, want from-to", zoom)
	}
	if got := poll("zoomed scale", `(() => { const u = document.querySelector("#chart")._u; return String(Math.round(u.scales.x.min)) + "-" + String(Math.round(u.scales.x.max)) })()`); got != zoom {
		t.Errorf("chart x scale = %s, URL zoom = %s", got, zoom)
	}
	shot("1-overview-zoomed")
	step("causes link", chromedp.Click(chromedp.CSS(`#views a[data-view="causes"]`)))
	if got := poll("causes zoomed", `(() => { const u = document.querySelector("#cause-stalls")._u; return u && u.scales.x.min != null ? String(Math.round(u.scales.x.min)) + "-" + String(Math.round(u.scales.x.max)) : null })()`); got != zoom {
		t.Errorf("causes x scale = %s, want the zoom %s", got, zoom)
	}
	if got := poll("causes url", `location.search`); !strings.Contains(got, "view=causes") || !strings.Contains(got, "zoom="+zoom) {
		t.Errorf("causes URL = %s, want view=causes and the zoom", got)
	}
	noErrors("zoom")

	// Causes: origin (the pause), network and page, per cause and segment.
	open("causes", url.Values{})
	// The tiles show what the scenarios stored: origin (the pause), network
	// (the jitter proxy), page (the busy page).
	var byCause [4]uint64
	if err := p.col.DB.Conn().QueryRow(context.Background(), "SELECT sum(stalls_origin), sum(stalls_network), sum(stalls_page), sum(stalls_unknown) FROM itl_streams WHERE site = ?",
		attrSite).Scan(&byCause[0], &byCause[1], &byCause[2], &byCause[3]); err != nil {
		t.Fatal(err)
	}
	if byCause[0] == 0 || byCause[1] == 0 || byCause[2] == 0 {
		t.Errorf("stored stalls origin, network, page, unknown = %v: want each of the first three", byCause)
	}
	got := poll("cause tiles", `(() => { const t = [...document.querySelectorAll("#cause-tiles .tile")].map(e => e.dataset.cause + "=" + e.querySelector(".v").textContent.split(" ")[0]); return t.length === 4 ? t.join(",") : null })()`)
	if want := fmt.Sprintf("origin=%d,network=%d,page=%d,unknown=%d", byCause[0], byCause[1], byCause[2], byCause[3]); got != want {
		t.Errorf("cause tiles = %s, want %s", got, want)
	}
	poll("cause charts", `(() => { const a = document.querySelector("#cause-stalls")._u, b = document.querySelector("#cause-time")._u; return a && b && a.data[0].length ? "ok" : null })()`)
	// The page stalls (blue) fill their band in both stacked charts: a band
	// of some pixels (the thinnest seen: about 100), nearly all of them blue
	// (the grid under the fills takes the rest).
	for _, id := range []string{"cause-stalls", "cause-time"} {
		inside, blue := bandDrawn(id, "page")
		t.Logf("%s: the page stalls' band: %d pixels, %d blue", id, inside, blue)
		if inside < 20 || float64(blue) < 0.9*float64(inside) {
			t.Errorf("%s: %d of the %d pixels in the page stalls' band are blue, want a band of 20 or more, 90 %% blue", id, blue, inside)
		}
	}
	// The first tokens the proxies held (the buffering one's, and the full
	// buffers' when the first buffer carried it): network.
	var ttftNet uint64
	if err := p.col.DB.Conn().QueryRow(context.Background(), "SELECT countIf(ttft_cause = 'network') FROM itl_streams WHERE site = ?", attrSite).Scan(&ttftNet); err != nil {
		t.Fatal(err)
	}
	if buffered.TTFTCause != "network" || brotlied.TTFTCause != "network" || ttftNet < 2 {
		t.Errorf("stored TTFT causes: nginx gzip %s, brotli %s, network %d; want the buffering nginx streams' network", buffered.TTFTCause, brotlied.TTFTCause, ttftNet)
	}
	if got := poll("ttft mix", `(() => { const e = document.querySelector('#ttft-mix [data-cause="network"]'); return e ? e.textContent : null })()`); !strings.HasPrefix(got, fmt.Sprintf("network %d ", ttftNet)) {
		t.Errorf("TTFT mix network = %q, want the %d stored", got, ttftNet)
	}
	shot("2-causes")
	noErrors("causes")

	// Re-chunking per API origin: nginx (buffering + gzip) is diagnosed a
	// buffering proxy with its fix, nginx in full buffers a buffer that
	// flushes when full with its fix, the jitter proxy a path that holds
	// the bytes; the origin itself (the pause, the busy page) re-chunks
	// nothing: not flagged, or its backlogs put on the page. The stored
	// figures first (what /api/rechunk serves), then the dashboard's list.
	rc, err := query.RechunkBy(context.Background(), p.col.DB.Conn(), query.Filter{Site: attrSite, Since: time.Now().Add(-time.Hour)}, "api_origin")
	if err != nil {
		t.Fatalf("rechunk: %v", err)
	}
	byOrigin := map[string]query.Rechunk{}
	for _, r := range rc {
		byOrigin[r.Key] = r
		t.Logf("rechunk %s: %d streams, %.2f events/read, %.0f bytes/read, sub-floor %.2f, coalesced TTFT %.2f, one read %.2f, steady %.2f, bursty %.2f, page stalls %.2f, network stalls %.2f: %q",
			r.Key, r.Streams, r.EventsPerRead, r.BytesPerRead, r.SubFloorShare, r.CoalescedTTFTShare, r.OneReadShare, r.SteadyShare, r.BurstyShare, r.PageStallShare, r.NetworkStallShare, r.Pattern)
	}
	// The origin middleware's timelines (every stream here is joined) show
	// it emitted one event per flush: each diagnosis says the path did it.
	for key, want := range map[string]string{nginxOrigin: query.PatternOneRead, runs.brotliURL: query.PatternOneRead, runs.fullURL: query.PatternSteady, runs.blocksURL: query.PatternSteady, runs.jitterURL: query.PatternHeld} {
		if got := byOrigin[key]; got.Pattern != want || got.Diagnosis != query.Diagnoses[want]+query.PathConfirmed {
			t.Errorf("stored rechunk of %s: pattern %q, diagnosis %q; want %q and its diagnosis, the path's confirmed by the origin", key, got.Pattern, got.Diagnosis, want)
		}
	}
	open("rechunk", url.Values{})
	got = poll("rechunk diagnosis", `(() => { const d = [...document.querySelectorAll("#diagnoses .diag")].map(e => e.dataset.key + "=" + e.dataset.pattern); return d.length ? d.join(",") : null })()`)
	diag := map[string]string{}
	for _, kv := range strings.Split(got, ",") {
		k, v, _ := strings.Cut(kv, "=")
		diag[k] = v
	}
	if diag[nginxOrigin] != "one_read" || diag[runs.brotliURL] != "one_read" || diag[runs.fullURL] != "steady" || diag[runs.blocksURL] != "steady" || diag[runs.jitterURL] != "held" {
		t.Errorf("flagged segments = %s, want %s and %s one_read, %s and %s steady, %s held", got, nginxOrigin, runs.brotliURL, runs.fullURL, runs.blocksURL, runs.jitterURL)
	}
	if v, ok := diag[p.og.URL]; ok && v != "page" {
		t.Errorf("the origin itself (%s) flagged %q, want not flagged or page", p.og.URL, v)
	}
	if txt := poll("diagnosis text", `document.querySelector('#diagnoses .diag[data-pattern="one_read"] p').textContent`); !strings.Contains(txt, "X-Accel-Buffering: no") {
		t.Errorf("diagnosis = %q, want the X-Accel-Buffering fix", txt)
	}
	if txt := poll("steady diagnosis text", `document.querySelector('#diagnoses .diag[data-pattern="steady"] p').textContent`); !strings.Contains(txt, "proxy_http_version 1.1") {
		t.Errorf("diagnosis = %q, want the proxy_http_version 1.1 fix", txt)
	}
	shot("3-rechunk")
	noErrors("rechunk")

	// Distribution: the heatmap and the quantile lines.
	open("dist", url.Values{})
	poll("heatmap", `(() => { const u = document.querySelector("#heatmap")._u; return u && u.data[1].some(v => v > 0) ? "ok" : null })()`)
	if share := drawn("heatmap"); share < 0.02 {
		t.Errorf("heatmap: %.3f of the plot painted, want the merged histograms' cells", share)
	}
	shot("4-distribution")
	noErrors("dist")

	// Worst streams → the paused stream's view.
	open("worst", url.Values{"order": {"gap"}})
	poll("worst list", `document.querySelector('#worst-table tbody tr[data-id]') ? "ok" : null`)
	shot("5-worst")
	noErrors("worst")
	step("open stream", chromedp.Click(chromedp.CSS(`#worst-table tbody tr[data-id="`+pausedID+`"] a`)))
	poll("stream url", `location.search.includes("view=stream") && location.search.includes("id=`+pausedID+`") ? "ok" : null`)
	got = poll("stream stalls", `(() => { const s = [...document.querySelectorAll("#stream-legend .stall")].map(e => e.dataset.cause); return s.length ? s.join(",") : null })()`)
	if got != "origin" {
		t.Errorf("stream view stalls = %s, want one, origin", got)
	}
	// The gap is shaded in the origin colour on the canvas, and the origin's
	// emit times are drawn.
	shade := poll("stall shade", `(() => {
		const u = document.querySelector("#stream-chart")._u, s = document.querySelector("#stream-legend .stall");
		if (!u || !s) return null;
		const x = u.valToPos((+s.dataset.start + +s.dataset.end) / 2, "x", true), y = u.bbox.top + u.bbox.height * 0.15;
		const px = u.ctx.getImageData(Math.round(x), Math.round(y), 1, 1).data;
		const emits = u.data[2].filter(v => v != null).length;
		return px[3] > 0 ? [px[0], px[1], px[2], emits].join(",") : null })()`)
	var r, g, b, emits int
	fmt.Sscanf(shade, "%d,%d,%d,%d", &r, &g, &b, &emits)
	// The origin colour (#9b3fc9) at low alpha over the panel: purple, blue
	// and red above green.
	if !(r > g && b > g) {
		t.Errorf("stall shade rgb = %d,%d,%d, want the origin colour", r, g, b)
	}
	if emits != attrTokens {
		t.Errorf("origin emits drawn = %d, want %d", emits, attrTokens)
	}
	drawn("stream-chart")
	shot("6-stream")
	noErrors("stream")

	// Compare: r2 against r1 is a regression; r1b against r1 is not.
	open("compare", url.Values{"dim": {"release"}, "a": {"r1"}, "b": {"r2"}})
	got = poll("compare verdict", `(() => { const v = document.querySelector("#cmp-verdict"); return v.dataset.worse !== undefined && document.querySelector("#cmp-table tbody tr") ? v.dataset.worse : null })()`)
	for _, m := range []string{"ttft_ms", "itl_p50_ms", "tokens_per_sec"} {
		if !strings.Contains(got, m) {
			t.Errorf("r1 → r2 worse = %q, want %s among them", got, m)
		}
	}
	shot("7-compare-regression")
	noErrors("compare")
	open("compare", url.Values{"dim": {"release"}, "a": {"r1"}, "b": {"r1b"}})
	got = poll("compare same", `(() => { const v = document.querySelector("#cmp-verdict"); return v.dataset.worse !== undefined && v.textContent.includes("r1b") ? v.dataset.worse + "|" + [...document.querySelectorAll("#cmp-table tbody tr")].map(r => r.dataset.verdict).join(",") : null })()`)
	if got != "|same,same,same,same,same" {
		t.Errorf("r1 → r1b: worse|verdicts = %q, want nothing flagged", got)
	}
	shot("8-compare-same")
	noErrors("compare same")

	// URL state: the stream link of /api/streams opens the stream's view.
	lctx, lcancel := context.WithTimeout(tab, 20*time.Second)
	link, err := chromedp.Run(lctx, chromedp.Evaluate[string](`fetch("/api/streams?site=`+attrSite+`&since=1h&limit=1000").then(r => r.json()).then(d => (d.streams.find(s => s.stream_id === "`+pausedID+`") || {}).view || "")`, chromedp.EvalAwaitPromise))
	lcancel()
	if err != nil {
		t.Fatalf("/api/streams: %v", err)
	}
	if !strings.HasPrefix(link, "/dashboard/?") || !strings.Contains(link, "id="+pausedID) {
		t.Fatalf("/api/streams view link = %q", link)
	}
	step("open link", chromedp.Navigate(p.col.URL+link))
	if got := poll("linked stream", `(() => { const s = document.querySelector("#stream-legend .stall"); return s ? s.dataset.cause : null })()`); got != "origin" {
		t.Errorf("linked stream view stall = %s, want origin", got)
	}
	noErrors("linked stream")

	// Phone width: every view fits (no horizontal page scroll; tables scroll
	// in their own box).
	step("phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	for _, v := range []string{"overview", "causes", "rechunk", "dist", "worst", "stream", "compare"} {
		q := url.Values{}
		if v == "stream" {
			q.Set("id", pausedID)
		}
		if v == "overview" {
			v = ""
		}
		open(v, q)
		poll("phone "+v, `document.querySelector("section.view:not([hidden]) .grid tbody tr, section.view:not([hidden]) .uplot, section.view:not([hidden]) .tile") ? "ok" : null`)
		// Against the emulated width itself: a mobile browser widens its
		// layout viewport (innerWidth) to fit a page that overflows.
		if w := poll("phone width "+v, `String(document.documentElement.scrollWidth <= 391 && innerWidth <= 391 ? "fits" : document.documentElement.scrollWidth)`); w != "fits" {
			t.Errorf("phone %s: page is %s px wide at 390", v, w)
		}
		name := v
		if name == "" {
			name = "overview"
		}
		shot("9-phone-" + name)
		noErrors("phone " + name)
	}
}

// evalJSON evaluates expr in tab (20 s at most) and returns its value.
func evalJSON[T any](t *testing.T, tab context.Context, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate: %v", err)
	}
	return v
}
