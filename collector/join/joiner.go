package join

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// Defaults of Config.
const (
	DefaultHold          = 3 * time.Second
	DefaultTTL           = 2 * time.Minute
	DefaultMaxEntries    = 100_000
	DefaultMaxHolding    = 256
	DefaultFlushInterval = 500 * time.Millisecond
	DefaultMaxBatch      = 5000
)

// ErrClosed is returned after Shutdown.
var ErrClosed = errors.New("join: closed")

// Config configures a Joiner.
type Config struct {
	// Hold is how long a client batch whose origin timelines are missing
	// waits for them before it goes to storage unrefined (negative: never
	// wait). The browser batches records at stream end and the origin
	// reporter about once a second, so the two usually arrive within a
	// second or two of each other.
	Hold time.Duration
	// TTL is how long an unmatched side is kept for a late join.
	TTL time.Duration
	// MaxEntries bounds the streams kept in memory; the oldest go first.
	MaxEntries int
	// MaxHolding bounds the client batches held at once; beyond, batches
	// are not held.
	MaxHolding int
	// FlushInterval and MaxBatch shape the itl_origin inserts.
	FlushInterval time.Duration
	MaxBatch      int
	// HasOrigin says whether a site reports origin timelines (has an origin
	// key). Client records of other sites pass straight through: never
	// held, never kept. Default: sites that sent a timeline in the last
	// originSiteTTL.
	HasOrigin func(site string) bool
	Logger    zerolog.Logger
	Now       func() time.Time
}

// originSiteTTL: without Config.HasOrigin, a site counts as reporting origin
// timelines this long after its last one.
const originSiteTTL = 10 * time.Minute

func (c *Config) setDefaults() {
	if c.Hold == 0 {
		c.Hold = DefaultHold
	}
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.MaxEntries <= 0 {
		c.MaxEntries = DefaultMaxEntries
	}
	if c.MaxHolding <= 0 {
		c.MaxHolding = DefaultMaxHolding
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

type key struct{ site, id string }

// entry is one stream id's state: either side, and whether it was joined.
type entry struct {
	key     key
	created time.Time

	haveOrigin bool
	origin     beacon.Origin
	base       Row           // version-0 row of the origin timeline
	arrived    chan struct{} // closed when the origin timeline arrives

	client  *collector.Stream // the client record, kept for a late join
	holding bool              // a held client batch will make the join
	joined  bool
}

// Joiner matches client records and origin timelines by (site, stream id),
// refines the client's stall causes, and stores the origin timelines and the
// joins in itl_origin. Safe for concurrent use.
type Joiner struct {
	cfg Config
	log zerolog.Logger
	w   *rowWriter

	mu      sync.Mutex
	entries map[key]*entry
	fifo    []*entry // creation order, for expiry and eviction
	head    int
	holding int
	sites   map[string]time.Time // last origin timeline per site
	closing chan struct{}
	closed  bool
	holders sync.WaitGroup

	origins, joined, joinedInStreams, joinedLate, held, holdTimeouts,
	evicted, reporterDropped atomic.Uint64
}

// Stats counts what a Joiner did.
type Stats struct {
	Origins         uint64 // origin timelines received
	Joined          uint64 // streams joined
	JoinedInStreams uint64 // ... whose refined causes reached itl_streams
	JoinedLate      uint64 // ... after the client record was stored
	Held            uint64 // client batches held for a missing origin timeline
	HoldTimeouts    uint64 // ... whose hold ended with one still missing
	Evicted         uint64 // unmatched entries dropped for MaxEntries
	ReporterDropped uint64 // timelines origin reporters said they dropped
	RowsWritten     uint64 // itl_origin rows inserted
	RowsDropped     uint64 // joined rows dropped (writer queue full or insert failed)
}

// New returns a Joiner writing to conn (a migrated ClickHouse database).
func New(conn driver.Conn, cfg Config) *Joiner {
	cfg.setDefaults()
	j := &Joiner{
		cfg:     cfg,
		log:     cfg.Logger.With().Str("component", "join").Logger(),
		entries: make(map[key]*entry),
		sites:   make(map[string]time.Time),
		closing: make(chan struct{}),
	}
	j.w = newRowWriter(conn, cfg.FlushInterval, cfg.MaxBatch, j.log)
	return j
}

// Stats returns a snapshot of the counters.
func (j *Joiner) Stats() Stats {
	written, dropped := j.w.stats()
	return Stats{
		Origins:         j.origins.Load(),
		Joined:          j.joined.Load(),
		JoinedInStreams: j.joinedInStreams.Load(),
		JoinedLate:      j.joinedLate.Load(),
		Held:            j.held.Load(),
		HoldTimeouts:    j.holdTimeouts.Load(),
		Evicted:         j.evicted.Load(),
		ReporterDropped: j.reporterDropped.Load(),
		RowsWritten:     written,
		RowsDropped:     dropped,
	}
}

// Shutdown releases held client batches at once (unrefined where the origin
// is still missing), waits for them to be handed on, then flushes the
// itl_origin rows. Call it before the next Sink's Shutdown.
func (j *Joiner) Shutdown(ctx context.Context) error {
	j.mu.Lock()
	if !j.closed {
		j.closed = true
		close(j.closing)
	}
	j.mu.Unlock()
	held := make(chan struct{})
	go func() { j.holders.Wait(); close(held) }()
	select {
	case <-held:
	case <-ctx.Done():
		return ctx.Err()
	}
	return j.w.shutdown(ctx)
}

// AddOrigin stores a batch of origin timelines for site and joins those whose
// client record is known. It returns once the timelines are durable in
// itl_origin (the reporter retries otherwise).
func (j *Joiner) AddOrigin(ctx context.Context, site string, b *beacon.OriginBatch) error {
	now := j.cfg.Now()
	j.origins.Add(uint64(len(b.Records)))
	j.reporterDropped.Add(uint64(b.Dropped))
	rows := make([]Row, 0, len(b.Records))
	var late []Row
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	j.expireLocked(now)
	j.sites[site] = now
	for i := range b.Records {
		o := &b.Records[i]
		base := originRow(site, now, o)
		rows = append(rows, base)
		if o.ID == "" {
			continue
		}
		e := j.entryLocked(key{site, o.ID}, now)
		if e.haveOrigin {
			continue // a retried upload: the first one counts
		}
		e.haveOrigin, e.origin, e.base = true, *o, base
		close(e.arrived)
		if e.client != nil && !e.holding && !e.joined {
			r := Attribute(&e.client.Record, &e.origin)
			late = append(late, joinedRow(base, e.client, &r, false))
			e.joined, e.client = true, nil
			j.joined.Add(1)
			j.joinedLate.Add(1)
		}
	}
	j.mu.Unlock()
	if err := j.w.write(ctx, rows); err != nil {
		return err
	}
	j.w.writeAsync(late)
	return nil
}

// Sink wraps next: client records carrying an origin id are refined with
// their origin timeline before they go on to next, waiting up to Config.Hold
// for a timeline that has not arrived yet.
func (j *Joiner) Sink(next collector.Sink) collector.Sink {
	return &sink{j: j, next: next}
}

type sink struct {
	j    *Joiner
	next collector.Sink
}

type pending struct {
	i int // index into the batch
	e *entry
}

func (s *sink) Submit(ctx context.Context, streams []collector.Stream, done func(error)) error {
	j := s.j
	now := j.cfg.Now()
	var rows []Row
	var wait []pending
	copied := false
	j.mu.Lock()
	j.expireLocked(now)
	for i := range streams {
		st := &streams[i]
		if st.OriginID == "" || !j.hasOriginLocked(st.Site, now) {
			continue
		}
		if !copied { // refine a copy: the caller's slice stays as it was
			streams = append([]collector.Stream(nil), streams...)
			st, copied = &streams[i], true
		}
		e := j.entryLocked(key{st.Site, st.OriginID}, now)
		switch {
		case e.haveOrigin:
			r := Attribute(&st.Record, &e.origin)
			refine(st, &r)
			if !e.joined { // not a resend
				rows = append(rows, joinedRow(e.base, st, &r, true))
				e.joined, e.client = true, nil
				j.joined.Add(1)
				j.joinedInStreams.Add(1)
			}
		case e.joined, e.holding:
		default:
			c := *st
			e.client = &c
			if j.cfg.Hold > 0 && !j.closed {
				e.holding = true
				wait = append(wait, pending{i, e})
			}
		}
	}
	hold := len(wait) > 0 && j.holding < j.cfg.MaxHolding
	if hold {
		j.holding++
		j.holders.Add(1)
	} else {
		for _, p := range wait {
			p.e.holding = false
		}
	}
	j.mu.Unlock()
	j.w.writeAsync(rows)
	if !hold {
		return s.next.Submit(ctx, streams, done)
	}
	j.held.Add(1)
	go func() {
		defer j.holders.Done()
		s.hold(ctx, streams, wait)
		if err := s.next.Submit(ctx, streams, done); err != nil {
			done(err)
		}
	}()
	return nil
}

// hold waits for the missing origin timelines, then refines what arrived.
func (s *sink) hold(ctx context.Context, streams []collector.Stream, wait []pending) {
	j := s.j
	t := time.NewTimer(j.cfg.Hold)
	defer t.Stop()
	timedOut := false
	for _, p := range wait {
		select {
		case <-p.e.arrived:
			continue
		case <-t.C:
		case <-ctx.Done():
		case <-j.closing:
		}
		timedOut = true
		break
	}
	if timedOut {
		j.holdTimeouts.Add(1)
	}
	var rows []Row
	j.mu.Lock()
	j.holding--
	for _, p := range wait {
		e := p.e
		e.holding = false
		if !e.haveOrigin || e.joined {
			continue // joined later by AddOrigin when the timeline comes
		}
		st := &streams[p.i]
		r := Attribute(&st.Record, &e.origin)
		refine(st, &r)
		rows = append(rows, joinedRow(e.base, st, &r, true))
		e.joined, e.client = true, nil
		j.joined.Add(1)
		j.joinedInStreams.Add(1)
	}
	j.mu.Unlock()
	j.w.writeAsync(rows)
}

// hasOriginLocked reports whether site reports origin timelines.
func (j *Joiner) hasOriginLocked(site string, now time.Time) bool {
	if j.cfg.HasOrigin != nil {
		return j.cfg.HasOrigin(site)
	}
	last, ok := j.sites[site]
	return ok && now.Sub(last) < originSiteTTL
}

// refine applies the attribution to the client stream.
func refine(st *collector.Stream, r *Result) {
	st.StallsByCause = r.StallsByCause
	st.StalledByCause = r.StalledByCause
	st.TTFTCause = r.TTFTCause
	if len(r.StallCauses) == len(st.StallList) && len(st.StallList) > 0 {
		st.StallList = append([]beacon.Stall(nil), st.StallList...)
		for i := range st.StallList {
			st.StallList[i].Cause = r.StallCauses[i]
		}
	}
}

// entryLocked returns the entry of k, creating it.
func (j *Joiner) entryLocked(k key, now time.Time) *entry {
	if e, ok := j.entries[k]; ok {
		return e
	}
	e := &entry{key: k, created: now, arrived: make(chan struct{})}
	j.entries[k] = e
	j.fifo = append(j.fifo, e)
	for len(j.entries) > j.cfg.MaxEntries {
		old := j.fifo[j.head]
		j.fifo[j.head] = nil
		j.head++
		delete(j.entries, old.key)
		if !old.joined {
			j.evicted.Add(1)
		}
	}
	return e
}

// expireLocked forgets entries older than TTL.
func (j *Joiner) expireLocked(now time.Time) {
	for j.head < len(j.fifo) && now.Sub(j.fifo[j.head].created) > j.cfg.TTL {
		old := j.fifo[j.head]
		j.fifo[j.head] = nil
		j.head++
		if j.entries[old.key] == old {
			delete(j.entries, old.key)
		}
	}
	if j.head > 1024 && j.head > len(j.fifo)/2 { // compact
		j.fifo = append(j.fifo[:0], j.fifo[j.head:]...)
		j.head = 0
	}
}
