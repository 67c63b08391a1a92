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
	if err := w.Submit(context.Background(), makeStreams(10, "demo", at), func(err error) { full <- err }); err != nil {
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
	if err := w.Submit(context.Background(), makeStreams(5, "demo", at), func(err error) { partial <- err }); err != nil {
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
