package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/promoter"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
)

// TestTimelinesAfterPartialInsert: one insert fails, before it is sent or
// after it landed with the reply lost: the writer's inbox insert (the batch
// is acked through the spool and replayed: the inbox holds copies) or one of
// a promotion's inserts (the promotion fails and runs again). Every stream
// and every timeline is stored exactly once, the rollup counts each once.
func TestTimelinesAfterPartialInsert(t *testing.T) {
	t.Parallel() // databases of its own, the insert hook on their connections; its assertions time nothing
	for _, tc := range []struct {
		name  string
		table string
		sent  bool
	}{
		{"inbox failed", "itl_inbox", false},
		{"inbox reply lost", "itl_inbox", true},
		{"timelines failed", "itl_timelines", false},
		{"timelines reply lost", "itl_timelines", true},
		{"streams failed", "itl_streams", false},
		{"streams reply lost", "itl_streams", true},
		{"ids reply lost", "itl_promoted_ids", true},
		{"watermark failed", "itl_promoted", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := chtest.NewDB(t, store.Options{})
			var armed atomic.Bool
			armed.Store(true)
			t.Cleanup(store.SetInsertHook(db.Conn(), func(table string, sent bool) error {
				if table == tc.table && sent == tc.sent && armed.CompareAndSwap(true, false) {
					return errors.New("injected insert failure")
				}
				return nil
			}))
			w := newWriter(t, db, store.WriterOptions{FlushInterval: 20 * time.Millisecond})
			in := makeStreams(16, "demo", time.Now().UTC())
			submit(t, w, in)
			if tc.table == "itl_inbox" {
				if st := w.Stats(); st.RowsSpooled != uint64(len(in)) || st.InsertErrors == 0 {
					t.Fatalf("the injected failure did not spool the batch: %+v", st)
				}
			}
			waitSpoolEmpty(t, w)
			if err := w.Shutdown(context.Background()); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			for try := 1; ; try++ {
				err := tryPromote(t, db)
				if err == nil {
					break
				}
				if try == 3 {
					t.Fatalf("promotion failed 3 times: %v", err)
				}
				t.Logf("promotion %d: %v (injected); running it again", try, err)
			}
			if armed.Load() {
				t.Fatalf("the injected failure never fired")
			}
			wantTL := uint64(0)
			for i := range in {
				if len(in[i].Timeline) > 0 {
					wantTL++
				}
			}
			if got := queryUint(t, db, "SELECT count() FROM itl_streams"); got != uint64(len(in)) {
				t.Errorf("itl_streams rows = %d, want %d", got, len(in))
			}
			if got := queryUint(t, db, "SELECT sum(streams) FROM itl_rollup_1m"); got != uint64(len(in)) {
				t.Errorf("rollup streams = %d, want %d", got, len(in))
			}
			if got := queryUint(t, db, "SELECT count() FROM itl_timelines"); got != wantTL {
				t.Errorf("itl_timelines rows (no FINAL) = %d, want %d", got, wantTL)
			}
			if got := queryUint(t, db, "SELECT uniqExact(stream_id) FROM itl_timelines"); got != wantTL {
				t.Errorf("distinct timeline ids = %d, want %d", got, wantTL)
			}
		})
	}
}

// TestPagedPromotionCut: a window read in pages of 4 (six pages) has two
// pages inserting at once; one itl_streams insert lands with its reply lost:
// the third to land (pages after it not read yet) or the sixth (every page
// read, the one before it maybe still inserting). The promotion fails, the
// window is not marked promoted, and the rerun stores every record once, in
// the rollups too.
func TestPagedPromotionCut(t *testing.T) {
	t.Parallel() // databases of its own, the insert hook on their connections; its assertions time nothing
	for _, cut := range []int32{3, 6} {
		t.Run(fmt.Sprintf("insert %d", cut), func(t *testing.T) {
			t.Parallel()
			db := chtest.NewDB(t, store.Options{})
			ctx := t.Context()
			in := makeStreams(24, "paged", time.Now().UTC())
			rows := make([]store.InboxRow, len(in))
			for i := range in {
				r, err := store.ClientRow(&in[i])
				if err != nil {
					t.Fatal(err)
				}
				rows[i] = r
			}
			if err := store.InsertRows(ctx, db.Conn(), "itl_inbox", nil, rows); err != nil { // one window
				t.Fatal(err)
			}
			var landed atomic.Int32
			t.Cleanup(store.SetInsertHook(db.Conn(), func(table string, sent bool) error {
				if table == "itl_streams" && sent && landed.Add(1) == cut {
					return errors.New("injected: a page's reply lost")
				}
				return nil
			}))
			catchUp := func() error {
				p, err := promoter.New([]promoter.Shard{{Conn: db.Conn()}}, promoter.Config{
					Hold: 10 * time.Millisecond, Grace: 10 * time.Millisecond, PageRows: 4, Logger: zerolog.New(zerolog.NewTestWriter(t))})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				return p.CatchUp(ctx)
			}
			if err := catchUp(); err == nil || !strings.Contains(err.Error(), "injected") {
				t.Fatalf("first promotion: %v, want the injected failure", err)
			}
			if got := queryUint(t, db, "SELECT count() FROM itl_promoted"); got != 0 {
				t.Fatalf("%d windows marked promoted after a failed page, want 0", got)
			}
			if err := catchUp(); err != nil {
				t.Fatalf("rerun: %v", err)
			}
			var got string
			if err := db.Conn().QueryRow(ctx, `SELECT toString((
				(SELECT count() FROM itl_streams), (SELECT uniqExact(stream_id) FROM itl_streams),
				(SELECT sum(streams) FROM itl_rollup_1m), (SELECT sum(streams) FROM itl_rollup_1h),
				(SELECT count() FROM itl_promoted_ids WHERE kind = 'client'),
				(SELECT toString((count(), sum(records), sum(streams))) FROM itl_promoted)))`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if want := "(24,24,24,24,24,'(1,24,24)')"; got != want {
				t.Errorf("streams, distinct ids, itl_rollup_1m, itl_rollup_1h, promoted ids, (windows, records, streams) = %s, want %s", got, want)
			}
		})
	}
}
