package otlp_test

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"google.golang.org/protobuf/proto"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/otlp"
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

// receiver is a test OTLP/HTTP metrics receiver: it decodes each request
// with the official OTLP protobuf types and keeps it.
type receiver struct {
	mu       sync.Mutex
	requests []*colmetricspb.ExportMetricsServiceRequest
	fail     int // answer 503 to this many requests first
	t        *testing.T
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/metrics" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		rc.t.Errorf("request %s %s %q: want POST /v1/metrics application/x-protobuf", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if rc.fail > 0 {
		rc.fail--
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	body := io.Reader(r.Body)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			rc.t.Errorf("gzip: %v", err)
			http.Error(w, "bad gzip", http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		rc.t.Errorf("read body: %v", err)
		return
	}
	var req colmetricspb.ExportMetricsServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		rc.t.Errorf("decode ExportMetricsServiceRequest: %v", err)
		http.Error(w, "bad protobuf", http.StatusBadRequest)
		return
	}
	rc.requests = append(rc.requests, &req)
	resp, _ := proto.Marshal(&colmetricspb.ExportMetricsServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(resp)
}

func (rc *receiver) take() []*colmetricspb.ExportMetricsServiceRequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	r := rc.requests
	rc.requests = nil
	return r
}

// seed is one synthetic stream measured by wasm/meter.
type seed struct {
	browser, model string
	at             time.Time
	ttft           time.Duration
	gaps           []time.Duration
	cause          meter.Cause
	status         meter.Status
}

func (s seed) stream() collector.Stream {
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
	r.Events, r.ContentEvents, r.Reads, r.Bytes = uint32(sum.Events), uint32(sum.ContentEvents), uint32(sum.Reads), uint64(sum.Bytes)
	r.GapMaxUs, r.TokensPerSec = us(sum.GapMax), float32(sum.TokensPerSec)
	r.Stalls, r.StalledUs = uint32(sum.Stalls), uint64(sum.StalledFor/meter.Microsecond)
	r.StallsByCause[s.cause], r.StalledByCause[s.cause] = r.Stalls, r.StalledUs
	r.ITL, r.ITLTokens = sum.ITL, sum.ITLTokens
	return collector.Stream{Record: r, Site: "shop", ReceivedAt: s.at, Country: "DE", Region: "DE-BE",
		Browser: s.browser, OS: "Linux", Device: "desktop", Release: "r1"}
}

func gapsOf(n int, every, stall time.Duration, each int) []time.Duration {
	g := make([]time.Duration, n)
	for i := range g {
		g[i] = every + time.Duration(i%4)*time.Millisecond
		if each > 0 && i%each == each-1 {
			g[i] = stall
		}
	}
	return g
}

// clock is an injected, settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.GetStringValue()
	}
	return m
}

// metricsByName flattens the requests' metrics, checking the resource and
// scope on the way.
func metricsByName(t *testing.T, reqs []*colmetricspb.ExportMetricsServiceRequest) map[string][]*metricspb.Metric {
	t.Helper()
	out := map[string][]*metricspb.Metric{}
	for _, req := range reqs {
		for _, rm := range req.ResourceMetrics {
			if got := attrMap(rm.Resource.GetAttributes())["service.name"]; got != "itlmon" {
				t.Errorf("resource service.name = %q, want itlmon", got)
			}
			for _, sm := range rm.ScopeMetrics {
				if sm.Scope.GetName() != otlp.ScopeName {
					t.Errorf("scope %q, want %q", sm.Scope.GetName(), otlp.ScopeName)
				}
				for _, m := range sm.Metrics {
					out[m.Name] = append(out[m.Name], m)
				}
			}
		}
	}
	return out
}

// quantileOf reads the q-quantile (numpy's rule, bucket midpoints in the
// log sense) from exported exponential histogram points merged.
func quantileOf(points []*metricspb.ExponentialHistogramDataPoint, q float64) float64 {
	type b struct {
		v float64
		n uint64
	}
	var bs []b
	var n uint64
	for _, p := range points {
		bs = append(bs, b{0, p.ZeroCount})
		n += p.ZeroCount
		base := math.Exp2(math.Exp2(-float64(p.Scale)))
		for k, c := range p.Positive.GetBucketCounts() {
			lo := math.Pow(base, float64(p.Positive.Offset+int32(k)))
			bs = append(bs, b{2 * lo * lo * base / (lo + lo*base), c})
			n += c
		}
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].v < bs[j].v })
	rank := func(r uint64) float64 {
		var cum uint64
		for _, x := range bs {
			cum += x.n
			if r < cum {
				return x.v
			}
		}
		return bs[len(bs)-1].v
	}
	pos := q * float64(n-1)
	k := uint64(pos)
	return rank(k) + (rank(k+1)-rank(k))*(pos-float64(k))
}

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

// TestExport seeds streams through the store's insert path into the real
// engine, runs the exporter against a test OTLP receiver, and checks what
// the receiver decoded: names, units, temporality, attributes, counts, a
// quantile, and that each minute is sent once.
func TestExport(t *testing.T) {
	db := chtest.NewDB(t, store.Options{})
	ctx := context.Background()
	m0 := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	seeds := []seed{}
	for i := range 8 {
		seeds = append(seeds, seed{"Chrome", "gpt-x", m0.Add(10 * time.Second), time.Duration(300+11*i) * time.Millisecond,
			gapsOf(30, 20*time.Millisecond, 0, 0), meter.CauseUnknown, meter.StatusComplete})
	}
	for i := range 5 {
		seeds = append(seeds, seed{"Firefox", "gpt-x", m0.Add(40 * time.Second), time.Duration(700+13*i) * time.Millisecond,
			gapsOf(30, 25*time.Millisecond, 450*time.Millisecond, 10), meter.CauseNetwork, meter.StatusComplete})
	}
	seeds = append(seeds, seed{"Chrome", "gpt-x", m0.Add(70 * time.Second), 320 * time.Millisecond,
		gapsOf(5, 20*time.Millisecond, 0, 0), meter.CauseUnknown, meter.StatusAborted})
	streams := make([]collector.Stream, len(seeds))
	for i, s := range seeds {
		streams[i] = s.stream()
	}
	if err := store.InsertDirect(ctx, db.Conn(), streams); err != nil {
		t.Fatalf("insert: %v", err)
	}

	rc := &receiver{t: t}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	clk := &clock{t: m0.Add(40 * time.Second)} // now - settle is in m0: the exporter starts there
	e, err := otlp.New(otlp.Config{Endpoint: srv.URL, Conn: db.Conn(), Settle: 30 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := e.ExportDue(ctx); err != nil || n != 0 {
		t.Fatalf("ExportDue before m0 settled = %d, %v; want 0 minutes", n, err)
	}

	// m0 settled, m0+1 not: only m0 goes out.
	clk.Set(m0.Add(time.Minute + 31*time.Second))
	if n, err := e.ExportDue(ctx); err != nil || n != 1 {
		t.Fatalf("ExportDue = %d, %v; want 1 minute", n, err)
	}
	if st := e.Stats(); st.Minutes != 1 || st.Points == 0 || st.Errors != 0 {
		t.Errorf("stats %+v, want 1 minute, some points, no errors", st)
	}
	got := metricsByName(t, rc.take())
	wantUnits := map[string]string{otlp.MetricTTFT: "s", otlp.MetricITL: "s", otlp.MetricStreams: "{stream}",
		otlp.MetricStalls: "{stall}", otlp.MetricStalledTime: "s", otlp.MetricContentEvents: "{event}",
		otlp.MetricReads: "{read}", otlp.MetricEventsPerRead: "{event}/{read}"}
	for name, unit := range wantUnits {
		ms := got[name]
		if len(ms) != 1 {
			t.Fatalf("metric %s sent %d times, want once; got %v", name, len(ms), keys(got))
		}
		if ms[0].Unit != unit {
			t.Errorf("%s unit %q, want %q", name, ms[0].Unit, unit)
		}
	}
	if len(got) != len(wantUnits) {
		t.Errorf("metrics %v, want %d", keys(got), len(wantUnits))
	}

	// Histograms: delta, scale 5, one point per browser for minute m0, the
	// attributes of the conventions and itlmon's, the counts seeded.
	for _, name := range []string{otlp.MetricTTFT, otlp.MetricITL} {
		h := got[name][0].GetExponentialHistogram()
		if h == nil {
			t.Fatalf("%s is not an exponential histogram", name)
		}
		if h.AggregationTemporality != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA {
			t.Errorf("%s temporality %v, want delta", name, h.AggregationTemporality)
		}
		counts := map[string]uint64{}
		for _, p := range h.DataPoints {
			a := attrMap(p.Attributes)
			want := map[string]string{"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x", "user_agent.name": a["user_agent.name"],
				"itlmon.site": "shop", "itlmon.region": "DE-BE"}
			if !mapsEqual(a, want) {
				t.Errorf("%s attributes %v, want %v", name, a, want)
			}
			if p.Scale != 5 || p.ZeroThreshold != 1e-6 {
				t.Errorf("%s scale %d zero threshold %v, want 5, 1e-6", name, p.Scale, p.ZeroThreshold)
			}
			if p.StartTimeUnixNano != uint64(m0.UnixNano()) || p.TimeUnixNano != uint64(m0.Add(time.Minute).UnixNano()) {
				t.Errorf("%s point spans %v..%v, want minute %v", name, time.Unix(0, int64(p.StartTimeUnixNano)), time.Unix(0, int64(p.TimeUnixNano)), m0)
			}
			var inBuckets uint64 = p.ZeroCount
			for _, c := range p.Positive.GetBucketCounts() {
				inBuckets += c
			}
			if inBuckets != p.Count {
				t.Errorf("%s: buckets hold %d, count %d", name, inBuckets, p.Count)
			}
			counts[a["user_agent.name"]] += p.Count
		}
		want := map[string]uint64{"Chrome": 8, "Firefox": 5} // TTFT: one per stream
		if name == otlp.MetricITL {
			want = map[string]uint64{"Chrome": 8 * 30, "Firefox": 5 * 30} // one per gap
		}
		if !mapsEqual(counts, want) {
			t.Errorf("%s counts %v, want %v", name, counts, want)
		}
	}

	// The exported ITL histogram reads the seeded quantiles within 3.3 %
	// (the rollup's 2.19 % plus the move to the seconds layout).
	var itlPoints []*metricspb.ExponentialHistogramDataPoint
	var exact []float64
	for _, p := range got[otlp.MetricITL][0].GetExponentialHistogram().DataPoints {
		itlPoints = append(itlPoints, p)
	}
	for _, s := range seeds[:13] {
		for _, g := range s.gaps {
			exact = append(exact, g.Seconds())
		}
	}
	for _, q := range []float64{0.5, 0.9, 0.99} {
		if got, want := quantileOf(itlPoints, q), exactQuantile(exact, q); math.Abs(got-want) > 0.033*want {
			t.Errorf("exported ITL q%v = %v s, want %v ±3.3%%", q, got, want)
		}
	}

	// Stalls: the Firefox streams' network stalls, 3 each (gaps 10, 20, 30).
	stalls := map[string]int64{}
	for _, p := range got[otlp.MetricStalls][0].GetSum().DataPoints {
		a := attrMap(p.Attributes)
		stalls[a["user_agent.name"]+"/"+a["itlmon.stall.cause"]] += p.GetAsInt()
	}
	if want := map[string]int64{"Firefox/network": 15}; !mapsEqual(stalls, want) {
		t.Errorf("stalls %v, want %v", stalls, want)
	}
	s := got[otlp.MetricStalls][0].GetSum()
	if !s.IsMonotonic || s.AggregationTemporality != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA {
		t.Errorf("stalls: monotonic %v temporality %v, want a monotonic delta sum", s.IsMonotonic, s.AggregationTemporality)
	}
	for _, p := range got[otlp.MetricStalledTime][0].GetSum().DataPoints {
		if got, want := p.GetAsDouble(), 15*0.45; math.Abs(got-want) > 0.01 {
			t.Errorf("stalled time %v s, want %v", got, want)
		}
	}
	status := map[string]int64{}
	for _, p := range got[otlp.MetricStreams][0].GetSum().DataPoints {
		status[attrMap(p.Attributes)["itlmon.stream.status"]] += p.GetAsInt()
	}
	if want := map[string]int64{"complete": 13}; !mapsEqual(status, want) {
		t.Errorf("streams by status in m0 %v, want %v", status, want)
	}
	for _, p := range got[otlp.MetricEventsPerRead][0].GetGauge().DataPoints {
		if v := p.GetAsDouble(); !(v > 0) {
			t.Errorf("events per read %v, want > 0", v)
		}
	}

	// Nothing new: nothing sent. Then m0+1 (the aborted stream) once the
	// receiver comes back from a failure: the minute is retried, not lost.
	if n, err := e.ExportDue(ctx); err != nil || n != 0 {
		t.Fatalf("ExportDue again = %d, %v; want 0", n, err)
	}
	if reqs := rc.take(); len(reqs) != 0 {
		t.Fatalf("%d requests for minutes already sent", len(reqs))
	}
	clk.Set(m0.Add(2*time.Minute + 31*time.Second))
	rc.mu.Lock()
	rc.fail = 1
	rc.mu.Unlock()
	if _, err := e.ExportDue(ctx); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("ExportDue to a failing receiver: err %v, want a 503", err)
	}
	if n, err := e.ExportDue(ctx); err != nil || n != 1 {
		t.Fatalf("ExportDue after the failure = %d, %v; want 1 minute", n, err)
	}
	if st := e.Stats(); st.Minutes != 2 || st.Errors != 1 || st.Skipped != 0 {
		t.Errorf("stats %+v, want 2 minutes, 1 error, none skipped", st)
	}
	got = metricsByName(t, rc.take())
	status = map[string]int64{}
	for _, p := range got[otlp.MetricStreams][0].GetSum().DataPoints {
		status[attrMap(p.Attributes)["itlmon.stream.status"]] += p.GetAsInt()
		if p.StartTimeUnixNano != uint64(m0.Add(time.Minute).UnixNano()) {
			t.Errorf("retried point starts %v, want %v", time.Unix(0, int64(p.StartTimeUnixNano)), m0.Add(time.Minute))
		}
	}
	if want := map[string]int64{"aborted": 1}; !mapsEqual(status, want) {
		t.Errorf("streams by status in m0+1 %v, want %v", status, want)
	}
}

func TestNewEndpoint(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"http://otel:4318", true}, {"https://otel.example.com/v1/metrics", true}, {"http://otel:4318/custom", true},
		{"otel:4318", false}, {"grpc://otel:4317", false}, {"http://", false},
	} {
		_, err := otlp.New(otlp.Config{Endpoint: c.in, Conn: nopConn{}})
		if (err == nil) != c.ok {
			t.Errorf("New(%q): err %v, want ok %v", c.in, err, c.ok)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// nopConn is a connection New accepts; the endpoint tests never query.
type nopConn struct{}

func (nopConn) Query(context.Context, string, ...any) (driver.Rows, error) {
	return nil, errors.New("not connected")
}

func (nopConn) Exec(context.Context, string, ...any) error { return errors.New("not connected") }

// TestSecondsBuckets: every microsecond bucket's count goes to the seconds
// bucket (same scale) that holds the bucket's representative value.
func TestSecondsBuckets(t *testing.T) {
	for i := hist.MinIndex; i <= hist.MaxIndex; i++ {
		v := hist.BucketValue(i) * 1e-6
		j := otlp.UsToS(i)
		lo, hi := math.Exp2(float64(j)/32), math.Exp2(float64(j+1)/32)
		if !(v > lo*(1-1e-12) && v <= hi*(1+1e-12)) {
			t.Fatalf("µs bucket %d (representative %v s) -> seconds bucket %d (%v, %v]", i, v, j, lo, hi)
		}
	}
}

// streamsPerMinute sums itlmon.streams by the minute its points start.
func streamsPerMinute(t *testing.T, reqs []*colmetricspb.ExportMetricsServiceRequest) map[time.Time]int64 {
	t.Helper()
	out := map[time.Time]int64{}
	for _, m := range metricsByName(t, reqs)[otlp.MetricStreams] {
		for _, p := range m.GetSum().DataPoints {
			out[time.Unix(0, int64(p.StartTimeUnixNano)).UTC()] += p.GetAsInt()
		}
	}
	return out
}

// TestSeveralExporters: exporters of several collectors, racing on the same
// database, send each minute once between them; an exporter started later
// goes on from the last claimed minute.
func TestSeveralExporters(t *testing.T) {
	db := chtest.NewDB(t, store.Options{})
	ctx := context.Background()
	m0 := time.Now().UTC().Truncate(time.Minute).Add(-30 * time.Minute)
	var streams []collector.Stream
	want := map[time.Time]int64{}
	for k := range 6 {
		at := m0.Add(time.Duration(k) * time.Minute)
		for range k + 1 {
			streams = append(streams, seed{"Chrome", "gpt-x", at.Add(5 * time.Second), 300 * time.Millisecond,
				gapsOf(10, 20*time.Millisecond, 0, 0), meter.CauseUnknown, meter.StatusComplete}.stream())
		}
		want[at] = int64(k + 1)
	}
	if err := store.InsertDirect(ctx, db.Conn(), streams); err != nil {
		t.Fatalf("insert: %v", err)
	}
	rc := &receiver{t: t}
	srv := httptest.NewServer(rc)
	defer srv.Close()

	// Four exporters start in m0 and race for minutes m0..m0+3.
	clk := &clock{t: m0.Add(40 * time.Second)}
	var es []*otlp.Exporter
	for range 4 {
		e, err := otlp.New(otlp.Config{Endpoint: srv.URL, Conn: db.Conn(), Settle: 30 * time.Second, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	clk.Set(m0.Add(4*time.Minute + 31*time.Second))
	var wg sync.WaitGroup
	for _, e := range es {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.ExportDue(ctx); err != nil {
				t.Errorf("ExportDue: %v", err)
			}
		}()
	}
	wg.Wait()
	got := streamsPerMinute(t, rc.take())
	var sent, elsewhere uint64
	for _, e := range es {
		sent += e.Stats().Minutes
		elsewhere += e.Stats().Elsewhere
	}
	if sent != 4 || elsewhere != 3*4 {
		t.Errorf("minutes sent %d, claimed elsewhere %d; want 4 and 12 (each minute by one of four exporters)", sent, elsewhere)
	}
	for k := range 4 {
		m := m0.Add(time.Duration(k) * time.Minute)
		if got[m] != want[m] {
			t.Errorf("minute %v: %d streams exported, want %d (once)", m, got[m], want[m])
		}
	}

	// A collector restarted later (its own start would be m0+5) goes on
	// from m0+4, the minute after the last claimed.
	clk.Set(m0.Add(5*time.Minute + 40*time.Second))
	late, err := otlp.New(otlp.Config{Endpoint: srv.URL, Conn: db.Conn(), Settle: 30 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	clk.Set(m0.Add(6*time.Minute + 31*time.Second))
	if n, err := late.ExportDue(ctx); err != nil || n != 2 {
		t.Fatalf("restarted ExportDue = %d, %v; want minutes m0+4 and m0+5", n, err)
	}
	got = streamsPerMinute(t, rc.take())
	if w := map[time.Time]int64{m0.Add(4 * time.Minute): want[m0.Add(4*time.Minute)], m0.Add(5 * time.Minute): want[m0.Add(5*time.Minute)]}; !mapsEqual(got, w) {
		t.Errorf("after the restart: %v, want %v", got, w)
	}
}

// A minute goes out only once every promotion window up to its end (plus
// the settle) that holds inbox rows is promoted, whatever the clock says.
func TestExportWaitsForPromotion(t *testing.T) {
	db := chtest.NewDB(t, store.Options{})
	ctx := context.Background()
	m0 := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	s := seed{"Chrome", "gpt-x", m0.Add(10 * time.Second), 300 * time.Millisecond, gapsOf(30, 20*time.Millisecond, 0, 0), meter.CauseUnknown, meter.StatusComplete}
	if err := store.InsertDirect(ctx, db.Conn(), []collector.Stream{s.stream()}); err != nil {
		t.Fatal(err)
	}
	// Inbox rows in windows m0+20s (promoted) and m0+50s (not yet), and
	// one just after the minute, within the settle (not yet).
	for _, at := range []time.Duration{20 * time.Second, 50 * time.Second, 61 * time.Second} {
		if err := db.Conn().Exec(ctx, "INSERT INTO itl_inbox (kind, site, stream_id, ingested_at, payload) VALUES ('client', 'shop', ?, fromUnixTimestamp64Micro(?), '')",
			at.String(), m0.Add(at+300*time.Millisecond).UnixMicro()); err != nil {
			t.Fatal(err)
		}
	}
	promote := func(at time.Duration) {
		t.Helper()
		if err := db.Conn().Exec(ctx, "INSERT INTO itl_promoted (promoted_window, records) VALUES (fromUnixTimestamp64Micro(?), 1)", m0.Add(at).UnixMicro()); err != nil {
			t.Fatal(err)
		}
	}
	promote(20 * time.Second)

	rc := &receiver{t: t}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	clk := &clock{t: m0.Add(5 * time.Second)}
	e, err := otlp.New(otlp.Config{Endpoint: srv.URL, Conn: db.Conn(), Settle: 5 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	clk.Set(m0.Add(3 * time.Minute)) // m0 settled long ago by the clock
	if n, err := e.ExportDue(ctx); err != nil || n != 0 {
		t.Fatalf("ExportDue with m0's window at 50 s unpromoted = %d, %v; want 0 minutes", n, err)
	}
	promote(50 * time.Second)
	if n, err := e.ExportDue(ctx); err != nil || n != 0 {
		t.Fatalf("ExportDue with the window at 61 s (within the settle) unpromoted = %d, %v; want 0 minutes", n, err)
	}
	promote(61 * time.Second)
	if n, err := e.ExportDue(ctx); err != nil || n != 2 {
		t.Fatalf("ExportDue once promoted = %d, %v; want m0 and the minute after it", n, err)
	}
	if got := streamsPerMinute(t, rc.take()); got[m0] != 1 {
		t.Fatalf("streams per minute %v, want 1 in %v", got, m0)
	}
}
