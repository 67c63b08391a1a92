package join

import (
	"context"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// kindEdgeJoin marks an edge join in itl_promoted_ids (stream_id: the id).
const kindEdgeJoin = "edgejoin"

// edgeJoin is what promoting a window does with edge timelines: the
// itl_edge rows and the itl_promoted_ids rows to insert.
type edgeJoin struct {
	rows   []EdgeRow
	ids    []promotedID
	edges  int // edge timelines promoted
	joined int // edge joins made (version 1 rows)
}

// joinEdges is the edge's part of promoting window [start, start+Window),
// by the rules of the origin's join: an edge timeline joins one client
// record; one that reached the inbox up to the hold after its client's
// window (or earlier) refines the client's itl_streams row, which is why it
// runs after the origin's refinement and before the client rows are
// inserted; the version 1 itl_edge row is written by the later of the two
// records' windows, once (itl_promoted_ids kind "edgejoin"). clients are
// this window's client records, refined in place; edges this window's fresh
// edge timelines; originOf the origin timelines the window joined with
// clients. Everything read is sealed, so the result is the same on a rerun.
func (p *Promoter) joinEdges(ctx context.Context, conn driver.Conn, start time.Time,
	clients []collector.Stream, edges []inboxRead, originOf map[joinKey]inboxRead) (edgeJoin, error) {
	var out edgeJoin
	end := start.Add(Window)
	ttl, hold := p.cfg.JoinTTL, p.cfg.Hold

	// Edges of this window's clients: within the TTL before, up to the
	// hold after.
	var want []string
	for i := range clients {
		if clients[i].OriginID != "" {
			want = append(want, clients[i].OriginID)
		}
	}
	edgeOf, err := firstByJoinKey(ctx, conn, store.KindEdge, want, start.Add(-ttl), end.Add(hold))
	if err != nil {
		return out, err
	}
	var earlier []string
	for _, r := range edgeOf {
		if r.IngestedAt.Before(start) {
			earlier = append(earlier, r.OriginID)
		}
	}
	joinedBefore, err := promotedBefore(ctx, conn, earlier, start.Add(-p.cfg.DedupWindow), start)
	if err != nil {
		return out, err
	}
	joinedNow := map[joinKey]bool{}
	join := func(k joinKey) {
		joinedNow[k] = true
		out.ids = append(out.ids, promotedID{kindEdgeJoin, k.site, k.originID, start})
		out.joined++
	}

	for i := range clients {
		c := &clients[i]
		k := joinKey{c.Site, c.OriginID}
		er, ok := edgeOf[k]
		if c.OriginID == "" || !ok {
			continue
		}
		e, err := er.Origin()
		if err != nil {
			p.log.Error().Err(err).Str("site", er.Site).Msg("inbox row unreadable; not joined")
			continue
		}
		var o *beacon.Origin
		if or, ok := originOf[k]; ok {
			if d, err := or.Origin(); err == nil {
				o = &d
			}
		}
		r := AttributeEdge(&c.Record, &e, o)
		applyEdge(c, &e, &r)
		if er.IngestedAt.Before(end) && !joinedNow[k] && !joinedBefore[recKey{kindEdgeJoin, k.site, k.originID}] {
			out.rows = append(out.rows, edgeJoinedRow(edgeRow(er.Site, er.ReceivedAt.UTC(), &e), c, &r, true))
			join(k)
		}
	}

	// This window's edge timelines, and their joins with clients promoted
	// earlier (and those clients' origins, as their windows saw them).
	want = want[:0]
	for _, r := range edges {
		if r.OriginID != "" {
			want = append(want, r.OriginID)
		}
	}
	clientOf, err := firstByJoinKey(ctx, conn, store.KindClient, want, start.Add(-ttl), start)
	if err != nil {
		return out, err
	}
	var originRows []inboxRead
	if len(clientOf) > 0 {
		// A client window w saw origins in [w-TTL, w+Window+hold).
		if originRows, err = readInbox(ctx, conn, "kind = 'origin' AND ingested_at >= fromUnixTimestamp64Micro(?) AND ingested_at < fromUnixTimestamp64Micro(?) AND origin_id IN (SELECT id FROM want_ids)",
			want, micros(start.Add(-2*ttl-Window)), micros(start.Add(hold))); err != nil {
			return out, err
		}
	}
	for _, er := range edges {
		e, err := er.Origin()
		if err != nil {
			p.log.Error().Err(err).Str("site", er.Site).Msg("inbox row unreadable; skipped")
			continue
		}
		out.edges++
		if er.StreamID != "" {
			out.ids = append(out.ids, promotedID{store.KindEdge, er.Site, er.StreamID, start})
		}
		base := edgeRow(er.Site, er.ReceivedAt.UTC(), &e)
		out.rows = append(out.rows, base)
		k := joinKey{er.Site, er.OriginID}
		cr, ok := clientOf[k]
		if er.OriginID == "" || joinedNow[k] || !ok {
			continue // none yet: a later client's window joins it
		}
		c, err := cr.Client()
		if err != nil {
			p.log.Error().Err(err).Str("site", cr.Site).Msg("inbox row unreadable; not joined")
			continue
		}
		cStart := cr.IngestedAt.Truncate(Window)
		cEnd := cStart.Add(Window)
		var o *beacon.Origin
		for _, or := range originRows { // ordered: the first copy the client's window saw
			if or.Site == k.site && or.OriginID == k.originID && !or.IngestedAt.Before(cStart.Add(-ttl)) && or.IngestedAt.Before(cEnd.Add(hold)) {
				if d, err := or.Origin(); err == nil {
					o = &d
				}
				break
			}
		}
		if o != nil {
			ar := Attribute(&c.Record, o)
			refine(&c, &ar)
		}
		r := AttributeEdge(&c.Record, &e, o)
		applyEdge(&c, &e, &r)
		out.rows = append(out.rows, edgeJoinedRow(base, &c, &r, er.IngestedAt.Before(cEnd.Add(hold))))
		join(k)
	}
	return out, nil
}

func has[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}
