package join

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/ext"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// Window is the promotion grid: one second of ingested_at. It is part of
// every promotion's identity (its deduplication tokens), so it is not a
// setting: collectors that disagreed on it would store windows twice.
const Window = time.Second

// Defaults of PromoterConfig.
const (
	DefaultHold        = 3 * time.Second
	DefaultGrace       = time.Second
	DefaultJoinTTL     = 2 * time.Minute
	DefaultDedupWindow = 24 * time.Hour
	DefaultInterval    = 250 * time.Millisecond
	maxDedupWindow     = 7 * 24 * time.Hour // itl_promoted_ids keeps ids 7 days
)

// PromoterConfig configures a Promoter. Hold, JoinTTL and DedupWindow decide
// what a window's promotion stores: every collector of a deployment must run
// with the same values.
type PromoterConfig struct {
	// Hold: an origin timeline that reaches the inbox up to Hold after its
	// client record refines the client's itl_streams row (stall causes).
	// Windows are promoted Hold (plus Grace) after they end. The browser
	// sends a record at stream end and the origin reporter about once a
	// second, so the two usually arrive within a second of each other.
	Hold time.Duration
	// Grace is added to the wait for a window's end: for clock steps and for
	// a Distributed insert's forwarding to the shard.
	Grace time.Duration
	// JoinTTL: a client record and an origin timeline that reach the inbox
	// further apart are not joined.
	JoinTTL time.Duration
	// DedupWindow: a record whose id was promoted this long before is a
	// copy (a resend, a load balancer retry, a spool replay). At most 7 days.
	DedupWindow time.Duration
	// Interval between looks for a window to promote when idle.
	Interval time.Duration
	// Collector names this collector in itl_promoted (host name).
	Collector string
	Logger    zerolog.Logger
}

func (c *PromoterConfig) setDefaults() error {
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
		return errors.New("join: dedup window longer than itl_promoted_ids keeps ids (7 days)")
	}
	if c.JoinTTL > c.DedupWindow {
		return errors.New("join: join TTL longer than the dedup window")
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
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

// Promoter turns itl_inbox into itl_streams, itl_timelines, itl_origin,
// itl_edge (edgejoin.go) and itl_promoted_ids (and, through their
// materialized views, the rollups), one sealed window at a time, exactly
// once (see schema/007_inbox.sql). Any
// number of collectors may run one on the same shards: they do the same work
// and ClickHouse keeps one copy of it.
type Promoter struct {
	id      string // Collector plus a random suffix: this promoter in itl_promoters
	cfg     PromoterConfig
	log     zerolog.Logger
	shards  []Shard
	resolve func(context.Context) ([]Shard, error) // a cluster's shards, found by Run
	owned   bool                                   // shards came from resolve: Run closes them
	beatMu  sync.Mutex
	beats   map[string]time.Time // last heartbeat per shard name
	// step is what Run calls per shard: Step, or a fake in tests.
	step func(context.Context, Shard) (bool, time.Duration, error)

	windows, records, streams, origins, copies, joined, joinedInStreams, refused, errs atomic.Uint64
	edges, edgeJoined                                                                  atomic.Uint64
	lagNanos, busyNanos                                                                atomic.Int64
}

// PromoterStats counts what a Promoter did (counters) and how far behind it
// is (gauge).
type PromoterStats struct {
	Windows         uint64        // windows promoted by this collector (reruns included)
	Records         uint64        // inbox rows read in them
	Streams         uint64        // client records promoted
	Origins         uint64        // origin timelines promoted
	Copies          uint64        // copies dropped
	Joined          uint64        // joins made (itl_origin version 1 rows)
	JoinedInStreams uint64        // ... whose refined causes reached itl_streams
	Edges           uint64        // edge timelines promoted
	EdgeJoined      uint64        // edge joins made (itl_edge version 1 rows)
	Refused         uint64        // records ClickHouse refused (data errors), set aside
	Errors          uint64        // failed promotion attempts (retried)
	Lag             time.Duration // server time minus the end of the last promoted window, over all shards
	Busy            time.Duration // time spent promoting windows that were promoted (their throughput: Records/Busy)
}

// NewPromoter returns a Promoter of shards.
func NewPromoter(shards []Shard, cfg PromoterConfig) (*Promoter, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if len(shards) == 0 {
		return nil, errors.New("join: promoter without a shard")
	}
	return &Promoter{id: promoterID(cfg.Collector), cfg: cfg, shards: shards, beats: map[string]time.Time{},
		log: cfg.Logger.With().Str("component", "promoter").Logger()}, nil
}

// NewClusterPromoter returns a Promoter of the shards resolve finds (a
// cluster's, store.DB.ShardConns), which Run looks up when it starts and
// until it succeeds (ClickHouse may be down), and closes when it returns.
func NewClusterPromoter(resolve func(context.Context) ([]Shard, error), cfg PromoterConfig) (*Promoter, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Promoter{id: promoterID(cfg.Collector), cfg: cfg, resolve: resolve, beats: map[string]time.Time{},
		log: cfg.Logger.With().Str("component", "promoter").Logger()}, nil
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
func (p *Promoter) Stats() PromoterStats {
	return PromoterStats{
		Windows: p.windows.Load(), Records: p.records.Load(), Streams: p.streams.Load(), Origins: p.origins.Load(),
		Copies: p.copies.Load(), Joined: p.joined.Load(), JoinedInStreams: p.joinedInStreams.Load(),
		Edges: p.edges.Load(), EdgeJoined: p.edgeJoined.Load(),
		Busy: time.Duration(p.busyNanos.Load()), Refused: p.refused.Load(), Errors: p.errs.Load(), Lag: time.Duration(p.lagNanos.Load()),
	}
}

// Run promotes windows on every shard until ctx ends. Errors (ClickHouse
// down, a shard unreachable) are logged at most every 30 s and retried.
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
	var lastLog time.Time
	for {
		busy := false
		var lag time.Duration
		for _, sh := range p.shards {
			did, l, err := step(ctx, sh)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				p.errs.Add(1)
				if time.Since(lastLog) > 30*time.Second {
					p.log.Error().Err(err).Str("shard", sh.Name).Msg("promotion failed; retrying")
					lastLog = time.Now()
				}
				continue
			}
			busy = busy || did
			lag = max(lag, l)
		}
		p.lagNanos.Store(int64(lag))
		if busy {
			continue // behind: the next window may be sealed already
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.cfg.Interval):
		}
	}
}

// Step promotes the oldest unpromoted window of sh if it is sealed and this
// promoter leads sh (see itl_promoters), or the promotion lags more than
// takeoverLag. It reports whether it promoted one, and the lag behind the
// server clock.
func (p *Promoter) Step(ctx context.Context, sh Shard) (bool, time.Duration, error) {
	return p.promoteOldest(ctx, sh, false)
}

// Leadership: promoters beat every beatEvery; the smallest id among those
// seen within leaderTTL leads; any promotes when the lag passes takeoverLag.
const (
	beatEvery   = 2 * time.Second
	leaderTTL   = 10 * time.Second
	takeoverLag = 10 * time.Second
)

// beat records p in sh's itl_promoters, at most every beatEvery: idle or
// not, so the leadership is settled before there is work.
func (p *Promoter) beat(ctx context.Context, sh Shard) error {
	p.beatMu.Lock()
	due := time.Since(p.beats[sh.Name]) >= beatEvery
	if due {
		p.beats[sh.Name] = time.Now()
	}
	p.beatMu.Unlock()
	if !due {
		return nil
	}
	if err := sh.Conn.Exec(ctx, "INSERT INTO itl_promoters (collector) VALUES (?)", p.id); err != nil {
		return fmt.Errorf("promoter: heartbeat: %w", err)
	}
	return nil
}

// leads reports whether p is the promoter of sh that should promote now:
// the smallest id seen within leaderTTL (p itself when none is).
func (p *Promoter) leads(ctx context.Context, sh Shard) (bool, error) {
	var leader string
	if err := sh.Conn.QueryRow(ctx, `SELECT min(collector) FROM itl_promoters
		WHERE seen > now64(3) - toIntervalMillisecond(?)`, leaderTTL.Milliseconds()).Scan(&leader); err != nil {
		return false, fmt.Errorf("promoter: leader: %w", err)
	}
	return leader == "" || leader == p.id, nil
}

// promoteOldest is Step; with ignoreLeader it promotes whether or not p leads
// sh, and sends no heartbeat (CatchUp).
func (p *Promoter) promoteOldest(ctx context.Context, sh Shard, ignoreLeader bool) (bool, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !ignoreLeader {
		if err := p.beat(ctx, sh); err != nil {
			return false, 0, err
		}
	}
	var now, last, next time.Time
	var oldestRunning float64
	// One round trip: the server clock, the watermark, the next inbox row
	// after it, and the age of the oldest running inbox insert.
	processes := "system.processes"
	if sh.Replicas != "" {
		processes = "clusterAllReplicas(" + quoteString(sh.Replicas) + ", system.processes)"
	}
	err := sh.Conn.QueryRow(ctx, `
		WITH (SELECT max(promoted_window) FROM itl_promoted) AS last
		SELECT now64(6), last,
			(SELECT min(ingested_at) FROM itl_inbox WHERE ingested_at >= last + INTERVAL 1 SECOND),
			(SELECT max(elapsed) FROM `+processes+`
			  WHERE query_kind = 'Insert' AND positionCaseInsensitive(query, 'itl_inbox') > 0)`).
		Scan(&now, &last, &next, &oldestRunning)
	if err != nil {
		return false, 0, fmt.Errorf("promoter: look for a window: %w", err)
	}
	lag := now.Sub(last.Add(Window))
	if last.Unix() <= 0 {
		lag = 0
	}
	if next.Unix() <= 0 || !next.After(last) {
		return false, 0, nil // nothing new
	}
	start := next.Truncate(Window)
	end := start.Add(Window)
	// Sealed: the server clock is past the window's end plus the hold and
	// the grace, and no inbox insert that began before end+hold is running.
	if now.Before(end.Add(p.cfg.Hold + p.cfg.Grace)) {
		return false, lag, nil
	}
	if oldestRunning > 0 && now.Add(-time.Duration(oldestRunning*float64(time.Second))).Before(end.Add(p.cfg.Hold)) {
		return false, lag, nil
	}
	if !ignoreLeader && lag < takeoverLag {
		lead, err := p.leads(ctx, sh)
		if err != nil {
			return false, lag, err
		}
		if !lead {
			return false, lag, nil // the leader promotes it
		}
	}
	began := time.Now()
	if err := p.promote(ctx, sh, start); err != nil {
		return false, lag, err
	}
	p.busyNanos.Add(int64(time.Since(began)))
	return true, now.Sub(end), nil
}

// inboxRead is an itl_inbox row as the promoter reads it.
type inboxRead struct {
	store.InboxRow
	IngestedAt time.Time
}

// kindJoin marks a join in itl_promoted_ids (stream_id: the origin id).
const kindJoin = "join"

// recKey identifies a record for deduplication: a client record by its
// stream id, an origin timeline by its id, within a site.
type recKey struct{ kind, site, id string }

// joinKey matches a client record to an origin timeline.
type joinKey struct{ site, originID string }

// promote promotes the window [start, start+Window). Everything it inserts
// is a function of sealed inbox rows and of earlier windows' promotions, and
// every insert carries a token of the window and the table: run again, by
// this or another collector, after a cut anywhere, it completes the window
// and duplicates nothing.
func (p *Promoter) promote(ctx context.Context, sh Shard, start time.Time) error {
	end := start.Add(Window)
	token := "itlmon/promote/" + strconv.FormatInt(start.Unix(), 10)
	if sh.Replicas != "" {
		// Rows another replica committed may not be here yet: fetch them.
		if err := sh.Conn.Exec(ctx, "SYSTEM SYNC REPLICA itl_inbox"); err != nil {
			return fmt.Errorf("promoter: sync replica: %w", err)
		}
	}
	rows, err := readInbox(ctx, sh.Conn, "ingested_at >= fromUnixTimestamp64Micro(?) AND ingested_at < fromUnixTimestamp64Micro(?)", nil, micros(start), micros(end))
	if err != nil {
		return err
	}
	// One copy per record: the first in (kind, site, id, ingested_at,
	// received_at, payload) order, the query's.
	var fresh []inboxRead
	seen := map[recKey]bool{}
	var ids []string
	for _, r := range rows {
		k := keyOf(&r.InboxRow)
		if k.id != "" && seen[k] {
			continue
		}
		seen[k] = true
		fresh = append(fresh, r)
		if k.id != "" {
			ids = append(ids, k.id)
		}
	}
	// ... and not promoted by an earlier window.
	known, err := promotedBefore(ctx, sh.Conn, ids, start.Add(-p.cfg.DedupWindow), start)
	if err != nil {
		return err
	}
	var clients []collector.Stream
	var origins, edges []inboxRead
	for _, r := range fresh {
		k := keyOf(&r.InboxRow)
		if k.id != "" && known[k] {
			continue
		}
		switch r.Kind {
		case store.KindClient:
			s, err := r.Client()
			if err != nil {
				p.log.Error().Err(err).Str("site", r.Site).Msg("inbox row unreadable; skipped")
				continue
			}
			clients = append(clients, s)
		case store.KindOrigin:
			origins = append(origins, r)
		case store.KindEdge:
			edges = append(edges, r)
		default:
			p.log.Warn().Str("kind", r.Kind).Msg("inbox row of an unknown kind (a newer collector's?); skipped")
		}
	}
	copies := len(rows) - len(clients) - len(origins) - len(edges)

	// The join. Origins for this window's clients: this window's, earlier
	// ones within the TTL, and those of the next Hold (sealed too).
	var want []string
	for i := range clients {
		if clients[i].OriginID != "" {
			want = append(want, clients[i].OriginID)
		}
	}
	originOf, err := firstByJoinKey(ctx, sh.Conn, store.KindOrigin, want, start.Add(-p.cfg.JoinTTL), end.Add(p.cfg.Hold))
	if err != nil {
		return err
	}
	// Clients promoted earlier for this window's origins.
	want = want[:0]
	for _, o := range origins {
		if o.OriginID != "" {
			want = append(want, o.OriginID)
		}
	}
	clientOf, err := firstByJoinKey(ctx, sh.Conn, store.KindClient, want, start.Add(-p.cfg.JoinTTL), start)
	if err != nil {
		return err
	}

	// An origin timeline joins one client record: the first of this window
	// (in query order) when the timeline is this window's or later, none
	// when an earlier window joined it already. Joins are recorded in
	// itl_promoted_ids (kind "join") to know that.
	var earlier []string
	for _, or := range originOf {
		if or.IngestedAt.Before(start) {
			earlier = append(earlier, or.OriginID)
		}
	}
	joinedBefore, err := promotedBefore(ctx, sh.Conn, earlier, start.Add(-p.cfg.DedupWindow), start)
	if err != nil {
		return err
	}
	joinedNow := map[joinKey]bool{}

	var originRows []Row
	var joinIDs []joinKey
	joined, inStreams := 0, 0
	base := func(r inboxRead) (Row, beacon.Origin, error) {
		o, err := r.Origin()
		if err != nil {
			return Row{}, o, err
		}
		return originRow(r.Site, r.ReceivedAt.UTC(), &o), o, nil
	}
	for i := range clients {
		c := &clients[i]
		if c.OriginID == "" {
			continue
		}
		k := joinKey{c.Site, c.OriginID}
		or, ok := originOf[k]
		if !ok {
			continue
		}
		b, o, err := base(or)
		if err != nil {
			p.log.Error().Err(err).Str("site", or.Site).Msg("inbox row unreadable; not joined")
			continue
		}
		r := Attribute(&c.Record, &o)
		refine(c, &r)
		inStreams++
		// The join row is this window's when the timeline's window is this
		// one or earlier (else the timeline's own window writes it).
		if or.IngestedAt.Before(end) && !joinedNow[k] && !joinedBefore[recKey{kindJoin, k.site, k.originID}] {
			originRows = append(originRows, joinedRow(b, c, &r, true))
			joinedNow[k] = true
			joinIDs = append(joinIDs, k)
		}
	}
	for _, or := range origins {
		b, o, err := base(or)
		if err != nil {
			p.log.Error().Err(err).Str("site", or.Site).Msg("inbox row unreadable; skipped")
			continue
		}
		originRows = append(originRows, b)
		k := joinKey{or.Site, or.OriginID}
		if or.OriginID == "" || joinedNow[k] {
			continue
		}
		cr, ok := clientOf[k]
		if !ok {
			continue // no client record yet: a later window joins it
		}
		c, err := cr.Client()
		if err != nil {
			p.log.Error().Err(err).Str("site", cr.Site).Msg("inbox row unreadable; not joined")
			continue
		}
		r := Attribute(&c.Record, &o)
		// The client's window saw this timeline if it reached the inbox
		// within the hold after that window's end.
		clientEnd := cr.IngestedAt.Truncate(Window).Add(Window)
		refined := or.IngestedAt.Before(clientEnd.Add(p.cfg.Hold))
		if refined {
			refine(&c, &r)
		}
		originRows = append(originRows, joinedRow(b, &c, &r, refined))
		joinedNow[k] = true
		joinIDs = append(joinIDs, k)
	}
	joined = len(joinIDs)
	// The edge's timelines (edgejoin.go): they refine clients too.
	ej, err := p.joinEdges(ctx, sh.Conn, start, clients, edges, originOf)
	if err != nil {
		return err
	}

	// The inserts, each once per window and table (TokenSettings). Rows
	// ClickHouse refuses (a data error: every collector meets the same) are
	// set aside, so they cannot hold up every later window.
	refusedStreams, err := insertOrSetAside(ctx, token, clients, func(ctx context.Context, tok string, part []collector.Stream) error {
		return store.InsertStreams(ctx, sh.Conn, part, tok)
	})
	if err != nil {
		return fmt.Errorf("promoter: %w", err)
	}
	refusedOrigins, err := insertOrSetAside(ctx, token+"/itl_origin", originRows, func(ctx context.Context, tok string, part []Row) error {
		return store.InsertRows(ctx, sh.Conn, "itl_origin", store.TokenSettings(tok), part)
	})
	if err != nil {
		return fmt.Errorf("promoter: %w", err)
	}
	refusedEdges, err := insertOrSetAside(ctx, token+"/itl_edge", ej.rows, func(ctx context.Context, tok string, part []EdgeRow) error {
		return store.InsertRows(ctx, sh.Conn, "itl_edge", store.TokenSettings(tok), part)
	})
	if err != nil {
		return fmt.Errorf("promoter: %w", err)
	}
	if n := len(refusedStreams) + len(refusedOrigins) + len(refusedEdges); n > 0 {
		p.refused.Add(uint64(n))
		p.log.Error().Time("window", start).Int("streams", len(refusedStreams)).Int("origin_rows", len(refusedOrigins)).Int("edge_rows", len(refusedEdges)).
			Msg("clickhouse refuses these records (a data error); set aside, they stay in itl_inbox for 2 days")
	}
	idRows := make([]promotedID, 0, len(clients)+len(origins))
	for i := range clients {
		idRows = append(idRows, promotedID{store.KindClient, clients[i].Site, string(clients[i].StreamID[:]), start})
	}
	for _, o := range origins {
		if o.StreamID != "" {
			idRows = append(idRows, promotedID{store.KindOrigin, o.Site, o.StreamID, start})
		}
	}
	for _, k := range joinIDs {
		idRows = append(idRows, promotedID{kindJoin, k.site, k.originID, start})
	}
	idRows = append(idRows, ej.ids...)
	if err := store.InsertRows(ctx, sh.Conn, "itl_promoted_ids", store.TokenSettings(token+"/itl_promoted_ids"), idRows); err != nil {
		return fmt.Errorf("promoter: %w", err)
	}
	mark := []promotedWindow{{
		Window: start, Records: uint32(len(rows)), Streams: uint32(len(clients)), Origins: uint32(len(origins)),
		Copies: uint32(copies), Joined: uint32(joined), Collector: p.cfg.Collector,
	}}
	if err := store.InsertRows(ctx, sh.Conn, "itl_promoted", store.TokenSettings(token+"/itl_promoted"), mark); err != nil {
		return fmt.Errorf("promoter: %w", err)
	}
	p.windows.Add(1)
	p.records.Add(uint64(len(rows)))
	p.streams.Add(uint64(len(clients)))
	p.origins.Add(uint64(len(origins)))
	p.copies.Add(uint64(copies))
	p.joined.Add(uint64(joined))
	p.joinedInStreams.Add(uint64(inStreams))
	p.edges.Add(uint64(ej.edges))
	p.edgeJoined.Add(uint64(ej.joined))
	return nil
}

// promotedID is a row of itl_promoted_ids.
type promotedID struct {
	Kind   string    `ch:"kind"`
	Site   string    `ch:"site"`
	ID     string    `ch:"stream_id"`
	Window time.Time `ch:"promoted_window"`
}

// promotedWindow is a row of itl_promoted.
type promotedWindow struct {
	Window    time.Time `ch:"promoted_window"`
	Records   uint32    `ch:"records"`
	Streams   uint32    `ch:"streams"`
	Origins   uint32    `ch:"origins"`
	Copies    uint32    `ch:"copies"`
	Joined    uint32    `ch:"joined"`
	Collector string    `ch:"collector"`
}

func keyOf(r *store.InboxRow) recKey {
	return recKey{r.Kind, r.Site, r.StreamID}
}

// readInbox reads inbox rows matching where (with args), in the order that
// makes "the first copy" deterministic. ids, if any, are sent as the
// external table want_ids(id String).
func readInbox(ctx context.Context, conn driver.Conn, where string, ids []string, args ...any) ([]inboxRead, error) {
	if len(ids) > 0 {
		var err error
		if ctx, err = withIDs(ctx, ids); err != nil {
			return nil, err
		}
	}
	q, err := conn.Query(ctx, `SELECT kind, site, stream_id, origin_id, received_at, ingested_at,
			country, region, browser, browser_major, os, device, payload
		FROM itl_inbox WHERE `+where+`
		ORDER BY kind, site, stream_id, ingested_at, received_at, payload`, args...)
	if err != nil {
		return nil, fmt.Errorf("promoter: read inbox: %w", err)
	}
	defer q.Close()
	var out []inboxRead
	for q.Next() {
		var r inboxRead
		if err := q.Scan(&r.Kind, &r.Site, &r.StreamID, &r.OriginID, &r.ReceivedAt, &r.IngestedAt,
			&r.Country, &r.Region, &r.Browser, &r.BrowserMajor, &r.OS, &r.Device, &r.Payload); err != nil {
			return nil, fmt.Errorf("promoter: read inbox: %w", err)
		}
		out = append(out, r)
	}
	if err := q.Err(); err != nil {
		return nil, fmt.Errorf("promoter: read inbox: %w", err)
	}
	return out, nil
}

// withIDs sends ids with the queries of ctx as the external table
// want_ids(id String).
func withIDs(ctx context.Context, ids []string) (context.Context, error) {
	t, err := ext.NewTable("want_ids", ext.Column("id", "String"))
	if err != nil {
		return ctx, fmt.Errorf("promoter: %w", err)
	}
	for _, id := range ids {
		if err := t.Append(id); err != nil {
			return ctx, fmt.Errorf("promoter: %w", err)
		}
	}
	return clickhouse.Context(ctx, clickhouse.WithExternalTable(t)), nil
}

// firstByJoinKey reads the inbox rows of kind whose join key is one of ids
// and that reached the inbox in [from, to), and keeps the first copy of
// each (site, join key) in readInbox's order. It reads nothing without ids.
func firstByJoinKey(ctx context.Context, conn driver.Conn, kind string, ids []string, from, to time.Time) (map[joinKey]inboxRead, error) {
	first := map[joinKey]inboxRead{}
	if len(ids) == 0 {
		return first, nil
	}
	rows, err := readInbox(ctx, conn, "kind = ? AND ingested_at >= fromUnixTimestamp64Micro(?) AND ingested_at < fromUnixTimestamp64Micro(?) AND origin_id IN (SELECT id FROM want_ids)",
		ids, kind, micros(from), micros(to))
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		if k := (joinKey{r.Site, r.OriginID}); !has(first, k) {
			first[k] = r
		}
	}
	return first, nil
}

// promotedBefore returns which of ids were promoted in a window in [from, to).
func promotedBefore(ctx context.Context, conn driver.Conn, ids []string, from, to time.Time) (map[recKey]bool, error) {
	known := map[recKey]bool{}
	if len(ids) == 0 {
		return known, nil
	}
	ctx, err := withIDs(ctx, ids)
	if err != nil {
		return nil, err
	}
	q, err := conn.Query(ctx,
		`SELECT DISTINCT kind, site, stream_id FROM itl_promoted_ids
		 WHERE stream_id IN (SELECT id FROM want_ids) AND promoted_window >= fromUnixTimestamp64Micro(?) AND promoted_window < fromUnixTimestamp64Micro(?)`, micros(from), micros(to))
	if err != nil {
		return nil, fmt.Errorf("promoter: promoted ids: %w", err)
	}
	defer q.Close()
	for q.Next() {
		var k recKey
		if err := q.Scan(&k.kind, &k.site, &k.id); err != nil {
			return nil, fmt.Errorf("promoter: promoted ids: %w", err)
		}
		known[k] = true
	}
	return known, q.Err()
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

// insertOrSetAside inserts rows with token; if ClickHouse refuses them (a
// data error), it inserts them in halves, and those in halves, each with a
// token derived from its place, down to the rows refused on their own, which
// it returns. Refusals are a property of the rows, so a rerun splits the
// same way and its tokens match.
func insertOrSetAside[R any](ctx context.Context, token string, rows []R,
	insert func(ctx context.Context, token string, rows []R) error) (refused []R, err error) {
	if len(rows) == 0 {
		return nil, nil
	}
	err = insert(ctx, token, rows)
	if err == nil || !store.Refused(err) {
		return nil, err
	}
	if len(rows) == 1 {
		return rows, nil
	}
	n := len(rows) / 2
	a, err := insertOrSetAside(ctx, token+"/0", rows[:n:n], insert)
	if err != nil {
		return nil, err
	}
	b, err := insertOrSetAside(ctx, token+"/1", rows[n:], insert)
	if err != nil {
		return nil, err
	}
	return append(a, b...), nil
}

// CatchUp promotes, on every shard, every window holding inbox rows
// ingested before the call, waiting for each to seal (about the hold and
// the grace after its end), and returns when done or when ctx ends. Tests
// use it to read what they wrote; Run does the same continuously. Not to be
// called while Run runs on the same Promoter.
func (p *Promoter) CatchUp(ctx context.Context) error {
	if err := p.findShards(ctx); err != nil {
		return err
	}
	for _, sh := range p.shards {
		var until time.Time
		if err := sh.Conn.QueryRow(ctx, "SELECT now64(6)").Scan(&until); err != nil {
			return fmt.Errorf("promoter: %w", err)
		}
		for {
			var pending uint64
			err := sh.Conn.QueryRow(ctx, `SELECT count() FROM itl_inbox
				WHERE ingested_at < fromUnixTimestamp64Micro(?) AND ingested_at >= (SELECT max(promoted_window) FROM itl_promoted) + INTERVAL 1 SECOND`,
				micros(until)).Scan(&pending)
			if err != nil {
				return fmt.Errorf("promoter: %w", err)
			}
			if pending == 0 {
				break
			}
			did, _, err := p.promoteOldest(ctx, sh, true)
			if err != nil {
				return err
			}
			if !did {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}
	return nil
}

// micros is t as a query argument for fromUnixTimestamp64Micro: exact to
// the microsecond, whatever the driver does with a time.Time.
func micros(t time.Time) int64 { return t.UnixMicro() }

// quoteString quotes s as a ClickHouse string literal.
func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
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
