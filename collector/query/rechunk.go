package query

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The raw table. Re-chunking per API origin and HTTP protocol, the worst
// streams, one stream and the per-stream samples of a comparison read it
// (the rollup has neither those dimensions nor per-stream values), always
// bounded by site and time, which lead its ORDER BY key.
const streamsTable = "itl_streams"

// rawDimColumn maps the dimensions of the raw-row views to itl_streams
// columns: the rollup's (Dimensions) plus the fetched URL's origin (the API
// origin) and the HTTP protocol.
var rawDimColumn = func() map[string]string {
	m := map[string]string{"api_origin": "url_origin", "http_proto": "http_proto"}
	for k, v := range dimColumn {
		m[k] = v
	}
	return m
}()

// RawDimensions are the dimensions Rechunk and Compare accept, sorted.
func RawDimensions() []string {
	ks := make([]string, 0, len(rawDimColumn))
	for k := range rawDimColumn {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func rawDim(dim string) (string, error) {
	col, ok := rawDimColumn[dim]
	if !ok {
		return "", fmt.Errorf("%w: unknown dimension %q: allowed are %s", ErrBadFilter, dim, strings.Join(RawDimensions(), ", "))
	}
	return col, nil
}

// rawWhere is Filter.where for itl_streams: received_at in [Since, Until).
func (f *Filter) rawWhere() (string, []any) {
	until := f.Until
	if until.IsZero() {
		until = time.Now()
	}
	var b strings.Builder
	b.WriteString("site = ? AND received_at >= ? AND received_at < ?")
	args := []any{f.Site, f.Since.UTC(), until.UTC()}
	keys := make([]string, 0, len(f.Where))
	for k := range f.Where {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString(" AND " + dimColumn[k] + " = ?")
		args = append(args, f.Where[k])
	}
	return b.String(), args
}

// Thresholds of the re-chunking view.
const (
	// CoalescedEventsPerRead: more content events per network read than
	// this on average means reads carry several events (an unbuffered SSE
	// stream has about one).
	CoalescedEventsPerRead = 1.5
	// CoalescedShare: a segment is flagged when its sub-floor gap share or
	// its coalesced-TTFT share reaches this.
	CoalescedShare = 0.2
	// PatternShare: a read pattern names a segment's re-chunker when at least
	// this share of its streams (with 3+ content events) show it.
	PatternShare = 0.5
)

// Read patterns (Rechunk.Pattern), each naming the usual re-chunker.
const (
	PatternNone     = ""          // reads carry about one event each
	PatternOneRead  = "one_read"  // the whole answer in one read at the end: a buffering proxy
	PatternSteady   = "steady"    // several events per read, evenly: a buffer that flushes when full
	PatternBursty   = "bursty"    // uneven bursts of events: an encoder (compression) holding events
	PatternSubFloor = "sub_floor" // gaps below the timer floor without multi-event reads: a busy page
)

// Diagnoses per pattern: what the read pattern says and its usual fix.
var Diagnoses = map[string]string{
	PatternOneRead: "The whole answer arrives in one read at the end: a buffering proxy holds the response. " +
		"Fix: send `X-Accel-Buffering: no` from the origin, or `proxy_buffering off` (nginx) for the streaming route.",
	PatternSteady: "Reads carry several events at a steady rate: a buffer that flushes only when full. " +
		"Fix: flush after every event at the origin and in any proxy (lower the proxy buffer, or turn buffering off for the route).",
	PatternBursty: "Events arrive in uneven bursts while the origin sends them one by one: an encoder holds them (compression). " +
		"Fix: no gzip or brotli on `text/event-stream` (nginx `gzip_types` without it), or flush the encoder per event.",
	PatternSubFloor: "Many gaps are below the timer floor while reads carry one event each: the page's main thread was busy and " +
		"handled several reads at once. Fix: move work off the main thread (see the page cause in Causes).",
}

// Rechunk is the re-chunking picture of one value of a dimension.
type Rechunk struct {
	Key     string `json:"key"`
	Streams int64  `json:"streams"`
	// EventsPerRead is stream events over network reads, BytesPerRead
	// bytes over reads, of every stream.
	EventsPerRead float64 `json:"events_per_read"`
	BytesPerRead  float64 `json:"bytes_per_read"`
	// SubFloorShare is the share of gaps below the browser's timer floor
	// (each stream's share weighted by its gaps).
	SubFloorShare float64 `json:"sub_floor_share"`
	// CoalescedTTFTShare is the share of streams with a first token whose
	// wait is attributed to the network (coalesced delivery).
	CoalescedTTFTShare float64 `json:"coalesced_ttft_share"`
	// OneReadShare, SteadyShare, BurstyShare: shares of the streams with 3+
	// content events whose reads show each pattern: every content event in
	// one read; several events in every read, evenly (the largest read at
	// most twice the mean); several per read on average, unevenly.
	OneReadShare float64 `json:"one_read_share"`
	SteadyShare  float64 `json:"steady_share"`
	BurstyShare  float64 `json:"bursty_share"`
	// Flagged: the segment coalesces (EventsPerRead, SubFloorShare or
	// CoalescedTTFTShare beyond its threshold).
	Flagged   bool   `json:"flagged"`
	Pattern   string `json:"pattern"`
	Diagnosis string `json:"diagnosis,omitempty"`
}

// RechunkBy is Rechunk per value of dim (RawDimensions), from itl_streams
// rows matching f, most streams first, at most MaxGroups.
func RechunkBy(ctx context.Context, conn Conn, f Filter, dim string) ([]Rechunk, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	col, err := rawDim(dim)
	if err != nil {
		return nil, err
	}
	where, args := f.rawWhere()
	const multi = "content_events >= 3"
	q := "SELECT toString(" + col + ") AS key, count(), " +
		"toFloat64(sum(events)), toFloat64(sum(reads)), toFloat64(sum(bytes)), " +
		"sumIf(toFloat64(sub_floor_share) * (content_events - 1), content_events >= 2), toFloat64(sumIf(content_events - 1, content_events >= 2)), " +
		"countIf(ttft_cause = 'network'), countIf(ttft_us IS NOT NULL), " +
		"countIf(" + multi + "), " +
		"countIf(" + multi + " AND max_events_per_read >= content_events), " +
		"countIf(" + multi + " AND max_events_per_read < content_events AND events_per_read >= " + ftoa(CoalescedEventsPerRead) + " AND max_events_per_read <= 2 * events_per_read), " +
		"countIf(" + multi + " AND max_events_per_read < content_events AND events_per_read >= " + ftoa(CoalescedEventsPerRead) + " AND max_events_per_read > 2 * events_per_read) " +
		"FROM " + streamsTable + " WHERE " + where + " GROUP BY key ORDER BY count() DESC, key LIMIT " + strconv.Itoa(MaxGroups)
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("query rechunk by %s: %w", dim, err)
	}
	defer rows.Close()
	var out []Rechunk
	for rows.Next() {
		var (
			r                                           Rechunk
			n                                           uint64
			content, reads, bytes, subW, gaps           float64
			ttftNet, withTTFT, multiN, one, stdy, burst uint64
		)
		if err := rows.Scan(&r.Key, &n, &content, &reads, &bytes, &subW, &gaps, &ttftNet, &withTTFT, &multiN, &one, &stdy, &burst); err != nil {
			return nil, fmt.Errorf("scan rechunk by %s: %w", dim, err)
		}
		r.Streams = int64(n)
		r.EventsPerRead = ratio(content, reads)
		r.BytesPerRead = ratio(bytes, reads)
		r.SubFloorShare = ratio(subW, gaps)
		r.CoalescedTTFTShare = ratio(float64(ttftNet), float64(withTTFT))
		r.OneReadShare = ratio(float64(one), float64(multiN))
		r.SteadyShare = ratio(float64(stdy), float64(multiN))
		r.BurstyShare = ratio(float64(burst), float64(multiN))
		r.classify()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read rechunk by %s: %w", dim, err)
	}
	return out, nil
}

// classify sets Flagged, Pattern and Diagnosis from the shares.
func (r *Rechunk) classify() {
	r.Flagged = r.EventsPerRead >= CoalescedEventsPerRead || r.SubFloorShare >= CoalescedShare || r.CoalescedTTFTShare >= CoalescedShare
	switch {
	case r.OneReadShare >= PatternShare:
		r.Pattern = PatternOneRead
	case r.SteadyShare >= PatternShare:
		r.Pattern = PatternSteady
	case r.SteadyShare+r.BurstyShare >= PatternShare:
		r.Pattern = PatternBursty
	case r.Flagged && r.SubFloorShare >= CoalescedShare && r.EventsPerRead < CoalescedEventsPerRead:
		r.Pattern = PatternSubFloor
	default:
		r.Pattern = PatternNone
	}
	if r.Pattern != PatternNone {
		r.Flagged = true
	}
	r.Diagnosis = Diagnoses[r.Pattern]
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// ValueCount is one value of a dimension and its streams.
type ValueCount struct {
	Value   string `json:"value"`
	Streams int64  `json:"streams"`
}

// Values lists the values of dim (RawDimensions) among the streams matching
// f, most streams first, at most MaxGroups.
func Values(ctx context.Context, conn Conn, f Filter, dim string) ([]ValueCount, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	col, err := rawDim(dim)
	if err != nil {
		return nil, err
	}
	where, args := f.rawWhere()
	rows, err := conn.Query(ctx, "SELECT toString("+col+") AS v, count() AS n FROM "+streamsTable+" WHERE "+where+
		" GROUP BY v ORDER BY n DESC, v LIMIT "+strconv.Itoa(MaxGroups), args...)
	if err != nil {
		return nil, fmt.Errorf("query values of %s: %w", dim, err)
	}
	defer rows.Close()
	var out []ValueCount
	for rows.Next() {
		var (
			v ValueCount
			n uint64
		)
		if err := rows.Scan(&v.Value, &n); err != nil {
			return nil, fmt.Errorf("scan values of %s: %w", dim, err)
		}
		v.Streams = int64(n)
		out = append(out, v)
	}
	return out, rows.Err()
}
