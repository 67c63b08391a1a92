package query_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/gate"
	"github.com/itlmon/itlmon/collector/httpapi"
	"github.com/itlmon/itlmon/collector/query"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/hist"
	"github.com/itlmon/itlmon/wasm/meter"
	"github.com/itlmon/itlmon/web"
)

func TestMain(m *testing.M) {
	chdb.MaybeRunChild()
	code := chtest.Main(m)
	closeBrowser()
	os.Exit(code)
}

var dbSeq atomic.Int64

// newDB opens a fresh, migrated database on the real engine (chtest) and
// returns it and its DSN.
func newDB(t *testing.T) (*store.DB, string) {
	t.Helper()
	name := fmt.Sprintf("query_test_%d", dbSeq.Add(1))
	db := chtest.NewDB(t, store.Options{Database: name})
	return db, "clickhouse://" + chtest.Engine(t).NativeAddr() + "/" + name
}

// synth is one synthetic stream: content events at ttft, then every gap.
type synth struct {
	ttft time.Duration
	gaps []time.Duration
}

// record measures s with wasm/meter, exactly as the browser module would, and
// returns the beacon record.
func (s synth) record(t *testing.T) beacon.Record {
	t.Helper()
	m := meter.New(meter.Options{ContentType: "text/event-stream"})
	ev := []byte(`data: {"choices":[{"index":0,"delta":{"content":"tok "}}]}` + "\n\n")
	at := meter.Duration(s.ttft)
	m.Feed(ev, at)
	for _, g := range s.gaps {
		at += meter.Duration(g)
		m.Feed(ev, at)
	}
	usage := fmt.Sprintf(`data: {"choices":[],"usage":{"completion_tokens":%d}}`+"\n\ndata: [DONE]\n\n", len(s.gaps)+1)
	m.Feed([]byte(usage), at+meter.Millisecond)
	m.End(at+2*meter.Millisecond, meter.StatusComplete, 200)
	return recordOf(m.Summary())
}

// recordOf fills a beacon record from a meter summary as the browser module
// does.
func recordOf(sum meter.Summary) beacon.Record {
	var r beacon.Record
	rand.Read(r.StreamID[:])
	us := func(d meter.Duration) uint32 { return uint32(d / meter.Microsecond) }
	r.Model, r.ContentType, r.Format, r.Status, r.HTTPStatus = "gpt-x", "text/event-stream", uint8(sum.Format), uint8(sum.Status), 200
	r.TTFBUs, r.TTFCUs, r.TTFTUs, r.DurationUs = us(sum.TTFB), us(sum.TTFC), us(sum.TTFT), us(sum.Duration)
	r.Events, r.ContentEvents, r.Tokens, r.TokensReported = uint32(sum.Events), uint32(sum.ContentEvents), uint32(sum.Tokens), sum.TokensReported
	r.Reads, r.Bytes = uint32(sum.Reads), uint64(sum.Bytes)
	r.GapP50Us, r.GapP95Us, r.GapP99Us, r.GapMaxUs = us(sum.GapP50), us(sum.GapP95), us(sum.GapP99), us(sum.GapMax)
	r.TPOTUs, r.TokensPerSec = us(sum.TPOTToken), float32(sum.TokensPerSec)
	r.Stalls, r.StalledUs = uint32(sum.Stalls), uint64(sum.StalledFor/meter.Microsecond)
	r.Jank, r.Smooth = float32(sum.Jank), sum.Smooth
	r.ITL, r.ITLTokens = sum.ITL, sum.ITLTokens
	r.EventsPerRead, r.MaxEventsPerRead = float32(sum.EventsPerRead), uint32(sum.MaxEventsPerRead)
	r.BytesPerRead, r.SubFloorShare = float32(sum.BytesPerRead), float32(sum.SubFloorShare)
	return r
}

func steady(n int, every time.Duration) []time.Duration {
	g := make([]time.Duration, n)
	for i := range g {
		g[i] = every + time.Duration(i%5)*time.Millisecond // 25..29 ms
	}
	return g
}

func hitchy(n int, every, hitch time.Duration, each int) []time.Duration {
	g := steady(n, every)
	for i := each - 1; i < n; i += each {
		g[i] = hitch
	}
	return g
}

// fixture is the data of the real-engine tests.
type fixture struct {
	conn                 query.Conn
	dsn                  string
	chrome, firefox      []synth
	chromeAt, firefoxAt  time.Time
	chromeTPS, firefoxTP []float64
}

func writeFixture(t *testing.T) *fixture {
	t.Helper()
	db, dsn := newDB(t)
	now := time.Now().UTC()
	f := &fixture{conn: db.Conn(), dsn: dsn, chromeAt: now.Add(-10 * time.Minute), firefoxAt: now.Add(-3 * time.Minute)}
	var streams []collector.Stream
	add := func(site, browser, country string, at time.Time, s synth) float64 {
		r := s.record(t)
		streams = append(streams, collector.Stream{Record: r, Site: site, ReceivedAt: at,
			Country: country, Region: country + "-X", Browser: browser, OS: "Linux", Device: "desktop", Release: "r1"})
		return float64(r.TokensPerSec)
	}
	for i := range 12 {
		s := synth{ttft: 300*time.Millisecond + time.Duration(i)*10*time.Millisecond, gaps: steady(39, 25*time.Millisecond)}
		f.chrome = append(f.chrome, s)
		f.chromeTPS = append(f.chromeTPS, add("shop", "Chrome", "DE", f.chromeAt, s))
	}
	for i := range 6 {
		s := synth{ttft: 800*time.Millisecond + time.Duration(i)*time.Millisecond, gaps: hitchy(39, 25*time.Millisecond, 450*time.Millisecond, 10)}
		f.firefox = append(f.firefox, s)
		f.firefoxTP = append(f.firefoxTP, add("shop", "Firefox", "FR", f.firefoxAt, s))
	}
	for range 3 {
		add("other", "Safari", "US", now.Add(-time.Minute), synth{ttft: 5 * time.Second, gaps: steady(9, time.Second)})
	}
	if err := store.InsertDirect(context.Background(), db.Conn(), streams); err != nil {
		t.Fatalf("insert: %v", err)
	}
	return f
}

// exact are the exact statistics of synthetic streams, from their raw inputs.
func exact(ss []synth) (gaps, ttft []float64) {
	for _, s := range ss {
		ttft = append(ttft, float64(s.ttft)/1e6)
		for _, g := range s.gaps {
			gaps = append(gaps, float64(g)/1e6)
		}
	}
	return gaps, ttft
}

func msOf(d time.Duration) float64 { return float64(d) / 1e6 }

func within(t *testing.T, name string, got, want, rel float64) {
	t.Helper()
	if math.Abs(got-want) > rel*math.Abs(want)+1e-9 {
		t.Errorf("%s = %v, want %v (±%.2f%%)", name, got, want, rel*100)
	}
}

// withinTPS checks a tokens/s median: the report gives it to a thousandth
// (Report.Finish), so it may differ from the exact median by that rounding
// plus the relative error of the arithmetic that reached it.
func withinTPS(t *testing.T, name string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 0.0005+1e-6*math.Abs(want) {
		t.Errorf("%s = %v, want %v to a thousandth", name, got, want)
	}
	if r := math.Round(got*1000) / 1000; r != got {
		t.Errorf("%s = %v, not rounded to a thousandth", name, got)
	}
}

func TestSummaryBreakdownTimeseries(t *testing.T) {
	f := writeFixture(t)
	ctx := context.Background()
	filter := query.Filter{Site: "shop", Since: time.Now().Add(-time.Hour)}

	all := append(slices.Clone(f.chrome), f.firefox...)
	gaps, ttfts := exact(all)
	rep, err := query.Summary(ctx, f.conn, filter)
	if err != nil {
		t.Fatalf("summary: %v", err)
	}
	if got, want := rep.Streams, int64(18); got != want {
		t.Fatalf("streams = %d, want %d", got, want)
	}
	if got, want := rep.ITL.Count, uint64(len(gaps)); got != want {
		t.Errorf("ITL count = %d, want %d", got, want)
	}
	if got, want := rep.Tokens, int64(18*40); got != want {
		t.Errorf("tokens = %d, want %d", got, want)
	}
	rel := hist.RelativeError
	within(t, "ITL p50", msOf(rep.ITL.P50), gate.Percentile(gaps, 50), rel)
	within(t, "ITL p95", msOf(rep.ITL.P95), gate.Percentile(gaps, 95), rel)
	within(t, "ITL p99", msOf(rep.ITL.P99), gate.Percentile(gaps, 99), rel)
	within(t, "ITL max", msOf(rep.ITL.Max), 450, 1e-9)
	within(t, "TTFT p50", msOf(rep.TTFT.P50), gate.Percentile(ttfts, 50), rel)
	within(t, "TTFT p95", msOf(rep.TTFT.P95), gate.Percentile(ttfts, 95), rel)
	withinTPS(t, "tokens/s p50", rep.TokensPerSecP50, gate.Percentile(append(slices.Clone(f.chromeTPS), f.firefoxTP...), 50))
	if got, want := rep.Stalls, int64(6*3); got != want {
		t.Errorf("stalls = %d, want %d", got, want)
	}
	within(t, "stall share", rep.StallShare, 18.0/float64(len(gaps)), 1e-12)

	// A where filter narrows to one browser.
	ff := filter
	ff.Where = map[string]string{"browser": "Firefox", "country": "FR"}
	fx, err := query.Summary(ctx, f.conn, ff)
	if err != nil {
		t.Fatalf("summary firefox: %v", err)
	}
	fgaps, _ := exact(f.firefox)
	if got, want := fx.Streams, int64(6); got != want {
		t.Errorf("firefox streams = %d, want %d", got, want)
	}
	within(t, "firefox ITL p99", msOf(fx.ITL.P99), gate.Percentile(fgaps, 99), rel)
	if fx.Verdict != "JANKY" {
		t.Errorf("firefox verdict = %s, want JANKY", fx.Verdict)
	}

	// Values never become SQL: quotes match nothing and break nothing.
	for _, evil := range []query.Filter{
		{Site: "shop' OR '1'='1", Since: filter.Since},
		{Site: "shop", Since: filter.Since, Where: map[string]string{"browser": "x' OR 1=1 --"}},
	} {
		r, err := query.Summary(ctx, f.conn, evil)
		if err != nil || r.Streams != 0 {
			t.Errorf("summary(%+v) = %d streams, %v; want 0, nil", evil, r.Streams, err)
		}
	}
	_, err = query.Summary(ctx, f.conn, query.Filter{Site: "shop", Since: filter.Since, Where: map[string]string{"colour; DROP TABLE itl_streams": "x"}})
	if !errors.Is(err, query.ErrBadFilter) || !strings.Contains(err.Error(), "browser, colo, country, device") {
		t.Errorf("unknown dimension: err = %v, want ErrBadFilter listing the dimensions", err)
	}

	groups, err := query.Breakdown(ctx, f.conn, filter, "browser")
	if err != nil {
		t.Fatalf("breakdown: %v", err)
	}
	if len(groups) != 2 || groups[0].Key != "Chrome" || groups[1].Key != "Firefox" {
		t.Fatalf("breakdown keys = %+v, want Chrome, Firefox", groups)
	}
	cgaps, _ := exact(f.chrome)
	within(t, "chrome ITL p99", msOf(groups[0].Report.ITL.P99), gate.Percentile(cgaps, 99), rel)
	withinTPS(t, "chrome tokens/s", groups[0].Report.TokensPerSecP50, gate.Percentile(f.chromeTPS, 50))
	withinTPS(t, "firefox tokens/s", groups[1].Report.TokensPerSecP50, gate.Percentile(f.firefoxTP, 50))
	if groups[0].Report.Verdict != "SMOOTH" || groups[1].Report.Verdict != "JANKY" {
		t.Errorf("verdicts = %s, %s; want SMOOTH, JANKY", groups[0].Report.Verdict, groups[1].Report.Verdict)
	}

	pts, err := query.Timeseries(ctx, f.conn, filter, time.Minute)
	if err != nil {
		t.Fatalf("timeseries: %v", err)
	}
	if len(pts) != 2 {
		t.Fatalf("timeseries has %d points, want 2: %+v", len(pts), pts)
	}
	if got, want := pts[0].T, f.chromeAt.Truncate(time.Minute); !got.Equal(want) {
		t.Errorf("first point at %v, want %v", got, want)
	}
	if pts[0].Streams != 12 || pts[1].Streams != 6 || pts[1].ITLP99 < 400*time.Millisecond {
		t.Errorf("points = %+v, want 12 smooth then 6 with a ~450 ms p99", pts)
	}
	// Each point is the summary of its step (the series reads fewer
	// columns).
	for _, p := range pts {
		step := filter
		step.Since, step.Until = p.T, p.T.Add(time.Minute)
		r, err := query.Summary(ctx, f.conn, step)
		if err != nil {
			t.Fatal(err)
		}
		want := query.Point{T: p.T, Streams: r.Streams, TTFTP50: r.TTFT.P50, TTFTP95: r.TTFT.P95, ITLP50: r.ITL.P50, ITLP95: r.ITL.P95,
			ITLP99: r.ITL.P99, StallShare: r.StallShare, Jank: r.Jank}
		if p != want || p.ITLP50 == 0 || p.TTFTP50 == 0 || p.StallShare == 0 && p.Streams == 6 {
			t.Errorf("point %+v, the summary of its minute %+v", p, want)
		}
	}

	sites, err := query.Sites(ctx, f.conn, time.Now().Add(-time.Hour))
	if err != nil || !slices.Equal(sites, []string{"other", "shop"}) {
		t.Errorf("sites = %v, %v; want [other shop]", sites, err)
	}
}

func TestGateRUM(t *testing.T) {
	f := writeFixture(t)
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := gate.Main(context.Background(), append([]string{"rum"}, args...), gate.Env{Stdout: &out, Stderr: &errb,
			Getenv: func(string) string { return "" }})
		return code, out.String(), errb.String()
	}
	for _, tc := range []struct {
		name string
		args []string
		want int
		out  string
	}{
		{"smooth browser passes", []string{"--site", "shop", "--where", "browser=Chrome"}, gate.ExitPass, "PASS: all 3 checks passed"},
		{"stuttering browser fails", []string{"--site", "shop", "--where", "browser=Firefox", "--where", "country=FR"}, gate.ExitFail, "ITL p99"},
		{"whole site fails p99", []string{"--site", "shop", "--since", "30m"}, gate.ExitFail, "--max-itl-p99"},
		{"days", []string{"--site", "shop", "--since", "2d", "--where", "browser=Chrome"}, gate.ExitPass, "site=shop since 48h"},
		{"ttft gate", []string{"--site", "shop", "--where", "browser=Chrome", "--max-ttft-p95", "200ms"}, gate.ExitFail, "TTFT p95"},
		{"no data", []string{"--site", "nosuch"}, gate.ExitUsage, "0 streams match"},
		{"unknown where key", []string{"--site", "shop", "--where", "colour=red"}, gate.ExitUsage, "allowed are browser, colo, country, device, model, os, region, release"},
		{"colo is a dimension", []string{"--site", "shop", "--where", "colo=FRA"}, gate.ExitUsage, "0 streams match site=shop since 1h colo=FRA"},
		{"no site", []string{}, gate.ExitUsage, "--site is required"},
		{"unreachable", []string{"--site", "shop", "--clickhouse", "clickhouse://127.0.0.1:1/x"}, gate.ExitUsage, "check --clickhouse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.name != "unreachable" {
				args = append(args, "--clickhouse", f.dsn)
			}
			code, out, errs := run(args...)
			if code != tc.want {
				t.Errorf("exit = %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.want, out, errs)
			}
			if !strings.Contains(out+errs, tc.out) {
				t.Errorf("output lacks %q:\n%s%s", tc.out, out, errs)
			}
		})
	}
	// The rum report is the probe's report: the same JSON.
	code, out, _ := run("--site", "shop", "--where", "browser=Firefox", "--json", "--clickhouse", f.dsn)
	var res struct {
		Source string         `json:"source"`
		Report map[string]any `json:"report"`
		Checks []gate.Check   `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != gate.ExitFail || res.Source != "rum" {
		t.Fatalf("json: exit %d, %v:\n%s", code, err, out)
	}
	failed := map[string]bool{}
	for _, c := range res.Checks {
		failed[c.Flag] = !c.Pass
	}
	if !failed["--max-itl-p99"] || !failed["--max-jank"] || failed["--min-tps-p50"] {
		t.Errorf("failed checks = %v, want p99 and jank, not tokens/s", failed)
	}
}

func TestDashboardAPI(t *testing.T) {
	f := writeFixture(t)
	mux := http.NewServeMux()
	httpapi.RegisterDashboard(mux, httpapi.DashboardConfig{Conn: f.conn})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	get := func(path string, v any) int {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if v != nil {
			if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
		return resp.StatusCode
	}
	var sum struct {
		Report struct {
			Streams int64 `json:"streams"`
			ITL     struct {
				P99 float64 `json:"p99_ms"`
			} `json:"itl"`
		} `json:"report"`
		Rows []struct {
			Key    string `json:"key"`
			Report struct {
				Streams int64  `json:"streams"`
				Verdict string `json:"verdict"`
			} `json:"report"`
		} `json:"rows"`
	}
	if code := get("/api/summary?site=shop&since=1h&by=browser", &sum); code != 200 {
		t.Fatalf("summary: %d", code)
	}
	if sum.Report.Streams != 18 || len(sum.Rows) != 2 || sum.Rows[0].Key != "Chrome" || sum.Rows[1].Report.Verdict != "JANKY" {
		t.Errorf("summary = %+v", sum)
	}
	var ts struct {
		StepS  int64 `json:"step_s"`
		Points []struct {
			Streams int64   `json:"streams"`
			P99     float64 `json:"itl_p99_ms"`
		} `json:"points"`
	}
	if code := get("/api/timeseries?site=shop&since=1h&where=browser%3DFirefox", &ts); code != 200 {
		t.Fatalf("timeseries: %d", code)
	}
	if ts.StepS != 60 || len(ts.Points) != 1 || ts.Points[0].Streams != 6 || ts.Points[0].P99 < 400 {
		t.Errorf("timeseries = %+v, want one point of 6 Firefox streams, p99 ~450 ms", ts)
	}
	// A site without data answers a valid, empty report (no NaN breaking the JSON).
	var empty struct {
		Report struct {
			Streams int64   `json:"streams"`
			TPS     float64 `json:"tokens_per_sec_p50"`
			Verdict string  `json:"verdict"`
		} `json:"report"`
	}
	if code := get("/api/summary?site=nosuch&since=1h&by=browser", &empty); code != 200 || empty.Report.Verdict != "NO DATA" {
		t.Errorf("empty summary: %d %+v", code, empty)
	}
	var sites struct{ Sites []string }
	if code := get("/api/sites", &sites); code != 200 || len(sites.Sites) != 2 {
		t.Errorf("sites: %d %v", code, sites.Sites)
	}
	for path, want := range map[string]int{
		"/api/summary?since=1h":                      400,
		"/api/summary?site=shop&since=forever":       400,
		"/api/summary?site=shop&where=colour%3Dred":  400,
		"/api/summary?site=shop&by=colour":           400,
		"/api/timeseries?site=shop&step=90s":         400,
		"/api/summary?site=shop&since=1h&until=2h":   400,
		"/api/summary?site=shop%27%20OR%201%3D1--":   200,
		"/api/timeseries?site=shop&since=7d&step=1h": 200,
	} {
		if got := get(path, nil); got != want {
			t.Errorf("GET %s = %d, want %d", path, got, want)
		}
	}
}

// BenchmarkRollupQueries measures the dashboard's reads over a day of
// rollup rows: 20,000 streams over 1,440 minutes and 60 dimension
// combinations (go test -run '^$' -bench Rollup ./collector/query).
func BenchmarkRollupQueries(b *testing.B) {
	ctx := context.Background()
	db := chtest.NewDB(b, store.Options{})
	now := time.Now().UTC()
	browsers := []string{"Chrome", "Firefox", "Safari", "Edge", "Samsung"}
	regions := []string{"DE-BE", "US-CA", "IN-MH", "BR-SP"}
	models := []string{"m-small", "m-large", "m-code"}
	const n = 20000
	streams := make([]collector.Stream, 0, n)
	for i := range n {
		var r beacon.Record
		rand.Read(r.StreamID[:])
		r.Status, r.HTTPStatus, r.Model = 1, 200, models[i%3]
		r.TTFTUs = uint32(200_000 + (i*7919)%900_000)
		r.ContentEvents, r.Tokens, r.TokensPerSec, r.TPOTUs = 200, 200, float32(20+i%40), uint32(1e6/float64(20+i%40))
		for k := range 200 {
			r.ITL.Record(float64(15_000 + (k*7919+i*31)%40_000))
		}
		if i%50 == 0 {
			r.ITL.Record(450_000)
			r.Stalls = 1
		}
		streams = append(streams, collector.Stream{Record: r, Site: "bench", ReceivedAt: now.Add(-time.Duration(i%1440) * time.Minute),
			Browser: browsers[i%5], Region: regions[i%4], Country: regions[i%4][:2], OS: "Linux", Device: "desktop"})
	}
	for i := 0; i < n; i += 5000 {
		if err := store.InsertDirect(ctx, db.Conn(), streams[i:i+5000]); err != nil {
			b.Fatal(err)
		}
	}
	f := query.Filter{Site: "bench", Since: now.Add(-24 * time.Hour)}
	b.Run("Summary", func(b *testing.B) {
		for b.Loop() {
			if r, err := query.Summary(ctx, db.Conn(), f); err != nil || r.Streams != n {
				b.Fatalf("summary: %d streams, %v", r.Streams, err)
			}
		}
	})
	b.Run("BreakdownBrowser", func(b *testing.B) {
		for b.Loop() {
			if g, err := query.Breakdown(ctx, db.Conn(), f, "browser"); err != nil || len(g) != 5 {
				b.Fatalf("breakdown: %d groups, %v", len(g), err)
			}
		}
	})
	b.Run("Timeseries15m", func(b *testing.B) {
		for b.Loop() {
			if _, err := query.Timeseries(ctx, db.Conn(), f, 15*time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestGateRUMBeforeHeaders: requests the user gave up on before the response
// headers are stored as such (status 'aborted', no headers, the time waited)
// and `gate rum`, its JSON and the dashboard API count them apart from other
// aborts; --max-before-headers-share gates on their share.
func TestGateRUMBeforeHeaders(t *testing.T) {
	db, dsn := newDB(t)
	at := time.Now().UTC().Add(-5 * time.Minute)
	var streams []collector.Stream
	add := func(r beacon.Record) {
		streams = append(streams, collector.Stream{Record: r, Site: "gaveup", ReceivedAt: at,
			Country: "DE", Region: "DE-BE", Browser: "Chrome", OS: "Linux", Device: "desktop"})
	}
	for i := range 8 {
		add(synth{ttft: 300*time.Millisecond + time.Duration(i)*time.Millisecond, gaps: steady(39, 25*time.Millisecond)}.record(t))
	}
	late := synth{ttft: 300 * time.Millisecond, gaps: steady(19, 25*time.Millisecond)}.record(t)
	late.Status, late.End = uint8(meter.StatusAborted), uint8(meter.EndAbort) // after the headers
	add(late)
	for _, waited := range []uint32{3_000_000, 5_000_000} {
		var r beacon.Record
		rand.Read(r.StreamID[:])
		r.Status, r.End, r.HeadersUs, r.DurationUs = uint8(meter.StatusAborted), uint8(meter.EndAbort), beacon.NoTime, waited
		r.TTFBUs, r.TTFCUs, r.TTFTUs = beacon.NoTime, beacon.NoTime, beacon.NoTime
		add(r)
	}
	var failed beacon.Record // a network error before the headers
	rand.Read(failed.StreamID[:])
	failed.Status, failed.End, failed.HeadersUs, failed.DurationUs = uint8(meter.StatusNetworkError), uint8(meter.EndError), beacon.NoTime, 4_000_000
	failed.TTFBUs, failed.TTFCUs, failed.TTFTUs = beacon.NoTime, beacon.NoTime, beacon.NoTime
	add(failed)
	if err := store.InsertDirect(context.Background(), db.Conn(), streams); err != nil {
		t.Fatalf("insert: %v", err)
	}

	rep, err := query.Summary(context.Background(), db.Conn(), query.Filter{Site: "gaveup", Since: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(rep.Streams, rep.Errors, rep.Aborted, rep.Failed, rep.BeforeHeaders, rep.BeforeHeadersWaitMs),
		fmt.Sprint(12, 4, 3, 1, 3, 4000.0); got != want {
		t.Fatalf("streams, errors, aborted, failed, before headers, mean wait = %s, want %s", got, want)
	}
	within(t, "before_headers_share", rep.BeforeHeadersShare, 3.0/12, 1e-9)

	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := gate.Main(context.Background(), append([]string{"rum", "--site", "gaveup", "--clickhouse", dsn}, args...),
			gate.Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
		return code, out.String() + errb.String()
	}
	code, out := run("--max-before-headers-share", "20%")
	if code != gate.ExitFail || !strings.Contains(out, "ended before headers") ||
		!strings.Contains(out, "4 not completed: 3 aborted, 1 failed; 3 of them before the response headers, after 4000 ms on average") {
		t.Errorf("--max-before-headers-share 20%%: exit %d, want %d, and the counts:\n%s", code, gate.ExitFail, out)
	}
	if code, out := run("--max-before-headers-share", "0.3"); code != gate.ExitPass {
		t.Errorf("--max-before-headers-share 0.3: exit %d, want %d:\n%s", code, gate.ExitPass, out)
	}
	code, out = run("--json")
	var res struct {
		Report struct {
			BeforeHeaders int64 `json:"before_headers"`
			Aborted       int64 `json:"aborted"`
		} `json:"report"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != gate.ExitPass ||
		res.Report.BeforeHeaders != 3 || res.Report.Aborted != 3 {
		t.Errorf("--json: exit %d, %v, report %+v:\n%s", code, err, res.Report, out)
	}

	srv := dashboardServer(t, db.Conn())
	resp, err := http.Get(srv.URL + "/api/summary?site=gaveup&since=1h")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum struct {
		Report map[string]any `json:"report"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&sum); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(sum.Report["before_headers"], sum.Report["aborted"], sum.Report["failed"], sum.Report["before_headers_wait_ms"]),
		fmt.Sprint(3.0, 3.0, 1.0, 4000.0); got != want {
		t.Errorf("/api/summary before_headers, aborted, failed, wait = %s, want %s", got, want)
	}
}

// TestDashboardBeforeHeadersTile: the dashboard page shows the share of
// streams that ended before the response headers, their count and mean wait.
func TestDashboardBeforeHeadersTile(t *testing.T) {
	db, _ := newDB(t)
	at := time.Now().UTC().Add(-5 * time.Minute)
	var streams []collector.Stream
	for i := range 4 {
		var r beacon.Record
		if i < 3 {
			r = synth{ttft: 300 * time.Millisecond, gaps: steady(9, 25*time.Millisecond)}.record(t)
		} else {
			rand.Read(r.StreamID[:])
			r.Status, r.End, r.HeadersUs, r.DurationUs = uint8(meter.StatusAborted), uint8(meter.EndAbort), beacon.NoTime, 2_500_000
			r.TTFBUs, r.TTFCUs, r.TTFTUs = beacon.NoTime, beacon.NoTime, beacon.NoTime
		}
		streams = append(streams, collector.Stream{Record: r, Site: "tile", ReceivedAt: at, Browser: "Chrome"})
	}
	if err := store.InsertDirect(context.Background(), db.Conn(), streams); err != nil {
		t.Fatalf("insert: %v", err)
	}
	srv := dashboardServer(t, db.Conn())
	ctx := tab(t)
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, chromedp.Navigate(srv.URL+"/dashboard/?site=tile&since=1h")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	got, err := chromedp.Run(sctx, chromedp.Poll[string](`(() => {
		const t = document.querySelector('.tile[data-k="before"]');
		const v = t.querySelector('.v').textContent;
		return v === "—" ? null : v + " | " + t.querySelector('.d').textContent + " | " + t.className })()`,
		chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		t.Fatalf("before-headers tile: %v", err)
	}
	if want := "25.0 % | 1 streams · waited 2.50 s on average | tile bad"; got != want {
		t.Errorf("before-headers tile = %q, want %q", got, want)
	}
}

// dashboardServer serves the dashboard page and its API over conn.
func dashboardServer(t *testing.T, conn query.Conn) *httptest.Server {
	t.Helper()
	mux, err := httpapi.New(httpapi.Config{Static: web.Static()})
	if err != nil {
		t.Fatal(err)
	}
	httpapi.RegisterDashboard(mux, httpapi.DashboardConfig{Conn: conn})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}
