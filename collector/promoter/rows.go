package promoter

import (
	"strings"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/join"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/hist"
	"github.com/itlmon/itlmon/wasm/meter"
)

// Row is one itl_origin row (schema/005_origin.sql, 006_names.sql): version
// 0 holds the origin timeline only, version 1 adds the client side and the
// attribution. Format, status and causes are their plain names
// (meter.FormatNames, StatusNames, CauseNames).
type Row struct {
	ReceivedAt time.Time `ch:"received_at"`
	Site       string    `ch:"site"`
	OriginID   string    `ch:"origin_id"`
	Version    uint8     `ch:"version"`

	StartedAt         time.Time `ch:"started_at"`
	Route             string    `ch:"route"`
	Format            string    `ch:"format"`
	Status            string    `ch:"status"`
	HTTPStatus        uint16    `ch:"http_status"`
	TTFBUs            *uint32   `ch:"ttfb_us"`
	TTFTUs            *uint32   `ch:"ttft_us"`
	DurationUs        uint32    `ch:"duration_us"`
	Events            uint32    `ch:"events"`
	ContentEvents     uint32    `ch:"content_events"`
	Flushes           uint32    `ch:"flushes"`
	EventsPerFlush    float32   `ch:"events_per_flush"`
	MaxEventsPerFlush uint32    `ch:"max_events_per_flush"`
	Bytes             uint64    `ch:"bytes"`
	GapP50Us          uint32    `ch:"gap_p50_us"`
	GapP99Us          uint32    `ch:"gap_p99_us"`
	GapMaxUs          uint32    `ch:"gap_max_us"`
	Stalls            uint32    `ch:"stalls"`
	ITLIdx            []int32   `ch:"itl_idx"`
	ITLCnt            []uint64  `ch:"itl_cnt"`
	ITLZero           uint64    `ch:"itl_zero"`
	ITLSum            float64   `ch:"itl_sum"`
	ITLMin            float64   `ch:"itl_min"`
	ITLMax            float64   `ch:"itl_max"`
	EmitUs            []uint32  `ch:"emit_us"`
	EmitsDropped      uint32    `ch:"emits_dropped"`

	StreamID               string    `ch:"stream_id"`
	ClientReceivedAt       time.Time `ch:"client_received_at"`
	Country                string    `ch:"country"`
	Region                 string    `ch:"region"`
	Browser                string    `ch:"browser"`
	OS                     string    `ch:"os"`
	Device                 string    `ch:"device"`
	Model                  string    `ch:"model"`
	Release                string    `ch:"release"`
	Colo                   string    `ch:"colo"`
	URLOrigin              string    `ch:"url_origin"`
	HTTPProto              string    `ch:"http_proto"`
	ClientContentEvents    uint32    `ch:"client_content_events"`
	ClientTTFTUs           *uint32   `ch:"client_ttft_us"`
	ClientGapP50Us         uint32    `ch:"client_gap_p50_us"`
	ClientGapP99Us         uint32    `ch:"client_gap_p99_us"`
	ClientEventsPerRead    float32   `ch:"client_events_per_read"`
	ClientMaxEventsPerRead uint32    `ch:"client_max_events_per_read"`
	AddedTTFTUs            *int64    `ch:"added_ttft_us"`
	AddedP50Us             *int64    `ch:"added_p50_us"`
	AddedP99Us             *int64    `ch:"added_p99_us"`
	ClientStalls           uint32    `ch:"client_stalls"`
	ClientStalledUs        uint64    `ch:"client_stalled_us"`
	StallsUnknown          uint32    `ch:"stalls_unknown"`
	StallsNetwork          uint32    `ch:"stalls_network"`
	StallsPage             uint32    `ch:"stalls_page"`
	StallsOrigin           uint32    `ch:"stalls_origin"`
	StalledUsUnknown       uint64    `ch:"stalled_us_unknown"`
	StalledUsNetwork       uint64    `ch:"stalled_us_network"`
	StalledUsPage          uint64    `ch:"stalled_us_page"`
	StalledUsOrigin        uint64    `ch:"stalled_us_origin"`
	TTFTCause              string    `ch:"ttft_cause"`
	StallCause             []string  `ch:"stall_cause"`
	InStreams              bool      `ch:"in_streams"`
}

// rowColumns is the explicit column list of the insert.
var rowColumns = strings.Join([]string{
	"received_at", "site", "origin_id", "version",
	"started_at", "route", "format", "status", "http_status", "ttfb_us", "ttft_us", "duration_us",
	"events", "content_events", "flushes", "events_per_flush", "max_events_per_flush", "bytes",
	"gap_p50_us", "gap_p99_us", "gap_max_us", "stalls",
	"itl_idx", "itl_cnt", "itl_zero", "itl_sum", "itl_min", "itl_max", "emit_us", "emits_dropped",
	"stream_id", "client_received_at", "country", "region", "browser", "os", "device", "model", "release",
	"colo", "url_origin", "http_proto", "client_content_events",
	"client_ttft_us", "client_gap_p50_us", "client_gap_p99_us", "client_events_per_read", "client_max_events_per_read",
	"added_ttft_us", "added_p50_us", "added_p99_us", "client_stalls", "client_stalled_us",
	"stalls_unknown", "stalls_network", "stalls_page", "stalls_origin",
	"stalled_us_unknown", "stalled_us_network", "stalled_us_page", "stalled_us_origin",
	"ttft_cause", "stall_cause", "in_streams",
}, ", ")

// originRow is the version 0 row of an origin timeline.
func originRow(site string, receivedAt time.Time, o *beacon.Origin) Row {
	var zero beacon.Record
	zero.TTFTUs = beacon.NoTime
	r := join.Attribute(&zero, o) // the origin side only
	row := Row{
		ReceivedAt:        receivedAt,
		Site:              site,
		OriginID:          o.ID,
		StartedAt:         time.UnixMilli(o.StartUnixMs).UTC(),
		Route:             o.Route,
		Format:            meter.Name(meter.FormatNames[:], o.Format),
		Status:            meter.Name(meter.StatusNames[:], o.Status),
		HTTPStatus:        o.HTTPStatus,
		TTFBUs:            optTime(o.TTFBUs),
		TTFTUs:            optTime(r.OriginTTFTUs),
		DurationUs:        o.DurationUs,
		Events:            o.Events,
		ContentEvents:     o.ContentEvents,
		Flushes:           o.Flushes,
		EventsPerFlush:    r.OriginEventsPerFlush,
		MaxEventsPerFlush: o.MaxEventsPerFlush,
		Bytes:             o.Bytes,
		GapP50Us:          r.OriginGapP50Us,
		GapP99Us:          r.OriginGapP99Us,
		GapMaxUs:          r.OriginGapMaxUs,
		Stalls:            r.OriginStalls,
		EmitUs:            o.EmitUs,
		EmitsDropped:      o.EmitsDropped,
		StreamID:          string(make([]byte, 16)),
		ClientReceivedAt:  time.Unix(0, 0).UTC(),
		TTFTCause:         meter.Name(meter.CauseNames[:], meter.CauseNone),
		StallCause:        []string{},
	}
	if row.EmitUs == nil {
		row.EmitUs = []uint32{}
	}
	row.ITLIdx, row.ITLCnt, row.ITLZero, row.ITLSum, row.ITLMin, row.ITLMax = sparse(&r.OriginITL)
	return row
}

// joinedRow is the version 1 row: the origin row plus the client side and
// the attribution r of client stream s.
func joinedRow(base Row, s *collector.Stream, r *join.Result, inStreams bool) Row {
	row := base
	row.Version = 1
	row.StreamID = string(s.StreamID[:])
	row.ClientReceivedAt = s.ReceivedAt.UTC()
	row.Country, row.Region, row.Browser, row.OS, row.Device = s.Country, s.Region, s.Browser, s.OS, s.Device
	row.Model, row.Release = s.Model, s.Release
	row.Colo, row.URLOrigin, row.HTTPProto, row.ClientContentEvents = s.Colo, s.URLOrigin, s.HTTPProto, s.ContentEvents
	row.ClientTTFTUs = optTime(s.TTFTUs)
	row.ClientGapP50Us, row.ClientGapP99Us = s.GapP50Us, s.GapP99Us
	row.ClientEventsPerRead, row.ClientMaxEventsPerRead = s.EventsPerRead, s.MaxEventsPerRead
	if r.HasAddedTTFT {
		row.AddedTTFTUs = ptr(r.AddedTTFTUs)
	}
	if r.HasAddedITL {
		row.AddedP50Us, row.AddedP99Us = ptr(r.AddedP50Us), ptr(r.AddedP99Us)
	}
	row.ClientStalls, row.ClientStalledUs = s.Stalls, s.StalledUs
	row.StallsUnknown = r.StallsByCause[meter.CauseUnknown]
	row.StallsNetwork = r.StallsByCause[meter.CauseNetwork]
	row.StallsPage = r.StallsByCause[meter.CausePage]
	row.StallsOrigin = r.StallsByCause[meter.CauseOrigin]
	row.StalledUsUnknown = r.StalledByCause[meter.CauseUnknown]
	row.StalledUsNetwork = r.StalledByCause[meter.CauseNetwork]
	row.StalledUsPage = r.StalledByCause[meter.CausePage]
	row.StalledUsOrigin = r.StalledByCause[meter.CauseOrigin]
	row.TTFTCause = meter.Name(meter.CauseNames[:], r.TTFTCause)
	row.StallCause = make([]string, len(r.StallCauses))
	for i, c := range r.StallCauses {
		row.StallCause[i] = meter.Name(meter.CauseNames[:], c)
	}
	row.InStreams = inStreams
	return row
}

func optTime(us uint32) *uint32 {
	if us == beacon.NoTime {
		return nil
	}
	return &us
}

func ptr[T any](v T) *T { return &v }

// sparse returns h's columns; empty slices, not nil, for ClickHouse arrays.
func sparse(h *hist.Histogram) (idx []int32, cnt []uint64, zero uint64, sum, min, max float64) {
	idx, cnt = h.Sparse()
	if idx == nil {
		idx, cnt = []int32{}, []uint64{}
	}
	if h.Count() > 0 {
		min, max = h.Min(), h.Max()
	}
	return idx, cnt, h.ZeroCount(), h.Sum(), min, max
}
