// Package demo serves the demo chat page (/demo/) and demo streaming endpoints
// that speak the wire format of each API itlmon recognises, with a cadence set
// exactly by the request, so the page and the end-to-end tests can produce
// smooth streams, stalls, bursts and awkward byte splits on demand:
//
//	/demo/v1/chat/completions  OpenAI Chat Completions SSE (OpenAIChat)
//	/demo/v1/responses         OpenAI Responses SSE (OpenAIResponses)
//	/demo/v1/messages          Anthropic Messages SSE (Anthropic)
//	/demo/api/ui-chat          Vercel AI SDK UI message stream SSE (VercelUI)
//	/demo/api/chat             Ollama /api/chat NDJSON (Ollama)
//	/demo/api/data-chat        Vercel AI SDK 3-4 data stream, text/plain (VercelData)
//
// Each stream is what the real API sends for a one-part text answer: its
// opening events, one event per content token, its closing events with the
// output token usage where the API reports it, and its terminal event.
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
//	tail_ms      time between the write that holds the terminal event and
//	             the end of the body (default 0)
//	usage_tokens output tokens the usage reports (default tokens)
//
// Writes follow an absolute schedule from the request's start (no drift), and
// stop when the request context ends. Comments apply to SSE formats only.
//
// `itlmon serve --demo` runs the endpoints as a user's origin would run
// them: inside the origin middleware (Options.Origin), reporting their own
// timelines to the same collector, so a stall or a burst the origin made is
// stored as the origin's. In front of them it runs Proxy, a buffering proxy
// on a port of its own that passes the origin's bytes on in full buffers:
// what the page then sees re-chunked is the path's doing.
package demo

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
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

// API is a streaming wire format the demo endpoints speak.
type API uint8

const (
	OpenAIChat      API = iota // OpenAI Chat Completions: chat.completion.chunk events, then data: [DONE]
	OpenAIResponses            // OpenAI Responses: response.* events ending with response.completed
	Anthropic                  // Anthropic Messages: message_start ... message_stop
	VercelUI                   // Vercel AI SDK UI message stream: start ... finish, then data: [DONE]
	Ollama                     // Ollama /api/chat: NDJSON lines, the last with "done": true
	VercelData                 // Vercel AI SDK 3-4 data stream: f: ... 0:"text" ... e:, d: (text/plain)
)

// apiPaths are the endpoints' paths under /demo, in API order.
var apiPaths = [...]string{"/v1/chat/completions", "/v1/responses", "/v1/messages", "/api/ui-chat", "/api/chat", "/api/data-chat"}

// APIs are every API the demo endpoints speak.
func APIs() []API {
	out := make([]API, len(apiPaths))
	for i := range out {
		out[i] = API(i)
	}
	return out
}

// Path returns the API's endpoint path (without the /demo prefix).
func (a API) Path() string { return apiPaths[a] }

// Params is a demo stream's wire format, cadence and framing.
type Params struct {
	API         API
	Model       string
	Tokens      int
	UsageTokens int // output tokens the usage reports; -1: Tokens
	Interval    time.Duration
	First       time.Duration
	PauseAt     int // -1: no pause
	Pause       time.Duration
	Tail        time.Duration // after the terminal event's write, before the end of the body
	Burst       int
	CRLF        bool
	Comments    bool
	Split       bool
}

// DefaultParams is the cadence of a request that sets nothing.
func DefaultParams() Params {
	return Params{Model: "demo-model", Tokens: 40, UsageTokens: -1, Interval: 30 * time.Millisecond, First: -1, PauseAt: -1, Burst: 1}
}

// Write is one write of the stream: Data sent At after the request started.
type Write struct {
	At   time.Duration
	Data []byte
}

// Options configures Handler.
type Options struct {
	// Origin wraps every streaming endpoint, as a user's own origin server
	// runs the origin middleware (origin.Reporter.Handler) around
	// its handlers. nil: the endpoints alone.
	Origin func(http.Handler) http.Handler
	// ProxyPort is the port of the demo's buffering proxy (Proxy), on the
	// host the page was loaded from; 0: there is none.
	ProxyPort int
}

// ConfigPath is where Handler serves the page's configuration: JSON
// {"proxy": URL} with the buffering proxy's base URL, "" when there is none.
const ConfigPath = "/demo/config.json"

// Handler serves /demo/ (the chat page), its configuration (ConfigPath) and
// the streaming endpoints (see the package doc). Mount it at "/demo/".
func Handler(opts Options) http.Handler {
	mux := http.NewServeMux()
	for _, a := range APIs() {
		h := Endpoint(a)
		if opts.Origin != nil {
			h = opts.Origin(h)
		}
		mux.Handle("/demo"+a.Path(), h)
	}
	mux.HandleFunc("GET "+ConfigPath, func(w http.ResponseWriter, r *http.Request) {
		proxy := ""
		if opts.ProxyPort > 0 {
			host, _, err := net.SplitHostPort(r.Host)
			if err != nil {
				host = strings.Trim(r.Host, "[]")
			}
			proxy = "http://" + net.JoinHostPort(host, strconv.Itoa(opts.ProxyPort))
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write([]byte(`{"proxy":` + jsonString(proxy) + "}\n"))
	})
	page, err := fs.Sub(web.Static(), "demo")
	if err != nil {
		panic("BUG: web/static/demo missing: " + err.Error())
	}
	mux.Handle("/demo/", http.StripPrefix("/demo/", http.FileServerFS(page)))
	return mux
}

// Completions is the OpenAI Chat Completions endpoint alone, for test origins.
func Completions() http.Handler { return Endpoint(OpenAIChat) }

// Endpoint is the streaming endpoint of one API alone, for test origins. It
// streams whatever the request asks (POST or GET); the cadence comes from the
// request (see the package doc), the format from a.
func Endpoint(a API) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serve(w, r, a) })
}

func serve(w http.ResponseWriter, r *http.Request, a API) {
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
	p.API = a
	Stream(w, r, p)
}

// Stream writes p's stream to w on its schedule, flushing every write, and
// ends the body p.Tail after the last write; it returns early when r's
// context ends.
func Stream(w http.ResponseWriter, r *http.Request, p Params) {
	h := w.Header()
	switch p.API {
	case Ollama:
		h.Set("Content-Type", "application/x-ndjson")
	case VercelData:
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("X-Vercel-AI-Data-Stream", "v1")
	default:
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	if p.API == VercelUI {
		h.Set("X-Vercel-AI-UI-Message-Stream", "v1")
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	start := time.Now()
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	wait := func(at time.Duration) bool {
		if d := time.Until(start.Add(at)); d > 0 {
			t.Reset(d)
			select {
			case <-r.Context().Done():
				return false
			case <-t.C:
			}
		}
		return true
	}
	ws := p.Writes()
	for _, wr := range ws {
		if !wait(wr.At) {
			return
		}
		if _, err := w.Write(wr.Data); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
	if p.Tail > 0 && len(ws) > 0 {
		wait(ws[len(ws)-1].At + p.Tail)
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
	num("usage_tokens", &p.UsageTokens, -1, 1<<30)
	dur("interval_ms", &p.Interval)
	dur("first_ms", &p.First)
	num("pause_at", &p.PauseAt, -1, MaxTokens)
	dur("pause_ms", &p.Pause)
	dur("tail_ms", &p.Tail)
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
// start of the response. Concatenated, their Data is the exact body: the
// API's opening events at 0 (none for Ollama), the content events on the
// cadence (Burst per write), then its closing events up to the terminal one
// in the same write as the last content event.
func (p Params) Writes() []Write {
	f := framer{p: p, nl: "\n"}
	if p.CRLF {
		f.nl = "\r\n"
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
	f.open()
	if f.b.Len() > 0 {
		add(0, f.b.String())
	}
	var at time.Duration
	for i := 0; i < p.Tokens; i += burst {
		f.b.Reset()
		for j := i; j < min(i+burst, p.Tokens); j++ {
			if p.Comments && j%10 == 0 && p.API != Ollama && p.API != VercelData {
				f.b.WriteString(": keep-alive" + f.nl + f.nl)
			}
			f.content(j)
		}
		at = first + time.Duration(i/burst)*p.Interval
		if p.PauseAt >= 0 && i >= p.PauseAt {
			at += p.Pause
		}
		add(at, f.b.String())
	}
	f.b.Reset()
	f.close()
	add(at, f.b.String())
	return out
}

// framer writes one API's events for Writes.
type framer struct {
	p   Params
	nl  string
	b   strings.Builder
	seq int // OpenAI Responses sequence_number
}

// sse writes one SSE event, with an event: line when ev is not empty.
func (f *framer) sse(ev, data string) {
	if ev != "" {
		f.b.WriteString("event: " + ev + f.nl)
	}
	f.b.WriteString("data: " + data + f.nl + f.nl)
}

// responses writes one OpenAI Responses event of type typ; rest is the JSON
// object's remaining members (a leading comma included).
func (f *framer) responses(typ, rest string) {
	f.sse(typ, `{"type":"`+typ+`","sequence_number":`+strconv.Itoa(f.seq)+rest+`}`)
	f.seq++
}

// anthropic writes one Anthropic Messages event of type typ.
func (f *framer) anthropic(typ, rest string) { f.sse(typ, `{"type":"`+typ+`"`+rest+`}`) }

// vercel writes one UI message stream part of type typ.
func (f *framer) vercel(typ, rest string) { f.sse("", `{"type":"`+typ+`"`+rest+`}`) }

func (f *framer) chatChunk(delta, finish string) string {
	fr := "null"
	if finish != "" {
		fr = strconv.Quote(finish)
	}
	return `{"id":"chatcmpl-demo","object":"chat.completion.chunk","created":0,"model":` + jsonString(f.p.Model) +
		`,"choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + fr + `}]}`
}

// data writes one data stream part: its type, a colon, its JSON value.
func (f *framer) data(typ byte, value string) { f.b.WriteString(string(typ) + ":" + value + f.nl) }

// ollama writes one Ollama /api/chat line.
func (f *framer) ollama(content string, rest string) {
	f.b.WriteString(`{"model":` + jsonString(f.p.Model) + `,"created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":` +
		jsonString(content) + `},` + rest + `}` + f.nl)
}

func (f *framer) responseObject(status, output, usage string) string {
	return `{"id":"resp_demo","object":"response","created_at":0,"status":"` + status + `","model":` + jsonString(f.p.Model) +
		`,"output":[` + output + `],"usage":` + usage + `}`
}

func (f *framer) messageItem(status, text string) string {
	content := ""
	if status == "completed" {
		content = `{"type":"output_text","annotations":[],"text":` + jsonString(text) + `}`
	}
	return `{"id":"msg_demo","type":"message","status":"` + status + `","role":"assistant","content":[` + content + `]}`
}

func (f *framer) usageTokens() string {
	if f.p.UsageTokens >= 0 {
		return strconv.Itoa(f.p.UsageTokens)
	}
	return strconv.Itoa(f.p.Tokens)
}

// open writes the events before the first content event.
func (f *framer) open() {
	switch f.p.API {
	case OpenAIChat:
		f.sse("", f.chatChunk(`{"role":"assistant","content":""}`, ""))
	case OpenAIResponses:
		f.responses("response.created", `,"response":`+f.responseObject("in_progress", "", "null"))
		f.responses("response.in_progress", `,"response":`+f.responseObject("in_progress", "", "null"))
		f.responses("response.output_item.added", `,"output_index":0,"item":`+f.messageItem("in_progress", ""))
		f.responses("response.content_part.added", `,"item_id":"msg_demo","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}`)
	case Anthropic:
		f.anthropic("message_start", `,"message":{"id":"msg_demo","type":"message","role":"assistant","model":`+jsonString(f.p.Model)+
			`,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}`)
		f.anthropic("content_block_start", `,"index":0,"content_block":{"type":"text","text":""}`)
		f.anthropic("ping", "")
	case VercelUI:
		f.vercel("start", `,"messageId":"msg-demo"`)
		f.vercel("start-step", "")
		f.vercel("text-start", `,"id":"txt-0"`)
	case Ollama:
	case VercelData:
		f.data('f', `{"messageId":"msg-demo"}`)
	}
}

// content writes content event i.
func (f *framer) content(i int) {
	tok := jsonString(Token(i))
	switch f.p.API {
	case OpenAIChat:
		f.sse("", f.chatChunk(`{"content":`+tok+`}`, ""))
	case OpenAIResponses:
		f.responses("response.output_text.delta", `,"item_id":"msg_demo","output_index":0,"content_index":0,"delta":`+tok+`,"logprobs":[]`)
	case Anthropic:
		f.anthropic("content_block_delta", `,"index":0,"delta":{"type":"text_delta","text":`+tok+`}`)
	case VercelUI:
		f.vercel("text-delta", `,"id":"txt-0","delta":`+tok)
	case Ollama:
		f.ollama(Token(i), `"done":false`)
	case VercelData:
		f.data('0', tok)
	}
}

// close writes the events after the last content event, the terminal one last.
func (f *framer) close() {
	n, usage := f.p.Tokens, f.usageTokens()
	switch f.p.API {
	case OpenAIChat:
		f.sse("", f.chatChunk(`{}`, "stop"))
		f.sse("", `{"id":"chatcmpl-demo","object":"chat.completion.chunk","created":0,"model":`+jsonString(f.p.Model)+
			`,"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":`+usage+`,"total_tokens":`+strconv.Itoa(12+n)+`}}`)
		f.sse("", "[DONE]")
	case OpenAIResponses:
		text := Text(n)
		f.responses("response.output_text.done", `,"item_id":"msg_demo","output_index":0,"content_index":0,"text":`+jsonString(text)+`,"logprobs":[]`)
		f.responses("response.content_part.done", `,"item_id":"msg_demo","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"text":`+jsonString(text)+`}`)
		f.responses("response.output_item.done", `,"output_index":0,"item":`+f.messageItem("completed", text))
		f.responses("response.completed", `,"response":`+f.responseObject("completed", f.messageItem("completed", text),
			`{"input_tokens":12,"input_tokens_details":{"cached_tokens":0},"output_tokens":`+usage+
				`,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`+strconv.Itoa(12+n)+`}`))
	case Anthropic:
		f.anthropic("content_block_stop", `,"index":0`)
		f.anthropic("message_delta", `,"delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":`+usage+`}`)
		f.anthropic("message_stop", "")
	case VercelUI:
		f.vercel("text-end", `,"id":"txt-0"`)
		f.vercel("finish-step", "")
		f.vercel("finish", `,"finishReason":"stop"`)
		f.sse("", "[DONE]")
	case Ollama:
		f.ollama("", `"done":true,"done_reason":"stop","total_duration":1000000,"load_duration":1000,"prompt_eval_count":12,`+
			`"prompt_eval_duration":1000,"eval_count":`+usage+`,"eval_duration":1000000`)
	case VercelData:
		u := `{"promptTokens":12,"completionTokens":` + usage + `}`
		f.data('e', `{"finishReason":"stop","usage":`+u+`,"isContinued":false}`)
		f.data('d', `{"finishReason":"stop","usage":`+u+`}`)
	}
}

// Text returns the whole answer of n content events.
func Text(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(Token(i))
	}
	return b.String()
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
