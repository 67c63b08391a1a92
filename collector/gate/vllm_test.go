package gate

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector/query"
	"github.com/itlmon/itlmon/wasm/hist"
	"github.com/itlmon/itlmon/wasm/meter"
)

// recorded is one stream with fixed arrival times (ms since t0) of its SSE
// events; events with content "" carry no output (the role chunk).
type recorded struct {
	events []recEvent
	tokens int // usage.completion_tokens, as vLLM counts output tokens
}

type recEvent struct {
	at      float64 // ms
	content string
}

func (r recorded) summary(t *testing.T) meter.Summary {
	t.Helper()
	m := meter.New(meter.Options{ContentType: "text/event-stream", TimerFloor: meter.Microsecond})
	at := func(ms float64) meter.Duration { return meter.Duration(ms * float64(meter.Millisecond)) }
	last := 0.0
	for _, e := range r.events {
		m.Feed([]byte(`data: {"choices":[{"index":0,"delta":{"content":"`+e.content+`"}}]}`+"\n\n"), at(e.at))
		last = e.at
	}
	m.Feed([]byte(`data: {"choices":[],"usage":{"completion_tokens":`+strconv.Itoa(r.tokens)+`}}`+"\n\ndata: [DONE]\n\n"), at(last+1))
	m.End(at(last+2), meter.StatusComplete, 200)
	return m.Summary()
}

// TestVLLMDefinitions: on recorded streams, the gate's TTFT, ITL and TPOT are
// what vLLM's serving benchmark (benchmarks/backend_request_func.py and
// benchmark_serving.py calculate_metrics) computes for the same timestamps:
//
//	ttft    = first chunk with content - st
//	itl     = [t_i - t_{i-1} for each later content chunk]    (per chunk)
//	latency = last content chunk - st
//	tpot    = (latency - ttft) / (output_tokens - 1)          (first token excluded)
//
// with numpy.mean / median / percentile over streams (TTFT, TPOT) and over all
// ITL samples. Percentiles of ITL come from the merged histogram: within
// hist.RelativeError.
func TestVLLMDefinitions(t *testing.T) {
	streams := []recorded{
		// A: role chunk at 100 ms, 5 content chunks, 5 tokens.
		{events: []recEvent{{100, ""}, {250, "a"}, {270, "b"}, {290, "c"}, {330, "d"}, {350, "e"}}, tokens: 5},
		// B: a 490 ms stall, 4 tokens.
		{events: []recEvent{{400, "a"}, {410, "b"}, {900, "c"}, {920, "d"}}, tokens: 4},
		// C: 2 tokens per chunk (usage says 6 over 3 chunks).
		{events: []recEvent{{50, ""}, {120, "ab"}, {160, "cd"}, {200, "ef"}}, tokens: 6},
	}
	// vLLM, written out from the formulas above.
	wantTTFT := []float64{250, 400, 120}
	wantTPOT := []float64{(350 - 250) / (5 - 1.0), (920 - 400) / (4 - 1.0), (200 - 120) / (6 - 1.0)}
	wantITL := []float64{270 - 250, 290 - 270, 330 - 290, 350 - 330, 410 - 400, 900 - 410, 920 - 900, 160 - 120, 200 - 160}

	var agg Aggregator
	for i, s := range streams {
		sum := s.summary(t)
		if got, want := ms(time.Duration(sum.TTFT)), wantTTFT[i]; !near(got, want, 1e-9) {
			t.Errorf("stream %d TTFT = %v ms, want %v", i, got, want)
		}
		if got, want := ms(time.Duration(sum.TPOTToken)), wantTPOT[i]; !near(got, want, 1e-6) {
			t.Errorf("stream %d TPOT = %v ms, want %v", i, got, want)
		}
		agg.Add(&sum)
	}
	rep := agg.Report()

	for _, c := range []struct {
		name      string
		got, want float64
		rel       float64
	}{
		{"mean TTFT", ms(rep.TTFT.Mean), mean(wantTTFT), 1e-6},
		{"median TTFT", ms(rep.TTFT.P50), Percentile(wantTTFT, 50), 1e-6},
		{"p99 TTFT", ms(rep.TTFT.P99), Percentile(wantTTFT, 99), 1e-6},
		{"median TPOT", ms(rep.TPOTP50), Percentile(wantTPOT, 50), 1e-6},
		{"tokens/s p50 = 1/median TPOT", rep.TokensPerSecP50, 1000 / Percentile(wantTPOT, 50), 1e-6},
		{"ITL samples", float64(rep.ITL.Count), float64(len(wantITL)), 0},
		{"mean ITL", ms(rep.ITL.Mean), mean(wantITL), 1e-6},
		{"median ITL", ms(rep.ITL.P50), Percentile(wantITL, 50), hist.RelativeError},
		{"p95 ITL", ms(rep.ITL.P95), Percentile(wantITL, 95), hist.RelativeError},
		{"p99 ITL", ms(rep.ITL.P99), Percentile(wantITL, 99), hist.RelativeError},
		{"max ITL", ms(rep.ITL.Max), 490, 1e-9},
		{"stall share", rep.StallShare, 1.0 / 9, 1e-12},
	} {
		if !near(c.got, c.want, c.rel) {
			t.Errorf("%s = %v, want %v (vLLM), rel. tolerance %v", c.name, c.got, c.want, c.rel)
		}
	}
	// numpy: np.percentile([10,20,20,20,20,40,40,40,490], 99) = 40 + 0.92*450.
	if got, want := Percentile(wantITL, 99), 40+0.92*450; !near(got, want, 1e-12) {
		t.Errorf("Percentile p99 = %v, want numpy's %v", got, want)
	}
	if got, want := rep.Jank, query.JankOf(rep.ITL.P50, rep.ITL.P99); got != want {
		t.Errorf("jank = %v, want %v", got, want)
	}
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func near(got, want, rel float64) bool {
	if want == 0 {
		return math.Abs(got) <= rel
	}
	return math.Abs(got-want) <= rel*math.Abs(want)+1e-9
}

func sampleReport() query.Report {
	r := query.Report{
		Streams: 10, Tokens: 1000, Stalls: 3, Smooth: 6,
		TTFT:            query.Dist{Count: 10, P50: 300 * time.Millisecond, P95: 700 * time.Millisecond},
		ITL:             query.Dist{Count: 990, P50: 20 * time.Millisecond, P95: 60 * time.Millisecond, P99: 400 * time.Millisecond},
		TokensPerSecP50: 40, TPOTP50: 25 * time.Millisecond,
	}
	r.Finish()
	return r
}
