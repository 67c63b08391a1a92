package query

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The rollups the read side chooses from (schema/003_rollup.sql and
// schema/010_rollup_1h.sql): the same aggregate columns and dimensions per
// minute and per hour.
const (
	hourlyTable = "itl_rollup_1h"
	colHour     = "hour"
	// dimTable is per hour and per value of one dimension at a time (dim,
	// value; dim '' counts every stream of the site).
	dimTable = "itl_rollup_1h_dim"
	// hourlyFromTable holds the hour from which the hourly rollups hold
	// every stream (their views see only inserts made after they were
	// created).
	hourlyFromTable = "itl_rollup_1h_from"
)

// rollupColumns are the aggregate columns every rollup has: what a read
// across two of them projects from each (UNION ALL matches columns by position,
// so they are named, never *).
var rollupColumns = []string{
	"streams", "completed", "aborted", "failed", "before_headers", "before_headers_us", "smooth", "with_ttft",
	"content_events", "tokens", "reads", "bytes", "stalls", "stalled_us",
	"stalls_unknown", "stalls_network", "stalls_page", "stalls_origin", "max_gap_us",
	"itl", "itl_zero", "itl_tok", "itl_tok_zero", "ttft", "ttft_zero", "tpot", "tpot_sum", "tpot_zero",
	"stalled_us_unknown", "stalled_us_network", "stalled_us_page", "stalled_us_origin",
	"ttft_unknown", "ttft_network", "ttft_page", "ttft_origin",
	"stalls_origin_edge", "stalls_edge_browser", "stalled_us_origin_edge", "stalled_us_edge_browser",
	"ttft_origin_edge", "ttft_edge_browser",
}

// rollupSource returns what follows FROM in a read of the rollup rows
// matching f, with its arguments: rows carrying site, minute, the
// dimensions of dimColumn and rollupColumns. by is the dimension the read
// groups by ("" for none). Results are the same whichever table it reads;
// it reads the coarsest that answers exactly:
//
//   - for the whole hours of the range, when step is a whole number of
//     hours (0: no time series, a summary or breakdown) and the hourly
//     tables hold every stream of those hours (itl_rollup_1h_from):
//     itl_rollup_1h_dim when the read names at most one dimension (f.Where
//     and by together), its rows of that dimension standing for rows whose
//     other dimensions are empty strings; else itl_rollup_1h;
//   - the minute table for the rest: the partial hours at either end of the
//     range (a since or until not on an hour), hours before the hourly
//     tables were complete, and every step that is not a whole number of
//     hours.
//
// Both are read with the same conditions, so for any range the rows add up
// to exactly those of the minute table (every column is a sum, a max or a
// sumMap, which add across rows). The hourly rows stand at the start of
// their hour in the minute column: a step of whole hours puts each in the
// step its minutes would go to.
func rollupSource(ctx context.Context, conn Conn, f Filter, step time.Duration, by string) (string, []any, error) {
	lo, hi := f.bounds()
	hs, he := ceilHour(lo), hi.Truncate(time.Hour)
	if step%time.Hour != 0 || !hs.Before(he) {
		where, args := f.where()
		return rollupTable + " WHERE " + where, args, nil
	}
	from, ok, err := hourlyComplete(ctx, conn)
	if err != nil {
		return "", nil, err
	}
	if !ok {
		where, args := f.where()
		return rollupTable + " WHERE " + where, args, nil
	}
	hs = later(hs, ceilHour(from))
	if !hs.Before(he) {
		where, args := f.where()
		return rollupTable + " WHERE " + where, args, nil
	}
	dims, dargs := f.dims()
	var dimCols []string
	for _, k := range Dimensions() {
		dimCols = append(dimCols, dimColumn[k])
	}
	cols := "site, " + strings.Join(dimCols, ", ") + ", " + strings.Join(rollupColumns, ", ")
	var args []any
	var b strings.Builder
	b.WriteString("(SELECT " + colMinute + ", " + cols + " FROM " + rollupTable + " WHERE " + colSite + " = ?" + dims +
		" AND (" + colMinute + " >= ? AND " + colMinute + " < ? OR " + colMinute + " >= ? AND " + colMinute + " < ?)")
	args = append(args, f.Site)
	args = append(args, dargs...)
	args = append(args, lo, hs, he, hi)
	named := map[string]bool{}
	for k := range f.Where {
		named[k] = true
	}
	if by != "" {
		named[by] = true
	}
	if len(named) > 1 {
		b.WriteString(" UNION ALL SELECT " + colHour + " AS " + colMinute + ", " + cols + " FROM " + hourlyTable + " WHERE " + colSite + " = ?" + dims +
			" AND " + colHour + " >= ? AND " + colHour + " < ?)")
		args = append(args, f.Site)
		args = append(args, dargs...)
		args = append(args, hs, he)
		return b.String(), args, nil
	}
	// One dimension or none: the rows of dim d, its value standing in its
	// column, '' in the others.
	d := ""
	for k := range named {
		d = k
	}
	b.WriteString(" UNION ALL SELECT " + colHour + " AS " + colMinute + ", site")
	for _, k := range Dimensions() {
		if k == d {
			b.WriteString(", value AS " + dimColumn[k])
		} else {
			b.WriteString(", '' AS " + dimColumn[k])
		}
	}
	b.WriteString(", " + strings.Join(rollupColumns, ", ") + " FROM " + dimTable + " WHERE " + colSite + " = ? AND dim = ?")
	args = append(args, f.Site, d)
	if v, ok := f.Where[d]; ok {
		b.WriteString(" AND value = ?")
		args = append(args, v)
	}
	b.WriteString(" AND " + colHour + " >= ? AND " + colHour + " < ?)")
	args = append(args, hs, he)
	return b.String(), args, nil
}

// hourlyComplete reads from which time on the hourly rollups hold every stream
// (schema/010_rollup_1h.sql); ok is false when the database does not say
// (read the minute table only then). Through a Distributed table each shard
// has said its own: the latest counts.
func hourlyComplete(ctx context.Context, conn Conn) (time.Time, bool, error) {
	rows, err := conn.Query(ctx, "SELECT count(), max(complete_from) FROM "+hourlyFromTable)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("query %s: %w", hourlyFromTable, err)
	}
	defer rows.Close()
	var (
		n    uint64
		from time.Time
	)
	if rows.Next() {
		if err := rows.Scan(&n, &from); err != nil {
			return time.Time{}, false, fmt.Errorf("scan %s: %w", hourlyFromTable, err)
		}
	}
	if err := rows.Err(); err != nil {
		return time.Time{}, false, fmt.Errorf("read %s: %w", hourlyFromTable, err)
	}
	return from.UTC(), n > 0, nil
}

// ceilHour is the first whole hour at or after t.
func ceilHour(t time.Time) time.Time {
	h := t.Truncate(time.Hour)
	if h.Before(t) {
		h = h.Add(time.Hour)
	}
	return h
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
