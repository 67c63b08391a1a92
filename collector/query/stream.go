package query

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// WorstOrders are the orders of WorstStreams: the column each sorts by,
// largest first. Each is a column, not an expression: the engine sorts a
// column of a 30-day range in about two thirds of the time it takes to
// compute and sort an expression of it (ifNull(ttft_us, 0): 143-158 ms
// against 101-106 at 10 M streams). A stream without a first token (its
// ttft_us NULL) comes after every stream with one, 0 included (ClickHouse
// sorts NULLs last in either direction).
var WorstOrders = map[string]string{
	"stalled": "stalled_us",
	"jank":    "jank",
	"ttft":    "ttft_us",
	"gap":     "gap_max_us",
}

// MaxWorst bounds WorstStreams.
const MaxWorst = 200

// StreamBrief is one stream in a list: who, when, and its headline figures.
type StreamBrief struct {
	StreamID   string    `json:"stream_id"`
	ReceivedAt time.Time `json:"received_at"`
	Browser    string    `json:"browser"`
	Region     string    `json:"region"`
	Country    string    `json:"country"`
	Model      string    `json:"model"`
	Release    string    `json:"release"`
	APIOrigin  string    `json:"api_origin"`
	URLPath    string    `json:"url_path"`
	Status     string    `json:"status"`
	TTFTMs     *float64  `json:"ttft_ms"`
	TTFTCause  string    `json:"ttft_cause"`
	Content    uint32    `json:"content_events"`
	GapP50Ms   float64   `json:"gap_p50_ms"`
	GapP99Ms   float64   `json:"gap_p99_ms"`
	GapMaxMs   float64   `json:"gap_max_ms"`
	Stalls     uint32    `json:"stalls"`
	StalledMs  float64   `json:"stalled_ms"`
	Jank       float64   `json:"jank"`
	TPS        float64   `json:"tokens_per_sec"`
	// Causes names the causes of its stalls, most stalled time first.
	Causes []string `json:"causes"`
}

const briefSelect = `lower(hex(stream_id)), received_at, toString(browser), toString(region), toString(country), toString(model), toString(release),
	toString(url_origin), url_path, toString(status), ttft_us, toString(ttft_cause), content_events, gap_p50_us, gap_p99_us, gap_max_us,
	stalls, stalled_us, toFloat64(jank), toFloat64(tokens_per_sec),
	arrayMap(x -> x.1, arrayReverseSort(x -> x.2, arrayFilter(x -> x.2 > 0, [('origin', stalled_us_origin), ('network', stalled_us_network), ('page', stalled_us_page), ('unknown', stalled_us_unknown)])))`

func (b *StreamBrief) dest(ttft **uint32, p50, p99, mx *uint32, stalled *uint64) []any {
	return []any{&b.StreamID, &b.ReceivedAt, &b.Browser, &b.Region, &b.Country, &b.Model, &b.Release,
		&b.APIOrigin, &b.URLPath, &b.Status, ttft, &b.TTFTCause, &b.Content, p50, p99, mx,
		&b.Stalls, stalled, &b.Jank, &b.TPS, &b.Causes}
}

func (b *StreamBrief) finish(ttft *uint32, p50, p99, mx uint32, stalled uint64) {
	b.ReceivedAt = b.ReceivedAt.UTC()
	if ttft != nil {
		v := float64(*ttft) / 1000
		b.TTFTMs = &v
	}
	b.GapP50Ms, b.GapP99Ms, b.GapMaxMs = float64(p50)/1000, float64(p99)/1000, float64(mx)/1000
	b.StalledMs = float64(stalled) / 1000
	if b.Causes == nil {
		b.Causes = []string{}
	}
}

// WorstStreams lists the streams matching f with the largest value of order
// (a WorstOrders key), at most limit (1..MaxWorst), from itl_streams: each
// stream once, by its row that sorts first (the largest value, then the
// latest).
//
// One statement, ORDER BY the order column with a LIMIT: the engine sorts
// that column alone and reads the list's other columns for just the rows
// it returns (lazy materialization, up to 10,000 rows). Two phases, the
// rows' keys first and then their columns, found the scattered rows twice:
// at 10 M streams over 30 days, 245-300 ms for the two against 205-225.
// It asks for a few rows more than limit, for a stream stored twice that
// the table has not collapsed yet, keeps each stream's first row, and asks
// for more only when copies left fewer than limit streams.
func WorstStreams(ctx context.Context, conn Conn, f Filter, order string, limit int) ([]StreamBrief, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	col, ok := WorstOrders[order]
	if !ok {
		return nil, fmt.Errorf("%w: unknown order %q: want stalled, jank, ttft or gap", ErrBadFilter, order)
	}
	if limit < 1 || limit > MaxWorst {
		return nil, fmt.Errorf("%w: limit %d: want 1 to %d", ErrBadFilter, limit, MaxWorst)
	}
	where, args := f.rawWhere()
	q := "SELECT " + briefSelect + " FROM " + streamsTable + " WHERE " + where + " ORDER BY " + col + " DESC, received_at DESC LIMIT "
	for m := limit + max(4, limit/8); ; m *= 4 {
		out, got, err := worstRows(ctx, conn, q+strconv.Itoa(m), args, limit)
		if err != nil {
			return nil, err
		}
		if len(out) == limit || got < m {
			return out, nil
		}
	}
}

// worstRows runs q and returns the first row of each stream, at most
// limit, and how many rows q returned.
func worstRows(ctx context.Context, conn Conn, q string, args []any, limit int) ([]StreamBrief, int, error) {
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("query worst streams: %w", err)
	}
	defer rows.Close()
	var (
		out  []StreamBrief
		seen = map[string]bool{}
		got  int
	)
	for rows.Next() {
		var (
			b            StreamBrief
			ttft         *uint32
			p50, p99, mx uint32
			stalled      uint64
		)
		if err := rows.Scan(b.dest(&ttft, &p50, &p99, &mx, &stalled)...); err != nil {
			return nil, 0, fmt.Errorf("scan worst streams: %w", err)
		}
		got++
		if len(out) < limit && !seen[b.StreamID] {
			seen[b.StreamID] = true
			b.finish(ttft, p50, p99, mx, stalled)
			out = append(out, b)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read worst streams: %w", err)
	}
	return out, got, nil
}

// ErrNotFound is returned by StreamDetailOf for an unknown stream.
var ErrNotFound = errors.New("not found")

// StreamDetail is one stream drawn from its row, its sampled timeline
// (itl_timelines) and, when the origin reported it, the origin's emit times
// (itl_origin).
type StreamDetail struct {
	StreamBrief
	TTFBMs        *float64 `json:"ttfb_ms"`
	DurationMs    *float64 `json:"duration_ms"`
	Reads         uint32   `json:"reads"`
	Events        uint32   `json:"events"`
	EventsPerRead float64  `json:"events_per_read"`
	SubFloorShare float64  `json:"sub_floor_share"`
	HTTPProto     string   `json:"http_proto"`
	Format        string   `json:"format"`
	// Colo is the edge data centre and TTFTHop the hop of a network wait
	// for the first token (origin_edge, edge_browser), when the edge
	// Worker reported the stream.
	Colo    string `json:"colo,omitempty"`
	TTFTHop string `json:"ttft_hop,omitempty"`
	// Stalls, each a gap over 200 ms between content events: the arrival
	// times around it (ms since t0) and its cause.
	StallList []StallSpan `json:"stall_list"`
	// Timeline is the sampled stamps: arrival (ms since t0), the network
	// read that delivered it, and whether it carried content. Dropped
	// counts the stamps the browser did not keep (the timeline keeps the
	// first events and every stall's neighbourhood).
	Timeline []Stamp `json:"timeline"`
	Dropped  uint32  `json:"timeline_dropped"`
	// Origin is the origin's side when the origin middleware reported it.
	Origin *OriginSide `json:"origin,omitempty"`
}

// StallSpan is one stall of a StreamDetail.
type StallSpan struct {
	StartMs float64 `json:"start_ms"`
	EndMs   float64 `json:"end_ms"`
	Cause   string  `json:"cause"`
	Hop     string  `json:"hop,omitempty"` // of a network stall, with the edge Worker
}

// Stamp is one timeline entry of a StreamDetail.
type Stamp struct {
	AtMs    float64 `json:"at_ms"`
	Read    uint32  `json:"read"`
	Content bool    `json:"content"`
}

// OriginSide is the origin's timeline of a stream. EmitMs are its content
// emit times on the browser's clock: the origin's own times shifted by
// OffsetMs = client TTFT - origin TTFT (the join's alignment, collector/join),
// so the first emit sits on the first content arrival and a gap the origin
// made lines up with the gap the browser saw.
type OriginSide struct {
	TTFTMs       *float64  `json:"ttft_ms"`
	OffsetMs     float64   `json:"offset_ms"`
	EmitMs       []float64 `json:"emit_ms"`
	EmitsDropped uint32    `json:"emits_dropped"`
	Stalls       uint32    `json:"stalls"`
	Route        string    `json:"route"`
}

// streamRowSQL reads one stream's row by (site, stream_id): stream_id is
// the sort key's last column, so the bloom filter stream_id_bf
// (schema/016_stream_id_index.sql) is what spares the read the site's
// every stream id; the condition must stay one it can use (stream_id = ?).
const streamRowSQL = "SELECT " + briefSelect + `, ttfb_us, duration_us, reads, events, toFloat64(events_per_read), toFloat64(sub_floor_share),
		toString(http_proto), toString(format), stall_start_us, stall_end_us, arrayMap(c -> toString(c), stall_cause),
		toString(colo), toString(ttft_hop), arrayMap(h -> toString(h), stall_hop), origin_id
		FROM ` + streamsTable + ` WHERE site = ? AND stream_id = ? ORDER BY received_at DESC LIMIT 1`

// StreamDetailOf reads stream id (32 hex digits) of site.
func StreamDetailOf(ctx context.Context, conn Conn, site, id string) (StreamDetail, error) {
	var d StreamDetail
	raw, err := hex.DecodeString(id)
	if site == "" || err != nil || len(raw) != 16 {
		return d, fmt.Errorf("%w: want site and a stream id of 32 hex digits", ErrBadFilter)
	}
	sid := string(raw)
	rows, err := conn.Query(ctx, streamRowSQL, site, sid)
	if err != nil {
		return d, fmt.Errorf("query stream: %w", err)
	}
	var (
		ttft, ttfb, dur *uint32
		p50, p99, mx    uint32
		stalled         uint64
		sStart, sEnd    []uint32
		sCause, sHop    []string
		originID        string
		found           bool
	)
	for rows.Next() {
		found = true
		dst := append(d.StreamBrief.dest(&ttft, &p50, &p99, &mx, &stalled), &ttfb, &dur, &d.Reads, &d.Events, &d.EventsPerRead, &d.SubFloorShare,
			&d.HTTPProto, &d.Format, &sStart, &sEnd, &sCause, &d.Colo, &d.TTFTHop, &sHop, &originID)
		if err := rows.Scan(dst...); err != nil {
			rows.Close()
			return d, fmt.Errorf("scan stream: %w", err)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return d, fmt.Errorf("read stream: %w", err)
	}
	if !found {
		return d, ErrNotFound
	}
	d.StreamBrief.finish(ttft, p50, p99, mx, stalled)
	d.TTFBMs, d.DurationMs = optMs(ttfb), optMs(dur)
	d.StallList = make([]StallSpan, 0, len(sStart))
	for i := range min(len(sStart), len(sEnd)) {
		c := "unknown"
		if i < len(sCause) {
			c = sCause[i]
		}
		sp := StallSpan{StartMs: float64(sStart[i]) / 1000, EndMs: float64(sEnd[i]) / 1000, Cause: c}
		if i < len(sHop) {
			sp.Hop = sHop[i]
		}
		d.StallList = append(d.StallList, sp)
	}

	d.Timeline = []Stamp{}
	tl, err := conn.Query(ctx, "SELECT at_us, read, content, dropped FROM itl_timelines WHERE site = ? AND stream_id = ? ORDER BY received_at DESC LIMIT 1", site, sid)
	if err != nil {
		return d, fmt.Errorf("query timeline: %w", err)
	}
	for tl.Next() {
		var (
			at, rd []uint32
			ct     []bool
		)
		if err := tl.Scan(&at, &rd, &ct, &d.Dropped); err != nil {
			tl.Close()
			return d, fmt.Errorf("scan timeline: %w", err)
		}
		for i := range min(len(at), len(rd), len(ct)) {
			d.Timeline = append(d.Timeline, Stamp{AtMs: float64(at[i]) / 1000, Read: rd[i], Content: ct[i]})
		}
	}
	tl.Close()
	if err := tl.Err(); err != nil {
		return d, fmt.Errorf("read timeline: %w", err)
	}

	// The origin row joined with this stream (version 1 carries stream_id),
	// looked up by the key of itl_origin's sort order: the join matched the
	// stream's origin id, and a stream without one has no origin row.
	if originID == "" {
		return d, nil
	}
	or, err := conn.Query(ctx, "SELECT ttft_us, emit_us, emits_dropped, stalls, route FROM itl_origin FINAL WHERE site = ? AND origin_id = ? AND stream_id = ? LIMIT 1",
		site, originID, sid)
	if err != nil {
		return d, fmt.Errorf("query origin: %w", err)
	}
	defer or.Close()
	for or.Next() {
		var (
			o     OriginSide
			ottft *uint32
			emits []uint32
		)
		if err := or.Scan(&ottft, &emits, &o.EmitsDropped, &o.Stalls, &o.Route); err != nil {
			return d, fmt.Errorf("scan origin: %w", err)
		}
		o.TTFTMs = optMs(ottft)
		if ottft != nil && ttft != nil {
			o.OffsetMs = (float64(*ttft) - float64(*ottft)) / 1000
		}
		o.EmitMs = make([]float64, len(emits))
		for i, e := range emits {
			o.EmitMs[i] = float64(e)/1000 + o.OffsetMs
		}
		d.Origin = &o
	}
	if err := or.Err(); err != nil {
		return d, fmt.Errorf("read origin: %w", err)
	}
	return d, nil
}

func optMs(us *uint32) *float64 {
	if us == nil {
		return nil
	}
	v := float64(*us) / 1000
	return &v
}
