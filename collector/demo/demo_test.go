package demo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/itlmon/itlmon/wasm/meter"
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
	srv := httptest.NewServer(Handler(Options{}))
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

// TestAPIsMetered: every API's stream, fed write by write to the browser
// module's own parser (wasm/meter) with the content type the endpoint sends,
// is recognised as its format, with one content event per token, the usage's
// token count, a 500 ms pause as one stall, and every SSE event, NDJSON line
// or data stream part's value valid JSON (or [DONE]).
func TestAPIsMetered(t *testing.T) {
	formats := map[API]meter.Format{
		OpenAIChat: meter.FormatOpenAIChat, OpenAIResponses: meter.FormatOpenAIResponses, Anthropic: meter.FormatAnthropic,
		VercelUI: meter.FormatVercelAI, Ollama: meter.FormatOllama, VercelData: meter.FormatVercelAIData,
	}
	if len(formats) != len(apiPaths) {
		t.Fatalf("%d APIs checked of %d", len(formats), len(apiPaths))
	}
	for a, want := range formats {
		for _, crlf := range []bool{false, true} {
			t.Run(a.Path()+map[bool]string{false: "", true: "/crlf"}[crlf], func(t *testing.T) {
				p := DefaultParams()
				p.API, p.Model, p.Tokens, p.UsageTokens, p.Interval, p.PauseAt, p.Pause = a, "m", 12, 31, 10*time.Millisecond, 5, 500*time.Millisecond
				p.CRLF, p.Comments, p.Split = crlf, crlf, crlf
				fast := p // the same bytes at once, for Stream's headers and body
				fast.Interval, fast.Pause = 0, 0
				rec := httptest.NewRecorder()
				Stream(rec, httptest.NewRequest("POST", a.Path(), nil), fast)
				ct := rec.Header().Get("Content-Type")
				m := meter.New(meter.Options{ContentType: ct})
				for _, w := range p.Writes() {
					m.Feed(w.Data, meter.Duration(w.At))
				}
				last := p.Writes()[len(p.Writes())-1].At
				m.End(meter.Duration(last), meter.StatusComplete, 200)
				s := m.Summary()
				// The UI message stream reports no usage: the meter counts content events.
				wantTokens, reported := 31, a != VercelUI
				if !reported {
					wantTokens = 12
				}
				if s.Format != want || s.ContentEvents != 12 || s.Tokens != wantTokens || s.TokensReported != reported || s.Stalls != 1 {
					t.Fatalf("%s: format %v, content events %d, tokens %d (reported %v), stalls %d; want %v, 12, %d (reported %v), 1",
						ct, s.Format, s.ContentEvents, s.Tokens, s.TokensReported, s.Stalls, want, wantTokens, reported)
				}
				nl := "\n"
				if crlf {
					nl = "\r\n"
				}
				body := string(p.Body())
				if !bytes.Equal(rec.Body.Bytes(), fast.Body()) {
					t.Fatal("Stream wrote other bytes than Params.Body")
				}
				n := 0
				for _, line := range strings.Split(strings.TrimSuffix(body, nl), nl) {
					switch a {
					case Ollama:
					case VercelData:
						if len(line) < 3 || line[1] != ':' {
							t.Errorf("not a data stream part: %q", line)
							continue
						}
						line = line[2:]
					default:
						d, ok := strings.CutPrefix(line, "data: ")
						if !ok {
							continue
						}
						line = d
					}
					n++
					if line != "[DONE]" && !json.Valid([]byte(line)) {
						t.Errorf("not JSON: %q", line)
					}
				}
				if n < 12+1 {
					t.Errorf("%d events, want at least 13", n)
				}
				if a == VercelUI && rec.Header().Get("X-Vercel-AI-UI-Message-Stream") != "v1" {
					t.Errorf("X-Vercel-AI-UI-Message-Stream = %q, want v1", rec.Header().Get("X-Vercel-AI-UI-Message-Stream"))
				}
				if a == VercelData && rec.Header().Get("X-Vercel-AI-Data-Stream") != "v1" {
					t.Errorf("X-Vercel-AI-Data-Stream = %q, want v1", rec.Header().Get("X-Vercel-AI-Data-Stream"))
				}
			})
		}
	}
}

// TestTail: the body ends tail_ms after the write with the terminal event.
func TestTail(t *testing.T) {
	srv := httptest.NewServer(Handler(Options{}))
	defer srv.Close()
	start := time.Now()
	resp, err := http.Get(srv.URL + "/demo/api/chat?tokens=2&interval_ms=1&tail_ms=300")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read before the done line: %v", err)
		}
		if strings.Contains(line, `"done":true`) {
			break
		}
	}
	sawDone := time.Since(start)
	if _, err := io.ReadAll(br); err != nil {
		t.Fatal(err)
	}
	if ended := time.Since(start); ended-sawDone < 250*time.Millisecond {
		t.Fatalf("body ended %v after the done line, want about 300ms", ended-sawDone)
	}
	if got := resp.Header.Get("Content-Type"); got != "application/x-ndjson" {
		t.Fatalf("Content-Type = %q, want application/x-ndjson", got)
	}
}
