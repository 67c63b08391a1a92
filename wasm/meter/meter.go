package meter

import (
	"unsafe"

	"github.com/itlmon/itlmon/wasm/hist"
)

// Options configure a Meter. The zero value is usable.
type Options struct {
	ContentType    string   // response Content-Type, used to pick the framing/format
	TimerFloor     Duration // clock resolution (100µs Chromium, 1ms Firefox); 0 = 100µs
	TokensPerEvent int      // known tokens per content event (0 = unknown)
	MaxTimeline    int      // first N events kept in the raw timeline (default 256)
	MaxStalls      int      // stalls kept in StallList (default 64)
	// MaxEventBytes caps the bytes kept of one line and of one SSE event's data
	// (default 1 MiB). Longer events are still counted; the excess is not
	// scanned, so a truncated JSON event counts as a non-content event.
	MaxEventBytes int
}

// Defaults for the zero fields of Options.
const (
	DefaultTimerFloor    = 100 * Microsecond
	DefaultMaxTimeline   = 256
	DefaultMaxStalls     = 64
	DefaultMaxEventBytes = 1 << 20
)

const (
	// MaxExactGaps is how many raw ITL gaps a stream keeps for exact
	// quantiles (512 KiB). Beyond it, GapP50/P95/P99 and the jank ratio come
	// from the ITL histogram (within hist.RelativeError); counts, max, TPOT
	// and stalls stay exact.
	MaxExactGaps = 1 << 16

	// Neighbourhood is how many events either side of a stall's ending event
	// the raw timeline keeps.
	Neighbourhood = 4

	// maxTrackedStalls bounds the stalls kept for attribution (each is a
	// gap over 200 ms, so this is over 13 minutes of stalling). Later stalls
	// are counted with CauseUnknown.
	maxTrackedStalls = 4096
	// maxBusy bounds the MarkBusy intervals kept; later ones are ignored.
	maxBusy = 1024
	// sniffBytes: with no usable Content-Type, the framing is chosen from the
	// first line or the first sniffBytes bytes, whichever comes first.
	sniffBytes = 64
)

func (o Options) withDefaults() Options {
	if o.TimerFloor <= 0 {
		o.TimerFloor = DefaultTimerFloor
	}
	if o.TokensPerEvent < 0 {
		o.TokensPerEvent = 0
	}
	if o.MaxTimeline <= 0 {
		o.MaxTimeline = DefaultMaxTimeline
	}
	if o.MaxStalls <= 0 {
		o.MaxStalls = DefaultMaxStalls
	}
	if o.MaxEventBytes <= 0 {
		o.MaxEventBytes = DefaultMaxEventBytes
	}
	return o
}

type framing uint8

const (
	frameSniff framing = iota // not decided yet (no usable Content-Type)
	frameSSE
	frameNDJSON
	frameText
	frameSniffData // text/plain, not decided yet: the AI SDK's data stream or plain text
	frameData      // the AI SDK's data stream: a part per line (format.go, aiData)
)

// readStats counts what one network read carried.
type readStats struct {
	idx     uint32
	events  int
	content int
}

type stallRec struct {
	start, end  Duration
	read        uint32
	nextEvents  uint32 // events of the read that ended the stall
	nextContent uint32 // content events of that read
}

type busySpan struct{ start, end Duration }

type ringEntry struct {
	idx int
	st  Stamp
}

type sniffRead struct {
	n  int // bytes of this read held in sniff
	at Duration
}

// Meter measures one streamed response. Feed it every network read in order,
// then End. A Meter is not safe for concurrent use; Reset reuses it for the
// next stream without allocating.
type Meter struct {
	opts     Options
	framing  framing
	format   Format
	scan     jscan // the classifiers' scratch (one event at a time)
	noResume bool  // tests: scan every event from its start

	ended      bool
	status     Status
	end        End
	httpStatus int
	endAt      Duration
	terminal   bool // the format's terminal event arrived (Terminal)
	typed      bool // generic SSE: an event carried a type (genericSSE)
	toolDeltas bool // AI SDK data stream: a tool call's arguments came in deltas (aiData)

	// Framing state.
	bom      int8 // bytes of a leading UTF-8 BOM matched so far; -1 once past it
	skipLF   bool // the previous line ended with CR: a following LF belongs to it
	carry    []byte
	data     []byte // SSE data buffer (lines joined with LF, trailing LF kept)
	prevData []byte // the previous event's data buffer, kept for scan to resume from
	hasData  bool
	evType   [32]byte // SSE event type buffer (truncated)
	evTypeN  int
	sniff    []byte
	sniffRds []sniffRead

	// Reads.
	reads           int
	bytes           int64
	ttfb            Duration
	lastAt          Duration
	curAt           Duration
	cur             readStats
	readsWithEvents int // committed reads (all but cur) that carried an event
	maxEventsRead   int // over committed reads

	// Events.
	events, content int
	ttfc, ttft      Duration
	lastContent     Duration
	ttftRead        uint32
	ttftReadContent int // content events of ttftRead, once committed
	tokens          int64
	tokensReported  bool

	// Gaps between content events.
	gaps       []Duration     // raw, the first MaxExactGaps (order not kept)
	overflow   hist.Histogram // gaps beyond MaxExactGaps
	itl        hist.Histogram
	gapMax     Duration
	subFloor   int
	stalls     int
	stalledFor Duration
	stallRecs  []stallRec
	untracked  Duration // stalled time of stalls beyond maxTrackedStalls
	busy       []busySpan

	// Sampled raw timeline.
	timeline []Stamp
	ring     [Neighbourhood]ringEntry
	ringN    int
	lastTL   int // event index of the last stamp in timeline
	after    int // events still to keep after a stall

	// Summary scratch.
	stallScratch []stallRec

	// trace, when set (tests), sees every event's payload (SSE data, NDJSON
	// line, nil for a text read) as it is counted.
	trace func(payload []byte, content bool)
}

// New returns a Meter for one stream.
func New(opts Options) *Meter {
	m := &Meter{}
	m.Reset(opts)
	return m
}

// Reset prepares m for a new stream, keeping its buffers.
func (m *Meter) Reset(opts Options) {
	opts = opts.withDefaults()
	old := *m
	old.itl.Reset()
	old.overflow.Reset()
	*m = Meter{
		opts:         opts,
		carry:        keep(old.carry, keepBytes),
		data:         keep(old.data, keepBytes),
		prevData:     keep(old.prevData, keepBytes),
		scan:         jscan{log: keep(old.scan.log, keepGaps), cps: keep(old.scan.cps, keepGaps)},
		sniff:        old.sniff[:0],
		sniffRds:     old.sniffRds[:0],
		gaps:         keep(old.gaps, keepGaps),
		overflow:     old.overflow,
		itl:          old.itl,
		stallRecs:    old.stallRecs[:0],
		busy:         old.busy[:0],
		timeline:     old.timeline[:0],
		stallScratch: old.stallScratch[:0],
		trace:        old.trace,
		lastTL:       -1,
		ttfb:         -1,
		ttfc:         -1,
		ttft:         -1,
		endAt:        -1,
	}
	if cap(m.timeline) < opts.MaxTimeline && opts.MaxTimeline <= 4096 {
		m.timeline = make([]Stamp, 0, opts.MaxTimeline)
	}
	m.framing = framingFor(opts.ContentType)
	if m.framing == frameText {
		m.format = FormatText
	}
}

// A reused Meter keeps its buffers unless one stream made them unusually
// large (a huge event, a very long stream): then they are let go.
const (
	keepBytes = 64 << 10
	keepGaps  = 8192
)

func keep[T any](s []T, limit int) []T {
	if cap(s) > limit {
		return nil
	}
	return s[:0]
}

// framingFor picks the framing from a Content-Type; frameSniff when the type
// says nothing (missing or application/octet-stream).
func framingFor(contentType string) framing {
	mt := contentType
	if i := indexByteString(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	mt = trimSpace(mt)
	switch {
	case mt == "", equalFold(mt, "application/octet-stream"):
		return frameSniff
	case equalFold(mt, "text/event-stream"):
		return frameSSE
	case equalFold(mt, "application/x-ndjson"),
		equalFold(mt, "application/ndjson"),
		equalFold(mt, "application/jsonl"),
		equalFold(mt, "application/x-jsonl"),
		equalFold(mt, "application/jsonlines"),
		equalFold(mt, "application/x-jsonlines"),
		equalFold(mt, "application/stream+json"),
		equalFold(mt, "application/json"):
		return frameNDJSON
	case equalFold(mt, "text/plain"):
		return frameSniffData
	}
	return frameText
}

// Format returns the recognised format (FormatUnknown until the first event
// decides it).
func (m *Meter) Format() Format { return m.format }

// Feed processes one network read that arrived at time at (since t0). Arrival
// times must not go backwards; an earlier one is taken as the previous one.
// Feed does not retain chunk. Empty reads and reads after End are ignored.
func (m *Meter) Feed(chunk []byte, at Duration) {
	if m.ended || len(chunk) == 0 {
		return
	}
	if at < m.lastAt {
		at = m.lastAt
	}
	m.beginRead(at)
	m.bytes += int64(len(chunk))
	switch m.framing {
	case frameSniff, frameSniffData:
		m.sniffFeed(chunk, at)
	case frameText:
		m.event(true)
	default:
		m.frame(chunk)
	}
}

func (m *Meter) beginRead(at Duration) {
	if m.reads > 0 {
		m.commitRead()
	} else {
		m.ttfb = at
	}
	m.cur = readStats{idx: uint32(m.reads)}
	m.reads++
	m.lastAt, m.curAt = at, at
}

// commitRead folds the finished read's counts into the aggregates.
func (m *Meter) commitRead() {
	c := m.cur
	if c.events > 0 {
		m.readsWithEvents++
		m.maxEventsRead = max(m.maxEventsRead, c.events)
	}
	m.backfillStalls()
	if m.content > 0 && m.ttftRead == c.idx {
		m.ttftReadContent = c.content
	}
}

// backfillStalls records, on the stalls the current read ended, how many
// events that read carried. Idempotent.
func (m *Meter) backfillStalls() {
	for i := len(m.stallRecs) - 1; i >= 0 && m.stallRecs[i].read == m.cur.idx; i-- {
		m.stallRecs[i].nextEvents = uint32(m.cur.events)
		m.stallRecs[i].nextContent = uint32(m.cur.content)
	}
}

// MarkBusy records a main-thread long task or long animation frame
// [start, end) since t0. It may come before or after the events it overlaps
// (PerformanceObserver reports late): attribution happens in Summary.
func (m *Meter) MarkBusy(start, end Duration) {
	if end <= start || len(m.busy) >= maxBusy {
		return
	}
	m.busy = append(m.busy, busySpan{start, end})
}

// Terminal reports whether the stream's terminal event has arrived: the event
// after which its format sends nothing more, so that the answer is whole
// whoever closes the body afterwards. Per format: OpenAI Chat "data: [DONE]";
// OpenAI Responses response.completed, response.incomplete or
// response.failed; Anthropic message_stop; the Vercel AI UI message stream's
// "finish" part or "[DONE]"; Ollama a line with "done": true; Cohere
// message-end; Gemini a chunk with a finishReason; TGI the event carrying
// generated_text; any other SSE "[DONE]". Generic NDJSON and plain text have none: only the end of the
// body ends them.
func (m *Meter) Terminal() bool { return m.terminal }

// End closes the stream at time at with the status given (End does not apply
// EndBy's rule: its callers decide). httpStatus >= 400 with st ==
// StatusComplete (or StatusOpen) ends it as StatusHTTPError. Summary.End is
// EndAbort for StatusAborted, EndError for StatusNetworkError, else EndBody.
// A final NDJSON line without a newline counts as an event at time at when
// the body completed normally; an unfinished SSE event is discarded (WHATWG).
// End and EndBy are idempotent: only the first call counts.
func (m *Meter) End(at Duration, st Status, httpStatus int) {
	if m.ended {
		return
	}
	if st == StatusOpen {
		st = StatusComplete
	}
	end := EndBody
	switch st {
	case StatusAborted:
		end = EndAbort
	case StatusNetworkError:
		end = EndError
	}
	at = m.drain(at, st == StatusComplete || st == StatusHTTPError)
	if httpStatus >= 400 && st == StatusComplete {
		st = StatusHTTPError
	}
	m.ended, m.status, m.end, m.httpStatus, m.endAt = true, st, end, httpStatus, at
}

// Stop is how the page saw a stream stop: the page-side fact, without policy.
// The values are the kinds the browser module's end() receives.
type Stop uint8

const (
	StopBodyEnd  Stop = 1 + iota // the body was read to its end
	StopAbort                    // aborted through the request's AbortSignal
	StopError                    // a network error (fetch or a body read rejected)
	StopCancel                   // the page cancelled the body (reader.cancel)
	StopPageHide                 // the page went away with the stream open
)

// Outcome applies the rule that decides how a stream ended from how the page
// saw it stop and whether its terminal event had arrived:
//
//	terminal seen:    StopBodyEnd -> complete, EndBody; StopAbort, StopCancel,
//	                  StopPageHide -> complete, EndClosedAfterEnd; StopError ->
//	                  complete, EndError
//	no terminal:      StopBodyEnd -> complete, EndBody; StopAbort, StopCancel,
//	                  StopPageHide -> aborted, EndAbort; StopError ->
//	                  network error, EndError
//
// then a complete stream with httpStatus >= 400 is StatusHTTPError. A request
// that ended before its response headers has no terminal event, so an abort
// is StatusAborted and a failure StatusNetworkError. An unknown Stop counts
// as StopAbort.
func Outcome(terminal bool, how Stop, httpStatus int) (Status, End) {
	st, end := StatusComplete, EndBody
	switch how {
	case StopBodyEnd:
	case StopError:
		end = EndError
		if !terminal {
			st = StatusNetworkError
		}
	default:
		end = EndClosedAfterEnd
		if !terminal {
			st, end = StatusAborted, EndAbort
		}
	}
	if httpStatus >= 400 && st == StatusComplete {
		st = StatusHTTPError
	}
	return st, end
}

// EndBy closes the stream at time at, deciding its Status and End with
// Outcome from how the page saw it stop and whether the terminal event had
// arrived (a final NDJSON line without a newline counts first when the body
// was read to its end: it may be the terminal one). See End for the rest.
func (m *Meter) EndBy(at Duration, how Stop, httpStatus int) {
	if m.ended {
		return
	}
	at = m.drain(at, how == StopBodyEnd)
	st, end := Outcome(m.terminal, how, httpStatus)
	m.ended, m.status, m.end, m.httpStatus, m.endAt = true, st, end, httpStatus, at
}

// drain dispatches what the framing still holds at the end of the body (the
// sniffed bytes; with bodyEnd, a final NDJSON line without a newline) and
// returns at, not before the last read.
func (m *Meter) drain(at Duration, bodyEnd bool) Duration {
	if at < m.lastAt {
		at = m.lastAt
	}
	if (m.framing == frameSniff || m.framing == frameSniffData) && m.reads > 0 {
		m.sniffDecide(true)
	}
	if (m.framing == frameNDJSON || m.framing == frameData) && bodyEnd && len(m.carry) > 0 && m.reads > 0 {
		m.curAt = at
		if m.framing == frameData {
			m.dataLine(m.carry)
		} else {
			m.ndjsonLine(m.carry)
		}
		m.carry = m.carry[:0]
	}
	return at
}

// sniffFeed holds the first bytes until the framing can be chosen from them,
// then replays the held reads with their own arrival times.
func (m *Meter) sniffFeed(chunk []byte, at Duration) {
	n := min(len(chunk), sniffBytes-len(m.sniff))
	m.sniff = append(m.sniff, chunk[:n]...)
	m.sniffRds = append(m.sniffRds, sniffRead{n: n, at: at})
	if m.sniffDecide(false) {
		m.frameOrText(chunk[n:])
	}
}

// sniffDecide chooses the framing once the held bytes are enough (or final),
// and replays them. It reports whether the framing is now decided.
func (m *Meter) sniffDecide(final bool) bool {
	sniff := sniffFraming
	if m.framing == frameSniffData {
		sniff = sniffDataFraming
	}
	f, ok := sniff(m.sniff, final || len(m.sniff) >= sniffBytes)
	if !ok {
		return false
	}
	m.framing = f
	switch f {
	case frameText:
		m.format = FormatText
	case frameData:
		m.format = FormatVercelAIData
	}
	// Replay: every held read in turn becomes the current read again. No
	// event can have been dispatched before the framing was known, so the
	// committed aggregates of those reads are empty and stay consistent.
	last, lastAt := m.cur, m.curAt
	off := 0
	for i, r := range m.sniffRds {
		m.cur = readStats{idx: last.idx - uint32(len(m.sniffRds)-1-i)}
		m.curAt = r.at
		m.frameOrText(m.sniff[off : off+r.n])
		off += r.n
		if i < len(m.sniffRds)-1 {
			m.commitRead()
		}
	}
	m.curAt = lastAt
	m.sniff, m.sniffRds = m.sniff[:0], m.sniffRds[:0]
	return true
}

func (m *Meter) frameOrText(p []byte) {
	if m.framing == frameText {
		// One read = one event: a held read (even empty remainder) counts once.
		if m.cur.events == 0 {
			m.event(true)
		}
		return
	}
	if len(p) > 0 {
		m.frame(p)
	}
}

var bomBytes = [3]byte{0xEF, 0xBB, 0xBF}

// sniffFraming picks a framing from the first bytes of a body: SSE when the
// first line is an SSE field or comment, NDJSON when it starts with '{' or
// '[', the AI SDK's data stream when it is one of its parts (TYPE:JSON),
// else plain text. ok is false while more bytes could change the answer.
func sniffFraming(b []byte, final bool) (framing, bool) {
	for k := 0; k < 3; k++ {
		if k == len(b) {
			return frameText, final
		}
		if b[k] != bomBytes[k] {
			break
		}
		if k == 2 {
			b = b[3:]
		}
	}
	line := b
	complete := final
	if i := indexLineEnd(b); i >= 0 {
		line, complete = b[:i], true
	}
	l := string(line) // no allocation: compared only
	for l != "" && (l[0] == ' ' || l[0] == '\t') {
		l = l[1:]
	}
	if l != "" && (l[0] == '{' || l[0] == '[') {
		return frameNDJSON, true
	}
	if hasPrefix(l, ":") {
		return frameSSE, true
	}
	for _, f := range [...]string{"data", "event", "id", "retry"} {
		if hasPrefix(l, f+":") || (complete && l == f) {
			return frameSSE, true
		}
		if !complete && hasPrefix(f+":", l) {
			return frameText, false // could still become an SSE field
		}
	}
	if l == "" && !complete {
		return frameText, false
	}
	return sniffDataFraming(b, final)
}

// sniffDataFraming tells a text/plain body that is the AI SDK's data stream
// (its first line a part: a type, a colon and a JSON value) from plain
// text. A first line longer than the bytes held (final) is judged by its
// start: a type, a colon and what opens a JSON string, object or array.
// Plain text is told at its first byte that cannot start a part.
func sniffDataFraming(b []byte, final bool) (framing, bool) {
	line, complete := b, false
	if i := indexLineEnd(b); i >= 0 {
		line, complete = b[:i], true
	}
	switch {
	case len(line) > 0 && !isPartType(line[0]), len(line) > 1 && line[1] != ':':
		return frameText, true
	case complete:
		if len(line) > 2 && validJSON(line[2:]) {
			return frameData, true
		}
		return frameText, true
	case len(line) > 2 && line[2] != '"' && line[2] != '{' && line[2] != '[':
		return frameText, true
	case !final:
		return frameText, false
	case len(line) > 2:
		return frameData, true
	}
	return frameText, true
}

// isPartType reports whether c is a data stream part's type: a digit or a
// lowercase ASCII letter.
func isPartType(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' }

// frame runs SSE, NDJSON or data stream framing over p.
func (m *Meter) frame(p []byte) {
	if m.bom >= 0 {
		for len(p) > 0 && m.bom < 3 {
			if p[0] != bomBytes[m.bom] {
				partial := bomBytes[:m.bom]
				m.bom = -1
				m.lines(partial)
				break
			}
			m.bom++
			p = p[1:]
		}
		if m.bom == 3 {
			m.bom = -1
		}
		if m.bom >= 0 {
			return // p ended inside what may still be a BOM
		}
	}
	m.lines(p)
}

// indexLineEnd returns the index of the first CR or LF in p, or -1. It looks
// at 8 bytes per step (see skipPlain): in WebAssembly bytes.IndexByte is a
// byte loop, and a CR check after it would be a second pass.
func indexLineEnd(p []byte) int {
	i := 0
	for ; i+8 <= len(p); i += 8 {
		w := *(*uint64)(unsafe.Pointer(&p[i]))
		n, r := w^(ones*'\n'), w^(ones*'\r')
		if ((n-ones)&^n|(r-ones)&^r)&highs != 0 {
			break
		}
	}
	for ; i < len(p); i++ {
		if p[i] == '\n' || p[i] == '\r' {
			return i
		}
	}
	return -1
}

// lines splits p into lines (LF, CR or CRLF, a CRLF split across reads
// included) and hands each complete one to the framing. A partial line is
// carried to the next read.
func (m *Meter) lines(p []byte) {
	for len(p) > 0 {
		if m.skipLF {
			m.skipLF = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		i := indexLineEnd(p)
		if i < 0 {
			m.carry = appendCapped(m.carry, p, m.opts.MaxEventBytes)
			return
		}
		line := p[:i]
		if len(m.carry) > 0 {
			m.carry = appendCapped(m.carry, line, m.opts.MaxEventBytes)
			line = m.carry
		}
		m.skipLF = p[i] == '\r'
		switch m.framing {
		case frameSSE:
			m.sseLine(line)
		case frameData:
			m.dataLine(line)
		default:
			m.ndjsonLine(line)
		}
		m.carry = m.carry[:0]
		p = p[i+1:]
	}
}

func appendCapped(dst, src []byte, limit int) []byte {
	if room := limit - len(dst); room < len(src) {
		src = src[:max(room, 0)]
	}
	return append(dst, src...)
}

// sseLine interprets one line of an event stream (WHATWG "process the field").
func (m *Meter) sseLine(line []byte) {
	if len(line) == 0 {
		m.sseDispatch()
		return
	}
	if line[0] == ':' {
		return // comment
	}
	name, value := line, line[:0]
	if c := indexByte(line, ':'); c >= 0 {
		name, value = line[:c], line[c+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "data":
		m.data = appendCapped(m.data, value, m.opts.MaxEventBytes)
		m.data = appendCapped(m.data, newline, m.opts.MaxEventBytes)
		m.hasData = true
	case "event":
		m.evTypeN = copy(m.evType[:], value)
	}
	// id and retry do not matter for timing; unknown fields are ignored.
}

var newline = []byte{'\n'}

func (m *Meter) sseDispatch() {
	if !m.hasData {
		m.evTypeN = 0
		return
	}
	data := m.data
	if n := len(data); n > 0 && data[n-1] == '\n' {
		data = data[:n-1]
	}
	m.scan.keep = !m.noResume // data stays as it is until the dispatch after next
	content := m.classifySSE(data, m.evType[:m.evTypeN])
	if unsafe.SliceData(m.scan.prev) != unsafe.SliceData(data) {
		// This event was not scanned ([DONE], format detection, plain
		// SSE): what the scan kept is an older event's, in the buffer the
		// next event is about to be written to.
		m.scan.prev = nil
	}
	if m.trace != nil {
		m.trace(data, content)
	}
	m.event(content)
	m.data, m.prevData = m.prevData[:0], m.data
	m.hasData, m.evTypeN = false, 0
}

func (m *Meter) ndjsonLine(line []byte) {
	i, j := 0, len(line)
	for i < j && isJSONSpace(line[i]) {
		i++
	}
	for j > i && isJSONSpace(line[j-1]) {
		j--
	}
	if i == j {
		return // blank lines are not events
	}
	m.scan.keep = false // line is in the caller's read buffer
	content := m.classifyNDJSON(line[i:j])
	if m.trace != nil {
		m.trace(line[i:j], content)
	}
	m.event(content)
}

// dataLine is one line of the AI SDK's data stream: one part, one event.
func (m *Meter) dataLine(line []byte) {
	j := len(line)
	for j > 0 && isJSONSpace(line[j-1]) {
		j--
	}
	if j == 0 {
		return // blank lines are not events
	}
	m.scan.keep = false // line is in the caller's read buffer
	content := m.aiData(line[:j])
	if m.trace != nil {
		m.trace(line[:j], content)
	}
	m.event(content)
}

// event records one stream event completed by the current read.
func (m *Meter) event(content bool) {
	at := m.curAt
	idx := m.events
	m.events++
	m.cur.events++
	if idx == 0 {
		m.ttfc = at
	}
	stall := false
	if content {
		m.cur.content++
		if m.content == 0 {
			m.ttft, m.ttftRead = at, m.cur.idx
		} else {
			g := at - m.lastContent
			m.gap(g, at)
			stall = g > StallThreshold
		}
		m.content++
		m.lastContent = at
	}
	m.stamp(idx, Stamp{At: at, Read: m.cur.idx, Content: content}, stall)
}

func micros(d Duration) float64 { return float64(d) / float64(Microsecond) }

func (m *Meter) gap(g, at Duration) {
	if len(m.gaps) < MaxExactGaps {
		m.gaps = append(m.gaps, g)
	} else {
		m.overflow.Record(micros(g))
	}
	m.itl.Record(micros(g))
	m.gapMax = max(m.gapMax, g)
	if g < m.opts.TimerFloor {
		m.subFloor++
	}
	if g > StallThreshold {
		m.stalls++
		m.stalledFor += g
		if len(m.stallRecs) < maxTrackedStalls {
			m.stallRecs = append(m.stallRecs, stallRec{start: at - g, end: at, read: m.cur.idx})
		} else {
			m.untracked += g
		}
	}
}

// stamp keeps the first MaxTimeline events and the Neighbourhood events either
// side of every stall's ending event, up to MaxTimeline +
// MaxStalls*(2*Neighbourhood+1) stamps.
func (m *Meter) stamp(idx int, st Stamp, stall bool) {
	limit := m.opts.MaxTimeline + m.opts.MaxStalls*(2*Neighbourhood+1)
	keep := idx < m.opts.MaxTimeline
	if stall {
		keep = true
		m.after = Neighbourhood
		n := min(m.ringN, Neighbourhood)
		for k := n; k >= 1; k-- {
			e := m.ring[(m.ringN-k)%Neighbourhood]
			if e.idx > m.lastTL && len(m.timeline) < limit {
				m.timeline = append(m.timeline, e.st)
				m.lastTL = e.idx
			}
		}
	} else if m.after > 0 {
		keep = true
		m.after--
	}
	if keep && len(m.timeline) < limit {
		m.timeline = append(m.timeline, st)
		m.lastTL = idx
	}
	m.ring[m.ringN%Neighbourhood] = ringEntry{idx: idx, st: st}
	m.ringN++
}

// setTokens records an output token count reported by the API (the last
// report wins: the formats report cumulative counts).
func (m *Meter) setTokens(v []byte) {
	if n, ok := jint(v); ok {
		m.tokens, m.tokensReported = n, true
	}
}
