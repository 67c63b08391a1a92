// Package otlp exports itlmon's aggregates as OpenTelemetry metrics over
// OTLP/HTTP (protobuf), for teams whose dashboards live in an OpenTelemetry
// backend.
//
// # What is sent
//
// Every closed minute of the rollup itl_rollup_1m (schema/003_rollup.sql),
// per site and per value of each exported dimension (region, browser and
// model: the dimensions with an OTLP attribute in collector/dimension), as
// delta-temporality points whose
// start and end are the minute's bounds:
//
//   - gen_ai.client.operation.time_to_first_chunk and
//     gen_ai.client.operation.time_per_output_chunk (the GenAI semantic
//     conventions' client metrics; seconds): exponential histograms at scale
//     5 (see "Histograms" below), from the rollup's TTFT and ITL histograms;
//   - itlmon.streams ({stream}; itlmon.stream.status = complete, aborted,
//     error or other: HTTP >= 400, still open);
//   - itlmon.stream.stalls ({stall}) and itlmon.stream.stalled_time (s), per
//     itlmon.stall.cause (origin, network, page, unknown): gaps over 200 ms;
//   - itlmon.stream.content_events ({event}) and itlmon.stream.reads
//     ({read}), and their ratio itlmon.stream.events_per_read (a gauge:
//     content events per network read in that minute; above 1 means the
//     stream was re-chunked on its way).
//
// Attributes: gen_ai.operation.name = "chat", itlmon.site, and one per
// exported dimension when its value is known (not empty):
// gen_ai.request.model, user_agent.name (the browser family),
// itlmon.region.
// The resource has service.name = "itlmon".
//
// # Histograms
//
// The rollup keeps base-2 exponential histograms at scale 5 in microseconds
// (wasm/hist), which is OpenTelemetry's exponential layout, so they are sent
// as exponential histograms, not in the conventions' advisory explicit
// buckets [0.01, 0.02, 0.04, ... 81.92] s: those have no edge at 200 ms (the
// stall threshold) or 250 ms, so a backend could not tell how many gaps
// stalled, and re-binning into them would turn a 2.19 % bound into buckets a
// factor of two wide. The seconds layout at scale 5 does not line up with
// the microseconds one (1 µs is not a power of two seconds), so each
// microsecond bucket's count goes to the seconds bucket holding its
// representative value: a quantile read from the exported histogram is
// within about 3.3 % of the exact one (the 1.09 % of the representative plus
// one seconds bucket, 2.19 %). Values of at most 1 µs are the zero bucket
// (zero_threshold 1e-6 s). Sum is estimated from the bucket representatives
// (within 1.09 %: the rollup keeps counts, not sums); max is exact for
// time_per_output_chunk (the rollup's largest gap) and absent for TTFT; min
// is absent.
//
// # Several collectors
//
// The points are read from ClickHouse, not from one collector's stream
// flow, so they cover every collector writing to that database (and a
// record resent to another collector after a lost ack is counted once: the
// writer dropped it before the rollup saw it). Every collector may run an
// exporter: each minute is claimed in itl_otlp_exports
// (schema/008_otlp_exports.sql) by an insert whose deduplication token is
// the minute's, so the engine keeps the first claim only, and only the
// exporter named in it sends the minute. A minute is read once it is closed,
// has settled (Config.Settle: rows land in the minute their batch was
// received, after the writer's batching delay), and every promotion window
// up to its end plus Settle that holds inbox rows is promoted, on every
// shard (itl_inbox against itl_promoted, by shardNum(): what ClickHouse
// says, whichever collector promotes), and sent as delta points
// whose start and end are the minute's bounds. A failed send is retried by
// the claiming exporter at the next interval, up to MaxBacklog minutes back;
// an exporter that dies between its claim and its send loses that minute
// (at most once, never twice). An exporter starts with the minute
// now - Settle falls in, or earlier at the minute after the last one any
// exporter claimed, so a restart leaves no gap within MaxBacklog. Rows
// written after their minute was sent (a ClickHouse outage replayed from the
// spool much later) are not sent; the rollup in ClickHouse stays the
// complete record.
package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"

	"github.com/itlmon/itlmon/collector/dimension"
	"github.com/itlmon/itlmon/wasm/hist"
)

// Defaults of Config.
const (
	DefaultInterval   = time.Minute
	DefaultSettle     = 5 * time.Second
	DefaultMaxBacklog = 60 // minutes
	DefaultTimeout    = 10 * time.Second
	// maxMinutesPerRequest bounds one request's size while catching up.
	maxMinutesPerRequest = 15
)

// Metric names and units.
const (
	MetricTTFT          = "gen_ai.client.operation.time_to_first_chunk"
	MetricITL           = "gen_ai.client.operation.time_per_output_chunk"
	MetricStreams       = "itlmon.streams"
	MetricStalls        = "itlmon.stream.stalls"
	MetricStalledTime   = "itlmon.stream.stalled_time"
	MetricContentEvents = "itlmon.stream.content_events"
	MetricReads         = "itlmon.stream.reads"
	MetricEventsPerRead = "itlmon.stream.events_per_read"
)

// Attribute keys; the dimensions' are collector/dimension's (Dimension.OTLP).
const (
	AttrOperation = "gen_ai.operation.name"
	AttrSite      = "itlmon.site"
	AttrStatus    = "itlmon.stream.status"
	AttrCause     = "itlmon.stall.cause"
)

// ScopeName is the instrumentation scope of every metric.
const ScopeName = "github.com/itlmon/itlmon/collector/otlp"

// Config configures an Exporter.
type Config struct {
	// Endpoint is the OTLP/HTTP metrics URL. A URL without a path gets the
	// signal path /v1/metrics, as OTEL_EXPORTER_OTLP_ENDPOINT does.
	Endpoint string
	// Conn reads the rollup (a clickhouse-go connection).
	Conn Conn
	// Interval between looks for newly closed minutes (DefaultInterval).
	Interval time.Duration
	// Settle is how long after a minute ends it may be read, at the
	// earliest (DefaultSettle): the writer's batching delay. It is read once
	// the promotion has also caught up with its end plus Settle.
	Settle time.Duration
	// MaxBacklog is how many minutes back an export that keeps failing is
	// retried; older minutes are skipped and logged (DefaultMaxBacklog).
	MaxBacklog int
	// Client sends the requests (default: an http.Client with DefaultTimeout).
	Client *http.Client
	// Now is the clock (default time.Now).
	Now    func() time.Time
	Logger zerolog.Logger
}

// Conn is the part of a clickhouse-go connection the exporter uses.
type Conn interface {
	Query(ctx context.Context, query string, args ...any) (driver.Rows, error)
	Exec(ctx context.Context, query string, args ...any) error
}

// Exporter sends closed rollup minutes to an OTLP endpoint. Run it once;
// ExportDue is safe for concurrent use with it.
type Exporter struct {
	cfg      Config
	endpoint string

	id        string // this exporter in itl_otlp_exports
	mu        sync.Mutex
	next      time.Time // first minute not exported yet
	resumed   bool      // next was compared with the last claimed minute
	minutes   atomic.Uint64
	points    atomic.Uint64
	errs      atomic.Uint64
	skipped   atomic.Uint64
	elsewhere atomic.Uint64
}

// Stats are an Exporter's counters since New.
type Stats struct {
	Minutes uint64 // minutes exported (with or without streams)
	Points  uint64 // data points sent
	Errors  uint64 // failed exports (each retried)
	Skipped uint64 // minutes given up on: older than MaxBacklog while exports failed
	// Elsewhere: minutes another exporter claimed (and sends) first.
	Elsewhere uint64
}

// Stats returns the counters.
func (e *Exporter) Stats() Stats {
	return Stats{Minutes: e.minutes.Load(), Points: e.points.Load(), Errors: e.errs.Load(), Skipped: e.skipped.Load(),
		Elsewhere: e.elsewhere.Load()}
}

// New validates cfg and returns an Exporter whose first minute is the one
// cfg.Now() - cfg.Settle falls in, or, at its first export, the minute after
// the last one any exporter claimed when that is earlier (and within
// MaxBacklog). It does not touch ClickHouse.
func New(cfg Config) (*Exporter, error) {
	endpoint, err := metricsURL(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.Conn == nil {
		return nil, errors.New("otlp: no ClickHouse connection")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Settle == 0 {
		cfg.Settle = DefaultSettle
	}
	if cfg.MaxBacklog == 0 {
		cfg.MaxBacklog = DefaultMaxBacklog
	}
	if cfg.Interval < time.Second || cfg.Settle < 0 || cfg.MaxBacklog < 1 {
		return nil, fmt.Errorf("otlp: interval %v (at least 1s), settle %v, backlog %d: out of range", cfg.Interval, cfg.Settle, cfg.MaxBacklog)
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: DefaultTimeout}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	host, _ := os.Hostname()
	var rnd [6]byte
	rand.Read(rnd[:])
	e := &Exporter{cfg: cfg, endpoint: endpoint, id: host + "-" + hex.EncodeToString(rnd[:])}
	e.next = cfg.Now().Add(-cfg.Settle).UTC().Truncate(time.Minute)
	return e, nil
}

// ValidateEndpoint reports whether s is an OTLP/HTTP endpoint New accepts.
func ValidateEndpoint(s string) error {
	_, err := metricsURL(s)
	return err
}

// metricsURL checks an OTLP/HTTP endpoint and adds /v1/metrics to a bare
// one.
func metricsURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("otlp endpoint: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("otlp endpoint %q: want http(s)://host[:port][/path]", s)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/metrics"
	}
	return u.String(), nil
}

// Run exports every Interval until ctx ends. Failures are logged once per
// run of failures and retried.
func (e *Exporter) Run(ctx context.Context) {
	runEvery(ctx, e.cfg.Interval, e.ExportDue, e.cfg.Logger.With().Str("endpoint", e.endpoint).Logger())
}

// runEvery calls export every interval until ctx ends, logging the first
// failure of a run of failures and the recovery after it. It is Run's
// timing apart from ClickHouse and the receiver (tested on a fake clock).
func runEvery(ctx context.Context, interval time.Duration, export func(context.Context) (int, error), log zerolog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := export(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil && !failing:
			log.Warn().Err(err).Msg("otlp export failed; retrying every interval")
			failing = true
		case err == nil && failing:
			log.Info().Int("minutes", n).Msg("otlp export recovered")
			failing = false
		}
	}
}

// ExportDue exports the minutes that closed and settled since the last
// export, oldest first, at most maxMinutesPerRequest per request, and
// returns how many minutes it sent. Each minute is claimed first
// (itl_otlp_exports): one claimed by another exporter is skipped. A minute
// is sent even when it holds no streams (then it adds no points). On an
// error the minutes not sent stay due (and stay this exporter's).
func (e *Exporter) ExportDue(ctx context.Context) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	end := e.cfg.Now().Add(-e.cfg.Settle).UTC().Truncate(time.Minute) // first minute not settled
	oldest := end.Add(-time.Duration(e.cfg.MaxBacklog) * time.Minute)
	if !e.resumed {
		last, err := lastClaimed(ctx, e.cfg.Conn)
		if err != nil {
			e.errs.Add(1)
			return 0, err
		}
		if !last.IsZero() && !last.Before(oldest) && last.Add(time.Minute).Before(e.next) {
			e.next = last.Add(time.Minute) // go on where the exporters stopped
		}
		e.resumed = true
	}
	if e.next.Before(oldest) {
		e.cfg.Logger.Warn().Time("from", e.next).Time("to", oldest).Msg("otlp export: minutes older than the backlog skipped")
		e.skipped.Add(uint64(oldest.Sub(e.next) / time.Minute))
		e.next = oldest
	}
	if e.next.Before(end) {
		// Only minutes whose records are promoted: the first window not
		// promoted bounds them.
		w, ok, err := firstUnpromoted(ctx, e.cfg.Conn, e.next, end.Add(e.cfg.Settle))
		if err != nil {
			e.errs.Add(1)
			return 0, err
		}
		if ok {
			end = minTime(end, w.Add(-e.cfg.Settle).Truncate(time.Minute))
		}
	}
	sent := 0
	for e.next.Before(end) {
		to := e.next.Add(maxMinutesPerRequest * time.Minute)
		if to.After(end) {
			to = end
		}
		mine, someMine := map[time.Time]bool{}, false
		for m := e.next; m.Before(to); m = m.Add(time.Minute) {
			ok, err := e.claim(ctx, m)
			if err != nil {
				e.errs.Add(1)
				return sent, err
			}
			mine[m], someMine = ok, someMine || ok
		}
		var rows []row
		if someMine {
			all, err := readRollup(ctx, e.cfg.Conn, e.next, to)
			if err != nil {
				e.errs.Add(1)
				return sent, err
			}
			for _, r := range all {
				if mine[r.minute.UTC()] {
					rows = append(rows, r)
				}
			}
		}
		if len(rows) > 0 {
			body, points := encodeRequest(rows)
			if err := e.send(ctx, body); err != nil {
				e.errs.Add(1)
				return sent, err
			}
			e.points.Add(uint64(points))
		}
		for _, ok := range mine {
			if ok {
				sent++
				e.minutes.Add(1)
			} else {
				e.elsewhere.Add(1)
			}
		}
		e.next = to
	}
	return sent, nil
}

// firstUnpromoted returns the first promotion window in [from, to) that
// holds inbox rows and is not promoted yet on its shard, false when every
// such window is. The promoter promotes a shard's windows in order, so the
// earlier ones are promoted too. Through a cluster's Distributed tables,
// shardNum() tells the shards apart; on a single server it is 0.
func firstUnpromoted(ctx context.Context, conn Conn, from, to time.Time) (time.Time, bool, error) {
	type win struct {
		shard uint32
		at    int64 // unix seconds
	}
	read := func(query string) (map[win]bool, error) {
		rs, err := conn.Query(ctx, query, from.UnixMicro(), to.UnixMicro())
		if err != nil {
			return nil, fmt.Errorf("read promotion windows: %w", err)
		}
		defer rs.Close()
		out := map[win]bool{}
		for rs.Next() {
			var w win
			var at time.Time
			if err := rs.Scan(&w.shard, &at); err != nil {
				return nil, fmt.Errorf("read promotion windows: %w", err)
			}
			w.at = at.Unix()
			out[w] = true
		}
		return out, rs.Err()
	}
	inbox, err := read(`SELECT DISTINCT shardNum(), toDateTime(toStartOfSecond(ingested_at), 'UTC') FROM itl_inbox
		WHERE ingested_at >= fromUnixTimestamp64Micro(?) AND ingested_at < fromUnixTimestamp64Micro(?)`)
	if err != nil {
		return time.Time{}, false, err
	}
	promoted, err := read(`SELECT DISTINCT shardNum(), promoted_window FROM itl_promoted
		WHERE promoted_window >= toDateTime(fromUnixTimestamp64Micro(?)) AND promoted_window < fromUnixTimestamp64Micro(?)`)
	if err != nil {
		return time.Time{}, false, err
	}
	first, found := int64(0), false
	for w := range inbox {
		if !promoted[w] && (!found || w.at < first) {
			first, found = w.at, true
		}
	}
	return time.Unix(first, 0).UTC(), found, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// claimToken is the insert_deduplication_token of a minute's claim: every
// exporter's claim of that minute carries the same one, so the engine keeps
// only the first.
func claimToken(m time.Time) string { return "itlmon-otlp-" + strconv.FormatInt(m.Unix(), 10) }

// claim records this exporter's claim of minute m in itl_otlp_exports and
// reports whether the minute is this exporter's: the first claim stored,
// its own included when it claims again after a failed send.
func (e *Exporter) claim(ctx context.Context, m time.Time) (bool, error) {
	cctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_deduplication_token": claimToken(m)}))
	if err := e.cfg.Conn.Exec(cctx, "INSERT INTO itl_otlp_exports (minute, exporter, claimed_at) VALUES (?, ?, ?)",
		m, e.id, e.cfg.Now().UTC()); err != nil {
		return false, fmt.Errorf("claim %s: %w", m.Format(time.RFC3339), err)
	}
	rs, err := e.cfg.Conn.Query(ctx, "SELECT argMin(exporter, claimed_at), count() FROM itl_otlp_exports WHERE minute = ?", m)
	if err != nil {
		return false, fmt.Errorf("read claim %s: %w", m.Format(time.RFC3339), err)
	}
	defer rs.Close()
	var (
		owner string
		n     uint64
	)
	if rs.Next() {
		if err := rs.Scan(&owner, &n); err != nil {
			return false, fmt.Errorf("read claim %s: %w", m.Format(time.RFC3339), err)
		}
	}
	if err := rs.Err(); err != nil {
		return false, fmt.Errorf("read claim %s: %w", m.Format(time.RFC3339), err)
	}
	if n == 0 {
		return false, fmt.Errorf("claim %s: not stored", m.Format(time.RFC3339))
	}
	return owner == e.id, nil
}

// lastClaimed is the latest minute any exporter claimed, zero when none.
func lastClaimed(ctx context.Context, conn Conn) (time.Time, error) {
	rs, err := conn.Query(ctx, "SELECT max(minute), count() FROM itl_otlp_exports")
	if err != nil {
		return time.Time{}, fmt.Errorf("read claims: %w", err)
	}
	defer rs.Close()
	var (
		last time.Time
		n    uint64
	)
	if rs.Next() {
		if err := rs.Scan(&last, &n); err != nil {
			return time.Time{}, fmt.Errorf("read claims: %w", err)
		}
	}
	if err := rs.Err(); err != nil {
		return time.Time{}, fmt.Errorf("read claims: %w", err)
	}
	if n == 0 {
		return time.Time{}, nil
	}
	return last.UTC(), nil
}

// send posts one ExportMetricsServiceRequest. 2xx is success; the response
// body is read and dropped (a partial success is the backend's to report).
func (e *Exporter) send(ctx context.Context, body []byte) error {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(body)
	w.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.endpoint, &gz)
	if err != nil {
		return fmt.Errorf("otlp request: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := e.cfg.Client.Do(req)
	if err != nil {
		return fmt.Errorf("otlp post: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("otlp post: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// row is one (minute, site, exported dimensions) of the rollup.
type row struct {
	minute               time.Time
	site                 string
	dims                 []string // the values of exported, in its order
	streams, completed   uint64
	aborted, failed      uint64
	stalls               [4]uint64 // by cause, in causes order
	stalledUs            [4]uint64
	contentEvents, reads uint64
	maxGapUs             uint32
	itlIdx               []int32
	itlCnt               []uint64
	itlZero              uint64
	ttftIdx              []int32
	ttftCnt              []uint64
	ttftZero             uint64
}

// causes are the stall causes the rollup counts, as wasm/meter names them.
var causes = [4]string{"origin", "network", "page", "unknown"}

// exported are the dimensions the export groups by and names in attributes.
var exported = dimension.OTLP()

// rollupQuery reads the closed minutes per site and exported dimension.
var rollupQuery = func() string {
	var sel, by strings.Builder
	for _, d := range exported {
		sel.WriteString(", toString(" + d.Column + ")")
		by.WriteString(", " + d.Column)
	}
	return strings.NewReplacer("{sel}", sel.String(), "{by}", by.String()).Replace(rollupQueryTemplate)
}()

const rollupQueryTemplate = `SELECT minute, toString(site){sel},
	sum(streams), sum(completed), sum(aborted), sum(failed),
	sum(stalls_origin), sum(stalls_network), sum(stalls_page), sum(stalls_unknown),
	sum(stalled_us_origin), sum(stalled_us_network), sum(stalled_us_page), sum(stalled_us_unknown),
	sum(content_events), sum(reads), max(max_gap_us),
	tupleElement(sumMap(itl), 1), tupleElement(sumMap(itl), 2), sum(itl_zero),
	tupleElement(sumMap(ttft), 1), tupleElement(sumMap(ttft), 2), sum(ttft_zero)
FROM itl_rollup_1m
WHERE minute >= ? AND minute < ?
GROUP BY minute, site{by}
ORDER BY minute, site{by}`

func readRollup(ctx context.Context, conn Conn, from, to time.Time) ([]row, error) {
	rs, err := conn.Query(ctx, rollupQuery, from, to)
	if err != nil {
		return nil, fmt.Errorf("query rollup: %w", err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		r := row{dims: make([]string, len(exported))}
		dest := []any{&r.minute, &r.site}
		for i := range r.dims {
			dest = append(dest, &r.dims[i])
		}
		if err := rs.Scan(append(dest, &r.streams, &r.completed, &r.aborted, &r.failed,
			&r.stalls[0], &r.stalls[1], &r.stalls[2], &r.stalls[3],
			&r.stalledUs[0], &r.stalledUs[1], &r.stalledUs[2], &r.stalledUs[3],
			&r.contentEvents, &r.reads, &r.maxGapUs,
			&r.itlIdx, &r.itlCnt, &r.itlZero, &r.ttftIdx, &r.ttftCnt, &r.ttftZero)...); err != nil {
			return nil, fmt.Errorf("scan rollup: %w", err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read rollup: %w", err)
	}
	return out, nil
}

// encodeRequest builds the ExportMetricsServiceRequest of rows, one
// ResourceMetrics (field 1) holding every metric, and counts its data
// points. The request message is written by hand (it is that one repeated
// field) so the collector does not link the gRPC service packages.
func encodeRequest(rows []row) ([]byte, int) {
	ms := metrics(rows)
	points := 0
	for _, m := range ms {
		switch d := m.Data.(type) {
		case *metricspb.Metric_ExponentialHistogram:
			points += len(d.ExponentialHistogram.DataPoints)
		case *metricspb.Metric_Sum:
			points += len(d.Sum.DataPoints)
		case *metricspb.Metric_Gauge:
			points += len(d.Gauge.DataPoints)
		}
	}
	rm := &metricspb.ResourceMetrics{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "itlmon")}},
		ScopeMetrics: []*metricspb.ScopeMetrics{{
			Scope:   &commonpb.InstrumentationScope{Name: ScopeName},
			Metrics: ms,
		}},
	}
	b, err := proto.Marshal(rm)
	if err != nil {
		panic("BUG: otlp: marshal: " + err.Error())
	}
	out := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendBytes(out, b), points
}

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func attrs(r *row, extra ...*commonpb.KeyValue) []*commonpb.KeyValue {
	a := []*commonpb.KeyValue{str(AttrOperation, "chat"), str(AttrSite, r.site)}
	for i, v := range r.dims {
		if v != "" {
			a = append(a, str(exported[i].OTLP, v))
		}
	}
	return append(a, extra...)
}

func metrics(rows []row) []*metricspb.Metric {
	ttft := &metricspb.ExponentialHistogram{AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA}
	itl := &metricspb.ExponentialHistogram{AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA}
	sum := func() *metricspb.Sum {
		return &metricspb.Sum{AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA, IsMonotonic: true}
	}
	streams, stalls, stalled, events, reads := sum(), sum(), sum(), sum(), sum()
	perRead := &metricspb.Gauge{}
	for i := range rows {
		r := &rows[i]
		start, end := uint64(r.minute.UnixNano()), uint64(r.minute.Add(time.Minute).UnixNano())
		if p := expHistogram(r.ttftZero, r.ttftIdx, r.ttftCnt, 0); p != nil {
			p.StartTimeUnixNano, p.TimeUnixNano, p.Attributes = start, end, attrs(r)
			ttft.DataPoints = append(ttft.DataPoints, p)
		}
		if p := expHistogram(r.itlZero, r.itlIdx, r.itlCnt, float64(r.maxGapUs)); p != nil {
			p.StartTimeUnixNano, p.TimeUnixNano, p.Attributes = start, end, attrs(r)
			itl.DataPoints = append(itl.DataPoints, p)
		}
		intPoint := func(v uint64, extra ...*commonpb.KeyValue) *metricspb.NumberDataPoint {
			return &metricspb.NumberDataPoint{StartTimeUnixNano: start, TimeUnixNano: end, Attributes: attrs(r, extra...),
				Value: &metricspb.NumberDataPoint_AsInt{AsInt: int64(v)}}
		}
		other := r.streams - min(r.streams, r.completed+r.aborted+r.failed)
		for _, s := range []struct {
			name string
			n    uint64
		}{{"complete", r.completed}, {"aborted", r.aborted}, {"error", r.failed}, {"other", other}} {
			if s.n > 0 {
				streams.DataPoints = append(streams.DataPoints, intPoint(s.n, str(AttrStatus, s.name)))
			}
		}
		for c, name := range causes {
			if r.stalls[c] > 0 || r.stalledUs[c] > 0 {
				stalls.DataPoints = append(stalls.DataPoints, intPoint(r.stalls[c], str(AttrCause, name)))
				p := intPoint(0, str(AttrCause, name))
				p.Value = &metricspb.NumberDataPoint_AsDouble{AsDouble: float64(r.stalledUs[c]) / 1e6}
				stalled.DataPoints = append(stalled.DataPoints, p)
			}
		}
		if r.reads > 0 {
			events.DataPoints = append(events.DataPoints, intPoint(r.contentEvents))
			reads.DataPoints = append(reads.DataPoints, intPoint(r.reads))
			p := intPoint(0)
			p.StartTimeUnixNano = 0 // a gauge has no start
			p.Value = &metricspb.NumberDataPoint_AsDouble{AsDouble: float64(r.contentEvents) / float64(r.reads)}
			perRead.DataPoints = append(perRead.DataPoints, p)
		}
	}
	var out []*metricspb.Metric
	add := func(name, desc, unit string, data any, n int) {
		if n == 0 {
			return
		}
		m := &metricspb.Metric{Name: name, Description: desc, Unit: unit}
		switch d := data.(type) {
		case *metricspb.ExponentialHistogram:
			m.Data = &metricspb.Metric_ExponentialHistogram{ExponentialHistogram: d}
		case *metricspb.Sum:
			m.Data = &metricspb.Metric_Sum{Sum: d}
		case *metricspb.Gauge:
			m.Data = &metricspb.Metric_Gauge{Gauge: d}
		}
		out = append(out, m)
	}
	add(MetricTTFT, "Time to first token as the reader saw it: t0 (just before the page's fetch) to the first event that carries output content.", "s", ttft, len(ttft.DataPoints))
	add(MetricITL, "Inter-token latency as the reader saw it: one sample per gap between consecutive content events after the first.", "s", itl, len(itl.DataPoints))
	add(MetricStreams, "Streamed answers measured in the browser, by how they ended.", "{stream}", streams, len(streams.DataPoints))
	add(MetricStalls, "Gaps over 200 ms between content events, by cause.", "{stall}", stalls, len(stalls.DataPoints))
	add(MetricStalledTime, "Time inside stalls (gaps over 200 ms), by cause.", "s", stalled, len(stalled.DataPoints))
	add(MetricContentEvents, "Content events (token events) received.", "{event}", events, len(events.DataPoints))
	add(MetricReads, "Network reads of streamed bodies.", "{read}", reads, len(reads.DataPoints))
	add(MetricEventsPerRead, "Content events per network read in the minute (above 1: the stream was re-chunked on its way).", "{event}/{read}", perRead, len(perRead.DataPoints))
	return out
}

// Scale is the scale of the exported exponential histograms.
const Scale = hist.Scale

// usToS converts a microsecond bucket index's representative to the index
// of the seconds bucket (same scale) holding it. hist.BucketIndex takes
// values above 1: a representative of at most 1 s (at least ~1e-6 s) is
// first multiplied by 2^20, which shifts indexes by exactly 20·2^Scale.
func usToS(i int32) int32 {
	const shift = 20
	v := hist.BucketValue(i) * 1e-6
	if v > 1 {
		return hist.BucketIndex(v)
	}
	return hist.BucketIndex(v*(1<<shift)) - shift<<Scale
}

// expHistogram turns a rollup histogram (zero count, ascending indexes and
// counts, microseconds) into an OTLP data point in seconds, or nil when it
// is empty. maxUs > 0 is the exact largest value.
func expHistogram(zero uint64, idx []int32, cnt []uint64, maxUs float64) *metricspb.ExponentialHistogramDataPoint {
	var n uint64 = zero
	var sumS float64
	lo, hi := int32(math.MaxInt32), int32(math.MinInt32)
	for k, i := range idx {
		if cnt[k] == 0 {
			continue
		}
		n += cnt[k]
		sumS += hist.BucketValue(i) * 1e-6 * float64(cnt[k])
		j := usToS(i)
		lo, hi = min(lo, j), max(hi, j)
	}
	if n == 0 {
		return nil
	}
	p := &metricspb.ExponentialHistogramDataPoint{Count: n, Sum: &sumS, Scale: Scale, ZeroCount: zero,
		ZeroThreshold: hist.ZeroThresholdMicros * 1e-6}
	if hi >= lo {
		counts := make([]uint64, hi-lo+1)
		for k, i := range idx {
			counts[usToS(i)-lo] += cnt[k]
		}
		p.Positive = &metricspb.ExponentialHistogramDataPoint_Buckets{Offset: lo, BucketCounts: counts}
	}
	if maxUs > 0 {
		m := maxUs * 1e-6
		p.Max = &m
	}
	return p
}
