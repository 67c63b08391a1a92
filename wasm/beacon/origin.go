package beacon

import (
	"math"
	"strconv"

	"github.com/itlmon/itlmon/wasm/hist"
)

// OriginBatch is a KindOrigin message: the timelines an origin server's
// middleware (collector/origin) observed, sent server-to-server to the
// collector's /v1/origin. The site's shared key travels in a header, not here.
type OriginBatch struct {
	Seq     uint64 // per reporter, increasing
	Site    string
	Dropped uint32 // timelines the reporter dropped since the last batch (queue full)
	Records []Origin
}

// Origin is one response stream as the origin server emitted it. Times are
// microseconds since the middleware saw the request; NoTime means "did not
// happen". An event's emit time is the flush that completed it, or the write
// that completed it when the handler never flushed.
type Origin struct {
	ID          string // stream id the response carried (X-Itlmon-Stream or the app's X-Request-Id)
	StartUnixMs int64  // origin wall clock when the request reached the middleware
	Route       string // request path, never the query

	Format     uint8 // meter.Format
	Status     uint8 // meter.Status (complete, aborted by the client, ...)
	HTTPStatus uint16

	TTFBUs, TTFTUs, DurationUs uint32 // first body byte written, first content event, handler done

	Events, ContentEvents uint32
	Flushes               uint32 // emit points: flushes, or writes when never flushed
	MaxEventsPerFlush     uint32
	Bytes                 uint64

	ITL hist.Histogram // gaps between consecutive content emits, microseconds

	// EmitUs holds the emit time of each content event in order, the first
	// len(EmitUs) of them; EmitsDropped counts the content events beyond.
	EmitUs       []uint32
	EmitsDropped uint32
}

// An OriginBatch (origin reporter -> collector), after the header of
// KindOrigin:
//
//	uvarint seq
//	string  site
//	uvarint dropped
//	uvarint n, then n origin sections:
//	  string  id
//	  varint  start_unix_ms
//	  string  route (no query or fragment)
//	  byte    format, status; uvarint http_status
//	  opttime ttfb_us, ttft_us, duration_us
//	  uvarint events, content_events, flushes, max_events_per_flush, bytes
//	  histogram itl
//	  uvarint n_emits, emits_dropped; n_emits × uvarint Δemit_us (from the
//	          previous emit, the first from 0: emit times never decrease)
//
// Sections are length-prefixed, so a newer minor may append fields to them
// (and to the message) as for a Batch.

// minOriginSize: length prefix and the smallest fields.
const minOriginSize = 1 + 12

// AppendBinary appends the encoding of b to dst. It fails, with a
// *DecodeError wrapping ErrInvalid, for values no decoder accepts: strings
// that are not UTF-8, a route with a query or fragment, emit times that go
// backwards.
func (b *OriginBatch) AppendBinary(dst []byte) ([]byte, error) {
	if err := b.check(); err != nil {
		return dst, err
	}
	dst = appendHeader(dst, KindOrigin, Minor)
	dst = appendUvarint(dst, b.Seq)
	dst = appendString(dst, b.Site)
	dst = appendUvarint(dst, uint64(b.Dropped))
	dst = appendUvarint(dst, uint64(len(b.Records)))
	for i := range b.Records {
		o := &b.Records[i]
		var start int
		dst, start = beginSection(dst)
		dst = appendString(dst, o.ID)
		dst = appendVarint(dst, o.StartUnixMs)
		dst = appendString(dst, o.Route)
		dst = append(dst, o.Format, o.Status)
		dst = appendUvarint(dst, uint64(o.HTTPStatus))
		dst = appendOptTime(dst, o.TTFBUs)
		dst = appendOptTime(dst, o.TTFTUs)
		dst = appendOptTime(dst, o.DurationUs)
		dst = appendUvarint(dst, uint64(o.Events))
		dst = appendUvarint(dst, uint64(o.ContentEvents))
		dst = appendUvarint(dst, uint64(o.Flushes))
		dst = appendUvarint(dst, uint64(o.MaxEventsPerFlush))
		dst = appendUvarint(dst, o.Bytes)
		dst = o.ITL.AppendBinary(dst)
		dst = appendUvarint(dst, uint64(len(o.EmitUs)))
		dst = appendUvarint(dst, uint64(o.EmitsDropped))
		prev := uint32(0)
		for _, e := range o.EmitUs {
			dst = appendUvarint(dst, uint64(e-prev))
			prev = e
		}
		dst = endSection(dst, start)
	}
	return dst, nil
}

func (b *OriginBatch) check() error {
	fail := func(rec int, field, reason string) error {
		return &DecodeError{Record: rec, Field: field, Reason: reason, Err: ErrInvalid}
	}
	if reason := checkString("site", []byte(b.Site)); reason != "" {
		return fail(-1, "site", reason)
	}
	for i := range b.Records {
		o := &b.Records[i]
		for _, s := range [...]struct{ field, v string }{{"id", o.ID}, {"route", o.Route}} {
			if reason := checkString(s.field, []byte(s.v)); reason != "" {
				return fail(i, s.field, reason)
			}
		}
		for k := 1; k < len(o.EmitUs); k++ {
			if o.EmitUs[k] < o.EmitUs[k-1] {
				return fail(i, "emit_us", "goes backwards at "+strconv.Itoa(k))
			}
		}
	}
	return nil
}

// DecodeOriginBatch decodes a KindOrigin message, enforcing lim (zero
// fields: DefaultLimits; the emit list is bounded by MaxTimeline). Errors are
// *DecodeError values naming the field and why.
func DecodeOriginBatch(src []byte, lim Limits) (*OriginBatch, error) {
	lim = lim.withDefaults()
	if len(src) > lim.MaxBytes {
		return nil, &DecodeError{Record: -1, Field: "message", Reason: "length " + strconv.Itoa(len(src)) + " exceeds limit " + strconv.Itoa(lim.MaxBytes), Err: ErrTooBig}
	}
	minor, err := readHeader(src, KindOrigin)
	if err != nil {
		return nil, err
	}
	r := reader{src: src, p: headerLen, rec: -1, lim: lim, minor: minor}
	b := new(OriginBatch)
	b.Seq = r.uvarint("seq")
	b.Site = r.str("site")
	b.Dropped = r.u32("dropped")
	n := r.length("records", lim.MaxRecords, minOriginSize)
	if r.err != nil {
		return nil, r.err
	}
	if n > 0 {
		b.Records = make([]Origin, n)
	}
	for i := range b.Records {
		r.rec = i
		s := r.section("length")
		s.origin(&b.Records[i])
		s.end("length")
		if s.err != nil {
			return nil, s.err
		}
	}
	r.rec = -1
	r.end("records")
	if r.err != nil {
		return nil, r.err
	}
	return b, nil
}

func (r *reader) origin(o *Origin) {
	o.ID = r.str("id")
	o.StartUnixMs = r.varint("start_unix_ms")
	o.Route = r.str("route")
	o.Format = r.byte("format")
	o.Status = r.byte("status")
	o.HTTPStatus = uint16(r.uint("http_status", 1<<16-1))
	o.TTFBUs = r.optTime("ttfb_us")
	o.TTFTUs = r.optTime("ttft_us")
	o.DurationUs = r.optTime("duration_us")
	o.Events = r.u32("events")
	o.ContentEvents = r.u32("content_events")
	o.Flushes = r.u32("flushes")
	o.MaxEventsPerFlush = r.u32("max_events_per_flush")
	o.Bytes = r.uvarint("bytes")
	o.ITL = r.hist("itl")
	n := r.length("emit_us", r.lim.MaxTimeline, 1)
	o.EmitsDropped = r.u32("emits_dropped")
	if r.err != nil || n == 0 {
		return
	}
	o.EmitUs = make([]uint32, n)
	prev := uint64(0)
	for k := range o.EmitUs {
		d := r.uvarint("emit_us")
		if prev += d; d > math.MaxUint32 || prev > math.MaxUint32 {
			r.fail("emit_us", "exceeds uint32 at "+strconv.Itoa(k), ErrInvalid)
			return
		}
		o.EmitUs[k] = uint32(prev)
	}
}
