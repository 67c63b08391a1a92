package main

import (
	"math"
	"syscall/js"

	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// maxOpen bounds the streams measured at once; more are passed through unmeasured.
const maxOpen = 64

// stream is one measured response.
type stream struct {
	t0     float64 // performance.now() just before fetch, ms
	lastAt float64 // performance.now() of the last read fed, ms
	// headers is when the response headers arrived, since t0; headersNone:
	// the request ended before them; headersUnknown: the caller did not say
	// (a 10-argument start).
	headers meter.Duration
	m       *meter.Meter
	rec     beacon.Record // request/response facts; metrics filled at end
}

// stream.headers values that are not times.
const (
	headersNone    meter.Duration = -1
	headersUnknown meter.Duration = -2
)

// module is the browser module's state. Only JS callbacks touch it.
type module struct {
	configured bool
	timerFloor meter.Duration
	testHooks  bool
	pageOrigin string
	pagePath   string

	streams map[int]*stream
	nextID  int
	buf     []byte // staged bytes of the current batch, reused
	ops     []byte // staged operations of the current batch, reused

	send   *sender
	panics int
	dirty  bool // streams started, fed or ended since the last mirror

	// recentBusy holds the last busy intervals (performance.now() ms), the
	// next one written at busyNext: a stream started later gets those that
	// end after its t0 (the page busy while its request waited for the
	// response's headers).
	recentBusy [recentBusyN][2]float64
	busyNext   int
}

// recentBusyN bounds the busy intervals kept for streams started later.
const recentBusyN = 16

func newModule() *module {
	return &module{streams: make(map[int]*stream), buf: make([]byte, 0, 64<<10)}
}

// configure(cfg): cfg holds the collector endpoints, site and client facts,
// gathered by the shim (see itl.js).
func (a *module) configure(args []js.Value) any {
	if len(args) < 1 || args[0].Type() != js.TypeObject {
		return "configure: want a config object"
	}
	c := args[0]
	site := propString(c, "site")
	wsURL := propString(c, "wsURL")
	if site == "" || wsURL == "" {
		return "configure: site and wsURL are required"
	}
	a.timerFloor = meter.Duration(propFloat(c, "timerFloorUs") * float64(meter.Microsecond))
	a.testHooks = propBool(c, "testHooks")
	a.pageOrigin = limit(propString(c, "pageOrigin"), 512)
	a.pagePath = limit(cutQuery(propString(c, "pagePath")), 512)
	// The strings the page chooses are cut on rune boundaries to stay
	// within the collector's string limit (the browser's own are short).
	client := beacon.Client{
		UserAgent:      propString(c, "userAgent"),
		UABrands:       propString(c, "uaBrands"),
		UAPlatform:     propString(c, "uaPlatform"),
		UAMobile:       propBool(c, "uaMobile"),
		ConnType:       propString(c, "connType"),
		ConnRTTMs:      uint16(clamp(propFloat(c, "connRTTMs"), 0, math.MaxUint16)),
		TimerFloorUs:   uint32(clamp(propFloat(c, "timerFloorUs"), 0, math.MaxUint32)),
		CrossOriginIso: propBool(c, "crossOriginIsolated"),
		ModuleVersion:  Version,
		Release:        limit(propString(c, "release"), 128),
	}
	beaconURL := propString(c, "beaconURL")
	if s := a.send; s != nil && s.site == site && s.wsURL == wsURL && s.beaconURL == beaconURL {
		// Configured again for the same collector and site (itlmon.init
		// with new options): the sender keeps its connection and the
		// records it holds. When connected, those waiting for a batch go
		// now, under the settings (release) they were recorded with.
		if s.client != client {
			s.flushNow()
		}
		s.client = client
	} else {
		if s != nil {
			// Another collector or site: what the old sender holds was
			// recorded for it, and leaves for it by sendBeacon, as on pagehide.
			s.pagehide()
			s.close()
		}
		a.send = newSender(site, wsURL, beaconURL, client)
	}
	a.send.flushEvery = durationMs(propFloat(c, "flushMs"), defaultFlushEvery)
	a.send.idle = durationMs(propFloat(c, "socketIdleMs"), defaultIdle)
	if propBool(c, "beaconOnly") {
		// A module the page starts at pagehide to send what its Worker
		// could not (itl-module.js): no socket, only the beacon.
		a.send.hidden = true
	}
	if f := c.Get("fetch"); f.Type() == js.TypeFunction {
		a.send.fetch = f // the page's own, not the shim
	}
	a.configured = true
	return true
}

// start(t0, startUnixMs, url, method, model, contentType, httpStatus,
// originID, streamID, pagePath, headersAt) -> id, or -1 when not measured.
// headersAt is performance.now() when the response headers arrived, or -1
// when the request ended before them (then end() is the only other call for
// this id, and it decides aborted or error). A caller that passes no
// headersAt (10 arguments) did not say: the record's HeadersUs is then its
// bound (see headersUs).
func (a *module) start(args []js.Value) any {
	if !a.configured || len(a.streams) >= maxOpen || len(args) < 9 {
		return -1
	}
	ct := argString(args, 5) // media type, lowercased, without parameters (itl.js)
	t0 := argFloat(args, 0)
	headers := headersUnknown
	if len(args) > 10 && args[10].Type() == js.TypeNumber {
		headers = headersNone
		if at := args[10].Float(); at >= 0 {
			headers = max(since(t0, at), 0)
		}
	}
	s := &stream{
		t0:      t0,
		lastAt:  t0,
		headers: headers,
		m:       meter.New(meter.Options{ContentType: ct, TimerFloor: a.timerFloor}),
		rec: beacon.Record{
			StartUnixMs: int64(argFloat(args, 1)),
			PageOrigin:  a.pageOrigin,
			PagePath:    a.pagePath, // the page's path when the stream started, if given (below)
			Model:       limit(argString(args, 4), 128),
			ContentType: limit(ct, 64),
			HTTPStatus:  uint16(clamp(argFloat(args, 6), 0, math.MaxUint16)),
			OriginID:    limit(argString(args, 7), 128),
		},
	}
	if len(args) > 9 && args[9].Type() == js.TypeString { // a single-page app navigates: the path now
		s.rec.PagePath = limit(cutQuery(args[9].String()), 512)
	}
	s.rec.URLOrigin, s.rec.URLPath = beacon.StripQuery(argString(args, 2))
	s.rec.URLOrigin, s.rec.URLPath = limit(s.rec.URLOrigin, 512), limit(s.rec.URLPath, 512)
	js.CopyBytesToGo(s.rec.StreamID[:], args[8])
	for _, b := range a.recentBusy {
		s.markBusy(b[0], b[1])
	}
	id := a.nextID
	a.nextID++
	a.streams[id] = s
	return id
}

// feed(bytes, ops, nOps): a batch of staged reads and busy intervals (see
// the package comment for the layout).
func (a *module) feed(args []js.Value) any {
	if len(args) < 3 {
		return nil
	}
	n := args[2].Int()
	if n <= 0 {
		return nil
	}
	a.ops = grow(a.ops, 32*n)
	js.CopyBytesToGo(a.ops, args[1])
	total := 0
	for i := range n {
		if id := a.op(i, 0); id >= 0 {
			total += int(a.op(i, 1))
		}
	}
	a.buf = grow(a.buf, total)
	js.CopyBytesToGo(a.buf, args[0])
	off := 0
	for i := range n {
		id, size, at := a.op(i, 0), int(a.op(i, 1)), a.op(i, 2)
		if id < 0 {
			a.markBusy(at, a.op(i, 3))
			continue
		}
		if size < 0 || off+size > total {
			return nil // BUG in the shim; drop the rest of the batch
		}
		if s := a.streams[int(id)]; s != nil {
			s.m.Feed(a.buf[off:off+size], since(s.t0, at))
			s.lastAt = at
		}
		off += size
	}
	return nil
}

// op returns float64 j of operation i of the current batch.
func (a *module) op(i, j int) float64 {
	p := 32*i + 8*j
	b := a.ops[p : p+8]
	return math.Float64frombits(uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56)
}

// grow returns b resized to n, reallocating only when it must.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n, n+n/2)
	}
	return b[:n]
}

// end(id, at, kind, httpStatus, proto, out) -> true with the summary in out.
// kind is how the page saw the stream stop (meter.Stop): 1 the body was read
// to its end, 2 aborted through the request's AbortSignal, 3 network error,
// 4 the page cancelled the body, 5 the page went away with it open. The
// status and end follow meter.Outcome: a stop after the format's terminal
// event leaves the stream complete (closed after end); before it, aborted.
func (a *module) end(args []js.Value) any {
	if len(args) < 6 {
		return false
	}
	id := args[0].Int()
	s := a.streams[id]
	if s == nil {
		return false
	}
	delete(a.streams, id)
	how := meter.Stop(clamp(argFloat(args, 2), 0, 255))
	hs := int(argFloat(args, 3))
	if hs == 0 {
		hs = int(s.rec.HTTPStatus)
	}
	s.rec.HTTPProto = limit(argString(args, 4), 16)
	s.m.EndBy(since(s.t0, argFloat(args, 1)), how, hs)
	sum := s.m.Summary()
	fillRecord(&s.rec, &sum)
	s.rec.HeadersUs = s.headersUs(&sum)
	if a.send != nil {
		a.send.add(s.rec)
	}
	a.writeSummary(&sum, s.rec.HeadersUs, args[5])
	return true
}

// headersUs is the record's HeadersUs: the time since t0 the headers arrived,
// NoTime when the request ended before them, and when the caller did not
// say, its bound: the first body byte, or the end of a body that had none
// (the headers came no later; beacon decodes older senders the same way).
func (s *stream) headersUs(sum *meter.Summary) uint32 {
	h := s.headers
	if h == headersUnknown {
		h = sum.TTFB
		if h < 0 {
			h = max(sum.Duration, 0)
		}
	}
	return usTime(h) // headersNone: NoTime
}

// summaryFields is the order of the float64s end writes for itl.js (times in
// ms, -1 = did not happen). Keep in step with SUMMARY in web/static/itl.js.
// The last two: end (meter.End), headersMs (-1 when the request ended
// before the headers).
const summaryFields = 28

func (a *module) writeSummary(s *meter.Summary, headersUs uint32, out js.Value) {
	headersMs := -1.0
	if headersUs != beacon.NoTime {
		headersMs = float64(headersUs) / 1000
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	v := [summaryFields]float64{
		float64(s.Status), float64(s.HTTPStatus), float64(s.Format),
		ms(s.TTFB), ms(s.TTFC), ms(s.TTFT), ms(s.Duration),
		float64(s.Events), float64(s.ContentEvents), float64(s.Tokens), float64(s.Reads), float64(s.Bytes),
		ms(s.GapP50), ms(s.GapP95), ms(s.GapP99), ms(s.GapMax), ms(s.TPOT), s.TokensPerSec,
		float64(s.Stalls), ms(s.StalledFor), s.Jank, b2f(s.Smooth), s.EventsPerRead,
		float64(s.TTFTCause), b2f(s.TokensReported), s.SubFloorShare,
		float64(s.End), headersMs,
	}
	var b [summaryFields * 8]byte
	for i, f := range v {
		u := math.Float64bits(f)
		for j := range 8 {
			b[8*i+j] = byte(u >> (8 * j))
		}
	}
	js.CopyBytesToJS(out, b[:])
}

// markBusy gives a busy interval (performance.now() ms) to every open stream,
// and keeps it for the streams started next.
func (a *module) markBusy(start, end float64) {
	for _, s := range a.streams {
		s.markBusy(start, end)
	}
	a.recentBusy[a.busyNext] = [2]float64{start, end}
	a.busyNext = (a.busyNext + 1) % recentBusyN
}

// markBusy gives s the part of a busy interval after its t0.
func (s *stream) markBusy(start, end float64) {
	if end > s.t0 {
		s.m.MarkBusy(since(s.t0, math.Max(start, s.t0)), since(s.t0, end))
	}
}

// mirror(now?) -> [held, open], or null when nothing changed since the last
// call. A module running in a Worker (itl.js) has no navigator.sendBeacon and
// gets no pagehide in time, so the page keeps the latest mirror for
// pagehide. held is the beacon batch of the records the sender holds (null:
// none); open is a beacon batch of its own with the streams still open,
// these ended as end(kind 5) would end them at their last read: complete
// (closed after end) when the terminal event had arrived, else aborted. A
// stream still waiting for its headers ends at now (the page's
// performance.now(), when given), so the time waited is stored. The two are
// apart because the page sends open only when it cannot replay those
// streams itself (see itl-module.js): they may have been read further, or
// have ended, since.
func (a *module) mirror(args []js.Value) any {
	if a.send == nil || !a.dirty && !a.send.changed {
		return nil
	}
	a.dirty, a.send.changed = false, false
	now := argFloat(args, 0)
	open := make([]beacon.Record, 0, len(a.streams))
	for _, s := range a.streams {
		sum := s.m.Summary()
		hs := sum.HTTPStatus
		if hs == 0 {
			hs = int(s.rec.HTTPStatus)
		}
		sum.Status, sum.End = meter.Outcome(s.m.Terminal(), meter.StopPageHide, hs)
		end := s.lastAt
		if s.headers == headersNone {
			end = math.Max(end, now)
		}
		sum.Duration = since(s.t0, end)
		r := s.rec
		fillRecord(&r, &sum)
		r.HeadersUs = s.headersUs(&sum)
		open = append(open, r)
	}
	out := global.Get("Array").New(2)
	for i, wire := range [2][]byte{a.send.beaconWire(nil), a.send.wireOf(open, 0)} {
		if wire == nil {
			out.SetIndex(i, js.Null())
			continue
		}
		u8 := global.Get("Uint8Array").New(len(wire))
		js.CopyBytesToJS(u8, wire)
		out.SetIndex(i, u8)
	}
	return out
}

func (a *module) pagehide([]js.Value) any {
	if a.send != nil {
		a.send.pagehide()
	}
	return nil
}

func (a *module) pageshow([]js.Value) any {
	if a.send != nil {
		a.send.pageshow()
	}
	return nil
}

// stats() -> counters for tests and debugging.
func (a *module) stats([]js.Value) any {
	o := map[string]any{"open": len(a.streams), "panics": a.panics}
	if s := a.send; s != nil {
		o["pending"] = len(s.pending)
		o["unacked"] = len(s.unacked)
		o["dropped"] = int(s.dropped)
		o["sent"] = s.sentBatches
		o["acked"] = s.ackedBatches
		o["beacons"] = s.beacons
		o["connects"] = s.connects
		o["rejected"] = s.rejected
		o["idleCloses"] = s.idleCloses
		o["shed"] = s.shed
		o["retryAfterMs"] = s.retryAfter
		o["openSocket"] = 0
		if s.open {
			o["openSocket"] = 1
		}
		o["refused"] = 0
		if s.refused {
			o["refused"] = 1
		}
	}
	return o
}

// crash(mode) is a test hook (configure({testHooks: true}) only): "callback"
// panics inside this callback (recovered), "exit" ends the Go program the way an
// unrecovered panic would.
func (a *module) crash(args []js.Value) any {
	if !a.testHooks {
		return false
	}
	switch argString(args, 0) {
	case "callback":
		panic("test hook: panic in callback")
	case "exit":
		// An unrecovered panic on a goroutine kills the Go program: every
		// later call into the module throws, which the shim must survive.
		go func() { panic("test hook: unrecovered panic") }()
	}
	return true
}

// since converts a performance.now() stamp to the time since t0.
func since(t0, at float64) meter.Duration {
	return meter.Duration((at - t0) * float64(meter.Millisecond))
}

func durationMs(ms float64, def meter.Duration) meter.Duration {
	if ms <= 0 {
		return def
	}
	return meter.Duration(ms * float64(meter.Millisecond))
}

// fillRecord copies a meter summary into the wire record.
func fillRecord(r *beacon.Record, s *meter.Summary) {
	r.Format = uint8(s.Format)
	r.Status = uint8(s.Status)
	r.End = uint8(s.End)
	if s.HTTPStatus > 0 {
		r.HTTPStatus = uint16(s.HTTPStatus)
	}
	r.TTFBUs, r.TTFCUs, r.TTFTUs = usTime(s.TTFB), usTime(s.TTFC), usTime(s.TTFT)
	r.DurationUs = usTime(s.Duration)
	r.Events, r.ContentEvents, r.Tokens = u32(s.Events), u32(s.ContentEvents), u32(s.Tokens)
	r.TokensReported = s.TokensReported
	r.Reads, r.Bytes = u32(s.Reads), uint64(max(s.Bytes, 0))
	r.GapP50Us, r.GapP95Us, r.GapP99Us, r.GapMaxUs = us(s.GapP50), us(s.GapP95), us(s.GapP99), us(s.GapMax)
	r.TPOTUs = us(s.TPOT)
	r.TokensPerSec = f32(s.TokensPerSec)
	r.Stalls, r.StalledUs = u32(s.Stalls), uint64(max(s.StalledFor/meter.Microsecond, 0))
	r.Jank, r.Smooth = f32(s.Jank), s.Smooth
	r.EventsPerRead, r.MaxEventsPerRead = f32(s.EventsPerRead), u32(s.MaxEventsPerRead)
	r.BytesPerRead, r.SubFloorShare = f32(s.BytesPerRead), f32(s.SubFloorShare)
	for i := range meter.NumCauses {
		r.StallsByCause[i] = u32(s.StallsByCause[i])
		r.StalledByCause[i] = uint64(max(s.StalledByCause[i]/meter.Microsecond, 0))
	}
	r.TTFTCause = uint8(s.TTFTCause)
	r.ITL, r.ITLTokens = s.ITL, s.ITLTokens
	r.StallList = make([]beacon.Stall, len(s.StallList))
	for i, st := range s.StallList {
		r.StallList[i] = beacon.Stall{StartUs: us(st.Start), EndUs: us(st.End), Cause: uint8(st.Cause), NextReadEvents: st.NextReadEvents}
	}
	r.Timeline = make([]beacon.Stamp, len(s.Timeline))
	for i, st := range s.Timeline {
		r.Timeline[i] = beacon.Stamp{AtUs: us(st.At), Read: st.Read, Content: st.Content}
	}
	r.TimelineDropped = u32(s.TimelineDropped)
}

// ms returns d in milliseconds; a negative d ("did not happen") gives -1.
func ms(d meter.Duration) float64 {
	if d < 0 {
		return -1
	}
	return float64(d) / float64(meter.Millisecond)
}

// usTime is us for a time that may be absent (negative): NoTime then.
func usTime(d meter.Duration) uint32 {
	if d < 0 {
		return beacon.NoTime
	}
	return us(d)
}

func us(d meter.Duration) uint32 {
	v := d / meter.Microsecond
	if v < 0 {
		return 0
	}
	if v >= meter.Duration(beacon.NoTime) {
		return beacon.NoTime - 1
	}
	return uint32(v)
}

func u32(n int) uint32 {
	if n < 0 {
		return 0
	}
	if uint64(n) > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(n)
}

// f32 is v as a rate the wire format accepts: finite and non-negative (NaN
// and negative values become 0, +Inf the largest float32).
//
//go:noinline
func f32(v float64) float32 {
	if !(v > 0) {
		return 0
	}
	if v > math.MaxFloat32 {
		return math.MaxFloat32
	}
	return float32(v)
}

func clamp(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

// limit returns s cut to at most n bytes on a rune boundary, so a valid
// UTF-8 string stays valid: the wire format refuses a record with an invalid
// string. Strings from JS are valid UTF-8 (wasm_exec.js encodes them with
// TextEncoder, which turns a lone surrogate into U+FFFD; Latin-1 header
// bytes arrive as the characters U+0080-U+00FF), so only a byte cut could
// break one. Should a record still be refused, the sender leaves it out
// alone (sender.encode). Not inlined: it is called for every string of a
// record and of the client, and each inlined copy adds to the module.
//
//go:noinline
func limit(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 { // s[n] continues the rune before it
		n--
	}
	return s[:n]
}

// cutQuery returns path without a query or fragment (location.pathname has
// none; this is the module's own guarantee).
func cutQuery(path string) string {
	for i := 0; i < len(path); i++ {
		if path[i] == '?' || path[i] == '#' {
			return path[:i]
		}
	}
	return path
}
