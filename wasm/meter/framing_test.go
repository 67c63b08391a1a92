package meter

import (
	"reflect"
	"strings"
	"testing"
)

// payloads feeds the reads (one per element, 10 ms apart) and returns every
// event's payload as the framing delivered it.
func payloads(t *testing.T, ct string, reads ...string) []string {
	t.Helper()
	m := New(Options{ContentType: ct})
	got := []string{}
	m.trace = func(p []byte, _ bool) { got = append(got, string(p)) }
	for i, r := range reads {
		m.Feed([]byte(r), Duration(i+1)*10*msec)
	}
	m.End(Duration(len(reads)+1)*10*msec, StatusComplete, 200)
	return got
}

func TestSSEFraming(t *testing.T) {
	tests := []struct {
		name  string
		reads []string
		want  []string
	}{
		{"lf", []string{"data: a\n\ndata: b\n\n"}, []string{"a", "b"}},
		{"cr", []string{"data: a\r\rdata: b\r\r"}, []string{"a", "b"}},
		{"crlf", []string{"data: a\r\n\r\ndata: b\r\n\r\n"}, []string{"a", "b"}},
		{"crlf split between cr and lf", []string{"data: a\r", "\n\r", "\ndata: b\r\n\r", "\n"}, []string{"a", "b"}},
		{"cr then lf-started read is one line end", []string{"data: a\r", "\ndata: b\n\n"}, []string{"a\nb"}},
		{"no space after colon", []string{"data:a\n\n"}, []string{"a"}},
		{"only one space stripped", []string{"data:   a\n\n"}, []string{"  a"}},
		{"multi-line data joined with LF", []string{"data: a\ndata: b\ndata:\n\n"}, []string{"a\nb\n"}},
		{"field without colon", []string{"data\n\n"}, []string{""}},
		{"comments ignored", []string{": hi\ndata: a\n: there\n\n"}, []string{"a"}},
		{"event without data not dispatched", []string{"event: x\nid: 3\nretry: 10\n\n"}, []string{}},
		{"event type does not leak", []string{"event: x\n\ndata: a\n\n"}, []string{"a"}},
		{"unknown fields ignored", []string{"foo: bar\ndata: a\n\n"}, []string{"a"}},
		{"BOM stripped", []string{"\xEF\xBB\xBFdata: a\n\n"}, []string{"a"}},
		{"BOM split across reads", []string{"\xEF", "\xBB", "\xBFdata: a\n\n"}, []string{"a"}},
		{"only the first BOM is stripped", []string{"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\ndata: b\n\n"}, []string{"b"}},
		{"partial BOM is data", []string{"\xEF\xBBdata: a\n\ndata: b\n\n"}, []string{"b"}},
		{"multibyte split", []string{"data: h\xC3", "\xA9 \xF0\x9F", "\x99\x82\n\n"}, []string{"h\u00e9 \U0001F642"}},
		{"line split everywhere", []string{"da", "ta", ": ", "a", "\n", "\n"}, []string{"a"}},
		{"unfinished event discarded at end", []string{"data: a\n\ndata: b\n"}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := payloads(t, "text/event-stream", tt.reads...); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("events %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNDJSONFraming(t *testing.T) {
	tests := []struct {
		name  string
		reads []string
		want  []string
	}{
		{"lf", []string{"{\"a\":1}\n{\"a\":2}\n"}, []string{`{"a":1}`, `{"a":2}`}},
		{"crlf split", []string{"{\"a\":1}\r", "\n{\"a\":2}\r\n"}, []string{`{"a":1}`, `{"a":2}`}},
		{"blank lines skipped", []string{"\n  \n{\"a\":1}\n\n"}, []string{`{"a":1}`}},
		{"whitespace trimmed", []string{"  {\"a\":1}\t\n"}, []string{`{"a":1}`}},
		{"last line without newline", []string{"{\"a\":1}\n{\"a\"", ":2}"}, []string{`{"a":1}`, `{"a":2}`}},
		{"BOM", []string{"\xEF\xBB\xBF{\"a\":1}\n"}, []string{`{"a":1}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := payloads(t, "application/x-ndjson", tt.reads...); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("events %q, want %q", got, tt.want)
			}
		})
	}
	// An aborted body's partial last line is not an event.
	m := New(Options{ContentType: "application/x-ndjson"})
	m.Feed([]byte("{\"a\":1}\n{\"a\""), 10*msec)
	m.End(20*msec, StatusAborted, 200)
	if got, want := m.Summary().Events, 1; got != want {
		t.Fatalf("aborted: Events = %d, want %d", got, want)
	}
}

func TestFramingFromContentType(t *testing.T) {
	tests := []struct {
		ct   string
		want framing
	}{
		{"text/event-stream", frameSSE},
		{"Text/Event-Stream; charset=utf-8", frameSSE},
		{"application/x-ndjson", frameNDJSON},
		{"application/jsonl", frameNDJSON},
		{"application/json; charset=utf-8", frameNDJSON},
		{"text/plain; charset=utf-8", frameSniffData},
		{"text/html", frameText},
		{"", frameSniff},
		{"application/octet-stream", frameSniff},
	}
	for _, tt := range tests {
		if got := framingFor(tt.ct); got != tt.want {
			t.Errorf("framingFor(%q) = %v, want %v", tt.ct, got, tt.want)
		}
	}
}

func TestSniff(t *testing.T) {
	tests := []struct {
		name   string
		reads  []string
		format Format
		events int
	}{
		{"sse data", []string{"data: hello\n\n"}, FormatSSE, 1},
		{"sse split prefix", []string{"d", "at", "a: x\n\ndata: y\n\n"}, FormatSSE, 2},
		{"sse comment first", []string{": ok\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"}, FormatOpenAIChat, 1},
		{"sse event field", []string{"event: message_start\ndata: {\"type\":\"message_start\"}\n\n"}, FormatAnthropic, 1},
		{"sse with BOM", []string{"\xEF\xBB", "\xBFdata: a\n\n"}, FormatSSE, 1},
		{"ndjson", []string{"{\"model\":\"m\",\"response\":\"a\",\"done\":false}\n"}, FormatOllama, 1},
		{"text", []string{"Hello ", "world"}, FormatText, 2},
		{"text that starts like a field", []string{"dat", "e: today\n"}, FormatText, 2},
		{"short text ended early", []string{"da"}, FormatText, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkSniffed(t, "", tt.reads, tt.format, tt.events) })
	}
}

// checkSniffed feeds reads (10 ms apart) under the content type ct and
// checks the format and the events found; plain text, one read one event,
// each at its own read's time however long its bytes were held.
func checkSniffed(t *testing.T, ct string, reads []string, format Format, events int) {
	t.Helper()
	m := New(Options{ContentType: ct})
	for i, r := range reads {
		m.Feed([]byte(r), Duration(i+1)*msec)
	}
	m.End(100*msec, StatusComplete, 200)
	s := m.Summary()
	if s.Format != format || s.Events != events {
		t.Fatalf("format %v events %d, want %v %d", s.Format, s.Events, format, events)
	}
	if format == FormatText {
		for i, st := range s.Timeline {
			if st.At != Duration(i+1)*msec || st.Read != uint32(i) {
				t.Fatalf("text stamp %d = %+v, want read %d at %v", i, st, i, Duration(i+1)*msec)
			}
		}
	}
}

// TestDataStreamSniff: a text/plain body is the AI SDK's data stream when
// its first line is a part (a type, a colon, a JSON value), else plain
// text, one read one event, each at its own read's time however long its
// first bytes were held.
func TestDataStreamSniff(t *testing.T) {
	long := `0:"` + strings.Repeat("x", 2*sniffBytes) + "\"\n"
	tests := []struct {
		name   string
		reads  []string
		format Format
		events int
	}{
		{"data stream", []string{"f:{\"messageId\":\"m\"}\n0:\"Hi\"\n"}, FormatVercelAIData, 2},
		{"first part split", []string{"0", ":\"H", "i\"\nd:{}\n"}, FormatVercelAIData, 2},
		{"first part past the bytes held", []string{long[:40], long[40:]}, FormatVercelAIData, 1},
		{"text", []string{"Hello ", "world"}, FormatText, 2},
		{"text with a colon", []string{"1: first, ", "2: second"}, FormatText, 2},
		{"text like a part, not JSON", []string{"a:{b}\n", "more"}, FormatText, 2},
		{"text held a byte at a time", []string{"0", ":", " zero"}, FormatText, 3},
		{"short text ended early", []string{"0:"}, FormatText, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkSniffed(t, "text/plain; charset=utf-8", tt.reads, tt.format, tt.events) })
	}
}

func TestFormatDetection(t *testing.T) {
	tests := []struct {
		name  string
		ct    string
		body  string
		want  Format
		count int // content events
	}{
		{"openai chat by choices", "text/event-stream", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n", FormatOpenAIChat, 1},
		{"openai chat by object", "text/event-stream", "data: {\"object\":\"chat.completion.chunk\",\"choices\":[]}\n\n", FormatOpenAIChat, 0},
		{"responses by type", "text/event-stream", "data: {\"type\":\"response.created\"}\n\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n", FormatOpenAIResponses, 1},
		{"responses by event name", "text/event-stream", "event: response.created\ndata: {}\n\n", FormatOpenAIResponses, 0},
		{"anthropic", "text/event-stream", "data: {\"type\":\"message_start\",\"message\":{}}\n\n", FormatAnthropic, 0},
		{"vercel", "text/event-stream", "data: {\"type\":\"start\"}\n\ndata: {\"type\":\"text-delta\",\"id\":\"0\",\"delta\":\"hi\"}\n\n", FormatVercelAI, 1},
		{"vercel data part", "text/event-stream", "data: {\"type\":\"data-weather\",\"data\":{}}\n\n", FormatVercelAI, 0},
		{"done and blank do not decide", "text/event-stream", "data: [DONE]\n\ndata:\n\ndata: {\"type\":\"ping\"}\n\n", FormatAnthropic, 0},
		{"other json sse", "text/event-stream", "data: {\"token\":\"a\"}\n\ndata: {\"token\":\"b\"}\n\n", FormatSSE, 2},
		{"plain sse", "text/event-stream", "data: a\n\n", FormatSSE, 1},
		{"ollama chat", "application/x-ndjson", "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"a\"},\"done\":false}\n", FormatOllama, 1},
		{"ollama generate", "application/x-ndjson", "{\"model\":\"m\",\"response\":\"\",\"done\":true,\"eval_count\":3}\n", FormatOllama, 0},
		{"ndjson", "application/x-ndjson", "{\"a\":1}\n", FormatNDJSON, 1},
		{"text", "text/plain", "hello", FormatText, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(Options{ContentType: tt.ct})
			m.Feed([]byte(tt.body), msec)
			m.End(2*msec, StatusComplete, 200)
			s := m.Summary()
			if s.Format != tt.want || s.ContentEvents != tt.count {
				t.Fatalf("format %v content %d, want %v %d", s.Format, s.ContentEvents, tt.want, tt.count)
			}
		})
	}
}

func TestContentRules(t *testing.T) {
	tests := []struct {
		name    string
		ct      string
		first   string // decides the format
		payload string
		content bool
		tokens  int // reported, -1 = none
	}{
		// OpenAI chat.
		{"chat content", sse, chatFirst, chatChunk(`{"content":"a"}`), true, -1},
		{"chat role only", sse, chatFirst, chatChunk(`{"role":"assistant"}`), false, -1},
		{"chat empty content", sse, chatFirst, chatChunk(`{"content":""}`), false, -1},
		{"chat null content", sse, chatFirst, chatChunk(`{"content":null}`), false, -1},
		{"chat reasoning", sse, chatFirst, chatChunk(`{"reasoning":"hm"}`), true, -1},
		{"chat reasoning_content", sse, chatFirst, chatChunk(`{"reasoning_content":"hm"}`), true, -1},
		{"chat refusal", sse, chatFirst, chatChunk(`{"refusal":"no"}`), true, -1},
		{"chat tool call", sse, chatFirst, chatChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}`), true, -1},
		{"chat empty tool calls", sse, chatFirst, chatChunk(`{"tool_calls":[]}`), false, -1},
		{"chat second choice", sse, chatFirst, `{"choices":[{"index":0,"delta":{}},{"index":1,"delta":{"content":"b"}}]}`, true, -1},
		{"chat legacy text", sse, chatFirst, `{"choices":[{"index":0,"text":"b"}]}`, true, -1},
		{"chat usage", sse, chatFirst, `{"choices":[],"usage":{"completion_tokens":42,"prompt_tokens":3}}`, false, 42},
		{"chat usage null", sse, chatFirst, `{"choices":[],"usage":null}`, false, -1},
		{"chat key order and escapes", sse, chatFirst, `{ "usage" : null , "choices" : [ { "delta" : { "\u0063ontent" : "\"" } , "index" : 0 } ] }`, true, -1},
		{"chat malformed", sse, chatFirst, `{"choices":[{"delta":{"content":"a"}}]`, false, -1},
		{"chat done", sse, chatFirst, `[DONE]`, false, -1},
		// Responses.
		{"responses text", sse, respFirst, `{"type":"response.output_text.delta","delta":"a"}`, true, -1},
		{"responses empty delta", sse, respFirst, `{"type":"response.output_text.delta","delta":""}`, false, -1},
		{"responses reasoning", sse, respFirst, `{"type":"response.reasoning_summary_text.delta","delta":"a"}`, true, -1},
		{"responses function args", sse, respFirst, `{"type":"response.function_call_arguments.delta","delta":"{"}`, true, -1},
		{"responses done event", sse, respFirst, `{"type":"response.output_text.done","text":"abc"}`, false, -1},
		{"responses completed", sse, respFirst, `{"type":"response.completed","response":{"output":[{"content":[{"text":"x"}]}],"usage":{"input_tokens":5,"output_tokens":17}}}`, false, 17},
		// Anthropic.
		{"anthropic text", sse, antFirst, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}`, true, -1},
		{"anthropic thinking", sse, antFirst, `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"a"}}`, true, -1},
		{"anthropic json", sse, antFirst, `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}`, true, -1},
		{"anthropic empty json", sse, antFirst, `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}`, false, -1},
		{"anthropic signature", sse, antFirst, `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}}`, false, -1},
		{"anthropic ping", sse, antFirst, `{"type":"ping"}`, false, -1},
		{"anthropic usage", sse, antFirst, `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}`, false, 15},
		// Vercel AI SDK.
		{"vercel text", sse, vercelFirst, `{"type":"text-delta","id":"0","delta":"a"}`, true, -1},
		{"vercel empty text", sse, vercelFirst, `{"type":"text-delta","id":"0","delta":""}`, false, -1},
		{"vercel reasoning", sse, vercelFirst, `{"type":"reasoning-delta","id":"0","delta":"a"}`, true, -1},
		{"vercel tool input", sse, vercelFirst, `{"type":"tool-input-delta","toolCallId":"c","inputTextDelta":"{"}`, true, -1},
		{"vercel text end", sse, vercelFirst, `{"type":"text-end","id":"0"}`, false, -1},
		// Ollama.
		{"ollama chat", ndjson, ollamaFirst, `{"model":"m","message":{"role":"assistant","content":"a"},"done":false}`, true, -1},
		{"ollama thinking", ndjson, ollamaFirst, `{"model":"m","message":{"role":"assistant","content":"","thinking":"hm"},"done":false}`, true, -1},
		{"ollama tool calls", ndjson, ollamaFirst, `{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f"}}]},"done":false}`, true, -1},
		{"ollama generate", ndjson, ollamaFirst, `{"model":"m","response":"a","done":false}`, true, -1},
		{"ollama done", ndjson, ollamaFirst, `{"model":"m","message":{"role":"assistant","content":""},"done":true,"eval_count":282}`, false, 282},
		{"ollama eval_count before done", ndjson, ollamaFirst, `{"eval_count":7,"response":"","done":true}`, false, 7},
		{"ollama malformed", ndjson, ollamaFirst, `{"response":"a"`, false, -1},
		// Generic.
		{"ndjson line", ndjson, `{"x":0}`, `{"x":1}`, true, -1},
		{"ndjson malformed", ndjson, `{"x":0}`, `{"x":`, false, -1},
		{"sse done", sse, "hello", `[DONE]`, false, -1},
		{"sse empty", sse, "hello", ``, false, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(Options{ContentType: tt.ct})
			var got []bool
			m.trace = func(_ []byte, c bool) { got = append(got, c) }
			if tt.ct == sse {
				m.Feed(sseData(tt.first, tt.payload), msec)
			} else {
				m.Feed([]byte(tt.first+"\n"+tt.payload+"\n"), msec)
			}
			if len(got) != 2 {
				t.Fatalf("%d events, want 2", len(got))
			}
			if got[1] != tt.content {
				t.Errorf("content = %v, want %v", got[1], tt.content)
			}
			s := m.Summary()
			if tt.tokens >= 0 && (!s.TokensReported || s.Tokens != tt.tokens) {
				t.Errorf("tokens %d reported=%v, want %d reported", s.Tokens, s.TokensReported, tt.tokens)
			}
			if tt.tokens < 0 && s.TokensReported {
				t.Errorf("tokens reported (%d), want none", s.Tokens)
			}
		})
	}
}

const (
	sse         = "text/event-stream"
	ndjson      = "application/x-ndjson"
	chatFirst   = `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`
	respFirst   = `{"type":"response.created","response":{}}`
	antFirst    = `{"type":"message_start","message":{"usage":{"output_tokens":1}}}`
	vercelFirst = `{"type":"start"}`
	ollamaFirst = `{"model":"m","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":""},"done":false}`
)

func TestFeedDoesNotRetainChunk(t *testing.T) {
	body := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"del")
	rest := []byte("ta\":{\"content\":\"b\"}}]}\n\n")
	m := New(Options{ContentType: sse})
	buf := append([]byte(nil), body...)
	m.Feed(buf, msec)
	for i := range buf {
		buf[i] = 'X' // the caller reuses its read buffer
	}
	m.Feed(rest, 2*msec)
	if got, want := m.Summary().ContentEvents, 2; got != want {
		t.Fatalf("ContentEvents = %d, want %d", got, want)
	}
}

func TestMaxEventBytes(t *testing.T) {
	m := New(Options{ContentType: sse, MaxEventBytes: 64})
	m.Feed(sseData(`{"choices":[{"delta":{"content":"a"}}]}`), msec)
	big := `{"choices":[{"delta":{"content":"` + strings.Repeat("x", 200) + `"}}]}`
	m.Feed(sseData(big), 2*msec)
	m.Feed(sseData(`{"choices":[{"delta":{"content":"b"}}]}`), 3*msec)
	s := m.Summary()
	if s.Events != 3 || s.ContentEvents != 2 {
		t.Fatalf("events %d content %d, want 3 events (the truncated one not content) and 2 content", s.Events, s.ContentEvents)
	}
	if cap(m.data) > 256 || cap(m.carry) > 256 {
		t.Fatalf("buffers grew to %d/%d bytes with MaxEventBytes 64", cap(m.data), cap(m.carry))
	}
}

func TestResetReusesWithoutAllocating(t *testing.T) {
	body := []byte(strings.Repeat("data: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}]}\n\n", 50) + "data: [DONE]\n\n")
	m := New(Options{ContentType: sse})
	var s Summary
	stream := func() {
		m.Reset(Options{ContentType: sse})
		for i := 0; i < len(body); i += 97 {
			m.Feed(body[i:min(i+97, len(body))], Duration(i)*msec)
		}
		m.MarkBusy(10*msec, 20*msec)
		m.End(Duration(len(body))*msec, StatusComplete, 200)
		m.SummaryInto(&s)
	}
	stream()
	first := s.ContentEvents
	if allocs := testing.AllocsPerRun(20, stream); allocs != 0 {
		t.Errorf("a reused meter allocates %.1f times per stream, want 0", allocs)
	}
	if s.ContentEvents != first || first != 50 {
		t.Fatalf("ContentEvents = %d then %d, want 50", first, s.ContentEvents)
	}
}
