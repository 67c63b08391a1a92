package gate

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/itlmon/itlmon/collector/query"
	"github.com/itlmon/itlmon/wasm/hist"
	"github.com/itlmon/itlmon/wasm/meter"
)

// Aggregator folds per-stream meter summaries into one query.Report, with the
// same definitions the browser module and the rollup use: ITL histograms are
// merged (quantiles within hist.RelativeError), TTFT and tokens/s quantiles are
// exact over the per-stream values (numpy's default linear interpolation, as
// vLLM's serving benchmark reports them).
//
// The zero value is ready to use. An Aggregator is not safe for concurrent use.
type Aggregator struct {
	itl, itlTokens hist.Histogram
	ttft           []float64 // microseconds, streams with content
	tps            []float64 // streams with >= 2 tokens
	tpot           []float64 // microseconds
	streams        int64
	errors         int64
	beforeHeaders  int64
	tokens         int64
	stalls         int64
	smooth         int64
	failures       map[string]int
}

// Add counts one finished stream.
func (a *Aggregator) Add(s *meter.Summary) {
	a.streams++
	if reason := failure(s); reason != "" {
		a.Fail(reason)
		return
	}
	a.tokens += int64(s.Tokens)
	a.stalls += int64(s.Stalls)
	if s.Smooth {
		a.smooth++
	}
	a.itl.Merge(&s.ITL)
	a.itlTokens.Merge(&s.ITLTokens)
	if s.TTFT >= 0 {
		a.ttft = append(a.ttft, us(time.Duration(s.TTFT)))
	}
	if s.TokensPerSec > 0 {
		a.tps = append(a.tps, s.TokensPerSec)
		tpot := s.TPOTToken // vLLM's TPOT, over tokens, when they are known
		if tpot <= 0 {
			tpot = s.TPOT
		}
		a.tpot = append(a.tpot, us(time.Duration(tpot)))
	}
}

// Fail counts a stream that produced no measurable answer, by reason.
func (a *Aggregator) Fail(reason string) {
	if a.failures == nil {
		a.failures = make(map[string]int)
	}
	a.failures[reason]++
	a.errors++
}

// FailBeforeHeaders counts a stream whose request ended before any response
// headers (a connection failure or a timeout), by reason.
func (a *Aggregator) FailBeforeHeaders(reason string) {
	a.beforeHeaders++
	a.Fail(reason)
}

// Failures returns the failed streams by reason.
func (a *Aggregator) Failures() map[string]int { return a.failures }

// failure says why a stream does not count as a measured answer, "" if it does.
func failure(s *meter.Summary) string {
	switch {
	case s.HTTPStatus >= 400 || s.Status == meter.StatusHTTPError:
		return "HTTP " + strconv.Itoa(s.HTTPStatus)
	case s.Status == meter.StatusNetworkError:
		return "body read error"
	case s.Status == meter.StatusAborted:
		return "aborted (timeout)"
	case s.ContentEvents == 0:
		return "no content events in the response (is it streaming?)"
	}
	return ""
}

// Report returns the aggregate so far.
func (a *Aggregator) Report() query.Report {
	r := query.Report{
		Streams:       a.streams,
		Errors:        a.errors,
		BeforeHeaders: a.beforeHeaders,
		Tokens:        a.tokens,
		Stalls:        a.stalls,
		Smooth:        a.smooth,
		ITL:           query.DistOf(&a.itl),
		ITLTokens:     query.DistOf(&a.itlTokens),
		TTFT:          exactDist(a.ttft),
	}
	if len(a.tps) > 0 {
		r.TokensPerSecP50 = Percentile(a.tps, 50)
		r.TPOTP50 = durUs(Percentile(a.tpot, 50))
	}
	r.Finish()
	return r
}

func exactDist(v []float64) query.Dist {
	if len(v) == 0 {
		return query.Dist{}
	}
	var sum float64
	for _, x := range v {
		sum += x
	}
	return query.Dist{
		Count: uint64(len(v)),
		Mean:  durUs(sum / float64(len(v))),
		P50:   durUs(Percentile(v, 50)),
		P95:   durUs(Percentile(v, 95)),
		P99:   durUs(Percentile(v, 99)),
		Max:   durUs(slices.Max(v)),
	}
}

// Percentile is numpy.percentile's default (linear interpolation between
// closest ranks), p in [0,100]. v is not modified. 0 for no values.
func Percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	rank := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	return s[lo] + (s[hi]-s[lo])*(rank-float64(lo))
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func durUs(x float64) time.Duration { return time.Duration(math.Round(x * float64(time.Microsecond))) }
