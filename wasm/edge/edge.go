// Command edge is itlmon's third vantage point: a Cloudflare Worker that
// sits between the browser and the origin of a chat API and measures the
// token streams that pass through it, with the same parser the browser module
// and the origin middleware use (wasm/meter), written in Go and compiled to
// WebAssembly.
//
// The Worker is two halves. worker.mjs (JavaScript) owns the requests and
// responses: it proxies every request to the origin and returns the origin's
// response as the runtime gave it (status, headers, bytes; no header is ever
// parsed or rebuilt), decides from the path alone whether a route is measured
// (a route that is not never starts Go), and relays a measured body chunk by
// chunk, stamping each chunk when it reaches the edge. This package (Go) gets
// only what it measures: a few header values when the origin's headers
// arrive (Begin), the chunks and their arrival times in batches (Feed), and
// how the body ended (End); it returns the stream id to expose and, at the
// end, the edge timeline, which it posts to the collector's /v1/origin
// (beacon.OriginBatch, Vantage edge) off the response path (ctx.waitUntil),
// with what only the edge knows: colo, country, region, city, ASN, the
// client's protocol, TLS version and TCP round trip (request.cf).
//
// One Go runtime serves every measured request of an isolate: worker.mjs
// starts it once, at the first measured request, and hands it each request's
// env and context.
//
// The collector then sees each stream at up to three points, and can say on
// which hop it was buffered or coalesced: origin→edge when the edge already
// received its events together, edge→browser when the edge received them
// spaced and the browser did not.
//
// Configuration comes from the Worker's environment (wrangler vars, and a
// secret for the key): see Config and docs/edge.md. This file is plain Go and
// is tested as such; main_js.go wires it to the Workers runtime.
package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// Environment variables the Worker reads (wrangler.toml [vars], and
// `wrangler secret put ITLMON_KEY`). worker.mjs reads EnvOrigin and
// EnvRoutes (where requests go, which are measured); Go reads the rest.
const (
	EnvOrigin    = "ITLMON_ORIGIN"    // origin base URL, e.g. https://api.example.com (required)
	EnvRoutes    = "ITLMON_ROUTES"    // comma-separated paths to measure; "/v1/*" is a prefix; empty: all
	EnvCollector = "ITLMON_COLLECTOR" // collector base URL; empty: proxy only, no timelines
	EnvSite      = "ITLMON_SITE"      // the site key
	EnvKey       = "ITLMON_KEY"       // the site's shared key (a secret)
	EnvPaths     = "ITLMON_PATHS"     // "ids" (default: id-like segments become :id) or "raw"
	// EnvPostTimeout bounds each timeline's POST, in milliseconds (default
	// DefaultPostTimeout); a POST that takes longer is aborted and dropped.
	EnvPostTimeout = "ITLMON_POST_TIMEOUT_MS"
)

// Defaults.
const (
	// DefaultMaxEmits bounds the content event times kept per stream, as
	// the origin middleware's (origin.DefaultMaxEmits).
	DefaultMaxEmits = origin.DefaultMaxEmits
	// timerFloor is the edge clock's resolution: Workers advance Date.now
	// and performance.now only at I/O, in milliseconds.
	timerFloor = meter.Millisecond
	// DefaultPostTimeout bounds a timeline's POST. The runtime lets
	// waitUntil work run on for 30 s after the response, not forever.
	DefaultPostTimeout = 10 * time.Second
)

// Config is the Go half's configuration (from the Worker's environment).
type Config struct {
	Collector string // collector base URL, no trailing slash; empty: no timelines
	Site      string
	Key       string
	RawPaths  bool // store paths as they are instead of redacted (origin.RawPaths)
	MaxEmits  int  // 0: DefaultMaxEmits
	// PostTimeout bounds each timeline's POST (an AbortSignal's deadline
	// under the Workers runtime, whose fetch ignores Go's context).
	PostTimeout time.Duration
}

// ParseConfig reads the configuration through getenv (the Worker's env).
func ParseConfig(getenv func(string) string) (Config, error) {
	var c Config
	c.Collector = strings.TrimSuffix(strings.TrimSpace(getenv(EnvCollector)), "/")
	c.Site = strings.TrimSpace(getenv(EnvSite))
	c.Key = getenv(EnvKey)
	if c.Collector != "" && c.Site == "" {
		return c, errors.New(EnvSite + " is not set (needed with " + EnvCollector + ")")
	}
	if c.Collector != "" && !strings.HasPrefix(c.Collector, "https://") && !strings.HasPrefix(c.Collector, "http://") {
		return c, errors.New(EnvCollector + ": want an http(s) URL, not " + c.Collector)
	}
	c.PostTimeout = DefaultPostTimeout
	if v := strings.TrimSpace(getenv(EnvPostTimeout)); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 || ms > 30_000 {
			return c, errors.New(EnvPostTimeout + ": want milliseconds from 1 to 30000, not " + v)
		}
		c.PostTimeout = time.Duration(ms) * time.Millisecond
	}
	switch p := getenv(EnvPaths); p {
	case "", "ids":
	case "raw":
		c.RawPaths = true
	default:
		return c, errors.New(EnvPaths + `: want "ids" or "raw", not ` + p)
	}
	return c, nil
}

// Target is the collector's URL for the timelines ("" without a collector).
func (c *Config) Target() string {
	if c.Collector == "" {
		return ""
	}
	return c.Collector + origin.Path + "?site=" + queryEscape(c.Site)
}

// queryEscape escapes s for a query value (net/url's QueryEscape, which the
// Worker does not otherwise need).
func queryEscape(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

// Response is what the Go half learns of a response on a measured route as
// its headers reach the edge: the few values it needs, read by worker.mjs
// with Headers.get (which joins repeated fields with ", "). The headers
// themselves stay in JavaScript.
type Response struct {
	Path        string // the request's path as sent (escaped), without the query
	Status      int
	ContentType string
	DataStream  string        // origin.HeaderDataStream: the AI SDK's data stream, text/plain
	StreamID    string        // origin.HeaderStream
	RequestID   string        // origin.HeaderRequestID
	Expose      string        // origin.HeaderExpose
	Start       time.Time     // when the request reached the edge
	HeadersAt   time.Duration // when the origin's headers did, since Start
	Edge        beacon.Edge   // request.cf
}

// Stream is one measured response.
type Stream struct {
	// ID is the stream id: the origin middleware's origin.HeaderStream,
	// else the app's origin.HeaderRequestID, else a new one.
	ID string
	// SetID: the Worker sets origin.HeaderStream to ID on the response
	// (neither the origin nor the app gave one).
	SetID bool
	// Expose is the header name the Worker appends to
	// origin.HeaderExpose so the page can read the id; "" when listed.
	Expose string

	m         meter.Meter
	route     string
	start     time.Time
	headersAt time.Duration
	status    int
	edge      beacon.Edge
	maxEmits  int
}

// Begin decides whether the response is measured (a token stream: SSE,
// NDJSON or the AI SDK's data stream) and, when it is, keeps or assigns its
// stream id and starts the meter. nil: not measured. newID makes a new
// stream id.
func (c *Config) Begin(r Response, newID func() string) *Stream {
	rh := http.Header{}
	rh.Set("Content-Type", r.ContentType)
	if r.DataStream != "" {
		rh.Set(origin.HeaderDataStream, r.DataStream)
	}
	if !origin.Streaming(nil, rh) {
		return nil
	}
	s := &Stream{start: r.Start, headersAt: r.HeadersAt, status: r.Status, edge: r.Edge, maxEmits: c.MaxEmits}
	if s.maxEmits <= 0 {
		s.maxEmits = DefaultMaxEmits
	}
	name := origin.HeaderStream
	switch {
	case origin.ValidID(r.StreamID):
		s.ID = r.StreamID
	case origin.ValidID(r.RequestID):
		name, s.ID = origin.HeaderRequestID, r.RequestID
	default:
		s.ID, s.SetID = newID(), true
	}
	h := http.Header{}
	if r.Expose != "" {
		h[origin.HeaderExpose] = []string{r.Expose}
	}
	before := len(h[origin.HeaderExpose])
	if origin.ExposeHeader(h, name); len(h[origin.HeaderExpose]) > before {
		s.Expose = name
	}
	s.route = r.Path
	if !c.RawPaths {
		s.route = beacon.RedactPath(s.route)
	}
	s.m.Reset(meter.Options{ContentType: r.ContentType, TimerFloor: timerFloor, MaxTimeline: s.maxEmits})
	return s
}

// Feed gives the meter one chunk of the body and when it reached the edge.
func (s *Stream) Feed(b []byte, at time.Time) {
	s.m.Feed(b, meter.Duration(max(at.Sub(s.start), 0)))
}

// End ends the stream (how the body ended, at when) and returns its edge
// timeline.
func (s *Stream) End(at time.Time, how meter.Stop) beacon.Origin {
	s.m.EndBy(meter.Duration(max(at.Sub(s.start), 0)), how, s.status)
	return s.record()
}

// Batch encodes one timeline as the body of a POST to Target. Seq stays 0
// (the collector does not order an edge's batches).
func (c *Config) Batch(o beacon.Origin) ([]byte, error) {
	return (&beacon.OriginBatch{Site: c.Site, Records: []beacon.Origin{o}}).AppendBinary(nil)
}

// record is the stream's edge timeline (see beacon.Origin, VantageEdge).
func (s *Stream) record() beacon.Origin {
	maxEmits := s.maxEmits
	sum := s.m.Summary()
	o := beacon.Origin{
		Vantage:           beacon.VantageEdge,
		ID:                s.ID,
		StartUnixMs:       s.start.UnixMilli(),
		Route:             s.route,
		Format:            uint8(sum.Format),
		Status:            uint8(sum.Status),
		HTTPStatus:        uint16(s.status),
		TTFBUs:            micros(time.Duration(sum.TTFB)),
		TTFTUs:            micros(time.Duration(sum.TTFT)),
		DurationUs:        micros(time.Duration(sum.Duration)),
		Events:            uint32(sum.Events),
		ContentEvents:     uint32(sum.ContentEvents),
		Flushes:           uint32(sum.Reads),
		MaxEventsPerFlush: uint32(sum.MaxEventsPerRead),
		Bytes:             uint64(sum.Bytes),
		ITL:               sum.ITL,
		Edge:              s.edge,
	}
	o.Edge.HeadersUs = micros(s.headersAt)
	// The meter keeps the first MaxTimeline events in order, then stall
	// neighbourhoods: only the contiguous prefix maps to content events.
	for _, st := range sum.Timeline[:min(len(sum.Timeline), maxEmits)] {
		if st.Content {
			o.EmitUs = append(o.EmitUs, micros(time.Duration(st.At)))
		}
	}
	o.EmitsDropped = uint32(max(sum.ContentEvents-len(o.EmitUs), 0))
	return o
}

// micros converts a duration since the request; negative: did not happen.
func micros(d time.Duration) uint32 {
	if d < 0 {
		return beacon.NoTime
	}
	us := d.Microseconds()
	if us >= int64(beacon.NoTime) {
		return beacon.NoTime - 1
	}
	return uint32(us)
}

// Timeline posts are retried with a jittered backoff doubling from
// minPostBackoff to maxPostBackoff until the collector accepts the
// timeline, refuses it for good, or Config.PostTimeout after the first try.
const (
	minPostBackoff = 100 * time.Millisecond
	maxPostBackoff = 2 * time.Second
)

// StatusError is the error a send returns when the collector answered with
// a status other than 2xx.
type StatusError struct {
	Code int
	Msg  string // the start of the answer's body
}

func (e *StatusError) Error() string {
	return "collector answered " + strconv.Itoa(e.Code) + ": " + e.Msg
}

// retryable reports whether a failed post may succeed when sent again: the
// network's errors (an aborted fetch among them), 429 and 5xx. Any other
// status (400 malformed or another major version, 403 wrong key, 413 too
// big, 422 not storable) refuses the timeline for good: sent again, it
// would be refused again.
func retryable(err error) bool {
	var se *StatusError
	if !errors.As(err, &se) {
		return true
	}
	return se.Code == http.StatusTooManyRequests || se.Code >= 500
}

// PostStats counts what an isolate's timeline posts came to.
type PostStats struct {
	Posted   uint64 // timelines the collector accepted
	Rejected uint64 // timelines the collector refused for good (4xx other than 429): dropped, not retried
	Retries  uint64 // failed attempts that were retried
	Failed   uint64 // timelines given up when the post's deadline passed (the collector or the network down)
}

// Poster posts encoded timelines to the collector. One serves an isolate:
// its counters are the isolate's, and each timeline it drops is also
// logged (wrangler tail, Workers Logs), which is where an operator sees
// them.
type Poster struct {
	// Send makes one attempt, given up after timeout (under the Workers
	// runtime an AbortSignal's deadline: its fetch ignores Go's context).
	// An answer other than 2xx is a *StatusError; any other error is the
	// network's.
	Send    func(body []byte, timeout time.Duration) error
	Timeout time.Duration // the deadline of all attempts together
	Logf    func(format string, args ...any)

	posted, rejected, retries, failed atomic.Uint64
}

// Stats returns a snapshot of the counters.
func (p *Poster) Stats() PostStats {
	return PostStats{Posted: p.posted.Load(), Rejected: p.rejected.Load(), Retries: p.retries.Load(), Failed: p.failed.Load()}
}

// Post posts one encoded timeline, retrying what may succeed later
// (retryable) until p.Timeout after it began, and dropping what the
// collector refused for good. It logs every timeline it drops.
func (p *Poster) Post(body []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), p.Timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	backoff := minPostBackoff
	for {
		err := p.Send(body, time.Until(deadline))
		if err == nil {
			p.posted.Add(1)
			return
		}
		if !retryable(err) {
			p.rejected.Add(1)
			p.Logf("itlmon edge: timeline refused by the collector, dropped (not retried): %v (%d refused in this isolate)", err, p.rejected.Load())
			return
		}
		wait := backoff/2 + rand.N(backoff/2)
		backoff = min(2*backoff, maxPostBackoff)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			p.retries.Add(1)
		case <-ctx.Done():
			t.Stop()
			p.failed.Add(1)
			p.Logf("itlmon edge: post timeline: gave up after %v: %v (%d dropped in this isolate)", p.Timeout, err, p.failed.Load())
			return
		}
	}
}
