package query

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/itlmon/itlmon/collector/dimension"
	"github.com/itlmon/itlmon/wasm/hist"
)

// The table and columns of schema/003_rollup.sql: every read here is from the
// rollups, the per-minute one and the per-hour one of schema/010_rollup_1h.sql
// for the whole hours it answers exactly (rollupSource), never from the raw
// itl_streams rows.
const (
	rollupTable = "itl_rollup_1m"
	colSite     = "site"
	colMinute   = "minute"
)

// dimColumn maps a rollup dimension's key to its column (the registry's
// Rollup dimensions). Only these names ever enter SQL text; values are
// always query arguments.
var dimColumn = func() map[string]string {
	m := map[string]string{}
	for _, d := range dimension.Rollup() {
		m[d.Key] = d.Column
	}
	return m
}()

// MaxGroups bounds a Breakdown (largest groups by streams first).
const MaxGroups = 200

// aggSelect reads one Report's worth of rollup columns.
const aggSelect = `sum(streams), sum(completed), sum(aborted), sum(failed), sum(before_headers), sum(before_headers_us), sum(smooth), sum(with_ttft), sum(tokens), sum(stalls), max(max_gap_us),
	tupleElement(sumMap(itl), 1), tupleElement(sumMap(itl), 2), sum(itl_zero),
	tupleElement(sumMap(itl_tok), 1), tupleElement(sumMap(itl_tok), 2), sum(itl_tok_zero),
	tupleElement(sumMap(ttft), 1), tupleElement(sumMap(ttft), 2), sum(ttft_zero),
	tupleElement(sumMap(tpot), 1), tupleElement(sumMap(tpot), 2), sum(tpot_zero),
	tupleElement(sumMap(tpot_sum), 1), tupleElement(sumMap(tpot_sum), 2)`

// seriesSelect is what a Point takes of aggSelect: the counts, the largest
// gap, and of the histograms only ITL's and TTFT's. A sumMap merges every
// row's buckets one by one and is most of a read's time (a day's time series
// in 5-minute steps reads 1,440 rows per site); scanned by seriesDest into an
// aggRow, whose other columns stay empty.
const seriesSelect = `sum(streams), sum(stalls), max(max_gap_us),
	tupleElement(sumMap(itl), 1), tupleElement(sumMap(itl), 2), sum(itl_zero),
	tupleElement(sumMap(ttft), 1), tupleElement(sumMap(ttft), 2), sum(ttft_zero)`

func (a *aggRow) seriesDest() []any {
	return []any{&a.streams, &a.stalls, &a.maxGap, &a.itlIdx, &a.itlCnt, &a.itlZero, &a.ttftIdx, &a.ttftCnt, &a.ttftZero}
}

// aggRow is one row of aggSelect.
type aggRow struct {
	streams, completed, smooth, withTTFT, tokens, stalls uint64
	aborted, failed, beforeHeaders, beforeHeadersUs      uint64
	maxGap                                               uint32
	itlIdx                                               []int32
	itlCnt                                               []uint64
	itlZero                                              uint64
	tokIdx                                               []int32
	tokCnt                                               []uint64
	tokZero                                              uint64
	ttftIdx                                              []int32
	ttftCnt                                              []uint64
	ttftZero                                             uint64
	tpotIdx                                              []int32
	tpotCnt                                              []uint64
	tpotZero                                             uint64
	tpotSumIdx                                           []int32
	tpotSum                                              []float64
}

func (a *aggRow) dest() []any {
	return []any{&a.streams, &a.completed, &a.aborted, &a.failed, &a.beforeHeaders, &a.beforeHeadersUs, &a.smooth, &a.withTTFT, &a.tokens, &a.stalls, &a.maxGap,
		&a.itlIdx, &a.itlCnt, &a.itlZero, &a.tokIdx, &a.tokCnt, &a.tokZero, &a.ttftIdx, &a.ttftCnt, &a.ttftZero,
		&a.tpotIdx, &a.tpotCnt, &a.tpotZero, &a.tpotSumIdx, &a.tpotSum}
}

func (a *aggRow) report() (Report, error) {
	itl, err := FromRollup(a.itlZero, a.itlIdx, a.itlCnt, float64(a.maxGap))
	if err != nil {
		return Report{}, fmt.Errorf("itl histogram: %w", err)
	}
	tok, err := FromRollup(a.tokZero, a.tokIdx, a.tokCnt, 0)
	if err != nil {
		return Report{}, fmt.Errorf("token itl histogram: %w", err)
	}
	ttft, err := FromRollup(a.ttftZero, a.ttftIdx, a.ttftCnt, 0)
	if err != nil {
		return Report{}, fmt.Errorf("ttft histogram: %w", err)
	}
	tpot, err := SpeedMedian(a.tpotZero, a.tpotIdx, a.tpotCnt, a.tpotSumIdx, a.tpotSum)
	if err != nil {
		return Report{}, fmt.Errorf("tpot histogram: %w", err)
	}
	r := Report{
		Streams:       int64(a.streams),
		Errors:        int64(a.streams - min(a.completed, a.streams)),
		Aborted:       int64(a.aborted),
		Failed:        int64(a.failed),
		BeforeHeaders: int64(a.beforeHeaders),
		Tokens:        int64(a.tokens),
		Stalls:        int64(a.stalls),
		Smooth:        int64(a.smooth),
		ITL:           DistOf(&itl),
		ITLTokens:     DistOf(&tok),
		TTFT:          DistOf(&ttft),
	}
	if a.beforeHeaders > 0 {
		r.BeforeHeadersWaitMs = float64(a.beforeHeadersUs) / float64(a.beforeHeaders) / 1000
	}
	if tpot > 0 {
		r.TPOTP50 = micros(tpot)
		r.TokensPerSecP50 = 1e6 / tpot
	}
	return r, nil
}

// SpeedMedian returns the median over streams of the per-stream TPOT, in
// microseconds, from the rollup's merged tpot columns: the zero bucket's count,
// the buckets' indexes and counts (tpot), and per bucket index the sum of the
// values in it (tpot_sum, matched by index). It returns 0 when there are no
// samples.
//
// The median is numpy's (linear interpolation between the order statistics
// around rank (n-1)/2), each order statistic replaced by the mean of its
// bucket's values, clamped to the bucket's bounds; a bucket without a sum
// falls back to hist.BucketValue, and the zero bucket (TPOT <= 1 µs) is
// represented by hist.ZeroThresholdMicros. Every value of a bucket (L, U]
// is within U/L-1 < hist.RelativeError of its mean, and an interpolation is a
// convex combination, so the result is within hist.RelativeError of the exact
// median (plus hist.ZeroThresholdMicros when a zero-bucket statistic is
// involved). It is exact when each of the two buckets involved holds a single
// distinct value.
//
// Tokens/s per stream is 1e6/TPOT, a decreasing function of it, so the median
// of tokens/s over streams is 1e6/SpeedMedian: exactly so for an odd number of
// streams; for an even number, 1e6 over the mean of the two middle TPOTs,
// which lies between the two middle streams' tokens/s. Its relative error is
// the TPOT median's, |exact/estimate - 1| < hist.RelativeError.
func SpeedMedian(zero uint64, idx []int32, cnt []uint64, sumIdx []int32, sums []float64) (float64, error) {
	if len(idx) != len(cnt) {
		return 0, fmt.Errorf("%d indexes, %d counts", len(idx), len(cnt))
	}
	if len(sumIdx) != len(sums) {
		return 0, fmt.Errorf("%d sum indexes, %d sums", len(sumIdx), len(sums))
	}
	n := zero
	for k, i := range idx {
		if i < hist.MinIndex || i > hist.MaxIndex {
			return 0, fmt.Errorf("index %d outside [%d, %d]", i, hist.MinIndex, hist.MaxIndex)
		}
		if k > 0 && i <= idx[k-1] {
			return 0, fmt.Errorf("indexes not ascending at %d", i)
		}
		n += cnt[k]
	}
	if n == 0 {
		return 0, nil
	}
	sumOf := make(map[int32]float64, len(sumIdx))
	for k, i := range sumIdx {
		sumOf[i] += sums[k]
	}
	// value returns the representative of the order statistic of rank r
	// (0-based, r < n).
	value := func(r uint64) float64 {
		if r < zero {
			return hist.ZeroThresholdMicros
		}
		cum := zero
		for k, i := range idx {
			cum += cnt[k]
			if r >= cum {
				continue
			}
			lo, hi := hist.LowerBound(i), hist.LowerBound(i+1)
			s, ok := sumOf[i]
			if !ok || !(s > 0) {
				return hist.BucketValue(i)
			}
			return min(max(s/float64(cnt[k]), lo), hi)
		}
		panic("BUG: query: rank beyond count")
	}
	pos := 0.5 * float64(n-1)
	k := uint64(pos)
	t := pos - float64(k)
	a := value(k)
	if t == 0 {
		return a, nil
	}
	b := value(k + 1)
	return a + (b-a)*t, nil
}

// FromRollup rebuilds a histogram from merged rollup buckets, which keep
// counts but not sum, min and max. Min and the sum are taken from the
// buckets' representative values (min is 0 when the zero bucket is used);
// max is maxUs when it lies in the highest bucket (the exact largest gap the
// rollup keeps for ITL), else the highest bucket's representative. Quantiles
// stay within hist.RelativeError of the exact ones; the mean is an estimate
// within the same bound.
func FromRollup(zero uint64, idx []int32, cnt []uint64, maxUs float64) (hist.Histogram, error) {
	lo, hi := int32(0), int32(0)
	var sum float64
	n := 0
	for k, i := range idx {
		if cnt[k] == 0 {
			continue
		}
		if n == 0 {
			lo = i
		}
		hi = i
		n++
		sum += hist.BucketValue(i) * float64(cnt[k])
	}
	if len(idx) != len(cnt) {
		return hist.Histogram{}, fmt.Errorf("%d indexes, %d counts", len(idx), len(cnt))
	}
	var mn, mx float64
	if n > 0 {
		mn, mx = hist.BucketValue(lo), hist.BucketValue(hi)
		if maxUs > hist.ZeroThresholdMicros && hist.BucketIndex(maxUs) == hi {
			mx = maxUs
		}
	}
	if zero > 0 {
		mn = 0
		if n == 0 {
			mx = 0
		}
	}
	return hist.FromSparse(zero, idx, cnt, sum, mn, mx)
}

// Summary is the report over every rollup row matching f. The tokens/s and
// TPOT medians over streams come from the rollup's per-stream TPOT histogram
// (SpeedMedian), within hist.RelativeError of the exact ones.
func Summary(ctx context.Context, conn Conn, f Filter) (Report, error) {
	if err := f.Validate(); err != nil {
		return Report{}, err
	}
	src, args, err := rollupSource(ctx, conn, f, 0, "", mergesHistograms)
	if err != nil {
		return Report{}, err
	}
	rows, err := conn.Query(ctx, "SELECT "+aggSelect+" FROM "+src, args...)
	if err != nil {
		return Report{}, fmt.Errorf("query rollup: %w", err)
	}
	defer rows.Close()
	var a aggRow
	if rows.Next() {
		if err := rows.Scan(a.dest()...); err != nil {
			return Report{}, fmt.Errorf("scan rollup: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return Report{}, fmt.Errorf("read rollup: %w", err)
	}
	r, err := a.report()
	if err != nil {
		return Report{}, err
	}
	r.Finish()
	return r, nil
}

// Group is one value of a Breakdown dimension.
type Group struct {
	Key    string `json:"key"`
	Report Report `json:"report"`
}

// Breakdown is Summary per value of dim (a Dimensions key), largest groups
// first, at most MaxGroups.
func Breakdown(ctx context.Context, conn Conn, f Filter, dim string) ([]Group, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	col, ok := dimColumn[dim]
	if !ok {
		return nil, fmt.Errorf("%w: unknown dimension %q: allowed are %s", ErrBadFilter, dim, strings.Join(Dimensions(), ", "))
	}
	src, args, err := rollupSource(ctx, conn, f, 0, dim, mergesHistograms)
	if err != nil {
		return nil, err
	}
	q := "SELECT toString(" + col + ") AS key, " + aggSelect + " FROM " + src +
		" GROUP BY key ORDER BY sum(streams) DESC, key LIMIT " + strconv.Itoa(MaxGroups)
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("query rollup by %s: %w", dim, err)
	}
	defer rows.Close()
	var out []Group
	for rows.Next() {
		var (
			g Group
			a aggRow
		)
		if err := rows.Scan(append([]any{&g.Key}, a.dest()...)...); err != nil {
			return nil, fmt.Errorf("scan rollup by %s: %w", dim, err)
		}
		if g.Report, err = a.report(); err != nil {
			return nil, fmt.Errorf("%s=%s: %w", dim, g.Key, err)
		}
		g.Report.Finish()
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read rollup by %s: %w", dim, err)
	}
	return out, nil
}

// Point is one step of a Timeseries.
type Point struct {
	T          time.Time     `json:"t"`
	Streams    int64         `json:"streams"`
	TTFTP50    time.Duration `json:"-"`
	TTFTP95    time.Duration `json:"-"`
	ITLP50     time.Duration `json:"-"`
	ITLP95     time.Duration `json:"-"`
	ITLP99     time.Duration `json:"-"`
	StallShare float64       `json:"stall_share"`
	Jank       float64       `json:"jank"`
}

// StepFor picks a timeseries step giving at most about 300 points.
func StepFor(window time.Duration) time.Duration {
	for _, s := range []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, 6 * time.Hour} {
		if window/s <= 300 {
			return s
		}
	}
	return 24 * time.Hour
}

// Timeseries is the report per step (a whole number of minutes) over f,
// oldest first; steps without streams are absent.
func Timeseries(ctx context.Context, conn Conn, f Filter, step time.Duration) ([]Point, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if err := validStep(step); err != nil {
		return nil, err
	}
	src, args, err := rollupSource(ctx, conn, f, step, "", mergesHistograms)
	if err != nil {
		return nil, err
	}
	q := "SELECT " + stepExpr(step) + " AS t, " + seriesSelect + " FROM " + src + " GROUP BY t ORDER BY t"
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("query rollup timeseries: %w", err)
	}
	defer rows.Close()
	var out []Point
	for rows.Next() {
		var (
			t time.Time
			a aggRow
		)
		if err := rows.Scan(append([]any{&t}, a.seriesDest()...)...); err != nil {
			return nil, fmt.Errorf("scan rollup timeseries: %w", err)
		}
		r, err := a.report()
		if err != nil {
			return nil, fmt.Errorf("%v: %w", t, err)
		}
		r.Finish()
		out = append(out, Point{T: t.UTC(), Streams: r.Streams, TTFTP50: r.TTFT.P50, TTFTP95: r.TTFT.P95,
			ITLP50: r.ITL.P50, ITLP95: r.ITL.P95, ITLP99: r.ITL.P99, StallShare: r.StallShare, Jank: r.Jank})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read rollup timeseries: %w", err)
	}
	return out, nil
}

// Sites lists the site keys with rollup rows since t, sorted. Like
// rollupSource it reads the hourly rollup for the whole hours it holds
// every stream of, and the minute rollup before them.
func Sites(ctx context.Context, conn Conn, since time.Time) ([]string, error) {
	lo := since.UTC().Truncate(time.Minute)
	q, args := "SELECT DISTINCT toString("+colSite+") AS s FROM "+rollupTable+" WHERE "+colMinute+" >= ? ORDER BY s LIMIT 1000", []any{lo}
	froms, err := completeFroms(ctx, conn, hourlyFromTable)
	if err != nil {
		return nil, err
	}
	if from, ok := froms[hourlyFromTable]; ok {
		hs := later(ceilHour(lo), ceilHour(from))
		q = "SELECT DISTINCT toString(" + colSite + ") AS s FROM (SELECT " + colSite + " FROM " + rollupTable + " WHERE " + colMinute + " >= ? AND " + colMinute + " < ?" +
			" UNION ALL SELECT " + colSite + " FROM " + dimTable + " WHERE dim = '' AND " + colHour + " >= ?) ORDER BY s LIMIT 1000"
		args = []any{lo, hs, hs}
	}
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("query sites: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("scan sites: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
