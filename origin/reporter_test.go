package origin

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/itlmon/itlmon/wasm/beacon"
)

func rec(id string) beacon.Origin {
	return beacon.Origin{ID: id, TTFBUs: beacon.NoTime, TTFTUs: beacon.NoTime, DurationUs: 1}
}

// Batches go out on size, and on the timer when fewer are queued.
func TestBatchOnSizeAndTimer(t *testing.T) { synctest.Test(t, testBatchOnSizeAndTimer) }

func testBatchOnSizeAndTimer(t *testing.T) {
	c := newFakeCollector(t, "k")
	rp := newReporter(t, c, func(cfg *Config) { cfg.BatchSize = 3; cfg.FlushInterval = time.Hour })
	for _, id := range []string{"a", "b", "c"} {
		rp.enqueue(rec(id))
	}
	for range 3 {
		c.next(t)
	}
	c.mu.Lock()
	if got := len(c.batches); got != 1 {
		t.Fatalf("batches = %d, want 1 (size reached)", got)
	}
	c.mu.Unlock()

	const flush = 30 * time.Millisecond
	rp2 := newReporter(t, c, func(cfg *Config) { cfg.BatchSize = 100; cfg.FlushInterval = flush })
	start := time.Now()
	rp2.enqueue(rec("d"))
	if o := c.next(t); o.ID != "d" {
		t.Fatalf("got %q, want d (sent by the timer)", o.ID)
	}
	if got := time.Since(start); got != flush {
		t.Fatalf("sent after %v, want the flush interval %v", got, flush)
	}
}

// A full queue drops without blocking, counts, and reports the count with
// the next batch; the counter then starts again.
func TestDropsCountedAndReported(t *testing.T) { synctest.Test(t, testDropsCountedAndReported) }

func testDropsCountedAndReported(t *testing.T) {
	c := newFakeCollector(t, "k")
	rp := newReporter(t, c, func(cfg *Config) { cfg.QueueSize = 2; cfg.BatchSize = 1000; cfg.FlushInterval = time.Hour })
	// The uploader may take one into its batch; fill well past the queue.
	for i := range 10 {
		rp.enqueue(rec(string(rune('a' + i))))
	}
	st := rp.Stats()
	if st.Dropped < 7 || st.Queued+st.Dropped != 10 {
		t.Fatalf("Queued %d, Dropped %d; want at least 7 dropped of 10", st.Queued, st.Dropped)
	}
	if err := rp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.batches) != 1 || uint64(c.batches[0].Dropped) != st.Dropped || uint64(len(c.batches[0].Records)) != st.Queued {
		t.Fatalf("batches %d, first reports dropped %d with %d records; want 1, %d, %d",
			len(c.batches), c.batches[0].Dropped, len(c.batches[0].Records), st.Dropped, st.Queued)
	}
	if got := rp.unsent.Load(); got != 0 {
		t.Fatalf("unsent drop counter after a successful batch = %d, want 0", got)
	}
	rp.enqueue(rec("late"))
	if got := rp.Stats().Dropped; got != st.Dropped+1 {
		t.Fatalf("Dropped after Shutdown = %d, want %d", got, st.Dropped+1)
	}
}

func TestRetryThenSuccess(t *testing.T) { synctest.Test(t, testRetryThenSuccess) }

func testRetryThenSuccess(t *testing.T) {
	c := newFakeCollector(t, "k")
	c.status = []int{http.StatusServiceUnavailable, http.StatusTooManyRequests}
	rp := newReporter(t, c, nil)
	start := time.Now()
	rp.enqueue(rec("a"))
	if o := c.next(t); o.ID != "a" {
		t.Fatalf("got %q", o.ID)
	}
	// The flush interval, then two backoffs: [min/2, min) and [min, 2 min).
	if got, lo, hi := time.Since(start)-20*time.Millisecond, minBackoff/2+minBackoff, 3*minBackoff; got < lo || got >= hi {
		t.Fatalf("accepted %v after the flush, want two backoffs, in [%v, %v)", got, lo, hi)
	}
	if err := rp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := rp.Stats(); st.Retries != 2 || st.Sent != 1 || st.Batches != 1 {
		t.Fatalf("Retries %d, Sent %d, Batches %d; want 2, 1, 1", st.Retries, st.Sent, st.Batches)
	}
}

func TestRefusedNotRetried(t *testing.T) { synctest.Test(t, testRefusedNotRetried) }

func testRefusedNotRetried(t *testing.T) {
	c := newFakeCollector(t, "other-key") // our key is refused with 403
	rp := newReporter(t, c, nil)
	rp.enqueue(rec("a"))
	if err := rp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := rp.Stats(); st.Rejected != 1 || st.Retries != 0 || st.Sent != 0 {
		t.Fatalf("Rejected %d, Retries %d, Sent %d; want 1, 0, 0", st.Rejected, st.Retries, st.Sent)
	}
}

// A poisoned batch (refused for good: 400 malformed or another major
// version, 413 too big, 422 not storable) is dropped and counted after one
// try, and does not hold up the next batch.
func TestPoisonedBatchDropped(t *testing.T) { synctest.Test(t, testPoisonedBatchDropped) }

func testPoisonedBatchDropped(t *testing.T) {
	for _, code := range []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity} {
		c := newFakeCollector(t, "k")
		c.status = []int{code}
		rp := newReporter(t, c, func(cfg *Config) { cfg.BatchSize = 1 })
		rp.enqueue(rec("poisoned"))
		rp.enqueue(rec("next"))
		if o := c.next(t); o.ID != "next" {
			t.Fatalf("%d: got %q, want the next batch", code, o.ID)
		}
		if err := rp.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		posts := c.posts
		c.mu.Unlock()
		if st := rp.Stats(); st.Rejected != 1 || st.Retries != 0 || st.Sent != 1 || posts != 2 {
			t.Fatalf("%d: Rejected %d, Retries %d, Sent %d after %d posts; want 1, 0, 1 after 2", code, st.Rejected, st.Retries, st.Sent, posts)
		}
	}
}

// Shutdown drains the queue; with the collector down it gives up when its
// ctx ends and counts what was lost.
func TestShutdown(t *testing.T) { synctest.Test(t, testShutdown) }

func testShutdown(t *testing.T) {
	c := newFakeCollector(t, "k")
	rp := newReporter(t, c, func(cfg *Config) { cfg.FlushInterval = time.Hour; cfg.BatchSize = 1000 })
	for _, id := range []string{"a", "b"} {
		rp.enqueue(rec(id))
	}
	if err := rp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := rp.Stats(); st.Sent != 2 {
		t.Fatalf("Sent after Shutdown = %d, want 2 (drained)", st.Sent)
	}

	c.stop() // collector down: uploads fail and are retried
	rp2 := newReporter(t, c, func(cfg *Config) { cfg.FlushInterval = time.Millisecond })
	rp2.enqueue(rec("c"))
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := rp2.Shutdown(ctx); err != context.DeadlineExceeded {
		t.Fatalf("Shutdown with the collector down = %v, want %v", err, context.DeadlineExceeded)
	}
	if got := time.Since(start); got != 300*time.Millisecond {
		t.Fatalf("Shutdown returned after %v, want its ctx's 300ms", got)
	}
	if st := rp2.Stats(); st.Dropped != 1 || st.Sent != 0 {
		t.Fatalf("Dropped %d, Sent %d; want 1, 0", st.Dropped, st.Sent)
	}
}

func BenchmarkMiddlewarePerEvent(b *testing.B) {
	rp, err := New(Config{Collector: "http://127.0.0.1:1", Site: "s", QueueSize: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		rp.Shutdown(ctx)
	}()
	ev := []byte(chatEvent(1))
	h := rp.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for range 100 {
			w.Write(ev)
			f.Flush()
		}
	}))
	req, _ := http.NewRequest("GET", "/v1/chat", nil)
	b.SetBytes(int64(100 * len(ev)))
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(discard{http.Header{}}, req)
	}
}

// discard is a minimal ResponseWriter for the benchmark.
type discard struct{ h http.Header }

func (d discard) Header() http.Header         { return d.h }
func (d discard) Write(p []byte) (int, error) { return len(p), nil }
func (d discard) WriteHeader(int)             {}
func (d discard) Flush()                      {}
