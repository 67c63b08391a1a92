package meter

// Format detection and per-format classification of events. Each classifier
// gets one event's payload (an SSE event's data, an NDJSON line), says whether
// it carried output content and picks up reported output-token counts.
// Malformed JSON is never content: each classifier validates its payload once
// (validJSON) before it looks into it.

// isDone reports whether an SSE data payload is the "[DONE]" sentinel (OpenAI,
// Vercel AI SDK).
func isDone(data []byte) bool {
	i, j := 0, len(data)
	for i < j && isJSONSpace(data[i]) {
		i++
	}
	for j > i && isJSONSpace(data[j-1]) {
		j--
	}
	return string(data[i:j]) == "[DONE]"
}

func isBlank(data []byte) bool { return skipWS(data, 0) == len(data) }

// Anthropic Messages event types.
var anthropicTypes = [...]string{
	"message_start", "content_block_start", "content_block_delta",
	"content_block_stop", "message_delta", "message_stop", "ping",
}

// Vercel AI SDK UI message stream part types ("data-*" parts are custom).
var vercelTypes = [...]string{
	"start", "start-step", "finish-step", "finish", "abort",
	"text-start", "text-delta", "text-end",
	"reasoning-start", "reasoning-delta", "reasoning-end",
	"tool-input-start", "tool-input-delta", "tool-input-available", "tool-input-error",
	"tool-output-available", "tool-output-error",
	"source-url", "source-document", "file", "message-metadata",
}

// Cohere v2 chat stream event types.
var cohereTypes = [...]string{
	"message-start", "content-start", "content-delta", "content-end",
	"tool-plan-delta", "tool-call-start", "tool-call-delta", "tool-call-end",
	"citation-start", "citation-end", "message-end", "debug",
}

// detectSSE recognises the API format from the first SSE event that says
// anything: its event type, or its JSON "type", "choices", "object",
// "candidates" (Gemini) or "token" (TGI). The answer is FormatSSE when the
// event says nothing known. Blank and "[DONE]" events do not decide (they
// are non-content in every format).
func detectSSE(data, evType []byte) (Format, bool) {
	if isBlank(data) || isDone(data) {
		return FormatUnknown, false
	}
	for _, t := range anthropicTypes {
		if string(evType) == t {
			return FormatAnthropic, true
		}
	}
	for _, t := range cohereTypes {
		if string(evType) == t {
			return FormatCohere, true
		}
	}
	if len(evType) > 9 && string(evType[:9]) == "response." {
		return FormatOpenAIResponses, true
	}
	if !validJSON(data) {
		return FormatSSE, true
	}
	if t, ok := jfield(data, "type"); ok {
		for _, a := range anthropicTypes {
			if jstrEqual(t, a) {
				return FormatAnthropic, true
			}
		}
		if jstrHasPrefix(t, "response.") {
			return FormatOpenAIResponses, true
		}
		for _, v := range vercelTypes {
			if jstrEqual(t, v) {
				return FormatVercelAI, true
			}
		}
		if jstrHasPrefix(t, "data-") {
			return FormatVercelAI, true
		}
		for _, c := range cohereTypes {
			if jstrEqual(t, c) {
				return FormatCohere, true
			}
		}
	}
	var tok, gen bool
	for it := jobject(data); it.next(); {
		switch {
		case jstrEqual(it.key, "choices"):
			return FormatOpenAIChat, true
		case jstrEqual(it.key, "object"):
			if jstrHasPrefix(it.val, "chat.completion") {
				return FormatOpenAIChat, true
			}
		case jstrEqual(it.key, "candidates"), jstrEqual(it.key, "promptFeedback"):
			return FormatGemini, true
		case jstrEqual(it.key, "token"):
			tok = true
		case jstrEqual(it.key, "generated_text"):
			gen = true
		}
	}
	if tok && gen {
		return FormatTGI, true
	}
	return FormatSSE, true
}

// classifySSE classifies one SSE event and notes the stream's terminal event
// (see Meter.Terminal). "[DONE]" ends an SSE stream in any format: OpenAI
// Chat, the Vercel AI SDK and generic SSE send it, the others never do.
func (m *Meter) classifySSE(data, evType []byte) bool {
	if isDone(data) {
		m.terminal = true
		return false
	}
	if m.format == FormatUnknown {
		f, ok := detectSSE(data, evType)
		if !ok {
			return false
		}
		m.format = f
	}
	switch m.format {
	case FormatOpenAIChat:
		return m.openAIChat(data)
	case FormatOpenAIResponses:
		return m.openAIResponses(data, evType)
	case FormatAnthropic:
		return m.anthropic(data, evType)
	case FormatVercelAI:
		return m.vercelAI(data)
	case FormatCohere:
		return m.cohere(data, evType)
	case FormatGemini:
		return m.gemini(data)
	case FormatTGI:
		return m.tgi(data)
	}
	return m.genericSSE(data, evType)
}

// openAIChat: content when any choice's delta has a non-empty content (a
// string, or Mistral's array of content chunks), reasoning,
// reasoning_content or refusal string, or a non-empty tool_calls array (or a
// legacy completions "text"). A role-only delta or an empty content does not
// count: nor do Azure OpenAI's first chunk (no choices, prompt_filter_results)
// and its content_filter_results. usage.completion_tokens reports the output
// tokens (Groq: x_groq.usage.completion_tokens in the last chunk).
// The OpenAI-compatible APIs send this format: Groq, Mistral, DeepSeek
// (reasoning_content), OpenRouter (reasoning; its ": OPENROUTER PROCESSING"
// lines are SSE comments), xAI, Together, Fireworks, Azure OpenAI, TGI's
// /v1/chat/completions.
var chatPath = newJPath([]jnode{
	0:  {key: "choices", parent: -1},
	1:  {elems: true, parent: 0},
	2:  {key: "delta", parent: 1},
	3:  {key: "content", parent: 2, want: wantStringOrArray},
	4:  {key: "reasoning", parent: 2, want: '"'},
	5:  {key: "reasoning_content", parent: 2, want: '"'},
	6:  {key: "refusal", parent: 2, want: '"'},
	7:  {key: "tool_calls", parent: 2, want: '['},
	8:  {key: "function_call", parent: 2},
	9:  {key: "arguments", parent: 8, want: '"'},
	10: {key: "name", parent: 8, want: '"'},
	11: {key: "text", parent: 1, want: '"'},
	12: {key: "usage", parent: -1},
	13: {key: "completion_tokens", parent: 12},
	14: {key: "x_groq", parent: -1},
	15: {key: "usage", parent: 14},
	16: {key: "completion_tokens", parent: 15},
})

const chatContent = 1<<3 | 1<<4 | 1<<5 | 1<<6 | 1<<7 | 1<<9 | 1<<10 | 1<<11

func (m *Meter) openAIChat(data []byte) bool {
	if !scanJSON(data, chatPath, &m.scan) {
		return false
	}
	if v := m.scan.val(data, 13); v != nil {
		m.setTokens(v)
	} else if v := m.scan.val(data, 16); v != nil {
		m.setTokens(v)
	}
	return m.scan.hits&chatContent != 0
}

// openAIResponses: content for any "response.*.delta" event with a non-empty
// string delta (output_text, reasoning_text, reasoning_summary_text,
// function_call_arguments, refusal, ...). response.completed (or incomplete /
// failed) reports response.usage.output_tokens and ends the stream: it is the
// terminal event, recognised by its SSE event type too (it carries the whole
// response, which may be cut at MaxEventBytes and then fail to scan).
var responsesPath = newJPath([]jnode{
	0: {key: "type", parent: -1},
	1: {key: "delta", parent: -1, want: '"'},
	2: {key: "response", parent: -1},
	3: {key: "usage", parent: 2},
	4: {key: "output_tokens", parent: 3},
})

func (m *Meter) openAIResponses(data, evType []byte) bool {
	if responsesEnd(evType) {
		m.terminal = true
	}
	if !scanJSON(data, responsesPath, &m.scan) {
		return false
	}
	t := m.scan.val(data, 0)
	if t == nil {
		return false
	}
	if jstrHasPrefix(t, "response.") && jstrHasSuffix(t, ".delta") {
		return m.scan.hit(1)
	}
	if jstrEqual(t, "response.completed") || jstrEqual(t, "response.incomplete") || jstrEqual(t, "response.failed") {
		m.terminal = true
		if v := m.scan.val(data, 4); v != nil {
			m.setTokens(v)
		}
	}
	return false
}

// responsesEnd reports whether an SSE event type is one of the Responses
// API's terminal events.
func responsesEnd(evType []byte) bool {
	switch string(evType) {
	case "response.completed", "response.incomplete", "response.failed":
		return true
	}
	return false
}

// anthropic: content for a content_block_delta whose delta carries non-empty
// text (text_delta), thinking (thinking_delta) or partial_json
// (input_json_delta). signature and citation deltas, ping and the other events
// are not content. message_delta's usage.output_tokens (cumulative) reports
// the output tokens. message_stop (its "type", or the SSE event type) is the
// terminal event.
var anthropicPath = newJPath([]jnode{
	0: {key: "type", parent: -1},
	1: {key: "delta", parent: -1},
	2: {key: "text", parent: 1, want: '"'},
	3: {key: "thinking", parent: 1, want: '"'},
	4: {key: "partial_json", parent: 1, want: '"'},
	5: {key: "usage", parent: -1},
	6: {key: "output_tokens", parent: 5},
})

func (m *Meter) anthropic(data, evType []byte) bool {
	if string(evType) == "message_stop" {
		m.terminal = true
	}
	if !scanJSON(data, anthropicPath, &m.scan) {
		return false
	}
	t := m.scan.val(data, 0)
	switch {
	case t == nil:
	case jstrEqual(t, "content_block_delta"):
		return m.scan.hits&(1<<2|1<<3|1<<4) != 0
	case jstrEqual(t, "message_delta"):
		if v := m.scan.val(data, 6); v != nil {
			m.setTokens(v)
		}
	case jstrEqual(t, "message_stop"):
		m.terminal = true
	}
	return false
}

// vercelAI: content for text-delta, reasoning-delta and tool-input-delta parts
// with a non-empty delta (v5: "delta"; tool input: "inputTextDelta"; older:
// "textDelta"). The UI message stream carries no token usage. A "finish"
// part (or "[DONE]", see classifySSE) is the terminal event.
var vercelPath = newJPath([]jnode{
	0: {key: "type", parent: -1},
	1: {key: "delta", parent: -1, want: '"'},
	2: {key: "inputTextDelta", parent: -1, want: '"'},
	3: {key: "textDelta", parent: -1, want: '"'},
})

func (m *Meter) vercelAI(data []byte) bool {
	if !scanJSON(data, vercelPath, &m.scan) {
		return false
	}
	t := m.scan.val(data, 0)
	if t == nil {
		return false
	}
	if m.scan.hits&(1<<1|1<<2|1<<3) == 0 {
		if jstrEqual(t, "finish") {
			m.terminal = true
		}
		return false
	}
	return jstrEqual(t, "text-delta") || jstrEqual(t, "reasoning-delta") || jstrEqual(t, "tool-input-delta")
}

// detectNDJSON: Ollama when the first line is an object with "done" and a
// "message" (/api/chat) or "response" (/api/generate); else generic NDJSON.
func detectNDJSON(line []byte) Format {
	if !validJSON(line) {
		return FormatNDJSON
	}
	var done, msg bool
	for it := jobject(line); it.next(); {
		switch {
		case jstrEqual(it.key, "done"):
			done = true
		case jstrEqual(it.key, "message"), jstrEqual(it.key, "response"):
			msg = true
		}
	}
	if done && msg {
		return FormatOllama
	}
	return FormatNDJSON
}

func (m *Meter) classifyNDJSON(line []byte) bool {
	if m.format == FormatUnknown {
		m.format = detectNDJSON(line)
	}
	if m.format == FormatOllama {
		return m.ollama(line)
	}
	return validJSON(line)
}

// aiData (the AI SDK's data stream protocol, "x-vercel-ai-data-stream: v1",
// text/plain: AI SDK 3 and 4's default for useChat; its UI message stream,
// AI SDK 5's, is SSE and FormatVercelAI): a line is a part, TYPE:JSON.
// Content: text (0) and reasoning (g) with a non-empty string, a tool call's
// arguments delta (c) with a non-empty argsTextDelta, and a whole tool call
// (9) when its arguments did not come in deltas. The finish message (d)
// reports usage.completionTokens and ends the stream; the steps' starts
// and finishes (f, e), data (2), annotations (8), errors (3), tool results
// (a), sources (h) and files (k) are not content.
var aiDataPath = newJPath([]jnode{
	0: {key: "argsTextDelta", parent: -1, want: '"'},
	1: {key: "usage", parent: -1},
	2: {key: "completionTokens", parent: 1},
})

func (m *Meter) aiData(line []byte) bool {
	if len(line) < 3 || line[1] != ':' {
		return false
	}
	v := line[2:]
	switch line[0] {
	case '0', 'g':
		return len(v) > 2 && v[0] == '"' && validJSON(v)
	case 'c':
		if scanJSON(v, aiDataPath, &m.scan) && m.scan.hits&1 != 0 {
			m.toolDeltas = true
			return true
		}
	case '9':
		return !m.toolDeltas && len(v) > 0 && v[0] == '{' && validJSON(v)
	case 'd':
		if scanJSON(v, aiDataPath, &m.scan) {
			m.terminal = true
			if t := m.scan.val(v, 2); t != nil {
				m.setTokens(t)
			}
		}
	}
	return false
}

// ollama: content when message.content, message.thinking (chat) or response,
// thinking (generate) is a non-empty string, or message.tool_calls is a
// non-empty array. The final line ("done": true) reports eval_count and is
// the terminal event.
var ollamaPath = newJPath([]jnode{
	0: {key: "message", parent: -1},
	1: {key: "content", parent: 0, want: '"'},
	2: {key: "thinking", parent: 0, want: '"'},
	3: {key: "tool_calls", parent: 0, want: '['},
	4: {key: "response", parent: -1, want: '"'},
	5: {key: "thinking", parent: -1, want: '"'},
	6: {key: "done", parent: -1},
	7: {key: "eval_count", parent: -1},
})

func (m *Meter) ollama(line []byte) bool {
	if !scanJSON(line, ollamaPath, &m.scan) {
		return false
	}
	if string(m.scan.val(line, 6)) == "true" {
		m.terminal = true
		if v := m.scan.val(line, 7); v != nil {
			m.setTokens(v)
		}
	}
	return m.scan.hits&(1<<1|1<<2|1<<3|1<<4|1<<5) != 0
}

// cohere (Cohere v2 chat): content when the event's delta.message carries a
// non-empty content.text or content.thinking (content-delta), tool_plan
// (tool-plan-delta) or tool call function name or arguments (tool-call-start,
// tool-call-delta). message-start, content-start and content-end (empty
// text), tool-call-end, citation-start/end and message-end are not content.
// message-end reports delta.usage.tokens.output_tokens (else
// billed_units.output_tokens) and ends the stream, by its "type" or its SSE
// event type.
var coherePath = newJPath([]jnode{
	0:  {key: "type", parent: -1},
	1:  {key: "delta", parent: -1},
	2:  {key: "message", parent: 1},
	3:  {key: "content", parent: 2},
	4:  {key: "text", parent: 3, want: '"'},
	5:  {key: "thinking", parent: 3, want: '"'},
	6:  {key: "tool_plan", parent: 2, want: '"'},
	7:  {key: "tool_calls", parent: 2},
	8:  {key: "function", parent: 7},
	9:  {key: "name", parent: 8, want: '"'},
	10: {key: "arguments", parent: 8, want: '"'},
	11: {key: "usage", parent: 1},
	12: {key: "tokens", parent: 11},
	13: {key: "output_tokens", parent: 12},
	14: {key: "billed_units", parent: 11},
	15: {key: "output_tokens", parent: 14},
})

const cohereContent = 1<<4 | 1<<5 | 1<<6 | 1<<9 | 1<<10

func (m *Meter) cohere(data, evType []byte) bool {
	if string(evType) == "message-end" {
		m.terminal = true
	}
	if !scanJSON(data, coherePath, &m.scan) {
		return false
	}
	if t := m.scan.val(data, 0); t != nil && jstrEqual(t, "message-end") {
		m.terminal = true
	}
	if v := m.scan.val(data, 13); v != nil {
		m.setTokens(v)
	} else if v := m.scan.val(data, 15); v != nil {
		m.setTokens(v)
	}
	return m.scan.hits&cohereContent != 0
}

// gemini (Google Gemini streamGenerateContent?alt=sse): content when any
// candidate's content.parts has a non-empty text (thought summaries
// included) or a functionCall. A chunk with a candidate's finishReason ends
// the stream (the API sends no [DONE]); usageMetadata.candidatesTokenCount
// (cumulative, in every chunk once known) reports the output tokens.
var geminiPath = newJPath([]jnode{
	0: {key: "candidates", parent: -1},
	1: {elems: true, parent: 0},
	2: {key: "content", parent: 1},
	3: {key: "parts", parent: 2},
	4: {elems: true, parent: 3},
	5: {key: "text", parent: 4, want: '"'},
	6: {key: "functionCall", parent: 4},
	7: {key: "finishReason", parent: 1, want: '"'},
	8: {key: "usageMetadata", parent: -1},
	9: {key: "candidatesTokenCount", parent: 8},
})

func (m *Meter) gemini(data []byte) bool {
	if !scanJSON(data, geminiPath, &m.scan) {
		return false
	}
	if m.scan.hit(7) {
		m.terminal = true
	}
	if v := m.scan.val(data, 9); v != nil {
		m.setTokens(v)
	}
	return m.scan.hit(5) || m.scan.val(data, 6) != nil
}

// tgi (Hugging Face Text Generation Inference, /generate_stream): content
// when token.text is non-empty and token.special is not true (the closing
// special token, such as </s> or <|eot_id|>, is not output). The last event
// carries generated_text (null before) and ends the stream; its
// details.generated_tokens (when the request asked for details) reports
// the output tokens.
var tgiPath = newJPath([]jnode{
	0: {key: "token", parent: -1},
	1: {key: "text", parent: 0, want: '"'},
	2: {key: "special", parent: 0},
	3: {key: "generated_text", parent: -1, want: '"'},
	4: {key: "details", parent: -1},
	5: {key: "generated_tokens", parent: 4},
})

func (m *Meter) tgi(data []byte) bool {
	if !scanJSON(data, tgiPath, &m.scan) {
		return false
	}
	if g := m.scan.val(data, 3); g != nil && g[0] == '"' {
		m.terminal = true
	}
	if v := m.scan.val(data, 5); v != nil {
		m.setTokens(v)
	}
	return m.scan.hit(1) && string(m.scan.val(data, 2)) != "true"
}

// genericSSE classifies an event of an SSE stream in no known format. Until
// the stream shows a type, one data event is one token event (any non-blank
// data). Once an event carries a type (an SSE event type other than the
// default "message", or a top-level JSON "type" string), the stream's events
// are typed, and an event is content only when it carries text: data that is
// not JSON, a JSON string, or a JSON value holding a non-empty string under
// one of textKeys at any depth. So a typed stream's opening, metadata, ping,
// status and closing events are not content, and its first content event is
// the first that carries text.
func (m *Meter) genericSSE(data, evType []byte) bool {
	if isBlank(data) {
		return false
	}
	if len(evType) > 0 && string(evType) != "message" {
		m.typed = true
	}
	if !m.typed && !jsonHasType(data) {
		return true
	}
	m.typed = true
	if !validJSON(data) {
		return true
	}
	return jsonText(data)
}

// textKeys are the member names whose non-empty string values are output
// text in typed event streams.
var textKeys = [...]string{
	"text", "delta", "content", "token", "answer", "output", "completion", "response",
	"partial_json", "arguments", "thinking", "reasoning", "reasoning_content",
}

// jsonHasType reports whether data is a JSON object with a top-level "type"
// string (data need not be valid: a cheap look before validation).
func jsonHasType(data []byte) bool {
	i := skipWS(data, 0)
	if i >= len(data) || data[i] != '{' || !validJSON(data) {
		return false
	}
	t, ok := jfield(data, "type")
	return ok && len(t) > 0 && t[0] == '"'
}

// jsonText reports whether the valid JSON value b is a non-empty string or
// holds one under a member named in textKeys, at any depth. One pass over
// b, no recursion.
func jsonText(b []byte) bool {
	i := skipWS(b, 0)
	if i < len(b) && b[i] == '"' {
		return jnonEmptyString(b[i:])
	}
	for i < len(b) {
		if b[i] != '"' {
			i++
			continue
		}
		j := skipStringTrusted(b, i)
		k := skipWS(b, j)
		if k >= len(b) || b[k] != ':' {
			i = j // a string value
			continue
		}
		v := skipWS(b, k+1)
		if v < len(b) && b[v] == '"' {
			e := skipStringTrusted(b, v)
			if e-v > 2 {
				for _, t := range textKeys {
					if jstrEqual(b[i:j], t) {
						return true
					}
				}
			}
			i = e
			continue
		}
		i = v
	}
	return false
}
