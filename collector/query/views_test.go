package query_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/httpapi"
	"github.com/itlmon/itlmon/collector/query"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/hist"
	"github.com/itlmon/itlmon/wasm/meter"
)

// viewsFixture seeds the dashboard views' data: streams with stalls of known
// causes, a re-chunked API origin, two releases of different cadence and two
// of the same, and one stream joined with its origin's timeline.
type viewsFixture struct {
	srv        *httptest.Server
	conn       query.Conn
	pausedID   string // the stream with an origin pause
	pauseAtMs  float64
	worstID    string // the most stalled time
	totalGaps  uint64
	stallsWant map[string]int64
}

// timelineOf is the full timeline of s, one content event per read.
func timelineOf(s synth) []beacon.Stamp {
	at := uint32(s.ttft / time.Microsecond)
	tl := []beacon.Stamp{{AtUs: at, Read: 0, Content: true}}
	for i, g := range s.gaps {
		at += uint32(g / time.Microsecond)
		tl = append(tl, beacon.Stamp{AtUs: at, Read: uint32(i + 1), Content: true})
	}
	return tl
}

// withStalls sets r's stalls (every gap of s over 200 ms) to cause.
func withStalls(r *beacon.Record, s synth, cause meter.Cause) {
	r.StallsByCause, r.StalledByCause, r.StallList = [5]uint32{}, [5]uint64{}, nil
	at := uint32(s.ttft / time.Microsecond)
	for _, g := range s.gaps {
		end := at + uint32(g/time.Microsecond)
		if meter.Duration(g) > meter.StallThreshold {
			r.StallsByCause[cause]++
			r.StalledByCause[cause] += uint64(g / time.Microsecond)
			r.StallList = append(r.StallList, beacon.Stall{StartUs: at, EndUs: end, Cause: uint8(cause), NextReadEvents: 1})
		}
		at = end
	}
}

// oneRead measures s as a buffering proxy delivers it: every event in one
// read at the end.
func oneRead(t *testing.T, s synth) beacon.Record {
	t.Helper()
	m := meter.New(meter.Options{ContentType: "text/event-stream"})
	ev := `data: {"choices":[{"index":0,"delta":{"content":"tok "}}]}` + "\n\n"
	end := s.ttft
	for _, g := range s.gaps {
		end += g
	}
	m.Feed([]byte(strings.Repeat(ev, len(s.gaps)+1)+"data: [DONE]\n\n"), meter.Duration(end))
	m.End(meter.Duration(end)+meter.Millisecond, meter.StatusComplete, 200)
	r := recordOf(m.Summary())
	r.TTFTCause = uint8(meter.CauseNetwork)
	return r
}

// jittered is n gaps around every (±20 %), from rng.
func jittered(rng *rand.Rand, n int, every time.Duration) []time.Duration {
	g := make([]time.Duration, n)
	for i := range g {
		g[i] = time.Duration(float64(every) * (0.8 + 0.4*rng.Float64()))
	}
	return g
}

func writeViewsFixture(t *testing.T) *viewsFixture {
	t.Helper()
	db, _ := newDB(t)
	now := time.Now().UTC()
	f := &viewsFixture{conn: db.Conn(), stallsWant: map[string]int64{}}
	var streams []collector.Stream
	add := func(r beacon.Record, s synth, at time.Time, region, release, apiOrigin string) *collector.Stream {
		if s.gaps != nil && r.Timeline == nil {
			r.Timeline = timelineOf(s)
		}
		r.URLOrigin, r.HTTPProto = apiOrigin, "h2"
		streams = append(streams, collector.Stream{Record: r, Site: "v", ReceivedAt: at, Country: "DE", Region: region,
			Browser: "Chrome", OS: "Linux", Device: "desktop", Release: release})
		f.totalGaps += r.ITL.Count()
		return &streams[len(streams)-1]
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// Releases r1 and r1b: one cadence (25 ms ± 20 %); r2: slower (40 ms)
	// with a longer TTFT. 30 streams each.
	for i := range 30 {
		for _, rel := range []struct {
			name  string
			every time.Duration
			ttft  time.Duration
		}{{"r1", 25 * time.Millisecond, 300 * time.Millisecond}, {"r1b", 25 * time.Millisecond, 300 * time.Millisecond}, {"r2", 40 * time.Millisecond, 600 * time.Millisecond}} {
			s := synth{ttft: rel.ttft + time.Duration(rng.IntN(100))*time.Millisecond, gaps: jittered(rng, 30, rel.every)}
			add(s.record(t), s, now.Add(-time.Duration(5+i%20)*time.Minute), "DE-BE", rel.name, "https://api.example")
		}
	}
	// Stalls: origin (2 streams × 1 stall of 600 ms), page (1 × 2 of 300
	// ms), network (1 × 1 of 900 ms).
	stalled := func(cause meter.Cause, region string, hitch time.Duration, each int, n int) {
		for range n {
			s := synth{ttft: 400 * time.Millisecond, gaps: hitchy(29, 25*time.Millisecond, hitch, each)}
			r := s.record(t)
			withStalls(&r, s, cause)
			f.stallsWant[meter.CauseNames[cause]] += int64(len(r.StallList))
			add(r, s, now.Add(-3*time.Minute), region, "r3", "https://api.example")
		}
	}
	stalled(meter.CauseOrigin, "DE-BY", 600*time.Millisecond, 15, 2)
	stalled(meter.CausePage, "DE-HH", 300*time.Millisecond, 10, 1)
	stalled(meter.CauseNetwork, "DE-HH", 900*time.Millisecond, 29, 1)
	// The worst: one network stall of 3 s.
	{
		s := synth{ttft: 400 * time.Millisecond, gaps: append(steady(10, 25*time.Millisecond), 3*time.Second)}
		r := s.record(t)
		withStalls(&r, s, meter.CauseNetwork)
		f.stallsWant["network"]++
		f.worstID = hex.EncodeToString(r.StreamID[:])
		add(r, s, now.Add(-2*time.Minute), "DE-HH", "r3", "https://api.example")
	}
	// The origin pause: a 600 ms gap at the 11th event, the origin's emit
	// times show it, the stall is stored as `origin`.
	{
		s := synth{ttft: 350 * time.Millisecond, gaps: append(append(steady(10, 20*time.Millisecond), 600*time.Millisecond), steady(10, 20*time.Millisecond)...)}
		r := s.record(t)
		withStalls(&r, s, meter.CauseOrigin)
		f.stallsWant["origin"]++
		f.pausedID = hex.EncodeToString(r.StreamID[:])
		f.pauseAtMs = float64(r.StallList[0].StartUs) / 1000
		r.OriginID = "orig-1"
		add(r, s, now.Add(-2*time.Minute), "DE-BY", "r3", "https://api.example")
		// The origin's timeline: its clock starts 50 ms later (its TTFT is
		// 300 ms), the same gaps.
		emits := []uint32{300000}
		for _, g := range s.gaps {
			emits = append(emits, emits[len(emits)-1]+uint32(g/time.Microsecond))
		}
		err := db.Conn().Exec(context.Background(), `INSERT INTO itl_origin (received_at, site, origin_id, version, started_at, route, ttft_us, duration_us,
			events, content_events, stalls, emit_us, stream_id, client_received_at, region, browser, stall_cause)
			VALUES (?, 'v', 'orig-1', 1, ?, '/v1/chat/completions', 300000, ?, ?, ?, 1, ?, ?, ?, 'DE-BY', 'Chrome', ['origin'])`,
			now.Add(-2*time.Minute), now.Add(-2*time.Minute), emits[len(emits)-1], len(emits), len(emits), emits, string(r.StreamID[:]), now.Add(-2*time.Minute))
		if err != nil {
			t.Fatalf("insert origin: %v", err)
		}
	}
	// originRow stores a joined origin timeline of client record r: the
	// origin emitted its content events per flush of perFlush events, 25 ms
	// apart (gaps within a flush zero-length).
	originRow := func(r beacon.Record, id string, perFlush int) {
		var itl hist.Histogram
		for i := 1; i < int(r.ContentEvents); i++ {
			if i%perFlush == 0 {
				itl.Record(25000)
			} else {
				itl.Record(0)
			}
		}
		err := db.Conn().Exec(context.Background(), `INSERT INTO itl_origin (received_at, site, origin_id, version, started_at, route, duration_us,
			events, content_events, flushes, itl_zero, stream_id, client_received_at, region, browser)
			VALUES (?, 'v', ?, 1, ?, '/v1/chat/completions', 1000000, ?, ?, ?, ?, ?, ?, 'DE-BE', 'Chrome')`,
			now.Add(-4*time.Minute), id, now.Add(-4*time.Minute), r.ContentEvents, r.ContentEvents, (int(r.ContentEvents)+perFlush-1)/perFlush,
			itl.ZeroCount(), string(r.StreamID[:]), now.Add(-4*time.Minute))
		if err != nil {
			t.Fatalf("insert origin: %v", err)
		}
	}
	// A buffering proxy in front of another API origin: every answer in one
	// read at the end, while the origin (its timelines joined for four of
	// six) emitted one event per flush.
	for i := range 6 {
		s := synth{ttft: 300 * time.Millisecond, gaps: steady(39, 25*time.Millisecond)}
		r := oneRead(t, s)
		r.Timeline = nil
		if i < 4 {
			r.OriginID = fmt.Sprintf("buffered-%d", i)
			originRow(r, r.OriginID, 1)
		}
		add(r, synth{}, now.Add(-4*time.Minute), "DE-BE", "r3", "https://buffered.example")
	}
	// An origin that sends 8 events per flush, 180 ms apart: the page reads
	// them as sent, and the origin's timelines show it.
	for i := range 4 {
		m := meter.New(meter.Options{ContentType: "text/event-stream"})
		ev := `data: {"choices":[{"index":0,"delta":{"content":"tok "}}]}` + "\n\n"
		at := 300 * meter.Millisecond
		for range 5 {
			m.Feed([]byte(strings.Repeat(ev, 8)), at)
			at += 180 * meter.Millisecond
		}
		m.End(at, meter.StatusComplete, 200)
		r := recordOf(m.Summary())
		r.OriginID = fmt.Sprintf("batched-%d", i)
		originRow(r, r.OriginID, 8)
		add(r, synth{}, now.Add(-4*time.Minute), "DE-BE", "r3", "https://batched.example")
	}
	if err := store.InsertDirect(context.Background(), db.Conn(), streams); err != nil {
		t.Fatalf("insert: %v", err)
	}
	mux := http.NewServeMux()
	httpapi.RegisterDashboard(mux, httpapi.DashboardConfig{Conn: f.conn})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return resp.StatusCode
}

func TestDashboardViews(t *testing.T) {
	f := writeViewsFixture(t)
	base := f.srv.URL

	t.Run("causes", func(t *testing.T) {
		var c struct {
			Total  query.CauseCounts  `json:"total"`
			Points []query.CausePoint `json:"points"`
			Rows   []query.CauseGroup `json:"rows"`
		}
		if code := getJSON(t, base+"/api/causes?site=v&since=1h&by=region", &c); code != 200 {
			t.Fatalf("status %d", code)
		}
		for _, cause := range query.Causes {
			if got, want := c.Total.ByCause[cause], f.stallsWant[cause]; got != want {
				t.Errorf("stalls[%s] = %d, want %d", cause, got, want)
			}
		}
		if got, want := c.Total.StalledMs["origin"], 2*600.0+600; got != want {
			t.Errorf("stalled ms origin = %v, want %v", got, want)
		}
		if got, want := c.Total.TTFT["network"], int64(6); got != want {
			t.Errorf("ttft network = %d, want %d (the buffered streams)", got, want)
		}
		if len(c.Points) < 2 {
			t.Errorf("points = %d, want several minutes", len(c.Points))
		}
		byRegion := map[string]query.CauseGroup{}
		for _, g := range c.Rows {
			byRegion[g.Key] = g
		}
		if got := byRegion["DE-BY"].ByCause["origin"]; got != 3 {
			t.Errorf("DE-BY origin stalls = %d, want 3", got)
		}
		if got := byRegion["DE-HH"].ByCause["page"]; got != 2 {
			t.Errorf("DE-HH page stalls = %d, want 2", got)
		}
		if c.Rows[0].Stalls < c.Rows[len(c.Rows)-1].Stalls {
			t.Errorf("rows not ordered by stalls: %+v", c.Rows)
		}
	})

	t.Run("heatmap", func(t *testing.T) {
		var h struct {
			query.Heatmap
			StepS int64 `json:"step_s"`
		}
		if code := getJSON(t, base+"/api/heatmap?site=v&since=1h&step=5m", &h); code != 200 {
			t.Fatalf("status %d", code)
		}
		if h.StepS != 300 {
			t.Errorf("step = %d s, want 300", h.StepS)
		}
		var n uint64
		for _, p := range h.Points {
			if len(p.Counts) != len(h.Bins) {
				t.Fatalf("point has %d counts for %d bins", len(p.Counts), len(h.Bins))
			}
			n += p.Zero
			for _, c := range p.Counts {
				n += c
			}
		}
		if n != f.totalGaps {
			t.Errorf("heatmap holds %d gaps, want %d", n, f.totalGaps)
		}
		for i := 1; i < len(h.Bins); i++ {
			if h.Bins[i].LoMs != h.Bins[i-1].HiMs {
				t.Fatalf("bins not contiguous at %d: %+v %+v", i, h.Bins[i-1], h.Bins[i])
			}
		}
		// Rows are 4 per doubling: each about 19 % wide.
		if r := h.Bins[0].HiMs / h.Bins[0].LoMs; math.Abs(r-math.Pow(2, 0.25)) > 1e-9 {
			t.Errorf("bin ratio = %v, want 2^(1/4)", r)
		}
		if h.Bins[0].LoMs > 20 || h.Bins[len(h.Bins)-1].HiMs < 3000 {
			t.Errorf("bins span %v..%v ms, want 20 ms to 3 s inside", h.Bins[0].LoMs, h.Bins[len(h.Bins)-1].HiMs)
		}
	})

	t.Run("rechunk", func(t *testing.T) {
		var rc struct {
			Rows []query.Rechunk `json:"rows"`
		}
		if code := getJSON(t, base+"/api/rechunk?site=v&since=1h&by=api_origin", &rc); code != 200 {
			t.Fatalf("status %d", code)
		}
		got := map[string]query.Rechunk{}
		for _, r := range rc.Rows {
			got[r.Key] = r
		}
		buf, direct := got["https://buffered.example"], got["https://api.example"]
		if !buf.Flagged || buf.Pattern != query.PatternOneRead || !strings.Contains(buf.Diagnosis, "X-Accel-Buffering: no") {
			t.Errorf("buffered origin = %+v, want flagged one_read with the X-Accel-Buffering fix", buf)
		}
		if buf.EventsPerRead < 20 || buf.CoalescedTTFTShare != 1 || buf.OneReadShare != 1 {
			t.Errorf("buffered origin figures = %+v", buf)
		}
		if direct.Flagged || direct.Pattern != query.PatternNone || direct.EventsPerRead > 1.2 {
			t.Errorf("direct origin = %+v, want not flagged, ~1 event per read", direct)
		}
		// The origins' own timelines: smooth behind the buffering proxy (the
		// diagnosis says the path re-chunked), batched at the other.
		if buf.OriginSmoothShare != 4.0/6 || buf.OriginBurstShare != 0 || buf.Diagnosis != query.Diagnoses[query.PatternOneRead]+query.PathConfirmed {
			t.Errorf("buffered origin: origin smooth %v, bursts %v, diagnosis %q; want 4/6, 0, the path's confirmed", buf.OriginSmoothShare, buf.OriginBurstShare, buf.Diagnosis)
		}
		if b := got["https://batched.example"]; b.Pattern != query.PatternOrigin || b.OriginBurstShare != 1 || b.Diagnosis != query.Diagnoses[query.PatternOrigin] || !b.Flagged {
			t.Errorf("batching origin = %+v, want flagged pattern origin (all its origins batched)", b)
		}
		for _, by := range []string{"http_proto", "region", "browser"} {
			var r struct {
				Rows []query.Rechunk `json:"rows"`
			}
			if code := getJSON(t, base+"/api/rechunk?site=v&since=1h&by="+by, &r); code != 200 || len(r.Rows) == 0 {
				t.Errorf("by %s: status %d, %d rows", by, code, len(r.Rows))
			}
		}
		var e map[string]string
		if code := getJSON(t, base+"/api/rechunk?site=v&since=1h&by=url_path", &e); code != 400 {
			t.Errorf("by url_path: status %d, want 400", code)
		}
	})

	t.Run("worst and stream", func(t *testing.T) {
		var w struct {
			Streams []query.StreamBrief `json:"streams"`
		}
		if code := getJSON(t, base+"/api/worst?site=v&since=1h&order=stalled&limit=5", &w); code != 200 || len(w.Streams) != 5 {
			t.Fatalf("status %d, %d streams", code, len(w.Streams))
		}
		if got := w.Streams[0]; got.StreamID != f.worstID || got.StalledMs != 3000 || !slices.Equal(got.Causes, []string{"network"}) {
			t.Errorf("worst = %+v, want %s with 3 s of network stall", got, f.worstID)
		}
		var d query.StreamDetail
		if code := getJSON(t, base+"/api/stream?site=v&id="+f.pausedID, &d); code != 200 {
			t.Fatalf("stream: status %d", code)
		}
		if len(d.Timeline) != 22 || len(d.StallList) != 1 || d.StallList[0].Cause != "origin" || d.StallList[0].StartMs != f.pauseAtMs {
			t.Fatalf("stream = %d stamps, stalls %+v; want 22 stamps, one origin stall at %v ms", len(d.Timeline), d.StallList, f.pauseAtMs)
		}
		if d.Origin == nil || len(d.Origin.EmitMs) != 22 || d.Origin.OffsetMs != 50 {
			t.Fatalf("origin = %+v, want 22 emits shifted by 50 ms", d.Origin)
		}
		// Aligned: the origin's emits fall on the browser's arrivals, the
		// pause included.
		for i, e := range d.Origin.EmitMs {
			if math.Abs(e-d.Timeline[i].AtMs) > 0.002 {
				t.Errorf("emit %d at %v ms, arrival at %v ms", i, e, d.Timeline[i].AtMs)
			}
		}
		var e map[string]string
		if code := getJSON(t, base+"/api/stream?site=v&id="+strings.Repeat("0", 32), &e); code != 404 {
			t.Errorf("unknown stream: status %d, want 404", code)
		}
		if code := getJSON(t, base+"/api/stream?site=v&id=xyz", &e); code != 400 {
			t.Errorf("bad id: status %d, want 400", code)
		}
		// The row is found through the stream id's bloom filter, not by
		// reading the site's every stream id.
		raw, _ := hex.DecodeString(f.pausedID)
		rows, err := f.conn.Query(context.Background(), "EXPLAIN indexes = 1 "+query.StreamRowSQL, "v", string(raw))
		if err != nil {
			t.Fatal(err)
		}
		var plan strings.Builder
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan.WriteString(line + "\n")
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan.String(), "stream_id_bf") {
			t.Errorf("the stream view's read does not use the index stream_id_bf:\n%s", plan.String())
		}
	})

	t.Run("compare", func(t *testing.T) {
		cmp := func(a, b string) query.Comparison {
			t.Helper()
			var c query.Comparison
			if code := getJSON(t, base+"/api/compare?site=v&since=1h&dim=release&a="+a+"&b="+b, &c); code != 200 {
				t.Fatalf("compare %s %s: status %d", a, b, code)
			}
			return c
		}
		reg := cmp("r1", "r2")
		if reg.StreamsA != 30 || reg.StreamsB != 30 {
			t.Fatalf("streams = %d, %d, want 30, 30", reg.StreamsA, reg.StreamsB)
		}
		for _, m := range []string{"ttft_ms", "itl_p50_ms", "tokens_per_sec"} {
			if !slices.Contains(reg.Worse, m) {
				t.Errorf("r1 → r2: worse = %v, want %s among them: %+v", reg.Worse, m, reg.Metrics)
			}
		}
		if back := cmp("r2", "r1"); len(back.Worse) != 0 {
			t.Errorf("r2 → r1: worse = %v, want none (it is better)", back.Worse)
		}
		same := cmp("r1", "r1b")
		for _, m := range same.Metrics {
			if m.Significant {
				t.Errorf("r1 → r1b (same cadence): %s flagged: %+v", m.Name, m)
			}
		}
		if len(same.Worse) != 0 {
			t.Errorf("r1 → r1b worse = %v, want none", same.Worse)
		}
	})

	t.Run("values", func(t *testing.T) {
		var v struct {
			Values []query.ValueCount `json:"values"`
		}
		if code := getJSON(t, base+"/api/values?site=v&since=1h&dim=release", &v); code != 200 || len(v.Values) != 4 {
			t.Fatalf("status %d, values %+v", code, v.Values)
		}
	})
}

func TestMannWhitney(t *testing.T) {
	// Disjoint samples of 5: U = 25, z = (12.5 - 0.5)/sqrt(25*11/12).
	u, p := query.MannWhitney([]float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10})
	if u != 25 || math.Abs(p-math.Erfc(12/math.Sqrt(25*11/12.0)/math.Sqrt2)) > 1e-12 {
		t.Errorf("U, p = %v, %v", u, p)
	}
	// U counts pairs (ties half), whatever the ties.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		x, y := make([]float64, 1+rng.IntN(20)), make([]float64, 1+rng.IntN(20))
		for i := range x {
			x[i] = float64(rng.IntN(6))
		}
		for i := range y {
			y[i] = float64(rng.IntN(6))
		}
		slices.Sort(x)
		slices.Sort(y)
		var want float64
		for _, a := range x {
			for _, b := range y {
				if b > a {
					want++
				} else if b == a {
					want += 0.5
				}
			}
		}
		u, p := query.MannWhitney(x, y)
		if u != want || !(p >= 0 && p <= 1) {
			t.Fatalf("x %v y %v: U = %v, want %v; p = %v", x, y, u, want, p)
		}
		if _, p2 := query.MannWhitney(y, x); math.Abs(p-p2) > 1e-12 {
			t.Fatalf("p not symmetric: %v vs %v", p, p2)
		}
	}
	if _, p := query.MannWhitney([]float64{2, 2}, []float64{2, 2, 2}); p != 1 {
		t.Errorf("all ties: p = %v, want 1", p)
	}
}
