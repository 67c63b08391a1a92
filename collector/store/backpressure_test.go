package store_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/itlmon/itlmon/collector/store"
)

// TestSubmitBackpressure: with the writer busy and the queue full, Submit
// blocks until its context ends, returns the context's error and never
// calls done; after Shutdown it returns ErrClosed. Under testing/synctest
// with a fake ClickHouse (the queue does not depend on it): the context's
// timeout passes on the fake clock, and synctest.Wait knows when a Submit
// is blocked.
func TestSubmitBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := &fakeInbox{}
		w, _ := newFakeWriter(t, in, store.WriterOptions{QueueSize: 1, FlushInterval: 10 * time.Millisecond})
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
		const wait = 100 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		began := time.Now()
		err := w.SubmitStreams(ctx, makeStreams(1, "demo", at), func(error) { t.Errorf("done of a rejected Submit called") })
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(began) != wait {
			t.Fatalf("submit 3 on a full queue: err = %v after %v, want DeadlineExceeded after %v", err, time.Since(began), wait)
		}
		if got, want := w.Stats().QueueDepth, 1; got != want {
			t.Fatalf("QueueDepth = %d, want %d", got, want)
		}
		// A Submit blocked on the full queue is released by Shutdown.
		blocked := make(chan error, 1)
		go func() {
			blocked <- w.SubmitStreams(context.Background(), makeStreams(1, "demo", at), func(error) { t.Errorf("done of a rejected Submit called") })
		}()
		synctest.Wait()
		select {
		case err := <-blocked:
			t.Fatalf("submit 4 on a full queue returned %v, want it blocked", err)
		default:
		}
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
		stored := 0
		for _, c := range in.snapshot() {
			if c.err == nil {
				stored += len(c.ids)
			}
		}
		if stored != 2 {
			t.Fatalf("stored %d streams, want 2", stored)
		}
	})
}
