package query

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Causes are the stall causes as stored (meter.CauseNames without "none"),
// in the order the dashboard draws them.
var Causes = []string{"origin", "network", "page", "unknown"}

// causeSelect reads one CauseCounts' worth of rollup columns: stalls and
// stalled microseconds per cause and the TTFT cause counts (schema 003 and
// 005), in Causes order, then the streams.
var causeSelect = func() string {
	var b strings.Builder
	for _, prefix := range []string{"stalls_", "stalled_us_", "ttft_"} {
		for _, c := range Causes {
			b.WriteString("toUInt64(sum(" + prefix + c + ")), ")
		}
	}
	b.WriteString("toUInt64(sum(streams)), toUInt64(sum(stalls))")
	for _, h := range Hops {
		b.WriteString(", toUInt64(sum(stalls_" + h + ")), toUInt64(sum(stalled_us_" + h + ")), toUInt64(sum(ttft_" + h + "))")
	}
	return b.String()
}()

// Hops are the hops a network delay is put on when the edge Worker reported
// the stream (collector.HopOriginEdge, HopEdgeBrowser; schema/009_edge.sql).
var Hops = []string{"origin_edge", "edge_browser"}

// HopCounts are the network stalls, their stalled time and the network
// waits for the first token put on one hop.
type HopCounts struct {
	Stalls    int64   `json:"stalls"`
	StalledMs float64 `json:"stalled_ms"`
	TTFT      int64   `json:"ttft"`
}

// CauseCounts are stalls, stalled time and the TTFT cause mix per cause name
// (Causes) over a set of rollup rows. A stall's cause is the one stored with
// the stream (refined with the origin's evidence when the join was made
// within the joiner's hold).
type CauseCounts struct {
	Streams   int64              `json:"streams"`
	Stalls    int64              `json:"stalls"`
	ByCause   map[string]int64   `json:"stalls_by_cause"`
	StalledMs map[string]float64 `json:"stalled_ms_by_cause"`
	// TTFT is how many streams' wait for the first token had each cause
	// (streams without a cause, "none", are not counted).
	TTFT map[string]int64 `json:"ttft_cause"`
	// NetworkByHop splits the network stalls and waits by hop (Hops), for
	// the streams an edge Worker reported; the others' have no hop.
	NetworkByHop map[string]HopCounts `json:"network_by_hop"`
}

type causeRow struct {
	v               []uint64 // 3 × len(Causes)
	streams, stalls uint64
	hop             []uint64 // 3 × len(Hops)
	dst             []any
}

func newCauseRow() *causeRow {
	r := &causeRow{v: make([]uint64, 3*len(Causes))}
	for i := range r.v {
		r.dst = append(r.dst, &r.v[i])
	}
	r.dst = append(r.dst, &r.streams, &r.stalls)
	r.hop = make([]uint64, 3*len(Hops))
	for i := range r.hop {
		r.dst = append(r.dst, &r.hop[i])
	}
	return r
}

func (r *causeRow) counts() CauseCounts {
	n := len(Causes)
	c := CauseCounts{Streams: int64(r.streams), Stalls: int64(r.stalls),
		ByCause: make(map[string]int64, n), StalledMs: make(map[string]float64, n), TTFT: make(map[string]int64, n)}
	for i, name := range Causes {
		c.ByCause[name] = int64(r.v[i])
		c.StalledMs[name] = float64(r.v[n+i]) / 1000
		c.TTFT[name] = int64(r.v[2*n+i])
	}
	c.NetworkByHop = make(map[string]HopCounts, len(Hops))
	for i, h := range Hops {
		c.NetworkByHop[h] = HopCounts{Stalls: int64(r.hop[3*i]), StalledMs: float64(r.hop[3*i+1]) / 1000, TTFT: int64(r.hop[3*i+2])}
	}
	return c
}

// CausePoint is one step of CauseTimeseries.
type CausePoint struct {
	T time.Time `json:"t"`
	CauseCounts
}

// CauseTimeseries is CauseCounts per step (whole minutes) over f, oldest
// first; steps without streams are absent. It reads the rollup only.
func CauseTimeseries(ctx context.Context, conn Conn, f Filter, step time.Duration) ([]CausePoint, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if err := validStep(step); err != nil {
		return nil, err
	}
	src, args, err := rollupSource(ctx, conn, f, step, "", sumsOnly)
	if err != nil {
		return nil, err
	}
	q := "SELECT " + stepExpr(step) + " AS t, " + causeSelect + " FROM " + src + " GROUP BY t ORDER BY t"
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("query cause timeseries: %w", err)
	}
	defer rows.Close()
	var out []CausePoint
	for rows.Next() {
		var t time.Time
		r := newCauseRow()
		if err := rows.Scan(append([]any{&t}, r.dst...)...); err != nil {
			return nil, fmt.Errorf("scan cause timeseries: %w", err)
		}
		out = append(out, CausePoint{T: t.UTC(), CauseCounts: r.counts()})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read cause timeseries: %w", err)
	}
	return out, nil
}

// CauseGroup is CauseCounts of one value of a dimension.
type CauseGroup struct {
	Key string `json:"key"`
	CauseCounts
}

// CauseBreakdown is CauseCounts per value of dim (a Dimensions key), most
// stalls first, at most MaxGroups. It reads the rollup only.
func CauseBreakdown(ctx context.Context, conn Conn, f Filter, dim string) ([]CauseGroup, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	col, ok := dimColumn[dim]
	if !ok {
		return nil, fmt.Errorf("%w: unknown dimension %q: allowed are %s", ErrBadFilter, dim, strings.Join(Dimensions(), ", "))
	}
	src, args, err := rollupSource(ctx, conn, f, 0, dim, sumsOnly)
	if err != nil {
		return nil, err
	}
	q := "SELECT toString(" + col + ") AS key, " + causeSelect + " FROM " + src +
		" GROUP BY key ORDER BY sum(stalls) DESC, sum(streams) DESC, key LIMIT " + strconv.Itoa(MaxGroups)
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("query causes by %s: %w", dim, err)
	}
	defer rows.Close()
	var out []CauseGroup
	for rows.Next() {
		var key string
		r := newCauseRow()
		if err := rows.Scan(append([]any{&key}, r.dst...)...); err != nil {
			return nil, fmt.Errorf("scan causes by %s: %w", dim, err)
		}
		out = append(out, CauseGroup{Key: key, CauseCounts: r.counts()})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read causes by %s: %w", dim, err)
	}
	return out, nil
}

// validStep accepts whole minutes up to 31 days.
func validStep(step time.Duration) error {
	if step < time.Minute || step%time.Minute != 0 || step > 31*24*time.Hour {
		return fmt.Errorf("%w: step %v: want whole minutes, at most 31 days", ErrBadFilter, step)
	}
	return nil
}

// stepExpr buckets the rollup's minute by step (an integer we format, never
// user text).
func stepExpr(step time.Duration) string {
	return "toStartOfInterval(" + colMinute + ", INTERVAL " + strconv.Itoa(int(step/time.Minute)) + " MINUTE)"
}
