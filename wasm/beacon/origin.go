package beacon

import (
	"math"
	"strconv"

	"github.com/itlmon/itlmon/wasm/hist"
)

// OriginBatch is a KindOrigin message: the timelines an origin server's
// middleware (origin/) or a CDN edge Worker (wasm/edge) observed,
// sent server-to-server to the collector's /v1/origin. The site's shared key
// travels in a header, not here.
type OriginBatch struct {
	Seq     uint64 // per reporter, increasing
	Site    string
	Dropped uint32 // timelines the reporter dropped since the last batch (queue full)
	Records []Origin
}

// Origin is one response stream as a server-side vantage point saw it.
//
// VantageOrigin (the origin middleware): the stream as the origin server
// emitted it. Times are microseconds since the middleware saw the request;
// NoTime means "did not happen". An event's emit time is the flush that
// completed it, or the write that completed it when the handler never
// flushed.
//
// VantageEdge (the edge Worker): the stream as the edge received it from the
// origin and passed it on. Times are microseconds since the Worker got the
// request; TTFBUs is the first body byte read from the origin, DurationUs the
// end of the body passed on (or the abort), Flushes the network reads from
// the origin and MaxEventsPerFlush the most events one read carried, and
// EmitUs the time of the read that completed each content event: the same
// definitions the browser's meter uses, one hop earlier. Edge holds what only
// the edge knows.
type Origin struct {
	Vantage Vantage // origin (the zero value, and all a minor-1 sender wrote) or edge

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

	// Edge is set on VantageEdge records only (zero on origin records).
	Edge Edge
}

// Vantage is where a server-side timeline was observed.
type Vantage uint8

const (
	VantageOrigin Vantage = iota // the origin server's middleware (origin/)
	VantageEdge                  // a CDN edge in front of the origin (wasm/edge)

	numVantages
)

var vantageNames = [...]string{"origin", "edge"}

func (v Vantage) String() string {
	if int(v) < len(vantageNames) {
		return vantageNames[v]
	}
	return "vantage(" + strconv.Itoa(int(v)) + ")"
}

// Edge is what the edge knows of the client side of a stream (Cloudflare's
// request.cf): where the request entered the CDN and how the client
// connected. Empty strings and NoTime mean "not reported". No client address
// is ever part of it.
type Edge struct {
	Colo       string // the data centre's IATA code (cf.colo), e.g. "FRA"
	Country    string // ISO 3166-1 alpha-2 (cf.country)
	Region     string // ISO 3166-2 subdivision name (cf.region)
	RegionCode string // ISO 3166-2 subdivision code (cf.regionCode)
	City       string // cf.city
	ASN        uint32 // the client's autonomous system (cf.asn); 0 unknown
	HTTPProto  string // client to edge protocol (cf.httpProtocol), e.g. "HTTP/2"
	TLSVersion string // client to edge TLS (cf.tlsVersion), e.g. "TLSv1.3"

	ClientTCPRTTMs uint32 // the client's TCP round trip to the edge (cf.clientTcpRtt); NoTime when absent
	// HeadersUs is when the origin's response headers reached the edge
	// (NoTime: the request ended before them).
	HeadersUs uint32
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
//	  byte    vantage (minor 2; 0 origin, 1 edge; absent: origin)
//	  [edge]  strings colo, country, region, region_code, city, http_proto,
//	          tls_version; uvarint asn; opttime client_tcp_rtt_ms, headers_us
//	          (minor 2, only when vantage is edge)
//
// Sections are length-prefixed, so a newer minor may append fields to them
// (and to the message) as for a Batch; a vantage this minor does not know,
// from a newer sender, is kept and the rest of its section skipped.

// minOriginSize: length prefix and the smallest fields.
const minOriginSize = 1 + 12

// AppendBinary appends the encoding of b to dst. It fails, with a
// *DecodeError wrapping ErrInvalid, for values no decoder accepts: strings
// that are not UTF-8, a route with a query or fragment, emit times that go
// backwards.
func (b *OriginBatch) AppendBinary(dst []byte) ([]byte, error) {
	return encoder{minor: Minor}.appendOriginBatch(dst, b)
}

func (e encoder) appendOriginBatch(dst []byte, b *OriginBatch) ([]byte, error) {
	if err := b.check(); err != nil && !e.unchecked {
		return dst, err
	}
	if e.minor < 2 {
		for i := range b.Records {
			if b.Records[i].Vantage != VantageOrigin {
				return dst, &DecodeError{Record: i, Field: "vantage", Reason: "needs minor 2", Err: ErrInvalid}
			}
		}
	}
	dst = appendHeader(dst, KindOrigin, e.minor)
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
		if e.minor >= 2 {
			dst = append(dst, byte(o.Vantage))
			if o.Vantage == VantageEdge {
				dst = appendEdge(dst, &o.Edge)
			}
		}
		dst = append(dst, e.extra...)
		dst = endSection(dst, start)
	}
	return append(dst, e.extra...), nil
}

func appendEdge(dst []byte, g *Edge) []byte {
	for _, s := range g.strings() {
		dst = appendString(dst, s.v)
	}
	dst = appendUvarint(dst, uint64(g.ASN))
	dst = appendOptTime(dst, g.ClientTCPRTTMs)
	return appendOptTime(dst, g.HeadersUs)
}

type namedString struct{ field, v string }

// strings lists the edge's strings in wire order, with their field names.
func (g *Edge) strings() [7]namedString {
	return [...]namedString{{"edge.colo", g.Colo}, {"edge.country", g.Country}, {"edge.region", g.Region},
		{"edge.region_code", g.RegionCode}, {"edge.city", g.City}, {"edge.http_proto", g.HTTPProto}, {"edge.tls_version", g.TLSVersion}}
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
		switch {
		case o.Vantage >= numVantages:
			return fail(i, "vantage", "unknown "+strconv.Itoa(int(o.Vantage)))
		case o.Vantage == VantageOrigin && o.Edge != (Edge{}):
			return fail(i, "edge", "set on an origin record")
		}
		for _, s := range o.Edge.strings() {
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
	return decodeOriginBatch(src, lim, nil)
}

// OriginWire is one timeline's section as it arrived, with the sender's
// minor version: what a collector stores so that the fields it does not
// know (a newer sender's, a vantage it has no name for) are kept for a
// collector that does (AppendOriginRecordBatch). The zero OriginWire is
// none.
type OriginWire struct {
	minor   uint8
	section []byte
}

// IsZero reports whether w is the zero OriginWire.
func (w OriginWire) IsZero() bool { return w.section == nil }

// Minor is the minor version of the sender of w.
func (w OriginWire) Minor() uint8 { return w.minor }

// DecodeOriginBatchWire is DecodeOriginBatch that also returns, for each
// timeline, its OriginWire. The wires alias src.
func DecodeOriginBatchWire(src []byte, lim Limits) (*OriginBatch, []OriginWire, error) {
	var wires []OriginWire
	b, err := decodeOriginBatch(src, lim, &wires)
	if err != nil {
		return nil, nil, err
	}
	return b, wires, nil
}

// AppendOriginRecordBatch appends a KindOrigin message of the one timeline
// w for site: the header with w's minor (the sender's), seq 0, site,
// dropped 0, and w's section byte for byte. Any decoder reads it as it
// would have read the sender's batch, as far as its own minor goes. It
// fails with ErrNoWire for the zero OriginWire and with a *DecodeError
// for a site that is not UTF-8.
func AppendOriginRecordBatch(dst []byte, site string, w OriginWire) ([]byte, error) {
	if w.IsZero() {
		return dst, ErrNoWire
	}
	if reason := checkString("site", []byte(site)); reason != "" {
		return dst, &DecodeError{Record: -1, Field: "site", Reason: reason, Err: ErrInvalid}
	}
	dst = appendHeader(dst, KindOrigin, w.minor)
	dst = appendUvarint(dst, 0) // seq
	dst = appendString(dst, site)
	dst = appendUvarint(dst, 0) // dropped
	dst = appendUvarint(dst, 1) // records
	dst = appendUvarint(dst, uint64(len(w.section)))
	return append(dst, w.section...), nil
}

func decodeOriginBatch(src []byte, lim Limits, wires *[]OriginWire) (*OriginBatch, error) {
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
		if wires != nil {
			*wires = make([]OriginWire, n)
		}
	}
	for i := range b.Records {
		r.rec = i
		s := r.section("length")
		s.origin(&b.Records[i])
		s.end("length")
		if s.err != nil {
			return nil, s.err
		}
		if wires != nil {
			(*wires)[i] = OriginWire{minor: minor, section: s.src[:len(s.src):len(s.src)]}
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
	if r.err == nil && n > 0 {
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
	if r.err != nil || r.minor < 2 {
		return // a minor-1 sender: an origin record
	}
	o.Vantage = Vantage(r.byte("vantage"))
	switch {
	case r.err != nil:
	case o.Vantage == VantageEdge:
		r.edge(&o.Edge)
	case o.Vantage >= numVantages && r.minor <= Minor:
		r.fail("vantage", "unknown "+strconv.Itoa(int(o.Vantage)), ErrInvalid)
	case o.Vantage >= numVantages:
		r.p = len(r.src) // a newer sender's vantage: its fields are skipped
	}
}

func (r *reader) edge(g *Edge) {
	names := (&Edge{}).strings()
	for i, p := range [...]*string{&g.Colo, &g.Country, &g.Region, &g.RegionCode, &g.City, &g.HTTPProto, &g.TLSVersion} {
		*p = r.str(names[i].field)
	}
	g.ASN = r.u32("edge.asn")
	g.ClientTCPRTTMs = r.optTime("edge.client_tcp_rtt_ms")
	g.HeadersUs = r.optTime("edge.headers_us")
}
