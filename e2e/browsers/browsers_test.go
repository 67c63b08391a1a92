package browsers

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDrivers: in each engine, a page navigates, evaluates values and
// promises into JSON, and reports a thrown error and a rejection as
// *EvalError.
func TestDrivers(t *testing.T) {
	if testing.Short() {
		t.Skip("launches browsers")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte(`<!doctype html><title>drivers</title><script>window.answer = 42;</script>`))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	pageURL := "http://" + ln.Addr().String() + "/p"

	launch := map[string]func(ctx context.Context) (Engine, error){
		"chromium": func(ctx context.Context) (Engine, error) {
			chromium, err := ChromiumPath()
			if err != nil {
				return nil, err
			}
			alloc, cancel := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(chromium),
				chromedp.Env("TMPDIR="+t.TempDir()), // removed after the browser (cleanups run last first)
				chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun)
			t.Cleanup(cancel)
			b, cancel2 := chromedp.NewContext(alloc)
			t.Cleanup(cancel2)
			if err := chromedp.Do(b); err != nil {
				return nil, err
			}
			return Chromium(b), nil
		},
		"firefox": func(ctx context.Context) (Engine, error) { return LaunchFirefox(ctx, FirefoxPath) },
		"webkit": func(ctx context.Context) (Engine, error) {
			mb, err := MiniBrowserPath()
			if err != nil {
				return nil, err
			}
			return LaunchWebKit(ctx, WebKitDriverPath, mb)
		},
	}
	for _, name := range []string{"chromium", "firefox", "webkit"} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			e, err := launch[name](ctx)
			if errors.Is(err, os.ErrNotExist) {
				if os.Getenv("ITLMON_REQUIRE_REAL") == "1" {
					t.Fatalf("%s: %v (ITLMON_REQUIRE_REAL=1)", name, err)
				}
				t.Skipf("%s: %v", name, err)
			}
			if err != nil {
				t.Fatalf("launch: %v", err)
			}
			defer e.Close()
			if e.Name() != name || e.Version() == "" {
				t.Errorf("name %q version %q, want %s and a version", e.Name(), e.Version(), name)
			}
			t.Logf("%s %s", e.Name(), e.Version())
			p, err := e.NewPage(ctx)
			if err != nil {
				t.Fatalf("new page: %v", err)
			}
			defer p.Close()
			if err := p.Navigate(ctx, pageURL); err != nil {
				t.Fatalf("navigate: %v", err)
			}
			for _, tc := range []struct{ expr, want string }{
				{`window.answer`, `42`},
				{`location.pathname`, `"/p"`},
				{`new Promise(r => setTimeout(() => r({a: [1, "x"]}), 20))`, `{"a":[1,"x"]}`},
				{`(async () => { await null; })()`, `null`},
				{`undefined`, `null`},
			} {
				got, err := p.Eval(ctx, tc.expr)
				if err != nil || string(got) != tc.want {
					t.Errorf("Eval(%s) = %s, %v; want %s", tc.expr, got, err, tc.want)
				}
			}
			for _, tc := range []struct{ expr, want string }{
				{`(() => { throw new TypeError('boom'); })()`, "TypeError: boom"},
				{`Promise.reject(new RangeError('no'))`, "RangeError: no"},
				{`Promise.reject('plain')`, "plain"},
			} {
				_, err := p.Eval(ctx, tc.expr)
				var ee *EvalError
				if !errors.As(err, &ee) || !strings.Contains(ee.Message, tc.want) {
					t.Errorf("Eval(%s) error = %v, want an EvalError with %q", tc.expr, err, tc.want)
				}
			}
			// A second page is independent of the first.
			p2, err := e.NewPage(ctx)
			if err != nil {
				t.Fatalf("second page: %v", err)
			}
			if got, err := p2.Eval(ctx, `typeof window.answer`); err != nil || string(got) != `"undefined"` {
				t.Errorf("second page: typeof answer = %s, %v; want \"undefined\"", got, err)
			}
			if err := p2.Close(); err != nil {
				t.Errorf("close second page: %v", err)
			}
			if got, err := p.Eval(ctx, `window.answer + 1`); err != nil || string(got) != `43` {
				t.Errorf("first page after the second closed: %s, %v; want 43", got, err)
			}
			// Closing the page last used leaves the engine able to open more.
			if err := p.Close(); err != nil {
				t.Errorf("close first page: %v", err)
			}
			p3, err := e.NewPage(ctx)
			if err != nil {
				t.Fatalf("page after closing the others: %v", err)
			}
			defer p3.Close()
			if got, err := p3.Eval(ctx, `1 + 1`); err != nil || string(got) != `2` {
				t.Errorf("third page: 1 + 1 = %s, %v", got, err)
			}
		})
	}
}
