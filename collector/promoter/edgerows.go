package promoter

import (
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/join"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// EdgeRow is one itl_edge row (schema/009_edge.sql): version 0 holds the
// edge timeline only, version 1 adds the client side, the origin's when it
// reported, and the hops.
type EdgeRow struct {
	ReceivedAt time.Time `ch:"received_at"`
	Site       string    `ch:"site"`
	OriginID   string    `ch:"origin_id"`
	Version    uint8     `ch:"version"`

	StartedAt        time.Time `ch:"started_at"`
	Route            string    `ch:"route"`
	Format           string    `ch:"format"`
	Status           string    `ch:"status"`
	HTTPStatus       uint16    `ch:"http_status"`
	HeadersUs        *uint32   `ch:"headers_us"`
	TTFBUs           *uint32   `ch:"ttfb_us"`
	TTFTUs           *uint32   `ch:"ttft_us"`
	DurationUs       uint32    `ch:"duration_us"`
	Events           uint32    `ch:"events"`
	ContentEvents    uint32    `ch:"content_events"`
	Reads            uint32    `ch:"reads"`
	EventsPerRead    float32   `ch:"events_per_read"`
	MaxEventsPerRead uint32    `ch:"max_events_per_read"`
	Bytes            uint64    `ch:"bytes"`
	GapP50Us         uint32    `ch:"gap_p50_us"`
	GapP99Us         uint32    `ch:"gap_p99_us"`
	GapMaxUs         uint32    `ch:"gap_max_us"`
	Stalls           uint32    `ch:"stalls"`
	ITLIdx           []int32   `ch:"itl_idx"`
	ITLCnt           []uint64  `ch:"itl_cnt"`
	ITLZero          uint64    `ch:"itl_zero"`
	ITLSum           float64   `ch:"itl_sum"`
	ITLMin           float64   `ch:"itl_min"`
	ITLMax           float64   `ch:"itl_max"`
	ArriveUs         []uint32  `ch:"arrive_us"`
	ArrivalsDropped  uint32    `ch:"arrivals_dropped"`

	Colo           string  `ch:"colo"`
	EdgeCountry    string  `ch:"edge_country"`
	EdgeRegion     string  `ch:"edge_region"`
	RegionName     string  `ch:"region_name"`
	City           string  `ch:"city"`
	ASN            uint32  `ch:"asn"`
	ClientProto    string  `ch:"client_http_proto"`
	ClientTLS      string  `ch:"client_tls"`
	ClientTCPRTTMs *uint32 `ch:"client_tcp_rtt_ms"`

	StreamID             string    `ch:"stream_id"`
	ClientReceivedAt     time.Time `ch:"client_received_at"`
	Country              string    `ch:"country"`
	Region               string    `ch:"region"`
	Browser              string    `ch:"browser"`
	OS                   string    `ch:"os"`
	Device               string    `ch:"device"`
	Model                string    `ch:"model"`
	Release              string    `ch:"release"`
	ClientTTFTUs         *uint32   `ch:"client_ttft_us"`
	ClientGapP50Us       uint32    `ch:"client_gap_p50_us"`
	ClientGapP99Us       uint32    `ch:"client_gap_p99_us"`
	ClientEventsPerRead  float32   `ch:"client_events_per_read"`
	HasOrigin            bool      `ch:"has_origin"`
	OriginTTFTUs         *uint32   `ch:"origin_ttft_us"`
	OriginGapP50Us       uint32    `ch:"origin_gap_p50_us"`
	OriginGapP99Us       uint32    `ch:"origin_gap_p99_us"`
	AddedTTFTOriginEdge  *int64    `ch:"added_ttft_origin_edge_us"`
	AddedTTFTEdgeBrowser *int64    `ch:"added_ttft_edge_browser_us"`
	AddedP50OriginEdge   *int64    `ch:"added_p50_origin_edge_us"`
	AddedP50EdgeBrowser  *int64    `ch:"added_p50_edge_browser_us"`
	AddedP99OriginEdge   *int64    `ch:"added_p99_origin_edge_us"`
	AddedP99EdgeBrowser  *int64    `ch:"added_p99_edge_browser_us"`
	ClientStalls         uint32    `ch:"client_stalls"`
	StallsOriginEdge     uint32    `ch:"stalls_origin_edge"`
	StallsEdgeBrowser    uint32    `ch:"stalls_edge_browser"`
	StalledUsOriginEdge  uint64    `ch:"stalled_us_origin_edge"`
	StalledUsEdgeBrowser uint64    `ch:"stalled_us_edge_browser"`
	TTFTCause            string    `ch:"ttft_cause"`
	TTFTHop              string    `ch:"ttft_hop"`
	StallCause           []string  `ch:"stall_cause"`
	StallHop             []string  `ch:"stall_hop"`
	InStreams            bool      `ch:"in_streams"`
}

// edgeRow is the version 0 row of edge timeline e of site.
func edgeRow(site string, receivedAt time.Time, e *beacon.Origin) EdgeRow {
	o := originRow(site, receivedAt, e) // the same statistics, one hop later
	g := &e.Edge
	row := EdgeRow{
		ReceivedAt: o.ReceivedAt, Site: site, OriginID: e.ID,
		StartedAt: o.StartedAt, Route: o.Route, Format: o.Format, Status: o.Status, HTTPStatus: o.HTTPStatus,
		HeadersUs: optTime(g.HeadersUs), TTFBUs: o.TTFBUs, TTFTUs: o.TTFTUs, DurationUs: o.DurationUs,
		Events: o.Events, ContentEvents: o.ContentEvents, Reads: o.Flushes, EventsPerRead: o.EventsPerFlush,
		MaxEventsPerRead: o.MaxEventsPerFlush, Bytes: o.Bytes,
		GapP50Us: o.GapP50Us, GapP99Us: o.GapP99Us, GapMaxUs: o.GapMaxUs, Stalls: o.Stalls,
		ITLIdx: o.ITLIdx, ITLCnt: o.ITLCnt, ITLZero: o.ITLZero, ITLSum: o.ITLSum, ITLMin: o.ITLMin, ITLMax: o.ITLMax,
		ArriveUs: o.EmitUs, ArrivalsDropped: o.EmitsDropped,
		Colo: join.CleanCode(g.Colo, 8), EdgeCountry: join.CleanCode(g.Country, 2), RegionName: g.Region, City: g.City,
		ASN: g.ASN, ClientProto: g.HTTPProto, ClientTLS: g.TLSVersion, ClientTCPRTTMs: optTime(g.ClientTCPRTTMs),
		StreamID: o.StreamID, ClientReceivedAt: o.ClientReceivedAt,
		TTFTCause: meter.Name(meter.CauseNames[:], meter.CauseNone), StallCause: []string{}, StallHop: []string{},
	}
	if rc := join.CleanCode(g.RegionCode, 6); rc != "" && row.EdgeCountry != "" {
		row.EdgeRegion = row.EdgeCountry + "-" + trimCountry(rc, row.EdgeCountry)
	}
	return row
}

func trimCountry(code, country string) string {
	if len(code) > 3 && code[:3] == country+"-" {
		return code[3:]
	}
	return code
}

// edgeJoinedRow is the version 1 row: base plus client stream s (as stored
// in itl_streams when inStreams) and the attribution r.
func edgeJoinedRow(base EdgeRow, s *collector.Stream, r *join.EdgeResult, inStreams bool) EdgeRow {
	row := base
	row.Version = 1
	row.StreamID = string(s.StreamID[:])
	row.ClientReceivedAt = s.ReceivedAt.UTC()
	row.Country, row.Region, row.Browser, row.OS, row.Device = s.Country, s.Region, s.Browser, s.OS, s.Device
	row.Model, row.Release = s.Model, s.Release
	row.ClientTTFTUs = optTime(s.TTFTUs)
	row.ClientGapP50Us, row.ClientGapP99Us, row.ClientEventsPerRead = s.GapP50Us, s.GapP99Us, s.EventsPerRead
	row.HasOrigin = r.HasOrigin
	row.OriginTTFTUs = optTime(r.OriginTTFTUs)
	row.OriginGapP50Us, row.OriginGapP99Us = r.OriginGapP50Us, r.OriginGapP99Us
	if r.HasOriginEdgeTTFT {
		row.AddedTTFTOriginEdge = ptr(r.OriginEdgeTTFTUs)
	}
	if r.HasEdgeBrowserTTFT {
		row.AddedTTFTEdgeBrowser = ptr(r.EdgeBrowserTTFTUs)
	}
	if r.HasOriginEdgeITL {
		row.AddedP50OriginEdge, row.AddedP99OriginEdge = ptr(r.OriginEdgeP50Us), ptr(r.OriginEdgeP99Us)
	}
	if r.HasEdgeBrowserITL {
		row.AddedP50EdgeBrowser, row.AddedP99EdgeBrowser = ptr(r.EdgeBrowserP50Us), ptr(r.EdgeBrowserP99Us)
	}
	row.ClientStalls = s.Stalls
	row.StallsOriginEdge, row.StallsEdgeBrowser = r.Hops.OriginEdgeStalls, r.Hops.EdgeBrowserStalls
	row.StalledUsOriginEdge, row.StalledUsEdgeBrowser = r.Hops.OriginEdgeStalledUs, r.Hops.EdgeBrowserStalledUs
	row.TTFTCause = meter.Name(meter.CauseNames[:], r.TTFTCause)
	row.TTFTHop = r.Hops.TTFT
	row.StallCause = make([]string, len(r.StallCauses))
	row.StallHop = make([]string, len(r.StallCauses))
	for i, c := range r.StallCauses {
		row.StallCause[i] = meter.Name(meter.CauseNames[:], c)
		if i < len(r.Hops.Stall) {
			row.StallHop[i] = r.Hops.Stall[i]
		}
	}
	row.InStreams = inStreams
	return row
}
