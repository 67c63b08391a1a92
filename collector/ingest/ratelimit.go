package ingest

import (
	"sync"
	"time"
)

// bucket is a token bucket in records per second. A nil *bucket allows
// everything. It is safe for concurrent use.
type bucket struct {
	rate, burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newBucket(rate float64, burst int) *bucket {
	if rate <= 0 {
		return nil
	}
	b := float64(burst)
	if b < rate {
		b = rate
	}
	return &bucket{rate: rate, burst: b, tokens: b}
}

// reserve takes n tokens and returns how long the caller must wait before
// using them. When that wait would exceed maxWait it takes nothing and
// reports false.
func (b *bucket) reserve(now time.Time, n int, maxWait time.Duration) (time.Duration, bool) {
	if b == nil {
		return 0, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	deficit := float64(n) - b.tokens
	var wait time.Duration
	if deficit > 0 {
		wait = time.Duration(deficit / b.rate * float64(time.Second))
		if wait > maxWait {
			return wait, false
		}
	}
	b.tokens -= float64(n) // may go negative: later callers wait for the debt
	return wait, true
}

// refund returns n tokens taken by reserve.
func (b *bucket) refund(n int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.tokens = min(b.tokens+float64(n), b.burst)
	b.mu.Unlock()
}

func (b *bucket) refillLocked(now time.Time) {
	if b.last.IsZero() {
		b.last = now
		return
	}
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(b.tokens+dt*b.rate, b.burst)
		b.last = now
	}
}
