package nginx

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// upstream is a plain Go server standing in for a collector: it names
// itself on GET and on a new WebSocket, echoes WebSocket messages, and keeps
// the body of every POST it read. With slow set, a POST is answered only
// once release is closed (the request was received: a stopped process
// holds it too).
type upstream struct {
	name    string
	srv     *httptest.Server
	release chan struct{}

	mu    sync.Mutex
	slow  bool
	posts []string // "path body", in arrival order
	hosts []string // Host header of every request
}

func newUpstream(t *testing.T, name string) *upstream {
	u := &upstream{name: name, release: make(chan struct{})}
	up := websocket.Upgrader{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.hosts = append(u.hosts, r.Host)
		slow := u.slow
		u.mu.Unlock()
		w.Header().Set("X-Upstream", name)
		switch {
		case r.URL.Path == "/v1/ws":
			c, err := up.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			defer c.Close()
			if c.WriteMessage(websocket.TextMessage, []byte(name)) != nil {
				return
			}
			for {
				typ, p, err := c.ReadMessage()
				if err != nil || c.WriteMessage(typ, p) != nil {
					return
				}
			}
		case r.Method == http.MethodPost:
			body, _ := io.ReadAll(r.Body)
			u.mu.Lock()
			u.posts = append(u.posts, r.URL.Path+" "+string(body))
			u.mu.Unlock()
			if slow {
				select {
				case <-u.release:
				case <-time.After(20 * time.Second):
				}
			}
			w.WriteHeader(http.StatusNoContent)
		default:
			io.WriteString(w, name)
		}
	}))
	t.Cleanup(func() {
		u.unblock()
		u.srv.CloseClientConnections()
		u.srv.Close()
	})
	return u
}

// unblock answers the held POSTs and every later one at once.
func (u *upstream) unblock() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.slow = false
	select {
	case <-u.release:
	default:
		close(u.release)
	}
}

func (u *upstream) received() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.posts)
}

func (u *upstream) requestHosts() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.hosts)
}

func (u *upstream) addr() string { return strings.TrimPrefix(u.srv.URL, "http://") }

// post sends body to path through ng and returns the status and the
// upstream that answered.
func post(t *testing.T, ng *Server, path, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(ng.URL()+path, "application/octet-stream", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Upstream")
}

// dialWS opens the ingest WebSocket through ng and returns it with the name
// of the upstream that accepted it, checking that a binary message echoes.
func dialWS(t *testing.T, ng *Server) (*websocket.Conn, string) {
	t.Helper()
	c, _, err := websocket.DefaultDialer.Dial("ws://"+ng.Addr+"/v1/ws?site=test", nil)
	if err != nil {
		t.Fatalf("WebSocket through nginx: %v\n%s", err, ng.ErrorLog())
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, name, err := c.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	echo(t, c)
	return c, string(name)
}

// echo sends a binary message on c and wants it back.
func echo(t *testing.T, c *websocket.Conn) {
	t.Helper()
	msg := []byte{0, 1, 2, 0xff}
	if err := c.WriteMessage(websocket.BinaryMessage, msg); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, got, err := c.ReadMessage()
	if err != nil || typ != websocket.BinaryMessage || !bytes.Equal(got, msg) {
		t.Fatalf("echo = %d %x, %v; want binary %x", typ, got, err, msg)
	}
}

// TestBalancer: round robin over two upstreams, one WebSocket connection
// or one request after the other; upgraded WebSockets carry binary
// messages; the Host header is the client's.
func TestBalancer(t *testing.T) {
	RequireReal(t)
	a, b := newUpstream(t, "a"), newUpstream(t, "b")
	ng := Start(t, Options{Upstreams: []string{a.srv.URL, b.addr()}})
	if got, want := ng.Upstreams, []string{a.addr(), b.addr()}; !slices.Equal(got, want) {
		t.Fatalf("Upstreams = %v, want %v", got, want)
	}
	count := map[string]int{}
	for range 4 {
		_, name := dialWS(t, ng)
		count["ws "+name]++
	}
	for _, path := range []string{"/v1/beacon", "/v1/origin"} {
		for i := range 4 {
			code, name := post(t, ng, path, fmt.Sprint(i))
			if code != http.StatusNoContent {
				t.Fatalf("POST %s = %d, want 204", path, code)
			}
			count[path+" "+name]++
		}
	}
	for _, k := range []string{"ws", "/v1/beacon", "/v1/origin"} {
		if count[k+" a"] != 2 || count[k+" b"] != 2 {
			t.Errorf("%s: %d to a, %d to b; want 2 each (round robin)", k, count[k+" a"], count[k+" b"])
		}
	}
	if n := len(a.received()) + len(b.received()); n != 8 {
		t.Errorf("upstreams received %d POSTs, want 8 (each once)", n)
	}
	resp, err := http.Get(ng.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, h := range slices.Concat(a.requestHosts(), b.requestHosts()) {
		if h != ng.Addr {
			t.Fatalf("upstream saw Host %q, want the client's %q", h, ng.Addr)
		}
	}
}

// TestBalancerRetry: an ingest POST its upstream does not answer within
// RetryAfter is answered by the other, and the slow one has it too: the load
// balancer delivered it twice. The WebSocket is not subject to RetryAfter.
func TestBalancerRetry(t *testing.T) {
	RequireReal(t)
	const retryAfter = 300 * time.Millisecond
	a, b := newUpstream(t, "a"), newUpstream(t, "b")
	ng := Start(t, Options{Upstreams: []string{a.addr(), b.addr()}, RetryAfter: retryAfter})
	ws, _ := dialWS(t, ng)
	a.mu.Lock()
	a.slow = true
	a.mu.Unlock()
	// Round robin sends one of the first two POSTs to a first.
	for i := range 4 {
		path := []string{"/v1/beacon", "/v1/origin"}[i%2]
		code, name := post(t, ng, path, fmt.Sprint("p", i))
		if code != http.StatusNoContent || name != "b" {
			t.Fatalf("POST %d = %d from %q, want 204 from b", i, code, name)
		}
	}
	// a is skipped for a second after a timeout: usually one POST reaches it.
	got, gotB := a.received(), b.received()
	if len(got) == 0 || len(gotB) != 4 {
		t.Fatalf("a received %q, b %q; want a POST on a (timed out, retried on b), all four on b", got, gotB)
	}
	for _, p := range got {
		if !slices.Contains(gotB, p) {
			t.Fatalf("a's POST %q not retried on b (b got %q)", p, gotB)
		}
	}
	t.Logf("delivered twice: %q (a answered late, b at once)", got)
	a.unblock()

	// sleep: the scenario, not a wait for a condition: the WebSocket idles longer
	// than RetryAfter, and must still be open after.
	time.Sleep(2 * retryAfter)
	echo(t, ws)
}

// TestBalancerMirror: every ingest POST also goes to every upstream; other
// requests are not mirrored.
func TestBalancerMirror(t *testing.T) {
	RequireReal(t)
	a, b := newUpstream(t, "a"), newUpstream(t, "b")
	ng := Start(t, Options{Upstreams: []string{a.addr(), b.addr()}, Mirror: true})
	code, name := post(t, ng, "/v1/origin", "m1")
	if code != http.StatusNoContent {
		t.Fatalf("POST = %d, want 204", code)
	}
	if resp, err := http.Post(ng.URL()+"/v1/other", "text/plain", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	want := map[string]int{"a": 1, "b": 1}
	want[name]++ // the balanced one: once proxied, once mirrored
	// The mirrored copy reaches the upstream after the response: polled
	// (nothing in this process learns when nginx sends it).
	var na, nb int
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		na = strings.Count(strings.Join(a.received(), "\n"), "/v1/origin m1")
		nb = strings.Count(strings.Join(b.received(), "\n"), "/v1/origin m1")
		if na == want["a"] && nb == want["b"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a received it %d times, b %d; want %v (answered by %s)", na, nb, want, name)
		}
	}
	if n := strings.Count(strings.Join(slices.Concat(a.received(), b.received()), "\n"), "/v1/other"); n != 1 {
		t.Fatalf("POST /v1/other received %d times, want 1 (not mirrored)", n)
	}
}

func TestBalancerOptions(t *testing.T) {
	for _, o := range []Options{
		{},
		{Upstream: "127.0.0.1:1", Upstreams: []string{"127.0.0.1:2"}},
		{Upstream: "127.0.0.1:1", Mirror: true},
		{Upstream: "127.0.0.1:1", RetryAfter: time.Second},
		{Upstreams: []string{"127.0.0.1:1", ""}},
		{Upstreams: []string{"127.0.0.1:1"}, RetryAfter: -time.Second},
	} {
		if _, err := start(t.TempDir(), o); err == nil {
			t.Errorf("%+v: started, want an error", o)
		}
	}
}
