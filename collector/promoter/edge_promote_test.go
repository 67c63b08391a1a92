package promoter_test

import (
	"context"
	"crypto/rand"
	"slices"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/promoter"
	"github.com/itlmon/itlmon/collector/query"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// smoothOrigin emits 30 content events 20 ms apart from 100 ms.
func smoothOrigin(id string) beacon.Origin {
	o := pausedOrigin(id)
	o.EmitUs, o.ITL = nil, o.ITL.Clone()
	o.ITL.Reset()
	for i := range 30 {
		o.EmitUs = append(o.EmitUs, uint32(100*ms+i*20*ms))
		if i > 0 {
			o.ITL.Record(20 * ms)
		}
	}
	o.TTFTUs, o.DurationUs = o.EmitUs[0], 800*ms
	return o
}

// heldFrom returns t with the events from at on held until t[at]+delay:
// those due by then arrive together, in one read.
func heldFrom(t []uint32, at int, delay uint32) []uint32 {
	out := slices.Clone(t)
	for i := at; i < len(out); i++ {
		out[i] = max(out[i], t[at]+delay)
	}
	return out
}

func shifted(t []uint32, d uint32) []uint32 {
	out := make([]uint32, len(t))
	for i, v := range t {
		out[i] = v + d
	}
	return out
}

// edgeView is the edge's timeline of o's stream with content arrivals
// arrive, in Frankfurt, for a client in Berlin.
func edgeView(o beacon.Origin, arrive []uint32) beacon.Origin {
	e := o
	e.Vantage = beacon.VantageEdge
	e.Edge = beacon.Edge{Colo: "FRA", Country: "DE", Region: "Berlin", RegionCode: "BE", City: "Berlin", ASN: 3320,
		HTTPProto: "HTTP/2", TLSVersion: "TLSv1.3", ClientTCPRTTMs: 12, HeadersUs: 80 * ms}
	e.EmitUs, e.TTFTUs = arrive, arrive[0]
	e.ITL = o.ITL.Clone()
	e.ITL.Reset()
	e.Flushes, e.MaxEventsPerFlush = 0, 0
	for i, a := range arrive {
		if i > 0 {
			e.ITL.Record(float64(a - arrive[i-1]))
		}
		if i == 0 || a != arrive[i-1] {
			e.Flushes++
		}
		n := uint32(1)
		for j := i + 1; j < len(arrive) && arrive[j] == a; j++ {
			n++
		}
		e.MaxEventsPerFlush = max(e.MaxEventsPerFlush, n)
	}
	return e
}

// browserView is the browser's record of o's stream with content arrivals
// arrive (one read per distinct time), its stalls of cause `cause`, located
// by a GeoIP guess in the Netherlands.
func browserView(o beacon.Origin, arrive []uint32, cause meter.Cause) collector.Stream {
	var r beacon.Record
	rand.Read(r.StreamID[:])
	r.OriginID, r.StartUnixMs = o.ID, o.StartUnixMs
	r.Format, r.Status, r.HTTPStatus = 1, 1, 200
	r.TTFBUs, r.TTFCUs, r.TTFTUs, r.DurationUs = arrive[0]-10*ms, arrive[0], arrive[0], arrive[len(arrive)-1]+10*ms
	r.Events, r.ContentEvents, r.Tokens = uint32(len(arrive)), uint32(len(arrive)), uint32(len(arrive))
	read := uint32(0)
	var gaps []uint32
	for i, a := range arrive {
		if i > 0 && a != arrive[i-1] {
			read++
		}
		r.Timeline = append(r.Timeline, beacon.Stamp{AtUs: a, Read: read, Content: true})
		if i == 0 {
			continue
		}
		g := a - arrive[i-1]
		gaps = append(gaps, g)
		r.ITL.Record(float64(g))
		if g > 200*ms {
			n := uint32(0)
			for j := i; j < len(arrive) && arrive[j] == a; j++ {
				n++
			}
			r.StallList = append(r.StallList, beacon.Stall{StartUs: arrive[i-1], EndUs: a, Cause: uint8(cause), NextReadEvents: n})
			r.Stalls++
			r.StalledUs += uint64(g)
			r.StallsByCause[cause]++
			r.StalledByCause[cause] += uint64(g)
		}
	}
	r.Reads = read + 1
	slices.Sort(gaps)
	r.GapP50Us, r.GapP99Us, r.GapMaxUs = gaps[len(gaps)/2], gaps[len(gaps)-1], gaps[len(gaps)-1]
	r.EventsPerRead = float32(len(arrive)) / float32(r.Reads)
	r.TTFTCause = uint8(meter.CauseUnknown)
	return collector.Stream{Record: r, Site: "chat", ReceivedAt: time.Now(), Country: "NL", Region: "NL-NH",
		Browser: "Chrome", OS: "Linux", Device: "desktop", Release: "r1"}
}

// A stall held between the origin and the edge (the edge got the events
// late and coalesced): the three records, origin and edge first, make the
// browser's row say network on origin→edge, in Berlin via Frankfurt.
func TestEdgeStallBeforeEdge(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second)
	o := smoothOrigin("edge-1")
	atEdge := heldFrom(shifted(o.EmitUs, 5*ms), 15, 600*ms)
	f.addOrigin(t, "chat", o)
	f.addOrigin(t, "chat", edgeView(o, atEdge))
	f.submit(t, browserView(o, shifted(atEdge, 40*ms), meter.CauseNetwork))

	eventually(t, f.db, "SELECT toString((colo, country, region, stall_cause, stall_hop, stalls_origin_edge, stalls_edge_browser, stalls_network)) FROM itl_streams WHERE origin_id = 'edge-1'",
		"('FRA','DE','DE-BE',['network'],['origin_edge'],1,0,1)")
	eventually(t, f.db, `SELECT toString((version, has_origin, in_streams, added_ttft_origin_edge_us, added_ttft_edge_browser_us,
			stalls_origin_edge, stall_hop, colo, edge_region, client_tcp_rtt_ms, reads, max_events_per_read, stalls))
		FROM itl_edge FINAL WHERE origin_id = 'edge-1'`,
		"(1,true,true,5000,40000,1,['origin_edge'],'FRA','DE-BE',12,16,15,1)")
	eventually(t, f.db, "SELECT toString((sum(streams), sum(stalls_origin_edge), sum(stalls_edge_browser))) FROM itl_rollup_1m WHERE site = 'chat' AND colo = 'FRA'",
		"(1,1,0)")
	waitStats(t, f.p, "1 edge, joined", func(st promoter.Stats) bool { return st.Edges == 1 && st.EdgeJoined == 1 && st.Joined == 1 })
}

// A stall held between the edge and the browser (the edge got the events on
// time), the client's record first and no origin timeline: the client's
// `unknown` becomes network on edge→browser; the edge's timeline came
// within the hold, so itl_streams has it.
func TestEdgeStallAfterEdge(t *testing.T) {
	f := newFixture(t, 2*time.Second)
	o := smoothOrigin("edge-2")
	atEdge := shifted(o.EmitUs, 5*ms)
	go func() {
		// sleep: the later timeline arrives 300 ms after the earlier one, as
		// on the wire, while the real promoters hold the earlier one's window
		// (its join hold); waiting for the promoter to have read the earlier
		// record instead let it be promoted before the join.
		time.Sleep(300 * time.Millisecond)
		f.addOrigin(t, "chat", edgeView(o, atEdge))
	}()
	f.submit(t, browserView(o, heldFrom(shifted(atEdge, 40*ms), 15, 600*ms), meter.CauseUnknown))

	eventually(t, f.db, "SELECT toString((colo, stall_cause, stall_hop, stalls_unknown, stalls_network, stalls_edge_browser)) FROM itl_streams WHERE origin_id = 'edge-2'",
		"('FRA',['network'],['edge_browser'],0,1,1)")
	eventually(t, f.db, "SELECT toString((version, has_origin, in_streams, added_ttft_origin_edge_us, stalls_edge_browser, stall_cause, stall_hop)) FROM itl_edge FINAL WHERE origin_id = 'edge-2'",
		"(1,false,true,NULL,1,['network'],['edge_browser'])")
	// The rollup and the read API by colo.
	eventually(t, f.db, "SELECT toString((sum(streams), sum(stalls_edge_browser))) FROM itl_rollup_1m WHERE site = 'chat' AND colo = 'FRA'", "(1,1)")
	flt := query.Filter{Site: "chat", Since: time.Now().Add(-time.Hour), Where: map[string]string{"colo": "FRA"}}
	groups, err := query.Breakdown(context.Background(), f.db.Conn(), flt, "colo")
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].Key != "FRA" || groups[0].Report.Streams != 1 {
		t.Fatalf("breakdown by colo = %+v, want FRA with 1 stream", groups)
	}
	causes, err := query.CauseBreakdown(context.Background(), f.db.Conn(), flt, "colo")
	if err != nil {
		t.Fatal(err)
	}
	if len(causes) != 1 || causes[0].NetworkByHop["edge_browser"] != (query.HopCounts{Stalls: 1, StalledMs: 620}) || causes[0].NetworkByHop["origin_edge"] != (query.HopCounts{}) {
		t.Fatalf("causes by colo = %+v, want one network stall of 620 ms on edge_browser", causes)
	}
}

// The edge's timeline after the hold: itl_streams keeps the client's view
// (no colo, the GeoIP region), the late join is in itl_edge; copies of the
// edge timeline are dropped.
func TestLateEdgeAndCopies(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 100*time.Millisecond)
	o := smoothOrigin("edge-3")
	atEdge := shifted(o.EmitUs, 5*ms)
	f.submit(t, browserView(o, heldFrom(shifted(atEdge, 40*ms), 15, 600*ms), meter.CauseUnknown))
	eventually(t, f.db, "SELECT toString((colo, region, stall_cause, stall_hop)) FROM itl_streams WHERE origin_id = 'edge-3'", "('','NL-NH',['unknown'],[''])")
	e := edgeView(o, atEdge)
	f.addOrigin(t, "chat", e)
	f.addOrigin(t, "chat", e) // a resend (lost ack)
	eventually(t, f.db, "SELECT toString((version, in_streams, region, stall_cause, stall_hop)) FROM itl_edge FINAL WHERE origin_id = 'edge-3'",
		"(1,false,'DE-BE',['network'],['edge_browser'])")
	waitStats(t, f.p, "1 edge, 1 copy", func(st promoter.Stats) bool { return st.Edges == 1 && st.EdgeJoined == 1 && st.Copies == 1 })
	f.addOrigin(t, "chat", e) // a later resend: a copy of a promoted timeline
	waitStats(t, f.p, "1 edge, 2 copies", func(st promoter.Stats) bool { return st.Copies == 2 })
	eventually(t, f.db, "SELECT sum(copies) FROM itl_promoted", uint64(2))
	if st := f.p.Stats(); st.Edges != 1 || st.EdgeJoined != 1 {
		t.Fatalf("stats %+v after resends, want 1 edge, 1 edge join", st)
	}
	eventually(t, f.db, "SELECT count() FROM itl_streams WHERE origin_id = 'edge-3'", uint64(1))
}

// The edge's timeline first, then the browser's record, the origin's last
// (within the hold): one window sees all three.
func TestEdgeFirstOriginLast(t *testing.T) {
	f := newFixture(t, 2*time.Second)
	o := smoothOrigin("edge-4")
	atEdge := heldFrom(shifted(o.EmitUs, 5*ms), 15, 600*ms)
	f.addOrigin(t, "chat", edgeView(o, atEdge))
	f.submit(t, browserView(o, shifted(atEdge, 40*ms), meter.CauseUnknown))
	// sleep: the origin's timeline comes last, 300 ms later, within the
	// real promoters' join hold (see TestEdgeStallAfterEdge).
	time.Sleep(300 * time.Millisecond)
	f.addOrigin(t, "chat", o)

	// The origin shows no gap: unknown → network; the edge got the events
	// late and coalesced: origin→edge.
	eventually(t, f.db, "SELECT toString((colo, stall_cause, stall_hop, stalls_origin_edge, stalls_unknown)) FROM itl_streams WHERE origin_id = 'edge-4'",
		"('FRA',['network'],['origin_edge'],1,0)")
	eventually(t, f.db, "SELECT toString((version, has_origin, in_streams, added_ttft_origin_edge_us, added_ttft_edge_browser_us, stall_hop)) FROM itl_edge FINAL WHERE origin_id = 'edge-4'",
		"(1,true,true,5000,40000,['origin_edge'])")
	eventually(t, f.db, "SELECT toString((version, in_streams, stall_cause)) FROM itl_origin FINAL WHERE origin_id = 'edge-4'", "(1,true,['network'])")
	waitStats(t, f.p, "1 edge join, 1 origin join", func(st promoter.Stats) bool { return st.EdgeJoined == 1 && st.Joined == 1 })
}
