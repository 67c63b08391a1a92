package query

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/itlmon/itlmon/collector/dimension"
)

// The raw table. Re-chunking per API origin and HTTP protocol, the worst
// streams, one stream and the per-stream samples of a comparison read it
// (the rollup has neither those dimensions nor per-stream values), always
// bounded by site and time, which lead its ORDER BY key.
const streamsTable = "itl_streams"

// rawDimColumn maps every dimension of the registry to its itl_streams
// column: the rollup's (Dimensions) plus those only the raw rows have, like
// the fetched URL's origin (the API origin) and the HTTP protocol.
var rawDimColumn = func() map[string]string {
	m := map[string]string{}
	for _, d := range dimension.All() {
		m[d.Key] = d.Column
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

// Read patterns (Rechunk.Pattern): what the way a segment's streams were
// read says about what re-chunked them. The e2e tests check one_read, steady
// and held against the real re-chunkers that produce them (nginx buffering
// with gzip or brotli, a short answer; nginx buffering an unchunked upstream
// response, and buffering with gzip, a long answer; a proxy that holds
// reads), and page against a busy page. No re-chunker available to them
// produces bursty: nginx's gzip and brotli encoders flush per event when
// nginx does not buffer, and when it does they hold the whole answer
// (one_read) or, gzip on a long answer, pass it on in blocks (steady);
// klauspost/compress's gzhttp flushes its encoder on every Flush. The rule
// is checked by unit tests only.
const (
	PatternNone    = ""         // reads carry about one event each
	PatternOneRead = "one_read" // the whole answer in one read at the end: a proxy that holds the response
	PatternSteady  = "steady"   // several events in every read, evenly: a buffer passed on only when full
	PatternPage    = "page"     // backlogs read at once while the page was busy (page stalls): not the path
	PatternHeld    = "held"     // backlogs after the path held the bytes (network stalls): a congested or stalling hop
	PatternBursty  = "bursty"   // backlogs without stalls: something on the path batches events on its own schedule
	PatternOrigin  = "origin"   // the origin's own timelines show the batching: it emitted several events per flush
)

// OriginBurstShare: an origin timeline (the origin middleware's) shows
// batching when at least this share of its content gaps are zero-length:
// the event was emitted in the same flush as the one before it. A smooth
// origin has none (one event per flush).
const OriginBurstShare = CoalescedShare

// originSlack bounds the origin timelines a re-chunking query reads around
// its range: a timeline reaches the collector within the join's TTL (2
// minutes by default) of its client record.
const originSlack = 5 * time.Minute

// Diagnoses per pattern: what the read pattern says and its usual fix. The
// nginx behaviour they name is nginx 1.22's, as measured in Chromium and
// at the HTTP level (docs/dashboard.md, "Re-chunking diagnoses").
var Diagnoses = map[string]string{
	PatternOneRead: "The whole answer arrives in one read at the end: a proxy holds the response until it ends (nginx with " +
		"`proxy_buffering on` and gzip or brotli on `text/event-stream`, whose encoder holds an answer of up to thousands of " +
		"events; or a proxy buffer larger than the answer). Fix: send `X-Accel-Buffering: no` from the origin, or " +
		"`proxy_buffering off` (nginx) for the streaming route; unbuffered, nginx flushes its encoder per event.",
	PatternSteady: "Reads carry several events each, evenly, one read each time a buffer fills: a proxy passes the response on " +
		"only in full buffers. nginx with `proxy_buffering on` does so when the upstream response is not chunked (its default " +
		"`proxy_http_version 1.0`), one `proxy_buffers` buffer (4 or 8 KB) at a time; with gzip on `text/event-stream`, a long " +
		"answer comes one block of compressed output (about 16 KB, thousands of events) at a time. Fix: send " +
		"`X-Accel-Buffering: no` from the origin, or `proxy_buffering off` for the route (nginx then passes each chunk on and " +
		"flushes its gzip encoder per event); keeping nginx's buffering, `proxy_http_version 1.1` and no gzip on " +
		"`text/event-stream`.",
	PatternPage: "Events pile up and are read at once while the page's main thread is busy (the stalls are the page's): " +
		"nothing on the path re-chunks. Fix: break up long tasks or move them off the main thread.",
	PatternHeld: "Now and then the path holds the bytes, then delivers the backlog in one read (the stalls are the network's " +
		"while the origin was on time): a congested link or a proxy that stalls. Fix: find the hop (the origin's and edge's " +
		"times tell which side); check the proxy's buffers and upstream keep-alive, and the client's network.",
	PatternOrigin: "The origin itself sends several events at once: its own timelines (the origin middleware's) show the " +
		"events emitted in batches, several per flush, and the page reads them as they were sent. Nothing on the path " +
		"re-chunks. Fix: in the origin, write and flush each event as the model produces it (no batching of tokens, no " +
		"buffered writer left unflushed). When the origin relays a model server, its timelines show what it passed on: " +
		"batches the model server sent arrive batched there too.",
	PatternBursty: "Events arrive in uneven bursts without stalls while the origin sends them one by one: something on the path " +
		"batches them on its own schedule (a proxy or a compression encoder that flushes by size or time, not per event). " +
		"Fix: find the hop (the origin's and edge's times tell which side) and make it pass each event on: no buffering for " +
		"the route, and no compression of `text/event-stream` unless the encoder is flushed per event.",
}

// PathConfirmed is added to the diagnosis of a path's pattern when the
// origin's own timelines show it sent the events one by one.
const PathConfirmed = " The origin's own timelines (the origin middleware's) show it emitted the events one by one: " +
	"the re-chunking happened after the origin, on the path."

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
	// one read; several events in every read, evenly (1.5+ per read, the
	// largest read at most twice the mean); a backlog now and then (a read
	// of 3+ events, more than twice the mean).
	OneReadShare float64 `json:"one_read_share"`
	SteadyShare  float64 `json:"steady_share"`
	BurstyShare  float64 `json:"bursty_share"`
	// PageStallShare and NetworkStallShare: shares of those streams with
	// a stall attributed to the page, to the network.
	PageStallShare    float64 `json:"page_stall_share"`
	NetworkStallShare float64 `json:"network_stall_share"`
	// OriginBurstShare and OriginSmoothShare: shares of those streams
	// joined with an origin timeline (the origin middleware's) whose origin
	// emitted its content in batches (OriginBurstShare of its gaps or more
	// zero-length), or one event per flush.
	OriginBurstShare  float64 `json:"origin_burst_share"`
	OriginSmoothShare float64 `json:"origin_smooth_share"`
	// Flagged: the segment coalesces (EventsPerRead, SubFloorShare or
	// CoalescedTTFTShare beyond its threshold).
	Flagged   bool   `json:"flagged"`
	Pattern   string `json:"pattern"`
	Diagnosis string `json:"diagnosis,omitempty"`
}

// The re-chunking rollup (schema/015_rechunk_1h.sql): rechunkSums per hour
// and per value of one dimension at a time (dim and value; the empty dim
// counts every stream of the site), complete from the hour rechunkFromTable
// holds.
const (
	rechunkTable     = "itl_rechunk_1h"
	rechunkFromTable = "itl_rechunk_1h_from"
)

// rechunkSums are the counters a Rechunk is computed from: sums over
// streams, which add across hours and tables.
type rechunkSums struct {
	streams, events, reads, bytes uint64
	subFloorGaps                  float64 // sub_floor_share times the gaps, per stream
	gaps, ttftNetwork, withTTFT   uint64
	// multi: streams with 3+ content events; the rest count those streams.
	multi, oneRead, steady, bursty, pageStalled, networkStalled uint64
	originBurst, originSmooth                                   uint64
}

func (s *rechunkSums) add(o *rechunkSums) {
	s.streams += o.streams
	s.events += o.events
	s.reads += o.reads
	s.bytes += o.bytes
	s.subFloorGaps += o.subFloorGaps
	s.gaps += o.gaps
	s.ttftNetwork += o.ttftNetwork
	s.withTTFT += o.withTTFT
	s.multi += o.multi
	s.oneRead += o.oneRead
	s.steady += o.steady
	s.bursty += o.bursty
	s.pageStalled += o.pageStalled
	s.networkStalled += o.networkStalled
	s.originBurst += o.originBurst
	s.originSmooth += o.originSmooth
}

// dest is where a row of the rollup or of the raw read scans into, in the
// columns' order (rechunkColumns).
func (s *rechunkSums) dest() []any {
	return []any{&s.streams, &s.events, &s.reads, &s.bytes, &s.subFloorGaps, &s.gaps, &s.ttftNetwork, &s.withTTFT,
		&s.multi, &s.oneRead, &s.steady, &s.bursty, &s.pageStalled, &s.networkStalled, &s.originBurst, &s.originSmooth}
}

// rechunkColumns are itl_rechunk_1h's counters, in rechunkSums.dest's order.
var rechunkColumns = []string{"streams", "events", "reads", "bytes", "sub_floor_gaps", "gaps", "ttft_network", "with_ttft",
	"multi", "one_read", "steady", "bursty", "page_stalled", "network_stalled", "origin_burst", "origin_smooth"}

// rechunk is the picture of one value from its sums.
func (s *rechunkSums) rechunk(key string) Rechunk {
	r := Rechunk{Key: key, Streams: int64(s.streams)}
	r.EventsPerRead = ratio(float64(s.events), float64(s.reads))
	r.BytesPerRead = ratio(float64(s.bytes), float64(s.reads))
	r.SubFloorShare = ratio(s.subFloorGaps, float64(s.gaps))
	r.CoalescedTTFTShare = ratio(float64(s.ttftNetwork), float64(s.withTTFT))
	multi := float64(s.multi)
	r.OneReadShare = ratio(float64(s.oneRead), multi)
	r.SteadyShare = ratio(float64(s.steady), multi)
	r.BurstyShare = ratio(float64(s.bursty), multi)
	r.PageStallShare = ratio(float64(s.pageStalled), multi)
	r.NetworkStallShare = ratio(float64(s.networkStalled), multi)
	r.OriginBurstShare = ratio(float64(s.originBurst), multi)
	r.OriginSmoothShare = ratio(float64(s.originSmooth), multi)
	r.classify()
	return r
}

// RechunkBy is Rechunk per value of dim (RawDimensions) of the streams
// matching f, most streams first, at most MaxGroups.
//
// When the read names at most one dimension (its filter and dim together),
// the whole hours of the range from itl_rechunk_1h_from on come from
// itl_rechunk_1h, the rest (the partial hours at either end, the hours
// before the rollup was complete, every hour of a read naming two
// dimensions) from itl_streams joined with the origin timelines; the sums
// of the two are the answer itl_streams alone gives.
func RechunkBy(ctx context.Context, conn Conn, f Filter, dim string) ([]Rechunk, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	col, err := rawDim(dim)
	if err != nil {
		return nil, err
	}
	hours, raw, err := rechunkSplit(ctx, conn, f, dim, nil)
	if err != nil {
		return nil, err
	}
	sums := map[string]*rechunkSums{}
	if hours.from.Before(hours.to) {
		if err := rechunkHours(ctx, conn, f, dim, hours, sums); err != nil {
			return nil, err
		}
	}
	if len(raw) > 0 {
		if err := rechunkRaw(ctx, conn, f, dim, col, raw, sums); err != nil {
			return nil, err
		}
	}
	out := make([]Rechunk, 0, len(sums))
	for key, s := range sums {
		out = append(out, s.rechunk(key))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Streams != out[j].Streams {
			return out[i].Streams > out[j].Streams
		}
		return out[i].Key < out[j].Key
	})
	if len(out) > MaxGroups {
		out = out[:MaxGroups]
	}
	return out, nil
}

// rechunkSplit splits f's range into the whole hours a read by dim takes
// from itl_rechunk_1h (empty unless the read names at most one dimension,
// f's filter and dim together, and the rollup is complete for some of
// them) and the ranges it takes from itl_streams. froms is completeFroms'
// answer for rechunkFromTable when the caller read it already, else nil.
func rechunkSplit(ctx context.Context, conn Conn, f Filter, dim string, froms map[string]time.Time) (hours timeRange, raw []timeRange, err error) {
	until := f.Until
	if until.IsZero() {
		until = time.Now()
	}
	raw = []timeRange{{f.Since.UTC(), until.UTC()}}
	if _, same := f.Where[dim]; len(f.Where) > 1 || len(f.Where) == 1 && !same {
		return hours, raw, nil
	}
	if froms == nil {
		if froms, err = completeFroms(ctx, conn, rechunkFromTable); err != nil {
			return hours, nil, err
		}
	}
	if from, ok := froms[rechunkFromTable]; ok {
		hours = timeRange{ceilHour(later(f.Since.UTC(), from)), until.UTC().Truncate(time.Hour)}
	}
	if !hours.from.Before(hours.to) {
		return timeRange{}, raw, nil
	}
	return hours, append(timeRange{f.Since.UTC(), hours.from}.orNone(), timeRange{hours.to, until.UTC()}.orNone()...), nil
}

// rechunkHours adds the sums of itl_rechunk_1h over the whole hours h per
// value of dim (f names no other dimension) to sums.
func rechunkHours(ctx context.Context, conn Conn, f Filter, dim string, h timeRange, sums map[string]*rechunkSums) error {
	sel := make([]string, len(rechunkColumns))
	for i, c := range rechunkColumns {
		sel[i] = "sum(" + c + ")"
	}
	q := "SELECT toString(value) AS key, " + strings.Join(sel, ", ") + " FROM " + rechunkTable +
		" WHERE site = ? AND dim = ? AND hour >= ? AND hour < ?"
	args := []any{f.Site, dim, h.from, h.to}
	if v, ok := f.Where[dim]; ok {
		q += " AND value = ?"
		args = append(args, v)
	}
	return scanRechunk(ctx, conn, "rechunk by "+dim, q+" GROUP BY key", args, sums)
}

// rechunkRaw adds the sums of the itl_streams rows matching f within
// ranges per value of col to sums, each stream joined with its origin
// timelines (itl_origin's version 1 rows carry the browser's stream id)
// received within originSlack of the ranges. GLOBAL: on a cluster the
// joined table is read once, not per shard.
func rechunkRaw(ctx context.Context, conn Conn, f Filter, dim, col string, ranges []timeRange, sums map[string]*rechunkSums) error {
	const multi = "content_events >= 3"
	around := make([]timeRange, len(ranges))
	for i, r := range ranges {
		around[i] = timeRange{r.from.Add(-originSlack), r.to.Add(originSlack)}
	}
	oCond, oArgs := rangesCond("received_at", around)
	originJoin := "GLOBAL LEFT JOIN (SELECT stream_id, 1 AS o_joined, " +
		"max(content_events >= 3 AND itl_zero >= " + ftoa(OriginBurstShare) + " * (content_events - 1)) AS o_burst " +
		"FROM itl_origin WHERE site = ? AND version = 1 AND " + oCond + " GROUP BY stream_id) AS o USING (stream_id)"
	cond, cArgs := rangesCond("received_at", ranges)
	dims, dArgs := f.dims()
	args := append(append(append(append([]any{f.Site}, oArgs...), f.Site), cArgs...), dArgs...)
	q := "SELECT toString(" + col + ") AS key, count(), " +
		"sum(events), sum(reads), sum(bytes), " +
		"sumIf(toFloat64(sub_floor_share) * (content_events - 1), content_events >= 2), toUInt64(sumIf(content_events - 1, content_events >= 2)), " +
		"countIf(ttft_cause = 'network'), countIf(ttft_us IS NOT NULL), " +
		"countIf(" + multi + "), " +
		"countIf(" + multi + " AND max_events_per_read >= content_events), " +
		"countIf(" + multi + " AND max_events_per_read < content_events AND events_per_read >= " + ftoa(CoalescedEventsPerRead) + " AND max_events_per_read <= 2 * events_per_read), " +
		"countIf(" + multi + " AND max_events_per_read < content_events AND max_events_per_read >= 3 AND max_events_per_read > 2 * events_per_read), " +
		"countIf(" + multi + " AND stalls_page > 0), countIf(" + multi + " AND stalls_network > 0), " +
		"countIf(" + multi + " AND o_burst = 1), countIf(" + multi + " AND o_joined = 1 AND o_burst = 0) " +
		"FROM " + streamsTable + " " + originJoin + " WHERE site = ? AND " + cond + dims + " GROUP BY key"
	return scanRechunk(ctx, conn, "rechunk by "+dim, q, args, sums)
}

// scanRechunk runs q, whose rows are a key and rechunkSums' columns, and
// adds each row to sums.
func scanRechunk(ctx context.Context, conn Conn, what, q string, args []any, sums map[string]*rechunkSums) error {
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("query %s: %w", what, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			key string
			s   rechunkSums
		)
		if err := rows.Scan(append([]any{&key}, s.dest()...)...); err != nil {
			return fmt.Errorf("scan %s: %w", what, err)
		}
		if sums[key] == nil {
			sums[key] = &rechunkSums{}
		}
		sums[key].add(&s)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	return nil
}

// classify sets Flagged, Pattern and Diagnosis from the shares. A pattern
// names the segment when PatternShare of its streams show it (bursts only
// when the segment's reads coalesce too). The origin's own timelines come
// first: when they show the batching, the origin sent the events as the
// page read them, whatever the reads look like. Otherwise backlogs are told
// apart by the stalls beside them (the page's or the network's), as the
// stall attribution does for single gaps, and a pattern of the path says so
// when the origin's timelines show it emitted one event at a time.
func (r *Rechunk) classify() {
	r.Flagged = r.EventsPerRead >= CoalescedEventsPerRead || r.SubFloorShare >= CoalescedShare || r.CoalescedTTFTShare >= CoalescedShare
	backlogs := r.SteadyShare+r.BurstyShare >= PatternShare || r.SubFloorShare >= CoalescedShare
	// Bursts name a re-chunker only where the reads coalesce: a fast stream
	// delivered per event still has the odd read of a few events (at 0.2-1
	// ms a chunk behind nginx flushing brotli per event: 1.1 events a read,
	// reads of up to 39, 9-13 % of gaps below the floor).
	coalesced := r.EventsPerRead >= CoalescedEventsPerRead || r.SubFloorShare >= CoalescedShare
	switch {
	case r.OriginBurstShare >= PatternShare:
		r.Pattern = PatternOrigin
	case r.OneReadShare >= PatternShare:
		r.Pattern = PatternOneRead
	case r.SteadyShare >= PatternShare:
		r.Pattern = PatternSteady
	case backlogs && r.PageStallShare > 0 && r.PageStallShare >= r.NetworkStallShare:
		r.Pattern = PatternPage
	case backlogs && r.NetworkStallShare > 0:
		r.Pattern = PatternHeld
	case coalesced && r.BurstyShare >= PatternShare:
		r.Pattern = PatternBursty
	default:
		r.Pattern = PatternNone
	}
	if r.Pattern != PatternNone {
		r.Flagged = true
	}
	r.Diagnosis = Diagnoses[r.Pattern]
	switch r.Pattern {
	case PatternOneRead, PatternSteady, PatternHeld, PatternBursty:
		if r.OriginSmoothShare >= PatternShare {
			r.Diagnosis += PathConfirmed
		}
	}
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
