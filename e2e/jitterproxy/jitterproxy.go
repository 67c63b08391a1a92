// Package jitterproxy is a userspace TCP proxy on loopback that delays the
// bytes flowing from the upstream (server) to the client, the way a congested
// or bufferbloated path does. Kernel netem is not available on the test
// machines, so the e2e tests put this between the browser and the origin.
//
// Every read from the upstream is stamped on arrival and released to the
// client no earlier than arrival + a random delay drawn from Config.Delay,
// and never before the reads that came before it (bytes stay in order). When
// a held read is released, every later read whose release time has also
// passed goes out in the same write: the client sees a burst of coalesced
// events after a gap, which is what the browser module must detect as
// re-chunking and attribute to the network. Client-to-upstream bytes are
// forwarded at once.
//
// The random source is seeded (Config.Seed), so a run is reproducible up to
// the scheduling of goroutines. A Proxy is safe for concurrent use.
package jitterproxy

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// readSize is the size of one read from the upstream.
const readSize = 32 << 10

// maxQueued bounds the bytes held per connection; when the client is slower
// than the upstream, the proxy stops reading the upstream (TCP backpressure).
const maxQueued = 4 << 20

// A Distribution draws one delay. It is called from one goroutine per
// connection with that connection's random source.
type Distribution func(r *rand.Rand) time.Duration

// Fixed delays every read by d.
func Fixed(d time.Duration) Distribution {
	return func(*rand.Rand) time.Duration { return d }
}

// Uniform delays every read by a duration uniform in [lo, hi].
func Uniform(lo, hi time.Duration) Distribution {
	if hi < lo {
		lo, hi = hi, lo
	}
	return func(r *rand.Rand) time.Duration {
		return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
	}
}

// Exponential delays every read by an exponentially distributed duration of
// the given mean (a long tail of occasional large holds).
func Exponential(mean time.Duration) Distribution {
	return func(r *rand.Rand) time.Duration {
		return time.Duration(r.ExpFloat64() * float64(mean))
	}
}

// Spikes holds a read for a duration uniform in [lo, hi] with probability p,
// and passes it through at once otherwise: the reads that arrive during a
// hold queue behind it and go out together (a stall, then a burst).
func Spikes(p float64, lo, hi time.Duration) Distribution {
	u := Uniform(lo, hi)
	return func(r *rand.Rand) time.Duration {
		if r.Float64() < p {
			return u(r)
		}
		return 0
	}
}

// Config configures a Proxy.
type Config struct {
	Upstream string       // host:port of the server to forward to
	Listen   string       // address to listen on; default "127.0.0.1:0"
	Seed     uint64       // seed of the random source (connection i uses Seed+i)
	Delay    Distribution // delay of each upstream read; nil = no delay
}

// Stats counts what the proxy did, for the injected-vs-measured reports.
type Stats struct {
	Conns     int64         // connections accepted
	Reads     int64         // reads from the upstream
	Writes    int64         // writes to the client (Reads - Writes reads were coalesced)
	Bytes     int64         // bytes from the upstream to the client
	Held      int64         // reads given a non-zero delay
	HeldTotal time.Duration // sum of the drawn delays
	MaxDelay  time.Duration // largest drawn delay
}

// Proxy is a running jitter proxy. Stop it with Close.
type Proxy struct {
	cfg Config
	ln  net.Listener

	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool

	nconns, reads, writes, bytes, held, heldTotal, maxDelay atomic.Int64
}

// Start listens and serves until Close.
func Start(cfg Config) (*Proxy, error) {
	if cfg.Upstream == "" {
		return nil, errors.New("jitterproxy: no upstream")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Delay == nil {
		cfg.Delay = Fixed(0)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("jitterproxy: listen: %w", err)
	}
	p := &Proxy{cfg: cfg, ln: ln, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is "http://" + Addr, for HTTP upstreams.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Stats returns a snapshot of the counters.
func (p *Proxy) Stats() Stats {
	return Stats{
		Conns:     p.nconns.Load(),
		Reads:     p.reads.Load(),
		Writes:    p.writes.Load(),
		Bytes:     p.bytes.Load(),
		Held:      p.held.Load(),
		HeldTotal: time.Duration(p.heldTotal.Load()),
		MaxDelay:  time.Duration(p.maxDelay.Load()),
	}
}

// Close stops listening, closes every connection and waits for the
// connection goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for i := uint64(0); ; i++ {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.nconns.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c, rand.New(rand.NewPCG(p.cfg.Seed, p.cfg.Seed+i)))
		}()
	}
}

func (p *Proxy) serve(client net.Conn, r *rand.Rand) {
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	up, err := net.Dial("tcp", p.cfg.Upstream)
	if err != nil {
		return
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)

	// Client to upstream: immediate. When the client half-closes, pass it on.
	go func() {
		io.Copy(up, client)
		if tc, ok := up.(*net.TCPConn); ok {
			tc.CloseWrite()
		} else {
			up.Close()
		}
	}()

	q := newQueue()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.release(client, q)
	}()

	var last time.Time // release time of the previous read: bytes stay in order
	buf := make([]byte, readSize)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			now := time.Now()
			d := p.cfg.Delay(r)
			if d < 0 {
				d = 0
			}
			at := now.Add(d)
			if at.Before(last) {
				at = last
			}
			last = at
			p.reads.Add(1)
			if d > 0 {
				p.held.Add(1)
				p.heldTotal.Add(int64(d))
				for {
					m := p.maxDelay.Load()
					if int64(d) <= m || p.maxDelay.CompareAndSwap(m, int64(d)) {
						break
					}
				}
			}
			if !q.push(chunk{b: append([]byte(nil), buf[:n]...), at: at}) {
				break // client gone
			}
		}
		if err != nil {
			break
		}
	}
	q.close()
	<-done
	if tc, ok := client.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
}

// release writes the queued chunks to the client at their release times,
// coalescing every chunk that is due into one write.
func (p *Proxy) release(client net.Conn, q *queue) {
	var out []byte
	for {
		first, ok := q.waitFirst()
		if !ok {
			return
		}
		if d := time.Until(first.at); d > 0 {
			time.Sleep(d) // the delay the proxy injects (the scenario), not a wait for a condition
		}
		out = q.popDue(time.Now(), out[:0])
		if _, err := client.Write(out); err != nil {
			q.fail()
			return
		}
		p.writes.Add(1)
		p.bytes.Add(int64(len(out)))
	}
}

type chunk struct {
	b  []byte
	at time.Time
}

// queue is the per-connection FIFO between the upstream reader and the
// client writer, bounded by maxQueued bytes.
type queue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []chunk
	bytes  int
	closed bool // no more pushes
	failed bool // the client is gone
}

func newQueue() *queue {
	q := &queue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *queue) push(c chunk) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.bytes >= maxQueued && !q.failed {
		q.cond.Wait()
	}
	if q.failed {
		return false
	}
	q.items = append(q.items, c)
	q.bytes += len(c.b)
	q.cond.Broadcast()
	return true
}

func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

func (q *queue) fail() {
	q.mu.Lock()
	q.failed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

// waitFirst blocks until a chunk is queued and returns it (without removing
// it), or reports false when the queue is closed and empty.
func (q *queue) waitFirst() (chunk, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return chunk{}, false
	}
	return q.items[0], true
}

// popDue removes every chunk due at now (at least the first) and appends
// their bytes to dst.
func (q *queue) popDue(now time.Time, dst []byte) []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := 0
	for i < len(q.items) && (i == 0 || !q.items[i].at.After(now)) {
		dst = append(dst, q.items[i].b...)
		q.bytes -= len(q.items[i].b)
		i++
	}
	q.items = append(q.items[:0], q.items[i:]...)
	q.cond.Broadcast()
	return dst
}
