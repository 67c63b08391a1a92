package promoter

import (
	"slices"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/join"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// One timeline, one client record.
//
// A timeline (the origin's or the edge's, matched by the origin id its
// response carried) refines exactly one client record, chosen by a rule
// every promoter applies to the same sealed inbox rows:
//
//   - A client record is a candidate for an origin id when no other client
//     record naming that id (in its site) reached the inbox less than
//     JoinTTL before it, in arrival order: ingested_at, then stream id. A
//     second record naming the id (an app whose X-Request-Id is not unique
//     per response, a forged record: the site key is public) is a conflict:
//     counted (itlmon_promote_join_conflicts_total), never joined.
//   - A client record and a timeline are joinable when the timeline reached
//     the inbox from JoinTTL before the client record's window to Hold after
//     its end (the client's window sees it and refines itl_streams), or the
//     client record came in the JoinTTL before the timeline's window (the
//     timeline's window joins it late: itl_origin or itl_edge only).
//   - The timeline joins the first candidate joinable with it, in arrival
//     order. A record that arrived later than that one never takes it.
//
// The version 1 row (the joined pair) is written by the later of the two
// windows, once.

// vantage is what differs between the origin's and the edge's join: R is
// the row type of its table.
type vantage[R any] struct {
	kind     string // of the timeline's inbox rows
	joinKind string // of a join in itl_promoted_ids
	table    string
	// base is the timeline's version 0 row.
	base func(site string, receivedAt time.Time, t *beacon.Origin) R
	// join attributes client c with timeline t (and, for the edge, the
	// origin's timeline o the client's window joined, nil if none), applies
	// the attribution to c and returns the version 1 row.
	join func(base R, c *collector.Stream, t, o *beacon.Origin, inStreams bool) R
}

var originVantage = vantage[Row]{
	kind: store.KindOrigin, joinKind: "join", table: "itl_origin", base: originRow,
	join: func(base Row, c *collector.Stream, t, _ *beacon.Origin, inStreams bool) Row {
		r := join.Attribute(&c.Record, t)
		r.Causes.Apply(c)
		return joinedRow(base, c, &r, inStreams)
	},
}

var edgeVantage = vantage[EdgeRow]{
	kind: store.KindEdge, joinKind: "edgejoin", table: "itl_edge", base: edgeRow,
	join: func(base EdgeRow, c *collector.Stream, e, o *beacon.Origin, inStreams bool) EdgeRow {
		r := join.AttributeEdge(&c.Record, e, o)
		join.ApplyEdge(c, e, &r)
		return edgeJoinedRow(base, c, &r, inStreams)
	},
}

// rule applies the rule above to the client records naming one origin id
// (naming, in arrival order).
type rule struct {
	ttl, hold time.Duration
	names     []naming
}

// candidate reports whether names[i] may take a join: no other record
// named the id less than the TTL before it.
func (r *rule) candidate(i int) bool {
	return i == 0 || r.names[i-1].at.Before(r.names[i].at.Add(-r.ttl))
}

// joinable reports whether a client record that reached the inbox at c and
// a timeline that reached it at t are joined, if c is t's first candidate.
func (r *rule) joinable(c, t time.Time) bool {
	cs, ts := c.Truncate(Window), t.Truncate(Window)
	if !c.Before(ts.Add(-r.ttl)) && c.Before(ts) {
		return true // the timeline's window joins the earlier client record
	}
	return !t.Before(cs.Add(-r.ttl)) && t.Before(cs.Add(Window+r.hold))
}

// winner is the client record the timeline that reached the inbox at t
// joins, among those read (false when none: a later one may).
func (r *rule) winner(t time.Time) (naming, bool) {
	for i, n := range r.names {
		if r.candidate(i) && r.joinable(n.at, t) {
			return n, true
		}
	}
	return naming{}, false
}

// isCandidate reports whether the record streamID is a candidate.
func (r *rule) isCandidate(streamID string) bool {
	i := slices.IndexFunc(r.names, func(n naming) bool { return n.streamID == streamID })
	return i >= 0 && r.candidate(i)
}

// timeline is a fresh timeline of the window, decoded.
type timeline struct {
	inboxRead
	t beacon.Origin
}

// clientSide joins the page's client records with the timelines of v that
// they take (looked up from JoinTTL before their window to Hold after it),
// refines them in place, and returns the rows this window writes and, per
// join key, the timeline each client joined. origins are the origin
// timelines the clients joined (for the edge's attribution), nil for the
// origin's join.
func clientSide[R any](pg *page, v *vantage[R], origins map[joinKey]*beacon.Origin) (rows []R, joined map[joinKey]*beacon.Origin, err error) {
	w := pg.w
	joined = map[joinKey]*beacon.Origin{}
	var ids []string
	for i := range pg.clients {
		ids = append(ids, pg.clients[i].OriginID)
	}
	ts, err := timelinesOf(w.ctx, w.sh.Conn, v.kind, uniq(ids), w.start.Add(-w.p.cfg.JoinTTL), w.end.Add(w.p.cfg.Hold))
	if err != nil {
		return nil, nil, err
	}
	for i := range pg.clients {
		c := &pg.clients[i]
		k := joinKey{c.Site, c.OriginID}
		if c.OriginID == "" {
			continue
		}
		// The first timeline the client's own window sees: from the TTL
		// before it to the hold after it (a span reads further).
		names := pg.naming[k]
		j := slices.IndexFunc(names, func(n naming) bool { return n.streamID == string(c.StreamID[:]) })
		if j < 0 {
			continue // not read: never a candidate
		}
		at := names[j].at
		tr, ok := firstIn(ts[k], at.Truncate(Window).Add(-w.p.cfg.JoinTTL), w.clientSees(at))
		if !ok {
			continue
		}
		n, ok := pg.rule(k).winner(tr.IngestedAt)
		if !ok || n.streamID != string(c.StreamID[:]) {
			continue
		}
		t, err := tr.Origin()
		if err != nil {
			return nil, nil, &errBlocked{w.start, "a " + v.kind + " timeline it cannot read: " + err.Error()}
		}
		row := v.join(v.base(tr.Site, tr.ReceivedAt.UTC(), &t), c, &t, origins[k], true)
		joined[k] = &t
		// The version 1 row is the later window's: this one's when the
		// timeline came in this window or before.
		if tr.IngestedAt.Before(w.end) {
			rows = append(rows, row)
			pg.ids = append(pg.ids, promotedID{v.joinKind, k.site, k.originID, w.start})
		}
	}
	return rows, joined, nil
}

// clientSees is the end of what the window of a client record that
// reached the inbox at at sees of its timelines: the hold after it.
func (w *windowRun) clientSees(at time.Time) time.Time {
	return at.Truncate(Window).Add(Window + w.p.cfg.Hold)
}

// clientSideJoins reports whether this run's client side joins client
// record n with a timeline that reached the inbox at t: n came in this run,
// and t in the hold after n's window. Otherwise the timeline's side does (n
// came in an earlier window, or in an earlier window of this span with t
// past its hold: joined late, in the timeline's table only).
func (w *windowRun) clientSideJoins(n naming, t time.Time) bool {
	return !n.at.Before(w.start) && t.Before(w.clientSees(n.at))
}

// firstIn is the first of rows (in inboxOrder) that reached the inbox in
// [from, to).
func firstIn(rows []inboxRead, from, to time.Time) (inboxRead, bool) {
	for _, r := range rows {
		if !r.IngestedAt.Before(from) && r.IngestedAt.Before(to) {
			return r, true
		}
	}
	return inboxRead{}, false
}

// timelineSide returns the version 0 rows of the page's timelines of v, and
// the version 1 rows of those whose client record its client side did not
// join (it came in an earlier window, or earlier in the span and the
// timeline past its hold).
func timelineSide[R any](pg *page, v *vantage[R], ts []timeline) (rows []R, joins int, err error) {
	w := pg.w
	// The earlier client records these timelines join, read at once.
	var want []naming
	for i := range ts {
		if ts[i].OriginID == "" {
			continue
		}
		if n, ok := pg.rule(joinKey{ts[i].Site, ts[i].OriginID}).winner(ts[i].IngestedAt); ok && !w.clientSideJoins(n, ts[i].IngestedAt) {
			want = append(want, n)
		}
	}
	clients, err := pg.earlierClients(want)
	if err != nil {
		return nil, 0, err
	}
	var seen map[string]*beacon.Origin
	if v.kind == store.KindEdge && len(want) > 0 {
		if seen, err = pg.originsSeen(want); err != nil {
			return nil, 0, err
		}
	}
	for i := range ts {
		tr := &ts[i]
		base := v.base(tr.Site, tr.ReceivedAt.UTC(), &tr.t)
		rows = append(rows, base)
		if tr.StreamID != "" {
			pg.ids = append(pg.ids, promotedID{v.kind, tr.Site, tr.StreamID, w.start})
		}
		if tr.OriginID == "" {
			continue
		}
		k := joinKey{tr.Site, tr.OriginID}
		n, ok := pg.rule(k).winner(tr.IngestedAt)
		if !ok || w.clientSideJoins(n, tr.IngestedAt) {
			continue // none yet, or this run's client side joined it
		}
		c, ok := clients[n.streamID]
		if !ok {
			continue // gone from the inbox (older than its TTL)
		}
		cStart := n.at.Truncate(Window)
		inStreams := tr.IngestedAt.Before(cStart.Add(Window + w.p.cfg.Hold))
		o := seen[n.streamID]
		if o != nil {
			// The client as its window stored it: refined by the origin
			// timeline it joined.
			a := join.Attribute(&c.Record, o)
			a.Causes.Apply(&c)
		}
		rows = append(rows, v.join(base, &c, &tr.t, o, inStreams))
		pg.ids = append(pg.ids, promotedID{v.joinKind, k.site, k.originID, w.start})
		joins++
	}
	return rows, joins, nil
}
