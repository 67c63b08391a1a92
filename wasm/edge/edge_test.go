package main

import (
	"errors"
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
		{"collector without site", env(EnvCollector, "https://c"), "ITLMON_SITE is not set"},
		{"collector not http", env(EnvCollector, "c.example.com", EnvSite, "chat"), "ITLMON_COLLECTOR: want an http(s) URL"},
		{"bad paths", env(EnvPaths, "some"), `ITLMON_PATHS: want "ids" or "raw", not some`},
		{"bad post timeout", env(EnvPostTimeout, "10s"), "ITLMON_POST_TIMEOUT_MS: want milliseconds from 1 to 30000, not 10s"},
		{"post timeout too long", env(EnvPostTimeout, "60000"), "ITLMON_POST_TIMEOUT_MS: want milliseconds"},
		{"ok", env(EnvCollector, " https://c/ ", EnvSite, "chat & co", EnvKey, "k", EnvPaths, "raw", EnvPostTimeout, "2500"), ""},
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
			if c.Collector != "https://c" || c.Site != "chat & co" || c.Key != "k" || !c.RawPaths || c.PostTimeout != 2500*time.Millisecond {
				t.Fatalf("config %+v", c)
			}
			if got, want := c.Target(), "https://c/v1/origin?site=chat%20%26%20co"; got != want {
				t.Fatalf("Target() = %q, want %q", got, want)
			}
		})
	}
	if c, _ := ParseConfig(env()); c.PostTimeout != DefaultPostTimeout {
		t.Fatalf("default post timeout %v", c.PostTimeout)
	}
	if got := (&Config{}).Target(); got != "" {
		t.Fatalf("Target() without a collector = %q", got)
	}
}

func TestQueryEscape(t *testing.T) {
	for _, s := range []string{"", "chat", "a b&c=d/é~._-", "%2F\x00\xff"} {
		if got, want := queryEscape(s), url.QueryEscape(s); got != strings.ReplaceAll(want, "+", "%20") {
			t.Errorf("queryEscape(%q) = %q, want %q", s, got, want)
		}
	}
}

var testFacts = beacon.Edge{Colo: "AMS", Country: "NL", ASN: 1136, ClientTCPRTTMs: beacon.NoTime}

// A measured stream: the demo's SSE body fed in chunks as worker.mjs does,
// and its edge timeline.
func TestStream(t *testing.T) {
	c := Config{Collector: "https://c", Site: "chat"}
	q := "tokens=40&interval_ms=2&crlf=1&split=1&comments=1"
	vals, _ := url.ParseQuery(q)
	params, err := demo.ParseParams(vals, "", []byte(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	body := params.Body()
	start := time.UnixMilli(1_800_000_000_000)
	s := c.Begin(Response{Path: "/v1/chat/completions", Status: 200, ContentType: "text/event-stream; charset=utf-8",
		Expose: "X-Other", Start: start, HeadersAt: 3 * time.Millisecond, Edge: testFacts}, func() string { return "edge-id-1" })
	if s == nil {
		t.Fatal("an SSE response is not measured")
	}
	if s.ID != "edge-id-1" || !s.SetID || s.Expose != origin.HeaderStream {
		t.Fatalf("stream id %q (set %v), expose %q", s.ID, s.SetID, s.Expose)
	}
	at := start.Add(5 * time.Millisecond)
	for len(body) > 0 {
		n := min(len(body), 97)
		s.Feed(body[:n], at)
		body, at = body[n:], at.Add(time.Millisecond)
	}
	o := s.End(at, meter.StopBodyEnd)
	if o.Vantage != beacon.VantageEdge || o.ID != "edge-id-1" || o.Route != "/v1/chat/completions" || o.HTTPStatus != 200 ||
		meter.Status(o.Status) != meter.StatusComplete || meter.Format(o.Format) != meter.FormatOpenAIChat || o.StartUnixMs != start.UnixMilli() {
		t.Fatalf("timeline %+v", o)
	}
	if o.ContentEvents != 40 || len(o.EmitUs) != 40 || o.Bytes != uint64(len(params.Body())) || o.Flushes == 0 || o.TTFBUs != 5000 {
		t.Fatalf("timeline counts: %d content events, %d emits, %d bytes, %d reads, ttfb %d µs", o.ContentEvents, len(o.EmitUs), o.Bytes, o.Flushes, o.TTFBUs)
	}
	want := testFacts
	want.HeadersUs = 3000
	if o.Edge != want {
		t.Fatalf("edge facts %+v, want %+v", o.Edge, want)
	}
	b, err := c.Batch(o)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := beacon.DecodeOriginBatch(b, beacon.DefaultLimits)
	if err != nil || batch.Site != "chat" || len(batch.Records) != 1 || batch.Records[0].ID != "edge-id-1" {
		t.Fatalf("batch: %+v, %v", batch, err)
	}
}

// The origin's stream id (X-Itlmon-Stream, from the origin middleware) or
// the app's X-Request-Id is kept, and exposed unless it is already; an
// abort is stored as one; ids are redacted from the route unless RawPaths.
func TestStreamID(t *testing.T) {
	newID := func() string { t.Fatal("a new id while the response has one"); return "" }
	c := Config{Collector: "https://c", Site: "chat"}
	for _, tc := range []struct {
		name                      string
		r                         Response
		id, expose, route, format string
	}{
		{"origin's id", Response{StreamID: "origin-id-1", RequestID: "app-1", Expose: "x-itlmon-stream, X-Other", ContentType: "text/event-stream", Path: "/v1/threads/3f9a1c2b4d5e6f708192a3b4c5d6e7f8/runs"},
			"origin-id-1", "", "/v1/threads/:id/runs", "sse"},
		{"app's id", Response{StreamID: "bad id", RequestID: "app-req-7", ContentType: "application/x-ndjson", Path: "/echo"},
			"app-req-7", origin.HeaderRequestID, "/echo", "ndjson"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.r.Status, tc.r.Start = 200, time.Now()
			s := c.Begin(tc.r, newID)
			if s == nil || s.ID != tc.id || s.SetID || s.Expose != tc.expose {
				t.Fatalf("stream %+v, want id %q, expose %q", s, tc.id, tc.expose)
			}
			s.Feed([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"), tc.r.Start)
			o := s.End(tc.r.Start.Add(time.Second), meter.StopAbort)
			if o.ID != tc.id || meter.Status(o.Status) != meter.StatusAborted || o.Route != tc.route {
				t.Fatalf("timeline: id %q status %v route %q", o.ID, meter.Status(o.Status), o.Route)
			}
		})
	}
	raw := Config{Collector: "https://c", Site: "chat", RawPaths: true}
	p := "/v1/threads/3f9a1c2b4d5e6f708192a3b4c5d6e7f8/runs"
	if o := raw.Begin(Response{Path: p, ContentType: "text/event-stream", StreamID: "x"}, newID).End(time.Now(), meter.StopBodyEnd); o.Route != p {
		t.Fatalf("raw route %q, want %q", o.Route, p)
	}
}

// Responses that are not token streams are not measured; text/plain is
// when it is the AI SDK's data stream (its header).
func TestNotMeasured(t *testing.T) {
	c := Config{Collector: "https://c", Site: "chat"}
	for _, ct := range []string{"application/json", "", "text/html", "text/event-streamx", "text/plain; charset=utf-8"} {
		if s := c.Begin(Response{Path: "/v1/chat/completions", Status: 200, ContentType: ct}, func() string { return "x" }); s != nil {
			t.Errorf("Content-Type %q measured", ct)
		}
	}
	s := c.Begin(Response{Path: "/api/chat", Status: 200, ContentType: "text/plain; charset=utf-8", DataStream: "v1", Start: time.Now()},
		func() string { return "x" })
	if s == nil {
		t.Fatal("the AI SDK's data stream is not measured")
	}
	s.Feed([]byte("f:{\"messageId\":\"m\"}\n0:\"Hi\"\n0:\" there\"\nd:{\"finishReason\":\"stop\",\"usage\":{\"promptTokens\":1,\"completionTokens\":2}}\n"), time.Now())
	if o := s.End(time.Now(), meter.StopBodyEnd); meter.Format(o.Format) != meter.FormatVercelAIData || o.ContentEvents != 2 || o.Events != 4 {
		t.Fatalf("format %v, %d content events of %d; want %v, 2 of 4", meter.Format(o.Format), o.ContentEvents, o.Events, meter.FormatVercelAIData)
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
				p := &Poster{
					Send: func(body []byte, _ time.Duration) error {
						tries++
						return tc.answers[min(tries, len(tc.answers))-1]
					},
					Timeout: DefaultPostTimeout,
					Logf:    t.Logf,
				}
				p.Post([]byte("batch"))
				if got := p.Stats(); got != tc.want || tries != tc.tries {
					t.Fatalf("stats %+v after %d tries, want %+v after %d", got, tries, tc.want, tc.tries)
				}
			})
		})
	}
	// The collector down for good: retried until the deadline, then given
	// up and counted, never past the deadline.
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		// Each attempt is given up at the deadline of all of them: an
		// attempt that hangs (a collector that accepts and never answers)
		// ends there too.
		p := &Poster{Timeout: DefaultPostTimeout, Logf: t.Logf,
			Send: func(_ []byte, timeout time.Duration) error {
				if end := time.Since(start) + timeout; end != DefaultPostTimeout {
					t.Errorf("attempt given up %v after the first, want at the deadline %v", end, DefaultPostTimeout)
				}
				return &StatusError{Code: 503}
			}}
		p.Post(nil)
		st := p.Stats()
		// Waits in [50, 100), [100, 200), ... [800, 1600) ms, then [1, 2) s
		// each: the first five end within 1.55-3.1 s, so 8 (every wait
		// near its longest: 3.1 + 3×2 = 9.1 s, a ninth would end past 10)
		// to 13 (every wait its shortest: 1.55 + 8×1 = 9.55 s) end
		// within 10 s.
		if st.Failed != 1 || st.Posted+st.Rejected != 0 || st.Retries < 8 || st.Retries > 13 {
			t.Fatalf("stats %+v, want 1 failed after 8-13 retries", st)
		}
		if got := time.Since(start); got != DefaultPostTimeout {
			t.Fatalf("gave up after %v, want the deadline %v", got, DefaultPostTimeout)
		}
	})
}
