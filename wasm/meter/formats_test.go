package meter

import (
	"fmt"
	"strings"
	"testing"
)

// providerCases: what each provider's stream (a fixture written from its
// SDK's types and its API reference) must read as. first is a string only
// the first content event holds: the first event that carries output text
// (or tool-call arguments), never an opening, role-only or metadata event.
var providerCases = []struct {
	fixture  string
	format   Format
	content  int
	tokens   int // reported by the stream's usage (-1: none, tokens = content events)
	terminal bool
	first    string
}{
	{"cohere.sse", FormatCohere, 8, 11, true, `"text":"Hello"`},
	{"cohere_tools.sse", FormatCohere, 8, 61, true, `"tool_plan":"I will"`},
	{"gemini.sse", FormatGemini, 11, 19, true, `"text": "Hello"`},
	{"gemini_tools.sse", FormatGemini, 2, 15, true, `"thought": true`},
	{"groq.sse", FormatOpenAIChat, 7, 8, true, `"content":"Hello"`},
	{"mistral.sse", FormatOpenAIChat, 11, 45, true, `"text":"The user"`},
	{"openrouter.sse", FormatOpenAIChat, 10, 31, true, `"reasoning":"Thinking about"`},
	{"deepseek.sse", FormatOpenAIChat, 10, 48, true, `"reasoning_content":"Okay"`},
	{"azure_openai.sse", FormatOpenAIChat, 8, 9, true, `"content":"Hello"`},
	{"tgi.sse", FormatTGI, 9, 10, true, `"text":"Hello"`},
	{"tgi_chat.sse", FormatOpenAIChat, 6, 7, true, `"content":"Hello"`},
	{"generic_typed.sse", FormatSSE, 4, -1, false, `"token":"Hello"`},
	{"vercel_ai_data.datastream", FormatVercelAIData, 11, 18, true, `g:"The user`},
	{"vercel_ai_data_tools.datastream", FormatVercelAIData, 5, 23, true, `"argsTextDelta":"{`},
}

// TestProviderFormats: each provider's stream, fed whole, byte by byte and
// cut at every offset, gives its format, its content events (the first one
// the first that carries text), its reported tokens and its terminal event.
func TestProviderFormats(t *testing.T) {
	fs := map[string]fixture{}
	for _, f := range loadFixtures(t) {
		fs[f.name] = f
	}
	for _, tc := range providerCases {
		t.Run(tc.fixture, func(t *testing.T) {
			f, ok := fs[tc.fixture]
			if !ok {
				t.Fatalf("no fixture %s", tc.fixture)
			}
			check := func(label string, cuts []int) {
				m := New(Options{ContentType: f.ct})
				first := ""
				m.trace = func(p []byte, content bool) {
					if content && first == "" {
						first = string(p)
					}
				}
				prev := 0
				for k, c := range append(cuts, len(f.body)) {
					m.Feed(f.body[prev:c], Duration(k+1)*Millisecond)
					prev = c
				}
				m.EndBy(Duration(len(cuts)+2)*Millisecond, StopBodyEnd, 200)
				s := m.Summary()
				wantTokens, reported := tc.tokens, true
				if tc.tokens < 0 {
					wantTokens, reported = tc.content, false
				}
				if s.Format != tc.format || s.ContentEvents != tc.content || s.Tokens != wantTokens ||
					s.TokensReported != reported || s.Terminal != tc.terminal || s.Status != StatusComplete {
					t.Fatalf("%s: format %v, %d content events, tokens %d (reported %v), terminal %v, status %v; want %v, %d, %d (%v), %v, complete",
						label, s.Format, s.ContentEvents, s.Tokens, s.TokensReported, s.Terminal, s.Status,
						tc.format, tc.content, wantTokens, reported, tc.terminal)
				}
				if !strings.Contains(first, tc.first) {
					t.Fatalf("%s: first content event %.100q, want the one holding %s", label, first, tc.first)
				}
			}
			check("whole", nil)
			bytes := make([]int, len(f.body)-1)
			for i := range bytes {
				bytes[i] = i + 1
			}
			check("byte by byte", bytes)
			for c := 1; c < len(f.body); c++ {
				check(fmt.Sprintf("cut at %d", c), []int{c})
			}
		})
	}
}
