package query_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/gate"
	"github.com/itlmon/itlmon/collector/query"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/wasm/hist"
	"github.com/itlmon/itlmon/wasm/meter"
)

// speedBuckets is what the rollup's tpot columns hold for values (microseconds
// above the zero bucket): the counts and sums per bucket index, ascending.
func speedBuckets(values []float64) (idx []int32, cnt []uint64, sums []float64) {
	cnts, sumOf := map[int32]uint64{}, map[int32]float64{}
	for _, v := range values {
		i := hist.BucketIndex(v)
		cnts[i]++
		sumOf[i] += v
	}
	for i := range cnts {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		cnt, sums = append(cnt, cnts[i]), append(sums, sumOf[i])
	}
	return idx, cnt, sums
}

func TestSpeedMedian(t *testing.T) {
	median := func(t *testing.T, zero uint64, values []float64) float64 {
		t.Helper()
		idx, cnt, sums := speedBuckets(values)
		got, err := query.SpeedMedian(zero, idx, cnt, idx, sums)
		if err != nil {
			t.Fatalf("SpeedMedian: %v", err)
		}
		return got
	}
	t.Run("empty", func(t *testing.T) {
		if got := median(t, 0, nil); got != 0 {
			t.Errorf("median of nothing = %v, want 0", got)
		}
	})
	t.Run("one distinct value per bucket is exact", func(t *testing.T) {
		if got := median(t, 0, []float64{25_123.5, 25_123.5, 25_123.5, 80_000}); got != 25_123.5 {
			t.Errorf("odd rank: median = %v, want 25123.5", got)
		}
		if got := median(t, 0, []float64{1000, 1000, 2000, 2000}); got != 1500 {
			t.Errorf("even count: median = %v, want 1500 (numpy interpolates)", got)
		}
	})
	t.Run("zero bucket", func(t *testing.T) {
		if got := median(t, 3, []float64{50_000}); got != hist.ZeroThresholdMicros {
			t.Errorf("median in the zero bucket = %v, want %v", got, hist.ZeroThresholdMicros)
		}
	})
	t.Run("no sums falls back to the bucket representative", func(t *testing.T) {
		idx, cnt, _ := speedBuckets([]float64{40_000})
		got, err := query.SpeedMedian(0, idx, cnt, nil, nil)
		if err != nil || got != hist.BucketValue(idx[0]) {
			t.Errorf("median = %v, %v; want %v", got, err, hist.BucketValue(idx[0]))
		}
	})
	t.Run("bad input", func(t *testing.T) {
		for name, err := range map[string]error{
			"lengths":   second(query.SpeedMedian(0, []int32{1, 2}, []uint64{1}, nil, nil)),
			"sums":      second(query.SpeedMedian(0, []int32{1}, []uint64{1}, []int32{1}, nil)),
			"ascending": second(query.SpeedMedian(0, []int32{2, 1}, []uint64{1, 1}, nil, nil)),
			"range":     second(query.SpeedMedian(0, []int32{hist.MaxIndex + 1}, []uint64{1}, nil, nil)),
		} {
			if err == nil {
				t.Errorf("%s: no error", name)
			}
		}
	})
	t.Run("within the histogram bound", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for n := 1; n <= 400; n += 7 {
			values := make([]float64, n)
			for i := range values {
				values[i] = 2_000 * math.Exp(rng.Float64()*5) // 2 ms .. 300 ms TPOT
			}
			want := gate.Percentile(values, 50)
			got := median(t, 0, values)
			if math.Abs(got-want) > hist.RelativeError*want {
				t.Errorf("n=%d: median = %v, exact %v (more than %.2f %% off)", n, got, want, hist.RelativeError*100)
			}
			// Tokens/s is 1e6/TPOT: its median is 1e6 over the TPOT median,
			// for an odd count exactly the median of the streams' tokens/s.
			if n%2 == 1 {
				tps := make([]float64, n)
				for i, v := range values {
					tps[i] = 1e6 / v
				}
				if w := gate.Percentile(tps, 50); math.Abs(1e6/got-w) > hist.RelativeError*w {
					t.Errorf("n=%d: tokens/s median = %v, exact %v", n, 1e6/got, w)
				}
			}
		}
	})
}

func second[T any](_ T, err error) error { return err }

// speedStream measures one synthetic stream with wasm/meter: content events at
// ttft and after each gap, tokensPerEvent tokens each reported in a usage
// chunk at the end (0: no usage, tokens unknown); oneRead delivers the whole
// body in one network read at the end (a buffering proxy).
func speedStream(ttft time.Duration, gaps []time.Duration, tokensPerEvent int, oneRead bool) meter.Summary {
	m := meter.New(meter.Options{ContentType: "text/event-stream"})
	ev := `data: {"choices":[{"index":0,"delta":{"content":"tok "}}]}` + "\n\n"
	var body strings.Builder
	at := ttft
	feed := func(s string, at time.Duration) {
		if oneRead {
			body.WriteString(s)
			return
		}
		m.Feed([]byte(s), meter.Duration(at))
	}
	feed(ev, at)
	for _, g := range gaps {
		at += g
		feed(ev, at)
	}
	tail := "data: [DONE]\n\n"
	if tokensPerEvent > 0 {
		tail = fmt.Sprintf(`data: {"choices":[],"usage":{"completion_tokens":%d}}`+"\n\n", tokensPerEvent*(len(gaps)+1)) + tail
	}
	feed(tail, at+time.Millisecond)
	if oneRead {
		m.Feed([]byte(body.String()), meter.Duration(at+time.Millisecond))
	}
	m.End(meter.Duration(at+2*time.Millisecond), meter.StatusComplete, 200)
	return m.Summary()
}

// TestRollupSpeedMedian checks the TPOT and tokens/s medians of Summary and
// Breakdown, read from the rollup's per-stream TPOT histogram, against the
// exact medians over the raw streams' values: within hist.RelativeError.
func TestRollupSpeedMedian(t *testing.T) {
	db, _ := newDB(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Now().UTC()
	var (
		streams []collector.Stream
		tpot    = map[string][]float64{} // by browser, microseconds, the exact per-stream TPOTs
		tps     = map[string][]float64{}
	)
	add := func(browser string, at time.Time, s meter.Summary) {
		r := recordOf(s)
		streams = append(streams, collector.Stream{Record: r, Site: "speed", ReceivedAt: at,
			Country: "DE", Region: "DE-BE", Browser: browser, OS: "Linux", Device: "desktop", Release: "r1"})
		if s.TokensPerSec <= 0 {
			return // no TPOT: one content event, or no time between them
		}
		v := s.TPOTToken // per token when tokens are known (vLLM's TPOT) ...
		if v <= 0 {
			v = s.TPOT // ... else per content event
		}
		for _, k := range []string{"", browser} {
			tpot[k] = append(tpot[k], float64(v)/float64(time.Microsecond))
			tps[k] = append(tps[k], s.TokensPerSec)
		}
	}
	gaps := func(n int, every time.Duration) []time.Duration {
		g := make([]time.Duration, n)
		for i := range g {
			g[i] = every + time.Duration(rng.IntN(int(every/2)))
		}
		return g
	}
	// 45 Chrome streams with known tokens (1 to 4 per event), 26 Firefox
	// streams without usage (chunk TPOT), over two minutes, cadences spread
	// over many buckets: 71 streams with a TPOT, an odd count.
	for i := range 45 {
		every := time.Duration(8+rng.IntN(60)) * time.Millisecond
		add("Chrome", now.Add(-time.Duration(1+i%2)*time.Minute), speedStream(300*time.Millisecond, gaps(20+rng.IntN(40), every), 1+i%4, false))
	}
	for i := range 26 {
		every := time.Duration(15+rng.IntN(120)) * time.Millisecond
		add("Firefox", now.Add(-time.Duration(1+i%2)*time.Minute), speedStream(500*time.Millisecond, gaps(10+rng.IntN(30), every), 0, false))
	}
	// Streams without a TPOT do not count: a single content event, and a
	// whole answer delivered in one read (every content event at one time).
	add("Chrome", now.Add(-time.Minute), speedStream(200*time.Millisecond, nil, 1, false))
	add("Chrome", now.Add(-time.Minute), speedStream(900*time.Millisecond, gaps(30, 20*time.Millisecond), 1, true))
	add("Firefox", now.Add(-time.Minute), speedStream(900*time.Millisecond, gaps(30, 20*time.Millisecond), 0, true))
	for i := len(streams) - 3; i < len(streams); i++ {
		streams[i].Release = "no-tpot"
	}
	if got := len(tpot[""]); got != 71 {
		t.Fatalf("%d streams with a TPOT, want 71", got)
	}
	if err := store.InsertDirect(ctx, db.Conn(), streams); err != nil {
		t.Fatalf("insert: %v", err)
	}

	var samples uint64
	if err := db.Conn().QueryRow(ctx, "SELECT arraySum(sumMap(tpot).2) + sum(tpot_zero) FROM itl_rollup_1m WHERE site = 'speed'").Scan(&samples); err != nil {
		t.Fatalf("count tpot samples: %v", err)
	}
	if samples != 71 {
		t.Errorf("rollup has %d TPOT samples, want 71 (one per stream with a TPOT)", samples)
	}

	rel := hist.RelativeError
	check := func(name string, r query.Report, key string) {
		t.Helper()
		within(t, name+" TPOT p50 (µs)", float64(r.TPOTP50)/float64(time.Microsecond), gate.Percentile(tpot[key], 50), rel)
		// Tokens/s p50 is 1e6 over the TPOT median (not rounded to a
		// microsecond; the report rounds the result to a thousandth),
		// which for an odd count is the median of the streams' tokens/s;
		// for an even one it lies between the two middle streams' values.
		want := 1e6 / gate.Percentile(tpot[key], 50)
		if len(tps[key])%2 == 1 {
			want = gate.Percentile(tps[key], 50)
		}
		within(t, name+" tokens/s p50", r.TokensPerSecP50, want, rel)
	}
	f := query.Filter{Site: "speed", Since: now.Add(-time.Hour)}
	rep, err := query.Summary(ctx, db.Conn(), f)
	if err != nil {
		t.Fatalf("summary: %v", err)
	}
	if rep.Streams != 74 {
		t.Errorf("streams = %d, want 74", rep.Streams)
	}
	check("summary", rep, "")
	groups, err := query.Breakdown(ctx, db.Conn(), f, "browser")
	if err != nil {
		t.Fatalf("breakdown: %v", err)
	}
	if len(groups) != 2 {
		t.Fatalf("breakdown: %d groups, want 2", len(groups))
	}
	for _, g := range groups {
		check(g.Key, g.Report, g.Key)
	}
	// Streams without a TPOT have no speed.
	none, err := query.Summary(ctx, db.Conn(), query.Filter{Site: "speed", Since: f.Since, Where: map[string]string{"release": "no-tpot"}})
	if err != nil || none.Streams != 3 || none.TokensPerSecP50 != 0 || none.TPOTP50 != 0 {
		t.Errorf("streams without a TPOT: %d streams, tokens/s %v, TPOT %v, %v; want 3, 0, 0, nil",
			none.Streams, none.TokensPerSecP50, none.TPOTP50, err)
	}
}
