package promoter_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/promoter"
	"github.com/itlmon/itlmon/collector/store"
)

// inboxOnly is a collector's writer on db whose promoter promotes nothing:
// the windows it fills wait for the promoters a test runs.
func inboxOnly(t *testing.T, db *store.DB) *fixture {
	return newCollectorWith(t, db, promoter.Config{Hold: 100 * time.Millisecond}, func(p *promoter.Promoter) {
		p.SetStep(func(context.Context, promoter.Shard) (promoter.Look, error) {
			return promoter.Look{Known: true, Idle: true}, nil
		})
	})
}

// catchUpWith makes a promoter on db with cfg (setup applied) and runs
// CatchUp on it once.
func catchUpWith(t *testing.T, db *store.DB, cfg promoter.Config, setup func(*promoter.Promoter)) error {
	t.Helper()
	cfg.Hold, cfg.Grace = 100*time.Millisecond, 50*time.Millisecond
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	p, err := promoter.New([]promoter.Shard{{Conn: db.Conn()}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return p.CatchUp(ctx)
}

// streamsOf makes n client records whose origin ids start with prefix.
func streamsOf(prefix string, n int) []collector.Stream {
	out := make([]collector.Stream, n)
	for i := range out {
		out[i] = clientOf(pausedOrigin(fmt.Sprintf("%s-%d", prefix, i)), "chat")
	}
	return out
}

// exactlyOnce checks that the n records whose origin ids start with prefix
// are stored once each: itl_streams holds each (a copy there would be
// replaced at merge time, so its count is no proof), and the per-minute
// rollup, which sums whatever is inserted, counts n streams on the test's
// database.
func exactlyOnce(t *testing.T, db *store.DB, prefix string, n int) {
	t.Helper()
	eventually(t, db, "SELECT uniqExact(stream_id) FROM itl_streams WHERE startsWith(origin_id, ?)", uint64(n), prefix)
	eventually(t, db, "SELECT sum(streams) FROM itl_rollup_1m_site", uint64(n))
}

// A promoter killed in the middle of a window is followed by one with
// another page size: the second finishes the window in the first one's
// pages (recorded in itl_promote_pages before the first page), so every
// page it repeats is deduplicated by its token, and the rest is stored
// once. In its own size its pages would hold other rows under the first
// one's tokens: rows dropped, or stored twice.
func TestCutWindowFinishedInItsPageSize(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	in := inboxOnly(t, db)
	streams := streamsOf("cut", 23)
	in.submit(t, append(streams, streams[:7]...)...) // 30 rows, 7 of them copies: one window

	err := catchUpWith(t, db, promoter.Config{PageRows: 5, Collector: "a-cut"}, func(p *promoter.Promoter) { p.SetCutAfterPages(3) })
	if err == nil {
		t.Fatal("the cut promoter finished the window")
	}
	eventually(t, db, "SELECT toString((count(), any(page_rows), any(legacy), any(collector))) FROM itl_promote_pages", "(1,5,false,'a-cut')")
	eventually(t, db, "SELECT count() FROM itl_promoted", uint64(0))
	var landed uint64
	if err := db.Conn().QueryRow(context.Background(), "SELECT count() FROM itl_streams").Scan(&landed); err != nil || landed == 0 || landed >= 23 {
		t.Fatalf("after the cut itl_streams holds %d rows (err %v), want some of the 23", landed, err)
	}

	if err := catchUpWith(t, db, promoter.Config{PageRows: 7, Collector: "b-finish"}, nil); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, db, "cut-", 23)
	eventually(t, db, "SELECT toString((sum(records), sum(streams), sum(copies), count())) FROM itl_promoted", "(30,23,7,1)")
	eventually(t, db, "SELECT toString((count(), any(page_rows))) FROM itl_promote_pages", "(1,5)")
}

// A window started by a collector of the release before itl_promote_pages
// (pages of 2,000 rows, recorded nowhere, the first under the window's own
// token) and cut after its first page is finished by this release in those
// pages: it finds the first page's ids without a record, and records the
// earlier release's paging. In its own size (one page of 10,000) it would
// store the first 2,000 records twice.
func TestEarlierReleaseWindowFinished(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	in := inboxOnly(t, db)
	const n = 2100
	in.submit(t, streamsOf("legacy", n)...)

	err := catchUpWith(t, db, promoter.Config{Collector: "a-old"}, func(p *promoter.Promoter) {
		p.SetEarlierRelease()
		p.SetCutAfterPages(1)
	})
	if err == nil {
		t.Fatal("the cut promoter finished the window")
	}
	eventually(t, db, "SELECT count() FROM itl_streams", uint64(2000))
	eventually(t, db, "SELECT count() FROM itl_promote_pages", uint64(0))

	if err := catchUpWith(t, db, promoter.Config{Collector: "b-new"}, nil); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, db, "legacy-", n)
	eventually(t, db, "SELECT toString((count(), any(page_rows), any(legacy))) FROM itl_promote_pages", "(1,2000,true)")
}

// Two promoters of different page sizes start one window at once: one
// size is recorded, whichever lands first, and both page the window in
// it, so the window is stored once whoever wins.
func TestPromotersOfTwoSizesAtOnce(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	in := inboxOnly(t, db)
	in.submit(t, streamsOf("race", 40)...)

	errs := make(chan error, 2)
	for _, cfg := range []promoter.Config{{PageRows: 6, Collector: "a"}, {PageRows: 9, Collector: "b"}} {
		go func() { errs <- catchUpWith(t, db, cfg, nil) }()
	}
	for range 2 {
		if err := <-errs; err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	}
	exactlyOnce(t, db, "race-", 40)
	var rows uint64
	var size uint32
	if err := db.Conn().QueryRow(context.Background(), "SELECT count(), any(page_rows) FROM itl_promote_pages").Scan(&rows, &size); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || (size != 6 && size != 9) {
		t.Fatalf("itl_promote_pages holds %d rows, page size %d: want one row, 6 or 9", rows, size)
	}
}

// Every run is recorded before its first insert, a window of a dozen
// records as one of 150: a run that would span other windows (a promoter
// behind) must find what a run of it started took.
func TestOnePageWindows(t *testing.T) {
	t.Parallel()
	for _, records := range []int{12, 150} {
		db := newDB(t)
		in := inboxOnly(t, db)
		prefix := fmt.Sprintf("small%d", records)
		in.submit(t, streamsOf(prefix, records)...)
		if err := catchUpWith(t, db, promoter.Config{Collector: "a"}, nil); err != nil {
			t.Fatal(err)
		}
		exactlyOnce(t, db, prefix+"-", records)
		eventually(t, db, "SELECT toString((count(), any(page_rows))) FROM itl_promote_pages", "(1,10000)")
	}
}
