// Package meter parses a streamed HTTP response body incrementally, one network
// read at a time with its arrival time, recognises token events for the common
// LLM streaming APIs, and computes the stream's timeline and summary exactly as
// docs/measuring.md defines them. It is pure Go (no syscall/js) and does not import fmt,
// encoding/json, net/http or any reflection-based encoder: it is compiled into
// the browser module.
//
// API:
//
//	func New(opts Options) *Meter                        // the zero Meter + Reset works too
//	func (m *Meter) Feed(chunk []byte, at Duration) // one network read, arrival time since t0
//	func (m *Meter) MarkBusy(start, end Duration)   // a main-thread long task / LoAF interval
//	func (m *Meter) EndBy(at Duration, how Stop, httpStatus int) // how the page saw it stop; Outcome decides
//	func (m *Meter) End(at Duration, st Status, httpStatus int)  // the caller decides the status
//	func (m *Meter) Terminal() bool                      // the format's terminal event arrived
//	func Outcome(terminal bool, how Stop, httpStatus int) (Status, End)
//	func (m *Meter) Format() Format
//	func (m *Meter) Summary() Summary                    // valid at any time; final after End
//	func (m *Meter) SummaryInto(s *Summary)              // the same, reusing s's storage
//	func (m *Meter) Reset(opts Options)                  // reuse without allocating
//
// Feed does not retain chunk, does not allocate per event in the steady state
// (the partial-line and event buffers are reused; a reused Meter and Summary
// measure a whole stream without allocating), and handles any split of the
// body across reads identically: the events, their times and every metric
// except the per-read ones (Reads, TTFB, EventsPerRead, MaxEventsPerRead,
// BytesPerRead and the network attribution built on them) depend only on the
// bytes and on when each event's last byte arrived.
//
// # Framing
//
// The Content-Type picks the framing: text/event-stream is Server-Sent Events;
// application/x-ndjson, application/jsonl (and variants) and application/json
// are newline-delimited JSON; any other type is plain text. With no type (or
// application/octet-stream) the first line (at most 64 bytes) decides: an SSE
// field or comment means SSE, '{' or '[' NDJSON, anything else text.
//
// SSE follows the WHATWG rules: LF, CR and CRLF line ends (a CRLF split across
// reads is one line end), "data:" with or without one space, multi-line data
// joined with LF, comments, event/id/retry fields, a leading UTF-8 BOM, and an
// event dispatched by its blank line (an event without data is not dispatched,
// an unfinished event at the end is discarded). NDJSON: one non-blank line is
// one event; a last line without a newline counts at End when the body
// completed. Plain text: one non-empty read is one content event. The framing
// works on bytes, so a multibyte UTF-8 character split across reads is never
// mis-framed. One line or one event's data keeps at most Options.MaxEventBytes.
//
// # Formats and content events
//
// The format is recognised from the first event that says anything (a blank
// or "[DONE]" event does not): its SSE event type or its JSON "type",
// "choices", "object", "candidates" (Gemini) or "token" with
// "generated_text" (TGI) field; for NDJSON, Ollama's "done" plus "message"
// or "response". Content events per format:
//
//   - OpenAI Chat Completions, and the APIs that send its chunks (Groq,
//     Mistral, DeepSeek, OpenRouter, xAI, Together, Fireworks, Azure OpenAI,
//     TGI's /v1/chat/completions): a choice whose delta has a non-empty
//     content (a string, or Mistral's array of chunks), reasoning,
//     reasoning_content or refusal, or a non-empty tool_calls array. A
//     role-only first chunk, empty deltas, Azure's prompt_filter_results chunk
//     (no choices), the usage chunk and [DONE] are not content; SSE comments
//     (OpenRouter's ": OPENROUTER PROCESSING", DeepSeek's ": keep-alive") are
//     not events. Tokens: usage.completion_tokens, else Groq's
//     x_groq.usage.completion_tokens.
//   - Cohere v2 chat: content-delta with non-empty text or thinking,
//     tool-plan-delta with a non-empty tool_plan, tool-call-start and
//     tool-call-delta with a function name or arguments. message-start,
//     content-start, content-end, tool-call-end, citation-start/end and
//     message-end are not content. Tokens: message-end's
//     delta.usage.tokens.output_tokens (else billed_units.output_tokens).
//   - Gemini streamGenerateContent (alt=sse): a candidate part with non-empty
//     text (thought summaries too) or a functionCall. Tokens:
//     usageMetadata.candidatesTokenCount.
//   - Hugging Face TGI /generate_stream: a token with non-empty text that is
//     not special. Tokens: the last event's details.generated_tokens (when
//     the request asked for details).
//   - OpenAI Responses: any response.*.delta event with a non-empty delta
//     (output_text, reasoning, function_call_arguments, refusal...). Tokens:
//     response.completed's response.usage.output_tokens.
//   - Anthropic Messages: content_block_delta with non-empty text, thinking or
//     partial_json (text_delta, thinking_delta, input_json_delta); signature
//     deltas and ping are not content. Tokens: message_delta usage.output_tokens.
//   - Vercel AI SDK UI message stream: text-delta, reasoning-delta and
//     tool-input-delta parts with a non-empty delta.
//   - Ollama: non-empty message.content / message.thinking / message.tool_calls
//     (/api/chat) or response / thinking (/api/generate). Tokens: eval_count of
//     the "done" line.
//   - Any other SSE: a data event with non-empty data other than [DONE],
//     until an event carries a type (an SSE event type other than "message",
//     or a top-level JSON "type"). From then on the stream is typed and an
//     event is content only when it carries text: data that is not JSON, a
//     JSON string, or a non-empty string under a text-like key (text, delta,
//     content, token, ...) at any depth. So a typed stream's opening, ping,
//     metadata and closing events are not content, and TTFT is the first
//     event with text.
//     Any other NDJSON: a line holding valid JSON. Text: every read.
//
// # How a stream ended
//
// Each format but generic NDJSON and text has a terminal event, after which
// it sends nothing more (Meter.Terminal): OpenAI Chat "data: [DONE]";
// Responses response.completed, response.incomplete or response.failed (by
// its "type", or its SSE event type when the event was cut at MaxEventBytes);
// Anthropic message_stop; the Vercel UI stream's "finish" part or [DONE];
// Ollama a line with "done": true; Cohere message-end; Gemini a chunk with a
// finishReason; TGI the event with generated_text; any other SSE [DONE]. It is noted in the
// same pass that classifies the event, from fields the classifier reads
// anyway. EndBy applies Outcome's rule: a stop after the terminal event
// (the page cancelling the body, as the OpenAI JS SDK 7.x does after
// [DONE], an abort, the page going away) leaves the stream complete with
// End EndClosedAfterEnd; the same stop before it is an abort.
//
// JSON is scanned by a small allocation-free scanner that looks only at the
// needed fields, whatever their order, whitespace or escapes; malformed or
// truncated JSON is a non-content event, never a panic.
//
// # Metrics
//
// See Summary and the definitions at the top of summary.go; they are
// docs/measuring.md's, with these choices made explicit:
//
//   - An event's time is the arrival time of the read that completed it.
//   - TPOT = (t_last - t_first_content)/(N-1) over content events, never
//     including TTFT. TPOTToken = (t_last - t_first_content)/(Tokens-1) when
//     tokens are known (usage or Options.TokensPerEvent), as vLLM computes
//     TPOT. TokensPerSec = 1/TPOTToken when tokens are known, else 1/TPOT.
//   - Token-normalised ITL: k tokens per content event is
//     Options.TokensPerEvent, else usage total / content events (streams report
//     only totals); each gap becomes max(1, round(k)) samples of gap/k.
//   - Gap quantiles are exact (numpy linear interpolation) up to MaxExactGaps
//     gaps, then read from the ITL histogram.
//   - Stall attribution (and TTFTCause, over [0, TTFT]): page when MarkBusy
//     intervals cover at least half of the gap; else network when the read
//     that ended it carried two or more content events; else page when a busy
//     interval overlaps it at all; else unknown. MarkBusy may come late:
//     attribution is computed in Summary.
package meter
