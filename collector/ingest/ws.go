package ingest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/itlmon/itlmon/collector/enrich"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// WebSocket timing and sizes, as in gorilla's chat example.
const (
	writeWait   = 10 * time.Second  // time allowed to write a message
	pongWait    = 60 * time.Second  // time allowed to read the next pong (or frame)
	pingPeriod  = pongWait * 9 / 10 // pings go out this often; must be < pongWait
	maxInFlight = 32                // batches read but not yet acked on the wire, per connection
	lingerWait  = 2 * time.Second   // after our close frame, wait this long for the client's
)

// conn is one WebSocket connection. Its reader is one goroutine, started
// by ServeWS, which returns at once so net/http frees the request and its
// buffers. Acks are written by a writer goroutine that runs only while
// there is something to write, and pings by a timer: an idle connection
// holds one parked goroutine, gorilla's small read buffer and this struct.
type conn struct {
	h      *Handler
	ws     *websocket.Conn
	raw    net.Conn     // the connection under ws's reader
	mc     *meteredConn // ws reads through it
	site   *site
	hdr    http.Header // the request headers enrichment reads
	remote string
	// memo: the enrichment of the connection's last batch (reader
	// goroutine only; made at its first batch, so an idle connection holds
	// none): the next batches of the same client facts reuse it.
	memo   *enrich.Memo
	bucket *bucket
	slots  chan struct{} // one per batch read and not yet acked on the wire (maxInFlight)
	pinger *time.Timer
	// inFrame: the reader is reading a frame's payload (reader goroutine only).
	inFrame bool

	pending sync.WaitGroup // batches handed to the sink, not yet done

	mu        sync.Mutex
	stopped   bool
	closeCode int
	closeText string
	stopCh    chan struct{} // closed by stop

	wmu        sync.Mutex
	queue      []ack // acks for the writer
	writing    bool  // a writer goroutine runs
	final      bool  // the reader is done: after the queue, the close frame
	dead       bool  // a write failed: nothing more is written
	writerDone chan struct{}
}

// ServeWS is the /v1/ws handler.
func (h *Handler) ServeWS(w http.ResponseWriter, r *http.Request) {
	s, status, reason, text := h.admit(r)
	if s == nil {
		h.reject(reason, text)
		http.Error(w, text, status)
		return
	}
	h.mu.Lock()
	closing := h.closing
	h.mu.Unlock()
	if closing {
		h.reject(ReasonShutdown, "connection during shutdown")
		http.Error(w, "collector shutting down", http.StatusServiceUnavailable)
		return
	}
	mc := &meteredConn{b: h.budget, limit: int64(h.limits.MaxBytes) + 1}
	ws, err := h.upgrader.Upgrade(meteredWriter{w, mc}, r, nil)
	if err != nil {
		return // Upgrade answered the client and the Error hook counted it
	}
	mc.enableReadAhead(h.readAhead)
	c := &conn{
		h:          h,
		ws:         ws,
		raw:        mc.Conn,
		mc:         mc,
		site:       s,
		hdr:        enrichHeaders(r.Header),
		remote:     r.RemoteAddr,
		bucket:     newBucket(h.connRate, h.connBurst),
		slots:      make(chan struct{}, maxInFlight),
		stopCh:     make(chan struct{}),
		writerDone: make(chan struct{}),
	}
	if !h.track(c) {
		ws.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseGoingAway, "collector shutting down"), time.Now().Add(writeWait))
		ws.Close()
		return
	}
	go c.run()
}

// run is the connection's reader goroutine: it reads until the connection
// stops, waits for the batches handed to the sink, and has the writer send
// the close frame after the last ack.
func (c *conn) run() {
	h := c.h
	defer h.untrack(c)
	c.pinger = time.AfterFunc(pingPeriod, c.ping)
	c.readLoop()
	c.mc.dropReadAhead() // what it still holds is not read any more
	c.pinger.Stop()
	c.wmu.Lock()
	c.final = true
	c.kickLocked()
	c.wmu.Unlock()
	<-c.writerDone
	// Frames declared and not read to their end.
	h.budget.release(c.mc.take(c.mc.reserved))
	if e := h.log.Debug(); e.Enabled() {
		c.mu.Lock()
		code, text := c.closeCode, c.closeText
		c.mu.Unlock()
		e.Str("site", c.site.key).Int("close_code", code).Str("close_text", text).Msg("connection closed")
	}
}

// meteredWriter hands gorilla's Upgrade the hijacked connection wrapped in
// a meteredConn.
type meteredWriter struct {
	http.ResponseWriter
	mc *meteredConn
}

func (w meteredWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.mc.Conn = nc
	return w.mc, brw, nil
}

// enrichHeaders keeps the request headers enrichment reads, so a connection
// does not hold its handshake's cookies and other headers for its life.
func enrichHeaders(h http.Header) http.Header {
	out := make(http.Header, len(enrich.RequestHeaders))
	for _, k := range enrich.RequestHeaders {
		if v := h.Values(k); len(v) > 0 {
			out[http.CanonicalHeaderKey(k)] = v
		}
	}
	return out
}

func (h *Handler) track(c *conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.conns[c] = struct{}{}
	h.connsWG.Add(1)
	h.m.connections.Inc()
	h.m.connectionsTotal.Inc()
	return true
}

func (h *Handler) untrack(c *conn) {
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
	h.m.connections.Dec()
	h.connsWG.Done()
}

// stop makes the reader stop reading and records the close frame to send
// once pending acks are out. The first call wins.
func (c *conn) stop(reason string, code int, text string) {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	c.stopped, c.closeCode, c.closeText = true, code, text
	close(c.stopCh)
	c.ws.SetReadDeadline(time.Now()) // wakes a blocked read; under mu so no extension overrides it
	c.mu.Unlock()
	if reason != "" {
		c.h.reject(reason, text)
	}
}

// extendReadDeadline moves the read deadline pongWait ahead, unless the
// connection is stopping: stop's deadline of "now" must win, or a client that
// keeps answering pings would keep the reader (and shutdown) going. It
// reports whether the connection is still running.
func (c *conn) extendReadDeadline() bool { return c.setReadDeadline(pongWait) }

// setReadDeadline moves the read deadline d ahead unless the connection is
// stopping (see extendReadDeadline).
func (c *conn) setReadDeadline(d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return false
	}
	c.ws.SetReadDeadline(time.Now().Add(d))
	return true
}

func (c *conn) isStopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}

func (c *conn) readLoop() {
	h := c.h
	// No gorilla read limit: it refuses a frame by its declared length with
	// a close 1009 of its own, without a reason. The meteredConn under
	// gorilla fails the read after a frame header that declares more than
	// Limits.MaxBytes (errFrameTooBig), and readFrame reads at most
	// Limits.MaxBytes+1 bytes of any message, however it is fragmented:
	// either is refused at once with 1009, a reason and a count. Gorilla
	// still fails a declared length that overflows int64 with
	// ErrReadLimit: the same refusal.
	c.ws.SetReadLimit(0)
	c.extendReadDeadline()
	c.ws.SetPongHandler(func(string) error {
		if !c.inFrame { // a frame's own deadline stands (see readFrame)
			c.extendReadDeadline()
		}
		return nil
	})
	for {
		mt, r, err := c.ws.NextReader()
		if errors.Is(err, websocket.ErrReadLimit) || errors.Is(err, errFrameTooBig) {
			c.refuseTooBig(nil)
			break
		}
		if errors.Is(err, errShed) {
			c.shedMemory()
			break
		}
		if err != nil {
			c.stop("", websocket.CloseNormalClosure, "") // client gone or stop called
			break
		}
		if !c.extendReadDeadline() {
			break // stopping: frames already buffered are not taken any more
		}
		if mt != websocket.BinaryMessage {
			c.stop(ReasonTextFrame, websocket.CloseUnsupportedData, "text frame: beacon batches are binary frames")
			break
		}
		if !c.readFrame(r) {
			break
		}
	}
	// No more reads. Let the sink finish what it has; the writer then
	// sends the close frame after the last ack.
	waitDone := make(chan struct{})
	go func() { c.pending.Wait(); close(waitDone) }()
	select {
	case <-waitDone:
	case <-h.base.Done():
		c.ws.Close()
	}
}

var errTooBig = errors.New("too big")

// framePool holds frame buffers between frames, so an idle connection holds
// none. DecodeBatch copies what it keeps, so a buffer is reusable as soon as
// the frame is decoded.
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// readFrame reads and handles one binary frame; false means stop reading.
// The frame must arrive in full within Config.BodyTimeout of its start.
func (c *conn) readFrame(r io.Reader) bool {
	h := c.h
	if !c.setReadDeadline(h.bodyWait) {
		return false
	}
	bp := framePool.Get().(*[]byte)
	buf := (*bp)[:0]
	if d := c.mc.declared; d > int64(cap(buf)) {
		// A large frame: its buffer at its declared size (reserved
		// already), not grown by appends that would hold up to twice it.
		buf = make([]byte, 0, d)
	}
	c.inFrame = true
	buf, err := readLimited(buf, r, h.limits.MaxBytes)
	c.inFrame = false
	defer func() {
		if cap(buf) <= 64<<10 { // don't pool a rare large buffer
			*bp = buf[:0]
			framePool.Put(bp)
		}
	}()
	// What was read is held here now, not by the frames' reservation.
	held := c.mc.take(int64(len(buf)))
	if errors.Is(err, errTooBig) || errors.Is(err, errFrameTooBig) || errors.Is(err, websocket.ErrReadLimit) {
		h.budget.release(held)
		c.refuseTooBig(buf)
		return false
	}
	if errors.Is(err, errShed) {
		h.budget.release(held)
		c.shedMemory()
		return false
	}
	if err != nil {
		h.budget.release(held)
		if ne, ok := err.(net.Error); ok && ne.Timeout() && !c.isStopped() {
			c.stop(ReasonBodyTimeout, websocket.ClosePolicyViolation,
				fmt.Sprintf("frame not received in full within %v", h.bodyWait))
			return false
		}
		c.stop("", websocket.CloseNormalClosure, "")
		return false
	}
	if !c.extendReadDeadline() {
		h.budget.release(held)
		return false
	}
	return c.handleFrame(buf, held)
}

// shedMemory closes the connection with 1013 and the retry delay when a
// frame's declared length did not fit in the memory budget.
func (c *conn) shedMemory() {
	h := c.h
	h.m.shed.WithLabelValues("ws", ShedMemory).Inc()
	h.m.shedBytes.Add(float64(c.mc.refused))
	c.stop(ReasonShed, websocket.CloseTryAgainLater, h.retryText("collector over its ingest memory budget"))
}

// refuseTooBig refuses a message over Limits.MaxBytes: an ack with
// RejectLimit when its first bytes name a batch, then close 1009 with the
// limit as the reason, counted as too_big.
func (c *conn) refuseTooBig(head []byte) {
	if seq, ok := peekSeq(head); ok {
		c.queueAck(seq, beacon.RejectLimit, false)
	}
	c.stop(ReasonTooBig, websocket.CloseMessageTooBig, fmt.Sprintf("frame too big: over %d bytes", c.h.limits.MaxBytes))
}

// readLimited appends r to dst and fails with errTooBig past limit bytes.
func readLimited(dst []byte, r io.Reader, limit int) ([]byte, error) {
	lr := io.LimitedReader{R: r, N: int64(limit) + 1}
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := lr.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			if len(dst) > limit {
				return dst, errTooBig
			}
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// handleFrame decodes, limits, enriches and submits one batch. It returns
// false when the connection must stop reading.
//
// held is what the frame holds of the memory budget; handleFrame releases
// it, at the batch's ack when the batch goes to the sink.
func (c *conn) handleFrame(frame []byte, held int64) bool {
	h := c.h
	hold := held
	defer func() { h.budget.release(hold) }() // what no ack releases
	if !h.acquireCPU(c.stopCh) {
		return false
	}
	sc := getScratch()
	defer putScratch(sc) // the sink keeps nothing of the batch past Submit
	b, wire, bad, err := sc.dec.CheckBatchWire(frame, h.limits)
	h.releaseCPU()
	if err != nil {
		// Ack the refusal when the sequence number is readable, so the
		// module drops a batch that resending cannot fix.
		if seq, ok := peekSeq(frame); ok {
			c.queueAck(seq, beacon.RejectFor(err), false)
		}
		reason, code := classifyDecode(err)
		c.stop(reason, code, truncate("bad batch: "+err.Error()))
		return false
	}
	h.m.batches.WithLabelValues("ws").Inc()
	if b.Site != "" && b.Site != c.site.key {
		c.queueAck(b.Seq, beacon.RejectSite, false)
		c.stop(ReasonSiteMismatch, websocket.ClosePolicyViolation,
			truncate("batch is for site "+quoteShort(b.Site)+", connection for "+c.site.key))
		return false
	}
	h.rejectRecords(bad)
	n := len(b.Records)
	h.m.batchRecords.Observe(float64(n))
	if b.Dropped > 0 {
		h.m.clientDropped.Add(float64(b.Dropped))
	}
	// At most maxInFlight batches between reading and their ack on the
	// wire: past that the reader waits (and stops reading), so acks never
	// pile up and queueAck never blocks.
	select {
	case <-c.stopCh: // checked first: select picks among ready cases at random
		return false
	default:
	}
	select {
	case c.slots <- struct{}{}:
	case <-c.stopCh:
		return false
	}
	if n == 0 {
		return c.queueAck(b.Seq, beacon.RejectNone, true)
	}
	now := h.now()
	wait, ok, text := h.rateLimit(c.site, c.bucket, n, now)
	if !ok {
		c.queueAck(b.Seq, beacon.RejectOverload, true) // kept by the module, resent after the wait
		c.stop(ReasonRateLimit, websocket.CloseTryAgainLater,
			truncate("retry-after="+strconv.Itoa(h.rateRetry())+"; "+text))
		return false
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.stopCh:
			t.Stop()
			return false
		}
	}
	seq := b.Seq
	// The batch holds about its frame's bytes (its inbox rows) and its
	// decoded records until its ack (the frame's buffer goes back to the
	// pool, and the records are dropped once Submit returns: the estimate
	// stays conservative).
	cost := batchCost(len(frame), n) - held
	h.budget.force(cost)
	cost += held
	hold = 0
	c.pending.Add(1)
	var once sync.Once
	finish := func() {
		once.Do(func() {
			h.budget.release(cost)
			c.pending.Done()
		})
	}
	began := time.Now()
	ctx := newWaitContext(h.base, began.Add(h.queueWait))
	// Counted once handed over: when Submit returns, or when done runs
	// first (from the store's goroutine, before the ack goes out).
	accepted := sync.OnceFunc(func() { h.m.accepted.Add(float64(n)); c.site.records.Add(float64(n)) })
	err = h.handOver(ctx, func() error {
		if c.memo == nil && h.enricher != nil {
			c.memo = new(enrich.Memo)
		}
		batch := h.batch(&sc.out, b, wire, c.site, c.hdr, c.remote, c.memo, now)
		return h.sink.Submit(ctx, batch, func(err error) {
			defer finish()
			accepted()
			if err != nil {
				c.queueAck(seq, beacon.RejectRetry, true)
				c.stop(ReasonStore, websocket.CloseInternalServerErr, "storage failed, batch not stored: resend it")
				return
			}
			h.m.ackLatency.Observe(time.Since(began).Seconds())
			h.m.acked.Add(float64(n))
			c.queueAck(seq, beacon.RejectNone, true)
		})
	})
	ctx.release()
	if err != nil {
		finish()
		if errors.Is(err, context.DeadlineExceeded) && h.base.Err() == nil {
			// The store's queue stayed full: ClickHouse is slower than
			// what arrives. The module keeps the batch and comes back.
			c.queueAck(seq, beacon.RejectOverload, true)
			h.m.shed.WithLabelValues("ws", ShedQueue).Inc()
			h.m.shedBytes.Add(float64(len(frame)))
			c.stop(ReasonShed, websocket.CloseTryAgainLater, h.retryText("storage queue full"))
			return false
		}
		c.queueAck(seq, beacon.RejectRetry, true)
		if errors.Is(err, context.Canceled) {
			c.stop("", websocket.CloseGoingAway, "collector shutting down")
		} else {
			c.stop(ReasonStore, websocket.CloseInternalServerErr, "storage unavailable: resend later")
		}
		return false
	}
	accepted()
	return true
}

// ack is one Ack for the writer; slot says it frees an in-flight slot once written.
type ack struct {
	seq    uint64
	reject beacon.Reject
	slot   bool
}

// queueAck hands an ack to the writer without blocking, starting a writer
// goroutine when none runs. The in-flight slots bound what is queued, so an
// overlong queue is a bug; the connection is dropped rather than growing
// it. A client that does not read its acks is caught by the writer's write
// deadline.
func (c *conn) queueAck(seq uint64, reject beacon.Reject, slot bool) bool {
	c.wmu.Lock()
	if len(c.queue) >= maxInFlight+4 { // + refusals that take no slot
		c.wmu.Unlock()
		c.stop(ReasonSlowConsumer, websocket.ClosePolicyViolation, "acks not written")
		c.ws.Close()
		return false
	}
	c.queue = append(c.queue, ack{seq: seq, reject: reject, slot: slot})
	c.kickLocked()
	c.wmu.Unlock()
	return true
}

// kickLocked starts the writer goroutine if there is work and none runs.
// c.wmu is held.
func (c *conn) kickLocked() {
	if !c.writing && (len(c.queue) > 0 || c.final) {
		c.writing = true
		go c.writeLoop()
	}
}

// writeLoop writes the queued acks and returns when the queue is empty;
// after the reader's end, it writes the close frame and closes the
// connection.
func (c *conn) writeLoop() {
	var buf []byte
	for {
		c.wmu.Lock()
		batch, dead := c.queue, c.dead
		c.queue = nil // an idle connection keeps no queue
		if len(batch) == 0 || dead {
			if !c.final {
				c.writing = false
				c.wmu.Unlock()
				return
			}
			c.dead = true
			c.wmu.Unlock()
			if !dead {
				c.writeClose()
			}
			c.ws.Close()
			close(c.writerDone)
			return
		}
		c.wmu.Unlock()
		// The acks one insert released (often several per connection) go
		// out in one write; their slots are freed once they are written.
		c.mc.cork()
		var err error
		slots := 0
		for _, a := range batch {
			buf = beacon.Ack{Seq: a.seq, Reject: a.reject}.AppendBinary(buf[:0])
			c.ws.SetWriteDeadline(time.Now().Add(writeWait))
			if err = c.ws.WriteMessage(websocket.BinaryMessage, buf); err != nil {
				break
			}
			if a.slot {
				slots++
			}
		}
		if werr := c.mc.uncork(); err == nil {
			err = werr
		}
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				c.stop(ReasonSlowConsumer, websocket.ClosePolicyViolation, "client does not read its acks")
			} else {
				c.stop("", websocket.CloseNormalClosure, "") // client gone
			}
			c.wmu.Lock()
			c.dead = true
			c.wmu.Unlock()
			c.ws.Close()
			continue
		}
		for range slots {
			<-c.slots
		}
	}
}

// ping runs on the ping timer: a ping keeps proxies from closing an idle
// connection and makes the client's pong extend the read deadline.
func (c *conn) ping() {
	if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
		c.stop("", websocket.CloseNormalClosure, "")
		return
	}
	c.pinger.Reset(pingPeriod)
}

// writeClose sends the close frame the reader chose, then waits briefly for
// the client's close reply so the reason is not lost to a TCP reset.
func (c *conn) writeClose() {
	c.mu.Lock()
	code, text := c.closeCode, c.closeText
	c.mu.Unlock()
	if code == 0 {
		code = websocket.CloseNormalClosure
	}
	if err := c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text),
		time.Now().Add(writeWait)); err != nil {
		return
	}
	nc := c.raw // not through the meter: what is drained is not held
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	nc.SetReadDeadline(time.Now().Add(lingerWait))
	// Between frames the client's next bytes are its close reply (a masked
	// close frame starts 0x88): done. Otherwise (the rest of a refused
	// frame) drain until the client closes or lingerWait passes.
	var first [512]byte
	if n, err := nc.Read(first[:]); err != nil || (n > 0 && first[0] == 0x88) {
		return
	}
	io.Copy(io.Discard, nc)
}

// beaconHeaderLen is the wire header (wasm/beacon/doc.go: magic (3),
// version, minor, kind); a Batch's uvarint seq follows it.
const beaconHeaderLen = 6

// peekSeq reads the sequence number of a batch that failed to decode, when
// its header is sound.
func peekSeq(frame []byte) (uint64, bool) {
	k, _, err := beacon.PeekKind(frame)
	if err != nil || k != beacon.KindBatch || len(frame) <= beaconHeaderLen {
		return 0, false
	}
	seq, n := binary.Uvarint(frame[beaconHeaderLen:])
	return seq, n > 0
}

// truncate keeps a close reason within the 123 bytes a close frame carries.
func truncate(s string) string {
	const max = 123
	if len(s) <= max {
		return s
	}
	s = s[:max-3]
	for len(s) > 0 && s[len(s)-1]&0xC0 == 0x80 { // don't split a UTF-8 sequence
		s = s[:len(s)-1]
	}
	if len(s) > 0 && s[len(s)-1] >= 0xC0 {
		s = s[:len(s)-1]
	}
	return s + "..."
}
