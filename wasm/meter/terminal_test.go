package meter

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// terminalMarks names, per fixture, a string only its terminal event's
// payload holds ("" when the format has no terminal event).
var terminalMarks = map[string]string{
	"openai_chat.sse":                 "[DONE]",
	"openai_chat_reasoning.sse":       "[DONE]",
	"openai_chat_tools.sse":           "[DONE]",
	"openai_responses.sse":            `"type":"response.completed"`,
	"anthropic.sse":                   `"type":"message_stop"`,
	"anthropic_tools.sse":             `"type":"message_stop"`,
	"vercel_ui.sse":                   `"type":"finish"}`,
	"ollama_chat.ndjson":              `"done":true`,
	"ollama_generate.ndjson":          `"done": true`,
	"generic.sse":                     "[DONE]",
	"generic.ndjson":                  "",
	"plain.txt":                       "",
	"cohere.sse":                      `"type":"message-end"`,
	"cohere_tools.sse":                `"type":"message-end"`,
	"gemini.sse":                      `"finishReason"`,
	"gemini_tools.sse":                `"finishReason"`,
	"groq.sse":                        "[DONE]",
	"mistral.sse":                     "[DONE]",
	"openrouter.sse":                  "[DONE]",
	"deepseek.sse":                    "[DONE]",
	"azure_openai.sse":                "[DONE]",
	"tgi.sse":                         `"generated_text":"`,
	"tgi_chat.sse":                    "[DONE]",
	"generic_typed.sse":               "",
	"vercel_ai_data.datastream":       `d:{"finishReason"`,
	"vercel_ai_data_tools.datastream": `d:{"finishReason"`,
}

// terminalAt feeds f one byte at a time and returns the index of the event
// after which Terminal first held (-1: never), the events' payloads, and the
// offset of the byte that completed that event.
func terminalAt(t *testing.T, f fixture) (idx int, payloads []string, off int) {
	t.Helper()
	m := New(Options{ContentType: f.ct})
	idx, off = -1, -1
	m.trace = func(p []byte, _ bool) {
		payloads = append(payloads, string(p))
		if idx < 0 && m.Terminal() {
			idx = len(payloads) - 1
		}
	}
	for i := range f.body {
		before := m.Terminal()
		m.Feed(f.body[i:i+1], Duration(i+1)*Microsecond)
		if !before && m.Terminal() {
			off = i
		}
	}
	m.EndBy(Duration(len(f.body)+1)*Microsecond, StopBodyEnd, 200)
	if off < 0 && m.Terminal() {
		off = len(f.body) // the final line, dispatched by the end of the body
	}
	return idx, payloads, off
}

// TestTerminalFixtures: each format's terminal event, and nothing before it,
// sets Terminal.
func TestTerminalFixtures(t *testing.T) {
	for _, f := range loadFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			mark, ok := terminalMarks[f.name]
			if !ok {
				t.Fatalf("no terminal mark for fixture %s: add it to terminalMarks", f.name)
			}
			idx, payloads, _ := terminalAt(t, f)
			if mark == "" {
				if idx >= 0 {
					t.Fatalf("terminal after event %d %.80q; the format has no terminal event", idx, payloads[idx])
				}
				return
			}
			if idx < 0 {
				t.Fatalf("no terminal event seen, want the one holding %q", mark)
			}
			if !strings.Contains(payloads[idx], mark) {
				t.Fatalf("terminal after event %d %.80q, want the one holding %q", idx, payloads[idx], mark)
			}
			for i, p := range payloads[:idx] {
				if strings.Contains(p, mark) {
					t.Fatalf("event %d %.80q holds %q but did not end the stream", i, p, mark)
				}
			}
		})
	}
}

// TestTerminalCancel: a page that cancels (or aborts, or leaves) after the
// terminal event leaves a complete stream closed after its end; the same
// before the terminal event is an abort. Every split of the body into reads
// gives the same answer.
func TestTerminalCancel(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for _, f := range loadFixtures(t) {
		mark := terminalMarks[f.name]
		if mark == "" {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			_, _, off := terminalAt(t, f)
			if off < 0 || off >= len(f.body) {
				t.Fatalf("terminal event completed at %d of %d bytes: want inside the body", off, len(f.body))
			}
			for _, how := range []Stop{StopCancel, StopAbort, StopPageHide} {
				for trial := range 20 {
					// after: the body up to and including the terminal event's
					// last byte (and, for half the trials, some bytes more).
					n := off + 1
					if trial%2 == 1 {
						n += r.IntN(len(f.body) - n + 1)
					}
					s := feedCut(f, f.body[:n], r, how)
					if s.Status != StatusComplete || s.End != EndClosedAfterEnd || !s.Terminal {
						t.Fatalf("stop %d after the terminal event (%d bytes): status %v end %v terminal %v, want complete closed_after_end",
							how, n, s.Status, s.End, s.Terminal)
					}
					// before: one byte short of the terminal event.
					s = feedCut(f, f.body[:off-r.IntN(min(off, 40))], r, how)
					if s.Status != StatusAborted || s.End != EndAbort || s.Terminal {
						t.Fatalf("stop %d before the terminal event: status %v end %v terminal %v, want aborted abort",
							how, s.Status, s.End, s.Terminal)
					}
				}
			}
			s := feedCut(f, f.body, r, StopError)
			if s.Status != StatusComplete || s.End != EndError {
				t.Fatalf("network error after the terminal event: status %v end %v, want complete error", s.Status, s.End)
			}
			s = feedCut(f, f.body[:off], r, StopError)
			if s.Status != StatusNetworkError || s.End != EndError {
				t.Fatalf("network error before the terminal event: status %v end %v, want error error", s.Status, s.End)
			}
		})
	}
}

// feedCut feeds body in random reads and ends it with how.
func feedCut(f fixture, body []byte, r *rand.Rand, how Stop) Summary {
	m := New(Options{ContentType: f.ct})
	at := Duration(0)
	for p := 0; p < len(body); {
		n := 1 + r.IntN(min(len(body)-p, 97))
		at += Duration(r.IntN(3)) * Millisecond
		m.Feed(body[p:p+n], at)
		p += n
	}
	m.EndBy(at+Millisecond, how, 200)
	return m.Summary()
}

// TestTerminalDoneSplit: "[DONE]" split across reads, with LF, CRLF and CR
// line ends, counts once the blank line dispatches it, not before.
func TestTerminalDoneSplit(t *testing.T) {
	for _, nl := range []string{"\n", "\r\n", "\r"} {
		body := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}" + nl + nl + "data: [DONE]" + nl + nl
		done := strings.Index(body, "[DONE]")
		for cut1 := done - 6; cut1 <= done+6; cut1++ {
			for cut2 := cut1 + 1; cut2 < len(body); cut2++ {
				m := New(Options{ContentType: "text/event-stream"})
				m.Feed([]byte(body[:cut1]), 1*msec)
				m.Feed([]byte(body[cut1:cut2]), 2*msec)
				// The event is dispatched by the blank line: with CR line
				// ends the terminal event is complete only once the read
				// holding its second CR arrives.
				dispatched := cut2 >= len(body)-len(nl)+1
				if got := m.Terminal(); got != dispatched {
					t.Fatalf("%q | %q: terminal %v, want %v", body[:cut1], body[cut1:cut2], got, dispatched)
				}
				m.Feed([]byte(body[cut2:]), 3*msec)
				if !m.Terminal() {
					t.Fatalf("%q | %q | %q: no terminal after the whole body", body[:cut1], body[cut1:cut2], body[cut2:])
				}
				m.EndBy(4*msec, StopCancel, 200)
				if s := m.Summary(); s.Status != StatusComplete || s.End != EndClosedAfterEnd {
					t.Fatalf("cancel after [DONE]: status %v end %v", s.Status, s.End)
				}
			}
		}
	}
}

// TestTerminalEvents: the terminal events of each format, in isolation,
// and near misses that are not terminal.
func TestTerminalEvents(t *testing.T) {
	for _, tc := range []struct {
		name, ct, body string
		terminal       bool
	}{
		{"chat done", "text/event-stream", "data: {\"choices\":[]}\n\ndata:  [DONE] \n\n", true},
		{"chat no done", "text/event-stream", "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\n", false},
		{"done without blank line", "text/event-stream", "data: {\"choices\":[]}\n\ndata: [DONE]\n", false},
		{"done not alone", "text/event-stream", "data: {\"choices\":[]}\n\ndata: [DONE] x\n\n", false},
		{"responses completed", "text/event-stream", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"output_tokens\":3}}}\n\n", true},
		{"responses failed", "text/event-stream", "event: response.created\ndata: {\"type\":\"response.created\"}\n\nevent: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{}}\n\n", true},
		{"responses incomplete, no event line", "text/event-stream", "data: {\"type\":\"response.created\"}\n\ndata: {\"type\":\"response.incomplete\",\"response\":{}}\n\n", true},
		{"responses output done", "text/event-stream", "event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"text\":\"x\"}\n\n", false},
		{"anthropic stop", "text/event-stream", "event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", true},
		{"anthropic stop, type only", "text/event-stream", "event: message_start\ndata: {\"type\":\"message_start\"}\n\ndata: {\"type\":\"message_stop\"}\n\n", true},
		{"anthropic block stop", "text/event-stream", "event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n", false},
		{"vercel finish", "text/event-stream", "data: {\"type\":\"start\"}\n\ndata: {\"type\":\"finish\"}\n\n", true},
		{"vercel finish escaped", "text/event-stream", "data: {\"type\":\"start\"}\n\ndata: {\"type\":\"fin\\u0069sh\"}\n\n", true},
		{"vercel finish-step", "text/event-stream", "data: {\"type\":\"start\"}\n\ndata: {\"type\":\"finish-step\"}\n\n", false},
		{"vercel abort part", "text/event-stream", "data: {\"type\":\"start\"}\n\ndata: {\"type\":\"abort\"}\n\n", false},
		{"ollama done", "application/x-ndjson", "{\"message\":{\"content\":\"x\"},\"done\":false}\n{\"message\":{\"content\":\"\"},\"done\":true}\n", true},
		{"ollama done false", "application/x-ndjson", "{\"message\":{\"content\":\"x\"},\"done\":false}\n", false},
		{"ollama nested done", "application/x-ndjson", "{\"message\":{\"content\":\"x\",\"done\":true},\"done\":false}\n", false},
		{"ndjson done is not ollama", "application/x-ndjson", "{\"seq\":1,\"done\":true}\n", false},
		{"generic sse done", "text/event-stream", "data: hello\n\ndata: [DONE]\n\n", true},
		{"done only", "text/event-stream", "data: [DONE]\n\n", true},
		{"sniffed sse done", "", "data: hello\n\ndata: [DONE]\n\n", true},
		{"text", "text/plain", "[DONE]\n\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(Options{ContentType: tc.ct})
			m.Feed([]byte(tc.body), msec)
			m.EndBy(2*msec, StopCancel, 200)
			s := m.Summary()
			if m.Terminal() != tc.terminal || s.Terminal != tc.terminal {
				t.Fatalf("terminal %v (summary %v), want %v", m.Terminal(), s.Terminal, tc.terminal)
			}
			wantSt, wantEnd := StatusAborted, EndAbort
			if tc.terminal {
				wantSt, wantEnd = StatusComplete, EndClosedAfterEnd
			}
			if s.Status != wantSt || s.End != wantEnd {
				t.Fatalf("cancelled: status %v end %v, want %v %v", s.Status, s.End, wantSt, wantEnd)
			}
		})
	}
}

// TestTerminalTruncatedEvent: a response.completed event longer than
// MaxEventBytes (it carries the whole response) still ends the stream by its
// SSE event type.
func TestTerminalTruncatedEvent(t *testing.T) {
	big := `{"type":"response.completed","response":{"output":[{"content":[{"text":"` + strings.Repeat("x", 4096) + `"}]}]}}`
	body := "event: response.created\ndata: {\"type\":\"response.created\"}\n\nevent: response.completed\ndata: " + big + "\n\n"
	m := New(Options{ContentType: "text/event-stream", MaxEventBytes: 1024})
	m.Feed([]byte(body), msec)
	if !m.Terminal() {
		t.Fatal("a truncated response.completed did not end the stream")
	}
}

// TestTerminalFinalLine: Ollama's final line without a newline is the
// terminal event when the body was read to its end; a cancel while it is
// still unfinished (no newline yet) is an abort.
func TestTerminalFinalLine(t *testing.T) {
	body := []byte("{\"message\":{\"content\":\"x\"},\"done\":false}\n{\"message\":{\"content\":\"\"},\"done\":true,\"eval_count\":7}")
	m := New(Options{ContentType: "application/x-ndjson"})
	m.Feed(body, msec)
	if m.Terminal() {
		t.Fatal("terminal before the final line ended")
	}
	m.EndBy(2*msec, StopBodyEnd, 200)
	if s := m.Summary(); !s.Terminal || s.Status != StatusComplete || s.End != EndBody || s.Tokens != 7 {
		t.Fatalf("body end: terminal %v status %v end %v tokens %d", s.Terminal, s.Status, s.End, s.Tokens)
	}
	m.Reset(Options{ContentType: "application/x-ndjson"})
	if m.Terminal() {
		t.Fatal("Reset kept Terminal")
	}
	m.Feed(body, msec)
	m.EndBy(2*msec, StopCancel, 200)
	if s := m.Summary(); s.Terminal || s.Status != StatusAborted || s.End != EndAbort {
		t.Fatalf("cancel: terminal %v status %v end %v", s.Terminal, s.Status, s.End)
	}
}

// TestOutcome is the rule, case by case.
func TestOutcome(t *testing.T) {
	for _, tc := range []struct {
		terminal bool
		how      Stop
		http     int
		st       Status
		end      End
	}{
		{true, StopBodyEnd, 200, StatusComplete, EndBody},
		{true, StopAbort, 200, StatusComplete, EndClosedAfterEnd},
		{true, StopCancel, 200, StatusComplete, EndClosedAfterEnd},
		{true, StopPageHide, 200, StatusComplete, EndClosedAfterEnd},
		{true, StopError, 200, StatusComplete, EndError},
		{false, StopBodyEnd, 200, StatusComplete, EndBody},
		{false, StopAbort, 200, StatusAborted, EndAbort},
		{false, StopCancel, 200, StatusAborted, EndAbort},
		{false, StopPageHide, 200, StatusAborted, EndAbort},
		{false, StopError, 200, StatusNetworkError, EndError},
		{false, StopBodyEnd, 500, StatusHTTPError, EndBody},
		{true, StopCancel, 429, StatusHTTPError, EndClosedAfterEnd},
		{false, StopCancel, 500, StatusAborted, EndAbort},
		{false, StopError, 502, StatusNetworkError, EndError},
		{false, StopAbort, 0, StatusAborted, EndAbort}, // before headers
		{false, StopError, 0, StatusNetworkError, EndError},
		{false, Stop(0), 200, StatusAborted, EndAbort},
		{false, Stop(9), 200, StatusAborted, EndAbort},
	} {
		st, end := Outcome(tc.terminal, tc.how, tc.http)
		if st != tc.st || end != tc.end {
			t.Errorf("Outcome(%v, %d, %d) = %v, %v; want %v, %v", tc.terminal, tc.how, tc.http, st, end, tc.st, tc.end)
		}
	}
}

// TestEndKeepsStatus: End records the status its caller gives (and the End
// that goes with it), terminal event or not.
func TestEndKeepsStatus(t *testing.T) {
	body := sseData(`{"choices":[{"delta":{"content":"x"}}]}`, "[DONE]")
	for _, tc := range []struct {
		st     Status
		http   int
		wantSt Status
		end    End
	}{
		{StatusOpen, 200, StatusComplete, EndBody},
		{StatusComplete, 200, StatusComplete, EndBody},
		{StatusComplete, 503, StatusHTTPError, EndBody},
		{StatusHTTPError, 503, StatusHTTPError, EndBody},
		{StatusAborted, 200, StatusAborted, EndAbort},
		{StatusNetworkError, 200, StatusNetworkError, EndError},
	} {
		m := New(Options{ContentType: "text/event-stream"})
		m.Feed(body, msec)
		m.End(2*msec, tc.st, tc.http)
		m.EndBy(3*msec, StopBodyEnd, 200) // ignored: already ended
		s := m.Summary()
		if s.Status != tc.wantSt || s.End != tc.end || !s.Terminal || s.Duration != 2*msec {
			t.Errorf("End(%v, %d): status %v end %v terminal %v duration %v; want %v %v true 2ms",
				tc.st, tc.http, s.Status, s.End, s.Terminal, s.Duration, tc.wantSt, tc.end)
		}
	}
	if s := New(Options{}).Summary(); s.End != EndNone || s.Status != StatusOpen {
		t.Fatalf("open stream: status %v end %v", s.Status, s.End)
	}
}
