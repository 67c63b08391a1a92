package store

import (
	"fmt"
	"slices"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/hist"
	"github.com/itlmon/itlmon/wasm/meter"
)

// Cause indexes of beacon.Record.StallsByCause (meter.Cause values).
const (
	causeUnknown = 1
	causeNetwork = 2
	causePage    = 3
	causeOrigin  = 4
)

// streamRow is one itl_streams row. The ch tags are the column names for
// PrepareBatch/AppendStruct and Select. Spool frames of versions 1 and 2
// (frame.go) are gob encodings of these rows, and gob matches fields by
// name: a field renamed here reads as empty from them, which the golden
// frames catch (TestSpoolGoldenReleases). Format, status, end and causes
// are stored as their plain names (meter.FormatNames, ...;
// schema/006_names.sql); their Go fields are named apart from the code
// fields of spool version 1 frames (decodeBatch).
type streamRow struct {
	ReceivedAt time.Time `ch:"received_at"`
	StartedAt  time.Time `ch:"started_at"`
	Site       string    `ch:"site"`
	StreamID   string    `ch:"stream_id"`
	OriginID   string    `ch:"origin_id"`

	PageOrigin  string `ch:"page_origin"`
	PagePath    string `ch:"page_path"`
	URLOrigin   string `ch:"url_origin"`
	URLPath     string `ch:"url_path"`
	Model       string `ch:"model"`
	HTTPProto   string `ch:"http_proto"`
	ContentType string `ch:"content_type"`

	FormatName string  `ch:"format"`
	StatusName string  `ch:"status"`
	HTTPStatus uint16  `ch:"http_status"`
	EndReason  string  `ch:"end_reason"`
	HeadersUs  *uint32 `ch:"headers_us"`

	TTFBUs     *uint32 `ch:"ttfb_us"`
	TTFCUs     *uint32 `ch:"ttfc_us"`
	TTFTUs     *uint32 `ch:"ttft_us"`
	TTFTIdx    int32   `ch:"ttft_idx"`
	DurationUs *uint32 `ch:"duration_us"`

	Events         uint32 `ch:"events"`
	ContentEvents  uint32 `ch:"content_events"`
	Tokens         uint32 `ch:"tokens"`
	TokensReported bool   `ch:"tokens_reported"`
	Reads          uint32 `ch:"reads"`
	Bytes          uint64 `ch:"bytes"`

	GapP50Us     uint32  `ch:"gap_p50_us"`
	GapP95Us     uint32  `ch:"gap_p95_us"`
	GapP99Us     uint32  `ch:"gap_p99_us"`
	GapMaxUs     uint32  `ch:"gap_max_us"`
	TPOTUs       uint32  `ch:"tpot_us"`
	TokensPerSec float32 `ch:"tokens_per_sec"`
	TPOTIdx      int32   `ch:"tpot_idx"`
	Stalls       uint32  `ch:"stalls"`
	StalledUs    uint64  `ch:"stalled_us"`
	Jank         float32 `ch:"jank"`
	Smooth       bool    `ch:"smooth"`

	EventsPerRead    float32 `ch:"events_per_read"`
	MaxEventsPerRead uint32  `ch:"max_events_per_read"`
	BytesPerRead     float32 `ch:"bytes_per_read"`
	SubFloorShare    float32 `ch:"sub_floor_share"`

	StallsUnknown    uint32 `ch:"stalls_unknown"`
	StallsNetwork    uint32 `ch:"stalls_network"`
	StallsPage       uint32 `ch:"stalls_page"`
	StallsOrigin     uint32 `ch:"stalls_origin"`
	StalledUsUnknown uint64 `ch:"stalled_us_unknown"`
	StalledUsNetwork uint64 `ch:"stalled_us_network"`
	StalledUsPage    uint64 `ch:"stalled_us_page"`
	StalledUsOrigin  uint64 `ch:"stalled_us_origin"`
	TTFTCauseName    string `ch:"ttft_cause"`

	// The edge's (schema/009_edge.sql).
	Colo                 string   `ch:"colo"`
	TTFTHop              string   `ch:"ttft_hop"`
	StallHops            []string `ch:"stall_hop"`
	StallsOriginEdge     uint32   `ch:"stalls_origin_edge"`
	StallsEdgeBrowser    uint32   `ch:"stalls_edge_browser"`
	StalledUsOriginEdge  uint64   `ch:"stalled_us_origin_edge"`
	StalledUsEdgeBrowser uint64   `ch:"stalled_us_edge_browser"`

	ITLIdx     []int32  `ch:"itl_idx"`
	ITLCnt     []uint64 `ch:"itl_cnt"`
	ITLZero    uint64   `ch:"itl_zero"`
	ITLSum     float64  `ch:"itl_sum"`
	ITLMin     float64  `ch:"itl_min"`
	ITLMax     float64  `ch:"itl_max"`
	ITLTokIdx  []int32  `ch:"itl_tok_idx"`
	ITLTokCnt  []uint64 `ch:"itl_tok_cnt"`
	ITLTokZero uint64   `ch:"itl_tok_zero"`
	ITLTokSum  float64  `ch:"itl_tok_sum"`
	ITLTokMin  float64  `ch:"itl_tok_min"`
	ITLTokMax  float64  `ch:"itl_tok_max"`

	StallStartUs        []uint32 `ch:"stall_start_us"`
	StallEndUs          []uint32 `ch:"stall_end_us"`
	StallCauses         []string `ch:"stall_cause"`
	StallNextReadEvents []uint32 `ch:"stall_next_read_events"`
	TimelineDropped     uint32   `ch:"timeline_dropped"`

	Release       string `ch:"release"`
	ModuleVersion string `ch:"module_version"`
	ConnType      string `ch:"conn_type"`
	ConnRTTMs     uint16 `ch:"conn_rtt_ms"`
	TimerFloorUs  uint32 `ch:"timer_floor_us"`

	Country      string `ch:"country"`
	Region       string `ch:"region"`
	Browser      string `ch:"browser"`
	BrowserMajor uint16 `ch:"browser_major"`
	OS           string `ch:"os"`
	Device       string `ch:"device"`
}

// streamColumns is itl_streams' column list, in streamRow's field order.
var streamColumns = columnList[streamRow]()

// timelineRow is one itl_timelines row.
type timelineRow struct {
	ReceivedAt time.Time `ch:"received_at"`
	Site       string    `ch:"site"`
	StreamID   string    `ch:"stream_id"`
	AtUs       []uint32  `ch:"at_us"`
	Read       []uint32  `ch:"read"`
	Content    []bool    `ch:"content"`
	Dropped    uint32    `ch:"dropped"`
}

var timelineColumns = columnList[timelineRow]()

// optTime maps beacon.NoTime to NULL.
func optTime(us uint32) *uint32 {
	if us == beacon.NoTime {
		return nil
	}
	return &us
}

func fromOptTime(p *uint32) uint32 {
	if p == nil {
		return beacon.NoTime
	}
	return *p
}

// headersTime is r's headers_us: NULL when the request ended before the
// headers (HeadersUs is NoTime), as in rows stored before the column
// existed. Records of senders older than HeadersUs decode with it set to
// their first body byte (see beacon), so it is never a meaningless zero.
func headersTime(r *beacon.Record) *uint32 {
	return optTime(r.HeadersUs)
}

// newStreamRow flattens s into its itl_streams row.
func newStreamRow(s *collector.Stream) streamRow {
	r := &s.Record
	row := streamRow{
		ReceivedAt: s.ReceivedAt.UTC(),
		StartedAt:  time.UnixMilli(r.StartUnixMs).UTC(),
		Site:       s.Site,
		StreamID:   string(r.StreamID[:]),
		OriginID:   r.OriginID,

		PageOrigin: r.PageOrigin, PagePath: r.PagePath, URLOrigin: r.URLOrigin, URLPath: r.URLPath,
		Model: r.Model, HTTPProto: r.HTTPProto, ContentType: r.ContentType,
		FormatName: meter.Name(meter.FormatNames[:], r.Format), StatusName: meter.Name(meter.StatusNames[:], r.Status),
		HTTPStatus: r.HTTPStatus, EndReason: meter.Name(meter.EndNames[:], r.End), HeadersUs: headersTime(r),

		TTFBUs: optTime(r.TTFBUs), TTFCUs: optTime(r.TTFCUs), TTFTUs: optTime(r.TTFTUs),
		DurationUs: optTime(r.DurationUs),

		Events: r.Events, ContentEvents: r.ContentEvents, Tokens: r.Tokens, TokensReported: r.TokensReported,
		Reads: r.Reads, Bytes: r.Bytes,

		GapP50Us: r.GapP50Us, GapP95Us: r.GapP95Us, GapP99Us: r.GapP99Us, GapMaxUs: r.GapMaxUs,
		TPOTUs: r.TPOTUs, TokensPerSec: r.TokensPerSec, Stalls: r.Stalls, StalledUs: r.StalledUs,
		Jank: r.Jank, Smooth: r.Smooth,

		EventsPerRead: r.EventsPerRead, MaxEventsPerRead: r.MaxEventsPerRead,
		BytesPerRead: r.BytesPerRead, SubFloorShare: r.SubFloorShare,

		StallsUnknown: r.StallsByCause[causeUnknown], StallsNetwork: r.StallsByCause[causeNetwork],
		StallsPage: r.StallsByCause[causePage], StallsOrigin: r.StallsByCause[causeOrigin],
		StalledUsUnknown: r.StalledByCause[causeUnknown], StalledUsNetwork: r.StalledByCause[causeNetwork],
		StalledUsPage: r.StalledByCause[causePage], StalledUsOrigin: r.StalledByCause[causeOrigin],
		TTFTCauseName: meter.Name(meter.CauseNames[:], r.TTFTCause),

		Colo: s.Colo, TTFTHop: s.Hops.TTFT,
		StallsOriginEdge: s.Hops.OriginEdgeStalls, StallsEdgeBrowser: s.Hops.EdgeBrowserStalls,
		StalledUsOriginEdge: s.Hops.OriginEdgeStalledUs, StalledUsEdgeBrowser: s.Hops.EdgeBrowserStalledUs,

		TimelineDropped: r.TimelineDropped,

		Release: s.Release, ModuleVersion: s.ModuleVersion, ConnType: s.ConnType,
		ConnRTTMs: s.ConnRTTMs, TimerFloorUs: s.TimerFloorUs,
		Country: s.Country, Region: s.Region, Browser: s.Browser, BrowserMajor: s.BrowserMajor,
		OS: s.OS, Device: s.Device,
	}
	if r.TTFTUs != beacon.NoTime && float64(r.TTFTUs) > hist.ZeroThresholdMicros {
		row.TTFTIdx = hist.BucketIndex(float64(r.TTFTUs))
	}
	if us, ok := tpotSample(r); ok && us > hist.ZeroThresholdMicros {
		row.TPOTIdx = hist.BucketIndex(us)
	}
	row.ITLIdx, row.ITLCnt, row.ITLZero, row.ITLSum, row.ITLMin, row.ITLMax = sparse(&r.ITL)
	row.ITLTokIdx, row.ITLTokCnt, row.ITLTokZero, row.ITLTokSum, row.ITLTokMin, row.ITLTokMax = sparse(&r.ITLTokens)
	row.StallStartUs = make([]uint32, len(r.StallList))
	row.StallEndUs = make([]uint32, len(r.StallList))
	row.StallCauses = make([]string, len(r.StallList))
	row.StallNextReadEvents = make([]uint32, len(r.StallList))
	row.StallHops = make([]string, len(r.StallList))
	for i, st := range r.StallList {
		row.StallStartUs[i], row.StallEndUs[i] = st.StartUs, st.EndUs
		row.StallCauses[i] = meter.Name(meter.CauseNames[:], st.Cause)
		row.StallNextReadEvents[i] = st.NextReadEvents
		if i < len(s.Hops.Stall) {
			row.StallHops[i] = s.Hops.Stall[i]
		}
	}
	return row
}

// tpotSample returns the stream's sample of the rollup's per-stream TPOT
// histogram (schema/003_rollup.sql), in microseconds: 1e6/TokensPerSec, which
// is the token TPOT when the stream's tokens are known and the chunk TPOT
// otherwise (wasm/meter). A stream has a sample when it has at least two
// content events and TokensPerSec > 0 (a time between the first and the last
// one); the sample is in the zero bucket (<= hist.ZeroThresholdMicros) exactly
// when TokensPerSec >= 1e6. The rollup's view applies the same conditions in
// SQL to the same float64 arithmetic: keep the two in step.
func tpotSample(r *beacon.Record) (us float64, ok bool) {
	if r.ContentEvents < 2 || !(r.TokensPerSec > 0) {
		return 0, false
	}
	if r.TokensPerSec >= 1e6 {
		return 0, true
	}
	return 1e6 / float64(r.TokensPerSec), true
}

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

// newTimelineRow returns s's itl_timelines row, false when s has no timeline.
func newTimelineRow(s *collector.Stream) (timelineRow, bool) {
	tl := s.Timeline
	if len(tl) == 0 {
		return timelineRow{}, false
	}
	row := timelineRow{
		ReceivedAt: s.ReceivedAt.UTC(),
		Site:       s.Site,
		StreamID:   string(s.StreamID[:]),
		AtUs:       make([]uint32, len(tl)),
		Read:       make([]uint32, len(tl)),
		Content:    make([]bool, len(tl)),
		Dropped:    s.TimelineDropped,
	}
	for i, st := range tl {
		row.AtUs[i], row.Read[i], row.Content[i] = st.AtUs, st.Read, st.Content
	}
	return row, true
}

// stream rebuilds a collector.Stream from its row (the timeline lives in
// itl_timelines and is not filled in).
func (row *streamRow) stream() (collector.Stream, error) {
	var s collector.Stream
	r := &s.Record
	copy(r.StreamID[:], row.StreamID)
	r.OriginID, r.StartUnixMs = row.OriginID, row.StartedAt.UnixMilli()
	r.PageOrigin, r.PagePath, r.URLOrigin, r.URLPath = row.PageOrigin, row.PagePath, row.URLOrigin, row.URLPath
	r.Model, r.HTTPProto, r.ContentType = row.Model, row.HTTPProto, row.ContentType
	r.Format, r.Status = codeOf(meter.FormatNames[:], row.FormatName), codeOf(meter.StatusNames[:], row.StatusName)
	r.HTTPStatus, r.End, r.HeadersUs = row.HTTPStatus, codeOf(meter.EndNames[:], row.EndReason), fromOptTime(row.HeadersUs)
	r.TTFBUs, r.TTFCUs = fromOptTime(row.TTFBUs), fromOptTime(row.TTFCUs)
	r.TTFTUs, r.DurationUs = fromOptTime(row.TTFTUs), fromOptTime(row.DurationUs)
	r.Events, r.ContentEvents, r.Tokens, r.TokensReported = row.Events, row.ContentEvents, row.Tokens, row.TokensReported
	r.Reads, r.Bytes = row.Reads, row.Bytes
	r.GapP50Us, r.GapP95Us, r.GapP99Us, r.GapMaxUs = row.GapP50Us, row.GapP95Us, row.GapP99Us, row.GapMaxUs
	r.TPOTUs, r.TokensPerSec, r.Stalls, r.StalledUs = row.TPOTUs, row.TokensPerSec, row.Stalls, row.StalledUs
	r.Jank, r.Smooth = row.Jank, row.Smooth
	r.EventsPerRead, r.MaxEventsPerRead = row.EventsPerRead, row.MaxEventsPerRead
	r.BytesPerRead, r.SubFloorShare = row.BytesPerRead, row.SubFloorShare
	r.StallsByCause[causeUnknown], r.StallsByCause[causeNetwork] = row.StallsUnknown, row.StallsNetwork
	r.StallsByCause[causePage], r.StallsByCause[causeOrigin] = row.StallsPage, row.StallsOrigin
	r.StalledByCause[causeUnknown], r.StalledByCause[causeNetwork] = row.StalledUsUnknown, row.StalledUsNetwork
	r.StalledByCause[causePage], r.StalledByCause[causeOrigin] = row.StalledUsPage, row.StalledUsOrigin
	r.TTFTCause, r.TimelineDropped = codeOf(meter.CauseNames[:], row.TTFTCauseName), row.TimelineDropped
	var err error
	if r.ITL, err = hist.FromSparse(row.ITLZero, row.ITLIdx, row.ITLCnt, row.ITLSum, row.ITLMin, row.ITLMax); err != nil {
		return s, err
	}
	if r.ITLTokens, err = hist.FromSparse(row.ITLTokZero, row.ITLTokIdx, row.ITLTokCnt, row.ITLTokSum, row.ITLTokMin, row.ITLTokMax); err != nil {
		return s, err
	}
	for i := range row.StallStartUs {
		if i >= len(row.StallEndUs) || i >= len(row.StallCauses) || i >= len(row.StallNextReadEvents) {
			return s, fmt.Errorf("stall arrays of unequal length (%d starts)", len(row.StallStartUs))
		}
		r.StallList = append(r.StallList, beacon.Stall{
			StartUs: row.StallStartUs[i], EndUs: row.StallEndUs[i],
			Cause: codeOf(meter.CauseNames[:], row.StallCauses[i]), NextReadEvents: row.StallNextReadEvents[i],
		})
	}
	s.Site, s.ReceivedAt = row.Site, row.ReceivedAt
	s.Release, s.ModuleVersion, s.ConnType = row.Release, row.ModuleVersion, row.ConnType
	s.ConnRTTMs, s.TimerFloorUs = row.ConnRTTMs, row.TimerFloorUs
	s.Country, s.Region, s.Browser, s.BrowserMajor = row.Country, row.Region, row.Browser, row.BrowserMajor
	s.OS, s.Device = row.OS, row.Device
	s.Colo, s.Hops.TTFT = row.Colo, row.TTFTHop
	s.Hops.OriginEdgeStalls, s.Hops.EdgeBrowserStalls = row.StallsOriginEdge, row.StallsEdgeBrowser
	s.Hops.OriginEdgeStalledUs, s.Hops.EdgeBrowserStalledUs = row.StalledUsOriginEdge, row.StalledUsEdgeBrowser
	if slices.ContainsFunc(row.StallHops, func(h string) bool { return h != "" }) {
		s.Hops.Stall = row.StallHops
	}
	return s, nil
}

// unknownCode is the code codeOf gives a name it does not know (a newer
// collector's): past the end of every name table, so meter.Name shows it as
// "unknown".
const unknownCode = 255

// codeOf is the inverse of meter.Name: the index of name in names, or
// unknownCode.
func codeOf(names []string, name string) uint8 {
	for i, n := range names {
		if n == name {
			return uint8(i)
		}
	}
	return unknownCode
}

// timeline rebuilds the beacon timeline of a row.
func (row *timelineRow) timeline() []beacon.Stamp {
	n := min(len(row.AtUs), len(row.Read), len(row.Content))
	tl := make([]beacon.Stamp, n)
	for i := range n {
		tl[i] = beacon.Stamp{AtUs: row.AtUs[i], Read: row.Read[i], Content: row.Content[i]}
	}
	return tl
}
