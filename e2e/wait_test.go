package e2e

import (
	"sync"
	"time"

	"github.com/itlmon/itlmon/internal/poll"
)

// Waiting on a condition, never for a fixed time.
//
//	Eventually(within, every, cond)  cond, at once and then every `every`, until it holds or `within` has passed
//	changes.Wait(within, cond)       cond, at once and then at every Notify, until it holds or `within` has passed
//
// Eventually is for what only another process knows (the collector's store
// and metrics, a page's module, nginx, workerd): nothing tells this process
// when it changes, so it looks again every `every`, the latency that adds.
// What the test's own servers see (a sink's timelines, an origin's requests)
// is waited for with a changes the servers Notify.

// Eventually calls cond at once and then every `every` until it returns
// true (Eventually returns true) or within has passed (false, after one last
// call).
func Eventually(within, every time.Duration, cond func() bool) bool {
	return poll.Until(within, every, cond)
}

// changes wakes the goroutines waiting for what a test's own server
// records: the server calls Notify after each change. The zero value is
// ready to use.
type changes struct {
	mu sync.Mutex
	ch chan struct{}
}

// next returns a channel closed at the next Notify.
func (c *changes) next() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// Notify wakes every Wait.
func (c *changes) Notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}

// Wait calls cond at once and after every Notify until it returns true
// (Wait returns true) or within has passed (false, after one last call).
func (c *changes) Wait(within time.Duration, cond func() bool) bool {
	timeout := time.NewTimer(within)
	defer timeout.Stop()
	for {
		next := c.next() // before cond: a Notify during cond is not missed
		if cond() {
			return true
		}
		select {
		case <-next:
		case <-timeout.C:
			return cond()
		}
	}
}
