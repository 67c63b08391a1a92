package grafana_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/hist"
	"github.com/itlmon/itlmon/wasm/meter"
)

func TestMain(m *testing.M) {
	chdb.MaybeRunChild()
	os.Exit(chtest.Main(m))
}

// seedStream is one synthetic stream, measured by wasm/meter as the browser
// module would.
type seedStream struct {
	site, region, browser, model string
	at                           time.Time
	ttft                         time.Duration
	gaps                         []time.Duration
	cause                        meter.Cause // the cause given to its stalls
	status                       meter.Status
}

func (s seedStream) stream(t *testing.T) collector.Stream {
	t.Helper()
	m := meter.New(meter.Options{ContentType: "text/event-stream"})
	ev := []byte(`data: {"choices":[{"index":0,"delta":{"content":"tok "}}]}` + "\n\n")
	at := meter.Duration(s.ttft)
	m.Feed(ev, at)
	for _, g := range s.gaps {
		at += meter.Duration(g)
		m.Feed(ev, at)
	}
	m.Feed([]byte("data: [DONE]\n\n"), at+meter.Millisecond)
	m.End(at+2*meter.Millisecond, s.status, 200)
	sum := m.Summary()

	var r beacon.Record
	rand.Read(r.StreamID[:])
	us := func(d meter.Duration) uint32 { return uint32(d / meter.Microsecond) }
	r.Model, r.ContentType, r.Format, r.Status, r.HTTPStatus = s.model, "text/event-stream", uint8(sum.Format), uint8(s.status), 200
	r.TTFBUs, r.TTFCUs, r.TTFTUs, r.DurationUs = us(sum.TTFB), us(sum.TTFC), us(sum.TTFT), us(sum.Duration)
	r.Events, r.ContentEvents, r.Tokens, r.TokensReported = uint32(sum.Events), uint32(sum.ContentEvents), uint32(sum.Tokens), sum.TokensReported
	r.Reads, r.Bytes = uint32(sum.Reads), uint64(sum.Bytes)
	r.GapP50Us, r.GapP95Us, r.GapP99Us, r.GapMaxUs = us(sum.GapP50), us(sum.GapP95), us(sum.GapP99), us(sum.GapMax)
	r.TPOTUs, r.TokensPerSec = us(sum.TPOTToken), float32(sum.TokensPerSec)
	r.Stalls, r.StalledUs = uint32(sum.Stalls), uint64(sum.StalledFor/meter.Microsecond)
	r.StallsByCause[s.cause], r.StalledByCause[s.cause] = r.Stalls, r.StalledUs
	r.Jank, r.Smooth = float32(sum.Jank), sum.Smooth
	r.ITL, r.ITLTokens = sum.ITL, sum.ITLTokens
	return collector.Stream{Record: r, Site: s.site, ReceivedAt: s.at, Country: s.region[:2], Region: s.region,
		Browser: s.browser, OS: "Linux", Device: "desktop", Release: "r1"}
}

func cadence(n int, every, hitch time.Duration, hitchEach int) []time.Duration {
	g := make([]time.Duration, n)
	for i := range g {
		g[i] = every + time.Duration(i%5)*time.Millisecond
		if hitchEach > 0 && i%hitchEach == hitchEach-1 {
			g[i] = hitch
		}
	}
	return g
}

// column is a result column: its name and ClickHouse type.
type column struct{ name, typ string }

type result struct {
	cols []column
	rows [][]any
}

// run executes sql and reads every row, each value as the driver scans it.
func run(t *testing.T, conn driver.Conn, sql string) result {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql)
	if err != nil {
		t.Fatalf("query: %v\n%s", err, sql)
	}
	defer rows.Close()
	var res result
	for _, ct := range rows.ColumnTypes() {
		res.cols = append(res.cols, column{ct.Name(), ct.DatabaseTypeName()})
	}
	for rows.Next() {
		vals := make([]any, len(res.cols))
		ptrs := make([]any, len(vals))
		for i, ct := range rows.ColumnTypes() {
			ptrs[i] = newScanValue(ct.ScanType())
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatalf("scan: %v", err)
		}
		for i, p := range ptrs {
			vals[i] = deref(p)
		}
		res.rows = append(res.rows, vals)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("rows: %v", err)
	}
	return res
}

func newScanValue(typ reflect.Type) any { return reflect.New(typ).Interface() }

// deref reads a scanned value; a NULL (a nil pointer of a Nullable column)
// reads nil.
func deref(p any) any {
	v := reflect.ValueOf(p).Elem()
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	return v.Interface()
}

func (r result) col(name string) int {
	return slices.IndexFunc(r.cols, func(c column) bool { return c.name == name })
}

// isTime, isNumber and isString: the ClickHouse types the plugin turns into
// a time, number or string field.
func isTime(typ string) bool { return strings.HasPrefix(typ, "DateTime") }
func isNumber(typ string) bool {
	typ = strings.TrimSuffix(strings.TrimPrefix(typ, "Nullable("), ")")
	return strings.HasPrefix(typ, "UInt") || strings.HasPrefix(typ, "Int") || strings.HasPrefix(typ, "Float")
}
func isString(typ string) bool {
	return typ == "String" || typ == "LowCardinality(String)"
}

func num(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, !math.IsNaN(x)
	case float32:
		return float64(x), true
	case uint64:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint32:
		return float64(x), true
	case nil:
		return 0, false
	}
	panic(fmt.Sprintf("BUG: grafana test: value %T", v))
}

// exactQuantile is numpy's default quantile of xs.
func exactQuantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	pos := q * float64(len(s)-1)
	k := int(pos)
	if k+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[k] + (s[k+1]-s[k])*(pos-float64(k))
}

// loadDashboard reads the committed dashboard JSON.
func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash dashboard
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return dash
}

// TestDashboardOnEngine loads the committed dashboard JSON, expands every
// panel's SQL and every variable query as Grafana and the plugin do, runs
// each on the real engine over streams seeded through the store's insert
// path, and checks the shapes and the numbers.
func TestDashboardOnEngine(t *testing.T) {
	t.Parallel() // a database of its own; it times nothing
	db := chtest.NewDB(t, store.Options{})
	conn := db.Conn()
	now := time.Now().UTC()

	var seeds []seedStream
	add := func(n int, s seedStream) {
		for i := range n {
			s := s
			s.ttft += time.Duration(i) * 7 * time.Millisecond
			seeds = append(seeds, s)
		}
	}
	// shop: Chrome in DE-BE smooth, Firefox in FR-IDF with 450 ms network
	// stalls, Safari in US-CA on another model with origin stalls, and two
	// aborted Chrome streams; other: a second site the filter must drop.
	add(12, seedStream{"shop", "DE-BE", "Chrome", "gpt-x", now.Add(-10 * time.Minute), 300 * time.Millisecond, cadence(39, 25*time.Millisecond, 0, 0), meter.CauseUnknown, meter.StatusComplete})
	add(6, seedStream{"shop", "FR-IDF", "Firefox", "gpt-x", now.Add(-4 * time.Minute), 800 * time.Millisecond, cadence(39, 25*time.Millisecond, 450*time.Millisecond, 10), meter.CauseNetwork, meter.StatusComplete})
	add(4, seedStream{"shop", "US-CA", "Safari", "claude-y", now.Add(-7 * time.Minute), 500 * time.Millisecond, cadence(19, 40*time.Millisecond, 300*time.Millisecond, 5), meter.CauseOrigin, meter.StatusComplete})
	add(2, seedStream{"shop", "DE-BE", "Chrome", "gpt-x", now.Add(-2 * time.Minute), 350 * time.Millisecond, cadence(9, 30*time.Millisecond, 0, 0), meter.CauseUnknown, meter.StatusAborted})
	add(3, seedStream{"other", "US-NY", "Chrome", "gpt-x", now.Add(-5 * time.Minute), 5 * time.Second, cadence(9, time.Second, 0, 0), meter.CauseUnknown, meter.StatusComplete})
	streams := make([]collector.Stream, len(seeds))
	for i, s := range seeds {
		streams[i] = s.stream(t)
	}
	if err := store.InsertDirect(context.Background(), conn, streams); err != nil {
		t.Fatalf("insert: %v", err)
	}

	// Two joined origin timelines (version 1 rows of itl_origin, as
	// collector/join writes them; its materialized view fills
	// itl_origin_1m): the path added 120 and 80 ms to TTFT, 4 and 2 ms to
	// the ITL p50.
	if err := conn.Exec(context.Background(), `INSERT INTO itl_origin
		(received_at, site, origin_id, version, started_at, client_received_at, country, region, browser, os, device, model, release,
		 added_ttft_us, added_p50_us, added_p99_us)
		VALUES (?, 'shop', 'o1', 1, ?, ?, 'DE', 'DE-BE', 'Chrome', 'Linux', 'desktop', 'gpt-x', 'r1', 120000, 4000, 9000),
		       (?, 'shop', 'o2', 1, ?, ?, 'FR', 'FR-IDF', 'Firefox', 'Linux', 'desktop', 'gpt-x', 'r1', 80000, 2000, 5000)`,
		now.Add(-9*time.Minute), now.Add(-9*time.Minute), now.Add(-9*time.Minute),
		now.Add(-9*time.Minute), now.Add(-9*time.Minute), now.Add(-9*time.Minute)); err != nil {
		t.Fatalf("insert origin rows: %v", err)
	}

	dash := loadDashboard(t)

	// The dashboard as a user opens it: last hour, site shop, Chrome and
	// Firefox picked, every region and model, breakdown by browser.
	env := expandEnv{from: now.Add(-time.Hour), to: now.Add(time.Minute), interval: time.Minute, vars: map[string]varValue{
		"site":     {current: []string{"shop"}},
		"region":   {all: true, multi: true},
		"browser":  {current: []string{"Chrome", "Firefox"}, multi: true},
		"model":    {all: true, multi: true},
		"group_by": {current: []string{"browser"}},
	}}
	want := func(pick func(seedStream) bool) (n int, gaps, ttft []float64, stalls map[meter.Cause]int, aborted int) {
		stalls = map[meter.Cause]int{}
		for i, s := range seeds {
			if !pick(s) {
				continue
			}
			n++
			for _, g := range s.gaps {
				gaps = append(gaps, float64(g)/float64(time.Millisecond))
			}
			ttft = append(ttft, float64(s.ttft)/float64(time.Millisecond))
			stalls[s.cause] += int(streams[i].Stalls)
			if s.status == meter.StatusAborted {
				aborted++
			}
		}
		return
	}
	picked := func(s seedStream) bool { return s.site == "shop" && (s.browser == "Chrome" || s.browser == "Firefox") }
	nPicked, gapsPicked, _, stallsPicked, abortedPicked := want(picked)

	// Variable queries first: their values fill the variables (All = every
	// value they return).
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := v.Query.(map[string]any)
		sql, err := env.expand(q["rawSql"].(string))
		if err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		res := run(t, conn, sql)
		if len(res.cols) != 1 || !isString(res.cols[0].typ) {
			t.Fatalf("variable %s: columns %v, want one string column", v.Name, res.cols)
		}
		var got []string
		for _, r := range res.rows {
			got = append(got, r[0].(string))
		}
		wantVals := map[string][]string{"site": {"other", "shop"}, "region": {"DE-BE", "FR-IDF", "US-CA"},
			"browser": {"Chrome", "Firefox", "Safari"}, "model": {"claude-y", "gpt-x"}}[v.Name]
		if !slices.Equal(got, wantVals) {
			t.Errorf("variable %s = %q, want %q", v.Name, got, wantVals)
		}
		cur := env.vars[v.Name]
		cur.values = got
		env.vars[v.Name] = cur
	}

	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			t.Run(p.Title, func(t *testing.T) {
				if tg.EditorType != "sql" || tg.Datasource.Type != "grafana-clickhouse-datasource" {
					t.Fatalf("target %+v: want the plugin's SQL editor", tg)
				}
				sql, err := env.expand(tg.RawSQL)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(sql, "$") {
					t.Fatalf("unexpanded variable or macro left:\n%s", sql)
				}
				res := run(t, conn, sql)
				if len(res.rows) == 0 {
					t.Fatalf("no rows:\n%s", sql)
				}
				checkShape(t, tg.Format, res)
				checkValues(t, p.ID, res, nPicked, gapsPicked, stallsPicked, abortedPicked)
			})
		}
	}
}

// checkShape: a time series query returns a time column named time and
// numbers; a table returns strings and numbers.
func checkShape(t *testing.T, format int, res result) {
	t.Helper()
	for i, c := range res.cols {
		switch {
		case format == formatTimeSeries && i == 0:
			if c.name != "time" || !isTime(c.typ) {
				t.Errorf("first column %s %s, want time DateTime", c.name, c.typ)
			}
		case format == formatTable && c.name == "key":
			if !isString(c.typ) {
				t.Errorf("column key %s, want a string", c.typ)
			}
		default:
			if !isNumber(c.typ) {
				t.Errorf("column %s %s, want a number", c.name, c.typ)
			}
		}
	}
	if format == formatTimeSeries {
		for i := 1; i < len(res.rows); i++ {
			if !res.rows[i][0].(time.Time).After(res.rows[i-1][0].(time.Time)) {
				t.Errorf("times not ascending at row %d", i)
			}
		}
	}
}

// checkValues compares what each panel shows with what was seeded.
func checkValues(t *testing.T, panelID int, res result, n int, gaps []float64, stalls map[meter.Cause]int, aborted int) {
	t.Helper()
	sumCol := func(name string) float64 {
		i := res.col(name)
		if i < 0 {
			t.Fatalf("no column %s in %v", name, res.cols)
		}
		var s float64
		for _, r := range res.rows {
			v, _ := num(r[i])
			s += v
		}
		return s
	}
	switch panelID {
	case 1: // Streams
		if got := sumCol("streams"); got != float64(n) {
			t.Errorf("streams = %v, want %d seeded", got, n)
		}
	case 5: // Stalls per cause
		for c, name := range map[meter.Cause]string{meter.CauseNetwork: "network", meter.CauseOrigin: "origin", meter.CausePage: "page", meter.CauseUnknown: "unknown"} {
			if got := sumCol(name); got != float64(stalls[c]) {
				t.Errorf("%s stalls = %v, want %d", name, got, stalls[c])
			}
		}
		if stalls[meter.CauseNetwork] == 0 {
			t.Error("the seed has no network stalls: the check above proves nothing")
		}
	case 9: // Streams by status
		if got := sumCol("aborted"); got != float64(aborted) {
			t.Errorf("aborted = %v, want %d", got, aborted)
		}
		if got := sumCol("complete") + sumCol("aborted") + sumCol("error") + sumCol("other"); got != float64(n) {
			t.Errorf("streams by status add up to %v, want %d", got, n)
		}
	case 10: // What the path added: both joined streams in one minute.
		if len(res.rows) != 1 {
			t.Fatalf("%d rows, want 1", len(res.rows))
		}
		if ttft, _ := num(res.rows[0][res.col("added_ttft_ms")]); ttft != 100 {
			t.Errorf("added TTFT = %v ms, want 100 (mean of 120 and 80)", ttft)
		}
		if itl, _ := num(res.rows[0][res.col("added_itl_p50_ms")]); itl != 3 {
			t.Errorf("added ITL p50 = %v ms, want 3", itl)
		}
	case 11: // Breakdown by browser: one row per picked browser; all rows
		// together are the picked streams.
		if got := sumCol("streams"); got != float64(n) {
			t.Errorf("breakdown streams = %v, want %d", got, n)
		}
		var keys []string
		for _, r := range res.rows {
			keys = append(keys, r[res.col("key")].(string))
		}
		if want := []string{"Chrome", "Firefox"}; !slices.Equal(keys, want) {
			t.Errorf("breakdown keys = %q, want %q (largest first)", keys, want)
		}
	case 3: // ITL quantiles, one interval per seeded minute: merged over
		// the range they are checked through the breakdown; here each
		// row's p50 ≤ p95 ≤ p99 and all lie within the seeded gaps.
		lo, hi := slices.Min(gaps), slices.Max(gaps)
		for _, r := range res.rows {
			p50, _ := num(r[1])
			p95, _ := num(r[2])
			p99, _ := num(r[3])
			if !(p50 <= p95 && p95 <= p99) {
				t.Errorf("%v: p50 %v, p95 %v, p99 %v not ordered", r[0], p50, p95, p99)
			}
			if p50 < lo*(1-hist.RelativeError) || p99 > hi*(1+hist.RelativeError) {
				t.Errorf("%v: quantiles %v..%v outside the seeded gaps %v..%v", r[0], p50, p99, lo, hi)
			}
		}
	}
}

// TestQuantileSQL: the dashboard's quantile and tokens/s expressions agree
// with the exact statistics of the seeded values within hist.RelativeError,
// over one set of streams (a breakdown row).
func TestQuantileSQL(t *testing.T) {
	t.Parallel() // a database of its own; it times nothing
	db := chtest.NewDB(t, store.Options{})
	conn := db.Conn()
	now := time.Now().UTC()
	var streams []collector.Stream
	var gaps, ttfts, tps []float64
	for i := range 10 { // even: the medians interpolate between two streams
		s := seedStream{"q", "DE-BE", "Chrome", "m", now.Add(-time.Duration(i) * time.Minute), time.Duration(200+37*i) * time.Millisecond,
			cadence(29+i, time.Duration(15+3*i)*time.Millisecond, 260*time.Millisecond, 7), meter.CauseUnknown, meter.StatusComplete}
		st := s.stream(t)
		streams = append(streams, st)
		for _, g := range s.gaps {
			gaps = append(gaps, float64(g)/1e6)
		}
		ttfts = append(ttfts, float64(s.ttft)/1e6)
		tps = append(tps, float64(st.TokensPerSec))
	}
	if err := store.InsertDirect(context.Background(), conn, streams); err != nil {
		t.Fatalf("insert: %v", err)
	}
	sql := `SELECT itl_q[1], itl_q[2], itl_q[3], ttft_q[1], tps FROM (SELECT sumMap(itl) AS ih, sum(itl_zero) AS iz,
  sumMap(ttft) AS th, sum(ttft_zero) AS tz, sumMap(tpot) AS ph, sumMap(tpot_sum) AS ps, sum(tpot_zero) AS pz,
  ` + quantilesMs("ih", "iz", 0.5, 0.95, 0.99) + ` AS itl_q,
  ` + quantilesMs("th", "tz", 0.5) + ` AS ttft_q,
  ` + tokensPerSec("ph", "ps", "pz") + ` AS tps
FROM itl_rollup_1m WHERE site = 'q')`
	res := run(t, conn, sql)
	if len(res.rows) != 1 {
		t.Fatalf("%d rows", len(res.rows))
	}
	r := res.rows[0]
	for i, c := range []struct {
		name string
		want float64
	}{
		{"itl p50", exactQuantile(gaps, 0.5)}, {"itl p95", exactQuantile(gaps, 0.95)}, {"itl p99", exactQuantile(gaps, 0.99)},
		{"ttft p50", exactQuantile(ttfts, 0.5)}, {"tokens/s p50", exactQuantile(tps, 0.5)},
	} {
		got, ok := num(r[i])
		if !ok || math.Abs(got-c.want) > hist.RelativeError*c.want {
			t.Errorf("%s = %v, want %v ±%.2f%%", c.name, r[i], c.want, hist.RelativeError*100)
		}
	}
}
