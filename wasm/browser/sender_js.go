package main

import (
	"syscall/js"

	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

const (
	defaultFlushEvery = 2 * meter.Second // at most one batch per this interval (stream ends flush sooner when idle)
	// defaultIdle: the socket closes after this long with nothing to send
	// and nothing unacknowledged, and opens again for the next record, so
	// open sockets follow streaming tabs, not open ones.
	defaultIdle = 30 * meter.Second
	// maxRetryAfter bounds the wait a collector asks for (close 1013).
	maxRetryAfter   = 10 * 60 * meter.Second
	backoffMin      = 500 * meter.Millisecond
	backoffMax      = 30 * meter.Second
	maxPending      = 512       // records waiting for a batch
	maxBatchRecords = 64        // records per batch
	maxUnackedBytes = 256 << 10 // encoded batches kept until acknowledged
	maxBeaconBytes  = 64 << 10  // navigator.sendBeacon limit
	// refuseAfter consecutive failed attempts (handshakes that never open,
	// or sockets closed with 1008 policy violation) make the sender ask the
	// collector why; a refusal that resending cannot fix (unknown site,
	// origin not allowed) stops it for the page's life.
	refuseAfter = 3
)

// sentBatch is a batch sent (or to be resent) and not yet acknowledged.
type sentBatch struct {
	seq     uint64
	records []beacon.Record
	dropped uint32
	wire    []byte
}

// sender batches records onto a WebSocket to the collector. It never blocks:
// records beyond the bounds are dropped and counted, and the count travels
// with the next batch. Every method runs on a JS callback.
type sender struct {
	site, wsURL, beaconURL string
	client                 beacon.Client
	flushEvery             meter.Duration
	idle                   meter.Duration // see defaultIdle

	ws        js.Value // null when not connected
	open      bool
	hidden    bool // pagehide: no socket until pageshow
	wsFuncs   []js.Func
	pending   []beacon.Record
	unacked   []sentBatch
	unackedN  int // bytes in unacked
	dropped   uint32
	seq       uint64
	lastFlush float64 // performance.now() of the last flush, ms; long ago before the first
	lastUsed  float64 // performance.now() of the socket's last open, send or ack, ms
	backoff   meter.Duration

	flushTimer, retryTimer, idleTimer *timer

	// Refusals: failed counts consecutive failed attempts (reset by an
	// open socket that gets an ack); refused is set once the collector said
	// the site or origin is not accepted: no more sockets or beacons, and
	// every record is counted as dropped.
	failed     int
	refused    bool
	probing    bool
	fetch      js.Value // the page's original fetch (itl.js), for the probe
	probeFuncs [3]js.Func

	sentBatches, ackedBatches, beacons, connects, rejected int
	idleCloses, shed                                       int     // sockets closed idle; 1013 closes honoured
	retryAfter                                             float64 // the last wait a 1013 asked for, ms
	retryAt                                                float64 // performance.now() before which no socket opens, ms

	changed bool // what beaconWire would send changed (module.mirror)
}

func newSender(site, wsURL, beaconURL string, c beacon.Client) *sender {
	s := &sender{site: site, wsURL: wsURL, beaconURL: beaconURL, client: c, flushEvery: defaultFlushEvery, idle: defaultIdle,
		ws: js.Null(), lastFlush: -1e12}
	s.flushTimer = newTimer(s.flushNow)
	s.retryTimer = newTimer(s.connect)
	s.idleTimer = newTimer(s.idleCheck)
	s.fetch = global.Get("fetch")
	s.probeFuncs = [3]js.Func{
		callback("probe", s.probeResponse),
		callback("probe", func(js.Value) { s.probing = false }),
		callback("probe", s.probeText),
	}
	s.seq = uint64(random() * (1 << 40)) // distinct per page load, room to count up
	return s
}

// add queues a finished stream's record.
func (s *sender) add(r beacon.Record) {
	s.changed = true
	if s.refused {
		s.dropped++
		return
	}
	if len(s.pending) >= maxPending {
		s.pending = s.pending[1:]
		s.dropped++
	}
	s.pending = append(s.pending, r)
	if !s.open {
		if !s.retryTimer.armed {
			s.connect()
		}
		return
	}
	s.scheduleFlush()
}

// scheduleFlush sends now if the last batch is older than flushEvery, else
// arms the flush timer for when it will be.
func (s *sender) scheduleFlush() {
	wait := s.flushEvery - since(s.lastFlush, now())
	if wait <= 0 {
		s.flushNow()
		return
	}
	s.flushTimer.arm(wait)
}

func (s *sender) flushNow() {
	if !s.open {
		return
	}
	for len(s.pending) > 0 {
		n := min(len(s.pending), maxBatchRecords)
		b := sentBatch{records: s.pending[:n:n], dropped: s.dropped}
		s.pending = s.pending[n:]
		s.dropped = 0
		s.seq++
		b.seq = s.seq
		wire, recs, dropped := s.encode(b.seq, b.records, b.dropped)
		if wire == nil {
			s.dropped += dropped
			continue
		}
		b.wire, b.records, b.dropped = wire, recs, dropped
		s.keep(b)
		s.write(wire)
	}
	if len(s.pending) == 0 {
		s.pending = nil // let the sent slices' backing array go once acked
	}
	s.lastFlush = now()
	s.armIdle() // when every record was left out, nothing will be acked
}

// keep adds b to the unacknowledged batches, dropping the oldest over the bound.
func (s *sender) keep(b sentBatch) {
	s.unacked = append(s.unacked, b)
	s.unackedN += len(b.wire)
	for s.unackedN > maxUnackedBytes && len(s.unacked) > 1 {
		old := s.unacked[0]
		s.unacked = s.unacked[1:]
		s.unackedN -= len(old.wire)
		s.dropped += uint32(len(old.records)) + old.dropped
		s.changed = true
	}
}

// encode encodes a batch of recs. A record the wire format refuses (the
// module should never make one: see limit and f32) is left out alone and
// counted in dropped, so it never takes the others with it; recs is then a
// copy without it. When the batch itself cannot be encoded (its site or
// client), wire is nil and dropped counts every record.
func (s *sender) encode(seq uint64, recs []beacon.Record, dropped uint32) (wire []byte, kept []beacon.Record, _ uint32) {
	for {
		b := beacon.Batch{Seq: seq, Site: s.site, Client: s.client, Dropped: dropped, Records: recs}
		w, err := b.AppendBinary(nil)
		if err == nil {
			return w, recs, dropped
		}
		report("encode", err)
		de, ok := err.(*beacon.DecodeError)
		if !ok || de.Record < 0 || de.Record >= len(recs) {
			return nil, nil, dropped + uint32(len(recs))
		}
		i := de.Record
		recs = append(recs[:i:i], recs[i+1:]...)
		dropped++
	}
}

func (s *sender) write(wire []byte) {
	u8 := global.Get("Uint8Array").New(len(wire))
	js.CopyBytesToJS(u8, wire)
	s.ws.Call("send", u8)
	s.sentBatches++
	s.lastUsed = now()
}

// idleCheck runs on the idle timer: the socket closes once it has been
// unused for s.idle with nothing waiting and nothing unacknowledged; the
// next record opens a new one (one handshake per burst of streams).
func (s *sender) idleCheck() {
	if !s.open {
		return
	}
	if len(s.pending) > 0 || len(s.unacked) > 0 {
		return // armed again when the last ack arrives
	}
	if wait := s.idle - since(s.lastUsed, now()); wait > 0 {
		s.idleTimer.arm(wait)
		return
	}
	s.idleCloses++
	ws := s.ws
	s.dropSocket() // no close event: nothing to reconnect for
	if st := ws.Get("readyState").Int(); st == 0 || st == 1 {
		ws.Call("close", 1000, "idle")
	}
}

// armIdle starts the idle countdown when nothing is waiting or unacknowledged.
func (s *sender) armIdle() {
	if s.open && len(s.pending) == 0 && len(s.unacked) == 0 {
		s.idleTimer.arm(s.idle)
	}
}

// connect opens the WebSocket unless one is open or opening.
func (s *sender) connect() {
	if s.hidden || s.refused || !s.ws.IsNull() || (len(s.pending) == 0 && len(s.unacked) == 0) {
		return
	}
	if wait := since(now(), s.retryAt); wait > 0 {
		s.retryTimer.arm(wait) // a collector that shed us asked for this wait
		return
	}
	ws := global.Get("WebSocket").New(s.wsURL)
	ws.Set("binaryType", "arraybuffer")
	s.ws = ws
	s.connects++
	on := func(name string, fn func(ev js.Value)) {
		f := js.FuncOf(func(_ js.Value, args []js.Value) any {
			defer func() {
				if r := recover(); r != nil {
					report("websocket "+name, r)
				}
			}()
			if !s.ws.Equal(ws) {
				return nil // a stale socket's late event
			}
			var ev js.Value
			if len(args) > 0 {
				ev = args[0]
			}
			fn(ev)
			return nil
		})
		s.wsFuncs = append(s.wsFuncs, f)
		ws.Set("on"+name, f)
	}
	on("open", func(js.Value) {
		s.open = true
		s.lastUsed = now()
		// Resend what was never acknowledged, in order, then what is new.
		for _, b := range s.unacked {
			s.write(b.wire)
		}
		s.flushNow()
	})
	on("message", func(ev js.Value) { s.onMessage(ev.Get("data")) })
	on("close", func(ev js.Value) {
		opened := s.open
		code := 0
		if ev.Type() == js.TypeObject {
			code = ev.Get("code").Int()
		}
		policy := code == 1008
		if !opened || policy {
			s.failed++
		}
		reason := ""
		if policy || code == 1013 {
			reason = ev.Get("reason").String()
		}
		if wait, ok := retryAfter(reason); code == 1013 && ok {
			// Shed (try again later): keep everything, come back after
			// the wait the collector asked for plus up to half of it
			// again (jitter, so shed tabs do not return together), never
			// before.
			s.dropSocket()
			s.shed++
			d := wait + meter.Duration(random()*float64(wait/2))
			s.retryAfter = float64(d) / float64(meter.Millisecond)
			s.retryAt = now() + s.retryAfter
			if !s.hidden {
				s.retryTimer.stop()
				s.retryTimer.arm(d)
			}
			return
		}
		s.closed()
		switch {
		case s.failed < refuseAfter:
		case policy:
			s.refuse(reason)
		case !opened:
			s.probe()
		}
	})
	on("error", func(js.Value) {}) // close follows
}

func (s *sender) onMessage(data js.Value) {
	if data.Type() != js.TypeObject {
		return
	}
	u8 := global.Get("Uint8Array").New(data)
	buf := make([]byte, u8.Length())
	js.CopyBytesToGo(buf, u8)
	if k, _, err := beacon.PeekKind(buf); err != nil || k != beacon.KindAck {
		return
	}
	ack, err := beacon.DecodeAck(buf)
	if err != nil {
		return
	}
	i := 0
	for i < len(s.unacked) && s.unacked[i].seq != ack.Seq {
		i++
	}
	if i == len(s.unacked) {
		return // a duplicate ack, or for a batch already dropped
	}
	b := s.unacked[i]
	switch ack.Reject {
	case beacon.RejectOverload, beacon.RejectRetry:
		// Kept: resent on the next connection. The collector closes this
		// one next (1013 with the wait it asks for, or 1011), which paces
		// the retry.
		return
	case beacon.RejectNone:
		s.backoff = 0
		s.failed = 0
		s.ackedBatches++
		s.lastUsed = now()
	default:
		// Malformed, version, limit, site: resending cannot help.
		s.rejected += len(b.records)
	}
	s.unackedN -= len(b.wire)
	s.unacked = append(s.unacked[:i:i], s.unacked[i+1:]...)
	s.changed = true
	s.armIdle()
}

// retryAfter reads the wait a collector asks for in a close reason
// ("retry-after=N; why", N whole seconds; see collector/ingest).
func retryAfter(reason string) (meter.Duration, bool) {
	const key = "retry-after="
	i := 0
	for i+len(key) <= len(reason) && reason[i:i+len(key)] != key {
		i++
	}
	if i+len(key) > len(reason) {
		return 0, false
	}
	n, digits := 0, 0
	for _, c := range []byte(reason[i+len(key):]) {
		if c < '0' || c > '9' || digits == 6 {
			break
		}
		n = n*10 + int(c-'0')
		digits++
	}
	if digits == 0 {
		return 0, false
	}
	return min(meter.Duration(n)*meter.Second, maxRetryAfter), true
}

// now returns performance.now() in ms: package time would add to the module.
func now() float64 { return performance.Call("now").Float() }

// probe asks the collector why the socket keeps failing: an empty batch
// POSTed to the beacon URL is stored as nothing (204) when the site and
// origin are accepted, and refused with 404 (unknown site) or 403 (origin
// not allowed) with the reason as text, readable cross-origin. Anything else
// (network down, other statuses) is transient: the sender keeps retrying.
func (s *sender) probe() {
	if s.probing || s.refused || s.beaconURL == "" || s.fetch.Type() != js.TypeFunction {
		return
	}
	wire, _, _ := s.encode(s.seq, nil, 0)
	if wire == nil {
		return
	}
	u8 := global.Get("Uint8Array").New(len(wire))
	js.CopyBytesToJS(u8, wire)
	opts := global.Get("Object").New()
	opts.Set("method", "POST")
	opts.Set("body", u8)
	opts.Set("credentials", "omit")
	opts.Set("cache", "no-store")
	s.probing = true
	s.fetch.Invoke(s.beaconURL, opts).Call("then", s.probeFuncs[0], s.probeFuncs[1])
}

func (s *sender) probeResponse(resp js.Value) {
	if st := resp.Get("status").Int(); st == 403 || st == 404 {
		resp.Call("text").Call("then", s.probeFuncs[2], s.probeFuncs[1])
		return
	}
	s.probing = false
}

func (s *sender) probeText(text js.Value) {
	s.probing = false
	s.refuse(limit(text.String(), 200))
}

// refuse stops sending for good: the collector does not accept this site
// from this page. What was waiting is counted as dropped, and so is every
// later record.
func (s *sender) refuse(reason string) {
	if s.refused {
		return
	}
	s.refused = true
	s.changed = true
	s.flushTimer.stop()
	s.retryTimer.stop()
	s.idleTimer.stop()
	s.dropSocket()
	n := uint32(len(s.pending))
	for _, b := range s.unacked {
		n += uint32(len(b.records)) + b.dropped
	}
	s.dropped += n
	s.pending, s.unacked, s.unackedN = nil, nil, 0
	for len(reason) > 0 && (reason[len(reason)-1] == '\n' || reason[len(reason)-1] == ' ') {
		reason = reason[:len(reason)-1]
	}
	global.Get("console").Call("warn", "itlmon: collector refused site \""+s.site+"\": "+reason)
}

// callback wraps f as a JS function of one argument with panics recovered.
func callback(where string, f func(js.Value)) js.Func {
	return js.FuncOf(func(_ js.Value, args []js.Value) any {
		defer func() {
			if r := recover(); r != nil {
				report(where, r)
			}
		}()
		var v js.Value
		if len(args) > 0 {
			v = args[0]
		}
		f(v)
		return nil
	})
}

// random returns Math.random(): math/rand would add to the module.
func random() float64 { return global.Get("Math").Call("random").Float() }

// closed handles the socket's end: forget it, and reconnect with backoff and
// jitter while there is anything left to deliver.
func (s *sender) closed() {
	s.dropSocket()
	if s.hidden || (len(s.unacked) == 0 && len(s.pending) == 0) {
		return
	}
	s.backoff = min(max(2*s.backoff, backoffMin), backoffMax)
	// Jitter over the upper half: [backoff/2, backoff).
	d := s.backoff/2 + meter.Duration(random()*float64(s.backoff/2))
	s.retryTimer.arm(d)
}

func (s *sender) dropSocket() {
	if !s.ws.IsNull() {
		ws := s.ws
		for _, ev := range [...]string{"open", "message", "close", "error"} {
			ws.Set("on"+ev, js.Null())
		}
		if st := ws.Get("readyState").Int(); st == 0 || st == 1 {
			ws.Call("close")
		}
	}
	for _, f := range s.wsFuncs {
		f.Release()
	}
	s.wsFuncs = s.wsFuncs[:0]
	s.ws = js.Null()
	s.open = false
}

// pagehide closes the socket (a page with an open WebSocket cannot enter the
// back/forward cache) and sends what is left with navigator.sendBeacon. In a
// Worker there is no sendBeacon: the page has sent the last mirror (see
// module.mirror) and the records stay here, for pageshow (the collector keeps
// one row per stream id, so none is stored twice).
func (s *sender) pagehide() {
	s.hidden = true
	if s.refused {
		return
	}
	s.flushTimer.stop()
	s.retryTimer.stop()
	s.idleTimer.stop()
	s.dropSocket()
	nav := global.Get("navigator")
	if nav.Get("sendBeacon").Type() != js.TypeFunction || s.beaconURL == "" {
		return
	}
	wire := s.beaconWire(nil)
	if wire == nil {
		return
	}
	u8 := global.Get("Uint8Array").New(len(wire))
	js.CopyBytesToJS(u8, wire)
	if nav.Call("sendBeacon", s.beaconURL, u8).Bool() {
		s.beacons++
		s.unacked, s.unackedN, s.pending, s.dropped = nil, 0, nil, 0
		s.changed = true
	}
}

// beaconWire encodes one beacon batch: the records held (unacknowledged
// batches first, then pending) followed by extra, under the beacon size
// limit (see wireOf). It returns nil when there is nothing to send or the
// collector refused the site.
func (s *sender) beaconWire(extra []beacon.Record) []byte {
	var recs []beacon.Record
	dropped := s.dropped
	for _, b := range s.unacked {
		recs = append(recs, b.records...)
		dropped += b.dropped
	}
	recs = append(recs, s.pending...)
	return s.wireOf(append(recs, extra...), dropped)
}

// wireOf encodes recs as one beacon batch with its own batch number (never
// a WebSocket batch's), under the beacon size limit: the oldest are left
// out, and counted as dropped, to fit. Nil when there is nothing to send or
// the collector refused the site.
func (s *sender) wireOf(recs []beacon.Record, dropped uint32) []byte {
	if s.refused || len(recs) == 0 && dropped == 0 {
		return nil
	}
	s.seq++
	for {
		w, kept, d := s.encode(s.seq, recs, dropped)
		if w == nil {
			return nil
		}
		if len(w) <= maxBeaconBytes {
			return w
		}
		recs, dropped = kept, d
		if len(recs) == 0 {
			return nil
		}
		// Leave out about the share that does not fit (at least one).
		n := max(1, len(recs)*(len(w)-maxBeaconBytes)/len(w))
		recs = recs[n:]
		dropped += uint32(n)
	}
}

// pageshow: the page is back (from the back/forward cache); reconnect lazily.
func (s *sender) pageshow() {
	s.hidden = false
	if len(s.pending) > 0 || len(s.unacked) > 0 {
		s.connect()
	}
}

func (s *sender) close() {
	s.hidden = true
	s.flushTimer.release()
	s.retryTimer.release()
	s.idleTimer.release()
	s.dropSocket()
	for _, f := range s.probeFuncs {
		f.Release()
	}
}

// timer is a JS setTimeout with one reusable callback.
type timer struct {
	fn    js.Func
	id    js.Value
	armed bool
}

func newTimer(f func()) *timer {
	t := &timer{}
	t.fn = js.FuncOf(func(js.Value, []js.Value) any {
		defer func() {
			if r := recover(); r != nil {
				report("timer", r)
			}
		}()
		t.armed = false
		f()
		return nil
	})
	return t
}

// maxTimeout is the longest setTimeout delay: browsers run a timer with a
// longer one at once. A longer wait fires early and is armed again for the
// rest (see idleCheck).
const maxTimeout = (1<<31 - 1) * meter.Millisecond

func (t *timer) arm(d meter.Duration) {
	if t.armed {
		return
	}
	t.armed = true
	t.id = global.Call("setTimeout", t.fn, float64(min(d, maxTimeout))/float64(meter.Millisecond))
}

func (t *timer) stop() {
	if t.armed {
		global.Call("clearTimeout", t.id)
		t.armed = false
	}
}

func (t *timer) release() {
	t.stop()
	t.fn.Release()
}
