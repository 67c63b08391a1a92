package origin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/itlmon/itlmon/wasm/beacon"
)

// Retry backoff of a failed upload: doubling from minBackoff to maxBackoff,
// each wait drawn uniformly from [d/2, d) so reporters do not retry in step.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 10 * time.Second
)

// Reporter measures responses (Handler) and uploads their timelines to the
// collector. Producers never block: timelines go into a bounded queue and are
// dropped (and counted, and the count reported with the next batch) when it
// is full. One uploader goroutine sends a batch when BatchSize timelines are
// queued or FlushInterval after the first one, retrying with jittered
// backoff on network errors, 429 and 5xx. A batch the collector refuses for
// good (any other 4xx: malformed, another major version, too big, not
// storable) is dropped after that one answer and counted (Stats.Rejected):
// sent again it would be refused again, and it would hold up every batch
// behind it. Shutdown drains the queue. A Reporter is safe for concurrent use.
type Reporter struct {
	cfg   Config
	queue chan beacon.Origin
	url   string

	closed   atomic.Bool
	stop     chan struct{} // closed by Shutdown: drain and exit
	stopOnce sync.Once
	done     chan struct{} // closed when the uploader has exited
	ctx      context.Context
	cancel   context.CancelFunc // aborts uploads when Shutdown's ctx ends

	dropped   atomic.Uint64 // total
	unsent    atomic.Uint32 // dropped since the last accepted batch
	queued    atomic.Uint64
	sent      atomic.Uint64
	rejected  atomic.Uint64
	batches   atomic.Uint64
	retries   atomic.Uint64
	lastError string // uploader goroutine only
	seq       uint64 // uploader goroutine only
}

// Stats counts what a Reporter did.
type Stats struct {
	Queued   uint64 // timelines accepted into the queue
	Sent     uint64 // timelines the collector accepted
	Dropped  uint64 // timelines dropped: queue full, after Shutdown, or unsent when Shutdown's ctx ended
	Rejected uint64 // timelines in batches the collector refused (4xx other than 429)
	Batches  uint64 // batches accepted
	Retries  uint64 // failed upload attempts that were retried
}

// New starts a Reporter's uploader goroutine. Stop it with Shutdown.
func New(cfg Config) (*Reporter, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	u, err := url.Parse(cfg.Collector)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("origin: collector URL %q: want http(s)://host[:port]", cfg.Collector)
	}
	rp := &Reporter{
		cfg:   cfg,
		queue: make(chan beacon.Origin, cfg.QueueSize),
		url:   cfg.Collector + Path + "?site=" + url.QueryEscape(cfg.Site),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	rp.ctx, rp.cancel = context.WithCancel(context.Background())
	go rp.run()
	return rp, nil
}

// Stats returns a snapshot of the counters.
func (rp *Reporter) Stats() Stats {
	return Stats{
		Queued:   rp.queued.Load(),
		Sent:     rp.sent.Load(),
		Dropped:  rp.dropped.Load(),
		Rejected: rp.rejected.Load(),
		Batches:  rp.batches.Load(),
		Retries:  rp.retries.Load(),
	}
}

// Shutdown stops accepting timelines and uploads what is queued. It returns
// when everything is sent, or with ctx's error when ctx ends first (what is
// left is dropped and counted).
func (rp *Reporter) Shutdown(ctx context.Context) error {
	rp.closed.Store(true)
	rp.stopOnce.Do(func() { close(rp.stop) })
	select {
	case <-rp.done:
		return nil
	case <-ctx.Done():
		rp.cancel()
		<-rp.done
		return ctx.Err()
	}
}

// enqueue never blocks.
func (rp *Reporter) enqueue(o beacon.Origin) {
	if rp.closed.Load() {
		rp.drop(1)
		return
	}
	select {
	case rp.queue <- o:
		rp.queued.Add(1)
	default:
		rp.drop(1)
	}
}

func (rp *Reporter) drop(n int) {
	rp.dropped.Add(uint64(n))
	rp.unsent.Add(uint32(n))
}

func (rp *Reporter) run() {
	defer close(rp.done)
	defer rp.cancel()
	batch := make([]beacon.Origin, 0, rp.cfg.BatchSize)
	timer := time.NewTimer(rp.cfg.FlushInterval)
	timer.Stop()
	send := func() {
		if len(batch) > 0 {
			rp.upload(batch)
			clear(batch)
			batch = batch[:0]
		}
		timer.Stop()
	}
	for {
		select {
		case o := <-rp.queue:
			batch = append(batch, o)
			if len(batch) == 1 {
				timer.Reset(rp.cfg.FlushInterval)
			}
			if len(batch) >= rp.cfg.BatchSize {
				send()
			}
		case <-timer.C:
			send()
		case <-rp.stop:
		drain:
			for {
				select {
				case o := <-rp.queue:
					batch = append(batch, o)
					if len(batch) >= rp.cfg.BatchSize {
						send()
					}
				default:
					break drain
				}
			}
			send()
			return
		}
	}
}

// upload sends one batch, retrying until it is accepted, refused for good,
// or the Reporter is stopped hard.
func (rp *Reporter) upload(recs []beacon.Origin) {
	rp.seq++
	b := beacon.OriginBatch{Seq: rp.seq, Site: rp.cfg.Site, Records: recs}
	backoff := minBackoff
	for attempt := 0; ; attempt++ {
		if rp.ctx.Err() != nil {
			rp.drop(len(recs))
			return
		}
		b.Dropped = rp.unsent.Load()
		body, err := b.AppendBinary(nil)
		if err != nil { // a record the wire format refuses: a bug on our side
			rp.rejected.Add(uint64(len(recs)))
			rp.logOnce(fmt.Errorf("encode batch: %w", err))
			return
		}
		retry, err := rp.post(body)
		if err == nil {
			rp.unsent.Add(^(b.Dropped - 1)) // subtract what this batch reported
			rp.sent.Add(uint64(len(recs)))
			rp.batches.Add(1)
			rp.lastError = ""
			return
		}
		rp.logOnce(err)
		if !retry {
			rp.rejected.Add(uint64(len(recs)))
			return
		}
		rp.retries.Add(1)
		wait := backoff/2 + rand.N(backoff/2)
		backoff = min(2*backoff, maxBackoff)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-rp.ctx.Done():
			t.Stop()
		}
	}
}

// post sends one body; retry says whether a failure is worth retrying.
func (rp *Reporter) post(body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(rp.ctx, http.MethodPost, rp.url, bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("post origin batch: %w", err)
	}
	req.Header.Set("Content-Type", ContentType)
	if rp.cfg.Key != "" {
		req.Header.Set(HeaderKey, rp.cfg.Key)
	}
	resp, err := rp.cfg.Client.Do(req)
	if err != nil {
		return true, fmt.Errorf("post origin batch: %w", err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2:
		return false, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return true, fmt.Errorf("post origin batch: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return false, fmt.Errorf("post origin batch: %s (not retried): %s", resp.Status, bytes.TrimSpace(msg))
}

// logOnce logs an error unless it repeats the previous one.
func (rp *Reporter) logOnce(err error) {
	if s := err.Error(); s != rp.lastError {
		rp.lastError = s
		if !errors.Is(err, context.Canceled) {
			rp.cfg.Logf("itlmon origin: %s", s)
		}
	}
}
