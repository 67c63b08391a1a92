package meter

import (
	"github.com/itlmon/itlmon/wasm/hist"
)

// Format is the streaming API format recognised for a response.
type Format uint8

const (
	FormatUnknown         Format = iota
	FormatOpenAIChat             // OpenAI Chat Completions SSE (choices[].delta)
	FormatOpenAIResponses        // OpenAI Responses SSE (response.output_text.delta)
	FormatAnthropic              // Anthropic Messages SSE (content_block_delta)
	FormatVercelAI               // Vercel AI SDK UI message stream (text-delta)
	FormatOllama                 // Ollama NDJSON (message.content / response)
	FormatSSE                    // any other SSE: one data event = one token event
	FormatNDJSON                 // any other NDJSON: one line = one token event
	FormatText                   // plain chunked text: one read = one event
	FormatCohere                 // Cohere v2 chat SSE (content-delta, message-end)
	FormatGemini                 // Google Gemini streamGenerateContent SSE (candidates[].content.parts[])
	FormatTGI                    // Hugging Face TGI's native SSE (token, generated_text)
	FormatVercelAIData           // Vercel AI SDK data stream protocol, AI SDK 3-4 (text/plain, 0:"text" lines)
)

// Status is how a stream ended.
type Status uint8

const (
	StatusOpen         Status = iota // not ended yet
	StatusComplete                   // body ended normally
	StatusAborted                    // the page (or user) aborted the request
	StatusNetworkError               // the body errored
	StatusHTTPError                  // the response status was >= 400
)

// End says how a stream's body ended, as far as the page is concerned. It
// refines Status: a page (or its client library) that closes the body after
// the stream's terminal event arrived ends it EndClosedAfterEnd, and the
// stream is complete; the same close before the terminal event is an abort.
type End uint8

const (
	EndNone           End = iota // not ended yet, or not known (an older sender)
	EndBody                      // the body was read to its end
	EndClosedAfterEnd            // the page cancelled or aborted the body after the terminal event
	EndAbort                     // the page (or user) aborted or cancelled before the terminal event
	EndError                     // the body (or the request, before headers) failed with a network error
)

// Cause says why a stall (or the wait for the first token) happened.
type Cause uint8

const (
	CauseNone    Cause = iota // no stall / not applicable
	CauseUnknown              // a stall with no evidence for any cause
	CauseNetwork              // the next read carried several content events (coalesced delivery)
	CausePage                 // the gap overlaps a busy main thread (long task / LoAF)
	CauseOrigin               // the origin's own emit times show the same gap
)

// Duration is a time span in nanoseconds with time.Duration's meaning (the
// server converts with time.Duration(d)). The meter has its own type so that
// the browser module does not link package time (about 35 KB brotli).
type Duration int64

// Units of Duration, as in package time.
const (
	Nanosecond  Duration = 1
	Microsecond          = 1000 * Nanosecond
	Millisecond          = 1000 * Microsecond
	Second               = 1000 * Millisecond
	Minute               = 60 * Second
	Hour                 = 60 * Minute
)

// Seconds is d in seconds, computed exactly as time.Duration.Seconds.
func (d Duration) Seconds() float64 {
	sec := d / Second
	nsec := d % Second
	return float64(sec) + float64(nsec)/1e9
}

// Names are the plain names stored in ClickHouse and used by every API
// ("status = 'aborted'", "ttft_cause = 'network'"). Index by the code; a
// code past the end (a newer sender) has no name here: see Name.
var (
	FormatNames = [...]string{"unknown", "openai_chat", "openai_responses", "anthropic", "vercel_ai", "ollama",
		"sse", "ndjson", "text", "cohere", "gemini", "tgi", "vercel_ai_data"}
	StatusNames = [...]string{"open", "complete", "aborted", "error", "http_error"}
	CauseNames  = [...]string{"none", "unknown", "network", "page", "origin"}
	EndNames    = [...]string{"", "body_end", "closed_after_end", "abort", "error"}
)

// Name returns names[code], or "unknown" for a code it does not know.
func Name[T ~uint8](names []string, code T) string {
	if int(code) < len(names) {
		return names[code]
	}
	return "unknown"
}

// NumCauses is the number of Cause values, for per-cause arrays.
const NumCauses = 5

// StallThreshold: a gap longer than this is a stall.
const StallThreshold = 200 * Millisecond

// Stamp is one entry of the sampled raw timeline: an event's arrival time
// since t0 and the index of the network read that carried it.
type Stamp struct {
	At      Duration
	Read    uint32 // index of the network read (0-based)
	Content bool   // the event carried output content
}

// Stall is one gap over StallThreshold between consecutive content events.
type Stall struct {
	Start, End     Duration // arrival times of the two content events, since t0
	Cause          Cause
	NextReadEvents uint32 // how many events (of any kind) the read that ended the stall carried
}

// Summary is a finished (or current) stream's metrics, as docs/measuring.md
// and summary.go define them. Durations are since t0 (just before the page issued fetch);
// -1 means "did not happen" (no body byte, no event, no content).
type Summary struct {
	Format     Format
	Status     Status
	End        End  // how the body ended (EndNone while open)
	Terminal   bool // the format's terminal event arrived (Meter.Terminal)
	HTTPStatus int

	TTFB, TTFC, TTFT Duration // first body byte, first event, first content event
	Duration         Duration // t0 to end of body (or abort/error)

	Events         int   // all stream events (SSE events, NDJSON lines, text reads)
	ContentEvents  int   // events that carried output content
	Tokens         int   // output tokens: usage count when reported, else ContentEvents × max(1, Options.TokensPerEvent)
	TokensReported bool  // Tokens came from the API's usage field
	Reads          int   // network reads (chunks)
	Bytes          int64 // body bytes

	// ITL: one sample per gap between consecutive content events, microseconds.
	ITL hist.Histogram
	// ITLTokens: token-normalised ITL (a gap of an event carrying k tokens is
	// k samples of gap/k). Empty when tokens per event are unknown.
	ITLTokens hist.Histogram

	GapP50, GapP95, GapP99, GapMax Duration // of ITL (exact on the raw gaps)
	TPOT                           Duration // (t_last - t_first_content)/(N-1)
	// TPOTToken: (t_last - t_first_content)/(Tokens-1) when tokens are known
	// (usage or Options.TokensPerEvent), as vLLM computes TPOT; else 0.
	TPOTToken    Duration
	TokensPerSec float64 // 1/TPOTToken when tokens are known, else 1/TPOT; 0 when N < 2

	Stalls     int      // gaps > StallThreshold
	StalledFor Duration // sum of stalled gaps
	Jank       float64  // p99/p50 (max/median below 100 gaps), median floored at 1 ms
	Smooth     bool     // Jank < 4 && TokensPerSec > 7

	// Re-chunking signals.
	EventsPerRead    float64 // events / reads that carried any event
	MaxEventsPerRead int
	BytesPerRead     float64
	SubFloorShare    float64 // share of ITL gaps below the timer floor

	// Attribution (client side; the collector may refine a cause to origin).
	StallsByCause  [NumCauses]int
	StalledByCause [NumCauses]Duration
	TTFTCause      Cause
	StallList      []Stall // at most Options.MaxStalls, the longest kept

	Timeline        []Stamp // sampled raw timeline (first N events and stall neighbourhoods)
	TimelineDropped int     // events not in Timeline
}
