package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/itlmon/itlmon/e2e/browsers"
)

// The browser engines the engine-parameterised tests (TestEngines*) run in:
// Chromium (the package's shared chromedp browser), Firefox ESR (WebDriver
// BiDi) and WebKitGTK (WebKitWebDriver and the MiniBrowser on Xvfb).
var engineNames = []string{"chromium", "firefox", "webkit"}

// engineSlot is one engine of the package, launched at its first use and
// closed by TestMain (closeEngines).
type engineSlot struct {
	mu  sync.Mutex
	e   browsers.Engine
	err error
}

var engineSlots = map[string]*engineSlot{"firefox": {}, "webkit": {}}

// launchEngine starts the named engine (not Chromium, which TestMain starts).
func launchEngine(name string) (browsers.Engine, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	switch name {
	case "firefox":
		return browsers.LaunchFirefox(ctx, browsers.FirefoxPath)
	case "webkit":
		mb, err := browsers.MiniBrowserPath()
		if err != nil {
			return nil, err
		}
		return browsers.LaunchWebKit(ctx, browsers.WebKitDriverPath, mb)
	}
	panic("BUG: unknown engine " + name)
}

// BrowserEngine returns the package's browser of the named engine, launching it
// on first use. A missing browser skips t (fails it under
// ITLMON_REQUIRE_REAL=1); one that is installed but does not start fails t.
func BrowserEngine(t testing.TB, name string) browsers.Engine {
	t.Helper()
	if name == "chromium" {
		return browsers.Chromium(Browser(t))
	}
	if errors.Is(browserErr, errSkipShort) || errors.Is(browserErr, errNoBrowsers) {
		t.Skip(browserErr.Error())
	}
	slot := engineSlots[name]
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if ex, ok := slot.e.(interface{ Exited() (bool, string) }); ok {
		// A browser that ended on its own since an earlier test used it (a
		// WebKit driver was once found gone between two tests) is not this
		// test's doing: say so, and start another.
		if gone, log := ex.Exited(); gone {
			t.Logf("%s had exited since its last use; launching it again. Its last log lines:\n%s", name, log)
			slot.e.Close()
			slot.e, slot.err = nil, nil
		}
	}
	if slot.e == nil && slot.err == nil {
		slot.e, slot.err = launchEngine(name)
		if slot.err == nil {
			t.Logf("%s %s launched", name, slot.e.Version())
		}
	}
	if errors.Is(slot.err, fs.ErrNotExist) {
		requireReal(t, name, slot.err)
	}
	if slot.err != nil {
		t.Fatalf("launch %s: %v", name, slot.err)
	}
	return slot.e
}

// closeEngines ends every engine launched by BrowserEngine (TestMain, at the end).
func closeEngines() {
	for _, s := range engineSlots {
		if s.e != nil {
			s.e.Close()
		}
	}
}

// NewPage opens a new page (tab) of e, closed when t ends.
func NewPage(t testing.TB, e browsers.Engine) browsers.Page {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := e.NewPage(ctx)
	if err != nil {
		t.Fatalf("%s: new page: %v", e.Name(), err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// EvalIn evaluates a JS expression (awaiting a promise) in page p and
// decodes its JSON value into a T.
func EvalIn[T any](t testing.TB, p browsers.Page, expr string) T {
	t.Helper()
	return evalFor[T](t, p, 30*time.Second, expr)
}

func evalFor[T any](t testing.TB, p browsers.Page, d time.Duration, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	raw, err := p.Eval(ctx, expr)
	if err != nil {
		t.Fatalf("eval %q: %v", expr, err)
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("eval %q: decode %s: %v", expr, raw, err)
	}
	return v
}

// NavigateIn loads pageURL in p (waiting for its load event).
func NavigateIn(t testing.TB, p browsers.Page, pageURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Navigate(ctx, pageURL); err != nil {
		t.Fatalf("navigate %s: %v", pageURL, err)
	}
}

// OpenIn navigates p to pageURL and waits until itlmon is ready (true) or
// has definitely turned itself off (false). Pages without the module
// return false at once. A ready module must run where the page asked: in
// its Worker, unless the page said worker: false or has a
// Content-Security-Policy (csp=...) that forbids it.
func OpenIn(t testing.TB, p browsers.Page, pageURL string) bool {
	t.Helper()
	NavigateIn(t, p, pageURL)
	ok := EvalIn[bool](t, p, `(async () => {
		if (!document.querySelector('script[src$="/itl.js"]')) return false;
		while (!window.itlmon && window.e2e.loaded !== 'error') await new Promise(r => setTimeout(r, 5));
		if (!window.itlmon) return false;
		return await itlmon.ready;
	})()`)
	if ok {
		want := "worker"
		if u, err := url.Parse(pageURL); err == nil && (asksMainThread(u.Query().Get("init")) || u.Query().Get("csp") != "") {
			want = "main"
		}
		if mode := EvalIn[string](t, p, `itlmon.timing.mode`); mode != want {
			t.Fatalf("the module runs in mode %q, want %q (Worker error: %q)", mode, want, EvalIn[string](t, p, `itlmon.timing.workerError`))
		}
		if inPage := EvalIn[bool](t, p, `typeof __itlmon_go === 'object'`); inPage != (want == "main") {
			t.Fatalf("mode %s: the Go module's API on the page's global = %v", want, inPage)
		}
	}
	return ok
}

// StreamIn makes page p fetch and read one stream (window.e2e.stream) and
// returns what it saw.
func StreamIn(t testing.TB, p browsers.Page, o StreamOpts) PageRead {
	t.Helper()
	opts, _ := json.Marshal(map[string]any{"mode": o.Mode, "abortAfterMs": o.AbortAfterMs, "cancelAfterDone": o.CancelAfterDone, "model": o.Model, "path": o.Path})
	q, _ := json.Marshal(o.Query)
	return evalFor[PageRead](t, p, 60*time.Second, `e2e.stream(`+string(q)+`, `+string(opts)+`)`)
}

// SummariesIn returns the summaries itlmon.onStream delivered to page p so
// far.
func SummariesIn(t testing.TB, p browsers.Page) []Summary {
	t.Helper()
	return evalFor[[]Summary](t, p, 10*time.Second, `(window.itlmon ? itlmon.settled() : Promise.resolve()).then(() => e2e.summaries)`)
}
