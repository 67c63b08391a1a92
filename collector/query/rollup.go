package query

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The rollups the read side chooses from (schema/003_rollup.sql,
// schema/010_rollup_1h.sql, schema/012_rollup_1m_site.sql and
// schema/013_rollup_1d_dim.sql): the same aggregate columns per minute, per
// hour and per day, by every dimension, by one at a time, or by none.
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
	// siteTable is per minute and site, no other dimension
	// (schema/012_rollup_1m_site.sql), complete from the minute
	// siteFromTable holds.
	siteTable     = "itl_rollup_1m_site"
	siteFromTable = "itl_rollup_1m_site_from"
	// dayTable is per UTC day and per value of one dimension at a time
	// (schema/013_rollup_1d_dim.sql), as dimTable is per hour, complete
	// from the day dayFromTable holds.
	dayTable     = "itl_rollup_1d_dim"
	colDay       = "day"
	dayFromTable = "itl_rollup_1d_from"
)

const day = 24 * time.Hour

// reads says what a read of the rollups aggregates, for rollupSource.
type reads int

const (
	// sumsOnly: the read adds counters only (the causes' reads). Whole days
	// do not pay for it: on the dashboard report's 10 M streams, a cause
	// breakdown over 30 days took 37 ms with the daily table and 28 ms from
	// the hourly rows alone, whose sums cost less than one more branch of
	// the read.
	sumsOnly reads = iota
	// mergesHistograms: the read merges histograms (sumMap), whose cost
	// grows with the rows read: whole days come from the daily table (a
	// breakdown over 30 days 101 ms against 284 from the hourly rows).
	mergesHistograms
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
//   - for the whole UTC days of the range, when the read merges histograms
//     (merge), step is a whole number of days (0 included), the read names
//     at most one dimension, itl_rollup_1d_dim holds every stream of those
//     days (itl_rollup_1d_from) and the hourly tables every stream of their
//     hours: itl_rollup_1d_dim;
//   - for the other whole hours of the range, when step is a whole number of
//     hours (0: no time series, a summary or breakdown) and the hourly
//     tables hold every stream of those hours (itl_rollup_1h_from):
//     itl_rollup_1h_dim when the read names at most one dimension (f.Where
//     and by together), its rows of that dimension standing for rows whose
//     other dimensions are empty strings; else itl_rollup_1h;
//   - for the other minutes (the partial hours at either end of the range,
//     hours before the hourly tables were complete, every step that is not
//     a whole number of hours): itl_rollup_1m_site when the read names no
//     dimension and that table holds every stream of the minute
//     (itl_rollup_1m_site_from), else the minute table.
//
// All are read with the same conditions, so for any range the rows add up
// to exactly those of the minute table (every column is a sum, a max or a
// sumMap, which add across rows). The hourly and daily rows stand at the
// start of their hour or day in the minute column: a step of whole hours
// (days) puts each in the step its minutes would go to.
func rollupSource(ctx context.Context, conn Conn, f Filter, step time.Duration, by string, merge reads) (string, []any, error) {
	lo, hi := f.bounds()
	named := map[string]bool{}
	for k := range f.Where {
		named[k] = true
	}
	if by != "" {
		named[by] = true
	}
	oneDim, d := len(named) <= 1, ""
	for k := range named {
		d = k
	}

	// From when the hourly tables and the per-site minute table hold every
	// stream, asked in one query of those the read may use.
	a, b := ceilHour(lo), hi.Truncate(time.Hour)
	var ask []string
	if step%time.Hour == 0 && a.Before(b) {
		ask = append(ask, hourlyFromTable)
	}
	if merge == mergesHistograms && oneDim && step%day == 0 && ceilDay(lo).Before(hi.Truncate(day)) {
		ask = append(ask, dayFromTable)
	}
	if len(named) == 0 {
		ask = append(ask, siteFromTable)
	}
	froms, err := completeFroms(ctx, conn, ask...)
	if err != nil {
		return "", nil, err
	}
	// The whole hours read from the hourly tables: [hs, he), empty if none.
	hs, he := lo, lo
	if from, ok := froms[hourlyFromTable]; ok {
		if a = later(a, ceilHour(from)); a.Before(b) {
			hs, he = a, b
		}
	}
	// The whole days among those hours read from the daily table: [ds,
	// de), empty if none; the hours of [hs, he) outside it from the hourly
	// tables.
	ds, de := hs, hs
	if from, ok := froms[dayFromTable]; ok && hs.Before(he) {
		if s, e := later(ceilDay(hs), ceilDay(from)), he.Truncate(day); s.Before(e) {
			ds, de = s, e
		}
	}
	hours := timeRange{hs, he}.orNone()
	if ds.Before(de) {
		hours = append(timeRange{hs, ds}.orNone(), timeRange{de, he}.orNone()...)
	}
	// The other minutes, from the per-site minute table where it is
	// complete and the read names no dimension, else from the minute table.
	var plain, perSite []timeRange
	siteFrom, siteOK := froms[siteFromTable]
	for _, r := range []timeRange{{lo, minTime(hs, hi)}, {later(he, lo), hi}} {
		if !r.from.Before(r.to) {
			continue
		}
		if !siteOK {
			plain = append(plain, r)
			continue
		}
		plain = append(plain, timeRange{r.from, minTime(r.to, siteFrom)}.orNone()...)
		perSite = append(perSite, timeRange{later(r.from, siteFrom), r.to}.orNone()...)
	}
	if len(perSite) == 0 && !hs.Before(he) {
		where, args := f.where()
		return rollupTable + " WHERE " + where, args, nil
	}

	dims, dargs := f.dims()
	var dimCols []string
	for _, k := range Dimensions() {
		dimCols = append(dimCols, dimColumn[k])
	}
	cols := "site, " + strings.Join(dimCols, ", ") + ", " + strings.Join(rollupColumns, ", ")
	var selects []string
	var args []any
	// rows of table (the minute or the hourly one) over ranges of timeCol.
	rows := func(table, timeCol string, ranges []timeRange) {
		cond, cargs := rangesCond(timeCol, ranges)
		selects = append(selects, "SELECT "+timeCol+" AS "+colMinute+", "+cols+" FROM "+table+" WHERE "+colSite+" = ?"+dims+" AND "+cond)
		args = append(args, f.Site)
		args = append(args, dargs...)
		args = append(args, cargs...)
	}
	// rows of dimension d of a per-dimension table (value standing in its
	// column, '' in the others; d "": the table's rows of the whole site,
	// those of dim '' when the table has a dim column) over ranges of
	// timeCol.
	dimRows := func(table string, hasDim bool, timeCol string, ranges []timeRange) {
		var b strings.Builder
		b.WriteString("SELECT " + timeCol + " AS " + colMinute + ", site")
		for _, k := range Dimensions() {
			if k == d {
				b.WriteString(", value AS " + dimColumn[k])
			} else {
				b.WriteString(", '' AS " + dimColumn[k])
			}
		}
		b.WriteString(", " + strings.Join(rollupColumns, ", ") + " FROM " + table + " WHERE " + colSite + " = ?")
		args = append(args, f.Site)
		if hasDim {
			b.WriteString(" AND dim = ?")
			args = append(args, d)
		}
		if v, ok := f.Where[d]; ok {
			b.WriteString(" AND value = ?")
			args = append(args, v)
		}
		cond, cargs := rangesCond(timeCol, ranges)
		b.WriteString(" AND " + cond)
		args = append(args, cargs...)
		selects = append(selects, b.String())
	}
	if len(plain) > 0 {
		rows(rollupTable, colMinute, plain)
	}
	if len(perSite) > 0 {
		dimRows(siteTable, false, colMinute, perSite)
	}
	if len(hours) > 0 {
		if oneDim {
			dimRows(dimTable, true, colHour, hours)
		} else {
			rows(hourlyTable, colHour, hours)
		}
	}
	if ds.Before(de) {
		dimRows(dayTable, true, colDay, []timeRange{{ds, de}})
	}
	return "(" + strings.Join(selects, " UNION ALL ") + ")", args, nil
}

// timeRange is [from, to).
type timeRange struct{ from, to time.Time }

// orNone is r, or nothing when it is empty.
func (r timeRange) orNone() []timeRange {
	if r.from.Before(r.to) {
		return []timeRange{r}
	}
	return nil
}

// rangesCond is the condition that col is within one of ranges.
func rangesCond(col string, ranges []timeRange) (string, []any) {
	var conds []string
	var args []any
	for _, r := range ranges {
		conds = append(conds, col+" >= ? AND "+col+" < ?")
		args = append(args, r.from, r.to)
	}
	return "(" + strings.Join(conds, " OR ") + ")", args
}

// completeFroms reads from which time on each of tables, filled only by
// views, holds every stream (itl_rollup_1h_from, itl_rollup_1d_from,
// itl_rollup_1m_site_from), in one query; a table absent from the answer
// does not say (read the minute table only then). Through a Distributed table each shard has said its own:
// the latest counts.
func completeFroms(ctx context.Context, conn Conn, tables ...string) (map[string]time.Time, error) {
	froms := map[string]time.Time{}
	if len(tables) == 0 {
		return froms, nil
	}
	selects := make([]string, len(tables))
	for i, table := range tables {
		selects[i] = "SELECT '" + table + "', count(), max(complete_from) FROM " + table
	}
	rows, err := conn.Query(ctx, strings.Join(selects, " UNION ALL "))
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", strings.Join(tables, ", "), err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			table string
			n     uint64
			from  time.Time
		)
		if err := rows.Scan(&table, &n, &from); err != nil {
			return nil, fmt.Errorf("scan %s: %w", strings.Join(tables, ", "), err)
		}
		if n > 0 {
			froms[table] = from.UTC()
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", strings.Join(tables, ", "), err)
	}
	return froms, nil
}

// ceilHour is the first whole hour at or after t.
func ceilHour(t time.Time) time.Time {
	h := t.Truncate(time.Hour)
	if h.Before(t) {
		h = h.Add(time.Hour)
	}
	return h
}

// ceilDay is the first UTC midnight at or after t.
func ceilDay(t time.Time) time.Time {
	d := t.Truncate(day)
	if d.Before(t) {
		d = d.Add(day)
	}
	return d
}

// minTime is the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
