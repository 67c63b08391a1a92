package ingest

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestWaitContext: a waitContext behaves as context.WithDeadline does, and
// makes nothing until it is looked at.
func TestWaitContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type key struct{}
		parent := context.WithValue(context.Background(), key{}, "v")
		deadline := time.Now().Add(time.Second)

		c := newWaitContext(parent, deadline)
		if d, ok := c.Deadline(); !ok || !d.Equal(deadline) {
			t.Fatalf("Deadline = %v, %v; want %v, true", d, ok, deadline)
		}
		if v := c.Value(key{}); v != "v" {
			t.Fatalf("Value = %v, want the parent's", v)
		}
		c.release()
		if c.ctx != nil {
			t.Fatal("released without a look, yet its context was made")
		}
		select {
		case <-c.Done():
		default:
			t.Fatal("a look after release: Done is not closed")
		}
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err after release = %v, want context.Canceled", err)
		}

		// Looked at: the deadline fires on time, not before.
		c = newWaitContext(parent, deadline)
		done := c.Done()
		synctest.Wait()
		if err := c.Err(); err != nil {
			t.Fatalf("Err before the deadline = %v", err)
		}
		<-done // the bubble's clock runs to the first timer
		if now := time.Now(); !now.Equal(deadline) {
			t.Fatalf("Done closed at %v, want the deadline %v", now, deadline)
		}
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err = %v, want context.DeadlineExceeded", err)
		}
		c.release()

		// The parent's cancel and its earlier deadline carry through.
		early := time.Now().Add(30 * time.Second)
		pctx, cancel := context.WithDeadline(context.Background(), early)
		c = newWaitContext(pctx, early.Add(time.Minute))
		if d, _ := c.Deadline(); !d.Equal(early) {
			t.Fatalf("Deadline = %v, want the parent's earlier one", d)
		}
		cancel()
		<-c.Done()
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err after the parent's cancel = %v, want context.Canceled", err)
		}
		c.release()
	})
}
