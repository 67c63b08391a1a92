package poll

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		n := 0
		if !Until(time.Second, 100*time.Millisecond, func() bool { n++; return n == 4 }) {
			t.Fatal("Until = false for a condition that held on the 4th call")
		}
		if got, want := time.Since(start), 300*time.Millisecond; got != want {
			t.Fatalf("held after %v, want %v (at once, then every 100 ms)", got, want)
		}
		start, n = time.Now(), 0
		if Until(time.Second, 300*time.Millisecond, func() bool { n++; return false }) {
			t.Fatal("Until = true for a condition that never held")
		}
		if got, want := time.Since(start), 1200*time.Millisecond; got != want || n != 5 {
			t.Fatalf("gave up after %v and %d calls, want %v and 5 (the first tick past the deadline, one last call)", got, n, want)
		}
	})
}
