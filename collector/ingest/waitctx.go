package ingest

import (
	"context"
	"sync"
	"time"
)

// waitContext is context.WithDeadline(parent, deadline), made only once
// something looks at it (Done, Err). Every batch hands the sink such a
// context to bound its wait for queue room, and the sink almost never has
// to wait: made up front, the context (its timer, its channel, its place
// among the parent's children, all taken apart again at the ack) was about
// a twentieth of the collector's CPU at saturation. Safe for concurrent use.
type waitContext struct {
	parent   context.Context
	deadline time.Time

	mu     sync.Mutex
	ctx    context.Context // nil until first looked at
	cancel context.CancelFunc
	done   bool // released: a look afterwards sees a cancelled context
}

func newWaitContext(parent context.Context, deadline time.Time) *waitContext {
	return &waitContext{parent: parent, deadline: deadline}
}

// get is the real context, made on the first call.
func (c *waitContext) get() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		c.ctx, c.cancel = context.WithDeadline(c.parent, c.deadline)
		if c.done {
			c.cancel()
		}
	}
	return c.ctx
}

func (c *waitContext) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *waitContext) Done() <-chan struct{} { return c.get().Done() }

func (c *waitContext) Err() error { return c.get().Err() }

func (c *waitContext) Value(key any) any { return c.parent.Value(key) }

// release is the context's cancel: it frees the timer, if one was made.
func (c *waitContext) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	if c.cancel != nil {
		c.cancel()
	}
}
