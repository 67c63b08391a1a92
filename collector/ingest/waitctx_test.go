package ingest

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorilla/websocket"

	"github.com/itlmon/itlmon/wasm/beacon"
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

// TestWaitContextNotMade: a batch that finds a CPU token free reaches the
// sink with its wait context not made (handOver takes the token without
// looking at it).
func TestWaitContextNotMade(t *testing.T) { synctest.Test(t, testWaitContextNotMade) }

func testWaitContextNotMade(t *testing.T) {
	f := newFixture(t, nil)
	c, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteMessage(websocket.BinaryMessage, mustBatch(t, 3, "chat", 2)); err != nil {
		t.Fatal(err)
	}
	if got, want := readAck(t, c), (beacon.Ack{Seq: 3}); got != want {
		t.Fatalf("ack = %+v, want %+v", got, want)
	}
	f.sink.mu.Lock()
	defer f.sink.mu.Unlock()
	if len(f.sink.ctxMade) != 1 || f.sink.ctxMade[0] {
		t.Fatalf("wait contexts made by Submit time: %v, want [false]", f.sink.ctxMade)
	}
}
