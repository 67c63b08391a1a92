package browsers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/itlmon/itlmon/internal/freeport"
)

// Where Debian's webkit2gtk-driver package installs the WebDriver server,
// and xvfb its X server.
const (
	WebKitDriverPath  = "/usr/bin/WebKitWebDriver"
	XvfbPath          = "/usr/bin/Xvfb"
	webkitScriptLimit = 5 * time.Minute // the session's script timeout; callers bound calls with their ctx
)

// MiniBrowserPath returns where WebKitGTK's MiniBrowser is installed (by
// Debian's libwebkit2gtk-4.1-0, under the architecture's library
// directory), or an error wrapping fs.ErrNotExist.
func MiniBrowserPath() (string, error) {
	for _, pattern := range []string{"/usr/lib/*/webkit2gtk-4.1/MiniBrowser", "/usr/libexec/webkit2gtk-4.1/MiniBrowser"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0], nil
		}
	}
	return "", fmt.Errorf("webkit2gtk-4.1 MiniBrowser: %w", fs.ErrNotExist)
}

// LaunchWebKit starts an X server (Xvfb, on a display it picks itself), the
// WebDriver server (driver, e.g. WebKitDriverPath) and, through a W3C
// WebDriver session, the MiniBrowser (browser, e.g. from MiniBrowserPath) on
// that display. ctx bounds the start only. A missing program is an error
// wrapping fs.ErrNotExist.
func LaunchWebKit(ctx context.Context, driver, browser string) (Engine, error) {
	for _, p := range []string{XvfbPath, driver, browser} {
		if _, err := os.Stat(p); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	w := &webkit{log: &tailBuf{max: 64 << 10}, client: &http.Client{}}
	display, err := w.startX(ctx)
	if err != nil {
		w.Close()
		return nil, err
	}
	if err := w.startDriver(ctx, driver, display); err != nil {
		w.Close()
		return nil, fmt.Errorf("%w (log: %s)", err, w.log.String())
	}
	if err := w.newSession(ctx, browser); err != nil {
		w.Close()
		return nil, fmt.Errorf("webkit session: %w (log: %s)", err, w.log.String())
	}
	return w, nil
}

type webkit struct {
	xvfb, driver *process
	log          *tailBuf
	client       *http.Client
	base         string // http://127.0.0.1:port/session/<id>
	version      string
	home         string // the window the session opened with: kept, so the session never loses its last window

	mu      sync.Mutex // one command at a time: the session has one current window
	current string     // its handle
	closed  bool
}

// startX starts Xvfb on a free display it chooses (-displayfd) and returns
// the display number.
func (w *webkit) startX(ctx context.Context) (string, error) {
	r, wr, err := os.Pipe()
	if err != nil {
		return "", fmt.Errorf("xvfb: %w", err)
	}
	defer r.Close()
	cmd := exec.Command(XvfbPath, "-displayfd", "3", "-screen", "0", "1280x1024x24", "-nolisten", "tcp")
	cmd.ExtraFiles = []*os.File{wr} // fd 3
	cmd.Stdout, cmd.Stderr = w.log, w.log
	w.xvfb, err = startProcess("xvfb", cmd)
	wr.Close()
	if err != nil {
		return "", err
	}
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		got <- strings.TrimSpace(line)
	}()
	select {
	case d := <-got:
		if _, err := strconv.Atoi(d); err != nil {
			return "", fmt.Errorf("xvfb: display %q (log: %s)", d, w.log.String())
		}
		return d, nil
	case <-ctx.Done():
		return "", fmt.Errorf("xvfb: no display: %w", ctx.Err())
	}
}

// startDriver starts WebKitWebDriver on a free loopback port of display
// and waits until it answers /status.
func (w *webkit) startDriver(ctx context.Context, driver, display string) error {
	port, err := freeport.Pick()
	if err != nil {
		return fmt.Errorf("webkit driver: %w", err)
	}
	cmd := exec.Command(driver, "--port="+strconv.Itoa(port), "--host=127.0.0.1")
	cmd.Env = append(os.Environ(), "DISPLAY=:"+display)
	cmd.Stdout, cmd.Stderr = w.log, w.log
	if w.driver, err = startProcess("WebKitWebDriver", cmd); err != nil {
		return err
	}
	root := "http://127.0.0.1:" + strconv.Itoa(port)
	for {
		var status struct {
			Ready bool `json:"ready"`
		}
		if err := w.do(ctx, http.MethodGet, root+"/status", nil, &status); err == nil && status.Ready {
			w.base = root
			return nil
		}
		if w.driver.exited() {
			return errors.New("webkit driver exited during start-up")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("webkit driver not ready: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// newSession opens the session, which starts the MiniBrowser.
func (w *webkit) newSession(ctx context.Context, browser string) error {
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"webkitgtk:browserOptions": map[string]any{"binary": browser, "args": []string{"--automation"}},
	}}}
	var sess struct {
		SessionID    string `json:"sessionId"`
		Capabilities struct {
			BrowserVersion string `json:"browserVersion"`
		} `json:"capabilities"`
	}
	if err := w.do(ctx, http.MethodPost, w.base+"/session", caps, &sess); err != nil {
		return err
	}
	w.base += "/session/" + sess.SessionID
	w.version = sess.Capabilities.BrowserVersion
	ms := webkitScriptLimit.Milliseconds()
	if err := w.do(ctx, http.MethodPost, w.base+"/timeouts", map[string]any{"script": ms, "pageLoad": ms}, nil); err != nil {
		return err
	}
	if err := w.do(ctx, http.MethodGet, w.base+"/window", nil, &w.home); err != nil {
		return err
	}
	w.current = w.home
	return nil
}

// WebDriverError is an error response of a W3C WebDriver server.
type WebDriverError struct {
	Status  int
	Code    string // e.g. "no such window", "script timeout"
	Message string
}

func (e *WebDriverError) Error() string {
	return fmt.Sprintf("webdriver: %s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// do sends one WebDriver command and decodes its "value" into result (when
// not nil).
func (w *webkit) do(ctx context.Context, method, url string, body, result any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return fmt.Errorf("%s %s: %s: decode: %w", method, url, resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}
		json.Unmarshal(env.Value, &e)
		return &WebDriverError{Status: resp.StatusCode, Code: e.Error, Message: e.Message}
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(env.Value, result); err != nil {
		return fmt.Errorf("%s %s: decode value: %w", method, url, err)
	}
	return nil
}

// inWindow runs f with handle as the session's current window.
func (w *webkit) inWindow(ctx context.Context, handle string, f func() error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if w.current != handle {
		if err := w.do(ctx, http.MethodPost, w.base+"/window", map[string]any{"handle": handle}, nil); err != nil {
			return fmt.Errorf("switch to window: %w", err)
		}
		w.current = handle
	}
	return f()
}

func (w *webkit) Name() string    { return "webkit" }
func (w *webkit) Version() string { return w.version }

func (w *webkit) NewPage(ctx context.Context) (Page, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, ErrClosed
	}
	if w.current == "" { // its window was closed: commands need a current one
		if err := w.do(ctx, http.MethodPost, w.base+"/window", map[string]any{"handle": w.home}, nil); err != nil {
			return nil, fmt.Errorf("switch to window: %w", err)
		}
		w.current = w.home
	}
	var win struct {
		Handle string `json:"handle"`
	}
	// A window of its own, shown on the X server, so the page is visible as
	// the page a user reads is: a tab of a shared window behind the one in
	// front is hidden (document.hidden), and its timers run as a hidden
	// page's.
	if err := w.do(ctx, http.MethodPost, w.base+"/window/new", map[string]any{"type": "window"}, &win); err != nil {
		return nil, fmt.Errorf("new window: %w", err)
	}
	return &webkitPage{w: w, handle: win.Handle}, nil
}

func (w *webkit) Close() error {
	w.mu.Lock()
	closed := w.closed
	w.closed = true
	w.mu.Unlock()
	if closed {
		return nil
	}
	if w.driver != nil {
		if strings.Contains(w.base, "/session/") {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			w.do(ctx, http.MethodDelete, w.base, nil, nil) // quits the MiniBrowser
			cancel()
		}
		w.driver.stop(5 * time.Second)
	}
	if w.xvfb != nil {
		w.xvfb.stop(5 * time.Second)
	}
	return nil
}

type webkitPage struct {
	w      *webkit
	handle string

	closeOnce sync.Once
}

func (p *webkitPage) Navigate(ctx context.Context, url string) error {
	return p.w.inWindow(ctx, p.handle, func() error {
		if err := p.w.do(ctx, http.MethodPost, p.w.base+"/url", map[string]any{"url": url}, nil); err != nil {
			return fmt.Errorf("navigate: %w", err)
		}
		return nil
	})
}

func (p *webkitPage) Eval(ctx context.Context, expr string) (json.RawMessage, error) {
	script := `const done = arguments[arguments.length - 1]; ` + evalJS(expr) + `.then(done);`
	var text string
	err := p.w.inWindow(ctx, p.handle, func() error {
		return p.w.do(ctx, http.MethodPost, p.w.base+"/execute/async", map[string]any{"script": script, "args": []any{}}, &text)
	})
	if err != nil {
		return nil, fmt.Errorf("evaluate: %w", err)
	}
	return decodeEval(text)
}

func (p *webkitPage) Close() error {
	var err error
	p.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = p.w.inWindow(ctx, p.handle, func() error {
			return p.w.do(ctx, http.MethodDelete, p.w.base+"/window", nil, nil)
		})
		if errors.Is(err, ErrClosed) {
			err = nil
		}
		p.w.mu.Lock()
		if p.w.current == p.handle {
			p.w.current = "" // closed: NewPage switches to the home window first
		}
		p.w.mu.Unlock()
	})
	return err
}

// Exited reports whether the driver or the X server has ended (the browser
// crashed, or was killed), with the driver's last log lines.
func (w *webkit) Exited() (bool, string) {
	if w.driver.exited() || w.xvfb.exited() {
		return true, w.log.String()
	}
	// A driver whose process is still there but no longer answers (CI saw
	// "connection refused" from a driver whose process had not ended) is
	// as gone.
	root, _, _ := strings.Cut(w.base, "/session/")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var status struct {
		Ready bool `json:"ready"`
	}
	if err := w.do(ctx, http.MethodGet, root+"/status", nil, &status); err != nil {
		return true, w.log.String() + "\n(the driver's process is there but /status failed: " + err.Error() + ")"
	}
	return false, ""
}
