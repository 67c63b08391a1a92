package query_test

import (
	"context"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/query"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// tableConn records the statements sent through it; with minuteOnly it
// answers the completeness of the hourly and the per-site minute rollups
// and of the comparison's sample and the re-chunking rollup as "unknown",
// so the read side reads the minute rollup alone and a comparison and the
// re-chunking view itl_streams alone (what they did before the others).
type tableConn struct {
	query.Conn
	minuteOnly bool
	mu         sync.Mutex
	sent       []string
}

func (c *tableConn) Query(ctx context.Context, q string, args ...any) (driver.Rows, error) {
	c.mu.Lock()
	c.sent = append(c.sent, q)
	c.mu.Unlock()
	if c.minuteOnly && (strings.Contains(q, "itl_rollup_1h_from") || strings.Contains(q, "itl_rollup_1m_site_from") || strings.Contains(q, "itl_rollup_1d_from") ||
		strings.Contains(q, "itl_streams_sample_from") || strings.Contains(q, "itl_rechunk_1h_from")) {
		q = "SELECT toUInt64(0), toDateTime(0, 'UTC') WHERE 0"
	}
	return c.Conn.Query(ctx, q, args...)
}

// readHourly returns the rollups other than the minute table the
// statements sent through c read (itl_rollup_1h, itl_rollup_1h_dim,
// itl_rollup_1m_site, itl_rollup_1d_dim, itl_rechunk_1h, space-separated),
// and forgets them.
func (c *tableConn) readHourly() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var read []string
	for _, table := range []string{"itl_rollup_1h", "itl_rollup_1h_dim", "itl_rollup_1m_site", "itl_rollup_1d_dim", "itl_rechunk_1h"} {
		for _, q := range c.sent {
			if strings.Contains(q, "FROM "+table+" ") {
				read = append(read, table)
				break
			}
		}
	}
	c.sent = nil
	return strings.Join(read, " ")
}

// writeHours stores n streams per hour over hours hours before base (and
// into base's hour), at minutes spread over each hour, over a few values of
// every dimension, some with stalls of each cause.
func writeHours(t *testing.T, conn driver.Conn, base time.Time, hours, n int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	var streams []collector.Stream
	causes := []meter.Cause{meter.CauseOrigin, meter.CauseNetwork, meter.CausePage, meter.CauseUnknown}
	for h := -hours; h <= 0; h++ {
		for i := range n {
			s := synth{ttft: time.Duration(200+rng.IntN(900)) * time.Millisecond, gaps: jittered(rng, 10+rng.IntN(30), time.Duration(15+rng.IntN(40))*time.Millisecond)}
			if i%4 == 0 {
				s.gaps = hitchy(len(s.gaps), 25*time.Millisecond, time.Duration(250+rng.IntN(800))*time.Millisecond, 7)
			}
			r := s.record(t)
			if i%4 == 0 {
				withStalls(&r, s, causes[rng.IntN(len(causes))])
			}
			r.TTFTCause = uint8(causes[rng.IntN(len(causes))])
			at := base.Add(time.Duration(h)*time.Hour + time.Duration(rng.IntN(3600))*time.Second + time.Duration(rng.IntN(1000))*time.Millisecond)
			streams = append(streams, collector.Stream{Record: r, Site: "h", ReceivedAt: at,
				Country: []string{"DE", "FR", "US"}[rng.IntN(3)], Region: []string{"DE-BE", "FR-IDF", "US-CA"}[rng.IntN(3)],
				Browser: []string{"Chrome", "Firefox", "Safari"}[rng.IntN(3)], OS: "Linux", Device: []string{"desktop", "mobile"}[rng.IntN(2)],
				Release: []string{"r1", "r2"}[rng.IntN(2)]})
		}
	}
	if err := store.InsertDirect(context.Background(), conn, streams); err != nil {
		t.Fatalf("insert: %v", err)
	}
}

// sameRows fails unless itl_rollup_1h holds, row for row, the minute
// rollup's rows summed per hour, itl_rollup_1h_dim and itl_rollup_1d_dim,
// for each dimension, those rows summed per hour or day and value of it,
// and itl_rollup_1m_site those rows summed per minute and site (every
// column; the Float64 TPOT sums to 1e-6, their order of addition
// differing).
func sameRows(t *testing.T, conn driver.Conn) {
	t.Helper()
	agg := strings.Join([]string{"sum(streams)", "sum(completed)", "sum(aborted)", "sum(failed)", "sum(before_headers)", "sum(before_headers_us)", "sum(smooth)",
		"sum(with_ttft)", "sum(content_events)", "sum(tokens)", "sum(reads)", "sum(bytes)", "sum(stalls)", "sum(stalled_us)",
		"sum(stalls_unknown)", "sum(stalls_network)", "sum(stalls_page)", "sum(stalls_origin)", "max(max_gap_us)",
		"sumMap(itl)", "sum(itl_zero)", "sumMap(itl_tok)", "sum(itl_tok_zero)", "sumMap(ttft)", "sum(ttft_zero)", "sumMap(tpot)",
		"tupleElement(sumMap(tpot_sum), 1)", "arrayMap(x -> round(x, 6), tupleElement(sumMap(tpot_sum), 2))", "sum(tpot_zero)",
		"sum(stalled_us_unknown)", "sum(stalled_us_network)", "sum(stalled_us_page)", "sum(stalled_us_origin)",
		"sum(ttft_unknown)", "sum(ttft_network)", "sum(ttft_page)", "sum(ttft_origin)",
		"sum(stalls_origin_edge)", "sum(stalls_edge_browser)", "sum(stalled_us_origin_edge)", "sum(stalled_us_edge_browser)",
		"sum(ttft_origin_edge)", "sum(ttft_edge_browser)"}, ", ")
	const dims = "country, region, browser, os, device, model, release, colo"
	// Each pair: the rows of a table and the minute table's rows summed to
	// the same grain.
	pairs := [][2]string{{
		"SELECT hour AS h, site, " + dims + ", " + agg + " FROM itl_rollup_1h GROUP BY h, site, " + dims,
		"SELECT toStartOfHour(minute) AS h, site, " + dims + ", " + agg + " FROM itl_rollup_1m GROUP BY h, site, " + dims,
	}}
	for _, d := range append([]string{""}, strings.Split(dims, ", ")...) {
		col := "''"
		if d != "" {
			col = "toString(" + d + ")"
		}
		// per hour and per day: the table, its time column, the minute's
		// truncation to it
		for _, g := range [][3]string{{"itl_rollup_1h_dim", "hour", "toStartOfHour"}, {"itl_rollup_1d_dim", "day", "toStartOfDay"}} {
			pairs = append(pairs, [2]string{
				"SELECT " + g[1] + " AS t, site, toString(value) AS v, " + agg + " FROM " + g[0] + " WHERE dim = '" + d + "' GROUP BY t, site, v",
				"SELECT " + g[2] + "(minute) AS t, site, " + col + " AS v, " + agg + " FROM itl_rollup_1m GROUP BY t, site, v",
			})
		}
	}
	pairs = append(pairs, [2]string{
		"SELECT minute, site, " + agg + " FROM itl_rollup_1m_site GROUP BY minute, site",
		"SELECT minute, site, " + agg + " FROM itl_rollup_1m GROUP BY minute, site",
	})
	for _, p := range pairs {
		var rows, diff uint64
		if err := conn.QueryRow(context.Background(), "SELECT count() FROM ("+p[0]+")").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(context.Background(), "SELECT (SELECT count() FROM ("+p[0]+" EXCEPT "+p[1]+")) + (SELECT count() FROM ("+p[1]+" EXCEPT "+p[0]+"))").Scan(&diff); err != nil {
			t.Fatal(err)
		}
		if rows == 0 || diff != 0 {
			t.Errorf("%d rows, %d differ from itl_rollup_1m's summed to the same grain: %.80s", rows, diff, p[0])
		}
	}
}

// completeOnlyFrom makes table, filled by views with its time in col, look
// as after its migration on a database that had streams: its rows before
// from gone, and its complete_from table (table + "_from") saying from.
func completeOnlyFrom(t *testing.T, conn driver.Conn, table, col string, from time.Time) {
	t.Helper()
	at := "'" + from.Format(time.DateTime) + "'"
	for _, q := range []string{
		"ALTER TABLE " + table + " DELETE WHERE " + col + " < " + at + " SETTINGS mutations_sync = 2",
		"TRUNCATE TABLE " + table + "_from",
		"INSERT INTO " + table + "_from VALUES (" + at + ")",
	} {
		if err := conn.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
}

// closeFloats replaces in got every float64 within 1e-9 (relative) of its
// counterpart in want by that counterpart: the TPOT median comes from sums
// of Float64 added in another order per table.
func closeFloats(got, want reflect.Value) {
	switch got.Kind() {
	case reflect.Float64:
		if g, w := got.Float(), want.Float(); g != w && math.Abs(g-w) <= 1e-9*math.Abs(w) && got.CanSet() {
			got.SetFloat(w)
		}
	case reflect.Pointer, reflect.Interface:
		if !got.IsNil() && !want.IsNil() && got.Elem().Kind() != reflect.Interface {
			closeFloats(got.Elem(), want.Elem())
		}
	case reflect.Struct:
		for i := range got.NumField() {
			if got.Type().Field(i).IsExported() {
				closeFloats(got.Field(i), want.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		if got.Len() == want.Len() {
			for i := range got.Len() {
				closeFloats(got.Index(i), want.Index(i))
			}
		}
	case reflect.Map:
		if got.Len() == want.Len() {
			for _, k := range got.MapKeys() {
				g, w := got.MapIndex(k), want.MapIndex(k)
				if !w.IsValid() {
					continue
				}
				c := reflect.New(g.Type()).Elem()
				c.Set(g)
				closeFloats(c, w)
				got.SetMapIndex(k, c)
			}
		}
	}
}

// sameAnswer fails unless read answers through got what it answers
// through want (the minute rollup alone), and returns the rollups other
// than the minute table the read through got read (tableConn.readHourly).
func sameAnswer(t *testing.T, got, want *tableConn, name string, read func(c query.Conn) (any, error)) string {
	t.Helper()
	g, err := read(got)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	w, err := read(want)
	if err != nil {
		t.Fatalf("%s (minute table): %v", name, err)
	}
	if r := want.readHourly(); r != "" {
		t.Fatalf("%s: the minute-only read read %s", name, r)
	}
	if reflect.ValueOf(w).IsZero() {
		t.Fatalf("%s: empty result", name)
	}
	gv := reflect.New(reflect.TypeOf(g)).Elem()
	gv.Set(reflect.ValueOf(g))
	closeFloats(gv, reflect.ValueOf(w))
	if !reflect.DeepEqual(gv.Interface(), w) {
		t.Errorf("%s: from the rollups\n%+v\nfrom the minute table\n%+v", name, gv.Interface(), w)
	}
	return got.readHourly()
}

// TestHourlyRollupEqualsMinute: itl_rollup_1h holds the minute rollup's rows
// summed per hour, and every read of the rollups answers what the minute
// table alone answers, for ranges on and off the hour, time series with
// steps of whole hours (hourly table) and of minutes (minute table), and a
// hourly table complete only from some hour on.
func TestHourlyRollupEqualsMinute(t *testing.T) {
	db, _ := newDB(t)
	conn := db.Conn()
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	writeHours(t, conn, base, 9, 40, 1)
	sameRows(t, conn)

	got, want := &tableConn{Conn: conn}, &tableConn{Conn: conn, minuteOnly: true}
	// check runs read through both conns and compares; hourly is the
	// hourly rollup the read through got must have read ("" for none).
	check := func(name string, hourly string, read func(c query.Conn) (any, error)) {
		t.Helper()
		if r := sameAnswer(t, got, want, name, read); r != hourly {
			t.Errorf("%s: read hourly rollups %q, want %q", name, r, hourly)
		}
	}
	ranges := []struct {
		name         string
		since, until time.Time
		hourly       bool // whole hours in range
	}{
		{"on the hour", base.Add(-6 * time.Hour), base.Add(time.Hour), true},
		{"off the hour at both ends", base.Add(-7*time.Hour + 17*time.Minute + 20*time.Second), base.Add(43*time.Minute + 5*time.Second), true},
		{"until now", base.Add(-9*time.Hour + 30*time.Minute), time.Time{}, true},
		{"within one hour", base.Add(-3*time.Hour + 5*time.Minute), base.Add(-3*time.Hour + 50*time.Minute), false},
		{"across one hour boundary", base.Add(-3*time.Hour + 30*time.Minute), base.Add(-2*time.Hour + 30*time.Minute), false},
	}
	for _, r := range ranges {
		// table is the hourly rollup a read naming dims dimensions reads
		// with a step of whole hours.
		// (Every range has minutes outside whole hours: the minute an
		// until falls in is read whole.)
		table := func(dims int, step time.Duration) string {
			hours := r.hourly && step%time.Hour == 0
			switch {
			case dims > 1 && hours:
				return "itl_rollup_1h"
			case dims > 1:
				return ""
			case dims == 1 && hours:
				return "itl_rollup_1h_dim"
			case dims == 1:
				return ""
			case hours:
				return "itl_rollup_1h_dim itl_rollup_1m_site"
			}
			return "itl_rollup_1m_site"
		}
		f := query.Filter{Site: "h", Since: r.since, Until: r.until}
		f1 := f
		f1.Where = map[string]string{"browser": "Chrome"}
		f2 := f
		f2.Where = map[string]string{"browser": "Chrome", "device": "mobile"}
		check(r.name+": summary", table(0, 0), func(c query.Conn) (any, error) { return query.Summary(ctx, c, f) })
		check(r.name+": summary where 1", table(1, 0), func(c query.Conn) (any, error) { return query.Summary(ctx, c, f1) })
		check(r.name+": summary where 2", table(2, 0), func(c query.Conn) (any, error) { return query.Summary(ctx, c, f2) })
		check(r.name+": breakdown", table(1, 0), func(c query.Conn) (any, error) { return query.Breakdown(ctx, c, f, "region") })
		check(r.name+": breakdown where the same", table(1, 0), func(c query.Conn) (any, error) { return query.Breakdown(ctx, c, f1, "browser") })
		check(r.name+": breakdown where another", table(2, 0), func(c query.Conn) (any, error) { return query.Breakdown(ctx, c, f1, "device") })
		check(r.name+": cause breakdown", table(1, 0), func(c query.Conn) (any, error) { return query.CauseBreakdown(ctx, c, f, "release") })
		check(r.name+": cause breakdown where 2", table(3, 0), func(c query.Conn) (any, error) { return query.CauseBreakdown(ctx, c, f2, "release") })
		for _, step := range []time.Duration{time.Hour, 3 * time.Hour, 15 * time.Minute} {
			s := step.String()
			check(r.name+": timeseries "+s, table(0, step), func(c query.Conn) (any, error) { return query.Timeseries(ctx, c, f, step) })
			check(r.name+": timeseries where 1 "+s, table(1, step), func(c query.Conn) (any, error) { return query.Timeseries(ctx, c, f1, step) })
			check(r.name+": cause timeseries "+s, table(0, step), func(c query.Conn) (any, error) { return query.CauseTimeseries(ctx, c, f, step) })
			check(r.name+": heatmap where 2 "+s, table(2, step), func(c query.Conn) (any, error) { return query.ITLHeatmap(ctx, c, f2, step) })
		}
	}
	check("sites", "itl_rollup_1h_dim", func(c query.Conn) (any, error) { return query.Sites(ctx, c, base.Add(-8*time.Hour+time.Minute)) })

	// The hourly table complete only from an hour on, as after a migration
	// on a database with streams (every stream stored before it is in an
	// earlier hour): the hours before it are empty there and must be read
	// from the minute table.
	from := base.Add(time.Hour)
	for _, q := range []string{"TRUNCATE TABLE itl_rollup_1h", "TRUNCATE TABLE itl_rollup_1h_dim", "TRUNCATE TABLE itl_rollup_1h_from"} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.Exec(ctx, "INSERT INTO itl_rollup_1h_from VALUES (?)", from); err != nil {
		t.Fatal(err)
	}
	writeHours(t, conn, base.Add(2*time.Hour), 1, 30, 2) // after it
	f := query.Filter{Site: "h", Since: base.Add(-8*time.Hour + 10*time.Minute), Until: base.Add(2*time.Hour + 50*time.Minute)}
	f2 := f
	f2.Where = map[string]string{"region": "DE-BE", "os": "Linux"}
	check("partly complete: summary", "itl_rollup_1h_dim itl_rollup_1m_site", func(c query.Conn) (any, error) { return query.Summary(ctx, c, f) })
	check("partly complete: breakdown where 2", "itl_rollup_1h", func(c query.Conn) (any, error) { return query.Breakdown(ctx, c, f2, "country") })
	check("partly complete: timeseries 2h", "itl_rollup_1h_dim itl_rollup_1m_site", func(c query.Conn) (any, error) { return query.Timeseries(ctx, c, f, 2*time.Hour) })
	check("partly complete: sites", "itl_rollup_1h_dim", func(c query.Conn) (any, error) { return query.Sites(ctx, c, f.Since) })
	f.Since = from.Add(-10 * time.Minute)
	f.Until = from.Add(50 * time.Minute)
	check("partly complete, no whole hour after it", "itl_rollup_1m_site", func(c query.Conn) (any, error) { return query.Summary(ctx, c, f) })

	// The per-site minute table complete only from a minute on (as
	// after its migration on a database with streams, all of them before
	// that minute): the minutes before it are read from the minute table,
	// the ones after from it.
	mfrom := base.Add(3*time.Hour + 20*time.Minute) // after every stream written so far
	for _, q := range []string{"TRUNCATE TABLE itl_rollup_1m_site", "TRUNCATE TABLE itl_rollup_1m_site_from"} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.Exec(ctx, "INSERT INTO itl_rollup_1m_site_from VALUES (?)", mfrom); err != nil {
		t.Fatal(err)
	}
	writeHours(t, conn, mfrom, 0, 40, 3) // in the hour from it
	f = query.Filter{Site: "h", Since: base.Add(2*time.Hour + 5*time.Minute), Until: mfrom.Add(30 * time.Minute)}
	f1 := f
	f1.Where = map[string]string{"browser": "Chrome"}
	check("minutes partly complete: summary", "itl_rollup_1m_site", func(c query.Conn) (any, error) { return query.Summary(ctx, c, f) })
	check("minutes partly complete: timeseries 5m", "itl_rollup_1m_site", func(c query.Conn) (any, error) { return query.Timeseries(ctx, c, f, 5*time.Minute) })
	check("minutes partly complete: cause timeseries 5m", "itl_rollup_1m_site", func(c query.Conn) (any, error) { return query.CauseTimeseries(ctx, c, f, 5*time.Minute) })
	check("minutes partly complete: heatmap 5m", "itl_rollup_1m_site", func(c query.Conn) (any, error) { return query.ITLHeatmap(ctx, c, f, 5*time.Minute) })
	check("minutes partly complete: timeseries 5m where 1", "", func(c query.Conn) (any, error) { return query.Timeseries(ctx, c, f1, 5*time.Minute) })
	f.Since = base.Add(2*time.Hour + 5*time.Minute)
	f.Until = mfrom.Add(-5 * time.Minute)
	check("minutes partly complete, all before it", "", func(c query.Conn) (any, error) { return query.Summary(ctx, c, f) })
}

// TestDailyRollupEqualsMinute: itl_rollup_1d_dim holds the minute rollup's
// rows summed per day and value of each dimension, and the reads that may
// take whole days from it (those merging histograms, with no time series or
// one in steps of whole days, at most one dimension named) read it for the whole UTC days of their
// range and answer what the minute table alone answers, with the daily
// table complete from the start or only from some day on.
func TestDailyRollupEqualsMinute(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	conn := db.Conn()
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	midnight := base.Truncate(24 * time.Hour) // the last one at or before base
	// Two inserts, so that the daily table has rows of a day in two parts.
	writeHours(t, conn, base, 60, 3, 4)
	writeHours(t, conn, base.Add(-5*time.Hour), 40, 2, 5)
	sameRows(t, conn)

	got, want := &tableConn{Conn: conn}, &tableConn{Conn: conn, minuteOnly: true}
	// check compares the answers and whether the read took days from the
	// daily table.
	check := func(name string, days bool, read func(c query.Conn) (any, error)) {
		t.Helper()
		if r := sameAnswer(t, got, want, name, read); strings.Contains(r, "itl_rollup_1d_dim") != days {
			t.Errorf("%s: read %q; the daily rollup read: %v, want %v", name, r, !days, days)
		}
	}
	day := 24 * time.Hour
	reads := func(label string, f query.Filter, wholeDay bool) {
		f1 := f
		f1.Where = map[string]string{"browser": "Chrome"}
		f2 := f
		f2.Where = map[string]string{"browser": "Chrome", "device": "mobile"}
		check(label+": summary", wholeDay, func(c query.Conn) (any, error) { return query.Summary(ctx, c, f) })
		check(label+": summary where 1", wholeDay, func(c query.Conn) (any, error) { return query.Summary(ctx, c, f1) })
		check(label+": summary where 2", false, func(c query.Conn) (any, error) { return query.Summary(ctx, c, f2) })
		check(label+": breakdown", wholeDay, func(c query.Conn) (any, error) { return query.Breakdown(ctx, c, f, "region") })
		check(label+": breakdown where the same", wholeDay, func(c query.Conn) (any, error) { return query.Breakdown(ctx, c, f1, "browser") })
		check(label+": breakdown where another", false, func(c query.Conn) (any, error) { return query.Breakdown(ctx, c, f1, "device") })
		check(label+": cause breakdown", false, func(c query.Conn) (any, error) { return query.CauseBreakdown(ctx, c, f, "release") })
		check(label+": timeseries 1d", wholeDay, func(c query.Conn) (any, error) { return query.Timeseries(ctx, c, f, day) })
		check(label+": timeseries where 1 2d", wholeDay, func(c query.Conn) (any, error) { return query.Timeseries(ctx, c, f1, 2*day) })
		check(label+": cause timeseries 1d", false, func(c query.Conn) (any, error) { return query.CauseTimeseries(ctx, c, f, day) })
		check(label+": heatmap where 1 1d", wholeDay, func(c query.Conn) (any, error) { return query.ITLHeatmap(ctx, c, f1, day) })
		check(label+": timeseries 6h", false, func(c query.Conn) (any, error) { return query.Timeseries(ctx, c, f, 6*time.Hour) })
	}
	for _, r := range []struct {
		name         string
		since, until time.Time
		wholeDay     bool
	}{
		{"one day, midnight to midnight", midnight.Add(-day), midnight, true},
		{"off the hour at both ends", base.Add(-58*time.Hour + 17*time.Minute + 20*time.Second), base.Add(43*time.Minute + 5*time.Second), true},
		{"until now", base.Add(-59*time.Hour + 30*time.Minute), time.Time{}, true},
		{"across midnight, under a day", midnight.Add(-20 * time.Hour), midnight.Add(3*time.Hour + 10*time.Minute), false},
	} {
		reads(r.name, query.Filter{Site: "h", Since: r.since, Until: r.until}, r.wholeDay)
	}

	// The daily table complete only from a day on, as after its migration
	// on a database with streams (all of them before that day): the days
	// before it are read from the hourly tables.
	from := midnight.Add(day) // after every stream written so far
	for _, q := range []string{"TRUNCATE TABLE itl_rollup_1d_dim", "TRUNCATE TABLE itl_rollup_1d_from"} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.Exec(ctx, "INSERT INTO itl_rollup_1d_from VALUES (?)", from); err != nil {
		t.Fatal(err)
	}
	writeHours(t, conn, from.Add(20*time.Hour), 12, 3, 6) // in the day from it
	f := query.Filter{Site: "h", Since: midnight.Add(-2*day + 7*time.Minute), Until: from.Add(day + 3*time.Minute)}
	reads("partly complete", f, true)
	f.Until = from.Add(22 * time.Hour)
	reads("partly complete, no whole day after it", f, false)
}

// TestWorstStreamsOncePerStream: WorstStreams (the first rows in the
// order, each stream's first kept, more asked for when copies left too
// few) lists what LIMIT 1 BY stream_id lists, copies of a stream included.
func TestWorstStreamsOncePerStream(t *testing.T) {
	db, _ := newDB(t)
	conn := db.Conn()
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	writeHours(t, conn, base, 4, 60, 3)
	// Copies of some streams (an unmerged ReplacingMergeTree keeps both
	// until it merges): the same rows once more, and one copy later.
	if err := conn.Exec(ctx, "INSERT INTO itl_streams SELECT * FROM itl_streams WHERE site = 'h' AND stalls > 0 LIMIT 30"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "INSERT INTO itl_streams SELECT * REPLACE (received_at + INTERVAL 1 SECOND AS received_at) FROM itl_streams WHERE site = 'h' AND stalls > 0 LIMIT 10"); err != nil {
		t.Fatal(err)
	}
	f := query.Filter{Site: "h", Since: base.Add(-4*time.Hour + 20*time.Minute), Until: base.Add(30 * time.Minute)}
	for order, col := range query.WorstOrders {
		for _, limit := range []int{1, 7, 50, query.MaxWorst} {
			got, err := query.WorstStreams(ctx, conn, f, order, limit)
			if err != nil {
				t.Fatalf("%s %d: %v", order, limit, err)
			}
			// The one-statement read, ids and times only (the details are
			// the rows').
			rows, err := conn.Query(ctx, "SELECT lower(hex(stream_id)), received_at FROM itl_streams WHERE site = ? AND received_at >= ? AND received_at < ?"+
				" ORDER BY "+col+" DESC, received_at DESC LIMIT 1 BY stream_id LIMIT ?", f.Site, f.Since, f.Until, limit)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for rows.Next() {
				var (
					id string
					at time.Time
				)
				if err := rows.Scan(&id, &at); err != nil {
					t.Fatal(err)
				}
				want = append(want, id+" "+at.UTC().Format(time.RFC3339Nano))
			}
			rows.Close()
			var have []string
			for _, b := range got {
				if _, err := hex.DecodeString(b.StreamID); err != nil {
					t.Fatal(err)
				}
				have = append(have, b.StreamID+" "+b.ReceivedAt.Format(time.RFC3339Nano))
			}
			if len(want) != limit {
				t.Fatalf("%s %d: the fixture has %d streams", order, limit, len(want))
			}
			if !reflect.DeepEqual(have, want) {
				t.Errorf("%s limit %d:\ngot  %v\nwant %v", order, limit, have, want)
			}
		}
	}
}

// TestWorstByTTFTWithoutFirstToken: order=ttft lists the largest TTFT
// first, a TTFT of 0 after every other, and the streams without a first
// token last, each group latest first.
func TestWorstByTTFTWithoutFirstToken(t *testing.T) {
	db, _ := newDB(t)
	conn := db.Conn()
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	ttfts := []uint32{beacon.NoTime, 0, 300_000, beacon.NoTime, 0, 900_000}
	var streams []collector.Stream
	for i, ttft := range ttfts {
		r := synth{ttft: 100 * time.Millisecond, gaps: []time.Duration{20 * time.Millisecond, 30 * time.Millisecond}}.record(t)
		r.TTFTUs = ttft
		streams = append(streams, collector.Stream{Record: r, Site: "z", ReceivedAt: base.Add(time.Duration(i) * time.Minute),
			Country: "DE", Region: "DE-BE", Browser: "Chrome", OS: "Linux", Device: "desktop", Release: "r1"})
	}
	if err := store.InsertDirect(ctx, conn, streams); err != nil {
		t.Fatal(err)
	}
	got, err := query.WorstStreams(ctx, conn, query.Filter{Site: "z", Since: base, Until: base.Add(time.Hour)}, "ttft", len(ttfts))
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, b := range got {
		ttft := "none"
		if b.TTFTMs != nil {
			ttft = strconv.FormatFloat(*b.TTFTMs, 'f', -1, 64)
		}
		have = append(have, b.ReceivedAt.Sub(base).String()+" "+ttft)
	}
	want := []string{"5m0s 900", "2m0s 300", "4m0s 0", "1m0s 0", "3m0s none", "0s none"}
	if !reflect.DeepEqual(have, want) {
		t.Errorf("order=ttft:\ngot  %v\nwant %v", have, want)
	}
}
