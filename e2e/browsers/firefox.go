package browsers

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// FirefoxPath is where Debian's firefox-esr package installs Firefox ESR.
const FirefoxPath = "/usr/bin/firefox-esr"

// firefoxPrefs keep a test profile quiet and offline: no updates, telemetry,
// experiments, safe-browsing lists, captive-portal or connectivity probes,
// no start page; and no HTTPS-first upgrade of the tests' http:// loopback
// pages. (Marionette's "recommended" preferences, applied when the remote
// agent starts, cover much of the rest.)
var firefoxPrefs = map[string]any{
	"app.normandy.enabled":                               false,
	"app.shield.optoutstudies.enabled":                   false,
	"app.update.auto":                                    false,
	"app.update.checkInstallTime":                        false,
	"app.update.disabledForTesting":                      true,
	"browser.aboutwelcome.enabled":                       false,
	"browser.newtabpage.enabled":                         false,
	"browser.ping-centre.telemetry":                      false,
	"browser.region.network.url":                         "",
	"browser.region.update.enabled":                      false,
	"browser.safebrowsing.blockedURIs.enabled":           false,
	"browser.safebrowsing.downloads.enabled":             false,
	"browser.safebrowsing.malware.enabled":               false,
	"browser.safebrowsing.phishing.enabled":              false,
	"browser.safebrowsing.provider.google4.updateURL":    "",
	"browser.safebrowsing.provider.mozilla.updateURL":    "",
	"browser.search.update":                              false,
	"browser.shell.checkDefaultBrowser":                  false,
	"browser.startup.homepage":                           "about:blank",
	"browser.startup.page":                               0,
	"browser.tabs.warnOnClose":                           false,
	"datareporting.healthreport.uploadEnabled":           false,
	"datareporting.policy.dataSubmissionEnabled":         false,
	"datareporting.policy.firstRunURL":                   "",
	"dom.security.https_first":                           false,
	"extensions.blocklist.enabled":                       false,
	"extensions.getAddons.cache.enabled":                 false,
	"extensions.update.enabled":                          false,
	"messaging-system.rsexperimentloader.enabled":        false,
	"network.captive-portal-service.enabled":             false,
	"network.connectivity-service.enabled":               false,
	"network.dns.disablePrefetch":                        true,
	"network.predictor.enabled":                          false,
	"network.prefetch-next":                              false,
	"nimbus.rsexperimentloader.enabled":                  false,
	"services.settings.server":                           "http://127.0.0.1:9/",
	"toolkit.telemetry.enabled":                          false,
	"toolkit.telemetry.server":                           "",
	"toolkit.telemetry.unified":                          false,
	"browser.topsites.contile.enabled":                   false,
	"browser.newtabpage.activity-stream.feeds.telemetry": false,
}

// LaunchFirefox starts Firefox (binary, e.g. FirefoxPath) headless with a
// fresh profile and connects to its WebDriver BiDi endpoint. ctx bounds the
// start only.
func LaunchFirefox(ctx context.Context, binary string) (Engine, error) {
	if _, err := os.Stat(binary); err != nil {
		return nil, err
	}
	profile, err := os.MkdirTemp("", "itlmon-firefox-")
	if err != nil {
		return nil, fmt.Errorf("firefox profile: %w", err)
	}
	var userJS strings.Builder
	for k, v := range firefoxPrefs {
		b, _ := json.Marshal(v)
		fmt.Fprintf(&userJS, "user_pref(%q, %s);\n", k, b)
	}
	if err := os.WriteFile(filepath.Join(profile, "user.js"), []byte(userJS.String()), 0o644); err != nil {
		removeAllLater(profile)
		return nil, fmt.Errorf("firefox profile: %w", err)
	}
	f := &firefox{profile: profile, log: &tailBuf{max: 64 << 10}}
	cmd := exec.Command(binary, "--headless", "--no-remote", "--remote-debugging-port=0", "--profile", profile)
	cmd.Env = append(os.Environ(), "MOZ_CRASHREPORTER_DISABLE=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		removeAllLater(profile)
		return nil, fmt.Errorf("firefox: %w", err)
	}
	cmd.Stdout = f.log
	if f.proc, err = startProcess("firefox", cmd); err != nil {
		removeAllLater(profile)
		return nil, err
	}
	if err := f.connect(ctx, stderr); err != nil {
		f.Close()
		return nil, fmt.Errorf("firefox: %w (log: %s)", err, f.log.String())
	}
	return f, nil
}

type firefox struct {
	proc    *process
	profile string
	log     *tailBuf
	bidi    *bidiConn
	version string

	closeOnce sync.Once
}

// connect reads the BiDi endpoint from Firefox's stderr (then keeps
// copying stderr to the log), opens a session and reads the version.
func (f *firefox) connect(ctx context.Context, stderr io.Reader) error {
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		const prefix = "WebDriver BiDi listening on "
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(f.log, line)
			if i := strings.Index(line, prefix); i >= 0 {
				select {
				case found <- strings.TrimSpace(line[i+len(prefix):]):
				default:
				}
			}
		}
		io.Copy(f.log, stderr)
	}()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var ws string
	select {
	case ws = <-found:
	case <-f.proc.waited:
		return errors.New("exited during start-up")
	case <-ctx.Done():
		return fmt.Errorf("no WebDriver BiDi endpoint: %w", ctx.Err())
	}
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, ws+"/session", nil)
	if err != nil {
		return fmt.Errorf("connect %s: %w", ws, err)
	}
	f.bidi = newBidiConn(conn)
	var sess struct {
		Capabilities struct {
			BrowserVersion string `json:"browserVersion"`
		} `json:"capabilities"`
	}
	if err := f.bidi.call(ctx, "session.new", map[string]any{"capabilities": map[string]any{}}, &sess); err != nil {
		return err
	}
	f.version = sess.Capabilities.BrowserVersion
	return nil
}

func (f *firefox) Name() string    { return "firefox" }
func (f *firefox) Version() string { return f.version }

func (f *firefox) NewPage(ctx context.Context) (Page, error) {
	var res struct {
		Context string `json:"context"`
	}
	// A window of its own, so the page stays visible as the page a user
	// reads is: a tab of a shared window is hidden (document.hidden, its
	// timers a hidden page's) once another tab opens in front of it.
	if err := f.bidi.call(ctx, "browsingContext.create", map[string]any{"type": "window"}, &res); err != nil {
		return nil, fmt.Errorf("new window: %w", err)
	}
	return &firefoxPage{bidi: f.bidi, id: res.Context}, nil
}

func (f *firefox) Close() error {
	f.closeOnce.Do(func() {
		if f.bidi != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			// browser.close ends Firefox as a user quitting would.
			f.bidi.call(ctx, "browser.close", map[string]any{}, nil)
			cancel()
			f.bidi.close()
		}
		f.proc.stop(10 * time.Second)
		removeAllLater(f.profile)
	})
	return nil
}

type firefoxPage struct {
	bidi *bidiConn
	id   string // the browsing context

	closeOnce sync.Once
}

func (p *firefoxPage) Navigate(ctx context.Context, url string) error {
	err := p.bidi.call(ctx, "browsingContext.navigate", map[string]any{"context": p.id, "url": url, "wait": "complete"}, nil)
	if err != nil {
		return fmt.Errorf("navigate: %w", err)
	}
	return nil
}

func (p *firefoxPage) Eval(ctx context.Context, expr string) (json.RawMessage, error) {
	var res struct {
		Type   string `json:"type"` // success or exception
		Result struct {
			Type  string `json:"type"`
			Value string `json:"value"`
		} `json:"result"`
		ExceptionDetails struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	err := p.bidi.call(ctx, "script.evaluate", map[string]any{
		"expression":      evalJS(expr),
		"target":          map[string]any{"context": p.id},
		"awaitPromise":    true,
		"resultOwnership": "none",
	}, &res)
	if err != nil {
		return nil, fmt.Errorf("evaluate: %w", err)
	}
	if res.Type != "success" {
		return nil, fmt.Errorf("evaluate: %s", res.ExceptionDetails.Text)
	}
	if res.Result.Type != "string" {
		return nil, fmt.Errorf("evaluate: result of type %q, want string", res.Result.Type)
	}
	return decodeEval(res.Result.Value)
}

func (p *firefoxPage) Close() error {
	var err error
	p.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = p.bidi.call(ctx, "browsingContext.close", map[string]any{"context": p.id}, nil)
		if errors.Is(err, ErrClosed) {
			err = nil
		}
	})
	return err
}

// bidiConn is a WebDriver BiDi connection: commands carry an id, and one
// reader goroutine hands each response to the command waiting for it.
// Events are ignored (no test subscribes to any). Safe for concurrent use.
type bidiConn struct {
	ws  *websocket.Conn
	wmu sync.Mutex // one writer at a time

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan bidiReply
	err     error // why the reader stopped; set once
	done    chan struct{}
}

type bidiReply struct {
	Type    string          `json:"type"` // success, error, event
	ID      *uint64         `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   string          `json:"error"`
	Message string          `json:"message"`
}

// BiDiError is an error response to a WebDriver BiDi command.
type BiDiError struct {
	Method, Code, Message string
}

func (e *BiDiError) Error() string { return e.Method + ": " + e.Code + ": " + e.Message }

func newBidiConn(ws *websocket.Conn) *bidiConn {
	c := &bidiConn{ws: ws, pending: map[uint64]chan bidiReply{}, done: make(chan struct{})}
	go c.read()
	return c
}

func (c *bidiConn) read() {
	var err error
	for {
		var r bidiReply
		if err = c.ws.ReadJSON(&r); err != nil {
			break
		}
		if r.ID == nil { // an event, or an error about no command
			continue
		}
		c.mu.Lock()
		ch := c.pending[*r.ID]
		delete(c.pending, *r.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- r // buffered
		}
	}
	c.mu.Lock()
	c.err = fmt.Errorf("%w: %v", ErrClosed, err)
	c.mu.Unlock()
	close(c.done)
}

// call sends one command and decodes its result into result (when not
// nil). It returns when the response arrives, ctx ends or the connection
// fails.
func (c *bidiConn) call(ctx context.Context, method string, params, result any) error {
	ch := make(chan bidiReply, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return c.err
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}
	c.wmu.Lock()
	err := c.ws.WriteJSON(map[string]any{"id": id, "method": method, "params": params})
	c.wmu.Unlock()
	if err != nil {
		forget()
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case r := <-ch:
		if r.Type == "error" {
			return &BiDiError{Method: method, Code: r.Error, Message: r.Message}
		}
		if result == nil {
			return nil
		}
		if err := json.Unmarshal(r.Result, result); err != nil {
			return fmt.Errorf("%s: decode result: %w", method, err)
		}
		return nil
	case <-c.done:
		forget()
		c.mu.Lock()
		defer c.mu.Unlock()
		return fmt.Errorf("%s: %w", method, c.err)
	case <-ctx.Done():
		forget()
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

func (c *bidiConn) close() {
	c.wmu.Lock()
	c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.wmu.Unlock()
	c.ws.Close()
	<-c.done
}

// Exited reports whether Firefox has ended (it crashed, or was killed), with
// its last log lines.
func (f *firefox) Exited() (bool, string) {
	if f.proc.exited() {
		return true, f.log.String()
	}
	return false, ""
}
