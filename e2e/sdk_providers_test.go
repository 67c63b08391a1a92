package e2e

// The providers of the real-SDK matrix: the official browser clients of the
// LLM APIs people stream from besides OpenAI, Anthropic, the AI SDK and
// Ollama, each streaming from a fake of its API on the test origin that
// sends that API's wire format as its SDK reads it (read in the pinned SDK
// sources and the API references), behind the origin middleware (package origin)
// reporting to the same collector. Each stored stream is checked for its
// format, status, content events, tokens, model, and its TTFT against the
// origin's own first-piece time: every fake sends its opening events at
// once and its first text providerFirst later, so a TTFT taken at an
// opening event would come before the origin's.
//
//   - cohere-ai 8.1.0, CohereClientV2.chatStream (POST {baseUrl}/v2/chat):
//     fetch(url, init) with the global fetch at call time; its own SSE
//     reader (core/stream) needs each event's JSON "type" (message-start,
//     content-start, content-delta, content-end, message-end; the API names
//     them in `event:` lines too). message-end's delta.usage.tokens.output_tokens.
//   - @google/genai 3.6.1, models.generateContentStream (POST
//     {baseUrl}/v1/models/MODEL:streamGenerateContent?alt=sse): the
//     model is only in the path; events end with \r\n\r\n; no [DONE], the
//     SDK reads to the end of the body; the last chunk has finishReason and
//     usageMetadata.candidatesTokenCount.
//   - @mistralai/mistralai 2.7.0, chat.stream (POST {serverURL}/v1/chat/completions):
//     builds a Request and calls fetch(request) with no init, so the model
//     is only in the Request's body; OpenAI-like chunks, usage in the last
//     chunk, [DONE].
//   - groq-sdk 1.6.0, chat.completions.create stream (POST
//     {baseURL}/openai/v1/chat/completions): OpenAI chunks, x_groq in the
//     first and last chunk, its usage in the last; [DONE].
//   - @huggingface/inference 4.13.30, InferenceClient.chatCompletionStream
//     with an endpointUrl (a TGI server: POST {endpointUrl}/v1/chat/completions):
//     TGI's OpenAI-compatible chunks (role in every delta), usage with
//     stream_options.include_usage, [DONE] (the SDK returns there and
//     releases its reader).
//   - openai 7.60.0 with a baseURL, as these providers document for JS:
//     OpenRouter (": OPENROUTER PROCESSING" comments before and between the
//     chunks, a usage chunk with no choices), DeepSeek (": keep-alive"
//     comments), xAI, Together (choices[].text beside the delta), Fireworks;
//     and its AzureOpenAI client (POST
//     {endpoint}/openai/deployments/DEPLOYMENT/chat/completions?api-version=...,
//     model "" in the body: the model is the deployment in the path; a first
//     chunk with no choices and prompt_filter_results).

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector/demo"
	"github.com/itlmon/itlmon/origin"
)

const (
	// providerFirst is how long after its opening events each fake sends its
	// first text; providerGap is the gap between its text pieces.
	providerFirst = 60 * time.Millisecond
	providerGap   = 8 * time.Millisecond
	// sdkOriginKey is the e2e site's key for origin timelines.
	sdkOriginKey = "sdk-matrix-origin-key"
)

// providerWire is a fake provider API: the events it sends before the first
// text, one text piece, and the events after the last (with the output
// token count), as SSE bytes. ask is the request's JSON body.
type providerWire struct {
	open    func(ask map[string]any) string
	piece   func(i int, text string) string
	closing func(ask map[string]any, usage int) string
}

// sse is one SSE event (an `event:` line when ev is set); end is the line end.
func sse(ev, data, end string) string {
	s := ""
	if ev != "" {
		s = "event: " + ev + end
	}
	return s + "data: " + data + end + end
}

func jstr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// chatChunk is an OpenAI chat.completion.chunk with these choices and
// extra top-level members (each `"key":value`).
func chatChunk(id, model, choices string, extra ...string) string {
	s := `{"id":"` + id + `","object":"chat.completion.chunk","created":1764660000,"model":"` + model + `","choices":[` + choices + `]`
	for _, e := range extra {
		s += "," + e
	}
	return s + "}"
}

func includeUsage(ask map[string]any) bool {
	so, _ := ask["stream_options"].(map[string]any)
	iu, _ := so["include_usage"].(bool)
	return iu
}

var providerWires = map[string]providerWire{
	"cohere": {
		open: func(map[string]any) string {
			return sse("message-start", `{"id":"5c3a1f0e-7d2b-4e8a-9c61-0f2d3e4b5a69","type":"message-start","delta":{"message":{"role":"assistant","content":[],"tool_plan":"","tool_calls":[],"citations":[]}}}`, "\n") +
				sse("content-start", `{"type":"content-start","index":0,"delta":{"message":{"content":{"type":"text","text":""}}}}`, "\n")
		},
		piece: func(_ int, t string) string {
			return sse("content-delta", `{"type":"content-delta","index":0,"delta":{"message":{"content":{"text":`+jstr(t)+`}}},"logprobs":null}`, "\n")
		},
		closing: func(_ map[string]any, usage int) string {
			return sse("content-end", `{"type":"content-end","index":0}`, "\n") +
				sse("message-end", `{"type":"message-end","delta":{"finish_reason":"COMPLETE","usage":{"billed_units":{"input_tokens":1,"output_tokens":`+strconv.Itoa(usage-2)+`},"tokens":{"input_tokens":496,"output_tokens":`+strconv.Itoa(usage)+`},"cached_tokens":0}}}`, "\n")
		},
	},
	"gemini": {
		// No opening event: the first chunk carries the first text. The
		// last text's chunk carries finishReason and the usage.
		open: func(map[string]any) string { return "" },
		piece: func(_ int, t string) string {
			return sse("", `{"candidates": [{"content": {"parts": [{"text": `+jstr(t)+`}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 2,"totalTokenCount": 2},"modelVersion": "gemini-2.5-flash","responseId": "mD3UaOKLFq3m1dkP8ZqZ4QU"}`, "\r\n")
		},
		closing: func(_ map[string]any, usage int) string {
			return sse("", `{"candidates": [{"content": {"parts": [{"text": ""}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 2,"candidatesTokenCount": `+strconv.Itoa(usage)+`,"totalTokenCount": `+strconv.Itoa(usage+2)+`},"modelVersion": "gemini-2.5-flash","responseId": "mD3UaOKLFq3m1dkP8ZqZ4QU"}`, "\r\n")
		},
	},
	"mistral": {
		open: func(map[string]any) string {
			return sse("", chatChunk("a1b2c3d4e5f60718293a4b5c6d7e8f90", "mistral-small-latest", `{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}`), "\n")
		},
		piece: func(_ int, t string) string {
			return sse("", chatChunk("a1b2c3d4e5f60718293a4b5c6d7e8f90", "mistral-small-latest", `{"index":0,"delta":{"content":`+jstr(t)+`},"finish_reason":null}`), "\n")
		},
		closing: func(_ map[string]any, usage int) string {
			return sse("", chatChunk("a1b2c3d4e5f60718293a4b5c6d7e8f90", "mistral-small-latest", `{"index":0,"delta":{"content":""},"finish_reason":"stop"}`,
				`"usage":{"prompt_tokens":5,"total_tokens":`+strconv.Itoa(usage+5)+`,"completion_tokens":`+strconv.Itoa(usage)+`}`), "\n") + sse("", "[DONE]", "\n")
		},
	},
	"groq": {
		open: func(map[string]any) string {
			return sse("", chatChunk("chatcmpl-0b5e3f7a-9c1d-4e2f-8a6b-7c3d5e9f1a2b", "llama-3.3-70b-versatile", `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`,
				`"system_fingerprint":"fp_3f3b593e33"`, `"x_groq":{"id":"req_01kbf3a9d2e7f8g9h0j1k2m3n4","seed":1730419311}`), "\n")
		},
		piece: func(_ int, t string) string {
			return sse("", chatChunk("chatcmpl-0b5e3f7a-9c1d-4e2f-8a6b-7c3d5e9f1a2b", "llama-3.3-70b-versatile", `{"index":0,"delta":{"content":`+jstr(t)+`},"logprobs":null,"finish_reason":null}`,
				`"system_fingerprint":"fp_3f3b593e33"`), "\n")
		},
		closing: func(_ map[string]any, usage int) string {
			return sse("", chatChunk("chatcmpl-0b5e3f7a-9c1d-4e2f-8a6b-7c3d5e9f1a2b", "llama-3.3-70b-versatile", `{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}`,
				`"system_fingerprint":"fp_3f3b593e33"`, `"x_groq":{"id":"req_01kbf3a9d2e7f8g9h0j1k2m3n4","usage":{"queue_time":0.051,"prompt_tokens":36,"prompt_time":0.0019,"completion_tokens":`+strconv.Itoa(usage)+`,"completion_time":0.097,"total_tokens":`+strconv.Itoa(usage+36)+`,"total_time":0.099}}`), "\n") +
				sse("", "[DONE]", "\n")
		},
	},
	"tgi": {
		open: func(map[string]any) string { return "" },
		piece: func(_ int, t string) string {
			return sse("", `{"object":"chat.completion.chunk","id":"","created":1764660000,"model":"sdk-model","system_fingerprint":"3.3.6-sha-a8b7c6d","choices":[{"index":0,"delta":{"role":"assistant","content":`+jstr(t)+`},"logprobs":null,"finish_reason":null}],"usage":null}`, "\n")
		},
		closing: func(ask map[string]any, usage int) string {
			s := sse("", `{"object":"chat.completion.chunk","id":"","created":1764660000,"model":"sdk-model","system_fingerprint":"3.3.6-sha-a8b7c6d","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":"stop"}],"usage":null}`, "\n")
			if includeUsage(ask) {
				s += sse("", `{"object":"chat.completion.chunk","id":"","created":1764660000,"model":"sdk-model","system_fingerprint":"3.3.6-sha-a8b7c6d","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":`+strconv.Itoa(usage)+`,"total_tokens":`+strconv.Itoa(usage+9)+`}}`, "\n")
			}
			return s + sse("", "[DONE]", "\n")
		},
	},
	"openrouter": {
		open: func(map[string]any) string {
			return ": OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\n\n" +
				sse("", chatChunk("gen-1764660000-aB3dE5fG7hI9jK1lM3nO", "openai/gpt-4o-mini", `{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null,"native_finish_reason":null,"logprobs":null}`, `"provider":"OpenAI"`), "\n")
		},
		piece: func(i int, t string) string {
			s := ""
			if i == 12 {
				s = ": OPENROUTER PROCESSING\n\n"
			}
			return s + sse("", chatChunk("gen-1764660000-aB3dE5fG7hI9jK1lM3nO", "openai/gpt-4o-mini", `{"index":0,"delta":{"role":"assistant","content":`+jstr(t)+`},"finish_reason":null,"native_finish_reason":null,"logprobs":null}`, `"provider":"OpenAI"`), "\n")
		},
		closing: func(_ map[string]any, usage int) string {
			return sse("", chatChunk("gen-1764660000-aB3dE5fG7hI9jK1lM3nO", "openai/gpt-4o-mini", `{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"stop","native_finish_reason":"stop","logprobs":null}`, `"provider":"OpenAI"`), "\n") +
				sse("", chatChunk("gen-1764660000-aB3dE5fG7hI9jK1lM3nO", "openai/gpt-4o-mini", ``, `"provider":"OpenAI"`,
					`"usage":{"prompt_tokens":8,"completion_tokens":`+strconv.Itoa(usage)+`,"total_tokens":`+strconv.Itoa(usage+8)+`,"cost":0.0000312,"is_byok":false,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}`), "\n") +
				sse("", "[DONE]", "\n")
		},
	},
	"deepseek": {
		open: func(map[string]any) string {
			return ": keep-alive\n\n" + sse("", chatChunk("3f2e1d0c-b9a8-4765-8432-10fedcba9876", "deepseek-chat", `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`, `"system_fingerprint":"fp_ffc7281d48_prod0820_fp8_kvcache"`), "\n")
		},
		piece: func(_ int, t string) string {
			return sse("", chatChunk("3f2e1d0c-b9a8-4765-8432-10fedcba9876", "deepseek-chat", `{"index":0,"delta":{"content":`+jstr(t)+`},"logprobs":null,"finish_reason":null}`, `"system_fingerprint":"fp_ffc7281d48_prod0820_fp8_kvcache"`), "\n")
		},
		closing: func(_ map[string]any, usage int) string {
			return sse("", chatChunk("3f2e1d0c-b9a8-4765-8432-10fedcba9876", "deepseek-chat", `{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop"}`, `"system_fingerprint":"fp_ffc7281d48_prod0820_fp8_kvcache"`,
				`"usage":{"prompt_tokens":4,"completion_tokens":`+strconv.Itoa(usage)+`,"total_tokens":`+strconv.Itoa(usage+4)+`,"prompt_tokens_details":{"cached_tokens":0},"prompt_cache_hit_tokens":0,"prompt_cache_miss_tokens":4}`), "\n") +
				sse("", "[DONE]", "\n")
		},
	},
	"xai": {
		open: func(map[string]any) string {
			return sse("", chatChunk("b7e4c2a1-5f3d-4a9e-8c2b-1d6f0e9a7c35", "grok-4-fast-non-reasoning", `{"index":0,"delta":{"role":"assistant","content":""}}`, `"system_fingerprint":"fp_9362061f30"`), "\n")
		},
		piece: func(_ int, t string) string {
			return sse("", chatChunk("b7e4c2a1-5f3d-4a9e-8c2b-1d6f0e9a7c35", "grok-4-fast-non-reasoning", `{"index":0,"delta":{"content":`+jstr(t)+`,"role":"assistant"}}`, `"system_fingerprint":"fp_9362061f30"`), "\n")
		},
		closing: func(_ map[string]any, usage int) string {
			return sse("", chatChunk("b7e4c2a1-5f3d-4a9e-8c2b-1d6f0e9a7c35", "grok-4-fast-non-reasoning", `{"index":0,"delta":{"role":"assistant"},"finish_reason":"stop"}`, `"system_fingerprint":"fp_9362061f30"`,
				`"usage":{"prompt_tokens":10,"completion_tokens":`+strconv.Itoa(usage)+`,"total_tokens":`+strconv.Itoa(usage+10)+`,"prompt_tokens_details":{"text_tokens":10,"audio_tokens":0,"image_tokens":0,"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0},"num_sources_used":0}`), "\n") +
				sse("", "[DONE]", "\n")
		},
	},
	"together": {
		open: func(map[string]any) string { return "" },
		piece: func(i int, t string) string {
			return sse("", chatChunk("oK3qVb7-2kFHot-9a2f4c6e8b0d1e3f", "meta-llama/Llama-3.3-70B-Instruct-Turbo",
				`{"index":0,"text":`+jstr(t)+`,"logprobs":null,"finish_reason":null,"seed":null,"delta":{"token_id":`+strconv.Itoa(1000+i)+`,"role":"assistant","content":`+jstr(t)+`,"tool_calls":null}}`), "\n")
		},
		closing: func(_ map[string]any, usage int) string {
			return sse("", chatChunk("oK3qVb7-2kFHot-9a2f4c6e8b0d1e3f", "meta-llama/Llama-3.3-70B-Instruct-Turbo",
				`{"index":0,"text":"","logprobs":null,"finish_reason":"stop","seed":6134482471362591000,"delta":{"token_id":128009,"role":"assistant","content":"","tool_calls":null}}`,
				`"usage":{"prompt_tokens":36,"completion_tokens":`+strconv.Itoa(usage)+`,"total_tokens":`+strconv.Itoa(usage+36)+`,"cached_tokens":0}`), "\n") +
				sse("", "[DONE]", "\n")
		},
	},
	"fireworks": {
		open: func(map[string]any) string {
			return sse("", chatChunk("6e0f1d2c-3b4a-5968-7a8b-9c0d1e2f3a4b", "accounts/fireworks/models/llama-v3p3-70b-instruct", `{"index":0,"delta":{"role":"assistant"},"finish_reason":null}`, `"usage":null`), "\n")
		},
		piece: func(_ int, t string) string {
			return sse("", chatChunk("6e0f1d2c-3b4a-5968-7a8b-9c0d1e2f3a4b", "accounts/fireworks/models/llama-v3p3-70b-instruct", `{"index":0,"delta":{"content":`+jstr(t)+`},"finish_reason":null}`, `"usage":null`), "\n")
		},
		closing: func(_ map[string]any, usage int) string {
			return sse("", chatChunk("6e0f1d2c-3b4a-5968-7a8b-9c0d1e2f3a4b", "accounts/fireworks/models/llama-v3p3-70b-instruct", `{"index":0,"delta":{},"finish_reason":"stop"}`,
				`"usage":{"prompt_tokens":13,"total_tokens":`+strconv.Itoa(usage+13)+`,"completion_tokens":`+strconv.Itoa(usage)+`}`), "\n") +
				sse("", "[DONE]", "\n")
		},
	},
	"azure": {
		open: func(map[string]any) string {
			cf := `"content_filter_results":{"hate":{"filtered":false,"severity":"safe"},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":false,"severity":"safe"}}`
			return sse("", `{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,`+cf+`}]}`, "\r\n") +
				sse("", `{"choices":[{"content_filter_results":{},"delta":{"content":"","refusal":null,"role":"assistant"},"finish_reason":null,"index":0,"logprobs":null}],"created":1764660000,"id":"chatcmpl-CHe4y0Ra2Ml1Kn3Oo5Pq7Rs9Tu1","model":"gpt-4o-mini-2024-07-18","object":"chat.completion.chunk","system_fingerprint":"fp_efad92c60b","usage":null}`, "\r\n")
		},
		piece: func(_ int, t string) string {
			return sse("", `{"choices":[{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":false,"severity":"safe"}},"delta":{"content":`+jstr(t)+`},"finish_reason":null,"index":0,"logprobs":null}],"created":1764660000,"id":"chatcmpl-CHe4y0Ra2Ml1Kn3Oo5Pq7Rs9Tu1","model":"gpt-4o-mini-2024-07-18","object":"chat.completion.chunk","system_fingerprint":"fp_efad92c60b","usage":null}`, "\r\n")
		},
		closing: func(ask map[string]any, usage int) string {
			s := sse("", `{"choices":[{"content_filter_results":{},"delta":{},"finish_reason":"stop","index":0,"logprobs":null}],"created":1764660000,"id":"chatcmpl-CHe4y0Ra2Ml1Kn3Oo5Pq7Rs9Tu1","model":"gpt-4o-mini-2024-07-18","object":"chat.completion.chunk","system_fingerprint":"fp_efad92c60b","usage":null}`, "\r\n")
			if includeUsage(ask) {
				s += sse("", `{"choices":[],"created":1764660000,"id":"chatcmpl-CHe4y0Ra2Ml1Kn3Oo5Pq7Rs9Tu1","model":"gpt-4o-mini-2024-07-18","object":"chat.completion.chunk","system_fingerprint":"fp_efad92c60b","usage":{"completion_tokens":`+strconv.Itoa(usage)+`,"completion_tokens_details":{"accepted_prediction_tokens":0,"audio_tokens":0,"reasoning_tokens":0,"rejected_prediction_tokens":0},"prompt_tokens":8,"prompt_tokens_details":{"audio_tokens":0,"cached_tokens":0},"total_tokens":`+strconv.Itoa(usage+8)+`}}`, "\r\n")
			}
			return s + "data: [DONE]\r\n\r\n"
		},
	},
}

// providerHandler serves a fake provider: the opening events at once, the
// first text piece providerFirst later, the others every providerGap, the
// closing events with the last, each write flushed. The cadence is
// sdkTokens pieces (demo.Token's text) reporting sdkUsage output tokens.
func providerHandler(p providerWire) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var ask map[string]any
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err := json.Unmarshal(body, &ask); err != nil {
			http.Error(w, `{"error":"want a JSON body"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		start := time.Now()
		write := func(s string, at time.Duration) bool {
			if d := time.Until(start.Add(at)); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-r.Context().Done():
					t.Stop()
					return false
				}
			}
			if s == "" {
				return true
			}
			_, err := io.WriteString(w, s)
			return err == nil && rc.Flush() == nil
		}
		if !write(p.open(ask), 0) {
			return
		}
		for i := range sdkTokens {
			s := p.piece(i, demo.Token(i))
			if i == sdkTokens-1 {
				s += p.closing(ask, sdkUsage)
			}
			if !write(s, providerFirst+time.Duration(i)*providerGap) {
				return
			}
		}
	}
}

// providerRoutes are the fakes' paths on the origin, as each SDK calls them.
var providerRoutes = map[string]string{
	"cohere":     "POST /cohere/v2/chat",
	"gemini":     "POST /gemini/{version}/models/",
	"mistral":    "POST /mistral/v1/chat/completions",
	"groq":       "POST /groq/openai/v1/chat/completions",
	"tgi":        "POST /tgi/v1/chat/completions",
	"openrouter": "POST /openrouter/api/v1/chat/completions",
	"deepseek":   "POST /deepseek/chat/completions",
	"xai":        "POST /xai/v1/chat/completions",
	"together":   "POST /together/v1/chat/completions",
	"fireworks":  "POST /fireworks/inference/v1/chat/completions",
	"azure":      "POST /azure/openai/deployments/",
}

// providerDrivers is the page's code: one function per provider that
// streams one answer through its SDK and returns what the SDK gave the page
// (newOut, as in sdkDrivers).
const providerDrivers = `
// newOut returns the SDK's output record and a function to call per text
// piece; page.firstTextMs is when the SDK gave the page its first text,
// since just before the client was made (so before itlmon's t0).
function newOut() {
  const out = { text: '', items: 0, content: 0, usage: -1, err: '', parts: '', status: '' };
  const page = { longGaps: 0, firstTextMs: -1 }, t0 = performance.now();
  return { out, page, content: (t) => {
    if (page.firstTextMs < 0) page.firstTextMs = performance.now() - t0;
    out.text += t; out.content++;
  } };
}
const msgs = [{ role: 'user', content: 'hi' }];
const base = location.origin;
async function chatLoop(stream, out, content, usageOf) {
  for await (const c of stream) {
    out.items++;
    const t = c.choices && c.choices[0] && c.choices[0].delta && c.choices[0].delta.content;
    if (t) content(t);
    const u = usageOf(c);
    if (u != null) out.usage = u;
  }
}
// openaiAt streams through the OpenAI SDK from an OpenAI-compatible API at path.
const openaiAt = (path) => async (o) => {
  const M = await sdk('openai');
  const { out, page, content } = newOut();
  try {
    const client = new M.default({ apiKey: 'sk-test', baseURL: base + path, dangerouslyAllowBrowser: true, maxRetries: 0 });
    const stream = await client.chat.completions.create({ model: o.model, stream: true, stream_options: { include_usage: true }, messages: msgs });
    await chatLoop(stream, out, content, c => c.usage ? c.usage.completion_tokens : null);
  } catch (e) { out.err = e.name + ': ' + e.message; }
  return { out, page };
};
const drivers = {
  async cohere(o) {
    const M = await sdk('cohere');
    const { out, page, content } = newOut();
    try {
      const client = new M.CohereClientV2({ token: 'co-test', baseUrl: base + '/cohere' });
      const stream = await client.chatStream({ model: o.model, messages: msgs });
      for await (const ev of stream) {
        out.items++;
        if (ev.type === 'content-delta') content(ev.delta.message.content.text);
        if (ev.type === 'message-end') { out.usage = ev.delta.usage.tokens.outputTokens; out.status = ev.delta.finishReason; }
      }
    } catch (e) { out.err = e.name + ': ' + e.message; }
    return { out, page };
  },
  async gemini(o) {
    const M = await sdk('genai');
    const { out, page, content } = newOut();
    try {
      const ai = new M.GoogleGenAI({ apiKey: 'gm-test', httpOptions: { baseUrl: base + '/gemini' } });
      const stream = await ai.models.generateContentStream({ model: o.model, contents: 'hi' });
      for await (const c of stream) {
        out.items++;
        if (c.text) content(c.text);
        if (c.usageMetadata && c.usageMetadata.candidatesTokenCount != null) out.usage = c.usageMetadata.candidatesTokenCount;
        if (c.candidates && c.candidates[0].finishReason) out.status = c.candidates[0].finishReason;
      }
    } catch (e) { out.err = e.name + ': ' + e.message; }
    return { out, page };
  },
  async mistral(o) {
    const M = await sdk('mistral');
    const { out, page, content } = newOut();
    try {
      const client = new M.Mistral({ apiKey: 'ms-test', serverURL: base + '/mistral' });
      const stream = await client.chat.stream({ model: o.model, messages: msgs });
      for await (const ev of stream) {
        out.items++;
        const c = ev.data;
        const t = c.choices[0] && c.choices[0].delta.content;
        if (t) content(t);
        if (c.usage) out.usage = c.usage.completionTokens;
      }
    } catch (e) { out.err = e.name + ': ' + e.message; }
    return { out, page };
  },
  async groq(o) {
    const M = await sdk('groq');
    const { out, page, content } = newOut();
    try {
      const client = new M.default({ apiKey: 'gsk-test', baseURL: base + '/groq', dangerouslyAllowBrowser: true, maxRetries: 0 });
      const stream = await client.chat.completions.create({ model: o.model, stream: true, messages: msgs });
      await chatLoop(stream, out, content, c => c.x_groq && c.x_groq.usage ? c.x_groq.usage.completion_tokens : null);
    } catch (e) { out.err = e.name + ': ' + e.message; }
    return { out, page };
  },
  async hf(o) {
    const M = await sdk('hf');
    const { out, page, content } = newOut();
    try {
      const client = new M.InferenceClient();
      const stream = client.chatCompletionStream({ endpointUrl: base + '/tgi', model: o.model, messages: msgs, stream_options: { include_usage: true } });
      await chatLoop(stream, out, content, c => c.usage ? c.usage.completion_tokens : null);
    } catch (e) { out.err = e.name + ': ' + e.message; }
    return { out, page };
  },
  openrouter: openaiAt('/openrouter/api/v1'),
  deepseek: openaiAt('/deepseek'),
  xai: openaiAt('/xai/v1'),
  together: openaiAt('/together/v1'),
  fireworks: openaiAt('/fireworks/inference/v1'),
  async azure(o) {
    const M = await sdk('openai');
    const { out, page, content } = newOut();
    try {
      const client = new M.AzureOpenAI({ endpoint: base + '/azure', apiKey: 'az-test', apiVersion: '2024-10-21', deployment: o.model, dangerouslyAllowBrowser: true, maxRetries: 0 });
      const stream = await client.chat.completions.create({ model: '', stream: true, stream_options: { include_usage: true }, messages: msgs });
      await chatLoop(stream, out, content, c => c.usage ? c.usage.completion_tokens : null);
    } catch (e) { out.err = e.name + ': ' + e.message; }
    return { out, page };
  },
};
`

var providerPageTmpl = template.Must(template.New("providers").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>itlmon provider sdk e2e</title>
<script type="module">
// Each bundle is imported by the first run that needs it (the page loads at once).
const sdk = (name) => import('/sdk-js/' + name + '.mjs');
{{.Drivers}}
window.e2e = { summaries: [], loaded: false, early: [] };
e2e.run = async function (name, opts) {
  const before = e2e.summaries.length;
  const r = await drivers[name](opts);
  if (window.itlmon) {
    const t0 = performance.now();
    while (e2e.summaries.length === before && performance.now() - t0 < 3000) await new Promise(r => setTimeout(r, 10));
    await itlmon.settled();
  }
  r.summaries = e2e.summaries.slice(before);
  return r;
};
{{if not .NoModule}}
const tag = document.createElement('script');
tag.src = {{.Src}}; tag.async = true; tag.dataset.site = {{.Site}};
tag.onload = () => { itlmon.onStream(s => e2e.summaries.push(s)); e2e.loaded = true; };
tag.onerror = () => { e2e.loaded = 'error'; };
document.head.appendChild(tag);
{{end}}
</script></head><body><p>itlmon provider sdk e2e</p></body></html>`))

// providerCase is one provider through its SDK: the stored format's name.
type providerCase struct {
	name   string // a providerWires key, and the driver's name ("hf" drives "tgi")
	wire   string
	format string
}

var providerCases = []providerCase{
	{"cohere", "cohere", "cohere"},
	{"gemini", "gemini", "gemini"},
	{"mistral", "mistral", "openai_chat"},
	{"groq", "groq", "openai_chat"},
	{"hf", "tgi", "openai_chat"},
	{"openrouter", "openrouter", "openai_chat"},
	{"deepseek", "deepseek", "openai_chat"},
	{"xai", "xai", "openai_chat"},
	{"together", "together", "openai_chat"},
	{"fireworks", "fireworks", "openai_chat"},
	{"azure", "azure", "openai_chat"},
}

// sdkProviders runs every provider's SDK (providerCases) once on a page
// with itlmon and once on the same page without, at the same time, and
// checks what the collector stored against the SDK's output and the
// origin's own timeline.
func sdkProviders(t *testing.T, o *Origin, c *Collector) {
	rp, err := origin.New(origin.Config{Collector: c.URL, Site: "e2e", Key: sdkOriginKey, FlushInterval: 50 * time.Millisecond, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rp.Shutdown(ctx)
	})
	for name, wire := range providerWires {
		o.Handle(providerRoutes[name], rp.Handler(providerHandler(wire)))
	}
	o.Handle("GET /provider-page", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		data := struct {
			Src, Site string
			Drivers   template.JS
			NoModule  bool
		}{o.collector + "/itl.js", o.site, template.JS(providerDrivers), r.URL.Query().Get("nomodule") == "1"}
		o.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := providerPageTmpl.Execute(w, data); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}))
	without := NewTab(t)
	if OpenPage(t, without, o.URL+"/provider-page?nomodule=1") {
		t.Fatalf("itlmon ready on the page without it")
	}
	Eval[bool](t, without, `(async () => { while (!window.e2e || !e2e.run) await new Promise(r => setTimeout(r, 5)); return true; })()`)
	with := NewTab(t)
	if !OpenPage(t, with, o.URL+"/provider-page") {
		t.Fatalf("itlmon did not become ready: %s", Eval[string](t, with, `itlmon.timing.error`))
	}

	start := time.Now()
	ids := map[string]string{}        // case name: stream id
	pageFirst := map[string]float64{} // case name: when the SDK gave the page its first text (ms)
	for _, pc := range providerCases {
		js, _ := json.Marshal(map[string]any{"model": sdkModel})
		ref, got := bothRuns(t, without, with, `e2e.run(`+strconv.Quote(pc.name)+`, `+string(js)+`)`)
		want := sdkOut{Text: demo.Text(sdkTokens), Content: sdkTokens, Usage: sdkUsage}
		r := ref.Out
		if r.Text != want.Text || r.Content != want.Content || r.Usage != want.Usage || r.Err != "" {
			t.Errorf("%s: the SDK gave the page (without itlmon) %d pieces, usage %d, err %q, text %q; want %d, %d, the demo text",
				pc.name, r.Content, r.Usage, r.Err, r.Text, want.Content, want.Usage)
		}
		if got.Out != ref.Out {
			t.Errorf("%s: the SDK gave the page\n%+v with itlmon,\n%+v without", pc.name, got.Out, ref.Out)
		}
		if len(got.Summaries) != 1 {
			t.Errorf("%s: %d itlmon.onStream summaries, want 1 (the stream was not measured)", pc.name, len(got.Summaries))
			continue
		}
		ids[pc.name] = got.Summaries[0].ID
		pageFirst[pc.name] = got.Page.FirstTextMs
	}
	t.Logf("providers: %d runs in %v", 2*len(providerCases), time.Since(start).Round(time.Millisecond))

	var all []string
	for _, id := range ids {
		all = append(all, id)
	}
	// Every stream of both pages went through the middleware: their
	// timelines were sent before the pages' records (the middleware
	// reports within its FlushInterval of a stream's end), so they are
	// stored when the records are readable (after the join's hold).
	waitSent(t, rp, uint64(2*len(providerCases)))
	rows := waitSDKRows(t, c, "e2e", all)
	firstPiece := originTTFT(t, c, rows)
	for _, pc := range providerCases {
		id, ok := ids[pc.name]
		if !ok {
			continue
		}
		row, ok := rows[id]
		if !ok {
			t.Errorf("%s: stream %s not stored", pc.name, id)
			continue
		}
		got := fmt.Sprintf("format %s, status %s, content events %d, tokens %d (reported %v), model %q",
			row.Format, row.Status, row.ContentEvents, row.Tokens, row.TokensReported, row.Model)
		want := fmt.Sprintf("format %s, status %s, content events %d, tokens %d (reported %v), model %q",
			pc.format, "complete", sdkTokens, sdkUsage, true, sdkModel)
		ot, hasOrigin := firstPiece[row.OriginID]
		ttft := -1.0
		if row.TTFTMs != nil {
			ttft = *row.TTFTMs
		}
		pf := pageFirst[pc.name]
		t.Logf("%-11s stored %s, end %q, TTFT %.1f ms; origin's first piece %.1f ms, the page's first text %.1f ms", pc.name, got, row.End, ttft, ot, pf)
		if got != want {
			t.Errorf("%s: stored %s;\n%*s want %s", pc.name, got, len(pc.name)+1, "", want)
		}
		// The origin's first piece is its first text (providerFirst after
		// the request reached it, the opening events sent at once), as its
		// own meter saw the handler's flushes. The page's clock starts
		// before the request is sent, so TTFT is at or after it; and
		// itlmon reads the first text before the SDK can give it to the
		// page, so TTFT is at or before the page's own first text (timed
		// from before the client was made: before itlmon's t0).
		first := float64(providerFirst / time.Millisecond)
		switch {
		case !hasOrigin:
			t.Errorf("%s: no origin timeline for origin id %q", pc.name, row.OriginID)
		case ot < first:
			t.Errorf("%s: the origin's first piece at %.1f ms, before its first text (%.0f ms)", pc.name, ot, first)
		case ttft < ot || ttft > pf:
			t.Errorf("%s: TTFT %.1f ms, want between the origin's first piece (%.1f ms) and the page's first text (%.1f ms)", pc.name, ttft, ot, pf)
		}
	}
}

// originTTFT reads the origin's first-piece time (itl_origin ttft_us, in
// ms) of each row's origin id, polling until all are stored (deadline 30 s:
// the collector stores origin timelines through its inbox).
func originTTFT(t *testing.T, c *Collector, rows map[string]sdkRow) map[string]float64 {
	t.Helper()
	var ids []string
	for _, r := range rows {
		if r.OriginID != "" {
			ids = append(ids, "'"+r.OriginID+"'")
		}
	}
	out := map[string]float64{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(30 * time.Second); len(ids) > 0; <-tick.C {
		res := c.Query(t, "SELECT origin_id, ttft_us FROM itl_origin FINAL WHERE site = 'e2e' AND origin_id IN ("+strings.Join(ids, ",")+") FORMAT TSV")
		for _, line := range strings.Split(res, "\n") {
			if f := strings.Split(line, "\t"); len(f) == 2 {
				us, _ := strconv.ParseFloat(f[1], 64)
				out[f[0]] = us / 1000
			}
		}
		if len(out) >= len(ids) || time.Now().After(deadline) {
			break
		}
	}
	return out
}
