// Command edge is itlmon's third vantage point: a Cloudflare Worker, written
// in Go (github.com/syumai/workers) and compiled to WebAssembly, that sits
// between the browser and the origin of a chat API. It proxies every request
// to the origin and streams the response back as it arrives (status, headers
// and bytes unchanged, no buffering: an SSE or NDJSON chunk leaves the edge
// when it arrives), and measures the token streams among them with the same
// parser the browser module and the origin middleware use (wasm/meter): each
// network read from the origin is stamped when it reaches the edge. After the
// response ends it posts the edge timeline to the collector's /v1/origin
// (beacon.OriginBatch, Vantage edge), off the response path, with what only
// the edge knows: colo, country, region, city, ASN, the client's protocol,
// TLS version and TCP round trip (request.cf).
//
// The collector then sees each stream at up to three points, and can say on
// which hop it was buffered or coalesced: origin→edge when the edge already
// received its events together, edge→browser when the edge received them
// spaced and the browser did not.
//
// Configuration comes from the Worker's environment (wrangler vars, and a
// secret for the key): see Config and docs/edge.md.
// The proxy part (this file) is plain Go and is tested as such; main_js.go
// wires it to the Workers runtime.
package main

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// Environment variables the Worker reads (wrangler.toml [vars], and
// `wrangler secret put ITLMON_KEY`).
const (
	EnvOrigin    = "ITLMON_ORIGIN"    // origin base URL, e.g. https://api.example.com (required)
	EnvRoutes    = "ITLMON_ROUTES"    // comma-separated paths to measure; "/v1/*" is a prefix; empty: all
	EnvCollector = "ITLMON_COLLECTOR" // collector base URL; empty: proxy only, no timelines
	EnvSite      = "ITLMON_SITE"      // the site key
	EnvKey       = "ITLMON_KEY"       // the site's shared key (a secret)
	EnvPaths     = "ITLMON_PATHS"     // "ids" (default: id-like segments become :id) or "raw"
)

// Defaults.
const (
	// DefaultMaxEmits bounds the content event times kept per stream, as
	// the origin middleware's (origin.DefaultMaxEmits).
	DefaultMaxEmits = origin.DefaultMaxEmits
	// readBuf is the most one read takes from the origin's body. The
	// runtime hands over chunks of at most 64 KiB; a larger chunk is read
	// in pieces, which the meter counts as separate reads at one time.
	readBuf = 64 << 10
	// timerFloor is the edge clock's resolution: Workers advance Date.now
	// and performance.now only at I/O, in milliseconds.
	timerFloor = meter.Millisecond
)

// Config is the Worker's configuration (from its environment).
type Config struct {
	Origin    *url.URL // where requests go: scheme and host, and a path prefix when set
	Routes    []string // paths measured: exact, or a prefix when ending in "*"; empty: every path
	Collector string   // collector base URL, no trailing slash; empty: no timelines
	Site      string
	Key       string
	RawPaths  bool // store paths as they are instead of redacted (origin.RawPaths)
	MaxEmits  int  // 0: DefaultMaxEmits
}

// ParseConfig reads the configuration through getenv (the Worker's env).
func ParseConfig(getenv func(string) string) (Config, error) {
	var c Config
	o := strings.TrimSpace(getenv(EnvOrigin))
	if o == "" {
		return c, errors.New(EnvOrigin + " is not set")
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return c, errors.New(EnvOrigin + ": want an http(s) base URL without query, e.g. https://api.example.com")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	c.Origin = u
	for _, r := range strings.Split(getenv(EnvRoutes), ",") {
		if r = strings.TrimSpace(r); r != "" {
			if !strings.HasPrefix(r, "/") {
				return c, errors.New(EnvRoutes + ": route " + r + " does not start with /")
			}
			c.Routes = append(c.Routes, r)
		}
	}
	c.Collector = strings.TrimSuffix(strings.TrimSpace(getenv(EnvCollector)), "/")
	c.Site = strings.TrimSpace(getenv(EnvSite))
	c.Key = getenv(EnvKey)
	if c.Collector != "" && c.Site == "" {
		return c, errors.New(EnvSite + " is not set (needed with " + EnvCollector + ")")
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

// Measured reports whether requests to path are measured (when their
// response is a token stream).
func (c *Config) Measured(path string) bool {
	if len(c.Routes) == 0 {
		return true
	}
	for _, r := range c.Routes {
		if p, ok := strings.CutSuffix(r, "*"); ok && strings.HasPrefix(path, p) || r == path {
			return true
		}
	}
	return false
}

// Proxy is the Worker's http.Handler. Its function fields are what the
// runtime provides (main_js.go); tests provide net/http ones.
type Proxy struct {
	Config Config
	// Fetch sends the request to the origin and returns its response
	// without following redirects. Closing the response body cancels it.
	Fetch func(*http.Request) (*http.Response, error)
	// Post sends an encoded beacon.OriginBatch to the collector's
	// /v1/origin (url), with the site's key, once. An answer other than
	// 2xx is a *StatusError; any other error is the network's. The Proxy
	// decides what to retry (postTimeline).
	Post func(ctx context.Context, url, key string, body []byte) error
	// Background runs f on its own, keeping the Worker alive until f returns
	// (ctx.waitUntil), even after the response ended or the client went
	// away. It is called as a measured response starts, while the request
	// is alive; f waits for the timeline and posts it.
	Background func(f func())
	// Relay sends the status and headers already set on w, then the body as
	// it arrives, and returns how the body ended. With observe not nil it
	// calls observe with every chunk, in order, and the time the chunk
	// arrived from the origin, before the body ended (not necessarily at
	// once: the Worker's relay stamps chunks as they arrive and hands them
	// over in batches). nil: a loop of Read and Write in Go (copyBody).
	Relay func(ctx context.Context, w http.ResponseWriter, body io.ReadCloser, observe func(b []byte, at time.Time)) meter.Stop
	// Facts returns the edge's facts on the request (request.cf).
	Facts func(*http.Request) beacon.Edge
	Now   func() time.Time
	NewID func() string
	Logf  func(format string, args ...any)

	posted, rejected, retries, failed atomic.Uint64
}

// Timeline posts: each is retried with a jittered backoff doubling from
// minPostBackoff to maxPostBackoff until it is accepted, refused for good,
// or postTimeout after it began (the runtime lets waitUntil work run for
// 30 s after the response, not forever).
const (
	postTimeout    = 10 * time.Second
	minPostBackoff = 100 * time.Millisecond
	maxPostBackoff = 2 * time.Second
)

// StatusError is the error Post returns when the collector answered with a
// status other than 2xx.
type StatusError struct {
	Code int
	Msg  string // the start of the answer's body
}

func (e *StatusError) Error() string {
	return "collector answered " + strconv.Itoa(e.Code) + ": " + e.Msg
}

// retryable reports whether a failed post may succeed when sent again: the
// network's errors, 429 and 5xx. Any other status (400 malformed or another
// major version, 403 wrong key, 413 too big, 422 not storable) refuses
// the timeline for good: sent again, it would be refused again.
func retryable(err error) bool {
	var se *StatusError
	if !errors.As(err, &se) {
		return true
	}
	return se.Code == http.StatusTooManyRequests || se.Code >= 500
}

// PostStats counts what a Proxy's timeline posts came to. The runtime runs
// a Go instance per request (main_js.go), so they count one request's
// post; each refusal and each post given up is also logged (wrangler tail,
// Workers Logs), which is where an operator sees them.
type PostStats struct {
	Posted   uint64 // timelines the collector accepted
	Rejected uint64 // timelines the collector refused for good (4xx other than 429): dropped, not retried
	Retries  uint64 // failed attempts that were retried
	Failed   uint64 // timelines given up when the post's deadline passed (the collector or the network down)
}

// Stats returns a snapshot of the counters.
func (p *Proxy) Stats() PostStats {
	return PostStats{Posted: p.posted.Load(), Rejected: p.rejected.Load(), Retries: p.retries.Load(), Failed: p.failed.Load()}
}

// postTimeline posts one encoded timeline, retrying what may succeed
// later (retryable) until ctx ends, and dropping what the collector refused
// for good. It logs every failure it gives up on.
func (p *Proxy) postTimeline(ctx context.Context, target string, body []byte) {
	backoff := minPostBackoff
	for {
		err := p.Post(ctx, target, p.Config.Key, body)
		if err == nil {
			p.posted.Add(1)
			return
		}
		if !retryable(err) {
			p.rejected.Add(1)
			p.Logf("itlmon edge: timeline refused by the collector, dropped (not retried): %v", err)
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
			p.Logf("itlmon edge: post timeline: gave up after %v: %v", postTimeout, err)
			return
		}
	}
}

// hopHeaders are not forwarded (RFC 9110 7.6.1); the runtime manages the
// connections.
var hopHeaders = [...]string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Host"}

// ServeHTTP proxies r to the origin. The request's context ends when the
// client goes away: then the origin's response is cancelled too.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := p.Now()
	ctx := r.Context()
	// The request's body streams to the origin while the response streams
	// back. Without full duplex, Go's HTTP/1 server takes the body away at
	// the first flush of the response, and the transport, still reading it
	// (it reads once more to see the end), fails and closes the origin's
	// connection under the response. A runtime whose writer cannot do it
	// (workerd's) does not need it.
	_ = http.NewResponseController(w).EnableFullDuplex()
	up, err := p.upstreamRequest(r)
	if err != nil {
		http.Error(w, "itlmon edge: "+err.Error(), http.StatusBadGateway)
		return
	}
	resp, err := p.Fetch(up)
	if err != nil {
		if ctx.Err() == nil {
			p.Logf("itlmon edge: origin: %v", err)
		}
		http.Error(w, "itlmon edge: origin unreachable", http.StatusBadGateway)
		return
	}
	headersAt := p.Now().Sub(start)
	// A client that goes away cancels the origin's response at once, even
	// while the origin is silent (a read in progress returns).
	stop := context.AfterFunc(ctx, func() { resp.Body.Close() })
	defer stop()
	defer resp.Body.Close()

	s := p.begin(r, resp, start, headersAt) // may set the stream id on resp.Header
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
	var timeline chan []byte // the encoded batch, for the background POST
	if s != nil && p.Config.Collector != "" {
		timeline = make(chan []byte, 1)
		defer close(timeline)
		target := p.Config.Collector + origin.Path + "?site=" + url.QueryEscape(p.Config.Site)
		p.Background(func() {
			body, ok := <-timeline
			if !ok {
				return
			}
			// Its own deadline: the runtime lets waitUntil work run on for
			// 30 s after the response, not forever.
			pctx, cancel := context.WithTimeout(context.Background(), postTimeout)
			defer cancel()
			p.postTimeline(pctx, target, body)
		})
	}
	w.WriteHeader(resp.StatusCode)
	var observe func(b []byte, at time.Time)
	if s != nil {
		observe = func(b []byte, at time.Time) { s.m.Feed(b, meter.Duration(max(at.Sub(start), 0))) }
	}
	relay := p.Relay
	if relay == nil {
		relay = p.copyBody
	}
	how := relay(ctx, w, resp.Body, observe)
	if s == nil {
		return
	}
	if ctx.Err() != nil {
		how = meter.StopAbort
	}
	s.m.EndBy(meter.Duration(p.Now().Sub(start)), how, resp.StatusCode)
	if timeline == nil {
		return
	}
	// One timeline per batch: a Worker instance serves one request. Seq
	// stays 0 (the collector does not order an edge's batches).
	body, err := (&beacon.OriginBatch{Site: p.Config.Site, Records: []beacon.Origin{s.record(p.Config.MaxEmits)}}).AppendBinary(nil)
	if err != nil {
		p.Logf("itlmon edge: encode timeline: %v", err)
		return
	}
	timeline <- body
}

// copyBody is the Relay written in Go: it reads the body chunk by chunk
// (io.Copy would hand a runtime's stream straight through with WriteTo, and
// the chunks would never be seen), observes each and writes it to w.
func (p *Proxy) copyBody(ctx context.Context, w http.ResponseWriter, body io.ReadCloser, observe func([]byte, time.Time)) meter.Stop {
	flushHeaders(w)
	buf := make([]byte, readBuf)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if observe != nil {
				observe(buf[:n], p.Now())
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return meter.StopAbort // the client went away
			}
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		switch {
		case rerr == nil:
		case ctx.Err() != nil:
			return meter.StopAbort
		case rerr == io.EOF:
			return meter.StopBodyEnd
		default:
			p.Logf("itlmon edge: origin body: %v", rerr)
			return meter.StopError
		}
	}
}

// flushHeaders sends the status and headers before the first body byte (a
// model's first token may take seconds). syumai/workers' ResponseWriter
// hands the Response to the runtime on the first Write (its Flush does
// nothing); net/http's sends the headers on Flush.
func flushHeaders(w http.ResponseWriter) {
	w.Write(nil)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// upstreamRequest is r addressed to the origin: same method, path, query,
// headers (less hop-by-hop ones) and body.
func (p *Proxy) upstreamRequest(r *http.Request) (*http.Request, error) {
	u := *p.Config.Origin
	u.Path = p.Config.Origin.Path + r.URL.Path
	u.RawPath = ""
	if r.URL.RawPath != "" {
		u.RawPath = p.Config.Origin.EscapedPath() + r.URL.RawPath
	}
	u.RawQuery = r.URL.RawQuery
	var body io.Reader
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		body = r.Body // streamed through, not read here
	}
	up, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), body)
	if err != nil {
		return nil, err
	}
	for k, v := range r.Header {
		up.Header[k] = v
	}
	for _, k := range hopHeaders {
		up.Header.Del(k)
	}
	up.ContentLength = r.ContentLength
	return up, nil
}

// stream is one measured response.
type stream struct {
	m         meter.Meter
	id        string
	route     string
	start     time.Time
	headersAt time.Duration
	status    int
	edge      beacon.Edge
}

// begin decides whether the response is measured and, when it is, keeps or
// assigns its stream id (X-Itlmon-Stream set by the origin middleware, else
// the app's X-Request-Id, else a new one), exposes it to the page, and
// starts the meter. nil: not measured.
func (p *Proxy) begin(r *http.Request, resp *http.Response, start time.Time, headersAt time.Duration) *stream {
	h := resp.Header
	if !p.Config.Measured(r.URL.Path) || !origin.Streaming(r, h) {
		return nil
	}
	s := &stream{start: start, headersAt: headersAt, status: resp.StatusCode}
	name := origin.HeaderStream
	switch {
	case origin.ValidID(h.Get(origin.HeaderStream)):
		s.id = h.Get(origin.HeaderStream)
	case origin.ValidID(h.Get(origin.HeaderRequestID)):
		name, s.id = origin.HeaderRequestID, h.Get(origin.HeaderRequestID)
	default:
		s.id = p.NewID()
		h.Set(origin.HeaderStream, s.id)
	}
	origin.ExposeHeader(h, name)
	s.route = r.URL.EscapedPath()
	if !p.Config.RawPaths {
		s.route = beacon.RedactPath(s.route)
	}
	s.edge = p.Facts(r)
	max := p.Config.MaxEmits
	if max <= 0 {
		max = DefaultMaxEmits
	}
	s.m.Reset(meter.Options{ContentType: h.Get("Content-Type"), TimerFloor: timerFloor, MaxTimeline: max})
	return s
}

// record is the stream's edge timeline (see beacon.Origin, VantageEdge).
func (s *stream) record(maxEmits int) beacon.Origin {
	if maxEmits <= 0 {
		maxEmits = DefaultMaxEmits
	}
	sum := s.m.Summary()
	o := beacon.Origin{
		Vantage:           beacon.VantageEdge,
		ID:                s.id,
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
