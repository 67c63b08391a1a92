package meter

// Format detection and per-format classification of events. Each classifier
// gets one event's payload (an SSE event's data, an NDJSON line), says whether
// it carried output content and picks up reported output-token counts.
// Malformed JSON is never content.

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

func (m *Meter) classifySSE(data, evType []byte) bool {
	if m.format == FormatUnknown {
		f, ok := detectSSE(data, evType)
		if !ok {
			return false
		}
		m.format = f
	}
	if isDone(data) {
		return false
	}
	switch m.format {
	case FormatOpenAIChat:
		return m.openAIChat(data)
	case FormatOpenAIResponses:
		return m.openAIResponses(data)
	case FormatAnthropic:
		return m.anthropic(data)
	case FormatVercelAI:
		return vercelAI(data)
	}
	return !isBlank(data)
}

// openAIChat: content when any choice's delta has a non-empty content,
// reasoning, reasoning_content or refusal string, or a non-empty tool_calls
// array (or a legacy completions "text"). A role-only delta or an empty
// content does not count. usage.completion_tokens reports the output tokens.
func (m *Meter) openAIChat(data []byte) bool {
	content := false
	var usage []byte
	it := jobject(data)
	for it.next() {
		switch {
		case jstrEqual(it.key, "choices"):
			for ch := jarray(it.val); ch.next(); {
				for c := jobject(ch.elem); c.next(); {
					switch {
					case jstrEqual(c.key, "delta"):
						if chatDeltaContent(c.val) {
							content = true
						}
					case jstrEqual(c.key, "text"):
						if jnonEmptyString(c.val) {
							content = true
						}
					}
				}
			}
		case jstrEqual(it.key, "usage"):
			usage = it.val
		}
	}
	if !it.valid() {
		return false
	}
	if v, ok := jfield(usage, "completion_tokens"); ok {
		m.setTokens(v)
	}
	return content
}

func chatDeltaContent(delta []byte) bool {
	for d := jobject(delta); d.next(); {
		switch {
		case jstrEqual(d.key, "content"), jstrEqual(d.key, "reasoning"),
			jstrEqual(d.key, "reasoning_content"), jstrEqual(d.key, "refusal"):
			if jnonEmptyString(d.val) {
				return true
			}
		case jstrEqual(d.key, "tool_calls"):
			if jnonEmptyArray(d.val) {
				return true
			}
		case jstrEqual(d.key, "function_call"):
			if f, ok := jfield(d.val, "arguments"); ok && jnonEmptyString(f) {
				return true
			}
			if f, ok := jfield(d.val, "name"); ok && jnonEmptyString(f) {
				return true
			}
		}
	}
	return false
}

// openAIResponses: content for any "response.*.delta" event with a non-empty
// string delta (output_text, reasoning_text, reasoning_summary_text,
// function_call_arguments, refusal, ...). response.completed (or incomplete /
// failed) reports response.usage.output_tokens.
func (m *Meter) openAIResponses(data []byte) bool {
	var t, delta, resp []byte
	it := jobject(data)
	for it.next() {
		switch {
		case jstrEqual(it.key, "type"):
			t = it.val
		case jstrEqual(it.key, "delta"):
			delta = it.val
		case jstrEqual(it.key, "response"):
			resp = it.val
		}
	}
	if !it.valid() || t == nil {
		return false
	}
	if jstrHasPrefix(t, "response.") && jstrHasSuffix(t, ".delta") {
		return jnonEmptyString(delta)
	}
	if jstrEqual(t, "response.completed") || jstrEqual(t, "response.incomplete") || jstrEqual(t, "response.failed") {
		if v, ok := jget(resp, "usage", "output_tokens"); ok {
			m.setTokens(v)
		}
	}
	return false
}

// anthropic: content for a content_block_delta whose delta carries non-empty
// text (text_delta), thinking (thinking_delta) or partial_json
// (input_json_delta). signature and citation deltas, ping and the other events
// are not content. message_delta's usage.output_tokens (cumulative) reports
// the output tokens.
func (m *Meter) anthropic(data []byte) bool {
	var t, delta, usage []byte
	it := jobject(data)
	for it.next() {
		switch {
		case jstrEqual(it.key, "type"):
			t = it.val
		case jstrEqual(it.key, "delta"):
			delta = it.val
		case jstrEqual(it.key, "usage"):
			usage = it.val
		}
	}
	if !it.valid() || t == nil {
		return false
	}
	switch {
	case jstrEqual(t, "content_block_delta"):
		for d := jobject(delta); d.next(); {
			if (jstrEqual(d.key, "text") || jstrEqual(d.key, "thinking") || jstrEqual(d.key, "partial_json")) &&
				jnonEmptyString(d.val) {
				return true
			}
		}
	case jstrEqual(t, "message_delta"):
		if v, ok := jfield(usage, "output_tokens"); ok {
			m.setTokens(v)
		}
	}
	return false
}

// vercelAI: content for text-delta, reasoning-delta and tool-input-delta parts
// with a non-empty delta (v5: "delta"; tool input: "inputTextDelta"; older:
// "textDelta"). The UI message stream carries no token usage.
func vercelAI(data []byte) bool {
	var t []byte
	nonEmpty := false
	it := jobject(data)
	for it.next() {
		switch {
		case jstrEqual(it.key, "type"):
			t = it.val
		case jstrEqual(it.key, "delta"), jstrEqual(it.key, "inputTextDelta"), jstrEqual(it.key, "textDelta"):
			if jnonEmptyString(it.val) {
				nonEmpty = true
			}
		}
	}
	return it.valid() && nonEmpty &&
		(jstrEqual(t, "text-delta") || jstrEqual(t, "reasoning-delta") || jstrEqual(t, "tool-input-delta"))
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
// non-empty array. The final line ("done": true) reports eval_count.
func (m *Meter) ollama(line []byte) bool {
	content, done := false, false
	var evalCount []byte
	it := jobject(line)
	for it.next() {
		switch {
		case jstrEqual(it.key, "message"):
			for msg := jobject(it.val); msg.next(); {
				switch {
				case jstrEqual(msg.key, "content"), jstrEqual(msg.key, "thinking"):
					if jnonEmptyString(msg.val) {
						content = true
					}
				case jstrEqual(msg.key, "tool_calls"):
					if jnonEmptyArray(msg.val) {
						content = true
					}
				}
			}
		case jstrEqual(it.key, "response"), jstrEqual(it.key, "thinking"):
			if jnonEmptyString(it.val) {
				content = true
			}
		case jstrEqual(it.key, "done"):
			done = string(it.val) == "true"
		case jstrEqual(it.key, "eval_count"):
			evalCount = it.val
		}
	}
	if !it.valid() {
		return false
	}
	if done && evalCount != nil {
		m.setTokens(evalCount)
	}
	return content
}
