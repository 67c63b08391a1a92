// Package query is the read side shared by `itlmon gate rum` and the
// dashboard API: it turns stored gap histograms into the numbers a person (or a
// CI gate) judges a stream by.
//
// Definitions (docs/measuring.md states the same), stated once here:
//
//   - TTFT: t0 (just before the request) to the first event that carries output
//     content.
//   - ITL (the headline, "chunk ITL"): one sample per gap between consecutive
//     content events after the first; vLLM's ITL, AIPerf's inter-chunk latency,
//     OpenTelemetry's gen_ai.client.operation.time_per_output_chunk.
//   - Token-normalised ITL: a gap before an event carrying k>1 tokens counts as
//     k samples of gap/k. Reported beside chunk ITL, never mixed with it.
//   - TPOT = (t_last − t_first_content)/(N − 1), TTFT excluded; tokens/s = 1/TPOT,
//     one value per stream; the report gives the median over streams. N counts
//     tokens when they are known (usage or a known tokens-per-event, vLLM's
//     TPOT), else content events. Streams without a time between their first
//     and last content event have no TPOT and do not count.
//   - Stall share: gaps over 200 ms / all ITL gaps.
//   - Jank: p99/p50 of the ITL gaps, the median floored at 1 ms. A report is
//     SMOOTH when jank < 4 and tokens/s p50 > 7, as for a single stream.
//
// Quantiles read from merged histograms are within hist.RelativeError (2.19 %)
// of the exact quantiles of the raw gaps. Real-user reports (Summary,
// Breakdown, Timeseries) read only the rollups (per minute and per hour,
// rollupSource); their TPOT median comes from the per-stream TPOT histogram
// and tokens/s p50 is 1e6 over it
// (tokens/s is a decreasing function of TPOT, so the median maps across; see
// SpeedMedian), both within the same bound.
package query

import (
	"math"
	"time"

	"github.com/itlmon/itlmon/wasm/hist"
)

// Reading-speed constants.
const (
	// ReadingFloorTPS is the human reading floor: below about 5-6 tokens/s a
	// reader waits for the text instead of reading along.
	ReadingFloorTPS = 6.0
	// SmoothMaxJank and SmoothMinTPS decide SMOOTH: jank < 4 and tokens/s > 7.
	SmoothMaxJank = 4.0
	SmoothMinTPS  = 7.0
	// jankFloor is the median floor of the jank ratio.
	jankFloor = time.Millisecond
)

// Dist summarises one latency distribution. Count 0 means "no data"; then
// every other field is zero.
type Dist struct {
	Count uint64
	Mean  time.Duration
	P50   time.Duration
	P95   time.Duration
	P99   time.Duration
	Max   time.Duration
}

// DistOf reads a Dist from a histogram of microsecond values.
func DistOf(h *hist.Histogram) Dist {
	n := h.Count()
	if n == 0 {
		return Dist{}
	}
	return Dist{
		Count: n,
		Mean:  micros(h.Sum() / float64(n)),
		P50:   micros(h.Quantile(0.50)),
		P95:   micros(h.Quantile(0.95)),
		P99:   micros(h.Quantile(0.99)),
		Max:   micros(h.Max()),
	}
}

func micros(us float64) time.Duration {
	if math.IsNaN(us) || us <= 0 {
		return 0
	}
	return time.Duration(math.Round(us * float64(time.Microsecond)))
}

// Report is the aggregate over a set of streams: a probe run, or real-user
// streams matching a Filter.
type Report struct {
	Streams int64 `json:"streams"` // streams measured (with or without content)
	Errors  int64 `json:"errors"`  // streams that failed (HTTP >= 400, network error, abort)
	Aborted int64 `json:"aborted"` // of Errors: aborted by the page or user (status 'aborted')
	Failed  int64 `json:"failed"`  // of Errors: network errors (status 'error')
	// BeforeHeaders: of Aborted and Failed, the requests that ended before
	// the response headers (the user gave up, or the network failed, before
	// the first byte); BeforeHeadersWaitMs is their mean time waited.
	BeforeHeaders       int64   `json:"before_headers"`
	BeforeHeadersWaitMs float64 `json:"before_headers_wait_ms"`
	Tokens              int64   `json:"tokens"`         // output tokens over all streams
	Stalls              int64   `json:"stalls"`         // gaps over 200 ms
	Smooth              int64   `json:"smooth_streams"` // streams that were SMOOTH on their own

	TTFT      Dist `json:"ttft"`       // one sample per stream with content
	ITL       Dist `json:"itl"`        // chunk ITL: one sample per gap between content events
	ITLTokens Dist `json:"itl_tokens"` // token-normalised ITL; Count 0 when tokens per event are unknown

	TokensPerSecP50 float64       `json:"tokens_per_sec_p50"` // median over streams of 1/TPOT; 0 when no stream has a TPOT
	TPOTP50         time.Duration `json:"-"`                  // median over streams of TPOT (per token when tokens are known)

	StallShare float64 `json:"stall_share"` // Stalls / ITL.Count
	// BeforeHeadersShare: BeforeHeaders / Streams.
	BeforeHeadersShare float64 `json:"before_headers_share"`
	Jank               float64 `json:"jank"`         // ITL.P99 / max(ITL.P50, 1 ms)
	SmoothShare        float64 `json:"smooth_share"` // Smooth / streams with content
	Verdict            string  `json:"verdict"`      // "SMOOTH", "JANKY", or "NO DATA"
}

// Finish derives StallShare, Jank, SmoothShare and Verdict from the counts and
// distributions already set.
func (r *Report) Finish() {
	if math.IsNaN(r.TokensPerSecP50) || math.IsInf(r.TokensPerSecP50, 0) {
		r.TokensPerSecP50 = 0 // JSON has no NaN
	}
	// To a thousandth, as the distributions' milliseconds are: the read
	// side (1e6 / a TPOT quantile) and the gate (the median of each
	// stream's tokens/s) reach the same figure by different float
	// arithmetic, and on a cluster the shards' partial states merge in
	// any order; unrounded they differ in the last digits.
	r.TokensPerSecP50 = math.Round(r.TokensPerSecP50*1000) / 1000
	r.StallShare, r.Jank, r.SmoothShare, r.BeforeHeadersShare = 0, 0, 0, 0
	if r.Streams > 0 {
		r.BeforeHeadersShare = float64(r.BeforeHeaders) / float64(r.Streams)
	}
	if r.ITL.Count > 0 {
		r.StallShare = float64(r.Stalls) / float64(r.ITL.Count)
		r.Jank = JankOf(r.ITL.P50, r.ITL.P99)
	}
	if r.TTFT.Count > 0 {
		r.SmoothShare = float64(r.Smooth) / float64(r.TTFT.Count)
	}
	switch {
	case r.ITL.Count == 0 && r.TokensPerSecP50 == 0:
		r.Verdict = "NO DATA"
	case r.Jank < SmoothMaxJank && r.TokensPerSecP50 > SmoothMinTPS:
		r.Verdict = "SMOOTH"
	default:
		r.Verdict = "JANKY"
	}
}

// JankOf is p99/p50 with the median floored at 1 ms.
func JankOf(p50, p99 time.Duration) float64 {
	return float64(p99) / float64(max(p50, jankFloor))
}
