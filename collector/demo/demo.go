// Package demo serves the demo chat page (/demo/) and a demo OpenAI-compatible
// streaming endpoint (/demo/v1/chat/completions) whose cadence is set exactly
// by the request, so the page and the end-to-end tests can produce smooth
// streams, stalls, bursts and awkward byte splits on demand.
//
// Cadence parameters, read from the JSON request body's top-level fields, then
// the query string, then an X-Demo-Cadence header holding a query string (later
// sources override earlier ones):
//
//	tokens       content events to send (default 40, at most 100000)
//	interval_ms  gap between content events (default 30)
//	first_ms     delay before the first content event (default interval_ms)
//	pause_at     content event index before which to pause (default none)
//	pause_ms     length of that pause
//	burst        content events per write (default 1): coalesced delivery
//	crlf         1/true: CRLF line endings
//	comments     1/true: an SSE comment line before every 10th event
//	split        1/true: every write is sent in two parts, cut inside a
//	             multibyte character when there is one
//
// The stream is: a role chunk, the content chunks, a finish chunk, a usage
// chunk and `data: [DONE]`. Writes follow an absolute schedule from the
// request's start (no drift), and stop when the request context ends.
package demo

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/itlmon/itlmon/web"
)

// Limits on what a request may ask for.
const (
	MaxTokens   = 100000
	MaxInterval = 10 * time.Second
	maxBody     = 1 << 20
)

// Params is a demo stream's cadence and framing.
type Params struct {
	Model    string
	Tokens   int
	Interval time.Duration
	First    time.Duration
	PauseAt  int // -1: no pause
	Pause    time.Duration
	Burst    int
	CRLF     bool
	Comments bool
	Split    bool
}

// DefaultParams is the cadence of a request that sets nothing.
func DefaultParams() Params {
	return Params{Model: "demo-model", Tokens: 40, Interval: 30 * time.Millisecond, First: -1, PauseAt: -1, Burst: 1}
}

// Write is one write of the stream: Data sent At after the request started.
type Write struct {
	At   time.Duration
	Data []byte
}

// Handler serves /demo/ (the chat page) and /demo/v1/chat/completions. Mount
// it at "/demo/".
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/demo/v1/chat/completions", serveCompletions)
	page, err := fs.Sub(web.Static(), "demo")
	if err != nil {
		panic("BUG: web/static/demo missing: " + err.Error())
	}
	mux.Handle("/demo/", http.StripPrefix("/demo/", http.FileServerFS(page)))
	return mux
}

// Completions is the streaming endpoint alone, for test origins.
func Completions() http.Handler { return http.HandlerFunc(serveCompletions) }

func serveCompletions(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodOptions {
		return
	}
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var body []byte
	if r.Method == http.MethodPost {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if len(b) > maxBody {
			http.Error(w, "request body over 1 MiB", http.StatusRequestEntityTooLarge)
			return
		}
		body = b
	}
	p, err := ParseParams(r.URL.Query(), r.Header.Get("X-Demo-Cadence"), body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	Stream(w, r, p)
}

// Stream writes p's stream to w on its schedule, flushing every write; it
// returns early when r's context ends.
func Stream(w http.ResponseWriter, r *http.Request, p Params) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	start := time.Now()
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for _, wr := range p.Writes() {
		if d := time.Until(start.Add(wr.At)); d > 0 {
			t.Reset(d)
			select {
			case <-r.Context().Done():
				return
			case <-t.C:
			}
		}
		if _, err := w.Write(wr.Data); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// ParseParams reads the cadence from a JSON body's top-level fields, the
// query, and an X-Demo-Cadence header value (in that order of precedence,
// lowest first).
func ParseParams(q url.Values, header string, body []byte) (Params, error) {
	p := DefaultParams()
	vals := url.Values{}
	if len(body) > 0 {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			return p, errors.New("request body: not a JSON object")
		}
		for k, v := range m {
			switch v := v.(type) {
			case string:
				vals.Set(k, v)
			case float64:
				vals.Set(k, strconv.FormatFloat(v, 'f', -1, 64))
			case bool:
				vals.Set(k, strconv.FormatBool(v))
			}
		}
	}
	for k, v := range q {
		vals[k] = v
	}
	if header != "" {
		hq, err := url.ParseQuery(header)
		if err != nil {
			return p, errors.New("X-Demo-Cadence: not a query string")
		}
		for k, v := range hq {
			vals[k] = v
		}
	}
	if m := vals.Get("model"); m != "" {
		p.Model = m
	}
	var err error
	num := func(key string, dst *int, lo, hi int) {
		s := vals.Get(key)
		if s == "" || err != nil {
			return
		}
		f, e := strconv.ParseFloat(s, 64)
		if e != nil || f < float64(lo) || f > float64(hi) {
			err = errors.New(key + ": want a number in [" + strconv.Itoa(lo) + ", " + strconv.Itoa(hi) + "]")
			return
		}
		*dst = int(f)
	}
	dur := func(key string, dst *time.Duration) {
		s := vals.Get(key)
		if s == "" || err != nil {
			return
		}
		f, e := strconv.ParseFloat(s, 64)
		if e != nil || f < 0 || time.Duration(f*float64(time.Millisecond)) > MaxInterval*10 {
			err = errors.New(key + ": want milliseconds in [0, 100000]")
			return
		}
		*dst = time.Duration(f * float64(time.Millisecond))
	}
	flag := func(key string, dst *bool) {
		switch strings.ToLower(vals.Get(key)) {
		case "1", "true", "yes", "on":
			*dst = true
		case "0", "false", "no", "off":
			*dst = false
		}
	}
	num("tokens", &p.Tokens, 0, MaxTokens)
	dur("interval_ms", &p.Interval)
	dur("first_ms", &p.First)
	num("pause_at", &p.PauseAt, -1, MaxTokens)
	dur("pause_ms", &p.Pause)
	num("burst", &p.Burst, 1, MaxTokens)
	flag("crlf", &p.CRLF)
	flag("comments", &p.Comments)
	flag("split", &p.Split)
	if err != nil {
		return p, err
	}
	if p.Interval > MaxInterval {
		return p, errors.New("interval_ms: at most 10000")
	}
	return p, nil
}

// words is the demo answer, cycled: markdown-ish, with multibyte characters.
var words = strings.Fields("Sure! Here is a **streamed** answer, one token at a time. " +
	"Streaming makes a model feel fast: the first token arrives early, then the rest flows at a steady pace. " +
	"Naïve proxies buffer it — 缓冲 breaks the flow 🙂 and the reader sees a stall. " +
	"`itlmon` measures what the browser actually received, gap by gap.")

// Token returns the text of content event i.
func Token(i int) string {
	if i == 0 {
		return words[0]
	}
	return " " + words[i%len(words)]
}

// Writes returns the stream's writes, in order, with their offsets from the
// start of the response. Concatenated, their Data is the exact body.
func (p Params) Writes() []Write {
	nl := "\n"
	if p.CRLF {
		nl = "\r\n"
	}
	event := func(b *strings.Builder, data string) {
		b.WriteString("data: ")
		b.WriteString(data)
		b.WriteString(nl)
		b.WriteString(nl)
	}
	chunk := func(delta string, finish string) string {
		fr := "null"
		if finish != "" {
			fr = strconv.Quote(finish)
		}
		return `{"id":"chatcmpl-demo","object":"chat.completion.chunk","created":0,"model":` + jsonString(p.Model) +
			`,"choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + fr + `}]}`
	}
	first := p.First
	if first < 0 {
		first = p.Interval
	}
	burst := max(p.Burst, 1)
	var out []Write
	add := func(at time.Duration, data string) {
		if !p.Split {
			out = append(out, Write{At: at, Data: []byte(data)})
			return
		}
		cut := splitPoint(data)
		out = append(out, Write{At: at, Data: []byte(data[:cut])}, Write{At: at + 2*time.Millisecond, Data: []byte(data[cut:])})
	}
	var b strings.Builder
	event(&b, chunk(`{"role":"assistant","content":""}`, ""))
	add(0, b.String())
	var at time.Duration
	for i := 0; i < p.Tokens; i += burst {
		b.Reset()
		for j := i; j < min(i+burst, p.Tokens); j++ {
			if p.Comments && j%10 == 0 {
				b.WriteString(": keep-alive" + nl + nl)
			}
			event(&b, chunk(`{"content":`+jsonString(Token(j))+`}`, ""))
		}
		at = first + time.Duration(i/burst)*p.Interval
		if p.PauseAt >= 0 && i >= p.PauseAt {
			at += p.Pause
		}
		add(at, b.String())
	}
	b.Reset()
	event(&b, chunk(`{}`, "stop"))
	event(&b, `{"id":"chatcmpl-demo","object":"chat.completion.chunk","created":0,"model":`+jsonString(p.Model)+
		`,"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":`+strconv.Itoa(p.Tokens)+
		`,"total_tokens":`+strconv.Itoa(12+p.Tokens)+`}}`)
	event(&b, "[DONE]")
	add(at, b.String())
	return out
}

// Body is the exact response body p produces.
func (p Params) Body() []byte {
	var b []byte
	for _, w := range p.Writes() {
		b = append(b, w.Data...)
	}
	return b
}

// splitPoint returns where to cut s in two: inside the first multibyte
// character if there is one, else in the middle.
func splitPoint(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0xC0 { // the lead byte of a multibyte UTF-8 sequence
			return i + 1
		}
	}
	return len(s) / 2
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
