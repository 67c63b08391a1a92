package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
)

// TestFlushTriggers: a full batch flushes at once; a partial one waits for
// the timer, and Shutdown flushes what is left.
func TestFlushTriggers(t *testing.T) {
	db := chtest.NewDB(t, store.Options{})
	w := newWriter(t, db, store.WriterOptions{MaxRows: 10, FlushInterval: time.Hour})
	at := time.Now().UTC()

	full := make(chan error, 1)
	if err := w.SubmitStreams(context.Background(), makeStreams(10, "demo", at), func(err error) { full <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-full:
		if err != nil {
			t.Fatalf("full batch: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("a batch of MaxRows streams was not flushed")
	}

	partial := make(chan error, 1)
	if err := w.SubmitStreams(context.Background(), makeStreams(5, "demo", at), func(err error) { partial <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-partial:
		t.Fatalf("a partial batch was flushed before the interval")
	case <-time.After(300 * time.Millisecond):
	}
	if err := w.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := <-partial; err != nil {
		t.Fatalf("partial batch at shutdown: %v", err)
	}
	if got, want := queryUint(t, db, "SELECT count() FROM itl_inbox"), uint64(15); got != want {
		t.Fatalf("stored %d streams, want %d", got, want)
	}
	if got, want := w.Stats().Inserts, uint64(2); got != want {
		t.Fatalf("inserts = %d, want %d", got, want)
	}
}

// TestInsertBlocksOnePart: an insert sent as several blocks lands as one
// part, as one block would (the server squashes an INSERT's blocks), and
// holds every row.
func TestInsertBlocksOnePart(t *testing.T) {
	db := chtest.NewDB(t, store.Options{})
	store.SetBlockRows(t, 100)
	rows := make([]store.InboxRow, 1050) // 10 full blocks and a short one
	for i := range rows {
		s := makeStream(i, "blocks", time.Now().UTC())
		var err error
		if rows[i], err = store.ClientRow(&s); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.InsertRows(context.Background(), db.Conn(), "itl_inbox", nil, rows); err != nil {
		t.Fatal(err)
	}
	// Level 0: the part the insert made, not a merge of several.
	var parts, n uint64
	var level uint32
	if err := db.Conn().QueryRow(context.Background(),
		"SELECT count(), sum(rows), max(level) FROM system.parts WHERE database = currentDatabase() AND table = 'itl_inbox' AND active").Scan(&parts, &n, &level); err != nil {
		t.Fatal(err)
	}
	if parts != 1 || level != 0 || n != uint64(len(rows)) {
		t.Fatalf("%d parts (level up to %d) holding %d rows, want 1 part of level 0 with %d", parts, level, n, len(rows))
	}
}
