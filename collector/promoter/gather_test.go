package promoter_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/promoter"
	"github.com/itlmon/itlmon/collector/store"
)

// clientRows are n client records' inbox rows, ingested at at once landed
// (landInbox).
func clientRows(t *testing.T, prefix string, n int, at time.Time) []store.InboxRow {
	t.Helper()
	var rows []store.InboxRow
	for i := range n {
		s := clientOf(pausedOrigin(fmt.Sprintf("%s-%d", prefix, i)), "chat")
		r, err := store.ClientRow(&s)
		if err != nil {
			t.Fatal(err)
		}
		r.ReceivedAt = at
		rows = append(rows, r)
	}
	return rows
}

// TestGather: with Config.Gather, a light shard's sealed window waits until
// Gather's windows from it are sealed (Step reports when), where the
// default promotes it at once; after a heavy run (PageRows/10 records or
// more a window holding any) the next sealed window is promoted at once,
// after a run of as many records spread over windows it waits. What is
// asserted is where the seal lies against the windows' start, not how long
// anything took.
func TestGather(t *testing.T) {
	t.Parallel() // databases of its own; the bounds below leave seconds for the test's own work
	const (
		hold, grace = 100 * time.Millisecond, 50 * time.Millisecond
		gather      = 10 * time.Second
	)
	newPromoter := func(t *testing.T, db *store.DB, gather time.Duration) *promoter.Promoter {
		p, err := promoter.New([]promoter.Shard{{Conn: db.Conn()}}, promoter.Config{Hold: hold, Grace: grace,
			Gather: gather, PageRows: 100, Logger: zerolog.New(zerolog.NewTestWriter(t))})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	step := func(t *testing.T, db *store.DB, p *promoter.Promoter) promoter.Look {
		t.Helper()
		l, err := p.Step(t.Context(), promoter.Shard{Conn: db.Conn()})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	streams := func(t *testing.T, db *store.DB, prefix string) uint64 {
		t.Helper()
		var n uint64
		if err := db.Conn().QueryRow(t.Context(), "SELECT count() FROM itl_streams WHERE startsWith(origin_id, ?)", prefix).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("light waits", func(t *testing.T) {
		t.Parallel()
		// A window that ended a second ago: sealed by the default rule
		// (its end plus hold and grace), not yet gathered.
		start := time.Now().Add(-2 * time.Second).Truncate(time.Second)
		land := func() *store.DB {
			db := newDB(t)
			landInbox(t, db, clientRows(t, "light", 1, start.Add(100*time.Millisecond)))
			return db
		}
		db, plain := land(), land()
		l := step(t, db, newPromoter(t, db, gather))
		// The seal is start+gather+hold+grace by the server's clock: less
		// the time since start (2-3 s, and whatever this test took).
		if l.Promoted || l.Seals <= 0 || l.Seals > gather+hold+grace {
			t.Fatalf("with gather %v: %+v, want nothing promoted and the seal within %v", gather, l, gather+hold+grace)
		}
		if got := streams(t, db, "light"); got != 0 {
			t.Fatalf("%d streams stored while the window gathers, want 0", got)
		}
		if l := step(t, plain, newPromoter(t, plain, 0)); !l.Promoted {
			t.Fatalf("without gather: %+v, want the sealed window promoted", l)
		}
		if got := streams(t, plain, "light"); got != 1 {
			t.Fatalf("%d streams stored, want 1", got)
		}
	})

	// A first run of 12 records in a window 40 s old or spread over four
	// (past their gathering: promoted at once), then a recent window.
	for _, tc := range []struct {
		name    string
		windows int  // holding the 12 records
		heavy   bool // 12/windows >= PageRows/10 (10): the recent window is promoted at once
	}{
		{"heavy does not wait", 1, true},
		{"spread stays light", 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			now := time.Now()
			var rows []store.InboxRow
			for k := range tc.windows {
				rows = append(rows, clientRows(t, fmt.Sprintf("old%d", k), 12/tc.windows, now.Add(time.Duration(k-40)*time.Second))...)
			}
			rows = append(rows, clientRows(t, "next", 1, now.Add(-2*time.Second).Truncate(time.Second).Add(100*time.Millisecond))...)
			landInbox(t, db, rows)
			p := newPromoter(t, db, gather)
			if l := step(t, db, p); !l.Promoted {
				t.Fatalf("first step: %+v, want the old windows promoted", l)
			}
			if got := streams(t, db, "old"); got != 12 {
				t.Fatalf("%d streams of the old windows stored, want 12", got)
			}
			l := step(t, db, p)
			if tc.heavy && !l.Promoted || !tc.heavy && (l.Promoted || l.Seals <= 0) {
				t.Fatalf("after a run heavy=%v: %+v, want the recent window promoted at once: %v", tc.heavy, l, tc.heavy)
			}
			if got, want := streams(t, db, "next"), map[bool]uint64{true: 1}[tc.heavy]; got != want {
				t.Fatalf("%d streams of the recent window stored, want %d", got, want)
			}
		})
	}
}

func TestGatherBounds(t *testing.T) {
	for _, g := range []time.Duration{-time.Second, promoter.MaxGather + time.Second} {
		if _, err := promoter.New(nil, promoter.Config{Gather: g}); err == nil {
			t.Errorf("gather %v: no error", g)
		}
	}
}
