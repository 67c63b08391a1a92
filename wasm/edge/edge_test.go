package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/itlmon/itlmon/collector/demo"
	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

func TestParseConfig(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, tc := range []struct {
		name string
		env  func(string) string
		err  string
	}{
		{"no origin", env(), "ITLMON_ORIGIN is not set"},
		{"origin not http", env(EnvOrigin, "ftp://x"), "ITLMON_ORIGIN: want an http(s) base URL"},
		{"origin with query", env(EnvOrigin, "https://x/?a=1"), "ITLMON_ORIGIN: want an http(s) base URL"},
		{"route without slash", env(EnvOrigin, "https://x", EnvRoutes, "v1/chat"), "ITLMON_ROUTES: route v1/chat does not start with /"},
		{"collector without site", env(EnvOrigin, "https://x", EnvCollector, "https://c"), "ITLMON_SITE is not set"},
		{"bad paths", env(EnvOrigin, "https://x", EnvPaths, "some"), `ITLMON_PATHS: want "ids" or "raw", not some`},
		{"ok", env(EnvOrigin, "https://api.example.com/base/", EnvRoutes, " /v1/chat/completions, /api/* ,", EnvCollector, "https://c/", EnvSite, "chat", EnvKey, "k", EnvPaths, "raw"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(tc.env)
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := c.Origin.String(), "https://api.example.com/base"; got != want {
				t.Fatalf("origin = %s, want %s", got, want)
			}
			if c.Collector != "https://c" || c.Site != "chat" || c.Key != "k" || !c.RawPaths || len(c.Routes) != 2 {
				t.Fatalf("config %+v", c)
			}
		})
	}
}

func TestMeasured(t *testing.T) {
	c := Config{Routes: []string{"/v1/chat/completions", "/api/*"}}
	for path, want := range map[string]bool{
		"/v1/chat/completions": true, "/v1/chat/completions/x": false, "/api/chat": true, "/api/": true, "/apix": false, "/": false,
	} {
		if got := c.Measured(path); got != want {
			t.Errorf("Measured(%q) = %v, want %v", path, got, want)
		}
	}
	if !(&Config{}).Measured("/anything") {
		t.Error("no routes: every path is measured")
	}
}

// fixture is an origin (the demo APIs, plus test routes) behind a Proxy
// served by net/http, whose timelines land in posts.
type fixture struct {
	proxy    *httptest.Server
	p        *Proxy
	posts    chan []byte
	originCx chan error // the origin handler's context error when its stream ended
}

var testFacts = beacon.Edge{Colo: "AMS", Country: "NL", ASN: 1136, ClientTCPRTTMs: beacon.NoTime}

func newFixture(t *testing.T, routes ...string) *fixture {
	t.Helper()
	f := &fixture{posts: make(chan []byte, 8), originCx: make(chan error, 8)}
	mux := http.NewServeMux()
	mux.Handle("/base/v1/chat/completions", http.StripPrefix("/base", demo.Completions()))
	mux.HandleFunc("/base/pause", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set(origin.HeaderStream, "origin-id-1")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		f.originCx <- r.Context().Err()
	})
	mux.HandleFunc("/base/echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set(origin.HeaderRequestID, "app-req-7")
		w.Write([]byte(r.Method + " " + r.URL.RequestURI() + " " + string(b) + "\n"))
	})
	mux.HandleFunc("/base/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	})
	up := httptest.NewServer(mux)
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL + "/base")
	f.p = &Proxy{
		Config: Config{Origin: u, Routes: routes, Collector: "https://collector.test", Site: "chat", Key: "secret"},
		Fetch:  http.DefaultTransport.RoundTrip,
		Post: func(_ context.Context, target, key string, body []byte) error {
			if target != "https://collector.test/v1/origin?site=chat" || key != "secret" {
				return errors.New("post to " + target + " with key " + key)
			}
			f.posts <- body
			return nil
		},
		Background: func(fn func()) { go fn() },
		Facts:      func(*http.Request) beacon.Edge { return testFacts },
		Now:        time.Now,
		NewID:      func() string { return "edge-id-1" },
		Logf:       t.Logf,
	}
	f.proxy = httptest.NewServer(f.p)
	t.Cleanup(f.proxy.Close)
	return f
}

func (f *fixture) timeline(t *testing.T) beacon.Origin {
	t.Helper()
	select {
	case body := <-f.posts:
		b, err := beacon.DecodeOriginBatch(body, beacon.DefaultLimits)
		if err != nil {
			t.Fatalf("posted timeline: %v", err)
		}
		if len(b.Records) != 1 || b.Site != "chat" {
			t.Fatalf("batch: site %q, %d records", b.Site, len(b.Records))
		}
		return b.Records[0]
	case <-time.After(10 * time.Second):
		t.Fatal("no timeline posted")
	}
	panic("unreachable")
}

func TestProxyStream(t *testing.T) {
	f := newFixture(t, "/v1/*")
	q := "tokens=40&interval_ms=2&crlf=1&split=1&comments=1"
	vals, _ := url.ParseQuery(q)
	params, err := demo.ParseParams(vals, "", []byte(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(f.proxy.URL+"/v1/chat/completions?"+q, "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, params.Body()) {
		t.Fatalf("body through the proxy differs from the origin's (%d vs %d bytes)", len(got), len(params.Body()))
	}
	if id := resp.Header.Get(origin.HeaderStream); id != "edge-id-1" || !strings.Contains(resp.Header.Get(origin.HeaderExpose), origin.HeaderStream) {
		t.Fatalf("stream id %q, expose %q", id, resp.Header.Get(origin.HeaderExpose))
	}
	o := f.timeline(t)
	if o.Vantage != beacon.VantageEdge || o.ID != "edge-id-1" || o.Route != "/v1/chat/completions" || o.HTTPStatus != 200 ||
		meter.Status(o.Status) != meter.StatusComplete || meter.Format(o.Format) != meter.FormatOpenAIChat {
		t.Fatalf("timeline %+v", o)
	}
	if o.ContentEvents != 40 || len(o.EmitUs) != 40 || o.Bytes != uint64(len(got)) || o.Flushes == 0 {
		t.Fatalf("timeline counts: %d content events, %d emits, %d bytes, %d reads", o.ContentEvents, len(o.EmitUs), o.Bytes, o.Flushes)
	}
	want := testFacts
	want.HeadersUs = o.Edge.HeadersUs
	if o.Edge != want || o.Edge.HeadersUs == beacon.NoTime || o.Edge.HeadersUs > o.TTFBUs {
		t.Fatalf("edge facts %+v (ttfb %d), want %+v", o.Edge, o.TTFBUs, testFacts)
	}
}

// The origin's stream id (X-Itlmon-Stream, from the origin middleware) or
// the app's X-Request-Id is kept; an abort reaches the origin and is stored.
func TestProxyKeepsIDAndAborts(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", f.proxy.URL+"/pause", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if id := resp.Header.Get(origin.HeaderStream); id != "origin-id-1" {
		t.Fatalf("stream id %q, want the origin's", id)
	}
	buf := make([]byte, 100)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	select {
	case err := <-f.originCx:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("origin's context: %v, want canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the abort did not reach the origin")
	}
	if o := f.timeline(t); o.ID != "origin-id-1" || meter.Status(o.Status) != meter.StatusAborted || o.ContentEvents != 1 {
		t.Fatalf("timeline: id %q status %v, %d content events", o.ID, meter.Status(o.Status), o.ContentEvents)
	}

	resp, err = http.Post(f.proxy.URL+"/echo?x=1", "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "POST /base/echo?x=1 hello\n" || resp.Header.Get(origin.HeaderStream) != "" {
		t.Fatalf("echo through the proxy: %q, %s %q", b, origin.HeaderStream, resp.Header.Get(origin.HeaderStream))
	}
	if o := f.timeline(t); o.ID != "app-req-7" || o.Route != "/echo" || meter.Format(o.Format) != meter.FormatNDJSON {
		t.Fatalf("timeline: id %q route %q format %v", o.ID, o.Route, meter.Format(o.Format))
	}
}

// Responses on routes not measured, and redirects, pass through untouched.
func TestProxyNotMeasured(t *testing.T) {
	f := newFixture(t, "/v1/chat/completions")
	resp, err := http.Post(f.proxy.URL+"/echo", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Header.Get(origin.HeaderStream) != "" || resp.Header.Get(origin.HeaderExpose) != "" {
		t.Fatalf("unmeasured route got %v", resp.Header)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = c.Get(f.proxy.URL + "/moved")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/elsewhere" {
		t.Fatalf("redirect through the proxy: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	select {
	case <-f.posts:
		t.Fatal("a timeline was posted for an unmeasured response")
	case <-time.After(100 * time.Millisecond):
	}
}

// TestPostTimelineStatus: the Worker's timeline post retries what may
// succeed later (the network's errors, 429, 5xx) with backoff, drops what
// the collector refused for good (any other 4xx: a poisoned batch) after
// one try, and gives up when its deadline passes; each outcome is counted.
func TestPostTimelineStatus(t *testing.T) {
	netErr := errors.New("connection refused")
	for _, tc := range []struct {
		name    string
		answers []error // one per attempt; the last repeats
		want    PostStats
		tries   int
	}{
		{"accepted", []error{nil}, PostStats{Posted: 1}, 1},
		{"retried then accepted", []error{&StatusError{Code: 503}, &StatusError{Code: 429}, netErr, &StatusError{Code: 500}, nil},
			PostStats{Posted: 1, Retries: 4}, 5},
		{"malformed or another major", []error{&StatusError{Code: 400}}, PostStats{Rejected: 1}, 1},
		{"too big", []error{&StatusError{Code: 413}}, PostStats{Rejected: 1}, 1},
		{"not storable", []error{&StatusError{Code: 422}}, PostStats{Rejected: 1}, 1},
		{"wrong key", []error{&StatusError{Code: 403}}, PostStats{Rejected: 1}, 1},
		{"retried then refused", []error{netErr, &StatusError{Code: 400}}, PostStats{Rejected: 1, Retries: 1}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tries := 0
				p := &Proxy{
					Post: func(ctx context.Context, _, _ string, _ []byte) error {
						tries++
						return tc.answers[min(tries, len(tc.answers))-1]
					},
					Logf: t.Logf,
				}
				ctx, cancel := context.WithTimeout(context.Background(), postTimeout)
				defer cancel()
				p.postTimeline(ctx, "https://collector.test/v1/origin?site=chat", []byte("batch"))
				if got := p.Stats(); got != tc.want || tries != tc.tries {
					t.Fatalf("stats %+v after %d tries, want %+v after %d", got, tries, tc.want, tc.tries)
				}
			})
		})
	}
	// The collector down for good: retried until the deadline, then given
	// up and counted, never past the deadline.
	synctest.Test(t, func(t *testing.T) {
		p := &Proxy{Post: func(context.Context, string, string, []byte) error { return &StatusError{Code: 503} }, Logf: t.Logf}
		ctx, cancel := context.WithTimeout(context.Background(), postTimeout)
		defer cancel()
		start := time.Now()
		p.postTimeline(ctx, "u", nil)
		st := p.Stats()
		// Waits in [50, 100), [100, 200), ... [800, 1600) ms, then [1, 2) s
		// each: 9 to 13 of them end within 10 s.
		if st.Failed != 1 || st.Posted+st.Rejected != 0 || st.Retries < 9 || st.Retries > 13 {
			t.Fatalf("stats %+v, want 1 failed after 9-13 retries", st)
		}
		if got := time.Since(start); got != postTimeout {
			t.Fatalf("gave up after %v, want the deadline %v", got, postTimeout)
		}
	})
}
