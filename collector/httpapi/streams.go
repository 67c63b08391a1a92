package httpapi

import (
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/duration"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

type streamsHandler struct{ cfg Config }

// streamsResponse is the body of GET /api/streams.
type streamsResponse struct {
	Site    string       `json:"site"`
	Since   time.Time    `json:"since"`
	Limit   int          `json:"limit"`
	Count   int          `json:"count"`
	Streams []streamJSON `json:"streams"`
}

// streamJSON is one stream as the API shows it: times in milliseconds (null
// when the event did not happen), enrichment as stored, format, status, end
// and causes as their plain names (meter.FormatNames, StatusNames, EndNames,
// CauseNames; the names stored in ClickHouse).
type streamJSON struct {
	StreamID string `json:"stream_id"`
	// View is the dashboard's page of this stream (its timeline, stalls with
	// their causes and the origin's emit times).
	View        string    `json:"view"`
	OriginID    string    `json:"origin_id,omitempty"`
	Start       time.Time `json:"start"`
	ReceivedAt  time.Time `json:"received_at"`
	PageOrigin  string    `json:"page_origin"`
	PagePath    string    `json:"page_path"`
	URLOrigin   string    `json:"url_origin"`
	URLPath     string    `json:"url_path"`
	Model       string    `json:"model"`
	HTTPProto   string    `json:"http_proto"`
	ContentType string    `json:"content_type"`
	Format      string    `json:"format"`
	Status      string    `json:"status"`
	HTTPStatus  uint16    `json:"http_status"`
	// End is how the body ended ("" from senders that do not say).
	End string `json:"end"`
	// HeadersMs is when the response headers arrived; null when the request
	// ended before them (BeforeHeaders) or the sender does not say.
	HeadersMs *float64 `json:"headers_ms"`
	// BeforeHeaders: aborted or failed before the response headers; then
	// DurationMs is the time waited and there are no body facts.
	BeforeHeaders bool `json:"before_headers"`

	TTFBMs     *float64 `json:"ttfb_ms"`
	TTFCMs     *float64 `json:"ttfc_ms"`
	TTFTMs     *float64 `json:"ttft_ms"`
	DurationMs *float64 `json:"duration_ms"`

	Events         uint32  `json:"events"`
	ContentEvents  uint32  `json:"content_events"`
	Tokens         uint32  `json:"tokens"`
	TokensReported bool    `json:"tokens_reported"`
	Reads          uint32  `json:"reads"`
	Bytes          uint64  `json:"bytes"`
	GapP50Ms       float64 `json:"gap_p50_ms"`
	GapP95Ms       float64 `json:"gap_p95_ms"`
	GapP99Ms       float64 `json:"gap_p99_ms"`
	GapMaxMs       float64 `json:"gap_max_ms"`
	TPOTMs         float64 `json:"tpot_ms"`
	TokensPerSec   float64 `json:"tokens_per_sec"`
	Stalls         uint32  `json:"stalls"`
	StalledMs      float64 `json:"stalled_ms"`
	Jank           float64 `json:"jank"`
	Smooth         bool    `json:"smooth"`
	EventsPerRead  float64 `json:"events_per_read"`
	BytesPerRead   float64 `json:"bytes_per_read"`
	SubFloorShare  float64 `json:"sub_floor_share"`
	TTFTCause      string  `json:"ttft_cause"`
	// TTFTHop is the hop of a network wait for the first token
	// (origin_edge, edge_browser), with the edge Worker only.
	TTFTHop string `json:"ttft_hop,omitempty"`
	// StallsByCause and StalledMsByCause count the stalls per cause name
	// (unknown, network, page, origin; every one present, 0 when none).
	StallsByCause    map[string]uint32  `json:"stalls_by_cause"`
	StalledMsByCause map[string]float64 `json:"stalled_ms_by_cause"`
	// StallList is each stall the record kept (a gap over 200 ms between
	// content events), oldest first.
	StallList []stallJSON `json:"stall_list"`

	Country       string `json:"country"`
	Region        string `json:"region"`
	Colo          string `json:"colo,omitempty"` // the edge data centre, with the edge Worker
	Browser       string `json:"browser"`
	BrowserMajor  uint16 `json:"browser_major"`
	OS            string `json:"os"`
	Device        string `json:"device"`
	ConnType      string `json:"conn_type"`
	Release       string `json:"release,omitempty"`
	ModuleVersion string `json:"module_version,omitempty"`
}

// stallJSON is one stall: the arrival times of the content events around the
// gap, since t0, and its cause's name.
type stallJSON struct {
	StartMs        float64 `json:"start_ms"`
	EndMs          float64 `json:"end_ms"`
	Cause          string  `json:"cause"`
	NextReadEvents uint32  `json:"next_read_events"`
	Hop            string  `json:"hop,omitempty"` // of a network stall, with the edge Worker: origin_edge or edge_browser
}

func (h *streamsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	site := q.Get("site")
	if site == "" {
		writeError(w, http.StatusBadRequest, "missing site parameter: use ?site=KEY")
		return
	}
	if h.cfg.HasSite != nil && !h.cfg.HasSite(site) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown site key %q", site))
		return
	}
	since := DefaultSince
	if s := q.Get("since"); s != "" {
		d, err := duration.Parse(s)
		if err != nil || d <= 0 || d > MaxSince {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("bad since %q: want a duration from 1s to 366d, like 10m, 2h or 7d", s))
			return
		}
		since = d
	}
	limit := DefaultStreamsLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("bad limit %q: want a whole number from 1 to %d", s, MaxStreamsLimit))
			return
		}
		limit = min(n, MaxStreamsLimit)
	}
	if h.cfg.Streams == nil {
		writeError(w, http.StatusServiceUnavailable, "no stream store")
		return
	}
	if unavailable(w, h.cfg.Available) {
		return
	}
	from := h.cfg.Now().Add(-since).UTC()
	got, err := h.cfg.Streams.LatestStreams(r.Context(), collector.StreamFilter{Site: site, Since: from, Limit: limit})
	if err != nil {
		h.cfg.Logger.Error().Err(err).Str("site", site).Msg("read streams")
		writeError(w, http.StatusServiceUnavailable, "read streams: clickhouse unavailable")
		return
	}
	resp := streamsResponse{Site: site, Since: from, Limit: limit, Count: len(got), Streams: make([]streamJSON, len(got))}
	for i := range got {
		resp.Streams[i] = toJSON(&got[i])
		resp.Streams[i].View = StreamViewPath(site, resp.Streams[i].StreamID)
	}
	writeJSON(w, http.StatusOK, resp)
}

func toJSON(s *collector.Stream) streamJSON {
	j := streamJSON{
		StreamID:      hex.EncodeToString(s.StreamID[:]),
		OriginID:      s.OriginID,
		Start:         time.UnixMilli(s.StartUnixMs).UTC(),
		ReceivedAt:    s.ReceivedAt.UTC(),
		PageOrigin:    s.PageOrigin,
		PagePath:      s.PagePath,
		URLOrigin:     s.URLOrigin,
		URLPath:       s.URLPath,
		Model:         s.Model,
		HTTPProto:     s.HTTPProto,
		ContentType:   s.ContentType,
		Format:        meter.Name(meter.FormatNames[:], s.Format),
		Status:        meter.Name(meter.StatusNames[:], s.Status),
		HTTPStatus:    s.HTTPStatus,
		End:           meter.Name(meter.EndNames[:], s.End),
		HeadersMs:     optMs(s.HeadersUs),
		BeforeHeaders: collector.BeforeHeaders(&s.Record),

		TTFBMs:     optMs(s.TTFBUs),
		TTFCMs:     optMs(s.TTFCUs),
		TTFTMs:     optMs(s.TTFTUs),
		DurationMs: optMs(s.DurationUs),

		Events:           s.Events,
		ContentEvents:    s.ContentEvents,
		Tokens:           s.Tokens,
		TokensReported:   s.TokensReported,
		Reads:            s.Reads,
		Bytes:            s.Bytes,
		GapP50Ms:         ms(uint64(s.GapP50Us)),
		GapP95Ms:         ms(uint64(s.GapP95Us)),
		GapP99Ms:         ms(uint64(s.GapP99Us)),
		GapMaxMs:         ms(uint64(s.GapMaxUs)),
		TPOTMs:           ms(uint64(s.TPOTUs)),
		TokensPerSec:     finite(s.TokensPerSec),
		Stalls:           s.Stalls,
		StalledMs:        ms(s.StalledUs),
		Jank:             finite(s.Jank),
		Smooth:           s.Smooth,
		EventsPerRead:    finite(s.EventsPerRead),
		BytesPerRead:     finite(s.BytesPerRead),
		SubFloorShare:    finite(s.SubFloorShare),
		TTFTCause:        meter.Name(meter.CauseNames[:], s.TTFTCause),
		TTFTHop:          s.Hops.TTFT,
		StallsByCause:    make(map[string]uint32, meter.NumCauses-1),
		StalledMsByCause: make(map[string]float64, meter.NumCauses-1),
		StallList:        make([]stallJSON, len(s.StallList)),

		Country:       s.Country,
		Region:        s.Region,
		Colo:          s.Colo,
		Browser:       s.Browser,
		BrowserMajor:  s.BrowserMajor,
		OS:            s.OS,
		Device:        s.Device,
		ConnType:      s.ConnType,
		Release:       s.Release,
		ModuleVersion: s.ModuleVersion,
	}
	for c := meter.CauseUnknown; c < meter.NumCauses; c++ {
		name := meter.CauseNames[c]
		j.StallsByCause[name] = s.StallsByCause[c]
		j.StalledMsByCause[name] = ms(s.StalledByCause[c])
	}
	for i, st := range s.StallList {
		j.StallList[i] = stallJSON{StartMs: ms(uint64(st.StartUs)), EndMs: ms(uint64(st.EndUs)),
			Cause: meter.Name(meter.CauseNames[:], st.Cause), NextReadEvents: st.NextReadEvents}
		if i < len(s.Hops.Stall) {
			j.StallList[i].Hop = s.Hops.Stall[i]
		}
	}
	return j
}

// StreamViewPath is the dashboard's URL path of one stream.
func StreamViewPath(site, streamID string) string {
	return "/dashboard/?" + url.Values{"view": {"stream"}, "site": {site}, "id": {streamID}}.Encode()
}

func ms(us uint64) float64 { return float64(us) / 1000 }

func optMs(us uint32) *float64 {
	if us == beacon.NoTime {
		return nil
	}
	v := ms(uint64(us))
	return &v
}

// finite keeps NaN and Inf (which encoding/json refuses) out of the answer.
func finite(f float32) float64 {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return math.Round(v*1000) / 1000
}
