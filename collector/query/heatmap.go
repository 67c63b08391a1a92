package query

import (
	"context"
	"fmt"
	"time"

	"github.com/itlmon/itlmon/wasm/hist"
)

// HeatmapBinShift coarsens the histogram's buckets for the heatmap: 2^shift
// adjacent buckets (scale 5: 32 per doubling) make one row, 4 rows per
// doubling, each ~19 % wide. Coarsening is exact (rows are unions of
// buckets), so counts still add across steps and dimensions.
const HeatmapBinShift = 3

// Heatmap is ITL over time as the merged gap histograms of the rollup: per
// step, how many gaps fell in each row (Bins). Zero counts the gaps in the
// histogram's zero bucket (at most hist.ZeroThresholdMicros: below any
// browser's timer floor, delivered with the previous event).
type Heatmap struct {
	Bins   []HeatBin   `json:"bins"`
	Points []HeatPoint `json:"points"`
}

// HeatBin is one row of a Heatmap: gaps in (LoMs, HiMs].
type HeatBin struct {
	LoMs float64 `json:"lo_ms"`
	HiMs float64 `json:"hi_ms"`
}

// HeatPoint is one step: Counts[i] gaps in Bins[i].
type HeatPoint struct {
	T      time.Time `json:"t"`
	Zero   uint64    `json:"zero"`
	Counts []uint64  `json:"counts"`
}

// ITLHeatmap reads the merged ITL histogram per step (whole minutes) of the
// rollup rows matching f, oldest first; steps without gaps are absent. Bins
// span the lowest to the highest row with a count anywhere in the window.
func ITLHeatmap(ctx context.Context, conn Conn, f Filter, step time.Duration) (Heatmap, error) {
	if err := f.Validate(); err != nil {
		return Heatmap{}, err
	}
	if err := validStep(step); err != nil {
		return Heatmap{}, err
	}
	src, args, err := rollupSource(ctx, conn, f, step, "", mergesHistograms)
	if err != nil {
		return Heatmap{}, err
	}
	q := "SELECT " + stepExpr(step) + " AS t, tupleElement(sumMap(itl), 1), tupleElement(sumMap(itl), 2), toUInt64(sum(itl_zero)) FROM " +
		src + " GROUP BY t ORDER BY t"
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return Heatmap{}, fmt.Errorf("query heatmap: %w", err)
	}
	defer rows.Close()
	type step_ struct {
		t    time.Time
		idx  []int32
		cnt  []uint64
		zero uint64
	}
	var steps []step_
	lo, hi := int32(1<<30), int32(-1<<30)
	for rows.Next() {
		var s step_
		if err := rows.Scan(&s.t, &s.idx, &s.cnt, &s.zero); err != nil {
			return Heatmap{}, fmt.Errorf("scan heatmap: %w", err)
		}
		if len(s.idx) != len(s.cnt) {
			return Heatmap{}, fmt.Errorf("heatmap %v: %d indexes, %d counts", s.t, len(s.idx), len(s.cnt))
		}
		for k, i := range s.idx {
			if s.cnt[k] == 0 {
				continue
			}
			b := binOf(i)
			lo, hi = min(lo, b), max(hi, b)
		}
		steps = append(steps, s)
	}
	if err := rows.Err(); err != nil {
		return Heatmap{}, fmt.Errorf("read heatmap: %w", err)
	}
	var h Heatmap
	if lo > hi { // no gap outside the zero bucket
		lo, hi = 0, -1
	}
	for b := lo; b <= hi; b++ {
		h.Bins = append(h.Bins, HeatBin{LoMs: hist.LowerBound(b<<HeatmapBinShift) / 1000, HiMs: hist.LowerBound((b+1)<<HeatmapBinShift) / 1000})
	}
	if h.Bins == nil {
		h.Bins = []HeatBin{}
	}
	h.Points = make([]HeatPoint, 0, len(steps))
	for _, s := range steps {
		p := HeatPoint{T: s.t.UTC(), Zero: s.zero, Counts: make([]uint64, len(h.Bins))}
		var n uint64
		for k, i := range s.idx {
			if s.cnt[k] > 0 {
				p.Counts[binOf(i)-lo] += s.cnt[k]
				n += s.cnt[k]
			}
		}
		if n+s.zero > 0 {
			h.Points = append(h.Points, p)
		}
	}
	return h, nil
}

// binOf is the heatmap row of bucket index i (floor division).
func binOf(i int32) int32 { return i >> HeatmapBinShift }
