package promoter

import (
	"testing"
	"testing/synctest"
	"time"
)

// newStallTest returns a promoter of one shard, the shard, and the first
// window of a test of its stall.
func newStallTest(t *testing.T) (*Promoter, Shard, time.Time) {
	t.Helper()
	p, err := New([]Shard{{}}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	return p, Shard{}, time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
}

// The stall a rank waits for is measured from the last move of the
// watermark by another promoter: a leader working through a backlog keeps
// it at 0; a promoter that took over goes on with the windows it promotes.
func TestStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, sh, w0 := newStallTest(t)
		long := time.Hour // the waiting window's age past its sealing: a backlog
		if got := p.stalled(sh, mark{w0, 0}, long); got != 0 {
			t.Fatalf("stalled %v at the first look, want 0", got)
		}
		// The leader promotes a window a second: no stall.
		for i := range 20 {
			time.Sleep(time.Second)
			if got := p.stalled(sh, mark{w0.Add(time.Duration(i+1) * time.Second), 0}, long); got != 0 {
				t.Fatalf("stalled %v while the leader moves on, want 0", got)
			}
		}
		// The leader stops: the stall grows, bounded by the window's wait.
		time.Sleep(12 * time.Second)
		last := w0.Add(20 * time.Second)
		if got, want := p.stalled(sh, mark{last, 0}, long), 12*time.Second; got != want {
			t.Fatalf("stalled %v, want %v", got, want)
		}
		if got, want := p.stalled(sh, mark{last, 0}, 3*time.Second), 3*time.Second; got != want {
			t.Fatalf("stalled %v for a window sealed 3 s ago, want %v", got, want)
		}
		// p takes over: its own windows are no progress of another's.
		for i := range 5 {
			next := last.Add(time.Duration(i+1) * time.Second)
			p.promoted(sh, next, 0, 0)
			time.Sleep(time.Second)
			if got, want := p.stalled(sh, mark{next, 0}, long), time.Duration(13+i)*time.Second; got != want {
				t.Fatalf("stalled %v after promoting %d windows itself, want %v", got, i+1, want)
			}
		}
		// The leader is back and moves it: p stands down.
		if got := p.stalled(sh, mark{last.Add(time.Minute), 0}, long); got != 0 {
			t.Fatalf("stalled %v once another moved the watermark, want 0", got)
		}
	})
}

// A window larger than the leader promotes in takeoverLag (a backlog's):
// its pages past the watermark are the leader's progress, so no rank takes
// over while they grow; once they stop, the stall grows again. A promoter
// that took over stands down as soon as another has pages past the window
// it just promoted.
func TestStalledInsideWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, sh, w0 := newStallTest(t)
		long := time.Hour
		p.stalled(sh, mark{w0, 0}, long)
		// One window, 60 s of pages, a page every 2 s: never stalled.
		for i := range 30 {
			time.Sleep(2 * time.Second)
			if got := p.stalled(sh, mark{w0, uint64(2000 * (i + 1))}, long); got != 0 {
				t.Fatalf("stalled %v while the leader's pages grow (page %d), want 0", got, i+1)
			}
		}
		// The leader stops in the middle of the window.
		time.Sleep(11 * time.Second)
		if got, want := p.stalled(sh, mark{w0, 60_000}, long), 11*time.Second; got != want {
			t.Fatalf("stalled %v once the pages stopped, want %v", got, want)
		}
		// p takes over and promotes the window: its own window is no
		// progress of another's, nor are zero pages past it.
		w1 := w0.Add(time.Second)
		p.promoted(sh, w1, 0, 0)
		time.Sleep(time.Second)
		if got, want := p.stalled(sh, mark{w1, 0}, long), 12*time.Second; got != want {
			t.Fatalf("stalled %v after promoting the window itself, want %v", got, want)
		}
		// p promotes the next one too; meanwhile the leader is back, ahead
		// of it: pages past p's window. p stands down.
		w2 := w1.Add(time.Second)
		p.promoted(sh, w2, 0, 0)
		time.Sleep(time.Second)
		if got := p.stalled(sh, mark{w2, 4000}, long); got != 0 {
			t.Fatalf("stalled %v with the leader's pages past p's window, want 0", got)
		}
	})
}
