// Package ingest receives beacon batches from browsers: WebSocket at
// /v1/ws?site=KEY (binary frames, acks back on the same socket) and HTTP
// POST at /v1/beacon?site=KEY (the page's sendBeacon fallback, same bytes).
//
// Per request: the site key must be known and the Origin allowed for it
// (checked before any WebSocket upgrade: cross-site WebSocket hijacking).
// Per frame: decode with limits, rate-limit (records/s per connection and per
// site), enrich, hand to the collector.Sink, and acknowledge the batch's
// sequence number only when the Sink reports the rows durable. A reader
// blocked in Sink.Submit stops reading its socket: backpressure, not memory.
//
// Every rejection gets a reason the client can read (WebSocket close code
// and text, or HTTP status and body), increments
// itlmon_ingest_rejected_total{reason} and is logged at most once per reason
// per LogInterval. When the batch's sequence number is readable, a refused
// batch is first acked with a beacon.Reject code, so the browser module drops
// what resending cannot fix and retries the rest:
//
//	reason            WebSocket close              POST status  Ack reject
//	bad_request       (400 before upgrade)         400          -
//	site              (404 before upgrade)         404          -
//	origin            (403 before upgrade)         403          -
//	text_frame        1003 unsupported data        -            -
//	too_big           1009 message too big         413          limit
//	body_timeout      -                            408          -
//	version, kind     1003                         400          -
//	decode_*          1003 (decode_limit: 1009)    400          malformed / limit
//	site_mismatch     1008 policy violation        403          site
//	rate_limit        1013 try again later         429          overload
//	shed              1013 try again later         503          overload
//	store             1011 internal error          503          retry
//	slow_consumer     1008 (write timeout)         -            -
//	(shutdown)        1001 going away, after the pending acks
//
// Shedding: ingest holds at most Config.Memory bytes (frames being read,
// reserved on their declared length before their payload is read; POST
// bodies on their Content-Length; decoded batches until their ack). A frame
// or body that does not fit, or a batch the sink's queue has no room for
// within Config.QueueWait, is shed: WebSocket close 1013 with the reason
// "retry-after=N; why", or HTTP 503 with "Retry-After: N". Clients keep the
// batch and come back after N seconds (the browser module adds jitter).
// Counted in itlmon_ingest_shed_total{transport,cause} and
// itlmon_ingest_shed_bytes_total; itlmon_ingest_memory_bytes is what is held.
//
// Each connection has one reader goroutine, a writer goroutine only while
// acks are waiting to be written, and at most maxInFlight batches between
// reading and their ack: past that, or while Sink.Submit blocks, the reader
// stops reading.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/enrich"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// Defaults for Config.
const (
	DefaultConnRate    = 100    // records/s per connection
	DefaultConnBurst   = 1000   // records
	DefaultSiteRate    = 20000  // records/s per site, all connections together
	DefaultSiteBurst   = 100000 // records
	DefaultLogInterval = time.Minute
	DefaultBodyTimeout = 10 * time.Second
	DefaultQueueWait   = 2 * time.Second
	DefaultRetryAfter  = 15 * time.Second
)

// Config configures a Handler. Sink and Sites are required.
type Config struct {
	Sites    []Site
	Sink     collector.Sink
	Enricher *enrich.Enricher // nil: everything "unknown"
	Limits   beacon.Limits    // zero: beacon.DefaultLimits

	// Token buckets in records per second; a rate <= 0 means unlimited.
	// A batch that would have to wait longer than MaxRateWait for tokens is
	// rejected (close 1013 / HTTP 429); shorter waits just delay the read.
	ConnRate, SiteRate   float64
	ConnBurst, SiteBurst int
	MaxRateWait          time.Duration

	// BodyTimeout bounds the read of a POST body from the end of its
	// headers (zero: DefaultBodyTimeout); a body that does not arrive in
	// full in time is refused with 408, reason body_timeout.
	BodyTimeout time.Duration

	// Memory bounds the bytes ingest holds, all connections and requests
	// together: each WebSocket frame from the moment its header declares
	// its length (reserved on that length, before its payload is read) and
	// each POST body (on its Content-Length) until the batch is acked or
	// refused. A frame or body that does not fit is shed: close 1013 /
	// HTTP 503 with the retry delay. Zero: a quarter of GOMEMLIMIT when
	// set, else DefaultMemory.
	Memory int64
	// QueueWait bounds the wait for room in the sink's queue (Submit
	// blocking: ClickHouse slower than what arrives); past it the batch is
	// shed the same way. Zero: DefaultQueueWait.
	QueueWait time.Duration
	// RetryAfter is the delay a shed client is told to wait (whole
	// seconds; the module adds jitter). Zero: DefaultRetryAfter.
	RetryAfter time.Duration

	Logger      zerolog.Logger
	LogInterval time.Duration         // one log line per rejection reason per interval
	Registerer  prometheus.Registerer // nil: a private registry
	Now         func() time.Time
}

// Handler serves the ingest endpoints. Create it with New.
type Handler struct {
	sites     map[string]*site
	sink      collector.Sink
	enricher  *enrich.Enricher
	limits    beacon.Limits
	connRate  float64
	connBurst int
	maxWait   time.Duration
	bodyWait  time.Duration
	queueWait time.Duration
	retry     int // seconds
	budget    *budget
	readAhead *readAheadPool // the connections' read-ahead buffers (readahead.go)
	log       zerolog.Logger
	rejLog    *onceLog
	m         *metrics
	now       func() time.Time
	upgrader  websocket.Upgrader
	// cpu holds a token per goroutine checking, enriching or handing over
	// a batch (the CPU-bound part of ingest), at most one per CPU Go runs
	// on. An insert's acks wake the readers of hundreds of connections at
	// once; unbounded, they would all be runnable, and the store's writer,
	// which builds the next insert meanwhile, would get a few per cent of
	// a CPU among them: the next insert would wait for the reading to end
	// instead of overlapping it.
	cpu chan struct{}

	// base is the context of every Submit; cancelled when Shutdown gives up.
	base       context.Context
	cancelBase context.CancelFunc

	mu      sync.Mutex
	conns   map[*conn]struct{}
	closing bool
	connsWG sync.WaitGroup
}

type site struct {
	key     string
	any     bool
	origins map[string]bool
	bucket  *bucket
	// The site's counters (its label values of siteRecords and siteLimited).
	records, limitedSite, limitedConn prometheus.Counter
}

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Sink == nil {
		return nil, errors.New("ingest: no sink")
	}
	if cfg.Limits == (beacon.Limits{}) {
		cfg.Limits = beacon.DefaultLimits
	}
	if cfg.MaxRateWait <= 0 {
		cfg.MaxRateWait = 2 * time.Second
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.Memory <= 0 {
		cfg.Memory = defaultMemory()
	}
	if cfg.QueueWait <= 0 {
		cfg.QueueWait = DefaultQueueWait
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.LogInterval <= 0 {
		cfg.LogInterval = DefaultLogInterval
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &Handler{
		sites:     make(map[string]*site, len(cfg.Sites)),
		sink:      cfg.Sink,
		enricher:  cfg.Enricher,
		limits:    cfg.Limits,
		connRate:  cfg.ConnRate,
		connBurst: cfg.ConnBurst,
		maxWait:   cfg.MaxRateWait,
		bodyWait:  cfg.BodyTimeout,
		queueWait: cfg.QueueWait,
		retry:     int(max(1, (cfg.RetryAfter+time.Second-1)/time.Second)),
		budget:    &budget{limit: cfg.Memory},
		readAhead: newReadAheadPool(cfg.Memory),
		log:       cfg.Logger,
		now:       cfg.Now,
		conns:     make(map[*conn]struct{}),
		cpu:       make(chan struct{}, runtime.GOMAXPROCS(0)),
	}
	h.m = newMetrics(cfg.Registerer, h.budget)
	h.rejLog = &onceLog{log: cfg.Logger, interval: cfg.LogInterval, now: cfg.Now, last: map[string]*logState{}}
	h.base, h.cancelBase = context.WithCancel(context.Background())
	h.upgrader = websocket.Upgrader{
		// Idle connections should cost little: a read buffer for frame
		// headers and control frames (payloads of 256 bytes and more are
		// read past it, straight into the frame's buffer), and a write
		// buffer only while writing.
		ReadBufferSize:  256,
		WriteBufferSize: 512, // acks are a few bytes
		WriteBufferPool: &sync.Pool{},
		// The Origin was checked against the site before Upgrade is called.
		CheckOrigin: func(*http.Request) bool { return true },
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			h.reject(ReasonBadRequest, reason.Error())
			http.Error(w, "websocket: "+reason.Error(), status)
		},
	}
	for _, s := range cfg.Sites {
		if _, dup := h.sites[s.Key]; dup {
			return nil, fmt.Errorf("ingest: site %s configured twice", s.Key)
		}
		st := &site{key: s.Key, origins: map[string]bool{}, bucket: newBucket(cfg.SiteRate, cfg.SiteBurst),
			records:     h.m.siteRecords.WithLabelValues(s.Key),
			limitedSite: h.m.siteLimited.WithLabelValues(s.Key, BudgetSite),
			limitedConn: h.m.siteLimited.WithLabelValues(s.Key, BudgetConnection)}
		for _, o := range s.Origins {
			if o == "*" {
				st.any = true
			}
			st.origins[o] = true
		}
		h.sites[s.Key] = st
	}
	return h, nil
}

// Register mounts the endpoints on mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/ws", h.ServeWS)
	mux.HandleFunc("POST /v1/beacon", h.ServeBeacon)
	mux.HandleFunc("OPTIONS /v1/beacon", h.serveBeaconPreflight)
}

// Connections returns the number of open WebSocket connections.
func (h *Handler) Connections() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// reject counts a rejection and logs it (at most once per reason and interval).
func (h *Handler) reject(reason, detail string) {
	h.m.rejected.WithLabelValues(reason).Inc()
	h.rejLog.warn(reason, detail)
}

// rateRetry is the wait, in whole seconds, told to a client over the rate
// limit: the longest a batch could have waited for tokens, and a second.
func (h *Handler) rateRetry() int { return int(h.maxWait/time.Second) + 1 }

// retryText is a close reason for a shed connection: "retry-after=N" (whole
// seconds) first, so cutting the reason to fit a close frame keeps it, then
// why. The browser module waits that long, plus jitter, before it
// reconnects.
func (h *Handler) retryText(why string) string {
	return truncate("retry-after=" + strconv.Itoa(h.retry) + "; " + why)
}

// rejectRecords counts and logs the records DecodeBatchRecords left out of a
// batch it accepted: the module cannot fix them by resending, and the
// records around them are stored.
func (h *Handler) rejectRecords(bad []error) {
	for _, err := range bad {
		h.reject(ReasonRecord, "record left out: "+err.Error())
	}
}

// admit checks the site key and the Origin of a request. On failure it
// returns the HTTP status and a reason text for the client.
func (h *Handler) admit(r *http.Request) (*site, int, string, string) {
	key := r.URL.Query().Get("site")
	if key == "" {
		return nil, http.StatusBadRequest, ReasonBadRequest, "missing site parameter: use ?site=KEY"
	}
	s := h.sites[key]
	if s == nil {
		return nil, http.StatusNotFound, ReasonSite, "unknown site key " + quoteShort(key)
	}
	origin := r.Header.Get("Origin")
	if s.any {
		return s, 0, "", ""
	}
	if origin == "" {
		return nil, http.StatusForbidden, ReasonOrigin, "missing Origin header: site " + key + " takes browser requests only"
	}
	if norm, err := NormalizeOrigin(origin); err != nil || !s.origins[norm] {
		return nil, http.StatusForbidden, ReasonOrigin, "origin " + quoteShort(origin) + " is not allowed for site " + key
	}
	return s, 0, "", ""
}

// classifyDecode maps a DecodeBatch error onto a rejection reason and a
// WebSocket close code.
func classifyDecode(err error) (reason string, code int) {
	switch {
	case errors.Is(err, beacon.ErrTooBig):
		return ReasonTooBig, websocket.CloseMessageTooBig
	case errors.Is(err, beacon.ErrLimit):
		return ReasonDecodeLimit, websocket.CloseMessageTooBig
	case errors.Is(err, beacon.ErrVersion):
		return ReasonVersion, websocket.CloseUnsupportedData
	case errors.Is(err, beacon.ErrKind):
		return ReasonKind, websocket.CloseUnsupportedData
	case errors.Is(err, beacon.ErrMagic):
		return ReasonDecodeMagic, websocket.CloseUnsupportedData
	case errors.Is(err, beacon.ErrTruncated):
		return ReasonDecodeTruncated, websocket.CloseUnsupportedData
	case errors.Is(err, beacon.ErrInvalid):
		return ReasonDecodeInvalid, websocket.CloseUnsupportedData
	}
	return ReasonDecode, websocket.CloseUnsupportedData
}

// acquireCPU takes a cpu token (see Handler.cpu); false when done ends first.
func (h *Handler) acquireCPU(done <-chan struct{}) bool {
	select {
	case h.cpu <- struct{}{}:
		return true
	case <-done:
		return false
	}
}

func (h *Handler) releaseCPU() { <-h.cpu }

// handOver runs submit (build the sink's batch and hand it over) holding a
// cpu token. Waiting for the token counts against ctx, as waiting for
// queue space in Submit does.
func (h *Handler) handOver(ctx context.Context, submit func() error) error {
	select {
	case h.cpu <- struct{}{}: // a token free: ctx not looked at (waitContext)
	default:
		if !h.acquireCPU(ctx.Done()) {
			return ctx.Err()
		}
	}
	defer h.releaseCPU()
	return submit()
}

// scratch is the memory one batch is checked and handed to the sink in,
// pooled: a sink keeps nothing of a batch past Submit, so after Submit the
// next message reuses it, and the records (about 600 bytes each, with
// pointers) are neither allocated nor scanned by the garbage collector
// again. An idle connection holds none.
type scratch struct {
	dec beacon.Scratch
	out collector.Batch
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

// putScratch returns sc to the pool once its batch is done with, unless a
// rare large message grew it.
func putScratch(sc *scratch) {
	if sc.dec.Records() > maxPooledRecords {
		return
	}
	sc.dec.Reset()
	sc.out = collector.Batch{}
	scratchPool.Put(sc)
}

// maxPooledRecords: a scratch with room for more records is not pooled.
// The module sends at most a few dozen a batch.
const maxPooledRecords = 256

// batch makes the sink's batch of b in out: its records with their wires,
// and the site, time, client facts and enrichment they share.
//
// Ingest checks batches with beacon.CheckBatchWire, so the records'
// histograms, timelines and stall lists are in their wires only, which
// point into the message's buffer: the store copies each record's values
// from there as they arrived (before Submit returns) instead of encoding
// them again. With nil wire (b fully decoded, beacon.DecodeBatch) the store
// encodes the records.
//
// memo, when not nil, remembers the enrichment between the batches of one
// connection (whose hdr and remoteAddr are the same for its life).
func (h *Handler) batch(out *collector.Batch, b *beacon.Batch, wire []beacon.Wire, s *site, hdr http.Header, remoteAddr string, memo *enrich.Memo, now time.Time) *collector.Batch {
	var info enrich.Info
	if h.enricher != nil && memo != nil {
		info = h.enricher.LookupMemo(memo, hdr, remoteAddr, &b.Client)
	} else if h.enricher != nil {
		info = h.enricher.Lookup(hdr, remoteAddr, &b.Client)
	} else {
		info = enrich.Info{Country: enrich.Unknown, Region: enrich.Unknown, Browser: enrich.Unknown, OS: enrich.Unknown, Device: enrich.Unknown}
	}
	conn := b.Client.ConnType
	if conn == "" {
		conn = "unknown"
	}
	if len(wire) != len(b.Records) {
		wire = nil
	}
	for i := range b.Records {
		// The module never sends a query or fragment; make sure of it.
		r := &b.Records[i]
		r.PagePath = stripQuery(r.PagePath)
		r.URLPath = stripQuery(r.URLPath)
	}
	*out = collector.Batch{Records: b.Records, Wires: wire}
	sh := &out.Shared
	sh.Site = s.key
	sh.ReceivedAt = now
	sh.Release = b.Client.Release
	sh.ModuleVersion = b.Client.ModuleVersion
	sh.ConnType = conn
	sh.ConnRTTMs = b.Client.ConnRTTMs
	sh.TimerFloorUs = b.Client.TimerFloorUs
	info.Apply(sh)
	return out
}

// rateLimit reserves n records on the site's and the connection's buckets.
// It returns how long to wait, or ok=false and a reason text.
func (h *Handler) rateLimit(s *site, cb *bucket, n int, now time.Time) (time.Duration, bool, string) {
	w1, ok := s.bucket.reserve(now, n, h.maxWait)
	if !ok {
		s.limitedSite.Add(float64(n))
		return 0, false, fmt.Sprintf("rate limit: site %s is over %.0f records/s", s.key, s.bucket.rate)
	}
	w2, ok := cb.reserve(now, n, h.maxWait)
	if !ok {
		s.bucket.refund(n)
		s.limitedConn.Add(float64(n))
		return 0, false, fmt.Sprintf("rate limit: connection is over %.0f records/s", cb.rate)
	}
	return max(w1, w2), true, ""
}

func stripQuery(p string) string {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if i := strings.IndexByte(p, '#'); i >= 0 {
		p = p[:i]
	}
	return p
}

// quoteShort quotes s for a reason text, cut to keep close frames under 125 bytes.
func quoteShort(s string) string {
	if len(s) > 48 {
		s = s[:48] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// Shutdown stops accepting connections, stops reading the open ones, waits
// until the batches already handed to the sink are acknowledged, closes each
// connection with 1001 "going away", and returns when all are closed or ctx
// ends (then it closes what is left at once).
func (h *Handler) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.closing = true
	conns := make([]*conn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	for _, c := range conns {
		c.stop("", websocket.CloseGoingAway, "collector shutting down; reconnect and resend unacked batches")
	}
	done := make(chan struct{})
	go func() { h.connsWG.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	h.cancelBase()
	h.mu.Lock()
	for c := range h.conns {
		c.ws.Close()
	}
	h.mu.Unlock()
	<-done
	return ctx.Err()
}

// HasSite reports whether key is a configured site.
func (h *Handler) HasSite(key string) bool { return h.sites[key] != nil }
