package query_test

import (
	"context"
	"net/http/httptest"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/itlmon/itlmon/collector/httpapi"
	"github.com/itlmon/itlmon/e2e/browsers"
	"github.com/itlmon/itlmon/web"
)

var (
	browserOnce  sync.Once
	browserCtx   context.Context
	browserErr   error
	closeBrowser = func() {}
)

// tab opens a tab in the package's one headless Chromium (started on first
// use, closed after the tests), or skips without it unless ITLMON_REQUIRE_REAL=1;
// ITLMON_NO_BROWSERS=1 (make check) skips it.
func tab(t *testing.T) context.Context {
	t.Helper()
	if os.Getenv("ITLMON_NO_BROWSERS") == "1" {
		t.Skip("browser test: ITLMON_NO_BROWSERS=1 (make check)")
	}
	browserOnce.Do(func() {
		chromiumPath, err := browsers.ChromiumPath()
		if err != nil {
			browserErr = err
			return
		}
		// Chromium's temporary files (a directory per run, left behind
		// when it is killed) in one removed with the browser.
		tmp, err := os.MkdirTemp("", "itlmon-chromium")
		if err != nil {
			browserErr = err
			return
		}
		opts := []chromedp.ExecAllocatorOption{
			chromedp.ExecPath(chromiumPath), chromedp.Env("TMPDIR=" + tmp), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
			chromedp.NoFirstRun, chromedp.WindowSize(1280, 900),
			chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		}
		allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(allocCtx)
		// The first Do starts the browser: no timeout on its context.
		if err := chromedp.Do(ctx); err != nil {
			cancel()
			cancelAlloc()
			os.RemoveAll(tmp)
			browserErr = err
			return
		}
		browserCtx, closeBrowser = ctx, func() { cancel(); cancelAlloc(); os.RemoveAll(tmp) }
	})
	if browserCtx == nil {
		if os.Getenv("ITLMON_REQUIRE_REAL") == "1" {
			t.Fatalf("browser: %v (ITLMON_REQUIRE_REAL=1)", browserErr)
		}
		t.Skipf("browser: %v", browserErr)
	}
	ctx, cancel := chromedp.NewContext(browserCtx)
	t.Cleanup(cancel)
	// The tab's first Do opens it: no timeout there either.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("new tab: %v", err)
	}
	return ctx
}

// TestDashboardPage loads /dashboard/ in real Chromium against the real
// engine: tiles, chart and breakdown render the API's numbers, a tab switches
// the breakdown, and clicking a row filters the page.
func TestDashboardPage(t *testing.T) {
	f := writeFixture(t)
	ctx := tab(t)
	mux, err := httpapi.New(httpapi.Config{Static: web.Static()})
	if err != nil {
		t.Fatal(err)
	}
	httpapi.RegisterDashboard(mux, httpapi.DashboardConfig{Conn: f.conn})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	step := func(what string) (context.Context, context.CancelFunc) {
		t.Helper()
		return context.WithTimeout(ctx, 20*time.Second)
	}
	poll := func(what, expr string) string {
		t.Helper()
		sctx, cancel := step(what)
		defer cancel()
		v, err := chromedp.Run(sctx, chromedp.Poll[string](expr, chromedp.WithPollingInterval(50*time.Millisecond)))
		if err != nil {
			body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("%s: %v\npage:\n%s", what, err, body)
		}
		return v
	}
	sctx, cancel := step("navigate")
	err = chromedp.Do(sctx, chromedp.Navigate(srv.URL+"/dashboard/?site=shop&since=1h&by=browser"))
	cancel()
	if err != nil {
		t.Fatalf("navigate: %v", err)
	}

	tile := func(k string) string {
		return `(() => { const v = document.querySelector('.tile[data-k="` + k + `"] .v').textContent; return v === "—" ? null : v })()`
	}
	if got, want := poll("streams tile", tile("streams")), "18"; got != want {
		t.Errorf("streams tile = %q, want %q", got, want)
	}
	// p99 of the gaps is on the 450 ms hitches (interpolated: ~446 ms).
	if got := poll("ITL tile", tile("itl")); !regexp.MustCompile(`^2\d\.\d / 4[45]\d ms$`).MatchString(got) {
		t.Errorf("ITL p50/p99 tile = %q, want about \"26 / 446 ms\"", got)
	}
	rows := poll("breakdown", `(() => { const r = [...document.querySelectorAll('#breakdown tbody tr[data-key]')].map(r => r.dataset.key + ":" + r.cells[1].textContent.trim() + ":" + r.cells[10].textContent.trim()); return r.length ? r.join(",") : null })()`)
	if want := "Chrome:12:SMOOTH,Firefox:6:JANKY"; rows != want {
		t.Errorf("breakdown rows = %q, want %q", rows, want)
	}
	// uPlot draws p50, p95, p99, the gate line (and the hidden stream count).
	if got := poll("chart", `(() => { const u = document.querySelector('#chart')._u; return u && u.scales.x.min != null && u.data[3].some(v => v > 0) ? u.series.slice(1).map(s => s.label).join(",") : null })()`); got != "p50,p95,p99,250 ms gate,streams" {
		t.Errorf("chart series = %s, want p50, p95, p99, the gate and streams", got)
	}

	// Click the Firefox row: the whole page filters to it.
	sctx, cancel = step("click")
	err = chromedp.Do(sctx, chromedp.Click(chromedp.CSS(`#breakdown tbody tr[data-key="Firefox"] td`)))
	cancel()
	if err != nil {
		t.Fatalf("click row: %v", err)
	}
	poll("filter chip", `document.querySelector('.chip') ? document.querySelector('.chip').textContent : null`)
	if got := poll("filtered streams", `(() => { const v = document.querySelector('.tile[data-k="streams"] .v').textContent; return v === "6" ? v : null })()`); got != "6" {
		t.Errorf("filtered streams tile = %q, want 6", got)
	}
	if got := poll("url", `location.search.includes('where=browser%3DFirefox') ? location.search : null`); got == "" {
		t.Errorf("the filter is not in the URL")
	}
}
