package beacon

import (
	"strconv"

	"github.com/itlmon/itlmon/wasm/hist"
)

// Batch is a KindBatch message: the records one page sends in one go.
type Batch struct {
	Seq     uint64 // per page, increasing; the Ack echoes it
	Site    string // site key
	Client  Client
	Dropped uint32 // records the page dropped so far (queue full, never sent)
	Records []Record
}

// Limits bound what a decoder accepts. A zero field takes its value from
// DefaultLimits.
type Limits struct {
	MaxBytes    int // whole message
	MaxRecords  int // records per batch
	MaxBuckets  int // non-empty buckets per histogram
	MaxTimeline int // timeline entries per record
	MaxStalls   int // stall list entries per record
	MaxString   int // bytes per string
}

// DefaultLimits fit what the browser module sends with a wide margin: a
// record with two full histograms, a 256-entry timeline and 64 stalls is
// about 3 KB.
var DefaultLimits = Limits{
	MaxBytes:    1 << 20,
	MaxRecords:  1000,
	MaxBuckets:  hist.NumIndexes / 2, // 20 octaves, 100 µs .. 100 s
	MaxTimeline: 4096,
	MaxStalls:   1024,
	MaxString:   2048,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	for _, f := range [...]struct{ v, def *int }{
		{&l.MaxBytes, &d.MaxBytes}, {&l.MaxRecords, &d.MaxRecords}, {&l.MaxBuckets, &d.MaxBuckets},
		{&l.MaxTimeline, &d.MaxTimeline}, {&l.MaxStalls, &d.MaxStalls}, {&l.MaxString, &d.MaxString},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return l
}

// Record flags: booleans and the presence of optional sections.
const (
	flagTokensReported = 1 << iota
	flagSmooth
	flagStats     // gap quantiles, rates, stalls, jank, re-chunking
	flagITL       // ITL histogram
	flagTimeline  // raw timeline
	flagStalls    // stall list
	flagCauses    // per-cause stall counts and times, TTFT cause
	flagITLTokens // token-normalised ITL histogram
	knownFlags    = 1<<iota - 1
)

// Client flags.
const (
	clientUAMobile = 1 << iota
	clientCrossOriginIso
	knownClientFlags = 1<<iota - 1
)

// numCauses is the number of meter.Cause values (the per-cause arrays' length).
const numCauses = 5

var _ [numCauses]uint32 = Record{}.StallsByCause

// minRecordSize: length prefix, stream id and flags.
const minRecordSize = 1 + 16 + 1

// AppendBinary appends the encoding of b to dst. It fails, with a
// *DecodeError wrapping ErrInvalid, for values no decoder accepts: strings
// that are not UTF-8, paths or origins with a query or fragment, NaN,
// infinite or negative rates, cause codes out of range. Limits are the
// receiver's business and are not checked here.
func (b *Batch) AppendBinary(dst []byte) ([]byte, error) {
	return encoder{minor: Minor}.appendBatch(dst, b)
}

// encoder writes one minor version; tests use extra to play a newer sender
// that appends fields to every section, and unchecked to play a broken one.
type encoder struct {
	minor     uint8
	extra     []byte
	unchecked bool
}

func (e encoder) appendBatch(dst []byte, b *Batch) ([]byte, error) {
	if err := b.check(); err != nil && !e.unchecked {
		return dst, err
	}
	dst = appendHeader(dst, KindBatch, e.minor)
	dst = appendUvarint(dst, b.Seq)
	dst = appendString(dst, b.Site)
	dst, start := beginSection(dst)
	dst = e.appendClient(dst, &b.Client)
	dst = endSection(dst, start)
	dst = appendUvarint(dst, uint64(b.Dropped))
	dst = appendUvarint(dst, uint64(len(b.Records)))
	var prev *Record = &emptyRecord
	for i := range b.Records {
		rec := &b.Records[i]
		dst, start = beginSection(dst)
		dst = e.appendRecord(dst, rec, prev)
		dst = endSection(dst, start)
		prev = rec
	}
	return append(dst, e.extra...), nil
}

var emptyRecord Record

func (e encoder) appendClient(dst []byte, c *Client) []byte {
	dst = appendString(dst, c.UserAgent)
	dst = appendString(dst, c.UABrands)
	dst = appendString(dst, c.UAPlatform)
	dst = appendString(dst, c.ConnType)
	dst = appendString(dst, c.ModuleVersion)
	dst = appendString(dst, c.Release)
	var flags uint64
	if c.UAMobile {
		flags |= clientUAMobile
	}
	if c.CrossOriginIso {
		flags |= clientCrossOriginIso
	}
	dst = appendUvarint(dst, flags)
	dst = appendUvarint(dst, uint64(c.ConnRTTMs))
	dst = appendUvarint(dst, uint64(c.TimerFloorUs))
	return append(dst, e.extra...)
}

// appendRepString writes s, or the 0 marker when it equals the previous
// record's value (origins, paths, model and protocol rarely change within a
// batch).
func appendRepString(dst []byte, s, prev string) []byte {
	if s == prev {
		return append(dst, 0)
	}
	dst = appendUvarint(dst, uint64(len(s))+1)
	return append(dst, s...)
}

// appendRecordStrings writes a record's strings, each repeating prev's
// when equal: what follows its stream id and flags.
func appendRecordStrings(dst []byte, r, prev *Record) []byte {
	dst = appendRepString(dst, r.OriginID, prev.OriginID)
	dst = appendRepString(dst, r.PageOrigin, prev.PageOrigin)
	dst = appendRepString(dst, r.PagePath, prev.PagePath)
	dst = appendRepString(dst, r.URLOrigin, prev.URLOrigin)
	dst = appendRepString(dst, r.URLPath, prev.URLPath)
	dst = appendRepString(dst, r.Model, prev.Model)
	dst = appendRepString(dst, r.HTTPProto, prev.HTTPProto)
	return appendRepString(dst, r.ContentType, prev.ContentType)
}

func (r *Record) hasStats() bool {
	return r.GapP50Us|r.GapP95Us|r.GapP99Us|r.GapMaxUs|r.TPOTUs|r.Stalls|r.MaxEventsPerRead != 0 ||
		r.StalledUs != 0 || r.TokensPerSec != 0 || r.Jank != 0 || r.EventsPerRead != 0 ||
		r.BytesPerRead != 0 || r.SubFloorShare != 0
}

func (r *Record) hasCauses() bool {
	return r.StallsByCause != [numCauses]uint32{} || r.StalledByCause != [numCauses]uint64{} || r.TTFTCause != 0
}

func (e encoder) appendRecord(dst []byte, r, prev *Record) []byte {
	var flags uint64
	if r.TokensReported {
		flags |= flagTokensReported
	}
	if r.Smooth {
		flags |= flagSmooth
	}
	if r.hasStats() {
		flags |= flagStats
	}
	if r.ITL.Count() > 0 {
		flags |= flagITL
	}
	if len(r.Timeline) > 0 || r.TimelineDropped > 0 {
		flags |= flagTimeline
	}
	if len(r.StallList) > 0 {
		flags |= flagStalls
	}
	if r.hasCauses() {
		flags |= flagCauses
	}
	if r.ITLTokens.Count() > 0 {
		flags |= flagITLTokens
	}
	dst = append(dst, r.StreamID[:]...)
	dst = appendUvarint(dst, flags)
	dst = appendRecordStrings(dst, r, prev)
	dst = appendVarint(dst, r.StartUnixMs)
	dst = append(dst, r.Format, r.Status)
	dst = appendUvarint(dst, uint64(r.HTTPStatus))
	dst = appendOptTime(dst, r.TTFBUs)
	dst = appendOptTime(dst, r.TTFCUs)
	dst = appendOptTime(dst, r.TTFTUs)
	dst = appendOptTime(dst, r.DurationUs)
	dst = appendUvarint(dst, uint64(r.Events))
	dst = appendUvarint(dst, uint64(r.ContentEvents))
	dst = appendUvarint(dst, uint64(r.Tokens))
	dst = appendUvarint(dst, uint64(r.Reads))
	dst = appendUvarint(dst, r.Bytes)
	if flags&flagStats != 0 {
		dst = appendUvarint(dst, uint64(r.GapP50Us))
		dst = appendUvarint(dst, uint64(r.GapP95Us))
		dst = appendUvarint(dst, uint64(r.GapP99Us))
		dst = appendUvarint(dst, uint64(r.GapMaxUs))
		dst = appendUvarint(dst, uint64(r.TPOTUs))
		dst = appendFloat32(dst, r.TokensPerSec)
		dst = appendUvarint(dst, uint64(r.Stalls))
		dst = appendUvarint(dst, r.StalledUs)
		dst = appendFloat32(dst, r.Jank)
		dst = appendFloat32(dst, r.EventsPerRead)
		dst = appendUvarint(dst, uint64(r.MaxEventsPerRead))
		dst = appendFloat32(dst, r.BytesPerRead)
		dst = appendFloat32(dst, r.SubFloorShare)
	}
	if flags&flagITL != 0 {
		dst = r.ITL.AppendBinary(dst)
	}
	if flags&flagTimeline != 0 {
		dst = appendUvarint(dst, uint64(len(r.Timeline)))
		dst = appendUvarint(dst, uint64(r.TimelineDropped))
		// Arrival times are often multiples of the timer's resolution (100 µs
		// in Chromium): send them in units of their greatest common divisor.
		var unit uint32
		for _, s := range r.Timeline {
			unit = gcd(unit, s.AtUs)
		}
		unit = max(unit, 1)
		dst = appendUvarint(dst, uint64(unit))
		var at, read int64
		for _, s := range r.Timeline {
			// One uvarint: zigzag(Δat/unit)<<3 | read code<<1 | content, where
			// the read code is 0 (same read), 1 (the next read) or 2 (a
			// varint Δread follows).
			da := (int64(s.AtUs) - at) / int64(unit)
			v := (uint64(da<<1) ^ uint64(da>>63)) << 3
			dr := int64(s.Read) - read
			switch dr {
			case 0:
			case 1:
				v |= 1 << 1
			default:
				v |= 2 << 1
			}
			if s.Content {
				v |= 1
			}
			dst = appendUvarint(dst, v)
			if dr != 0 && dr != 1 {
				dst = appendVarint(dst, dr)
			}
			at, read = int64(s.AtUs), int64(s.Read)
		}
	}
	if flags&flagStalls != 0 {
		dst = appendUvarint(dst, uint64(len(r.StallList)))
		var start int64
		for _, s := range r.StallList {
			dst = appendVarint(dst, int64(s.StartUs)-start)
			dst = appendVarint(dst, int64(s.EndUs)-int64(s.StartUs))
			dst = append(dst, s.Cause)
			dst = appendUvarint(dst, uint64(s.NextReadEvents))
			start = int64(s.StartUs)
		}
	}
	if flags&flagCauses != 0 {
		dst = append(dst, r.TTFTCause)
		for _, n := range r.StallsByCause {
			dst = appendUvarint(dst, uint64(n))
		}
		for _, us := range r.StalledByCause {
			dst = appendUvarint(dst, us)
		}
	}
	if flags&flagITLTokens != 0 {
		dst = r.ITLTokens.AppendBinary(dst)
	}
	if e.minor >= 1 {
		dst = append(dst, r.End)
		dst = appendOptTime(dst, r.HeadersUs)
	}
	return append(dst, e.extra...)
}

// checkClientStrings returns the error for the first of a batch's site and
// client strings a decoder would reject, or nil.
func checkClientStrings(site string, c *Client) error {
	return checkStrings(-1, []fieldString{
		{"site", false, site},
		{"client.user_agent", false, c.UserAgent}, {"client.ua_brands", false, c.UABrands},
		{"client.ua_platform", false, c.UAPlatform}, {"client.conn_type", false, c.ConnType},
		{"client.module_version", false, c.ModuleVersion}, {"client.release", false, c.Release},
	})
}

// checkRecordStrings is checkClientStrings for the strings of record rec.
func checkRecordStrings(rec int, r *Record) error {
	return checkRecordStringsBut(rec, r, nil)
}

// recordFields are a record's string fields, in recordStrings' order,
// with whether each is a path field (isPathField).
var recordFields = [...]struct {
	name string
	path bool
}{
	{"origin_id", false}, {"page_origin", true}, {"page_path", true}, {"url_origin", true},
	{"url_path", true}, {"model", false}, {"http_proto", false}, {"content_type", false},
}

// recordStrings are r's string fields (recordFields).
func recordStrings(r *Record) [len(recordFields)]string {
	return [...]string{r.OriginID, r.PageOrigin, r.PagePath, r.URLOrigin, r.URLPath, r.Model, r.HTTPProto, r.ContentType}
}

// checkRecordStringsBut is checkRecordStrings, except that a string equal
// to the same field's in valid (strings that passed it), when not nil, is
// not checked again: it would pass.
func checkRecordStringsBut(rec int, r *Record, valid *[len(recordFields)]string) error {
	for i, v := range recordStrings(r) {
		if valid != nil && v == valid[i] {
			continue
		}
		if reason := checkText(v, recordFields[i].path); reason != "" {
			return &DecodeError{Record: rec, Field: recordFields[i].name, Reason: reason, Err: ErrInvalid}
		}
	}
	return nil
}

// fieldString is a string to check, with its field's name and whether it
// is a path field (isPathField).
type fieldString struct {
	field string
	path  bool
	v     string
}

func checkStrings(rec int, fields []fieldString) error {
	for _, s := range fields {
		if reason := checkText(s.v, s.path); reason != "" {
			return &DecodeError{Record: rec, Field: s.field, Reason: reason, Err: ErrInvalid}
		}
	}
	return nil
}

// check finds what a decoder would reject regardless of its limits.
func (b *Batch) check() error {
	fail := func(rec int, field, reason string) error {
		return &DecodeError{Record: rec, Field: field, Reason: reason, Err: ErrInvalid}
	}
	if err := checkClientStrings(b.Site, &b.Client); err != nil {
		return err
	}
	for i := range b.Records {
		r := &b.Records[i]
		if err := checkRecordStrings(i, r); err != nil {
			return err
		}
		for _, f := range [...]struct {
			field string
			v     float32
		}{
			{"tokens_per_sec", r.TokensPerSec}, {"jank", r.Jank}, {"events_per_read", r.EventsPerRead},
			{"bytes_per_read", r.BytesPerRead}, {"sub_floor_share", r.SubFloorShare},
		} {
			if reason := checkFloat(f.v); reason != "" {
				return fail(i, f.field, reason)
			}
		}
		if r.TTFTCause >= numCauses {
			return fail(i, "ttft_cause", causeRange(r.TTFTCause))
		}
		if r.End >= numEnds {
			return fail(i, "end", endRange(r.End))
		}
		for k, s := range r.StallList {
			if s.Cause >= numCauses {
				return fail(i, "stall_list["+strconv.Itoa(k)+"].cause", causeRange(s.Cause))
			}
		}
	}
	return nil
}

// numEnds is the number of meter.End values this minor knows.
const numEnds = 5

func endRange(e uint8) string { return outOfRange(e, numEnds) }

func causeRange(c uint8) string { return outOfRange(c, numCauses) }

func outOfRange(v uint8, n int) string {
	return strconv.Itoa(int(v)) + " out of range [0, " + strconv.Itoa(n-1) + "]"
}

// DecodeBatch decodes a KindBatch message, enforcing lim (zero fields:
// DefaultLimits). Errors are *DecodeError values naming the field and why.
// Any wrong record fails the whole batch; DecodeBatchRecords leaves it out
// alone instead.
func DecodeBatch(src []byte, lim Limits) (*Batch, error) {
	b, bad, err := DecodeBatchRecords(src, lim)
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return nil, bad[0]
	}
	return b, nil
}

// DecodeBatchRecords decodes a KindBatch message like DecodeBatch, except
// that a record whose own bytes are wrong (a string that is not UTF-8, a
// path with a query, a rate that is not finite, a code out of range, a list
// over its limit, a record section that ends too soon) is left out of
// Records on its own: bad holds one *DecodeError per record left out, naming
// its index in the batch as sent. This is possible because every record is a
// length-prefixed section, so one record's contents cannot misplace the
// next; the one link between records, the strings that repeat the previous
// record's value, is kept: a record's strings are read before its values are
// checked, and a string that repeats an invalid one is invalid too. err is
// for what fails the message as a whole (header, site, client, framing of
// the record sections, limits on the message and the record count), and
// for a record whose strings cannot be read: the records after it could not
// be resolved.
func DecodeBatchRecords(src []byte, lim Limits) (b *Batch, bad []error, err error) {
	return decodeBatch(src, lim, new(Batch), nil, false)
}

// DecodeBatchWire is DecodeBatchRecords that also returns, for each record
// kept, its Wire: where its bytes lie in src, for AppendRecordBatch. The
// Wires alias src.
func DecodeBatchWire(src []byte, lim Limits) (b *Batch, wire []Wire, bad []error, err error) {
	b, bad, err = decodeBatch(src, lim, new(Batch), &wire, false)
	return b, wire, bad, err
}

// CheckBatchWire is DecodeBatchWire for a caller that keeps each record's
// values in its Wire (AppendRecordBatch writes them) instead of reading
// them: it accepts and refuses exactly what DecodeBatchWire does, with the
// same errors, and returns the same batch, except that each record's ITL
// and ITLTokens histograms, Timeline and StallList are checked but left
// empty. Checking a histogram without building it costs a quarter of
// decoding it (hist.CheckBinary), and no allocation.
func CheckBatchWire(src []byte, lim Limits) (b *Batch, wire []Wire, bad []error, err error) {
	b, bad, err = decodeBatch(src, lim, new(Batch), &wire, true)
	return b, wire, bad, err
}

// Scratch is memory for CheckBatchWire's results, reused from one message
// to the next: a collector that checks message after message (each from a
// sync.Pool) allocates no records, and its garbage collector has none to
// scan. The zero Scratch is ready to use.
type Scratch struct {
	batch Batch
	wire  []Wire
}

// CheckBatchWire is CheckBatchWire into s: the batch and wires it returns
// are s's, valid until s is used again or Reset.
func (s *Scratch) CheckBatchWire(src []byte, lim Limits) (b *Batch, wire []Wire, bad []error, err error) {
	b, bad, err = decodeBatch(src, lim, &s.batch, &s.wire, true)
	return b, s.wire, bad, err
}

// Records is how many records s has room for: a caller pooling scratches
// drops one grown by a rare large message rather than keep it.
func (s *Scratch) Records() int { return cap(s.batch.Records) }

// Reset lets go of what the last batch pointed to (strings, the message's
// bytes), keeping the room for the next.
func (s *Scratch) Reset() {
	clear(s.batch.Records[:cap(s.batch.Records)])
	clear(s.wire[:cap(s.wire)])
	s.batch = Batch{Records: s.batch.Records[:0]}
	s.wire = s.wire[:0]
}

// decodeBatch is DecodeBatchRecords into b, filling *wire when wire is not
// nil, leaving the records' histograms, timelines and stall lists out with
// check (CheckBatchWire). The room in b.Records and *wire is reused.
func decodeBatch(src []byte, lim Limits, b *Batch, wire *[]Wire, check bool) (_ *Batch, bad []error, err error) {
	recs := b.Records[:0]
	*b = Batch{}
	if wire != nil {
		*wire = (*wire)[:0]
	}
	lim = lim.withDefaults()
	if len(src) > lim.MaxBytes {
		return nil, nil, &DecodeError{Record: -1, Field: "message", Reason: "length " + strconv.Itoa(len(src)) + " exceeds limit " + strconv.Itoa(lim.MaxBytes), Err: ErrTooBig}
	}
	minor, err := readHeader(src, KindBatch)
	if err != nil {
		return nil, nil, err
	}
	r := reader{src: src, p: headerLen, rec: -1, lim: lim, minor: minor, check: check}
	b.Seq = r.uvarint("seq")
	b.Site = r.str("site")
	c := r.section("client")
	c.prefix = "client."
	c.client(&b.Client)
	c.prefix = ""
	c.end("client")
	r.err = c.err
	b.Dropped = r.u32("dropped")
	n := r.length("records", lim.MaxRecords, minRecordSize)
	if r.err != nil {
		return nil, nil, r.err
	}
	if n > 0 {
		b.Records = reuse(recs, n)
		if wire != nil {
			*wire = reuse(*wire, n)
		}
	}
	prev := &emptyRecord
	// prevValid: every string of prev passed checkString (the empty
	// record's do), so a string that repeats prev's need not be checked
	// again.
	prevValid := true
	var skip []bool
	for i := range b.Records {
		r.rec = i
		s := r.section("length")
		if r.err != nil {
			return nil, nil, r.err
		}
		s.prevValid = prevValid
		s.record(&b.Records[i], prev)
		prevValid = s.strsValid
		s.end("length")
		if wire != nil && s.err == nil {
			(*wire)[i] = Wire{minor: minor, flags: s.flags, tail: s.src[s.strEnd:len(s.src):len(s.src)]}
		}
		if s.err != nil {
			if !s.strs {
				return nil, nil, s.err
			}
			if skip == nil {
				skip = make([]bool, n)
			}
			skip[i] = true
			bad = append(bad, s.err)
		}
		prev = &b.Records[i]
	}
	r.rec = -1
	r.end("records")
	if r.err != nil {
		return nil, nil, r.err
	}
	if skip != nil {
		kept := b.Records[:0]
		for i := range b.Records {
			if !skip[i] {
				if wire != nil {
					(*wire)[len(kept)] = (*wire)[i]
				}
				kept = append(kept, b.Records[i])
			}
		}
		clear(b.Records[len(kept):])
		b.Records = kept
		if wire != nil {
			clear((*wire)[len(kept):])
			*wire = (*wire)[:len(kept)]
		}
	}
	return b, bad, nil
}

// reuse returns n zero values in s's room, or in new room when s has too little.
func reuse[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func (r *reader) client(c *Client) {
	c.UserAgent = r.str("user_agent")
	c.UABrands = r.str("ua_brands")
	c.UAPlatform = r.str("ua_platform")
	c.ConnType = r.str("conn_type")
	c.ModuleVersion = r.str("module_version")
	c.Release = r.str("release")
	flags := r.uvarint("flags")
	if flags&^knownClientFlags != 0 && r.minor <= Minor {
		r.fail("flags", "unknown bits 0x"+strconv.FormatUint(flags&^knownClientFlags, 16), ErrInvalid)
	}
	c.UAMobile = flags&clientUAMobile != 0
	c.CrossOriginIso = flags&clientCrossOriginIso != 0
	c.ConnRTTMs = uint16(r.uint("conn_rtt_ms", 1<<16-1))
	c.TimerFloorUs = r.u32("timer_floor_us")
}

// record decodes one record section. Its strings are read unchecked (repStr
// with raw) and checked by the caller's loop above, so that an invalid one
// is still there for the next record to repeat.
func (r *reader) record(rec *Record, prev *Record) {
	r.raw = true
	copy(rec.StreamID[:], r.bytes("stream_id", 16))
	flags := r.uvarint("flags")
	r.flags = flags
	if flags&^knownFlags != 0 && r.minor <= Minor {
		r.fail("flags", "unknown bits 0x"+strconv.FormatUint(flags&^knownFlags, 16), ErrInvalid)
	}
	rec.TokensReported = flags&flagTokensReported != 0
	rec.Smooth = flags&flagSmooth != 0
	// The strings first, all of them, checked afterwards: the next record
	// may repeat any of them, even when this one is left out.
	// A string that repeats the previous record's is checked again only
	// when one of that record's was not valid (prevValid): the same string
	// of the same field gets the same verdict.
	var invalid error
	for _, f := range [...]struct {
		name      string
		path      bool // isPathField(name)
		dst, prev *string
	}{
		{"origin_id", false, &rec.OriginID, &prev.OriginID}, {"page_origin", true, &rec.PageOrigin, &prev.PageOrigin},
		{"page_path", true, &rec.PagePath, &prev.PagePath}, {"url_origin", true, &rec.URLOrigin, &prev.URLOrigin},
		{"url_path", true, &rec.URLPath, &prev.URLPath}, {"model", false, &rec.Model, &prev.Model},
		{"http_proto", false, &rec.HTTPProto, &prev.HTTPProto}, {"content_type", false, &rec.ContentType, &prev.ContentType},
	} {
		var repeated bool
		*f.dst, repeated = r.repStrRepeated(f.name, *f.prev)
		if repeated && r.prevValid {
			continue
		}
		if reason := checkText(*f.dst, f.path); reason != "" && invalid == nil && r.err == nil {
			invalid = &DecodeError{Record: r.rec, Field: r.prefix + f.name, Reason: reason, Err: ErrInvalid}
		}
	}
	r.strs = r.err == nil
	r.strsValid = r.strs && invalid == nil
	r.strEnd = r.p
	if r.err == nil {
		r.err = invalid
	}
	rec.StartUnixMs = r.varint("start_unix_ms")
	rec.Format = r.byte("format")
	rec.Status = r.byte("status")
	rec.HTTPStatus = uint16(r.uint("http_status", 1<<16-1))
	rec.TTFBUs = r.optTime("ttfb_us")
	rec.TTFCUs = r.optTime("ttfc_us")
	rec.TTFTUs = r.optTime("ttft_us")
	rec.DurationUs = r.optTime("duration_us")
	rec.Events = r.u32("events")
	rec.ContentEvents = r.u32("content_events")
	rec.Tokens = r.u32("tokens")
	rec.Reads = r.u32("reads")
	rec.Bytes = r.uvarint("bytes")
	if flags&flagStats != 0 {
		rec.GapP50Us = r.u32("gap_p50_us")
		rec.GapP95Us = r.u32("gap_p95_us")
		rec.GapP99Us = r.u32("gap_p99_us")
		rec.GapMaxUs = r.u32("gap_max_us")
		rec.TPOTUs = r.u32("tpot_us")
		rec.TokensPerSec = r.float32("tokens_per_sec")
		rec.Stalls = r.u32("stalls")
		rec.StalledUs = r.uvarint("stalled_us")
		rec.Jank = r.float32("jank")
		rec.EventsPerRead = r.float32("events_per_read")
		rec.MaxEventsPerRead = r.u32("max_events_per_read")
		rec.BytesPerRead = r.float32("bytes_per_read")
		rec.SubFloorShare = r.float32("sub_floor_share")
	}
	if flags&flagITL != 0 {
		rec.ITL = r.hist("itl")
	}
	if flags&flagTimeline != 0 {
		// An entry with no change in time or read index is one byte: a
		// re-chunked stream (every event in one read) is all such entries.
		n := r.length("timeline", r.lim.MaxTimeline, 1)
		rec.TimelineDropped = r.u32("timeline_dropped")
		unit := int64(r.u32("timeline_unit"))
		if r.err == nil && unit == 0 {
			r.fail("timeline_unit", "0", ErrInvalid)
		}
		if r.err != nil {
			n = 0
		}
		if n > 0 && !r.check {
			rec.Timeline = make([]Stamp, n)
		}
		if n > 0 {
			if end, ok := timelineFast(r.src[r.p:], n, unit, rec.Timeline); ok {
				r.p += end
			} else {
				r.timeline(n, unit, rec.Timeline)
			}
		}
	}
	if flags&flagStalls != 0 {
		n := r.length("stall_list", r.lim.MaxStalls, 4)
		if r.err != nil {
			n = 0
		}
		if n > 0 && !r.check {
			rec.StallList = make([]Stall, n)
		}
		var start int64
		for i := range n {
			start += r.varint("stall_list.start_us")
			end := start + r.varint("stall_list.end_us")
			cause := r.byte("stall_list.cause")
			next := r.u32("stall_list.next_read_events")
			if r.err != nil {
				r.indexField("stall_list", i)
				break
			}
			switch {
			case uint64(start) > 1<<32-1:
				r.fail("stall_list["+strconv.Itoa(i)+"].start_us", "out of the uint32 range", ErrInvalid)
			case uint64(end) > 1<<32-1:
				r.fail("stall_list["+strconv.Itoa(i)+"].end_us", "out of the uint32 range", ErrInvalid)
			case cause >= numCauses:
				r.fail("stall_list["+strconv.Itoa(i)+"].cause", causeRange(cause), ErrInvalid)
			}
			if r.err != nil {
				break
			}
			if !r.check {
				rec.StallList[i] = Stall{StartUs: uint32(start), EndUs: uint32(end), Cause: cause, NextReadEvents: next}
			}
		}
	}
	if flags&flagCauses != 0 {
		rec.TTFTCause = r.byte("ttft_cause")
		if r.err == nil && rec.TTFTCause >= numCauses {
			r.fail("ttft_cause", causeRange(rec.TTFTCause), ErrInvalid)
		}
		for i := range rec.StallsByCause {
			rec.StallsByCause[i] = r.u32("stalls_by_cause")
		}
		for i := range rec.StalledByCause {
			rec.StalledByCause[i] = r.uvarint("stalled_by_cause")
		}
	}
	if flags&flagITLTokens != 0 {
		rec.ITLTokens = r.hist("itl_tokens")
	}
	if r.minor < 1 {
		rec.End, rec.HeadersUs = 0, olderHeadersUs(rec)
		return
	}
	rec.End = r.byte("end")
	if r.err == nil && rec.End >= numEnds && r.minor <= Minor {
		r.fail("end", endRange(rec.End), ErrInvalid)
	}
	rec.HeadersUs = r.optTime("headers_us")
}

// timeline reads n timeline entries in units of unit, entry by entry,
// into dst unless it is nil (CheckBatchWire): the way that finds the first
// error in them and names it.
func (r *reader) timeline(n int, unit int64, dst []Stamp) {
	var at, read int64
	for i := range n {
		v := r.uvarint("timeline.at_us")
		z := v >> 3
		d := int64(z>>1) ^ -int64(z&1)
		var dr int64
		switch v >> 1 & 3 {
		case 1:
			dr = 1
		case 2:
			dr = r.varint("timeline.read")
		case 3:
			r.fail("timeline["+strconv.Itoa(i)+"].read", "bad read code 3", ErrInvalid)
		}
		if r.err != nil {
			r.indexField("timeline", i)
			return
		}
		// |d| < 2^32 keeps d*unit from overflowing.
		if at += d * unit; d >= 1<<32 || d <= -1<<32 || uint64(at) > 1<<32-1 {
			r.fail("timeline["+strconv.Itoa(i)+"].at_us", "out of the uint32 range", ErrInvalid)
			return
		}
		if read += dr; uint64(read) > 1<<32-1 {
			r.fail("timeline["+strconv.Itoa(i)+"].read", "out of the uint32 range", ErrInvalid)
			return
		}
		if dst != nil {
			dst[i] = Stamp{AtUs: uint32(at), Read: uint32(read), Content: v&1 != 0}
		}
	}
}

// timelineFast is reader.timeline over the start of src in one tight loop,
// for the common entries: each a uvarint of at most four bytes (a step of
// up to 2^24 units, 16 s in microseconds), any read step after it one byte.
// It returns the bytes the entries took, with ok false unless
// reader.timeline would accept them with the same result; the caller then
// reads them that way, which finds the error, if any.
func timelineFast(src []byte, n int, unit int64, dst []Stamp) (end int, ok bool) {
	var at, read int64
	p := 0
	for i := range n {
		if p >= len(src) {
			return 0, false
		}
		v := uint64(src[p])
		p++
		if v >= 0x80 {
			v &= 0x7f
			for s := 7; ; s += 7 {
				if s > 21 || p >= len(src) {
					return 0, false
				}
				b := src[p]
				p++
				v |= uint64(b&0x7f) << s
				if b < 0x80 {
					break
				}
			}
		}
		// v < 2^28: |d| < 2^24, so d*unit (unit < 2^32) cannot overflow.
		z := v >> 3
		at += (int64(z>>1) ^ -int64(z&1)) * unit
		switch v >> 1 & 3 {
		case 1:
			read++
		case 2:
			if p >= len(src) || src[p] >= 0x80 {
				return 0, false
			}
			u := src[p]
			p++
			read += int64(u>>1) ^ -int64(u&1)
		case 3:
			return 0, false
		}
		if uint64(at) > 1<<32-1 || uint64(read) > 1<<32-1 {
			return 0, false
		}
		if dst != nil {
			dst[i] = Stamp{AtUs: uint32(at), Read: uint32(read), Content: v&1 != 0}
		}
	}
	return p, true
}

// olderHeadersUs is HeadersUs for a record from a sender older than minor 1,
// which did not report it. Such senders measured only responses whose
// headers had arrived, so NoTime ("ended before the headers") would be
// false: the headers came no later than the first body byte, or than the
// end of a body that had none, and that bound stands in for the time.
func olderHeadersUs(rec *Record) uint32 {
	if rec.TTFBUs != NoTime {
		return rec.TTFBUs
	}
	return rec.DurationUs
}

// indexField puts the entry index into the field of an error just raised
// while reading list entry i: "timeline.at_us" becomes "timeline[i].at_us".
func (r *reader) indexField(list string, i int) {
	de, ok := r.err.(*DecodeError)
	if !ok {
		return
	}
	if p := r.prefix + list; len(de.Field) > len(p) && de.Field[:len(p)] == p && de.Field[len(p)] == '.' {
		de.Field = p + "[" + strconv.Itoa(i) + "]" + de.Field[len(p):]
	}
}

func gcd(a, b uint32) uint32 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
