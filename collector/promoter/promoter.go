// Package promoter turns itl_inbox into the tables users read (itl_streams,
// itl_timelines, itl_origin, itl_edge and, through their materialized views,
// the rollups), one sealed window at a time, exactly once
// (schema/007_inbox.sql). Any number of collectors run one on the same
// shards: they do the same work, ClickHouse keeps one copy of it, and a
// heartbeat table (itl_promoters) keeps them from doing it all at once.
//
// The parts:
//
//   - windows and sealing (window.go): one second of ingested_at; a window is
//     promoted once no insert can still land in it, in order;
//   - leadership (lead.go): the smallest live promoter id promotes; the
//     others take over one after another as the promotion lags;
//   - paged reads (page.go): a window is read in pages of at most
//     Config.PageRows inbox rows, so a collector's memory does not grow
//     with a backlog; the size a window is started in is recorded with it,
//     and every run of the window pages it so (paging.go);
//   - the window's promotion (promote.go): copies dropped, every insert with
//     a deduplication token of the window, its page size, the page and the
//     table;
//   - one timeline join (timeline.go), used for the origin's and the edge's
//     timelines: a timeline refines exactly one client record.
//
// The attribution itself (what a joined pair says about each stall) is
// package join's.
//
// Wiring (collector/server):
//
//	m.Promoter, _ = promoter.New([]promoter.Shard{{Conn: conn}}, cfg) // or NewCluster
//	go m.Promoter.Run(ctx)
package promoter

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/store"
)

// Window is the promotion grid: one second of ingested_at. It is part of
// every promotion's identity (its deduplication tokens), so it is not a
// setting: collectors that disagreed on it would store windows twice.
const Window = time.Second

// Defaults of Config.
const (
	DefaultHold        = 3 * time.Second
	DefaultGrace       = time.Second
	DefaultJoinTTL     = 2 * time.Minute
	DefaultDedupWindow = 24 * time.Hour
	DefaultInterval    = 250 * time.Millisecond
	// DefaultIdleInterval is Config.IdleInterval's default unless the hold
	// plus the grace is shorter.
	DefaultIdleInterval = time.Second
	// DefaultPageRows bounds the inbox rows a promoter holds at once (see
	// docs/operating.md, "A promoter's memory"). Collectors of a deployment
	// may differ: a window is finished in the page size it was started in
	// (paging.go). A page's inserts cost the engine about as much for 10
	// rows as for 10,000, so larger pages promote faster (the backlog
	// report, TestReportBacklog), for more memory.
	DefaultPageRows = 10000
	maxDedupWindow  = 7 * 24 * time.Hour // itl_promoted_ids keeps ids 7 days
)

// Config configures a Promoter. Hold, JoinTTL and DedupWindow decide what
// a window's promotion stores: every collector of a deployment must run
// with the same values. PageRows may differ (paging.go).
type Config struct {
	// Hold: an origin or edge timeline that reaches the inbox up to Hold
	// after its client record refines the client's itl_streams row (stall
	// causes). Windows are promoted Hold (plus Grace) after they end. The
	// browser sends a record at stream end and the origin reporter about
	// once a second, so the two usually arrive within a second of each other.
	Hold time.Duration
	// Grace is added to the wait for a window's end: for clock steps and for
	// a Distributed insert's forwarding to the shard.
	Grace time.Duration
	// JoinTTL: a client record and a timeline that reach the inbox further
	// apart are not joined; a client record naming an origin id that another
	// client record named less than JoinTTL before it joins nothing.
	JoinTTL time.Duration
	// DedupWindow: a record whose id was promoted this long before is a
	// copy (a resend, a load balancer retry, a spool replay). At most 7 days.
	DedupWindow time.Duration
	// Interval between looks at a shard whose sealed window waits (on an
	// insert still running, on the leader) or that failed.
	Interval time.Duration
	// IdleInterval between looks at a shard with nothing to promote. A look
	// costs the server a few milliseconds of CPU, so an idle collector looks
	// less often; a window found but not sealed yet is looked at again when
	// its seal is due, not before. Default: DefaultIdleInterval, at most
	// Hold+Grace (a record inserted just after a look is then found before
	// its window can be sealed: idling adds no delay) and at least Interval.
	IdleInterval time.Duration
	// Gather: while a shard's traffic is light, its sealed windows gather
	// this long before one run promotes them together (span.go). A run's
	// inserts cost ClickHouse about the same whatever their size (an insert
	// into itl_streams writes a part to the table of each of its views:
	// ~0.25 s of CPU for one record on a 2-core machine), so a shard with
	// a record or two a second pays that once per Gather instead of once a
	// second, and its records become readable up to Gather-Window later.
	// Light: the shard's last run, by this promoter, took fewer than
	// PageRows/10 records a window holding any (a promoter that has run
	// none yet counts it light: a backlog's windows are past their
	// gathering already). A rate, not a run's total: a gathered run of a
	// steady few hundred records a second stays light, and a shard busy
	// enough to fill a page in a few windows promotes each one at once.
	// Zero (the default) or Window: every window as soon as it is sealed.
	// At most MaxGather.
	Gather time.Duration
	// PageRows is the most inbox rows read at once (with their payloads)
	// in the windows this promoter starts; it finishes a window another
	// started in that one's size.
	PageRows int
	// Collector names this collector in itl_promoted (host name).
	Collector string
	Logger    zerolog.Logger
}

func (c *Config) setDefaults() error {
	if c.Hold <= 0 {
		c.Hold = DefaultHold
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.JoinTTL <= 0 {
		c.JoinTTL = DefaultJoinTTL
	}
	if c.DedupWindow <= 0 {
		c.DedupWindow = DefaultDedupWindow
	}
	if c.DedupWindow > maxDedupWindow {
		return errors.New("promoter: dedup window longer than itl_promoted_ids keeps ids (7 days)")
	}
	if c.JoinTTL > c.DedupWindow {
		return errors.New("promoter: join TTL longer than the dedup window")
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Gather < 0 || c.Gather > MaxGather {
		return fmt.Errorf("promoter: gather %v outside [0, %v] (the longest span)", c.Gather, MaxGather)
	}
	if c.IdleInterval <= 0 {
		c.IdleInterval = max(min(DefaultIdleInterval, c.Hold+c.Grace), c.Interval)
	}
	if c.PageRows <= 0 {
		c.PageRows = DefaultPageRows
	}
	return nil
}

// Shard is one ClickHouse database a Promoter promotes: the only one on a
// single server, or one shard's local database in a cluster layout.
type Shard struct {
	Name string // for logs and metrics: "" on a single server, else the shard number
	Conn driver.Conn
	// Replicas, set when the shard's tables are Replicated (a cluster with
	// Keeper), names the cluster whose servers may run inserts into this
	// shard's inbox: a window is sealed only when none runs on any of them,
	// and the promoter's replica fetches what the others committed
	// (SYSTEM SYNC REPLICA) before it reads the window.
	Replicas string
}

// knownKinds are the inbox kinds this promoter promotes. A window holding a
// row of another kind (a newer collector's) waits for a promoter that knows
// it.
var knownKinds = []string{store.KindClient, store.KindOrigin, store.KindEdge}

// Promoter promotes the inbox of its shards. Safe for concurrent use of
// Stats; Run and CatchUp are not to be called at once.
type Promoter struct {
	id      string // Collector plus a random suffix: this promoter in itl_promoters
	cfg     Config
	log     zerolog.Logger
	shards  []Shard
	resolve func(context.Context) ([]Shard, error) // a cluster's shards, found by Run
	owned   bool                                   // shards came from resolve: Run closes them
	kinds   map[string]bool
	beatMu  sync.Mutex
	beats   map[string]time.Time // last heartbeat per shard name (beatMu)
	// progress: per shard name, when another promoter last moved the
	// promotion (beatMu).
	progress map[string]progress
	takeover time.Duration // takeoverLag, shorter in tests
	// step is what Run calls per shard: Step, or a fake in tests.
	step func(context.Context, Shard) (Look, error)

	blockMu sync.Mutex
	blocked map[string]blockedWindow // per shard name: the window this promoter cannot promote

	// gate is held by Run during each step and by Hold until released.
	gate chan struct{}

	windows, records, streams, origins, copies, joined, joinedInStreams, refused, errs atomic.Uint64
	edges, edgeJoined, conflicts, blockedWindows, beatErrs                             atomic.Uint64
	lagNanos, busyNanos                                                                atomic.Int64
	blockedNow                                                                         atomic.Int64
	pages                                                                              atomic.Uint64 // pages promoted, finished windows or not (tests)

	// Tests: cutAfterPages > 0 stops a window's promotion before that page
	// (errCut), as a collector killed there would; earlierRelease pages as
	// the releases before itl_promote_pages did.
	cutAfterPages  int
	earlierRelease bool
	maxSpan        int // maxSpanWindows; 1 in tests that promote window by window
	// Tests: cutAfterRecord stops a run once its span and paging are
	// recorded, cutBeforeMark once its pages have landed (errCut).
	cutAfterRecord, cutBeforeMark bool
}

// errCut is the error of a promotion cut by cutAfterPages.
var errCut = errors.New("promoter: cut (test)")

// Stats counts what a Promoter did (counters) and how far behind it is
// (gauges).
type Stats struct {
	Windows         uint64        // runs finished by this collector, each a window or a span of them (reruns included)
	Records         uint64        // inbox rows read in them
	Streams         uint64        // client records promoted
	Origins         uint64        // origin timelines promoted
	Copies          uint64        // copies dropped
	Joined          uint64        // joins made (itl_origin version 1 rows)
	JoinedInStreams uint64        // ... whose refined causes reached itl_streams
	Edges           uint64        // edge timelines promoted
	EdgeJoined      uint64        // edge joins made (itl_edge version 1 rows)
	Conflicts       uint64        // client records that named an origin id another record named first (not joined)
	Refused         uint64        // records ClickHouse refused (data errors), set aside
	Errors          uint64        // failed promotion attempts (retried)
	HeartbeatErrors uint64        // heartbeats not recorded (promotion goes on)
	Blocked         uint64        // windows found holding rows this collector cannot promote (each counted once)
	BlockedNow      int64         // shards whose next window waits for another collector now
	Lag             time.Duration // age of the oldest sealed, unpromoted window (the worst shard); 0 when none
	Busy            time.Duration // time spent promoting windows that were promoted (their throughput: Records/Busy)
}

// New returns a Promoter of shards.
func New(shards []Shard, cfg Config) (*Promoter, error) {
	if len(shards) == 0 {
		return nil, errors.New("promoter: no shard")
	}
	return newPromoter(shards, nil, cfg)
}

// NewCluster returns a Promoter of the shards resolve finds (a cluster's,
// store.DB.ShardConns), which Run looks up when it starts and until it
// succeeds (ClickHouse may be down), and closes when it returns.
func NewCluster(resolve func(context.Context) ([]Shard, error), cfg Config) (*Promoter, error) {
	return newPromoter(nil, resolve, cfg)
}

func newPromoter(shards []Shard, resolve func(context.Context) ([]Shard, error), cfg Config) (*Promoter, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	p := &Promoter{id: promoterID(cfg.Collector), cfg: cfg, shards: shards, resolve: resolve,
		beats: map[string]time.Time{}, progress: map[string]progress{}, takeover: takeoverLag, blocked: map[string]blockedWindow{}, kinds: map[string]bool{}, maxSpan: maxSpanWindows,
		gate: make(chan struct{}, 1),
		log:  cfg.Logger.With().Str("component", "promoter").Logger()}
	for _, k := range knownKinds {
		p.kinds[k] = true
	}
	return p, nil
}

// findShards resolves the shards of a cluster promoter, retrying with a
// capped wait until it succeeds or ctx ends.
func (p *Promoter) findShards(ctx context.Context) error {
	if p.shards != nil || p.resolve == nil {
		return nil
	}
	wait := p.cfg.Interval
	var lastLog time.Time
	for {
		shards, err := p.resolve(ctx)
		if err == nil && len(shards) > 0 {
			p.shards, p.owned = shards, true
			names := make([]string, len(shards))
			for i, sh := range shards {
				names[i] = sh.Name
			}
			p.log.Info().Strs("shards", names).Msg("promoting the cluster's shards")
			return nil
		}
		if err == nil {
			err = errors.New("no shards")
		}
		if time.Since(lastLog) > 30*time.Second {
			p.log.Warn().Err(err).Msg("cannot reach the cluster's shards yet; retrying")
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// Stats returns a snapshot of the counters.
func (p *Promoter) Stats() Stats {
	return Stats{
		Windows: p.windows.Load(), Records: p.records.Load(), Streams: p.streams.Load(), Origins: p.origins.Load(),
		Copies: p.copies.Load(), Joined: p.joined.Load(), JoinedInStreams: p.joinedInStreams.Load(),
		Edges: p.edges.Load(), EdgeJoined: p.edgeJoined.Load(), Conflicts: p.conflicts.Load(),
		Busy: time.Duration(p.busyNanos.Load()), Refused: p.refused.Load(), Errors: p.errs.Load(),
		HeartbeatErrors: p.beatErrs.Load(), Blocked: p.blockedWindows.Load(), BlockedNow: p.blockedNow.Load(),
		Lag: time.Duration(p.lagNanos.Load()),
	}
}

// Look is what one step found on a shard.
type Look struct {
	// Promoted: a window was promoted (the next may be sealed already).
	Promoted bool
	// Known: Age is valid (the shard answered), even when the step
	// failed afterwards.
	Known bool
	// Age of the oldest sealed, unpromoted window when the step began (by
	// the server clock, from the window's end); 0 when none was sealed.
	Age time.Duration
	// Idle: the shard held nothing to promote, sealed or not.
	Idle bool
	// Seals: the oldest unpromoted window was not sealed yet; it is by the
	// server clock this long after the step's look.
	Seals time.Duration
}

// shardLag is what Run knows of a shard's lag between steps.
type shardLag struct {
	// sealedEnd: when (by this process's clock) the oldest sealed,
	// unpromoted window ended, as the last answer said; zero when none was.
	sealedEnd time.Time
	// lastClear: the last time the shard answered that no sealed window
	// waited (or Run's start).
	lastClear time.Time
}

// age is the shard's lag at now: the known oldest sealed window's age, or,
// when none was known sealed, the time since the shard last said so while it
// does not answer (failed), else 0.
func (s *shardLag) age(now time.Time, failing bool) time.Duration {
	switch {
	case !s.sealedEnd.IsZero():
		return now.Sub(s.sealedEnd)
	case failing:
		return now.Sub(s.lastClear)
	}
	return 0
}

// Run promotes windows on every shard until ctx ends. Errors (ClickHouse
// down, a shard unreachable) are logged at most every 30 s and retried; the
// lag goes on growing meanwhile.
func (p *Promoter) Run(ctx context.Context) {
	if err := p.findShards(ctx); err != nil {
		return
	}
	if p.owned {
		defer func() {
			for _, sh := range p.shards {
				sh.Conn.Close()
			}
		}()
	}
	step := p.step
	if step == nil {
		step = p.Step
	}
	lags := make([]shardLag, len(p.shards))
	for i := range lags {
		lags[i].lastClear = time.Now()
	}
	var lastLog time.Time
	for {
		busy := false
		var lag time.Duration
		var wait time.Duration // until the next round: the soonest look any shard needs
		soonest := func(d time.Duration) {
			if wait == 0 || d < wait {
				wait = d
			}
		}
		for i, sh := range p.shards {
			select {
			case p.gate <- struct{}{}:
			case <-ctx.Done():
				return
			}
			look, err := step(ctx, sh)
			<-p.gate
			if ctx.Err() != nil {
				return
			}
			now := time.Now()
			if look.Known {
				if look.Age > 0 && !look.Promoted {
					lags[i].sealedEnd = now.Add(-look.Age)
				} else {
					lags[i].sealedEnd, lags[i].lastClear = time.Time{}, now
					if look.Promoted {
						// The next window's age is known at the next step,
						// which comes at once (busy).
						lag = max(lag, look.Age)
					}
				}
			}
			if err != nil {
				p.errs.Add(1)
				if time.Since(lastLog) > 30*time.Second {
					p.log.Error().Err(err).Str("shard", sh.Name).Msg("promotion failed; retrying")
					lastLog = time.Now()
				}
			}
			switch {
			case err != nil || !look.Known:
				soonest(p.cfg.Interval)
			case look.Seals > 0:
				soonest(min(look.Seals, beatEvery)) // and the heartbeat goes on
			case look.Idle:
				soonest(p.cfg.IdleInterval)
			default: // a sealed window waits: for an insert still running, for the leader
				soonest(p.cfg.Interval)
			}
			busy = busy || look.Promoted
			lag = max(lag, lags[i].age(now, err != nil && !look.Known))
		}
		p.lagNanos.Store(int64(lag))
		if busy {
			continue // behind: the next window may be sealed already
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(cmp.Or(wait, p.cfg.IdleInterval)):
		}
	}
}

// Hold keeps Run from starting another step (a look at a shard, and the
// promotion it starts) until release is called; it returns once a step
// under way has ended. The ingest report holds the promoter while it counts
// the engine's CPU for landing records in the inbox, so that a promotion
// starting meanwhile is not counted as their cost. A held promoter neither
// promotes nor heartbeats: past the takeover lag, another collector's
// promoter takes the lead. release may be called more than once.
func (p *Promoter) Hold() (release func()) {
	p.gate <- struct{}{}
	var once sync.Once
	return func() { once.Do(func() { <-p.gate }) }
}

// promoterID is name plus a random suffix, unique per Promoter.
func promoterID(name string) string {
	var b [4]byte
	crand.Read(b[:])
	if name == "" {
		name = "promoter"
	}
	return name + "#" + hex.EncodeToString(b[:])
}
