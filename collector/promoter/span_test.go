package promoter_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/promoter"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// spanInbox is an inbox of 14 seconds, an hour old, that exercises what a
// span of windows must match as window by window does: records and their
// timelines in one second, a timeline in the hold after its client's
// window and one past it, a timeline before its client, copies in the same
// and in later seconds, two client records naming one origin id seconds
// apart, an edge timeline in a later second than its client, one without a
// client, and one without an id. Each row's received_at is base plus its
// offset (and becomes its ingested_at).
func spanInbox(t *testing.T, base time.Time) []store.InboxRow {
	t.Helper()
	var rows []store.InboxRow
	add := func(at time.Duration, r store.InboxRow, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		r.ReceivedAt = base.Add(at).UTC()
		rows = append(rows, r)
	}
	client := func(at time.Duration, s collector.Stream) {
		t.Helper()
		r, err := store.ClientRow(&s)
		add(at, r, err)
	}
	timeline := func(at time.Duration, o beacon.Origin) {
		t.Helper()
		r, err := store.OriginRow("chat", time.Now(), &o)
		add(at, r, err)
	}
	withEdge := func(id string) (beacon.Origin, beacon.Origin, collector.Stream) {
		o := smoothOrigin(id)
		atEdge := heldFrom(shifted(o.EmitUs, 5*ms), 15, 600*ms)
		return o, edgeView(o, atEdge), browserView(o, shifted(atEdge, 40*ms), meter.CauseUnknown)
	}
	const s, msec = time.Second, time.Millisecond

	o, e, c := withEdge("eq-0") // all in one second
	client(100*msec, c)
	timeline(500*msec, o)
	timeline(600*msec, e)

	o = pausedOrigin("eq-1") // the origin in the hold after the client's window
	client(1200*msec, clientOf(o, "chat"))
	timeline(3300*msec, o)

	o, e, c = withEdge("eq-2") // the origin past the hold (late), the edge in it
	client(1500*msec, c)
	timeline(2*s, e)
	timeline(6500*msec, o)

	o = pausedOrigin("eq-3") // the origin before its client
	timeline(2100*msec, o)
	client(4*s, clientOf(o, "chat"))

	c = clientOf(pausedOrigin("eq-4"), "chat") // copies: the same second, later seconds
	client(3*s, c)
	client(3*s+200*msec, c)
	client(7200*msec, c)

	o = pausedOrigin("eq-5") // a copy of the timeline seconds later
	timeline(5*s, o)
	client(5100*msec, clientOf(o, "chat"))
	timeline(9500*msec, o)

	o = pausedOrigin("eq-6") // two client records naming one id: the second a conflict
	client(6*s, clientOf(o, "chat"))
	client(8*s, clientOf(o, "chat"))
	timeline(8300*msec, o)

	client(10*s, clientOf(pausedOrigin("eq-7"), "chat")) // no timeline

	o, e, c = withEdge("eq-8") // across seconds, the edge in the client's hold
	client(11900*msec, c)
	timeline(12100*msec, o)
	timeline(13500*msec, e)

	_, e, _ = withEdge("eq-9") // an edge timeline no client names
	timeline(12500*msec, e)

	timeline(4400*msec, pausedOrigin("")) // no id: promoted per copy
	return rows
}

// landInbox lands rows in db's inbox, each ingested at its received_at.
func landInbox(t *testing.T, db *store.DB, rows []store.InboxRow) {
	t.Helper()
	ctx := t.Context()
	if err := db.Conn().Exec(ctx, "CREATE TABLE staging AS itl_inbox"); err != nil {
		t.Fatal(err)
	}
	if err := store.InsertRows(ctx, db.Conn(), "staging", nil, rows); err != nil {
		t.Fatal(err)
	}
	if err := db.Conn().Exec(ctx, "INSERT INTO itl_inbox SELECT * REPLACE (received_at AS ingested_at) FROM staging"); err != nil {
		t.Fatal(err)
	}
}

// promoted is what a promotion stored, as comparable text: every row of
// the tables it writes (the promoted ids without their window, which names
// the run).
func promoted(t *testing.T, db *store.DB) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for table, q := range map[string]string{
		"itl_streams":      "SELECT toString(tuple(*)) FROM itl_streams",
		"itl_timelines":    "SELECT toString(tuple(*)) FROM itl_timelines",
		"itl_origin":       "SELECT toString(tuple(*)) FROM itl_origin FINAL",
		"itl_edge":         "SELECT toString(tuple(*)) FROM itl_edge FINAL",
		"itl_promoted_ids": "SELECT toString((kind, site, hex(stream_id))) FROM itl_promoted_ids",
		"itl_rollup_1m":    "SELECT toString(tuple(*)) FROM itl_rollup_1m FINAL",
		"itl_rollup_1h":    "SELECT toString(tuple(*)) FROM itl_rollup_1h FINAL",
	} {
		rows, err := db.Conn().Query(t.Context(), q)
		if err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out[table] = append(out[table], s)
		}
		rows.Close()
		slices.Sort(out[table])
	}
	return out
}

// spanCatchUp runs CatchUp once on a promoter of db with the hold
// spanInbox is made for (its collector name, setup applied).
func spanCatchUp(t *testing.T, db *store.DB, collector string, setup func(*promoter.Promoter)) (promoter.Stats, error) {
	t.Helper()
	p, err := promoter.New([]promoter.Shard{{Conn: db.Conn()}}, promoter.Config{Hold: 3 * time.Second, Grace: 50 * time.Millisecond,
		Collector: collector, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	setup(p)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	err = p.CatchUp(ctx)
	return p.Stats(), err
}

// spanRun promotes an inbox of rows on a fresh database with spans of at
// most maxSpan windows and returns what it stored, the promoter's stats and
// the runs it made.
func spanRun(t *testing.T, rows []store.InboxRow, maxSpan int) (map[string][]string, promoter.Stats, uint64) {
	t.Helper()
	db := newDB(t)
	landInbox(t, db, rows)
	st, err := spanCatchUp(t, db, "a", func(p *promoter.Promoter) { p.SetMaxSpan(maxSpan) })
	if err != nil {
		t.Fatal(err)
	}
	// A run marks each window holding rows, its counts on the last.
	var runs, windows uint64
	if err := db.Conn().QueryRow(t.Context(), "SELECT countIf(records > 0), uniqExact(promoted_window) FROM itl_promoted").Scan(&runs, &windows); err != nil {
		t.Fatal(err)
	}
	if windows != 14 {
		t.Fatalf("spans of %d: %d windows marked promoted, want 14 (a window each second of the inbox)", maxSpan, windows)
	}
	return promoted(t, db), st, runs
}

// Windows promoted in spans store exactly what they store promoted one by
// one: every row of every table the promotion writes (itl_promoted marks
// the same windows), and the same counts,
// whether a span holds the whole inbox or spans of 4 windows cut across
// its joins and copies.
func TestSpansStoreWhatWindowsDo(t *testing.T) {
	t.Parallel()
	rows := spanInbox(t, time.Now().Add(-time.Hour).Truncate(time.Second))
	want, wantStats, runs := spanRun(t, rows, 1)
	if runs != 14 {
		t.Fatalf("window by window: %d runs, want 14", runs)
	}
	if n := len(want["itl_streams"]); n != 10 {
		t.Fatalf("window by window: %d rows in itl_streams, want 10", n)
	}
	counts := func(st promoter.Stats) promoter.Stats {
		return promoter.Stats{Streams: st.Streams, Origins: st.Origins, Edges: st.Edges, Copies: st.Copies, Records: st.Records,
			Joined: st.Joined, JoinedInStreams: st.JoinedInStreams, EdgeJoined: st.EdgeJoined, Conflicts: st.Conflicts}
	}
	for _, maxSpan := range []int{4, 30} {
		got, st, runs := spanRun(t, rows, maxSpan)
		if wantRuns := uint64((14 + maxSpan - 1) / maxSpan); runs != wantRuns {
			t.Errorf("spans of %d: %d runs, want %d", maxSpan, runs, wantRuns)
		}
		for table, w := range want {
			if g := got[table]; !slices.Equal(g, w) {
				t.Errorf("spans of %d: %s differs from window by window:\n got %s\nwant %s", maxSpan, table, strings.Join(g, "\n     "), strings.Join(w, "\n     "))
			}
		}
		if g, w := counts(st), counts(wantStats); g != w {
			t.Errorf("spans of %d: counts %+v, window by window %+v", maxSpan, g, w)
		}
	}
}

// A span cut after its record, or after its pages landed but before its
// mark, is finished by a promoter that would not span at all (window by
// window) in the recorded span: one run, under the span's tokens (the
// landed pages deduplicated), storing what window by window stores.
func TestCutSpanFinishedAsRecorded(t *testing.T) {
	t.Parallel()
	rows := spanInbox(t, time.Now().Add(-time.Hour).Truncate(time.Second))
	want, _, _ := spanRun(t, rows, 1)
	for _, tc := range []struct {
		name string
		cut  func(*promoter.Promoter)
	}{
		{"after its record", (*promoter.Promoter).SetCutAfterRecord},
		{"before its mark", (*promoter.Promoter).SetCutBeforeMark},
	} {
		db := newDB(t)
		landInbox(t, db, rows)
		if _, err := spanCatchUp(t, db, "a-cut", tc.cut); err == nil {
			t.Fatalf("cut %s: the cut promoter finished its span", tc.name)
		}
		eventually(t, db, "SELECT toString((count(), any(windows), any(collector))) FROM itl_promote_pages", "(1,30,'a-cut')")
		eventually(t, db, "SELECT count() FROM itl_promoted", uint64(0))
		if _, err := spanCatchUp(t, db, "b-finish", func(p *promoter.Promoter) { p.SetMaxSpan(1) }); err != nil {
			t.Fatal(err)
		}
		eventually(t, db, "SELECT toString((countIf(records > 0), sum(records), uniqExact(promoted_window))) FROM itl_promoted", "(1,25,14)")
		got := promoted(t, db)
		for table, w := range want {
			if g := got[table]; !slices.Equal(g, w) {
				t.Errorf("cut %s: %s differs from window by window:\n got %s\nwant %s", tc.name, table, strings.Join(g, "\n     "), strings.Join(w, "\n     "))
			}
		}
	}
}
