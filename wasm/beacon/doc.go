// Package beacon is the wire format between the browser module (and origin
// reporters) and the collector: a versioned, compact, hand-encoded binary
// message. No reflection, fmt, encoding/json or net/http: it is compiled into
// the browser module.
//
// # Messages
//
// Every message starts with a 6-byte header:
//
//	89 49 54   magic (0x89 "IT"; 0x89 keeps text from passing for a beacon)
//	version    major version, Version (1); any other is ErrVersion
//	minor      the sender's minor version (Minor is what this package writes)
//	kind       KindBatch (1), KindAck (2), KindOrigin (3); any other is ErrKind
//
// PeekKind reads it; DecodeBatch and DecodeAck check it. KindOrigin
// carries server-side timelines, the origin middleware's and (minor 2) the
// edge Worker's (OriginBatch in origin.go, Origin.Vantage tells them apart);
// its encoder and decoder live beside it and use the same header, primitives
// and rules.
//
// A Batch (browser -> collector) follows as:
//
//	uvarint seq
//	string  site
//	section client: strings user_agent, ua_brands, ua_platform, conn_type,
//	        module_version, release; uvarint flags (1 ua_mobile,
//	        2 cross_origin_isolated); uvarint conn_rtt_ms, timer_floor_us
//	uvarint dropped
//	uvarint n, then n record sections
//
// A record section holds:
//
//	[16]byte stream_id (raw)
//	uvarint  flags: 1 tokens_reported, 2 smooth, and presence bits for the
//	         optional parts below: 4 stats, 8 itl, 16 timeline, 32 stall_list,
//	         64 causes, 128 itl_tokens
//	rstring  origin_id, page_origin, page_path, url_origin, url_path, model,
//	         http_proto, content_type
//	varint   start_unix_ms
//	byte     format, status; uvarint http_status
//	opttime  ttfb_us, ttfc_us, ttft_us, duration_us
//	uvarint  events, content_events, tokens, reads, bytes
//	[stats]  uvarint gap_p50_us, gap_p95_us, gap_p99_us, gap_max_us, tpot_us;
//	         f32 tokens_per_sec; uvarint stalls, stalled_us; f32 jank,
//	         events_per_read; uvarint max_events_per_read; f32 bytes_per_read,
//	         sub_floor_share
//	[itl]    histogram (hist.Histogram.AppendBinary)
//	[timeline] uvarint n, timeline_dropped, unit (the GCD of the at_us
//	         values: 100 with Chromium's 100 µs clock); n entries, each a
//	         uvarint zigzag(Δat_us/unit)<<3 | read<<1 | content with read 0
//	         (same network read as the previous entry), 1 (the next read) or 2
//	         (a varint Δread follows); deltas from the previous entry
//	[stall_list] uvarint n; n × (varint Δstart_us from the previous stall,
//	         varint end_us-start_us, byte cause, uvarint next_read_events)
//	[causes] byte ttft_cause; 5 × uvarint stalls_by_cause; 5 × uvarint
//	         stalled_by_cause
//	[itl_tokens] histogram
//	byte     end (meter.End; minor 1)
//	opttime  headers_us (minor 1)
//
// An Ack (collector -> browser) is uvarint seq and a Reject byte.
//
// Encodings: uvarint/varint are LEB128 (varint zig-zag); a string is a
// uvarint length and UTF-8 bytes; an rstring is 0 for "the previous record's
// value" (the empty string before the first record) or a uvarint length+1 and
// the bytes, so origins, paths and the model cost one byte after the first
// record; opttime is the uvarint of v+1 with NoTime as 0; f32 is 4 bytes
// IEEE 754 little-endian, finite and non-negative; a section is a uvarint
// byte length and its body. A minimal record is about 47 bytes plus its strings.
//
// # Versioning
//
// The major version changes only when an existing field changes meaning or
// encoding; decoders reject other majors (ErrVersion) and the collector
// answers RejectVersion. A minor version may only append: fields at the end of
// a section (client, record) or of an Ack, and new flag bits whose parts come
// after the existing optional parts. Because every record and the client part
// are length-prefixed, a decoder reads the fields it knows and skips the
// rest when the sender's minor is newer than its own; from a sender of its
// own or an older minor, leftover bytes or unknown flag bits are errors. A
// decoder of minor m reading an older minor k < m must default the fields
// added after k (the header carries k for that). Records from minor 0 decode
// with End = 0 (meter.EndNone: not reported) and HeadersUs = TTFBUs, or
// DurationUs without a body byte: those senders measured only responses
// whose headers had arrived, and the headers came no later than that.
//
// # Limits and errors
//
// DecodeBatch enforces Limits (message bytes, records per batch, buckets per
// histogram, timeline and stall list lengths, string lengths) before it
// allocates, and checks every value: UTF-8 strings, no query or fragment in
// origins and paths, uint32/uint16 ranges, cause codes, finite rates, the
// histograms' invariants, end codes (from a sender of this minor or older). Errors are *DecodeError naming the record and field,
// and wrap one of ErrMagic, ErrVersion, ErrKind, ErrTruncated, ErrLimit
// (ErrTooBig for the whole message) or ErrInvalid:
//
//	beacon: record 3: page_path: length 5000 exceeds limit 2048
//
// No input makes a decoder panic (FuzzDecodeBatch).
package beacon
