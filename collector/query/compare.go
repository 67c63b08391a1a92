package query

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The comparison's test. Each metric is one value per stream (the unit is the
// stream, never the gap: gaps of one stream are not independent, and a
// stream with many gaps must not outvote many streams with few), compared
// between the two groups with the two-sided Mann-Whitney U test (normal
// approximation with tie correction and continuity correction). A difference
// is flagged beyond noise when p < CompareAlpha / len(CompareMetrics)
// (Bonferroni over the metrics: the chance of flagging any metric of two
// samples of one population stays below CompareAlpha) and both groups have
// at least MinCompareStreams streams with the metric.
const (
	CompareAlpha      = 0.05
	MinCompareStreams = 8
	// MaxCompareStreams bounds the streams read per group: beyond it a
	// deterministic pseudo-random sample, the streams with the smallest
	// cityHash64 of their id.
	MaxCompareStreams = 20000
	// MinSampleStreams: over a range itl_streams_sample covers, a side
	// with at least this many streams there is read from it alone, up to
	// MaxCompareStreams of them: still the side's streams with the smallest
	// hashes, fewer than MaxCompareStreams when the side has fewer than 16
	// times that in the range. Reading such a side from itl_streams to
	// reach MaxCompareStreams read the dimension's column of every stream
	// of the range, and then the metrics of every stream of the side (at
	// 10 M streams over 30 days, 120-150 ms for a side with fewer than
	// 20,000 streams in the sample, against 20-30 ms from the sample).
	// With 5,000 streams a side the test finds a shift of 0.07 standard
	// deviations 80 % of the time at its per-metric threshold (p < 0.01:
	// (2.58 + 0.84) * sqrt(2/5000), over the U test's efficiency, 0.95 of
	// a t-test's for normal values).
	MinSampleStreams = 5000
)

// The sample a comparison reads first (schema/014_streams_sample.sql): every
// stream of itl_streams whose cityHash64(stream_id) is below 2^60, a
// sixteenth, with its hash, dimensions and the compared metrics' columns,
// complete from the hour sampleFromTable holds.
const (
	sampleTable     = "itl_streams_sample"
	sampleFromTable = "itl_streams_sample_from"
)

// CompareMetrics are the per-stream metrics compared, and whether a larger
// value is worse.
var CompareMetrics = []struct {
	Name        string
	Expr        string // per stream, NULL when the stream has no such value
	HigherWorse bool
}{
	{"ttft_ms", "ttft_us / 1000", true},
	{"itl_p50_ms", "if(content_events >= 3, gap_p50_us / 1000, NULL)", true},
	{"itl_p99_ms", "if(content_events >= 3, gap_p99_us / 1000, NULL)", true},
	{"stall_share", "if(content_events >= 2, stalls / (content_events - 1), NULL)", true},
	{"tokens_per_sec", "if(tokens_per_sec > 0, toFloat64(tokens_per_sec), NULL)", false},
}

// Comparison is Compare's answer.
type Comparison struct {
	Dim      string          `json:"dim"`
	A        string          `json:"a"`
	B        string          `json:"b"`
	StreamsA int64           `json:"streams_a"`
	StreamsB int64           `json:"streams_b"`
	Test     string          `json:"test"`
	Alpha    float64         `json:"alpha"`
	Metrics  []MetricCompare `json:"metrics"`
	// Worse names the metrics where B is worse than A beyond noise.
	Worse []string `json:"worse"`
}

// MetricCompare is one metric of a Comparison: the per-stream medians of
// both groups, B minus A, and the test.
type MetricCompare struct {
	Name    string  `json:"name"`
	NA      int     `json:"n_a"`
	NB      int     `json:"n_b"`
	MedianA float64 `json:"median_a"`
	MedianB float64 `json:"median_b"`
	P90A    float64 `json:"p90_a"`
	P90B    float64 `json:"p90_b"`
	Diff    float64 `json:"diff"`     // MedianB - MedianA
	RelDiff float64 `json:"rel_diff"` // Diff / MedianA (0 when MedianA is 0)
	// PSup is the probability that a random stream of B has a larger value
	// than one of A (ties count half): U_B / (n_A n_B); 0.5 is no shift.
	PSup float64 `json:"p_superiority"`
	P    float64 `json:"p"`
	// Significant: p below the per-metric threshold with enough streams.
	Significant bool `json:"significant"`
	// Verdict: "worse", "better", "same" (not beyond noise) or "too few".
	Verdict string `json:"verdict"`
}

// Compare compares the streams matching f with dim = a against those with
// dim = b (dim one of RawDimensions), per stream, from itl_streams. f.Where
// must not constrain dim itself.
//
// Each side is the streams with the smallest hash of their id, at most
// MaxCompareStreams: read from itl_streams_sample when the range is within
// the sample's complete hours and the side has at least MinSampleStreams
// streams there (they are the side's streams with the smallest hashes:
// every stream with a smaller hash than the sample's bound is in it), else
// from itl_streams.
func Compare(ctx context.Context, conn Conn, f Filter, dim, a, b string) (Comparison, error) {
	return compare(ctx, conn, f, dim, a, b, [2]int{MaxCompareStreams, MaxCompareStreams}, MinSampleStreams)
}

// compare is Compare with at most limits[0] streams on side a and
// limits[1] on side b, a side read from the sample when it holds at least
// floor of the side's streams (or the side's limit, if smaller).
func compare(ctx context.Context, conn Conn, f Filter, dim, a, b string, limits [2]int, floor int) (Comparison, error) {
	c := Comparison{Dim: dim, A: a, B: b, Alpha: CompareAlpha,
		Test: "two-sided Mann-Whitney U over streams (one value per stream), Bonferroni over " + strconv.Itoa(len(CompareMetrics)) + " metrics"}
	if err := f.Validate(); err != nil {
		return c, err
	}
	col, err := rawDim(dim)
	if err != nil {
		return c, err
	}
	if _, ok := f.Where[dim]; ok {
		return c, fmt.Errorf("%w: compare by %s and filter on it at once", ErrBadFilter, dim)
	}
	// The sample answers a side when it is complete for the range and
	// holds at least floor of the side's streams; its read tells.
	froms, err := completeFroms(ctx, conn, sampleFromTable, rechunkFromTable)
	if err != nil {
		return c, err
	}
	from, ok := froms[sampleFromTable]
	fromSample := ok && !f.Since.Before(from)
	// The two sides and, for a side the sample answers, the counts of
	// streams are independent reads: run at once, the comparison waits for
	// the slowest rather than for their sum. The counts are read before
	// the sides tell whether they are needed (a range within the sample),
	// so a range too short for the sample to answer reads them for
	// nothing: the rollup's hours and at most two partial hours of a column
	// of itl_streams.
	var (
		sides  [2]compareSide
		na, nb int64 // read when fromSample
		reads  []func(context.Context) error
	)
	for i, v := range []string{a, b} {
		reads = append(reads, func(ctx context.Context) (err error) {
			sides[i], err = readSide(ctx, conn, f, col, v, limits[i], floor, fromSample)
			return err
		})
	}
	if fromSample {
		reads = append(reads, func(ctx context.Context) (err error) {
			na, nb, err = streamCounts(ctx, conn, f, dim, col, a, b, froms)
			return err
		})
	}
	if err := parallel(ctx, reads...); err != nil {
		return c, err
	}
	// A side read from the sample counts its streams in the rollup and
	// itl_streams; one read from itl_streams counted them there.
	counts := [2]int64{sides[0].n, sides[1].n}
	if sides[0].sampled {
		counts[0] = na
	}
	if sides[1].sampled {
		counts[1] = nb
	}
	c.StreamsA, c.StreamsB = counts[0], counts[1]
	perTest := CompareAlpha / float64(len(CompareMetrics))
	c.Worse = []string{}
	for k, m := range CompareMetrics {
		x, y := sides[0].vals[k], sides[1].vals[k]
		mc := MetricCompare{Name: m.Name, NA: len(x), NB: len(y), Verdict: "too few"}
		slices.Sort(x)
		slices.Sort(y)
		mc.MedianA, mc.MedianB = sortedQuantile(x, 0.5), sortedQuantile(y, 0.5)
		mc.P90A, mc.P90B = sortedQuantile(x, 0.9), sortedQuantile(y, 0.9)
		mc.Diff = mc.MedianB - mc.MedianA
		if mc.MedianA != 0 {
			mc.RelDiff = mc.Diff / mc.MedianA
		}
		if len(x) > 0 && len(y) > 0 {
			ub, p := MannWhitney(x, y)
			mc.PSup, mc.P = ub/(float64(len(x))*float64(len(y))), p
		}
		if len(x) >= MinCompareStreams && len(y) >= MinCompareStreams {
			mc.Significant = mc.P < perTest
			mc.Verdict = "same"
			if mc.Significant {
				// The direction of the shift: B's values tend larger.
				if (mc.PSup > 0.5) == m.HigherWorse {
					mc.Verdict = "worse"
					c.Worse = append(c.Worse, m.Name)
				} else {
					mc.Verdict = "better"
				}
			}
		}
		c.Metrics = append(c.Metrics, mc)
	}
	return c, nil
}

// compareSide is one side of a comparison: one slice per CompareMetrics
// value, the streams matching in the table read, and whether that table
// was the sample.
type compareSide struct {
	vals    [][]float64
	n       int64
	sampled bool
}

// readSide reads the side col = value, at most limit streams: from the
// sample when fromSample and it holds at least floor of them (or limit, if
// smaller; its read tells), else from itl_streams.
func readSide(ctx context.Context, conn Conn, f Filter, col, value string, limit, floor int, fromSample bool) (compareSide, error) {
	if fromSample {
		vals, n, err := compareSamples(ctx, conn, f, sampleTable, col, value, limit)
		if err != nil || n >= int64(min(floor, limit)) {
			return compareSide{vals, n, true}, err
		}
	}
	vals, n, err := compareSamples(ctx, conn, f, streamsTable, col, value, limit)
	return compareSide{vals, n, false}, err
}

// compareSamples reads, from table (itl_streams or itl_streams_sample), the
// streams with col = value and the smallest hashes of their id, at most
// limit: one slice per CompareMetrics value (the streams without it left
// out), and how many streams of the table match: from itl_streams all of
// them, from the sample the streams read (the comparison counts a side
// read from the sample in the rollup: streamCounts).
func compareSamples(ctx context.Context, conn Conn, f Filter, table, col, value string, limit int) ([][]float64, int64, error) {
	where, args := f.rawWhere()
	// From the sample the first column is a placeholder, the count taken
	// from the rows read: a count over every matching row (a window) makes
	// the engine read every metric of every one of them before it sorts.
	hash, sel := "cityHash64(stream_id)", []string{"count() OVER ()"}
	if table == sampleTable {
		hash, sel = "hash", []string{"toUInt64(0)"}
	}
	for _, m := range CompareMetrics {
		sel = append(sel, "toNullable(toFloat64("+m.Expr+"))")
	}
	q := "SELECT " + strings.Join(sel, ", ") + " FROM " + table + " WHERE " + where + " AND " + col + " = ?" +
		" ORDER BY " + hash + " LIMIT " + strconv.Itoa(limit)
	rows, err := conn.Query(ctx, q, append(args, value)...)
	if err != nil {
		return nil, 0, fmt.Errorf("query compare %s: %w", value, err)
	}
	defer rows.Close()
	out := make([][]float64, len(CompareMetrics))
	var total, read uint64
	vals := make([]*float64, len(CompareMetrics))
	dst := []any{&total}
	for i := range vals {
		dst = append(dst, &vals[i])
	}
	for rows.Next() {
		if err := rows.Scan(dst...); err != nil {
			return nil, 0, fmt.Errorf("scan compare %s: %w", value, err)
		}
		read++
		for i, v := range vals {
			if v != nil && !math.IsNaN(*v) && !math.IsInf(*v, 0) {
				out[i] = append(out[i], *v)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read compare %s: %w", value, err)
	}
	if table == sampleTable {
		total = read
	}
	return out, int64(total), nil
}

// streamCounts counts the streams matching f with dim (column col) = a and
// with dim = b: the whole hours itl_rechunk_1h holds from its streams
// column (every dimension, one at a time: when f names no other), the rest
// from itl_streams (rechunkSplit). Counting every stream of a long range
// in itl_streams read its column for every stream (at 10 M streams over 30
// days, more than the comparison's reads from the sample).
func streamCounts(ctx context.Context, conn Conn, f Filter, dim, col, a, b string, froms map[string]time.Time) (na, nb int64, err error) {
	hours, raw, err := rechunkSplit(ctx, conn, f, dim, froms)
	if err != nil {
		return 0, 0, err
	}
	// One statement: the rollup's hours and the raw ranges are the two
	// branches of a UNION ALL, which the engine reads side by side.
	var (
		parts []string
		args  []any
	)
	if hours.from.Before(hours.to) {
		parts = append(parts, "SELECT sumIf(streams, value = ?) AS na, sumIf(streams, value = ?) AS nb FROM "+rechunkTable+
			" WHERE site = ? AND dim = ? AND hour >= ? AND hour < ? AND value IN (?, ?)")
		args = append(args, a, b, f.Site, dim, hours.from, hours.to, a, b)
	}
	if len(raw) > 0 {
		cond, cArgs := rangesCond("received_at", raw)
		dims, dArgs := f.dims()
		parts = append(parts, "SELECT countIf("+col+" = ?) AS na, countIf("+col+" = ?) AS nb FROM "+streamsTable+
			" WHERE site = ? AND "+cond+dims+" AND "+col+" IN (?, ?)")
		args = append(append(append(append(args, a, b, f.Site), cArgs...), dArgs...), a, b)
	}
	if len(parts) == 0 {
		return 0, 0, nil
	}
	q := parts[0]
	if len(parts) > 1 {
		q = "SELECT toUInt64(sum(na)), toUInt64(sum(nb)) FROM (" + strings.Join(parts, " UNION ALL ") + ")"
	}
	return countPair(ctx, conn, q, args)
}

// countPair runs q, whose one row is two counts.
func countPair(ctx context.Context, conn Conn, q string, args []any) (int64, int64, error) {
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return 0, 0, fmt.Errorf("count compare: %w", err)
	}
	defer rows.Close()
	var ua, ub uint64
	for rows.Next() {
		if err := rows.Scan(&ua, &ub); err != nil {
			return 0, 0, fmt.Errorf("scan compare counts: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("read compare counts: %w", err)
	}
	return int64(ua), int64(ub), nil
}

// MannWhitney returns U for y (the number of pairs (x_i, y_j) with y_j >
// x_i, ties counting half) and the two-sided p-value of the Mann-Whitney U
// test by the normal approximation with tie and continuity correction. x and
// y must be sorted ascending and non-empty. p is 1 when every value ties.
func MannWhitney(x, y []float64) (uy, p float64) {
	n1, n2 := float64(len(x)), float64(len(y))
	// Rank the pooled sample (midranks for ties), summing y's ranks.
	var ry, tie float64
	i, j := 0, 0
	rank := 1.0
	for i < len(x) || j < len(y) {
		var v float64
		switch {
		case j >= len(y) || (i < len(x) && x[i] <= y[j]):
			v = x[i]
		default:
			v = y[j]
		}
		cx, cy := 0, 0
		for i < len(x) && x[i] == v {
			i++
			cx++
		}
		for j < len(y) && y[j] == v {
			j++
			cy++
		}
		t := float64(cx + cy)
		mid := rank + (t-1)/2
		ry += mid * float64(cy)
		tie += t*t*t - t
		rank += t
	}
	uy = ry - n2*(n2+1)/2
	n := n1 + n2
	mean := n1 * n2 / 2
	v := n1 * n2 / 12 * ((n + 1) - tie/(n*(n-1)))
	if !(v > 0) {
		return uy, 1
	}
	z := (math.Abs(uy-mean) - 0.5) / math.Sqrt(v)
	if z < 0 {
		z = 0
	}
	return uy, math.Erfc(z / math.Sqrt2)
}

// sortedQuantile is the q quantile of sorted s by linear interpolation (0
// when empty).
func sortedQuantile(s []float64, q float64) float64 {
	if len(s) == 0 {
		return 0
	}
	pos := q * float64(len(s)-1)
	k := int(pos)
	if k+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[k] + (s[k+1]-s[k])*(pos-float64(k))
}

// parallel runs reads at once and returns the first error any returned,
// the others' context cancelled then.
func parallel(ctx context.Context, reads ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, read := range reads {
		wg.Go(func() {
			if err := read(ctx); err != nil {
				mu.Lock()
				if first == nil {
					first = err
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}
