package demo

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestParseParams(t *testing.T) {
	tests := []struct {
		name   string
		query  string
		header string
		body   string
		want   func(p *Params)
	}{
		{"defaults", "", "", "", func(p *Params) {}},
		{"body fields", "", "", `{"model":"m1","tokens":7,"interval_ms":12.5,"pause_at":3,"pause_ms":400,"burst":2,"crlf":true,"messages":[]}`,
			func(p *Params) {
				p.Model, p.Tokens, p.Interval, p.PauseAt, p.Pause, p.Burst, p.CRLF = "m1", 7, 12500*time.Microsecond, 3, 400*time.Millisecond, 2, true
			}},
		{"query over body", "tokens=9&split=1", "", `{"tokens":7}`, func(p *Params) { p.Tokens, p.Split = 9, true }},
		{"header over query", "tokens=9", "tokens=11&comments=yes", "", func(p *Params) { p.Tokens, p.Comments = 11, true }},
		{"first_ms", "first_ms=250", "", "", func(p *Params) { p.First = 250 * time.Millisecond }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, _ := url.ParseQuery(tc.query)
			got, err := ParseParams(q, tc.header, []byte(tc.body))
			if err != nil {
				t.Fatalf("ParseParams: %v", err)
			}
			want := DefaultParams()
			tc.want(&want)
			if got != want {
				t.Fatalf("ParseParams = %+v, want %+v", got, want)
			}
		})
	}
}

func TestParseParamsErrors(t *testing.T) {
	for _, q := range []string{"tokens=-1", "tokens=x", "tokens=100001", "interval_ms=-5", "interval_ms=20000", "burst=0", "pause_ms=abc"} {
		v, _ := url.ParseQuery(q)
		if _, err := ParseParams(v, "", nil); err == nil {
			t.Errorf("ParseParams(%q) = nil error, want one", q)
		}
	}
	if _, err := ParseParams(nil, "", []byte(`[1,2]`)); err == nil {
		t.Errorf("ParseParams(array body) = nil error, want one")
	}
}

// events splits an SSE body into its data payloads (comments dropped).
func events(body, nl string) []string {
	var out []string
	for _, ev := range strings.Split(body, nl+nl) {
		if strings.HasPrefix(ev, "data: ") {
			out = append(out, strings.TrimPrefix(ev, "data: "))
		}
	}
	return out
}

func TestWrites(t *testing.T) {
	p := DefaultParams()
	p.Tokens, p.Interval, p.PauseAt, p.Pause = 5, 20*time.Millisecond, 3, 500*time.Millisecond
	ws := p.Writes()
	// role, 5 content, final (finish + usage + DONE)
	if got, want := len(ws), 7; got != want {
		t.Fatalf("writes = %d, want %d", got, want)
	}
	wantAt := []time.Duration{0, 20, 40, 60, 580, 600, 600}
	for i, w := range ws {
		if got, want := w.At, wantAt[i]*time.Millisecond; got != want {
			t.Errorf("write %d at %v, want %v", i, got, want)
		}
	}
	ev := events(string(p.Body()), "\n")
	if got, want := len(ev), 1+5+3; got != want {
		t.Fatalf("events = %d, want %d", got, want)
	}
	if !strings.Contains(ev[0], `"delta":{"role":"assistant","content":""}`) || ev[len(ev)-1] != "[DONE]" ||
		!strings.Contains(ev[len(ev)-2], `"usage":{"prompt_tokens":12,"completion_tokens":5`) {
		t.Fatalf("framing: first %q, last two %q %q", ev[0], ev[len(ev)-2], ev[len(ev)-1])
	}
	for i := 1; i <= 5; i++ {
		if !strings.Contains(ev[i], `"delta":{"content":`) {
			t.Errorf("event %d = %q, want a content delta", i, ev[i])
		}
	}
}

func TestWritesFraming(t *testing.T) {
	p := DefaultParams()
	p.Tokens, p.CRLF, p.Comments, p.Split, p.Burst = 40, true, true, true, 4
	ws := p.Writes()
	body := string(p.Body())
	if strings.Contains(strings.ReplaceAll(body, "\r\n", ""), "\n") {
		t.Fatal("crlf: a bare LF in the body")
	}
	if got, want := strings.Count(body, ": keep-alive\r\n\r\n"), 4; got != want {
		t.Errorf("comments = %d, want %d", got, want)
	}
	if got, want := len(events(body, "\r\n")), 1+40+3; got != want {
		t.Errorf("events = %d, want %d", got, want)
	}
	cut := 0
	for _, w := range ws {
		if !utf8.Valid(w.Data) {
			cut++
		}
	}
	if cut == 0 {
		t.Error("split: no write ends inside a multibyte character")
	}
	if !utf8.ValidString(body) {
		t.Error("body is not valid UTF-8")
	}
}

func TestHandlerStreams(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/demo/v1/chat/completions?interval_ms=1", "application/json",
		strings.NewReader(`{"model":"x","tokens":6,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	p := DefaultParams()
	p.Model, p.Tokens, p.Interval = "x", 6, time.Millisecond
	if !bytes.Equal(got, p.Body()) {
		t.Fatalf("body differs from Params.Body():\n%s\nwant\n%s", got, p.Body())
	}
	for k, want := range map[string]string{"Content-Type": "text/event-stream; charset=utf-8", "X-Accel-Buffering": "no", "Cache-Control": "no-cache"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	page, err := http.Get(srv.URL + "/demo/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(page.Body)
	page.Body.Close()
	if page.StatusCode != 200 || !bytes.Contains(b, []byte("itlmon.onStream")) {
		t.Fatalf("/demo/ = %d, want the chat page", page.StatusCode)
	}
	bad, _ := http.Get(srv.URL + "/demo/v1/chat/completions?tokens=-3")
	bad.Body.Close()
	if bad.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad cadence = %d, want 400", bad.StatusCode)
	}
}

// TestHandlerStopsOnCancel: the stream ends when the request's context does.
func TestHandlerStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequestWithContext(ctx, "GET", "/demo/v1/chat/completions?tokens=1000&interval_ms=50", nil)
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { Completions().ServeHTTP(rec, req); close(done) }()
	time.AfterFunc(20*time.Millisecond, cancel)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("handler still streaming 5s after the request was cancelled")
	}
}
