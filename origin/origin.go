// Package origin is itlmon's vantage point on the origin server: an
// http.Handler middleware for Go servers that stream LLM responses (SSE or
// NDJSON). It observes the handler's own writes and flushes, frames events
// from the written bytes with the same parser the browser module uses
// (wasm/meter), stamps each event when it was emitted, gives the response a
// stream id header, and reports the origin's timeline to the collector in
// batches, off the request path.
//
// The browser module reads the stream id from the response (HeaderStream, or
// the app's own HeaderRequestID) and puts it into its record; the collector
// joins the two by it (collector/join) and attributes each stall the user saw
// to the origin, the network or the page.
//
// An event's emit time is the flush that completed it (the moment its bytes
// were handed to the connection), or the write that completed it when the
// handler never flushes. Times are relative to when the request reached the
// middleware. Only timings, sizes and counts leave the server: never the
// body, never the query string.
//
//	rep, err := origin.New(origin.Config{Collector: "https://itlmon.example.com", Site: "chat", Key: key})
//	http.Handle("/v1/chat/completions", rep.Handler(chat))
//	defer rep.Shutdown(ctx)
package origin

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// Header names shared by the middleware, the browser module and the collector.
const (
	// HeaderStream carries the stream id the middleware generated when the
	// app did not set HeaderRequestID. The browser module reads it first.
	HeaderStream = "X-Itlmon-Stream"
	// HeaderRequestID is the app's own request id; when the app sets it on
	// the response, it is the stream id and no HeaderStream is added.
	HeaderRequestID = "X-Request-Id"
	// HeaderKey carries the site's shared key on POST /v1/origin.
	HeaderKey = "X-Itlmon-Key"
	// HeaderExpose is appended to so that a page on another origin can read
	// the stream id header.
	HeaderExpose = "Access-Control-Expose-Headers"
	// Path is the collector's endpoint for origin timelines (?site=KEY).
	Path = "/v1/origin"
	// ContentType of the POST body (a beacon KindOrigin message).
	ContentType = "application/octet-stream"
)

// MaxIDLen bounds a reused X-Request-Id; a longer or non-token one is
// replaced by a generated id.
const MaxIDLen = 128

// Defaults of Config.
const (
	DefaultQueueSize     = 1024
	DefaultBatchSize     = 64
	DefaultFlushInterval = time.Second
	DefaultMaxEmits      = 4096
	DefaultTimeout       = 10 * time.Second

	// maxPending bounds the written-but-unflushed bytes held per stream for
	// framing at the next flush; beyond it the oldest writes are framed at
	// their write times (net/http's buffer has sent them by then anyway).
	maxPending = 64 << 10
)

// Config configures a Reporter.
type Config struct {
	Collector string // base URL of the collector, e.g. "https://itlmon.example.com"
	Site      string // site key
	Key       string // the site's shared key (HeaderKey); may be empty when the collector requires none

	Client        *http.Client  // default: a client with DefaultTimeout
	QueueSize     int           // timelines waiting for upload; beyond, they are dropped and counted
	BatchSize     int           // upload when this many are queued
	FlushInterval time.Duration // upload at least this often while any are queued
	MaxEmits      int           // content emit times kept per stream

	// Measure decides which responses are measured, from the request and the
	// response headers as written. Default (Streaming): text/event-stream
	// and NDJSON content types, and the AI SDK's data stream.
	Measure func(r *http.Request, h http.Header) bool
	// Paths turns the request's path (percent-encoded, as a browser's
	// location.pathname is, never the query) into the stored route. Default
	// RedactedPaths: id-like segments become ":id", the browser module's
	// default rule, so both vantage points store the same routes and no
	// conversation or thread id. RawPaths keeps paths as they are; any other
	// function decides itself (the browser's paths: 'ids' | 'raw' | function).
	Paths func(path string) string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logf logs upload errors, once per distinct error (default: none).
	Logf func(format string, args ...any)
	// NewID makes a stream id (default: 128 random bits, hex).
	NewID func() string
}

func (c *Config) setDefaults() error {
	if c.Collector == "" {
		return errors.New("origin: no collector URL")
	}
	if c.Site == "" {
		return errors.New("origin: no site")
	}
	c.Collector = strings.TrimSuffix(c.Collector, "/")
	if c.Client == nil {
		c.Client = &http.Client{Timeout: DefaultTimeout}
	}
	if c.QueueSize <= 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.MaxEmits <= 0 {
		c.MaxEmits = DefaultMaxEmits
	}
	if c.Measure == nil {
		c.Measure = Streaming
	}
	if c.Paths == nil {
		c.Paths = RedactedPaths
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.NewID == nil {
		c.NewID = NewID
	}
	return nil
}

// RedactedPaths replaces id-like path segments (UUIDs, numbers of 3 or more
// digits, tokens of 16 or more letters, digits, '_' and '-' with a digit)
// with ":id": beacon.RedactPath, the rule of every vantage point.
func RedactedPaths(path string) string { return beacon.RedactPath(path) }

// RawPaths keeps paths as they are (ids included).
func RawPaths(path string) string { return path }

// HeaderDataStream marks the AI SDK's data stream protocol (AI SDK 3 and
// 4's useChat), served as text/plain: its value is the protocol's version.
const HeaderDataStream = "X-Vercel-AI-Data-Stream"

// Streaming reports whether the response is a token stream: its
// Content-Type is text/event-stream or an NDJSON type, or it is the AI
// SDK's data stream (HeaderDataStream).
func Streaming(_ *http.Request, h http.Header) bool {
	if h.Get(HeaderDataStream) != "" {
		return true
	}
	mt, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	switch strings.ToLower(strings.TrimSpace(mt)) {
	case "text/event-stream", "application/x-ndjson", "application/ndjson",
		"application/jsonl", "application/x-jsonl", "application/jsonlines", "application/x-jsonlines":
		return true
	}
	return false
}

// NewID returns 128 random bits as 32 hex digits.
func NewID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Handler wraps next: measured responses get a stream id header and their
// timeline is queued for the collector. It never blocks on the collector.
func (rp *Reporter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &streamWriter{ResponseWriter: w, rp: rp, req: r, start: rp.cfg.Now()}
		defer sw.finish()
		next.ServeHTTP(sw, r)
	})
}

var meterPool = sync.Pool{New: func() any { return new(streamMeter) }}

// streamMeter is the pooled per-stream state.
type streamMeter struct {
	m       meter.Meter
	sum     meter.Summary
	pending []byte
	segs    []segment
}

// segment is one write not yet flushed.
type segment struct {
	n  int
	at time.Duration
}

// streamWriter observes one response. It implements http.Flusher (and
// FlushError for http.ResponseController), http.Hijacker, and Unwrap.
type streamWriter struct {
	http.ResponseWriter
	rp    *Reporter
	req   *http.Request
	start time.Time

	wroteHeader bool
	hijacked    bool
	status      int
	id          string
	sm          *streamMeter // nil when not measured
	flushes     int
	ttfb        time.Duration
	writeErr    bool
}

func (w *streamWriter) since() time.Duration { return w.rp.cfg.Now().Sub(w.start) }

// Unwrap lets http.ResponseController reach the underlying writer (write
// deadlines, full-duplex).
func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *streamWriter) WriteHeader(code int) {
	if w.wroteHeader || w.hijacked {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		w.ResponseWriter.WriteHeader(code) // informational: the real header comes later
		return
	}
	w.wroteHeader = true
	w.status = code
	h := w.Header()
	if w.rp.cfg.Measure(w.req, h) {
		name := HeaderRequestID
		w.id = h.Get(HeaderRequestID)
		if !ValidID(w.id) {
			name, w.id = HeaderStream, w.rp.cfg.NewID()
			h.Set(HeaderStream, w.id)
		}
		ExposeHeader(h, name)
		sm := meterPool.Get().(*streamMeter)
		sm.m.Reset(meter.Options{ContentType: h.Get("Content-Type"), MaxTimeline: w.rp.cfg.MaxEmits})
		sm.pending, sm.segs = sm.pending[:0], sm.segs[:0]
		w.sm = sm
		w.ttfb = -1
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *streamWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader && !w.hijacked {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	if err != nil {
		w.writeErr = true
	}
	if w.sm != nil && n > 0 {
		at := w.since()
		if w.ttfb < 0 {
			w.ttfb = at
		}
		sm := w.sm
		sm.pending = append(sm.pending, p[:n]...)
		sm.segs = append(sm.segs, segment{n: n, at: at})
		for len(sm.pending) > maxPending && len(sm.segs) > 1 {
			s := sm.segs[0]
			sm.m.Feed(sm.pending[:s.n], meter.Duration(s.at))
			sm.pending = append(sm.pending[:0], sm.pending[s.n:]...)
			sm.segs = append(sm.segs[:0], sm.segs[1:]...)
		}
	}
	return n, err
}

// Flush flushes the underlying writer and stamps every event the flush
// completed with the time the flush began: when the origin handed them to
// the network. (A stamp taken after the flush returns can follow the
// bytes' arrival at a client on a busy machine, and the time the network
// added would read negative.)
func (w *streamWriter) Flush() { w.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (w *streamWriter) FlushError() error {
	if !w.wroteHeader && !w.hijacked {
		w.WriteHeader(http.StatusOK)
	}
	at := w.since()
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		w.writeErr = true
	}
	if w.sm != nil && len(w.sm.pending) > 0 {
		w.flushes++
		w.sm.m.Feed(w.sm.pending, meter.Duration(at))
		w.sm.pending, w.sm.segs = w.sm.pending[:0], w.sm.segs[:0]
	}
	return err
}

// Hijack hands the connection to the handler; the stream is then no longer
// measured.
func (w *streamWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("origin: hijack: %w", http.ErrNotSupported)
	}
	c, rw, err := h.Hijack()
	if err == nil {
		w.hijacked = true
		w.release()
	}
	return c, rw, err
}

func (w *streamWriter) release() {
	if w.sm != nil {
		meterPool.Put(w.sm)
		w.sm = nil
	}
}

// finish frames what was never flushed, ends the timeline and queues it.
func (w *streamWriter) finish() {
	sm := w.sm
	if sm == nil {
		return
	}
	defer w.release()
	end := w.since()
	if len(sm.pending) > 0 {
		if w.flushes == 0 {
			off := 0
			for _, s := range sm.segs { // never flushed: each write is an emit
				sm.m.Feed(sm.pending[off:off+s.n], meter.Duration(s.at))
				off += s.n
			}
		} else {
			sm.m.Feed(sm.pending, meter.Duration(end)) // net/http flushes the rest as the handler returns
		}
	}
	st := meter.StatusComplete
	switch {
	case w.req.Context().Err() != nil:
		st = meter.StatusAborted
	case w.writeErr:
		st = meter.StatusNetworkError
	}
	sm.m.End(meter.Duration(end), st, w.status)
	sm.m.SummaryInto(&sm.sum)
	w.rp.enqueue(w.record(&sm.sum, end))
}

// route is the request's path through Config.Paths; "" when Paths panics
// (as the browser loader sends "" when its paths function throws).
func (w *streamWriter) route() (route string) {
	defer func() {
		if recover() != nil {
			route = ""
		}
	}()
	return w.rp.cfg.Paths(w.req.URL.EscapedPath())
}

func (w *streamWriter) record(s *meter.Summary, end time.Duration) beacon.Origin {
	o := beacon.Origin{
		ID:                w.id,
		StartUnixMs:       w.start.UnixMilli(),
		Route:             w.route(),
		Format:            uint8(s.Format),
		Status:            uint8(s.Status),
		HTTPStatus:        uint16(w.status),
		TTFBUs:            micros(w.ttfb),
		TTFTUs:            micros(time.Duration(s.TTFT)),
		DurationUs:        micros(end),
		Events:            uint32(s.Events),
		ContentEvents:     uint32(s.ContentEvents),
		Flushes:           uint32(s.Reads),
		MaxEventsPerFlush: uint32(s.MaxEventsPerRead),
		Bytes:             uint64(s.Bytes),
		ITL:               s.ITL.Clone(),
	}
	// The meter keeps the first MaxTimeline events in order, then stall
	// neighbourhoods; only the contiguous prefix maps emits to events.
	tl := s.Timeline[:min(len(s.Timeline), w.rp.cfg.MaxEmits)]
	for _, st := range tl {
		if st.Content {
			o.EmitUs = append(o.EmitUs, micros(time.Duration(st.At)))
		}
	}
	o.EmitsDropped = uint32(max(s.ContentEvents-len(o.EmitUs), 0))
	return o
}

// micros converts a duration since the request start; negative means "did
// not happen".
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

// ValidID reports whether an app's request id (or a stream id set upstream)
// can be reused as the stream id: 1 to MaxIDLen printable ASCII bytes, no
// space, comma, semicolon or quote.
func ValidID(id string) bool {
	if id == "" || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f || c == ',' || c == ';' || c == '"' {
			return false
		}
	}
	return true
}

// ExposeHeader appends name to Access-Control-Expose-Headers in h unless it is
// already listed ("*" does not cover credentialed requests, so it does not
// count).
func ExposeHeader(h http.Header, name string) {
	for _, v := range h.Values(HeaderExpose) {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), name) {
				return
			}
		}
	}
	h.Add(HeaderExpose, name)
}
