package promoter_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/join"
	"github.com/itlmon/itlmon/collector/promoter"
	"github.com/itlmon/itlmon/collector/secret"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/poll"
	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

const ms = 1000

// pausedOrigin emits 30 content events 20 ms apart from 100 ms, pausing
// 600 ms before event 15.
func pausedOrigin(id string) beacon.Origin {
	o := beacon.Origin{ID: id, StartUnixMs: time.Now().UnixMilli(), Route: "/v1/chat", Format: 1, Status: 1,
		HTTPStatus: 200, TTFBUs: 90 * ms, DurationUs: 1300 * ms, Events: 31, ContentEvents: 30, Flushes: 31,
		MaxEventsPerFlush: 1, Bytes: 3000}
	for i := range 30 {
		e := uint32(100*ms + i*20*ms)
		if i >= 15 {
			e += 600 * ms
		}
		o.EmitUs = append(o.EmitUs, e)
		if i > 0 {
			o.ITL.Record(float64(e - o.EmitUs[i-1]))
		}
	}
	o.TTFTUs = o.EmitUs[0]
	return o
}

// clientOf is the browser's record of o, 40 ms later, its one stall
// attributed `unknown` (the page was idle and the read carried one event).
func clientOf(o beacon.Origin, site string) collector.Stream {
	var r beacon.Record
	rand.Read(r.StreamID[:])
	r.OriginID = o.ID
	r.StartUnixMs = o.StartUnixMs
	r.Format, r.Status, r.HTTPStatus = 1, 1, 200
	r.URLOrigin, r.HTTPProto = "https://api.example", "h2"
	r.TTFBUs, r.TTFCUs, r.DurationUs = o.TTFBUs+40*ms, o.EmitUs[0]+40*ms, o.DurationUs+40*ms
	r.TTFTUs = o.EmitUs[0] + 40*ms
	r.Events, r.ContentEvents, r.Tokens, r.Reads = 31, 30, 30, 31
	r.GapP50Us, r.GapP95Us, r.GapP99Us, r.GapMaxUs = 20*ms, 20*ms, 620*ms, 620*ms
	for i, e := range o.EmitUs {
		r.Timeline = append(r.Timeline, beacon.Stamp{AtUs: e + 40*ms, Read: uint32(i), Content: true})
		if i > 0 {
			r.ITL.Record(float64(e - o.EmitUs[i-1]))
		}
	}
	r.Stalls, r.StalledUs = 1, 620*ms
	r.StallsByCause[meter.CauseUnknown], r.StalledByCause[meter.CauseUnknown] = 1, 620*ms
	r.StallList = []beacon.Stall{{StartUs: o.EmitUs[14] + 40*ms, EndUs: o.EmitUs[15] + 40*ms, Cause: uint8(meter.CauseUnknown), NextReadEvents: 1}}
	r.TTFTCause = uint8(meter.CauseUnknown)
	return collector.Stream{Record: r, Site: site, ReceivedAt: time.Now(), Country: "DE", Region: "DE-BE",
		Browser: "Chrome", OS: "Linux", Device: "desktop", Release: "r1"}
}

// fixture is one collector's storage pipeline on a fresh database: the
// writer (inbox), the origin intake, and a running promoter.
type fixture struct {
	db   *store.DB
	w    *store.Writer
	in   *join.Intake
	p    *promoter.Promoter
	stop func() // stops the promoter (Run returns); idempotent
}

func newFixture(t *testing.T, hold time.Duration) *fixture {
	return newCollector(t, newDB(t), hold)
}

// newCollector is a collector's pipeline on db: several on one db are
// several collectors on one ClickHouse.
func newCollector(t *testing.T, db *store.DB, hold time.Duration) *fixture {
	return newCollectorWith(t, db, promoter.Config{Hold: hold}, nil)
}

// newCollectorWith is newCollector with cfg (Grace, Interval and Logger
// set when zero) and setup called on the promoter before it runs.
func newCollectorWith(t *testing.T, db *store.DB, cfg promoter.Config, setup func(*promoter.Promoter)) *fixture {
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	w, err := store.NewWriter(db, store.WriterOptions{SpoolDir: t.TempDir(), FlushInterval: 50 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Grace == 0 {
		cfg.Grace = 50 * time.Millisecond
	}
	if cfg.Interval == 0 {
		cfg.Interval = 20 * time.Millisecond
	}
	cfg.Logger = log
	p, err := promoter.New([]promoter.Shard{{Conn: db.Conn()}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); p.Run(ctx) }()
	stop := func() { cancel(); <-ran }
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w.Shutdown(sctx)
		stop()
	})
	return &fixture{db, w, join.NewIntake(w, log), p, stop}
}

func (f *fixture) submit(t *testing.T, s ...collector.Stream) {
	t.Helper()
	done := make(chan error, 1)
	if err := f.w.SubmitStreams(context.Background(), s, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("submit not durable within 20s")
	}
}

func (f *fixture) addOrigin(t *testing.T, site string, o ...beacon.Origin) {
	t.Helper()
	if err := f.in.AddOrigin(context.Background(), site, &beacon.OriginBatch{Seq: 1, Site: site, Records: o}); err != nil {
		t.Fatal(err)
	}
}

// waitStats polls p's stats until ok (the counters move after a window's
// last insert, a moment after its rows are readable) or 10 s pass.
func waitStats(t *testing.T, p *promoter.Promoter, want string, ok func(promoter.Stats) bool) {
	t.Helper()
	// The promoter runs against the real engine, on its own clock.
	if !poll.Until(10*time.Second, 20*time.Millisecond, func() bool { return ok(p.Stats()) }) {
		t.Fatalf("promoter stats %+v, want %s", p.Stats(), want)
	}
}

// eventually polls query until it scans want into got or 10 s pass.
func eventually[T comparable](t *testing.T, db *store.DB, query string, want T, args ...any) {
	t.Helper()
	eventuallyWithin(t, 10*time.Second, db, query, want, args...)
}

// eventuallyWithin is eventually with another deadline.
func eventuallyWithin[T comparable](t *testing.T, within time.Duration, db *store.DB, query string, want T, args ...any) {
	t.Helper()
	var got T
	var err error
	// The rows are promoted inside the real engine.
	if poll.Until(within, 50*time.Millisecond, func() bool {
		err = db.Conn().QueryRow(context.Background(), query, args...).Scan(&got)
		return err == nil && got == want
	}) {
		return
	}
	t.Fatalf("%s\n= %v (err %v), want %v", query, got, err, want)
}

// The origin timeline arrives first: the client record is refined at once,
// in itl_streams (and its rollup) and in itl_origin.
func TestOriginFirst(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	o := pausedOrigin("req-1")
	f.addOrigin(t, "chat", o)
	eventually(t, f.db, "SELECT count() FROM itl_origin WHERE origin_id = 'req-1' AND version = 0", uint64(1))
	f.submit(t, clientOf(o, "chat"))

	eventually(t, f.db, "SELECT stalls_origin FROM itl_streams WHERE origin_id = 'req-1'", uint32(1))
	eventually(t, f.db, "SELECT stalls_unknown FROM itl_streams WHERE origin_id = 'req-1'", uint32(0))
	eventually(t, f.db, "SELECT toString(stall_cause) FROM itl_streams WHERE origin_id = 'req-1'", "['origin']")
	eventually(t, f.db, "SELECT toString(ttft_cause) FROM itl_streams WHERE origin_id = 'req-1'", "origin")
	eventually(t, f.db, "SELECT toString((format, status, ttft_cause, stall_cause)) FROM itl_origin FINAL WHERE origin_id = 'req-1'",
		"('openai_chat','complete','origin',['origin'])")
	eventually(t, f.db, "SELECT toString((version, stalls_origin, stalled_us_origin, added_ttft_us, in_streams)) FROM itl_origin FINAL WHERE origin_id = 'req-1'",
		"(1,1,620000,40000,true)")
	eventually(t, f.db, "SELECT toString((gap_p50_us, gap_max_us, stalls, ttft_us, flushes)) FROM itl_origin FINAL WHERE origin_id = 'req-1'",
		"(20000,620000,1,100000,31)")
	// The browser's values the re-chunking rollup's origin part groups by,
	// and that part: one stream whose origin emitted an event per flush.
	eventually(t, f.db, "SELECT toString((url_origin, http_proto, client_content_events, region)) FROM itl_origin FINAL WHERE origin_id = 'req-1' AND version = 1",
		"('https://api.example','h2',30,'DE-BE')")
	eventually(t, f.db, "SELECT toString((sum(streams), sum(multi), sum(origin_smooth), sum(origin_burst))) FROM itl_rechunk_1h WHERE site = 'chat' AND dim = 'api_origin' AND value = 'https://api.example'",
		"(1,1,1,0)")
	eventually(t, f.db, "SELECT toString((sum(streams), sum(stalls_origin), sum(stalled_us_origin), sum(ttft_origin))) FROM itl_origin_1m WHERE site = 'chat'",
		"(1,1,620000,1)")
	eventually(t, f.db, "SELECT toString((sum(stalls_origin), sum(stalled_us_origin), sum(ttft_origin))) FROM itl_rollup_1m WHERE site = 'chat'",
		"(1,620000,1)")
	waitStats(t, f.p, "joined 1, in streams", func(st promoter.Stats) bool { return st.Joined == 1 && st.JoinedInStreams == 1 })
}

// The client record comes first; its timeline, within the hold, still
// refines it.
func TestClientWaitsForOrigin(t *testing.T) {
	f := newFixture(t, 2*time.Second)
	o := pausedOrigin("req-2")
	go func() {
		// sleep: the later timeline arrives 300 ms after the earlier one, as
		// on the wire, while the real promoters hold the earlier one's window
		// (its join hold); waiting for the promoter to have read the earlier
		// record instead let it be promoted before the join.
		time.Sleep(300 * time.Millisecond)
		f.addOrigin(t, "chat", o)
	}()
	f.submit(t, clientOf(o, "chat"))
	eventually(t, f.db, "SELECT stalls_origin FROM itl_streams WHERE origin_id = 'req-2'", uint32(1))
	eventually(t, f.db, "SELECT toString((version, in_streams)) FROM itl_origin FINAL WHERE origin_id = 'req-2'", "(1,true)")
	waitStats(t, f.p, "joined 1, in streams", func(st promoter.Stats) bool { return st.Joined == 1 && st.JoinedInStreams == 1 })
}

// The timeline comes after the hold: itl_streams keeps the client's causes,
// the late join is in itl_origin.
func TestLateOrigin(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 100*time.Millisecond)
	o := pausedOrigin("req-3")
	f.submit(t, clientOf(o, "chat"))
	eventually(t, f.db, "SELECT stalls_unknown FROM itl_streams WHERE origin_id = 'req-3'", uint32(1))
	f.addOrigin(t, "chat", o)
	eventually(t, f.db, "SELECT toString((version, stalls_origin, stalls_unknown, in_streams)) FROM itl_origin FINAL WHERE origin_id = 'req-3'",
		"(1,1,0,false)")
	// Joined from the stored stream: its values still reach the row.
	eventually(t, f.db, "SELECT toString((url_origin, http_proto, client_content_events, region)) FROM itl_origin FINAL WHERE origin_id = 'req-3' AND version = 1",
		"('https://api.example','h2',30,'DE-BE')")
	waitStats(t, f.p, "1 join, not in streams", func(st promoter.Stats) bool { return st.Joined == 1 && st.JoinedInStreams == 0 })
	// A resend of the client record (lost ack) joins nothing twice.
	c := clientOf(o, "chat")
	f.submit(t, c)
	f.submit(t, c)
	eventually(t, f.db, "SELECT sum(copies) FROM itl_promoted", uint64(1))
	eventually(t, f.db, "SELECT count() FROM itl_streams WHERE origin_id = 'req-3'", uint64(2))
	if st := f.p.Stats(); st.Joined != 1 {
		t.Fatalf("Joined = %d after a resend, want 1", st.Joined)
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 0)
	srv := httptest.NewServer(f.in.Handler(func(site string) (secret.Token, bool) {
		return secret.New("s3cret"), site == "chat"
	}))
	defer srv.Close()
	body, err := (&beacon.OriginBatch{Seq: 1, Site: "chat", Dropped: 3, Records: []beacon.Origin{pausedOrigin("req-4")}}).AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	edge := pausedOrigin("req-edge")
	edge.Vantage, edge.Edge = beacon.VantageEdge, beacon.Edge{Colo: "FRA", ClientTCPRTTMs: beacon.NoTime, HeadersUs: 100}
	edgeBody, err := (&beacon.OriginBatch{Seq: 2, Site: "chat", Records: []beacon.Origin{edge}}).AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	post := func(site, key string, body []byte) int {
		req, _ := http.NewRequest("POST", srv.URL+origin.Path+"?site="+site, bytes.NewReader(body))
		if key != "" {
			req.Header.Set(origin.HeaderKey, key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name, site, key string
		body            []byte
		want            int
	}{
		{"unknown site", "other", "s3cret", body, http.StatusForbidden},
		{"no key", "chat", "", body, http.StatusForbidden},
		{"wrong key", "chat", "guess", body, http.StatusForbidden},
		{"garbage", "chat", "s3cret", []byte("{\"json\":1}"), http.StatusBadRequest},
		{"edge timeline", "chat", "s3cret", edgeBody, http.StatusNoContent},
		{"ok", "chat", "s3cret", body, http.StatusNoContent},
	} {
		if got := post(tc.site, tc.key, tc.body); got != tc.want {
			t.Fatalf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
	eventually(t, f.db, "SELECT toString((version, content_events, length(emit_us))) FROM itl_origin FINAL WHERE origin_id = 'req-4'", "(0,30,30)")
	// The edge's timeline is stored as an edge's, never as an origin's.
	eventually(t, f.db, "SELECT toString((version, colo, content_events, length(arrive_us))) FROM itl_edge FINAL WHERE origin_id = 'req-edge'", "(0,'FRA',30,30)")
	eventually(t, f.db, "SELECT count() FROM itl_origin WHERE origin_id = 'req-edge'", uint64(0))
	if st := f.in.Stats(); st.Origins != 1 || st.Edges != 1 || st.ReporterDropped != 3 {
		t.Fatalf("stats %+v, want 1 origin, 1 edge, 3 reporter drops", st)
	}
}

// A client record whose origin timeline never comes is stored unrefined
// once the hold is over.
func TestOriginNeverComes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 200*time.Millisecond)
	o := pausedOrigin("req-5")
	f.submit(t, clientOf(o, "blog"))
	eventually(t, f.db, "SELECT stalls_unknown FROM itl_streams WHERE origin_id = 'req-5'", uint32(1))
	eventually(t, f.db, "SELECT count() FROM itl_origin WHERE origin_id = 'req-5'", uint64(0))
}

// TestOnePromoterLeads: two collectors on one ClickHouse both run a
// promoter, but one leads and does the promotion work (the other would only
// repeat it, ClickHouse dropping the copy); when the leader stops, the other
// takes over once the promotion lags (10 s) and nothing is lost or doubled.
func TestOnePromoterLeads(t *testing.T) {
	db := newDB(t)
	a, b := newCollector(t, db, 100*time.Millisecond), newCollector(t, db, 100*time.Millisecond)
	// Both beat from the start, idle or not: the leadership is settled
	// before the first window.
	eventually(t, db, "SELECT uniqExact(collector) FROM itl_promoters", uint64(2))
	for i := range 4 {
		f := []*fixture{a, b}[i%2]
		f.submit(t, clientOf(pausedOrigin(fmt.Sprintf("lead-%d", i)), "chat"))
		// sleep: the records spread over several of the real promoters'
		// windows (100 ms) while both collectors beat (a variant waiting for
		// each record to be read saw the leadership move once on a loaded
		// machine; kept as it was).
		time.Sleep(700 * time.Millisecond)
	}
	eventually(t, db, "SELECT count() FROM itl_streams WHERE origin_id LIKE 'lead-%'", uint64(4))
	wa, wb := a.p.Stats().Windows, b.p.Stats().Windows
	if wa > 0 && wb > 0 || wa+wb == 0 {
		t.Fatalf("windows promoted by a: %d, by b: %d; want all by one", wa, wb)
	}
	leader, other := a, b
	if wb > 0 {
		leader, other = b, a
	}
	leader.stop()
	began := time.Now()
	leader.submit(t, clientOf(pausedOrigin("lead-after"), "chat")) // its writer still works
	// The other takes over once the promotion has stalled 10 s with a
	// sealed window waiting, or once the leader's last heartbeat is 10 s old.
	eventuallyWithin(t, 20*time.Second, db, "SELECT count() FROM itl_streams WHERE origin_id = 'lead-after'", uint64(1))
	t.Logf("the other promoter took over %v after the leader stopped", time.Since(began).Round(100*time.Millisecond))
	waitStats(t, other.p, "windows promoted by the other promoter", func(st promoter.Stats) bool { return st.Windows > 0 })
	eventually(t, db, "SELECT count() FROM itl_streams WHERE origin_id LIKE 'lead-%'", uint64(5))
}
