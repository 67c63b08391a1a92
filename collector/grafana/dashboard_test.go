package grafana_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/itlmon/itlmon/collector/dimension"
)

var update = flag.Bool("update", false, "rewrite itlmon-dashboard.json from the panels defined here")

const dashboardFile = "itlmon-dashboard.json"

// The SQL of the dashboard. Every query reads the rollups only, filtered by
// the dashboard's time range and template variables (filter), and groups by
// the panel's interval ($__timeInterval: the plugin's toStartOfInterval over
// Grafana's interval, at least the panels' "1m": the rollup's resolution).
// It reads the rollups /dashboard/ reads, chosen the same way (rollupFrom).

// filter is the WHERE clause of every panel: the time range, one site, and
// the values picked of each dimension with a variable (collector/dimension's
// Grafana ones: region, browser and model; "All" drops the condition:
// $__conditionalAll). Panels read the rollups (rollupFrom) and itl_origin_1m:
// such a dimension must be a column of both.
var filter = func() string {
	var b strings.Builder
	b.WriteString("$__timeFilter(minute)\n  AND site = ${site:singlequote}")
	for _, d := range grafanaDims() {
		fmt.Fprintf(&b, "\n  AND $__conditionalAll(%[1]s IN (${%[2]s:singlequote}), $%[2]s)", d.Column, d.Key)
	}
	return b.String()
}()

// rollupFrom is what a panel reads FROM: the rollup rows of the range with
// the columns cols (besides minute, site and the dimensions' columns),
// filtered then by filter like rows of itl_rollup_1m (src's fields say
// which rows). It reads the coarsest
// rollups that answer exactly, as collector/query chooses them for
// /dashboard/:
//
//   - the whole hours of the range, when the panel is not grouped by time
//     (timed false) or its interval is a whole number of hours, and from the
//     hour on which itl_rollup_1h_from says the hourly tables hold every
//     stream: itl_rollup_1h_dim when at most one dimension is named (a
//     variable not at All, or by), its rows of that dimension (dim empty when
//     none is); itl_rollup_1h otherwise;
//   - the other minutes: itl_rollup_1m_site when no dimension is named, from
//     the minute itl_rollup_1m_site_from gives; itl_rollup_1m otherwise.
//
// Each part is a branch of a UNION ALL whose condition is decided before
// any row is read (the variables' All through $__conditionalAll(0, $var),
// the interval, the two tables of complete_from read as scalars), so only
// the tables of the branches that apply are read, and only the key range
// of their time. Every column is a sum, a max or a sumMap: rows of any
// branch add up to those of itl_rollup_1m.
func rollupFrom(src src) string {
	all := map[string]string{} // a Grafana dimension's key: its variable at All
	var none []string          // every Grafana variable at All
	for _, d := range grafanaDims() {
		all[d.Key] = "($__conditionalAll(0, $" + d.Key + "))"
		none = append(none, all[d.Key])
	}
	noneNamed := strings.Join(none, " AND ")
	if src.variable {
		noneNamed = "1"
	}
	whole := "1"
	if src.timed {
		whole = "$__interval_s % 3600 = 0"
	}
	by, cols := src.by, src.cols
	// The hours [hs, he) read from the hourly tables (none when he <= hs):
	// the whole hours of the range within $__timeFilter's (inclusive) ends,
	// from the hourly tables' complete hour on; the minutes outside them
	// are read from the minute tables.
	hs := "toStartOfHour(greatest($__fromTime, (SELECT if(count() = 0, toDateTime('2106-01-01 00:00:00', 'UTC'), max(complete_from)) FROM itl_rollup_1h_from)) + INTERVAL 3599 SECOND, 'UTC')"
	he := "if(" + whole + ", toStartOfHour($__toTime + INTERVAL 1 MINUTE, 'UTC'), toDateTime(0, 'UTC'))"
	siteFrom := "(SELECT if(count() = 0, toDateTime('2106-01-01 00:00:00', 'UTC'), max(complete_from)) FROM itl_rollup_1m_site_from)"
	notHourly := "(minute < " + hs + " OR minute >= " + he + ")"
	hourly := "hour >= " + hs + " AND hour < " + he

	var dimCols []dimension.Dimension
	for _, d := range dimension.Rollup() {
		if d.Grafana || by != "" {
			dimCols = append(dimCols, d)
		}
	}
	// sel is a branch's SELECT list: time, site, the dimensions (dimExpr
	// for each column), cols.
	sel := func(timeCol string, dimExpr func(d dimension.Dimension) string) string {
		var b strings.Builder
		b.WriteString("SELECT " + timeCol + ", site")
		for _, d := range dimCols {
			b.WriteString(", " + dimExpr(d))
		}
		for _, c := range cols {
			b.WriteString(", " + c)
		}
		return b.String()
	}
	own := func(d dimension.Dimension) string { return d.Column }
	empty := func(d dimension.Dimension) string { return "'' AS " + d.Column }
	ofDim := func(d dimension.Dimension) string { return "if(dim = '" + d.Key + "', value, '') AS " + d.Column }
	site := "site = ${site:singlequote}"
	if src.anySite {
		site = "1"
	}
	var branches []string
	branch := func(s string) { branches = append(branches, "  "+s) }
	if by == "" {
		branch(sel("minute", own) + "\n    FROM itl_rollup_1m WHERE " + site + " AND $__timeFilter(minute) AND " + notHourly +
			"\n      AND (NOT (" + noneNamed + ") OR minute < " + siteFrom + ")")
		branch(sel("minute", empty) + "\n    FROM itl_rollup_1m_site WHERE " + noneNamed + " AND " + site + " AND $__timeFilter(minute) AND " + notHourly +
			"\n      AND minute >= " + siteFrom)
		branch(sel("hour AS minute", ofDim) + "\n    FROM itl_rollup_1h_dim WHERE " + noneNamed + " AND " + site + " AND dim = '' AND " + hourly)
		for _, d := range grafanaDims() {
			if src.variable {
				break
			}
			var others []string
			for _, o := range grafanaDims() {
				if o.Key != d.Key {
					others = append(others, all[o.Key])
				}
			}
			branch(sel("hour AS minute", ofDim) + "\n    FROM itl_rollup_1h_dim WHERE NOT " + all[d.Key] + " AND " + strings.Join(others, " AND ") +
				" AND " + site + " AND dim = '" + d.Key + "' AND " + hourly)
		}
		var several []string // two or more variables not at All
		for i, a := range grafanaDims() {
			for _, b := range grafanaDims()[i+1:] {
				several = append(several, "NOT "+all[a.Key]+" AND NOT "+all[b.Key])
			}
		}
		if !src.variable {
			branch(sel("hour AS minute", own) + "\n    FROM itl_rollup_1h WHERE (" + strings.Join(several, " OR ") + ") AND " + site + " AND " + hourly)
		}
	} else {
		branch(sel("minute", own) + "\n    FROM itl_rollup_1m WHERE " + site + " AND $__timeFilter(minute) AND " + notHourly)
		branch(sel("hour AS minute", ofDim) + "\n    FROM itl_rollup_1h_dim WHERE " + noneNamed + " AND " + site + " AND dim = '" + by + "' AND " + hourly)
		if !src.variable {
			branch(sel("hour AS minute", own) + "\n    FROM itl_rollup_1h WHERE NOT (" + noneNamed + ") AND " + site + " AND " + hourly)
		}
	}
	return "(\n" + strings.Join(branches, "\n  UNION ALL\n") + "\n)"
}

// src is what a panel or variable reads of the rollups (rollupFrom).
type src struct {
	cols []string // the columns it aggregates
	// by is the dimension it groups by: "${group_by}" for the breakdown, a
	// column for a variable's values; "" for none. Its values are the dim
	// of itl_rollup_1h_dim: a rollup dimension's key is its column.
	by       string
	timed    bool // grouped by $__timeInterval: hours only when it is whole hours
	variable bool // a variable's own query: no variable filters it
	anySite  bool // not filtered by the site variable (the site variable's query)
}

// grafanaDims are the dimensions with a variable, in the registry's order.
func grafanaDims() []dimension.Dimension {
	var out []dimension.Dimension
	for _, d := range dimension.All() {
		if d.Grafana {
			out = append(out, d)
		}
	}
	return out
}

// groupByOptions are the breakdown's choices: every rollup dimension, those
// with a variable first, the first of all the default.
func groupByOptions() []varOption {
	var first, rest []varOption
	for _, d := range dimension.Rollup() {
		o := varOption{Text: d.Column, Value: d.Column}
		if d.Grafana {
			first = append(first, o)
		} else {
			rest = append(rest, o)
		}
	}
	opts := append(first, rest...)
	opts[0].Selected = true
	return opts
}

// repFactor is hist.BucketValue's factor: a bucket (L, U] with U = L·2^(1/32)
// is represented by 2LU/(L+U) = L·repFactor.
const repFactor = `(2 * exp2(1 / 32) / (1 + exp2(1 / 32)))`

// rankValue is the representative, in microseconds, of the order statistic
// of 0-based rank r of a merged histogram: h is its sumMap
// (Tuple(Array(Int32) indexes, Array(UInt64) counts), ascending), z its
// zero-bucket count. The zero bucket's values (≤ 1 µs) read as 0.
func rankValue(h, z string) string {
	return fmt.Sprintf("if(r < %[2]s, 0, exp2(%[1]s.1[arrayFirstIndex(c -> c + %[2]s > r, arrayCumSum(%[1]s.2))] / 32) * %[3]s)",
		h, z, repFactor)
}

// interpolated is an Array(Float64): for each q of qs, numpy's linear
// interpolation between the order statistics around rank q·(n−1) of a merged
// histogram (h, z: see rankValue), each read by rank, an expression of r.
func interpolated(h, z, rank string, qs ...float64) string {
	list := make([]string, len(qs))
	for i, q := range qs {
		list[i] = strconv.FormatFloat(q, 'f', -1, 64)
	}
	pos := fmt.Sprintf("arrayMap(q -> (toFloat64(%s + arraySum(%s.2)) - 1) * q, [%s])", z, h, strings.Join(list, ", "))
	return fmt.Sprintf("arrayMap((p, v) -> v[1] + (v[2] - v[1]) * (p - floor(p)), %[1]s,\n      arrayMap(p -> arrayMap(r -> %[2]s, [floor(p), floor(p) + 1]), %[1]s))",
		pos, rank)
}

// quantilesMs is an Array(Float64) of hist.Quantile at each of qs over a
// merged histogram (see rankValue), in milliseconds. The caller drops (or
// NULLs) empty histograms: their quantiles read 0.
func quantilesMs(h, z string, qs ...float64) string {
	return "arrayMap(x -> x / 1000, " + interpolated(h, z, rankValue(h, z), qs...) + ")"
}

// tokensPerSec is collector/query.SpeedMedian inverted: 1e6 over the median
// per-stream TPOT (µs) of the rollup's tpot histogram (h, z: see rankValue),
// each bucket represented by the mean of its values (s = sumMap(tpot_sum),
// the values' sum per bucket index, over the count; hist.BucketValue when a
// bucket has no sum), the zero bucket by 1 µs. The caller drops (or NULLs)
// empty histograms.
func tokensPerSec(h, s, z string) string {
	rank := fmt.Sprintf("if(r < %[2]s, 1, arrayMap(i -> if(%[3]s.2[indexOf(%[3]s.1, %[1]s.1[i])] > 0, %[3]s.2[indexOf(%[3]s.1, %[1]s.1[i])] / %[1]s.2[i],\n        exp2(%[1]s.1[i] / 32) * %[4]s), [arrayFirstIndex(c -> c + %[2]s > r, arrayCumSum(%[1]s.2))])[1])",
		h, z, s, repFactor)
	return "1e6 / " + interpolated(h, z, rank, 0.5) + "[1]"
}

// gaps is the number of ITL gaps of a set of rollup rows.
const gaps = `(sum(itl_zero) + arraySum(sumMap(itl).2))`

// latencySQL is a quantile panel over one rollup histogram column.
func latencySQL(col string) string {
	return `SELECT time, q[1] AS p50, q[2] AS p95, q[3] AS p99
FROM (
  SELECT $__timeInterval(minute) AS time, sumMap(` + col + `) AS h, sum(` + col + `_zero) AS z,
    ` + quantilesMs("h", "z", 0.5, 0.95, 0.99) + ` AS q
  FROM ` + rollupFrom(src{cols: []string{col, col + "_zero"}, timed: true}) + `
  WHERE ` + filter + `
  GROUP BY time
  HAVING z + arraySum(h.2) > 0
)
ORDER BY time`
}

var (
	streamsSQL = `SELECT sum(streams) AS streams
FROM ` + rollupFrom(src{cols: []string{"streams"}}) + `
WHERE ` + filter

	stallsByCauseSQL = `SELECT $__timeInterval(minute) AS time,
  sum(stalls_origin) AS origin, sum(stalls_network) AS network, sum(stalls_page) AS page, sum(stalls_unknown) AS unknown
FROM ` + rollupFrom(src{cols: []string{"stalls_origin", "stalls_network", "stalls_page", "stalls_unknown"}, timed: true}) + `
WHERE ` + filter + `
GROUP BY time
ORDER BY time`

	stalledTimeByCauseSQL = `SELECT $__timeInterval(minute) AS time,
  sum(stalled_us_origin) / 1e6 AS origin, sum(stalled_us_network) / 1e6 AS network,
  sum(stalled_us_page) / 1e6 AS page, sum(stalled_us_unknown) / 1e6 AS unknown
FROM ` + rollupFrom(src{cols: []string{"stalled_us_origin", "stalled_us_network", "stalled_us_page", "stalled_us_unknown"}, timed: true}) + `
WHERE ` + filter + `
GROUP BY time
ORDER BY time`

	ttftCauseSQL = `SELECT $__timeInterval(minute) AS time,
  sum(ttft_origin) AS origin, sum(ttft_network) AS network, sum(ttft_page) AS page, sum(ttft_unknown) AS unknown
FROM ` + rollupFrom(src{cols: []string{"ttft_origin", "ttft_network", "ttft_page", "ttft_unknown"}, timed: true}) + `
WHERE ` + filter + `
GROUP BY time
ORDER BY time`

	stallShareSQL = `SELECT $__timeInterval(minute) AS time,
  if(` + gaps + ` = 0, NULL, sum(stalls) / ` + gaps + `) AS stall_share
FROM ` + rollupFrom(src{cols: []string{"itl", "itl_zero", "stalls"}, timed: true}) + `
WHERE ` + filter + `
GROUP BY time
ORDER BY time`

	tokensPerSecSQL = `SELECT time, tokens_per_sec
FROM (
  SELECT $__timeInterval(minute) AS time, sumMap(tpot) AS h, sumMap(tpot_sum) AS s, sum(tpot_zero) AS z,
    ` + tokensPerSec("h", "s", "z") + ` AS tokens_per_sec
  FROM ` + rollupFrom(src{cols: []string{"tpot", "tpot_sum", "tpot_zero"}, timed: true}) + `
  WHERE ` + filter + `
  GROUP BY time
  HAVING z + arraySum(h.2) > 0
)
ORDER BY time`

	statusSQL = `SELECT time, c AS complete, a AS aborted, f AS error, n - c - a - f AS other
FROM (
  SELECT $__timeInterval(minute) AS time, sum(streams) AS n, sum(completed) AS c, sum(aborted) AS a, sum(failed) AS f
  FROM ` + rollupFrom(src{cols: []string{"streams", "completed", "aborted", "failed"}, timed: true}) + `
  WHERE ` + filter + `
  GROUP BY time
)
ORDER BY time`

	// addedSQL: what the path (network, proxies, page) added to the
	// origin's own TTFT and ITL p50, mean per stream, over the streams whose
	// origin timeline was joined (itl_origin_1m).
	addedSQL = `SELECT $__timeInterval(minute) AS time,
  if(sum(with_added_ttft) = 0, NULL, sum(added_ttft_us) / sum(with_added_ttft) / 1000) AS added_ttft_ms,
  if(sum(with_added_itl) = 0, NULL, sum(added_p50_us) / sum(with_added_itl) / 1000) AS added_itl_p50_ms
FROM itl_origin_1m
WHERE ` + filter + `
GROUP BY time
ORDER BY time`

	breakdownSQL = `SELECT key, streams,
  if(with_ttft = 0, NULL, ttft_q[1]) AS ttft_p50_ms,
  if(gaps = 0, NULL, itl_q[1]) AS itl_p50_ms,
  if(gaps = 0, NULL, itl_q[2]) AS itl_p99_ms,
  if(gaps = 0, NULL, stalls / gaps) AS stall_share,
  if(tpot_z + arraySum(tpot_h.2) = 0, NULL, tps) AS tokens_per_sec,
  if(with_ttft = 0, NULL, smooth / with_ttft) AS smooth_share
FROM (
  SELECT toString(${group_by}) AS key, sum(streams) AS streams, sum(stalls) AS stalls,
    sum(smooth) AS smooth, sum(with_ttft) AS with_ttft,
    sumMap(ttft) AS ttft_h, sum(ttft_zero) AS ttft_z,
    sumMap(itl) AS itl_h, sum(itl_zero) AS itl_z, itl_z + arraySum(itl_h.2) AS gaps,
    sumMap(tpot) AS tpot_h, sumMap(tpot_sum) AS tpot_s, sum(tpot_zero) AS tpot_z,
    ` + quantilesMs("ttft_h", "ttft_z", 0.5) + ` AS ttft_q,
    ` + quantilesMs("itl_h", "itl_z", 0.5, 0.99) + ` AS itl_q,
    ` + tokensPerSec("tpot_h", "tpot_s", "tpot_z") + ` AS tps
  FROM ` + rollupFrom(src{cols: []string{"streams", "stalls", "smooth", "with_ttft", "ttft", "ttft_zero", "itl", "itl_zero", "tpot", "tpot_sum", "tpot_zero"}, by: "${group_by}"}) + `
  WHERE ` + filter + `
  GROUP BY key
)
ORDER BY streams DESC, key
LIMIT 200`
)

// Variable queries: the values present in the rollups over the time range
// (refreshed when it changes), within the site picked.
var (
	siteVarSQL = `SELECT DISTINCT toString(site) FROM ` + rollupFrom(src{variable: true, anySite: true}) + `
WHERE $__timeFilter(minute) ORDER BY 1`
	dimVarSQL = func(col string) string {
		return `SELECT DISTINCT toString(` + col + `) FROM ` + rollupFrom(src{by: col, variable: true}) + `
WHERE $__timeFilter(minute) AND site = ${site:singlequote} ORDER BY 1`
	}
)

// The dashboard model (Grafana's JSON, schemaVersion 39), only the fields
// this dashboard sets.

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

var ds = dsRef{Type: "grafana-clickhouse-datasource", UID: "${datasource}"}

// target is a grafana-clickhouse-datasource v4 query: the SQL editor, format
// 0 (time series: the plugin turns a long frame wide) or 1 (table).
type target struct {
	Datasource dsRef  `json:"datasource"`
	EditorType string `json:"editorType"`
	QueryType  string `json:"queryType"`
	Format     int    `json:"format"`
	RawSQL     string `json:"rawSql"`
	RefID      string `json:"refId"`
}

const (
	formatTimeSeries = 0
	formatTable      = 1
)

type gridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

type panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description,omitempty"`
	GridPos     gridPos        `json:"gridPos"`
	Datasource  dsRef          `json:"datasource"`
	Interval    string         `json:"interval,omitempty"`
	FieldConfig map[string]any `json:"fieldConfig"`
	Options     map[string]any `json:"options,omitempty"`
	Targets     []target       `json:"targets"`
}

type varQuery struct {
	EditorType string `json:"editorType"`
	RawSQL     string `json:"rawSql"`
}

type variable struct {
	Name        string         `json:"name"`
	Label       string         `json:"label"`
	Type        string         `json:"type"`
	Datasource  *dsRef         `json:"datasource,omitempty"`
	Definition  string         `json:"definition,omitempty"`
	Query       any            `json:"query"`
	Refresh     int            `json:"refresh,omitempty"`
	Multi       bool           `json:"multi"`
	IncludeAll  bool           `json:"includeAll"`
	Sort        int            `json:"sort,omitempty"`
	Current     map[string]any `json:"current"`
	Options     []varOption    `json:"options"`
	Description string         `json:"description,omitempty"`
}

type varOption struct {
	Selected bool   `json:"selected"`
	Text     string `json:"text"`
	Value    string `json:"value"`
}

type dashboard struct {
	UID           string         `json:"uid"`
	Title         string         `json:"title"`
	Description   string         `json:"description"`
	Tags          []string       `json:"tags"`
	Editable      bool           `json:"editable"`
	SchemaVersion int            `json:"schemaVersion"`
	Time          map[string]any `json:"time"`
	Refresh       string         `json:"refresh"`
	GraphTooltip  int            `json:"graphTooltip"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

func timeseries(id int, title, desc, unit string, pos gridPos, sql string, stacked bool) panel {
	custom := map[string]any{"drawStyle": "line", "lineWidth": 2, "fillOpacity": 10, "showPoints": "auto", "spanNulls": false}
	if stacked {
		custom = map[string]any{"drawStyle": "bars", "fillOpacity": 80, "stacking": map[string]any{"mode": "normal", "group": "A"}}
	}
	return panel{ID: id, Type: "timeseries", Title: title, Description: desc, GridPos: pos, Datasource: ds, Interval: "1m",
		FieldConfig: map[string]any{"defaults": map[string]any{"unit": unit, "custom": custom}, "overrides": []any{}},
		Options: map[string]any{"legend": map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": true},
			"tooltip": map[string]any{"mode": "multi", "sort": "none"}},
		Targets: []target{{Datasource: ds, EditorType: "sql", QueryType: "timeseries", Format: formatTimeSeries, RawSQL: sql, RefID: "A"}}}
}

func queryVar(name, label, sql string, multi bool) variable {
	v := variable{Name: name, Label: label, Type: "query", Datasource: &ds, Definition: sql,
		Query: varQuery{EditorType: "sql", RawSQL: sql}, Refresh: 2, Multi: multi, IncludeAll: multi, Sort: 1,
		Current: map[string]any{}, Options: []varOption{}}
	if multi {
		v.Current = map[string]any{"selected": true, "text": []string{"All"}, "value": []string{"$__all"}}
	}
	return v
}

// buildDashboard is the dashboard as shipped.
func buildDashboard() dashboard {
	d := dashboard{UID: "itlmon", Title: "itlmon: streamed LLM answers as users saw them",
		Description: "TTFT, inter-token latency, stalls by cause, tokens/s and how streams ended, from itlmon's rollups (per hour and per minute, as /dashboard/ reads them, and itl_origin_1m).",
		Tags:        []string{"itlmon", "llm", "rum"}, Editable: true, SchemaVersion: 39,
		Time: map[string]any{"from": "now-6h", "to": "now"}, Refresh: "1m", GraphTooltip: 1}
	d.Templating.List = []variable{
		// The provisioned data source (provisioning/datasources) by default.
		{Name: "datasource", Label: "Data source", Type: "datasource", Query: "grafana-clickhouse-datasource",
			Current: map[string]any{"selected": true, "text": "itlmon ClickHouse", "value": "itlmon-clickhouse"}, Options: []varOption{}},
		queryVar("site", "Site", siteVarSQL, false),
	}
	for _, dim := range grafanaDims() {
		d.Templating.List = append(d.Templating.List, queryVar(dim.Key, dim.Label, dimVarSQL(dim.Column), true))
	}
	opts := groupByOptions()
	values := make([]string, len(opts))
	for i, o := range opts {
		values[i] = o.Value
	}
	d.Templating.List = append(d.Templating.List, variable{Name: "group_by", Label: "Breakdown by", Type: "custom",
		Query:       strings.Join(values, ","),
		Current:     map[string]any{"selected": true, "text": opts[0].Text, "value": opts[0].Value},
		Options:     opts,
		Description: "the dimension of the breakdown table"})
	d.Panels = []panel{
		{ID: 1, Type: "stat", Title: "Streams", Description: "Streams measured in the range (every status).",
			GridPos: gridPos{H: 4, W: 4, X: 0, Y: 0}, Datasource: ds,
			FieldConfig: map[string]any{"defaults": map[string]any{"unit": "short"}, "overrides": []any{}},
			Options:     map[string]any{"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false}},
			Targets:     []target{{Datasource: ds, EditorType: "sql", QueryType: "table", Format: formatTable, RawSQL: streamsSQL, RefID: "A"}}},
		timeseries(2, "TTFT p50 / p95 / p99", "Time to first token: t0 (just before the page's fetch) to the first event that carries output content. Quantiles of the merged per-minute histograms, within 2.19 % of exact.",
			"ms", gridPos{H: 8, W: 10, X: 4, Y: 0}, latencySQL("ttft"), false),
		timeseries(3, "ITL p50 / p95 / p99", "Inter-token latency: one sample per gap between consecutive content events after the first (OpenTelemetry's gen_ai.client.operation.time_per_output_chunk). Within 2.19 % of exact.",
			"ms", gridPos{H: 8, W: 10, X: 14, Y: 0}, latencySQL("itl"), false),
		timeseries(4, "Stall share", "Gaps over 200 ms / all ITL gaps.",
			"percentunit", gridPos{H: 4, W: 4, X: 0, Y: 4}, stallShareSQL, false),
		timeseries(5, "Stalls per cause", "Gaps over 200 ms by cause: origin (the origin's own emit times show the gap), network (the next read carried several events: coalesced delivery), page (a busy main thread), unknown.",
			"short", gridPos{H: 8, W: 8, X: 0, Y: 8}, stallsByCauseSQL, true),
		timeseries(6, "Stalled time per cause", "Total time inside stalls, by cause.",
			"s", gridPos{H: 8, W: 8, X: 8, Y: 8}, stalledTimeByCauseSQL, true),
		timeseries(7, "Cause of a slow first token", "Streams whose wait for the first token got a cause (a buffering proxy shows as network: the whole answer in one read at the end).",
			"short", gridPos{H: 8, W: 8, X: 16, Y: 8}, ttftCauseSQL, true),
		timeseries(8, "Tokens/s per stream (median)", "Median over streams of 1/TPOT, TPOT = (t_last − t_first_content)/(N − 1), per token when token counts are known; TTFT excluded.",
			"short", gridPos{H: 8, W: 8, X: 0, Y: 16}, tokensPerSecSQL, false),
		timeseries(9, "Streams by status", "How streams ended: complete (the format's terminal event arrived, or the body was read to its end), aborted (by the page or user), error (network error), other (HTTP ≥ 400, still open).",
			"short", gridPos{H: 8, W: 8, X: 8, Y: 16}, statusSQL, true),
		timeseries(10, "What the path added", "Client minus origin, mean per stream, over streams whose origin timeline was joined (the origin middleware): the TTFT and the ITL p50 that the network, proxies and page added.",
			"ms", gridPos{H: 8, W: 8, X: 16, Y: 16}, addedSQL, false),
		{ID: 11, Type: "table", Title: "Breakdown by ${group_by}", Description: "Per value of the chosen dimension, largest first.",
			GridPos: gridPos{H: 10, W: 24, X: 0, Y: 24}, Datasource: ds,
			FieldConfig: map[string]any{"defaults": map[string]any{"custom": map[string]any{"align": "auto", "filterable": true}},
				"overrides": []any{
					unitOverride("ttft_p50_ms", "ms"), unitOverride("itl_p50_ms", "ms"), unitOverride("itl_p99_ms", "ms"),
					unitOverride("stall_share", "percentunit"), unitOverride("smooth_share", "percentunit"),
				}},
			Options: map[string]any{"showHeader": true},
			Targets: []target{{Datasource: ds, EditorType: "sql", QueryType: "table", Format: formatTable, RawSQL: breakdownSQL, RefID: "A"}}},
	}
	return d
}

func unitOverride(field, unit string) map[string]any {
	return map[string]any{"matcher": map[string]any{"id": "byName", "options": field},
		"properties": []any{map[string]any{"id": "unit", "value": unit}}}
}

func marshalDashboard(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(buildDashboard()); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestDashboardJSON: the committed dashboard is the one defined here (-update
// rewrites it).
func TestDashboardJSON(t *testing.T) {
	got := marshalDashboard(t)
	if *update {
		if err := os.WriteFile(dashboardFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatalf("%v (run go test ./collector/grafana -run TestDashboardJSON -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the dashboard defined in dashboard_test.go (run with -update if intended)", dashboardFile)
	}
	prov, err := os.ReadFile("provisioning/datasources/itlmon-clickhouse.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(prov), "uid: itlmon-clickhouse") || !strings.Contains(string(prov), "type: grafana-clickhouse-datasource") {
		t.Error("the provisioned data source is not the one the dashboard's datasource variable picks (uid itlmon-clickhouse)")
	}
	// The breakdown reads itl_rollup_1h_dim's rows of dim = '${group_by}',
	// a column name: a rollup dimension's dim is its key.
	for _, d := range dimension.Rollup() {
		if d.Key != d.Column {
			t.Errorf("rollup dimension %q has column %q: the breakdown's group_by option must map to its key", d.Key, d.Column)
		}
	}
	for _, p := range buildDashboard().Panels {
		for _, tg := range p.Targets {
			if strings.Contains(tg.RawSQL, "itl_streams") {
				t.Errorf("panel %q reads raw rows; the dashboard reads the rollups only", p.Title)
			}
			if !strings.Contains(tg.RawSQL, filter) {
				t.Errorf("panel %q does not apply the time range and the variables", p.Title)
			}
			if (p.Type == "timeseries") != (tg.Format == formatTimeSeries) {
				t.Errorf("panel %q (%s) has format %d", p.Title, p.Type, tg.Format)
			}
		}
	}
}
