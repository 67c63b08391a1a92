package grafana_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/wasm/meter"
)

// TestPanelsReadTheCoarsestRollups: every panel and variable query answers
// what itl_rollup_1m alone answers, for ranges on and off the hour and
// within one hour, intervals of minutes and of whole hours, no variable
// picked, one, two, and a breakdown by a dimension with and without a
// variable; with the hourly tables complete only from an hour on and the
// per-site minute table from a minute on, and rows in them before those
// that must not be read. Then a marker row in each coarse table shows that
// each read takes the table it should, and no other.
func TestPanelsReadTheCoarsestRollups(t *testing.T) {
	t.Parallel() // a database of its own; it times nothing
	db := chtest.NewDB(t, store.Options{})
	conn := db.Conn()
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)

	// Streams every 13 minutes from 8 hours before base to 50 minutes
	// after, over two sites, three regions, browsers and models.
	regions := []string{"DE-BE", "FR-IDF", "US-CA"}
	browsers := []string{"Chrome", "Firefox", "Safari"}
	models := []string{"gpt-x", "claude-y", "m3"}
	var streams []collector.Stream
	for i, at := 0, base.Add(-8*time.Hour); at.Before(base.Add(50 * time.Minute)); i, at = i+1, at.Add(13*time.Minute) {
		s := seedStream{[]string{"shop", "shop", "other"}[i%3], regions[i%3], browsers[(i/3)%3], models[(i/9)%3], at,
			time.Duration(200+17*(i%11)) * time.Millisecond, cadence(9+i%7, time.Duration(20+i%9)*time.Millisecond, 300*time.Millisecond, 4+i%3),
			meter.Cause(1 + i%4), meter.Status(1 + i%2)}
		streams = append(streams, s.stream(t))
	}
	if err := store.InsertDirect(ctx, conn, streams); err != nil {
		t.Fatalf("insert: %v", err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The hourly tables complete from base−5h, the per-site minute table
	// from base−3h+17m; before each, a row they must not be read for (as
	// if they had missed streams).
	hourlyFrom, siteFrom := base.Add(-5*time.Hour), base.Add(-3*time.Hour+17*time.Minute)
	exec("INSERT INTO itl_rollup_1h_from VALUES (?)", hourlyFrom)
	exec("INSERT INTO itl_rollup_1m_site_from VALUES (?)", siteFrom)
	exec("INSERT INTO itl_rollup_1h (hour, site, region, browser, model, streams, stalls) VALUES (?, 'shop', 'DE-BE', 'Chrome', 'gpt-x', 7000000, 7)", base.Add(-6*time.Hour))
	exec("INSERT INTO itl_rollup_1h_dim (hour, site, dim, value, streams, stalls) VALUES (?, 'shop', '', '', 7000000, 7), (?, 'shop', 'region', 'DE-BE', 7000000, 7), (?, 'shop', 'os', 'Linux', 7000000, 7)",
		base.Add(-6*time.Hour), base.Add(-6*time.Hour), base.Add(-6*time.Hour))
	exec("INSERT INTO itl_rollup_1m_site (minute, site, streams, stalls) VALUES (?, 'shop', 7000000, 7)", base.Add(-3*time.Hour+5*time.Minute))

	dash := loadDashboard(t)
	type query struct{ name, sql string }
	var timed, untimed []query
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if tg.Format == formatTimeSeries {
				timed = append(timed, query{p.Title, tg.RawSQL})
			} else {
				untimed = append(untimed, query{p.Title, tg.RawSQL})
			}
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type == "query" {
			untimed = append(untimed, query{"variable " + v.Name, v.Query.(map[string]any)["rawSql"].(string)})
		}
	}

	ranges := []struct {
		name     string
		from, to time.Time
	}{
		{"on the hour", base.Add(-8 * time.Hour), base.Add(time.Hour)},
		{"off the hour", base.Add(-7*time.Hour + 17*time.Minute + 20*time.Second), base.Add(43*time.Minute + 5*time.Second)},
		{"within an hour", base.Add(-3*time.Hour + 2*time.Minute), base.Add(-3*time.Hour + 50*time.Minute)},
	}
	picks := []struct {
		name string
		vars map[string]varValue
	}{
		{"all", nil},
		{"one region", map[string]varValue{"region": {current: []string{"DE-BE"}, multi: true}}},
		{"two browsers", map[string]varValue{"browser": {current: []string{"Chrome", "Safari"}, multi: true}}},
		{"region and model", map[string]varValue{"region": {current: []string{"DE-BE", "US-CA"}, multi: true}, "model": {current: []string{"gpt-x"}, multi: true}}},
	}
	envOf := func(from, to time.Time, interval time.Duration, pick map[string]varValue, by string) expandEnv {
		vars := map[string]varValue{"site": {current: []string{"shop"}}, "group_by": {current: []string{by}}}
		for _, d := range grafanaDims() {
			vars[d.Key] = varValue{all: true, multi: true}
			if v, ok := pick[d.Key]; ok {
				vars[d.Key] = v
			}
		}
		return expandEnv{from: from, to: to, interval: interval, vars: vars}
	}
	type run struct {
		name string
		env  expandEnv
		sql  string
	}
	// Every kind of read over the whole matrix: the total (no time), the
	// streams by status (a time series: each interval) and the breakdown
	// (by a dimension with a variable and by one without); every other
	// panel and the variables over three corners of it.
	var runs []run
	full := func(q query) bool {
		return q.name == "Streams" || q.name == "Streams by status" || strings.Contains(q.sql, "${group_by}")
	}
	for _, q := range append(untimed, timed...) {
		if !strings.Contains(q.sql, "itl_rollup_1m_site") { // not read through rollupFrom
			continue
		}
		intervals := []time.Duration{time.Minute}
		if slices.ContainsFunc(timed, func(o query) bool { return o == q }) {
			intervals = []time.Duration{5 * time.Minute, time.Hour, 3 * time.Hour}
		}
		bys := []string{"region"}
		if strings.Contains(q.sql, "${group_by}") {
			bys = append(bys, "os")
		}
		for ri, r := range ranges {
			for pi, p := range picks {
				for ii, iv := range intervals {
					for _, by := range bys {
						corner := ri == pi && ii == min(ri, len(intervals)-1) || ri == 1 && pi == 3 && ii == len(intervals)-1
						if !full(q) && !corner || strings.HasPrefix(q.name, "variable ") && p.vars != nil {
							continue
						}
						runs = append(runs, run{fmt.Sprintf("%s, %s, every %s, by %s: %s", r.name, p.name, iv, by, q.name), envOf(r.from, r.to, iv, p.vars, by), q.sql})
					}
				}
			}
		}
	}
	answer := func(r run) result {
		t.Helper()
		sql, err := r.env.expand(r.sql)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		return run1(t, conn, sql)
	}
	got := make([]result, len(runs))
	for i, r := range runs {
		got[i] = answer(r)
	}
	// Which table each read takes: a marker of distinct size in each
	// coarse table, at an hour every range over whole hours reads from the
	// hourly tables (base−2h) and a minute the per-site table answers within
	// an hour (base−3h+30m). The one in itl_rollup_1h reaches
	// itl_rollup_1h_dim too, through its view (its values are those of the
	// other markers). Each read is taken with the two *_from tables and
	// without them (the minute table only then).
	markers := map[string]uint64{"1h_dim ''": 1_000, "1h_dim region": 20_000, "1h_dim browser": 300_000, "1h_dim os": 4_000_000,
		"1h": 50_000_000, "1m_site": 600_000_000}
	hc, mc := base.Add(-2*time.Hour), base.Add(-3*time.Hour+30*time.Minute)
	exec("INSERT INTO itl_rollup_1h_dim (hour, site, dim, value, streams) VALUES (?, 'shop', '', '', ?), (?, 'shop', 'region', 'DE-BE', ?), (?, 'shop', 'browser', 'Chrome', ?), (?, 'shop', 'os', 'Linux', ?)",
		hc, markers["1h_dim ''"], hc, markers["1h_dim region"], hc, markers["1h_dim browser"], hc, markers["1h_dim os"])
	exec("INSERT INTO itl_rollup_1h (hour, site, region, browser, model, os, streams) VALUES (?, 'shop', 'DE-BE', 'Chrome', 'gpt-x', 'Linux', ?)", hc, markers["1h"])
	exec("INSERT INTO itl_rollup_1m_site (minute, site, streams) VALUES (?, 'shop', ?)", mc, markers["1m_site"])
	streamsOf := func(res result) uint64 {
		var n float64
		if i := res.col("streams"); i >= 0 {
			for _, row := range res.rows {
				v, _ := num(row[i])
				n += v
			}
		}
		return uint64(n)
	}
	streamsPanel := untimed[0].sql
	breakdown := ""
	for _, q := range untimed {
		if strings.Contains(q.sql, "${group_by}") {
			breakdown = q.sql
		}
	}
	if !strings.Contains(streamsPanel, "sum(streams) AS streams") || breakdown == "" {
		t.Fatal("BUG: the streams panel or the breakdown not found")
	}
	for _, c := range []struct {
		name     string
		rng      int
		pick     int
		by       string // "" for the streams panel, else the breakdown
		interval time.Duration
		marker   string // the table read beyond the minute one, "" none
	}{
		{"whole hours, nothing picked", 0, 0, "", 0, "1h_dim ''"},
		{"whole hours, off the hour, nothing picked", 1, 0, "", 0, "1h_dim ''"},
		{"whole hours, one region", 0, 1, "", 0, "1h_dim region"},
		{"whole hours, two browsers", 1, 2, "", 0, "1h_dim browser"},
		{"whole hours, region and model", 0, 3, "", 0, "1h"},
		{"within an hour, nothing picked", 2, 0, "", 0, "1m_site"},
		{"within an hour, one region", 2, 1, "", 0, ""},
		{"breakdown by os, nothing picked", 0, 0, "os", 0, "1h_dim os"},
		{"breakdown by region, nothing picked", 1, 0, "region", 0, "1h_dim region"},
		{"breakdown by os, one region", 0, 1, "os", 0, "1h"},
		{"breakdown within an hour", 2, 0, "os", 0, ""},
	} {
		sql := streamsPanel
		if c.by != "" {
			sql = breakdown
		}
		r := run{c.name, envOf(ranges[c.rng].from, ranges[c.rng].to, time.Minute, picks[c.pick].vars, c.by), sql}
		if c.by == "" {
			r.env.vars["group_by"] = varValue{current: []string{"region"}}
		}
		withMarkers := streamsOf(answer(r))
		exec("TRUNCATE TABLE itl_rollup_1h_from")
		exec("TRUNCATE TABLE itl_rollup_1m_site_from")
		minuteOnly := streamsOf(answer(r))
		exec("INSERT INTO itl_rollup_1h_from VALUES (?)", hourlyFrom)
		exec("INSERT INTO itl_rollup_1m_site_from VALUES (?)", siteFrom)
		want := markers[c.marker]
		if strings.HasPrefix(c.marker, "1h_dim") {
			want += markers["1h"]
		}
		if got := withMarkers - minuteOnly; got != want {
			t.Errorf("%s: read %d streams beyond the minute table's, want %d (the marker of %q)", c.name, got, want, c.marker)
		}
	}

	// The minute table alone: the coarse tables emptied, and none says it
	// is complete.
	for _, table := range []string{"itl_rollup_1h_from", "itl_rollup_1m_site_from", "itl_rollup_1h", "itl_rollup_1h_dim", "itl_rollup_1m_site"} {
		exec("TRUNCATE TABLE " + table)
	}
	nonEmpty := 0
	for i, r := range runs {
		want := answer(r)
		if len(want.rows) > 0 {
			nonEmpty++
		}
		if !sameResult(got[i], want) {
			t.Errorf("%s: from the rollups\n%v\nfrom the minute table\n%v", r.name, got[i].rows, want.rows)
		}
	}
	if nonEmpty < len(runs)*3/4 {
		t.Fatalf("%d of %d reads answered rows: the seed does not cover the ranges", nonEmpty, len(runs))
	}
}

// run1 is run with the result's floats rounded (sums of floats added in
// another order differ in their last bits).
func run1(t *testing.T, conn driver.Conn, sql string) result {
	t.Helper()
	res := run(t, conn, sql)
	for _, row := range res.rows {
		for i, v := range row {
			if f, ok := v.(float64); ok && !math.IsNaN(f) && f != 0 {
				row[i] = float64(float32(f))
			}
		}
	}
	return res
}

func sameResult(a, b result) bool {
	return reflect.DeepEqual(a.cols, b.cols) && reflect.DeepEqual(a.rows, b.rows)
}
