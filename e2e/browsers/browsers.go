// Package browsers drives real browser engines for the end-to-end tests
// through one small interface, whatever protocol each engine speaks:
//
//	Chromium      the Chrome DevTools Protocol, through chromedp (Chromium)
//	Firefox ESR   WebDriver BiDi over a WebSocket (LaunchFirefox)
//	WebKitGTK     W3C WebDriver classic over HTTP to WebKitWebDriver, which
//	              drives the MiniBrowser on an Xvfb display (LaunchWebKit)
//
// An Engine is one browser process; a Page is one tab (or window) in it. A
// page's value crosses the protocol as a JSON text the page itself makes
// with JSON.stringify, so every engine decodes it the same way.
//
// Engines are not safe for concurrent use by several pages at once: WebDriver
// classic has one current window per session. The tests drive one page of an
// engine at a time.
package browsers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Engine is one running browser.
type Engine interface {
	// Name is the engine's short name: "chromium", "firefox" or "webkit".
	Name() string
	// Version is the browser's version as it reports it.
	Version() string
	// NewPage opens a new tab (about:blank).
	NewPage(ctx context.Context) (Page, error)
	// Close ends the browser and every process it started. It is
	// idempotent.
	Close() error
}

// Page is one tab of an Engine.
type Page interface {
	// Navigate loads url and returns once its load event has fired.
	Navigate(ctx context.Context, url string) error
	// Eval evaluates the JavaScript expression expr in the page's global
	// scope, awaits it when it is a promise, and returns its value as
	// JSON (undefined as null). An exception or a rejection is an
	// *EvalError; anything else wrong (the page went away, the protocol
	// failed, ctx ended) is another error.
	Eval(ctx context.Context, expr string) (json.RawMessage, error)
	// Close closes the tab. It is idempotent.
	Close() error
}

// EvalError is an exception thrown, or a rejection, by an evaluated
// expression.
type EvalError struct {
	Message string // the error's name and message, or its String()
}

func (e *EvalError) Error() string { return "page threw: " + e.Message }

// evalJS wraps expr so that evaluating the result gives a promise of one
// JSON text: {"value": <expr's value as JSON>} or {"error": "..."}. A page
// exception thus crosses every protocol the same way, as data.
func evalJS(expr string) string {
	return `Promise.resolve().then(() => (` + expr + `
)).then(v => { const s = JSON.stringify(v); return '{"value":' + (s === undefined ? 'null' : s) + '}'; })
.catch(e => JSON.stringify({ error: String(e && e.name && e.message !== undefined ? e.name + ': ' + e.message : e) }))`
}

// decodeEval decodes what evalJS's promise resolved to.
func decodeEval(text string) (json.RawMessage, error) {
	var env struct {
		Value json.RawMessage `json:"value"`
		Error *string         `json:"error"`
	}
	if err := json.Unmarshal([]byte(text), &env); err != nil {
		return nil, fmt.Errorf("decode page result: %w", err)
	}
	if env.Error != nil {
		return nil, &EvalError{Message: *env.Error}
	}
	if env.Value == nil {
		return json.RawMessage("null"), nil
	}
	return env.Value, nil
}

// ErrClosed is returned by the methods of a closed Page or Engine.
var ErrClosed = errors.New("browser closed")

// process is a browser-side program run in its own process group, so that
// stop ends the helpers it starts too (content processes, the MiniBrowser).
type process struct {
	name   string
	cmd    *exec.Cmd
	waited chan struct{}
	once   sync.Once
}

// startProcess starts cmd in a new process group that the kernel kills
// when this process dies, whatever the way.
func startProcess(name string, cmd *exec.Cmd) (*process, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, waited: make(chan struct{})}
	go func() { cmd.Wait(); close(p.waited) }()
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.waited:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, waits up to grace, then sends
// SIGKILL and waits for the process.
func (p *process) stop(grace time.Duration) {
	p.once.Do(func() {
		pgid := p.cmd.Process.Pid
		syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.waited:
		case <-time.After(grace):
		}
		// Whatever is left of the group (helpers outliving their parent).
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.waited
	})
}

// tailBuf keeps the last max bytes written to it: a browser's log, for
// errors.
type tailBuf struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuf) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuf) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// removeAllLater removes dir; a browser that was just killed may still be
// letting go of files in it, so it tries a few times.
func removeAllLater(dir string) {
	for range 5 {
		if os.RemoveAll(dir) == nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // real time: another process (the killed browser) lets go of its files
	}
}
