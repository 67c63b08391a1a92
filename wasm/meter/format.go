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

// detectSSE recognises the API format from the first SSE event that says
// anything: its event type, or its JSON "type", "choices" or "object".
// The answer is FormatSSE when the event says nothing known. Blank and
// "[DONE]" events do not decide (they are non-content in every format).
func detectSSE(data, evType []byte) (Format, bool) {
	if isBlank(data) || isDone(data) {
		return FormatUnknown, false
	}
	for _, t := range anthropicTypes {
		if string(evType) == t {
			return FormatAnthropic, true
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
	}
	if _, ok := jfield(data, "choices"); ok {
		return FormatOpenAIChat, true
	}
	if o, ok := jfield(data, "object"); ok && jstrHasPrefix(o, "chat.completion") {
		return FormatOpenAIChat, true
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
	}
	return !isBlank(data)
}

// openAIChat: content when any choice's delta has a non-empty content,
// reasoning, reasoning_content or refusal string, or a non-empty tool_calls
// array (or a legacy completions "text"). A role-only delta or an empty
// content does not count. usage.completion_tokens reports the output tokens.
var chatPath = newJPath([]jnode{
	0:  {key: "choices", parent: -1},
	1:  {elems: true, parent: 0},
	2:  {key: "delta", parent: 1},
	3:  {key: "content", parent: 2, want: '"'},
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
})

const chatContent = 1<<3 | 1<<4 | 1<<5 | 1<<6 | 1<<7 | 1<<9 | 1<<10 | 1<<11

func (m *Meter) openAIChat(data []byte) bool {
	if !scanJSON(data, chatPath, &m.scan) {
		return false
	}
	if v := m.scan.val(data, 13); v != nil {
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
