package promoter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/wasm/beacon"
)

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

// windowRun is the promotion of one window: what its pages share.
type windowRun struct {
	ctx        context.Context
	p          *Promoter
	sh         Shard
	start, end time.Time   // end: start plus windows
	windows    int         // the windows it spans: 1, or more (span.go)
	held       []time.Time // the windows of the span holding inbox rows
	// windowToken is the first window's token (of its itl_promote_pages
	// row), token the run's: the window's, with /w<windows> for a span.
	// The pages' are paging.token's.
	windowToken, token string
	paging             paging
	beat               bool // heartbeat between pages (Run; CatchUp sends none)

	// The pages being inserted (at most pagesInFlight) and the first
	// insert's error.
	inserting sync.WaitGroup
	slots     chan struct{}
	mu        sync.Mutex // guards insertErr, streams and refused
	insertErr error

	// Counts of the window (its itl_promoted row and the stats).
	records, streams, origins, edges, joined, inStreams, edgeJoined, conflicts, refused int
}

// pagesInFlight is how many pages of a window are in flight at once (each
// from its decoding to its last insert) while the next is read. A page's
// inserts cost the engine about the same whatever their size (itl_streams'
// insert writes a part to each of the rollups' tables; ~70 ms of the
// engine's CPU for 10 rows as for 2,000, and a wait for the parts' fsyncs),
// so one page at a time leaves the engine waiting. Pages are independent:
// each is a function of sealed inbox rows and of earlier windows'
// promotions, never of another page of its window, and every insert carries
// its own token, so the order in which they land does not matter. The
// window is marked promoted once all of them have landed. Measured by the
// backlog report (TestReportBacklog): 1.4 to 1.5 times the records per
// second of one page at a time, for 1.7 times the peak heap.
const pagesInFlight = 2

// PagesHeld is the most pages of a window a promoter holds at once: those
// in flight (decoded, being inserted) and the next one being read.
const PagesHeld = pagesInFlight + 1

// page is one page of a window: at most paging.rows inbox rows.
type page struct {
	w              *windowRun
	n              int                  // 0, 1, ...
	clients        []collector.Stream   // fresh client records, refined in place
	origins, edges []timeline           // fresh timelines
	naming         map[joinKey][]naming // client records naming the page's origin ids
	ids            []promotedID         // what the page promotes, for itl_promoted_ids
}

// promote promotes the window [start, start+Window), or the span of
// sealed windows from start to at most sealedEnd (span.go), page by page.
// Everything it inserts is a function of sealed inbox rows and of earlier
// windows' promotions, and every insert carries a token of the window, its
// span and paging (recorded before the first insert: paging.go), the page
// and the table: run again, by this or another collector, after a cut
// anywhere, it completes the run and duplicates nothing.
//
// With beat, p beats between pages: a window of a backlog may take longer
// than leaderTTL, and its leader stays the leader meanwhile. It returns the
// last window promoted, the inbox rows the run took and the windows of its
// span holding any.
func (p *Promoter) promote(ctx context.Context, sh Shard, start, sealedEnd time.Time, beat bool) (time.Time, int, int, error) {
	if sh.Replicas != "" {
		// Rows another replica committed may not be here yet: fetch them.
		if err := sh.Conn.Exec(ctx, "SYSTEM SYNC REPLICA itl_inbox"); err != nil {
			return time.Time{}, 0, 0, fmt.Errorf("promoter: sync replica: %w", err)
		}
	}
	for {
		w := &windowRun{ctx: ctx, p: p, sh: sh, start: start, beat: beat,
			windowToken: "itlmon/promote/" + strconv.FormatInt(start.Unix(), 10)}
		err := w.run(sealedEnd)
		if errors.Is(err, errRaced) {
			continue // another promoter's row landed first: by it
		}
		if err != nil {
			return time.Time{}, 0, 0, err
		}
		return w.held[len(w.held)-1], w.records, len(w.held), nil
	}
}

// run promotes w: its span, its paging, its pages, its mark.
func (w *windowRun) run(sealedEnd time.Time) error {
	p, sh := w.p, w.sh
	rec, recorded, err := readRecord(w.ctx, sh, w.start)
	if err != nil {
		return err
	}
	w.windows = 1
	switch {
	case recorded:
		w.windows = rec.windows
	case !p.earlierRelease:
		if w.windows, err = w.spanOf(sealedEnd); err != nil {
			return err
		}
	}
	w.end, w.token = w.start.Add(time.Duration(w.windows)*Window), w.windowToken
	if w.windows > 1 {
		w.token += "/w" + strconv.Itoa(w.windows)
	}
	kinds, held, err := windowKinds(w.ctx, sh.Conn, w.start, w.end)
	if err != nil {
		return err
	}
	w.held = held
	if len(held) == 0 {
		w.held = []time.Time{w.start} // gone from the inbox meanwhile (its TTL): marked all the same
	}
	for k, n := range kinds {
		if !p.kinds[k] {
			return &errBlocked{w.start, strconv.FormatUint(n, 10) + " inbox rows of kind " + strconv.Quote(k) + ", which it does not know"}
		}
		w.records += int(n)
	}
	switch {
	case p.earlierRelease:
		w.paging = pagingFor(w.records, legacyPageRows, true)
	case recorded:
		w.paging = w.pagingBy(rec)
	default:
		if w.paging, err = w.pagingOf(); err != nil {
			return err
		}
		if p.cutAfterRecord {
			return errCut
		}
	}
	w.slots = make(chan struct{}, pagesInFlight)
	err = readPages(w.ctx, sh.Conn, w.start, w.end, w.paging.rows, w.promotePage)
	w.inserting.Wait()
	if err != nil {
		return err
	}
	if err := w.insertError(); err != nil {
		return err
	}
	if p.cutBeforeMark {
		return errCut
	}
	return w.finish()
}

// promotePage promotes one page: rows in inboxOrder, after the previous
// page's last row prev (nil for the first). It prepares the page and
// starts its inserts, once fewer than pagesInFlight pages are in flight.
func (w *windowRun) promotePage(n int, rows []inboxRead, prev *inboxRead) error {
	if c := w.p.cutAfterPages; c > 0 && n >= c {
		return errCut
	}
	if w.beat && n > 0 {
		w.p.heartbeat(w.ctx, w.sh)
	}
	w.slots <- struct{}{} // held from the page's decoding to its last insert
	pg, originRows, edgeRows, err := w.preparePage(n, rows, prev)
	if err == nil {
		err = w.insertError() // stop reading: the window is promoted again later
	}
	if err != nil {
		<-w.slots
		return err
	}
	w.inserting.Go(func() {
		defer func() { <-w.slots }()
		if err := pg.insert(originRows, edgeRows); err != nil {
			w.mu.Lock()
			if w.insertErr == nil {
				w.insertErr = err
			}
			w.mu.Unlock()
			return
		}
		w.p.pages.Add(1)
	})
	return nil
}

// preparePage decodes a page, drops its copies and joins it: everything
// but its inserts.
func (w *windowRun) preparePage(n int, rows []inboxRead, prev *inboxRead) (*page, []Row, []EdgeRow, error) {
	pg := &page{w: w, n: n}
	fresh, err := w.fresh(rows, prev)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := pg.classify(fresh); err != nil {
		return nil, nil, nil, err
	}
	if err := pg.readNaming(); err != nil {
		return nil, nil, nil, err
	}
	pg.countConflicts()
	originRows, origins, err := joinVantage(pg, &originVantage, pg.origins, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	edgeRows, _, err := joinVantage(pg, &edgeVantage, pg.edges, origins)
	if err != nil {
		return nil, nil, nil, err
	}
	return pg, originRows, edgeRows, nil
}

// insertError is the first error of the window's page inserts.
func (w *windowRun) insertError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.insertErr
}

// fresh keeps one copy per record, the first in inboxOrder (copies of the
// previous page's last record included), of records no earlier window
// promoted.
func (w *windowRun) fresh(rows []inboxRead, prev *inboxRead) ([]inboxRead, error) {
	fresh := make([]inboxRead, 0, len(rows))
	ids := make([]string, 0, len(rows))
	seen := make(map[recKey]bool, len(rows))
	if prev != nil {
		seen[keyOf(&prev.InboxRow)] = true
	}
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
	known, err := promotedBefore(w.ctx, w.sh.Conn, ids, w.start.Add(-w.p.cfg.DedupWindow), w.start)
	if err != nil {
		return nil, err
	}
	out := fresh[:0]
	for _, r := range fresh {
		if k := keyOf(&r.InboxRow); k.id == "" || !known[k] {
			out = append(out, r)
		}
	}
	return out, nil
}

// classify decodes the fresh rows into the page's client records and
// timelines. A row it cannot read blocks the window.
func (pg *page) classify(fresh []inboxRead) error {
	// Sized at once: a page holds thousands of records, and a Stream is
	// large (grown by append, their copies were a tenth of a promotion's
	// CPU in this process).
	clients := 0
	for i := range fresh {
		if fresh[i].Kind == store.KindClient {
			clients++
		}
	}
	pg.clients = make([]collector.Stream, 0, clients)
	pg.ids = make([]promotedID, 0, clients)
	for _, r := range fresh {
		switch r.Kind {
		case store.KindClient:
			s, err := r.Client()
			if err != nil {
				return &errBlocked{pg.w.start, "a client record it cannot read: " + err.Error()}
			}
			pg.clients = append(pg.clients, s)
			pg.ids = append(pg.ids, promotedID{store.KindClient, s.Site, string(s.StreamID[:]), pg.w.start})
		case store.KindOrigin, store.KindEdge:
			t, err := r.Origin()
			if err != nil {
				return &errBlocked{pg.w.start, "a " + r.Kind + " timeline it cannot read: " + err.Error()}
			}
			if r.Kind == store.KindOrigin {
				pg.origins = append(pg.origins, timeline{r, t})
			} else {
				pg.edges = append(pg.edges, timeline{r, t})
			}
		default:
			return &errBlocked{pg.w.start, "an inbox row of kind " + strconv.Quote(r.Kind) + ", which it does not know"}
		}
	}
	return nil
}

// namingFrom is how far before a window the client records naming its
// origin ids are read: a timeline joins client records up to the TTL
// before its window, whose candidacy depends on the TTL before them, and an
// edge's joined client depends on the origin timeline its own window
// joined, up to the TTL before that.
func (w *windowRun) namingFrom() time.Time {
	return w.start.Add(-4*w.p.cfg.JoinTTL - w.p.cfg.Hold - 4*Window)
}

// readNaming reads the client records naming the page's origin ids.
func (pg *page) readNaming() error {
	var ids []string
	for i := range pg.clients {
		ids = append(ids, pg.clients[i].OriginID)
	}
	for _, ts := range [][]timeline{pg.origins, pg.edges} {
		for i := range ts {
			ids = append(ids, ts[i].OriginID)
		}
	}
	var err error
	pg.naming, err = readNaming(pg.w.ctx, pg.w.sh.Conn, uniq(ids), pg.w.namingFrom(), pg.w.end)
	return err
}

func (pg *page) rule(k joinKey) *rule {
	return &rule{ttl: pg.w.p.cfg.JoinTTL, hold: pg.w.p.cfg.Hold, names: pg.naming[k]}
}

// countConflicts counts the page's client records that name an origin id
// another record named first: they never take a join.
func (pg *page) countConflicts() {
	for i := range pg.clients {
		c := &pg.clients[i]
		if c.OriginID != "" && !pg.rule(joinKey{c.Site, c.OriginID}).isCandidate(string(c.StreamID[:])) {
			pg.w.conflicts++
		}
	}
}

// joinVantage joins the page with v's timelines: the clients' side, then
// the timelines' side. It returns the rows for v's table and the timelines
// the page's clients joined.
func joinVantage[R any](pg *page, v *vantage[R], ts []timeline, origins map[joinKey]*beacon.Origin) ([]R, map[joinKey]*beacon.Origin, error) {
	rows, joined, err := clientSide(pg, v, origins)
	if err != nil {
		return nil, nil, err
	}
	written := len(rows)
	more, late, err := timelineSide(pg, v, ts)
	if err != nil {
		return nil, nil, err
	}
	w := pg.w
	if v.kind == store.KindOrigin {
		w.origins += len(ts)
		w.joined += written + late
		w.inStreams += len(joined)
	} else {
		w.edges += len(ts)
		w.edgeJoined += written + late
	}
	return append(rows, more...), joined, nil
}

// earlierClients reads the client records that want names (their first
// copies: of earlier windows, or of earlier windows of this span), by
// stream id.
func (pg *page) earlierClients(want []naming) (map[string]collector.Stream, error) {
	out := map[string]collector.Stream{}
	if len(want) == 0 {
		return out, nil
	}
	ids := make([]string, len(want))
	from := pg.w.start
	for i, n := range want {
		ids[i] = n.streamID
		if n.at.Before(from) {
			from = n.at
		}
	}
	rows, err := readInbox(pg.w.ctx, pg.w.sh.Conn, "kind = ? AND ingested_at >= fromUnixTimestamp64Micro(?) AND ingested_at < fromUnixTimestamp64Micro(?) AND stream_id IN (SELECT id FROM want_ids)",
		uniq(ids), store.KindClient, micros(from), micros(pg.w.end))
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		if has(out, r.StreamID) {
			continue // a later copy
		}
		s, err := r.Client()
		if err != nil {
			return nil, &errBlocked{pg.w.start, "a client record it cannot read: " + err.Error()}
		}
		out[r.StreamID] = s
	}
	return out, nil
}

// originsSeen returns, for each client record of want, the origin timeline
// its window joined (none when it joined none).
func (pg *page) originsSeen(want []naming) (map[string]*beacon.Origin, error) {
	out := map[string]*beacon.Origin{}
	ttl, hold := pg.w.p.cfg.JoinTTL, pg.w.p.cfg.Hold
	var ids []string
	from, to := pg.w.start, pg.w.start
	for _, n := range want {
		cs := n.at.Truncate(Window)
		from = minTime(from, cs.Add(-ttl))
		to = maxTime(to, cs.Add(Window+hold))
	}
	byClient := map[string]joinKey{}
	for k, names := range pg.naming {
		for _, n := range names {
			byClient[n.streamID] = k
		}
	}
	for _, n := range want {
		ids = append(ids, byClient[n.streamID].originID)
	}
	rows, err := readInbox(pg.w.ctx, pg.w.sh.Conn, "kind = ? AND ingested_at >= fromUnixTimestamp64Micro(?) AND ingested_at < fromUnixTimestamp64Micro(?) AND origin_id IN (SELECT id FROM want_ids)",
		uniq(ids), store.KindOrigin, micros(from), micros(to))
	if err != nil {
		return nil, err
	}
	// Per join key, the first copy in each client's range (rows are in
	// inboxOrder: by ingested_at within a key).
	for _, n := range want {
		k := byClient[n.streamID]
		cs := n.at.Truncate(Window)
		for _, r := range rows {
			if r.Site != k.site || r.OriginID != k.originID || r.IngestedAt.Before(cs.Add(-ttl)) || !r.IngestedAt.Before(cs.Add(Window+hold)) {
				continue
			}
			if w, ok := pg.rule(k).winner(r.IngestedAt); ok && w.streamID == n.streamID {
				o, err := r.Origin()
				if err != nil {
					return nil, &errBlocked{pg.w.start, "an origin timeline it cannot read: " + err.Error()}
				}
				out[n.streamID] = &o
			}
			break
		}
	}
	return out, nil
}

// insert inserts the page's rows, each table once per window and page
// (TokenSettings). Rows ClickHouse refuses (a data error: every collector
// meets the same) are set aside, so they cannot hold up every later window.
func (pg *page) insert(originRows []Row, edgeRows []EdgeRow) error {
	w, conn := pg.w, pg.w.sh.Conn
	token := w.paging.token(w.token, pg.n)
	refusedStreams, err := insertOrSetAside(w.ctx, token, pg.clients, func(ctx context.Context, tok string, part []collector.Stream) error {
		return store.InsertStreams(ctx, conn, part, tok)
	})
	if err != nil {
		return fmt.Errorf("promoter: %w", err)
	}
	refusedOrigins, err := insertOrSetAside(w.ctx, token+"/itl_origin", originRows, func(ctx context.Context, tok string, part []Row) error {
		return store.InsertRows(ctx, conn, "itl_origin", store.TokenSettings(tok), part)
	})
	if err != nil {
		return fmt.Errorf("promoter: %w", err)
	}
	refusedEdges, err := insertOrSetAside(w.ctx, token+"/itl_edge", edgeRows, func(ctx context.Context, tok string, part []EdgeRow) error {
		return store.InsertRows(ctx, conn, "itl_edge", store.TokenSettings(tok), part)
	})
	if err != nil {
		return fmt.Errorf("promoter: %w", err)
	}
	if err := store.InsertRows(w.ctx, conn, "itl_promoted_ids", store.TokenSettings(token+"/itl_promoted_ids"), pg.ids); err != nil {
		return fmt.Errorf("promoter: %w", err)
	}
	if n := len(refusedStreams) + len(refusedOrigins) + len(refusedEdges); n > 0 {
		w.p.log.Error().Time("window", w.start).Int("page", pg.n).Int("streams", len(refusedStreams)).Int("origin_rows", len(refusedOrigins)).Int("edge_rows", len(refusedEdges)).
			Msg("clickhouse refuses these records (a data error); set aside, they stay in itl_inbox for 2 days")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refused += len(refusedStreams) + len(refusedOrigins) + len(refusedEdges)
	w.streams += len(pg.clients)
	return nil
}

// finish marks the run's windows promoted (itl_promoted: a row for each
// window holding inbox rows, as window by window, the run's counts on the
// last) and counts it.
func (w *windowRun) finish() error {
	copies := w.records - w.streams - w.origins - w.edges
	mark := make([]promotedWindow, 0, len(w.held))
	for _, at := range w.held[:len(w.held)-1] {
		mark = append(mark, promotedWindow{Window: at, Collector: w.p.cfg.Collector})
	}
	mark = append(mark, promotedWindow{
		Window: w.held[len(w.held)-1], Records: uint32(w.records), Streams: uint32(w.streams), Origins: uint32(w.origins),
		Copies: uint32(max(copies, 0)), Joined: uint32(w.joined), Collector: w.p.cfg.Collector,
	})
	if err := store.InsertRows(w.ctx, w.sh.Conn, "itl_promoted", store.TokenSettings(w.token+"/itl_promoted"), mark); err != nil {
		return fmt.Errorf("promoter: %w", err)
	}
	p := w.p
	p.windows.Add(1)
	p.records.Add(uint64(w.records))
	p.streams.Add(uint64(w.streams))
	p.origins.Add(uint64(w.origins))
	p.copies.Add(uint64(max(copies, 0)))
	p.joined.Add(uint64(w.joined))
	p.joinedInStreams.Add(uint64(w.inStreams))
	p.edges.Add(uint64(w.edges))
	p.edgeJoined.Add(uint64(w.edgeJoined))
	p.conflicts.Add(uint64(w.conflicts))
	p.refused.Add(uint64(w.refused))
	return nil
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

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
