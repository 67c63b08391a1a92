package e2e

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// The headers real origins send, as they send them: commas inside dates,
// quotes and parameters, repeated fields. A proxy must pass them as the
// runtime gave them, never split or rejoin them.
var edgeHeaderMatrix = [][2]string{
	{"Set-Cookie", "session=abc123; Path=/; Expires=Wed, 21 Oct 2037 07:28:00 GMT; HttpOnly; Secure"},
	{"Set-Cookie", "pref=dark; Max-Age=31536000; SameSite=Lax"},
	{"Set-Cookie", `quoted="a,b"; Path=/; Expires=Thu, 01 Jan 2037 00:00:00 GMT`},
	{"ETag", `"v1,2026"`},
	{"Last-Modified", "Wed, 21 Oct 2015 07:28:00 GMT"},
	{"Cache-Control", "private, max-age=0, must-revalidate"},
	{"Link", `</style.css>; rel=preload; as=style, </app.js>; rel=preload; as=script; title="a, b"`},
	{"Content-Security-Policy", "default-src 'self'; script-src 'self' https://cdn.example.com; connect-src 'self' https://api.example.com wss://ws.example.com"},
	{"Access-Control-Allow-Origin", "https://chat.example.com"},
	{"Access-Control-Allow-Credentials", "true"},
	{"Access-Control-Allow-Headers", "Content-Type, Authorization, X-Request-Id"},
	{"Vary", "Origin"},
	{"Vary", "Accept-Encoding, Cookie"},
	{"X-Custom", "a,b"},
	{"X-Custom", `c, "d,e"`},
	{"Content-Disposition", `attachment; filename="report, final.txt"; filename*=UTF-8''report%2C%20final.txt`},
	{"WWW-Authenticate", `Bearer realm="api", error="invalid_token", error_description="expired, renew"`},
}

// edgeRequestHeaders are the request's headers the origin must receive as
// sent.
var edgeRequestHeaders = [][2]string{
	{"If-None-Match", `"v0,2025", W/"v1, weak"`},
	{"Cookie", `session=abc123; quoted="a,b"`},
	{"Accept", "text/event-stream, application/json;q=0.9"},
	{"Authorization", "Bearer abc,def"},
	{"X-Dup", "a,b"},
	{"X-Dup", "c"},
	{"Prefer", `return=minimal, wait=5, respond-async`},
}

// headerOrigin answers every request with the header matrix and, in its
// body, the request headers it received (JSON, each field's values in
// order): an SSE stream, or JSON (?json=1), or 304 when If-None-Match
// names its ETag (?etag=1), or a redirect (?moved=1); ?id=1 adds the
// origin middleware's stream id and exposes it.
func headerOrigin() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := json.Marshal(r.Header)
		io.Copy(io.Discard, r.Body)
		h := w.Header()
		for _, kv := range edgeHeaderMatrix {
			h[kv[0]] = append(h[kv[0]], kv[1]) // as written, never canonicalised or joined
		}
		q := r.URL.Query()
		if q.Get("id") == "1" {
			h.Set(origin.HeaderStream, "hdr-origin-id")
			h.Set(origin.HeaderExpose, "X-Itlmon-Stream, ETag")
		}
		switch {
		case q.Get("moved") == "1":
			h.Set("Location", "/elsewhere?a=1,2")
			w.WriteHeader(http.StatusFound)
		case q.Get("etag") == "1" && strings.Contains(r.Header.Get("If-None-Match"), `"v1,2026"`):
			w.WriteHeader(http.StatusNotModified)
		case q.Get("json") == "1":
			h.Set("Content-Type", "application/json")
			w.Write(got)
		default:
			h.Set("Content-Type", "text/event-stream")
			w.Write([]byte("data: " + string(got) + "\n\n"))
			w.(http.Flusher).Flush()
			for _, tok := range []string{"a", "b", "c"} {
				w.Write([]byte(`data: {"choices":[{"delta":{"content":"` + tok + `"}}]}` + "\n\n"))
				w.(http.Flusher).Flush()
			}
			w.Write([]byte("data: [DONE]\n\n"))
		}
	})
}

// TestEdgeHeaders: every header of the matrix, in both directions, through
// the Go Worker exactly as through a JavaScript pass-through Worker in the
// same workerd: on a measured stream, a measured route's JSON, a route not
// measured, a 304 and a redirect. The only difference allowed is the stream
// id the Go Worker adds to a measured stream that has none.
func TestEdgeHeaders(t *testing.T) {
	t.Parallel() // it times nothing
	sink := startEdgeSink(t)
	originURL, _ := serve(t, headerOrigin())
	wd := startWorkerd(t, originURL, sink.URL)

	do := func(t *testing.T, base, method, path string, extra ...[2]string) (*http.Response, []byte) {
		t.Helper()
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader(`{"model":"m","stream":true}`)
		}
		req, _ := http.NewRequest(method, base+path, body)
		for _, kv := range append(slices.Clone(edgeRequestHeaders), extra...) {
			req.Header[kv[0]] = append(req.Header[kv[0]], kv[1])
		}
		req.Header.Set(cfBlobHeader, edgeCFJSON())
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	for _, tc := range []struct {
		name, method, path string
		extra              [][2]string
		status             int
		addsID             bool // the Go Worker adds X-Itlmon-Stream and exposes it
	}{
		{"measured stream", "POST", "/v1/chat/completions", nil, 200, true},
		{"measured stream with the origin's id", "POST", "/v1/chat/completions?id=1", nil, 200, false},
		{"measured route, JSON", "POST", "/v1/chat/completions?json=1", nil, 200, false},
		{"route not measured", "GET", "/assets/report?json=1", nil, 200, false},
		{"route not measured, stream", "POST", "/other/stream", nil, 200, false},
		{"304 on If-None-Match", "GET", "/v1/files/1?etag=1", [][2]string{{"If-None-Match", `"v1,2026"`}}, 304, false},
		{"redirect", "GET", "/v1/old?moved=1", nil, 302, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := sink.len()
			viaJS, jsBody := do(t, wd.JSURL, tc.method, tc.path, tc.extra...)
			viaGo, goBody := do(t, wd.URL, tc.method, tc.path, tc.extra...)
			if viaGo.StatusCode != tc.status || viaJS.StatusCode != tc.status {
				t.Fatalf("status: Go Worker %d, JS pass-through %d, want %d", viaGo.StatusCode, viaJS.StatusCode, tc.status)
			}
			if string(goBody) != string(jsBody) {
				t.Fatalf("body (the origin's echo of the request headers) through the Go Worker:\n%s\nthrough the JS pass-through:\n%s", goBody, jsBody)
			}
			gh, jh := viaGo.Header.Clone(), viaJS.Header.Clone()
			gh.Del("Date")
			jh.Del("Date")
			if tc.addsID {
				id := gh.Get(origin.HeaderStream)
				if !origin.ValidID(id) || jh.Get(origin.HeaderStream) != "" {
					t.Fatalf("stream id: Go Worker %q, JS pass-through %q", id, jh.Get(origin.HeaderStream))
				}
				if got, want := gh.Values(origin.HeaderExpose), []string{origin.HeaderStream}; !slices.Equal(got, want) {
					t.Fatalf("%s through the Go Worker: %q, want %q", origin.HeaderExpose, got, want)
				}
				gh.Del(origin.HeaderStream)
				gh.Del(origin.HeaderExpose)
			}
			if !maps.EqualFunc(gh, jh, slices.Equal) {
				var diff []string
				for k := range mergedKeys(gh, jh) {
					if !slices.Equal(gh[k], jh[k]) {
						diff = append(diff, k+": Go Worker "+quoteAll(gh[k])+", JS pass-through "+quoteAll(jh[k]))
					}
				}
				t.Fatalf("response headers differ:\n%s", strings.Join(diff, "\n"))
			}
			// And as the origin sent them: the pass-through is the
			// reference, these are what a browser depends on.
			if got := viaGo.Header.Values("Set-Cookie"); len(got) != 3 || got[0] != edgeHeaderMatrix[0][1] {
				t.Fatalf("Set-Cookie through the Go Worker: %q", got)
			}
			if got := viaGo.Header.Get("ETag"); got != `"v1,2026"` {
				t.Fatalf("ETag through the Go Worker: %q", got)
			}
			if tc.status == 200 && !strings.Contains(string(goBody), `"If-None-Match":["\"v0,2025\", W/\"v1, weak\""`) {
				t.Fatalf("the origin received, through the Go Worker: %s", goBody)
			}
			if id := viaGo.Header.Get(origin.HeaderStream); id != "" {
				if !sink.changed.Wait(15*time.Second, func() bool {
					sink.mu.Lock()
					defer sink.mu.Unlock()
					return slices.ContainsFunc(sink.recs[before:], func(r beacon.Origin) bool { return r.ID == id && r.Vantage == beacon.VantageEdge })
				}) {
					t.Fatalf("no edge timeline for stream %q", id)
				}
			}
		})
	}
	if got := sink.len(); got != 2 {
		t.Fatalf("%d timelines posted, want 2 (the two measured streams)", got)
	}
}

func mergedKeys(a, b http.Header) map[string]bool {
	m := map[string]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return m
}

func quoteAll(v []string) string {
	b, _ := json.Marshal(v)
	return string(b)
}
