package store_test

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/benchrec"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// TestMigrateNames: a database made by the schema before 006 and holding
// rows with numeric codes is migrated; the old rows then read as names (every
// code of every table, and an unknown one), the rollups keep what they held
// and count new rows by name, new rows carry end_reason and headers_us, and
// migrating again (also after an interruption) changes nothing.
func TestMigrateNames(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	ctx := context.Background()
	db := migratedUpTo(t, "mig", 5)
	exec := func(q string, args ...any) {
		t.Helper()
		if err := db.Conn().Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Old rows: row i has code i in every coded column (0..9: past every
	// table's end), in the same minute.
	at := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	const oldRows = 10
	for i := range oldRows {
		exec(`INSERT INTO itl_streams (received_at, started_at, site, stream_id, format, status, http_status,
			ttft_us, ttft_cause, stall_start_us, stall_end_us, stall_cause, stall_next_read_events)
			VALUES (?, ?, 'old', ?, ?, ?, 200, 150000, ?, [1000000], [1300000], [?], [2])`,
			at, at, fmt.Sprintf("old-stream%06d", i), uint8(i), uint8(i), uint8(i), uint8(i))
	}
	exec(`INSERT INTO itl_origin (received_at, site, origin_id, version, started_at, route, format, status,
		client_received_at, ttft_cause, stall_cause) VALUES (?, 'old', 'req-old', 1, ?, '/v1/chat', 1, 2, ?, 4, [4, 2])`,
		at, at, at)
	rollup := func(site string) string {
		t.Helper()
		var s string
		if err := db.Conn().QueryRow(ctx, `SELECT toString((sum(streams), sum(completed), sum(ttft_unknown), sum(ttft_network),
			sum(ttft_page), sum(ttft_origin), sum(aborted), sum(failed), sum(before_headers), sum(before_headers_us)))
			FROM itl_rollup_1m WHERE site = ?`, site).Scan(&s); err != nil {
			t.Fatalf("read rollup: %v", err)
		}
		return s
	}
	var before string
	if err := db.Conn().QueryRow(ctx, `SELECT toString((sum(streams), sum(completed), sum(ttft_unknown), sum(ttft_network),
		sum(ttft_page), sum(ttft_origin))) FROM itl_rollup_1m WHERE site = 'old'`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if want := "(10,1,1,1,1,1)"; before != want {
		t.Fatalf("rollup before the migration = %s, want %s", before, want)
	}

	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	// An interrupted 006: its record gone, every statement runs again.
	exec("DELETE FROM schema_migrations WHERE version = 6")
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate after an interrupted 006: %v", err)
	}

	checkOld := func(when string) {
		t.Helper()
		rows, err := db.Conn().Query(ctx, `SELECT format, status, ttft_cause, stall_cause, end_reason, headers_us
			FROM itl_streams WHERE site = 'old' ORDER BY stream_id`)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		defer rows.Close()
		i := 0
		for ; rows.Next(); i++ {
			var format, status, ttftCause, end string
			var stallCause []string
			var headers *uint32
			if err := rows.Scan(&format, &status, &ttftCause, &stallCause, &end, &headers); err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			code := uint8(i)
			// 006 names the codes known then (formats 0..8; later formats
			// were only ever stored by name).
			want := fmt.Sprintln(meter.Name(meter.FormatNames[:9], code), meter.Name(meter.StatusNames[:], code),
				meter.Name(meter.CauseNames[:], code), []string{meter.Name(meter.CauseNames[:], code)}, "", nil)
			if got := fmt.Sprintln(format, status, ttftCause, stallCause, end, headers); got != want {
				t.Errorf("%s: old row %d = %s, want %s", when, i, got, want)
			}
		}
		if i != oldRows {
			t.Fatalf("%s: %d old rows, want %d", when, i, oldRows)
		}
		var origin string
		if err := db.Conn().QueryRow(ctx, "SELECT toString((format, status, ttft_cause, stall_cause)) FROM itl_origin WHERE origin_id = 'req-old'").Scan(&origin); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if want := "('openai_chat','aborted','origin',['origin','network'])"; origin != want {
			t.Errorf("%s: old origin row = %s, want %s", when, origin, want)
		}
	}
	checkOld("after migrating")
	if got, want := rollup("old"), "(10,1,1,1,1,1,0,0,0,0)"; got != want {
		t.Fatalf("old rollup after migrating = %s, want %s (kept as it was)", got, want)
	}
	// itl_origin_1m keeps what it held and counts new rows by name.
	originRollup := func() string {
		t.Helper()
		var s string
		if err := db.Conn().QueryRow(ctx, `SELECT toString((sum(streams), sum(ttft_unknown), sum(ttft_network), sum(ttft_page), sum(ttft_origin)))
			FROM itl_origin_1m WHERE site = 'old'`).Scan(&s); err != nil {
			t.Fatalf("read itl_origin_1m: %v", err)
		}
		return s
	}
	if got, want := originRollup(), "(1,0,0,0,1)"; got != want {
		t.Fatalf("itl_origin_1m after migrating = %s, want %s", got, want)
	}
	exec(`INSERT INTO itl_origin (received_at, site, origin_id, version, started_at, route, format, status,
		client_received_at, ttft_cause, stall_cause) VALUES (?, 'old', 'req-new', 1, ?, '/v1/chat', 'openai_chat', 'complete', ?, 'network', ['network'])`,
		at, at, at)
	if got, want := originRollup(), "(2,0,1,0,1)"; got != want {
		t.Fatalf("itl_origin_1m after a new row = %s, want %s", got, want)
	}

	var codeType, nameType string
	if err := db.Conn().QueryRow(ctx, `SELECT
		(SELECT type FROM system.columns WHERE database = currentDatabase() AND table = 'itl_streams' AND name = 'status_code'),
		(SELECT type FROM system.columns WHERE database = currentDatabase() AND table = 'itl_streams' AND name = 'status')`).Scan(&codeType, &nameType); err != nil {
		t.Fatal(err)
	}
	if codeType != "UInt8" || nameType != "LowCardinality(String)" {
		t.Fatalf("status_code, status types = %s, %s; want UInt8, LowCardinality(String)", codeType, nameType)
	}

	// New rows: a complete stream and one aborted before the headers.
	now := time.Now()
	complete := makeStream(1, "new", now)
	complete.Status, complete.End, complete.HeadersUs = uint8(meter.StatusComplete), uint8(meter.EndClosedAfterEnd), 80_000
	complete.TTFTCause = uint8(meter.CauseNetwork)
	gaveUp := makeStream(2, "new", now)
	r := &gaveUp.Record
	*r = beacon.Record{StreamID: r.StreamID, StartUnixMs: r.StartUnixMs, PageOrigin: r.PageOrigin, PagePath: r.PagePath,
		URLOrigin: r.URLOrigin, URLPath: r.URLPath, Model: r.Model,
		Status: uint8(meter.StatusAborted), End: uint8(meter.EndAbort), HeadersUs: beacon.NoTime,
		TTFBUs: beacon.NoTime, TTFCUs: beacon.NoTime, TTFTUs: beacon.NoTime, DurationUs: 1_500_000}
	if err := store.InsertDirect(ctx, db.Conn(), []collector.Stream{complete, gaveUp}); err != nil {
		t.Fatalf("insert: %v", err)
	}
	if got, want := rollup("new"), "(2,1,0,1,0,0,1,0,1,1500000)"; got != want {
		t.Fatalf("new rollup = %s, want %s", got, want)
	}
	got, err := db.LatestStreams(ctx, collector.StreamFilter{Site: "new", Since: now.Add(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b collector.Stream) int { return int(a.Status) - int(b.Status) })
	if len(got) != 2 {
		t.Fatalf("%d new streams read back, want 2", len(got))
	}
	if c := got[0]; c.Status != complete.Status || c.End != complete.End || c.HeadersUs != 80_000 ||
		c.TTFTCause != complete.TTFTCause || c.Format != complete.Format || len(c.StallList) != 1 ||
		c.StallList[0].Cause != complete.StallList[0].Cause {
		t.Errorf("complete stream read back: status %d end %d headers %d ttft cause %d format %d stalls %+v",
			c.Status, c.End, c.HeadersUs, c.TTFTCause, c.Format, c.StallList)
	}
	if a := got[1]; a.Status != uint8(meter.StatusAborted) || a.End != uint8(meter.EndAbort) ||
		a.HeadersUs != beacon.NoTime || a.DurationUs != 1_500_000 || a.HTTPStatus != 0 {
		t.Errorf("aborted stream read back: status %d end %d headers %d duration %d http %d",
			a.Status, a.End, a.HeadersUs, a.DurationUs, a.HTTPStatus)
	}
	var stored string
	if err := db.Conn().QueryRow(ctx, `SELECT toString(groupArray((status, end_reason, headers_us, ttft_cause, stall_cause)))
		FROM (SELECT * FROM itl_streams WHERE site = 'new' ORDER BY status)`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if want := "[('aborted','abort',NULL,'none',[]),('complete','closed_after_end',80000,'network',['network'])]"; stored != want {
		t.Errorf("new rows stored as %s, want %s", stored, want)
	}

	// Old parts merged with new ones keep their names.
	exec("OPTIMIZE TABLE itl_streams FINAL")
	exec("OPTIMIZE TABLE itl_origin FINAL")
	checkOld("after a merge")
}

// TestRenameInPlaceCutCompleted: a server that died inside 011's rename in
// place (between its two renames) left a view under its passing name; the
// next migration completes the rename, and the view feeds its table again.
func TestRenameInPlaceCutCompleted(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	ctx := t.Context()
	db := migratedUpTo(t, "renamecut", 10)
	if err := db.Conn().Exec(ctx, "RENAME TABLE itl_rollup_1m_mv TO itl_rollup_1m_mv_renaming"); err != nil {
		t.Fatal(err)
	}
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate after the cut: %v", err)
	}
	var views string
	if err := db.Conn().QueryRow(ctx, `SELECT toString(groupArray(name)) FROM (SELECT name FROM system.tables
		WHERE database = currentDatabase() AND name LIKE 'itl_rollup_1m%mv%' AND name NOT LIKE '%site%' ORDER BY name)`).Scan(&views); err != nil {
		t.Fatal(err)
	}
	if want := "['itl_rollup_1m_cause_mv','itl_rollup_1m_mv']"; views != want {
		t.Fatalf("views after the migration = %s, want %s", views, want)
	}
	if err := store.InsertStreams(ctx, db.Conn(), makeStreams(3, "cut", time.Now().UTC()), "renamecut"); err != nil {
		t.Fatal(err)
	}
	if got := queryUint(t, db, "SELECT sum(streams) FROM itl_rollup_1m WHERE site = 'cut'"); got != 3 {
		t.Fatalf("itl_rollup_1m counts %d streams, want 3", got)
	}
}

// migratedUpTo opens a new database (its name starting with prefix) on the
// shared engine, logging to t, with the migrations up to version last
// applied, as a collector of that release left it; closed when t ends.
func migratedUpTo(t *testing.T, prefix string, last uint32) *store.DB {
	t.Helper()
	e, name := chtest.Engine(t), freshName(prefix)
	chtest.DropAtEnd(t, name)
	db, err := store.Open(context.Background(), store.Options{Addr: e.NativeAddr(), Dial: e.DialContext, CreateDatabase: true,
		Database: name,
		Logger:   zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.MigrateUpTo(context.Background(), last); err != nil {
		t.Fatalf("migrate to %03d: %v", last, err)
	}
	return db
}

// TestDailyRollupFromOnUpgrade: 013 on a database that has streams makes
// itl_rollup_1d_from the next UTC day (every stream stored before the view
// is in an earlier day, and the read side takes whole days from the daily
// table only from it on); the view counts what is stored after it, once.
func TestDailyRollupFromOnUpgrade(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	ctx := context.Background()
	db := migratedUpTo(t, "daily", 12)
	at := time.Now().UTC().Add(-time.Minute)
	if err := store.InsertDirect(ctx, db.Conn(), makeStreams(5, "before", at)); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC()
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	t1 := time.Now().UTC()
	var from time.Time
	if err := db.Conn().QueryRow(ctx, "SELECT max(complete_from) FROM itl_rollup_1d_from").Scan(&from); err != nil {
		t.Fatal(err)
	}
	// The migration's clock is between t0 and t1: the day after its own.
	if from = from.UTC(); !from.Equal(t0.Truncate(24*time.Hour).Add(24*time.Hour)) && !from.Equal(t1.Truncate(24*time.Hour).Add(24*time.Hour)) {
		t.Errorf("itl_rollup_1d_from = %v, want the UTC day after the migration's (it ran between %v and %v)", from, t0, t1)
	}
	if n := queryUint(t, db, "SELECT count() FROM itl_rollup_1d_dim"); n != 0 {
		t.Errorf("itl_rollup_1d_dim holds %d rows before any insert after its view", n)
	}
	if err := store.InsertDirect(ctx, db.Conn(), makeStreams(7, "after", time.Now().UTC())); err != nil {
		t.Fatal(err)
	}
	if err := db.Migrate(ctx); err != nil { // again: changes nothing
		t.Fatalf("migrate again: %v", err)
	}
	if n := queryUint(t, db, "SELECT sum(streams) FROM itl_rollup_1d_dim WHERE site = 'after' AND dim = 'browser'"); n != 7 {
		t.Errorf("itl_rollup_1d_dim counts %d streams stored after its view, want 7", n)
	}
	if n := queryUint(t, db, "SELECT count() FROM itl_rollup_1d_from"); n != 1 {
		t.Errorf("itl_rollup_1d_from holds %d rows after a second migration, want 1", n)
	}
}

// TestHourFromOnUpgrade: 014 and 015 on a database that has streams make
// itl_streams_sample_from and itl_rechunk_1h_from the next hour (every
// stream stored before their views is in an earlier one, and the read side
// reads their tables only for hours from it on); the views hold the
// streams stored after them, once.
func TestHourFromOnUpgrade(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	ctx := context.Background()
	db := migratedUpTo(t, "hourfrom", 13)
	if err := store.InsertDirect(ctx, db.Conn(), makeStreams(50, "before", time.Now().UTC().Add(-time.Minute))); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC()
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	t1 := time.Now().UTC()
	for _, table := range []string{"itl_streams_sample", "itl_rechunk_1h"} {
		var from time.Time
		if err := db.Conn().QueryRow(ctx, "SELECT max(complete_from) FROM "+table+"_from").Scan(&from); err != nil {
			t.Fatal(err)
		}
		// The migration's clock is between t0 and t1: the hour after its own.
		if from = from.UTC(); !from.Equal(t0.Truncate(time.Hour).Add(time.Hour)) && !from.Equal(t1.Truncate(time.Hour).Add(time.Hour)) {
			t.Errorf("%s_from = %v, want the hour after the migration's (it ran between %v and %v)", table, from, t0, t1)
		}
		if n := queryUint(t, db, "SELECT count() FROM "+table); n != 0 {
			t.Errorf("%s holds %d rows before any insert after its view", table, n)
		}
	}
	if err := store.InsertDirect(ctx, db.Conn(), makeStreams(400, "after", time.Now().UTC())); err != nil {
		t.Fatal(err)
	}
	if err := db.Migrate(ctx); err != nil { // again: changes nothing
		t.Fatalf("migrate again: %v", err)
	}
	want := queryUint(t, db, "SELECT count() FROM itl_streams WHERE site = 'after' AND cityHash64(stream_id) < pow(2, 60)")
	if n := queryUint(t, db, "SELECT count() FROM itl_streams_sample WHERE site = 'after'"); n != want || n == 0 {
		t.Errorf("itl_streams_sample holds %d of the streams stored after its view, want the %d below its bound", n, want)
	}
	if n := queryUint(t, db, "SELECT sum(streams) FROM itl_rechunk_1h WHERE site = 'after' AND dim = 'browser'"); n != 400 {
		t.Errorf("itl_rechunk_1h counts %d streams stored after its view, want 400", n)
	}
	for _, table := range []string{"itl_streams_sample_from", "itl_rechunk_1h_from"} {
		if n := queryUint(t, db, "SELECT count() FROM "+table); n != 1 {
			t.Errorf("%s holds %d rows after a second migration, want 1", table, n)
		}
	}
}

// TestPromotedIDsHashOnUpgrade: 019 adds id_hash to itl_promoted_ids; rows
// stored before it (in parts without the column) read the same hash as
// rows stored after, so the promoter's lookup, which filters on the hash
// first, finds both.
func TestPromotedIDsHashOnUpgrade(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	ctx := context.Background()
	db := migratedUpTo(t, "idhash", 18)
	at := time.Now().UTC().Truncate(time.Second)
	insert := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			if err := db.Conn().Exec(ctx, "INSERT INTO itl_promoted_ids (kind, site, stream_id, promoted_window) VALUES ('client', 's', ?, ?)", id, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	insert("before-1", "before-2")
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	insert("after-1")
	if n := queryUint(t, db, "SELECT countIf(id_hash != cityHash64(stream_id)) + countIf(id_hash = 0) FROM itl_promoted_ids"); n != 0 {
		t.Errorf("%d rows whose id_hash is not cityHash64(stream_id)", n)
	}
	var got []string
	rows, err := db.Conn().Query(ctx, `SELECT stream_id FROM itl_promoted_ids
		PREWHERE id_hash IN (SELECT cityHash64(arrayJoin(['before-2', 'after-1', 'never'])))
		WHERE stream_id IN ('before-2', 'after-1', 'never') ORDER BY stream_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		got = append(got, id)
	}
	rows.Close()
	if want := []string{"after-1", "before-2"}; !slices.Equal(got, want) {
		t.Errorf("the lookup by hash found %v, want %v", got, want)
	}
}

// TestStreamsPartsCompactOnUpgrade: 020 has itl_streams write the part of a
// promoter's page (10,000 records here, over the 10 MiB a part was wide
// from before) in the compact format; before it, the same insert made a
// wide part.
func TestStreamsPartsCompactOnUpgrade(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	ctx := context.Background()
	db := migratedUpTo(t, "compact", 19)
	rng := mrand.New(mrand.NewPCG(3, 4))
	partOf := func(site string) (typ string, bytes uint64) {
		t.Helper()
		streams := makeStreams(10_000, site, time.Now().UTC())
		for i := range streams {
			benchrec.Answer(&streams[i].Record, rng)
		}
		if err := store.InsertDirect(ctx, db.Conn(), streams); err != nil {
			t.Fatal(err)
		}
		if err := db.Conn().QueryRow(ctx, `SELECT any(part_type), sum(data_uncompressed_bytes) FROM system.parts
			WHERE database = currentDatabase() AND table = 'itl_streams' AND active
			AND name IN (SELECT DISTINCT _part FROM itl_streams WHERE site = ?)`, site).Scan(&typ, &bytes); err != nil {
			t.Fatal(err)
		}
		return typ, bytes
	}
	if typ, bytes := partOf("before"); typ != "Wide" {
		t.Errorf("before 020, a page's part of %.1f MiB is %s, want Wide (the default)", float64(bytes)/(1<<20), typ)
	}
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if typ, bytes := partOf("after"); typ != "Compact" {
		t.Errorf("after 020, a page's part of %.1f MiB is %s, want Compact", float64(bytes)/(1<<20), typ)
	}
}
