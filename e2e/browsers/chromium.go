package browsers

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"
)

// ChromiumShellPath is where Debian's chromium-headless-shell installs
// Chromium's headless shell; FullChromiumPath is the full browser of its
// chromium package.
const (
	ChromiumShellPath = "/usr/lib/chromium/chromium-headless-shell"
	FullChromiumPath  = "/usr/lib/chromium/chromium"
)

// chromiumPaths are the Chromiums ChromiumPath looks for, in its order.
var chromiumPaths = []string{ChromiumShellPath, FullChromiumPath}

// ChromiumPath returns the Chromium the tests drive: Debian's headless
// shell, Chromium's headless mode built without the browser's own UI (its
// windows, tab strip and WebUI pages), which Playwright's headless runs use
// by default and Puppeteer's with headless: 'shell'. Pages get the same Blink, V8 and network stack as
// in the full browser, at a fraction of its CPU: a new tab, a page and a
// short stream took 0.8 s of the machine's CPU in the shell against 2.9 s
// in the full browser's headless mode (six tabs each, one after the other).
// What the shell leaves out is the browser's: its back/forward cache is off
// (a page that needs it wants FullChromiumPath). Without the shell it
// returns the full browser, or an error wrapping fs.ErrNotExist when
// neither is installed.
func ChromiumPath() (string, error) {
	for _, p := range chromiumPaths {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("chromium (%s or %s): %w", chromiumPaths[0], chromiumPaths[1], fs.ErrNotExist)
}

// Chromium returns the Engine of a running chromedp browser: browserCtx is
// the context its first chromedp.Run started. The caller owns that browser:
// Close leaves it running (its tabs are closed by their pages).
func Chromium(browserCtx context.Context) Engine {
	return &chromium{browser: browserCtx}
}

type chromium struct {
	browser context.Context

	once    sync.Once
	version string
}

func (c *chromium) Name() string { return "chromium" }

func (c *chromium) Version() string {
	c.once.Do(func() {
		v, err := cdp.Call(c.browser, chromedp.FromContext(c.browser).Browser, browser.GetVersion, cdp.Empty{})
		if err == nil {
			c.version = v.Product
		}
	})
	return c.version
}

func (c *chromium) NewPage(ctx context.Context) (Page, error) {
	tab, cancel := chromedp.NewContext(c.browser)
	// A tab's context must not end with ctx (that closes the tab): only
	// the wait for it to open does.
	stop := context.AfterFunc(ctx, cancel)
	err := chromedp.Do(tab)
	if !stop() || err != nil {
		cancel()
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("new tab: %w", err)
	}
	return ChromiumTab(tab, cancel), nil
}

func (c *chromium) Close() error { return nil }

// ChromiumTab returns the Page of an open chromedp tab; closing the page
// calls closeTab (the tab context's cancel), when not nil.
func ChromiumTab(tab context.Context, closeTab context.CancelFunc) Page {
	return &chromiumPage{tab: tab, close: closeTab}
}

type chromiumPage struct {
	tab   context.Context
	close context.CancelFunc
}

// within returns a context of the tab that also ends with ctx.
func (p *chromiumPage) within(ctx context.Context) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithCancel(p.tab)
	stop := context.AfterFunc(ctx, cancel)
	return sctx, func() { stop(); cancel() }
}

func (p *chromiumPage) Navigate(ctx context.Context, url string) error {
	sctx, cancel := p.within(ctx)
	defer cancel()
	if err := chromedp.Do(sctx, chromedp.Navigate(url)); err != nil {
		return fmt.Errorf("navigate: %w", err)
	}
	return nil
}

func (p *chromiumPage) Eval(ctx context.Context, expr string) (json.RawMessage, error) {
	sctx, cancel := p.within(ctx)
	defer cancel()
	text, err := chromedp.Run(sctx, chromedp.Evaluate[string](evalJS(expr), chromedp.EvalAwaitPromise))
	if err != nil {
		return nil, fmt.Errorf("evaluate: %w", err)
	}
	return decodeEval(text)
}

func (p *chromiumPage) Close() error {
	if p.close != nil {
		p.close()
	}
	return nil
}
