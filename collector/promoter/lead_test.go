package promoter

import (
	"testing"
	"testing/synctest"
	"time"
)

// The stall a rank waits for is measured from the last move of the
// watermark by another promoter: a leader working through a backlog keeps
// it at 0; a promoter that took over goes on with the windows it promotes.
func TestStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := New([]Shard{{}}, Config{})
		if err != nil {
			t.Fatal(err)
		}
		sh := Shard{}
		w0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
		long := time.Hour // the waiting window's age past its sealing: a backlog
		if got := p.stalled(sh, w0, long); got != 0 {
			t.Fatalf("stalled %v at the first look, want 0", got)
		}
		// The leader promotes a window a second: no stall.
		for i := range 20 {
			time.Sleep(time.Second)
			if got := p.stalled(sh, w0.Add(time.Duration(i+1)*time.Second), long); got != 0 {
				t.Fatalf("stalled %v while the leader moves on, want 0", got)
			}
		}
		// The leader stops: the stall grows, bounded by the window's wait.
		time.Sleep(12 * time.Second)
		last := w0.Add(20 * time.Second)
		if got, want := p.stalled(sh, last, long), 12*time.Second; got != want {
			t.Fatalf("stalled %v, want %v", got, want)
		}
		if got, want := p.stalled(sh, last, 3*time.Second), 3*time.Second; got != want {
			t.Fatalf("stalled %v for a window sealed 3 s ago, want %v", got, want)
		}
		// p takes over: its own windows are no progress of another's.
		for i := range 5 {
			next := last.Add(time.Duration(i+1) * time.Second)
			p.promoted(sh, next)
			time.Sleep(time.Second)
			if got, want := p.stalled(sh, next, long), time.Duration(13+i)*time.Second; got != want {
				t.Fatalf("stalled %v after promoting %d windows itself, want %v", got, i+1, want)
			}
		}
		// The leader is back and moves it: p stands down.
		if got := p.stalled(sh, last.Add(time.Minute), long); got != 0 {
			t.Fatalf("stalled %v once another moved the watermark, want 0", got)
		}
	})
}
