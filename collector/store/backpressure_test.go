package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
)

// TestSubmitBackpressure: with the writer busy and the queue full, Submit
// blocks until its context ends, returns the context's error and never
// calls done; after Shutdown it returns ErrClosed.
func TestSubmitBackpressure(t *testing.T) {
	db := chtest.NewDB(t, store.Options{})
	w := newWriter(t, db, store.WriterOptions{QueueSize: 1, FlushInterval: 10 * time.Millisecond})
	at := time.Now().UTC()

	inDone := make(chan struct{})
	release := make(chan struct{})
	// The writer calls done on its own goroutine: blocking there stalls it.
	if err := w.SubmitStreams(context.Background(), makeStreams(1, "demo", at), func(error) {
		close(inDone)
		<-release
	}); err != nil {
		t.Fatalf("submit 1: %v", err)
	}
	<-inDone
	second := make(chan error, 1)
	if err := w.SubmitStreams(context.Background(), makeStreams(1, "demo", at), func(err error) { second <- err }); err != nil {
		t.Fatalf("submit 2 (fills the queue): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := w.SubmitStreams(ctx, makeStreams(1, "demo", at), func(error) { t.Errorf("done of a rejected Submit called") })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("submit 3 on a full queue: err = %v, want DeadlineExceeded", err)
	}
	if got, want := w.Stats().QueueDepth, 1; got != want {
		t.Fatalf("QueueDepth = %d, want %d", got, want)
	}
	// A Submit blocked on the full queue is released by Shutdown.
	blocked := make(chan error, 1)
	go func() {
		blocked <- w.SubmitStreams(context.Background(), makeStreams(1, "demo", at), func(error) { t.Errorf("done of a rejected Submit called") })
	}()
	time.Sleep(50 * time.Millisecond)
	shut := make(chan error, 1)
	go func() { shut <- w.Shutdown(context.Background()) }()
	if err := <-blocked; !errors.Is(err, store.ErrClosed) {
		t.Fatalf("blocked submit during shutdown: err = %v, want ErrClosed", err)
	}
	close(release)
	if err := <-second; err != nil {
		t.Fatalf("submit 2 done: %v", err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := w.SubmitStreams(context.Background(), makeStreams(1, "demo", at), func(error) {}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("submit after shutdown: err = %v, want ErrClosed", err)
	}
	if got, want := queryUint(t, db, "SELECT count() FROM itl_inbox"), uint64(2); got != want {
		t.Fatalf("stored %d streams, want %d", got, want)
	}
}
