package beacon

import (
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/itlmon/itlmon/wasm/hist"
)

// Encoding primitives shared by every kind. Varints are LEB128 (as
// encoding/binary's, which is not imported because it pulls in reflect).

// The append helpers are not inlined: each inlined copy (with its slice
// growth) would add to the browser module, and encoding is not on a hot path.
//
//go:noinline
func appendUvarint(dst []byte, v uint64) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

func appendVarint(dst []byte, v int64) []byte {
	return appendUvarint(dst, uint64(v<<1)^uint64(v>>63))
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

//go:noinline
func appendString(dst []byte, s string) []byte {
	dst = appendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

//go:noinline
func appendFloat32(dst []byte, f float32) []byte {
	u := math.Float32bits(f)
	return append(dst, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
}

// appendOptTime encodes a time that may be NoTime as the uvarint of v+1
// (NoTime wraps to 0).
func appendOptTime(dst []byte, v uint32) []byte {
	return appendUvarint(dst, uint64(v+1))
}

// beginSection reserves room for a section's length prefix; endSection
// writes it, moving the body when the length needs other than 2 bytes.
func beginSection(dst []byte) ([]byte, int) {
	return append(dst, 0, 0), len(dst)
}

func endSection(dst []byte, start int) []byte {
	body := len(dst) - start - 2
	n := uvarintLen(uint64(body))
	switch {
	case n < 2:
		copy(dst[start+n:], dst[start+2:])
		dst = dst[:len(dst)-(2-n)]
	case n > 2:
		for range n - 2 {
			dst = append(dst, 0)
		}
		copy(dst[start+n:], dst[start+2:start+2+body])
	}
	appendUvarint(dst[start:start], uint64(body))
	return dst
}

// reader decodes one message with a sticky error: after the first failure
// every read returns a zero value and err keeps the first error, so decoders
// read straight through and check err where a loop count or an allocation
// depends on what was read.
type reader struct {
	src    []byte
	p      int
	rec    int    // record index for errors, -1 outside records
	prefix string // field prefix for errors ("client.", "itl.")
	lim    Limits
	minor  uint8 // the sender's minor version
	err    error
	// raw: repStr keeps a string that fails checkString (the caller checks
	// it); strs: a record's strings were all read (DecodeBatchRecords).
	raw, strs bool
	// prevValid: every string of the previous record passed checkString
	// (set by the caller); strsValid: every string of this record did
	// (record sets it).
	prevValid, strsValid bool
	// flags and strEnd: a record's flags and where its strings end
	// (DecodeBatchWire).
	flags  uint64
	strEnd int
	// check: a record's histograms, timeline and stall list are checked
	// but not stored in it (CheckBatchWire).
	check bool
}

func (r *reader) fail(field, reason string, sentinel error) {
	if r.err == nil {
		r.err = &DecodeError{Record: r.rec, Field: r.prefix + field, Reason: reason, Err: sentinel}
	}
}

func (r *reader) left() int { return len(r.src) - r.p }

func (r *reader) uvarint(field string) uint64 {
	// Most values are one byte (small counts, a string that repeats the
	// previous record's): read inline, the rest out of line.
	if p := r.p; uint(p) < uint(len(r.src)) && r.src[p] < 0x80 && r.err == nil {
		r.p = p + 1
		return uint64(r.src[p])
	}
	return r.uvarintLong(field)
}

func (r *reader) uvarintLong(field string) uint64 {
	if r.err != nil {
		return 0
	}
	var v uint64
	for i, s := 0, uint(0); i < 10; i, s = i+1, s+7 {
		if r.p+i >= len(r.src) {
			r.fail(field, "truncated", ErrTruncated)
			return 0
		}
		b := r.src[r.p+i]
		if b < 0x80 {
			if i == 9 && b > 1 {
				break
			}
			r.p += i + 1
			return v | uint64(b)<<s
		}
		v |= uint64(b&0x7f) << s
	}
	r.fail(field, "varint overflows 64 bits", ErrInvalid)
	return 0
}

func (r *reader) varint(field string) int64 {
	u := r.uvarint(field)
	return int64(u>>1) ^ -int64(u&1)
}

// uint reads a uvarint that must fit in max.
func (r *reader) uint(field string, max uint64) uint64 {
	v := r.uvarint(field)
	if v > max {
		r.fail(field, strconv.FormatUint(v, 10)+" exceeds "+strconv.FormatUint(max, 10), ErrInvalid)
		return 0
	}
	return v
}

func (r *reader) u32(field string) uint32 { return uint32(r.uint(field, math.MaxUint32)) }

func (r *reader) optTime(field string) uint32 {
	return uint32(r.uint(field, math.MaxUint32)) - 1 // 0 wraps to NoTime
}

func (r *reader) byte(field string) byte {
	if r.err != nil {
		return 0
	}
	if r.p >= len(r.src) {
		r.fail(field, "truncated", ErrTruncated)
		return 0
	}
	b := r.src[r.p]
	r.p++
	return b
}

func (r *reader) bytes(field string, n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > r.left() {
		r.fail(field, "truncated", ErrTruncated)
		return nil
	}
	b := r.src[r.p : r.p+n : r.p+n]
	r.p += n
	return b
}

func (r *reader) float32(field string) float32 {
	b := r.bytes(field, 4)
	if b == nil {
		return 0
	}
	f := math.Float32frombits(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
	if reason := checkFloat(f); reason != "" {
		r.fail(field, reason, ErrInvalid)
		return 0
	}
	return f
}

// length reads a count of things that take at least minSize bytes each and
// checks it against limit (0: no limit but the remaining bytes).
func (r *reader) length(field string, limit, minSize int) int {
	n := r.uvarint(field)
	if r.err != nil {
		return 0
	}
	if limit > 0 && n > uint64(limit) {
		r.fail(field, "length "+strconv.FormatUint(n, 10)+" exceeds limit "+strconv.Itoa(limit), ErrLimit)
		return 0
	}
	if n > uint64(r.left()/minSize) {
		r.fail(field, "length "+strconv.FormatUint(n, 10)+" exceeds the "+strconv.Itoa(r.left())+" bytes left", ErrTruncated)
		return 0
	}
	return int(n)
}

// str reads a length-prefixed string.
func (r *reader) str(field string) string {
	n := r.length(field, r.lim.MaxString, 1)
	return r.strBody(field, n)
}

// repStr reads a string that may repeat the previous record's value:
// uvarint 0 = same as prev, n > 0 = n-1 bytes follow.
func (r *reader) repStr(field, prev string) string {
	s, _ := r.repStrRepeated(field, prev)
	return s
}

// repStrRepeated is repStr that also says whether the string is prev
// because the message repeats it (and not after a failure).
func (r *reader) repStrRepeated(field, prev string) (string, bool) {
	h := r.uvarint(field)
	if r.err != nil {
		return prev, false
	}
	if h == 0 {
		return prev, true
	}
	n := h - 1
	if r.lim.MaxString > 0 && n > uint64(r.lim.MaxString) {
		r.fail(field, "length "+strconv.FormatUint(n, 10)+" exceeds limit "+strconv.Itoa(r.lim.MaxString), ErrLimit)
		return "", false
	}
	if n > uint64(r.left()) {
		r.fail(field, "truncated", ErrTruncated)
		return "", false
	}
	return r.strBody(field, int(n)), false
}

func (r *reader) strBody(field string, n int) string {
	b := r.bytes(field, n)
	if r.err != nil {
		return ""
	}
	if r.raw {
		return string(b)
	}
	if reason := checkString(field, b); reason != "" {
		r.fail(field, reason, ErrInvalid)
		return ""
	}
	if n == 0 {
		return ""
	}
	return string(b)
}

// hist decodes a histogram, translating its errors into this reader's.
func (r *reader) hist(field string) hist.Histogram {
	if r.err != nil {
		return hist.Histogram{}
	}
	var h hist.Histogram
	var n int
	var err error
	if r.check {
		n, err = hist.CheckBinary(r.src[r.p:], r.lim.MaxBuckets)
	} else {
		h, n, err = hist.DecodeBinary(r.src[r.p:], r.lim.MaxBuckets)
	}
	if err != nil {
		de, _ := err.(*hist.DecodeError)
		sentinel, sub, reason := ErrInvalid, "", err.Error()
		if de != nil {
			sub, reason = "."+de.Field, de.Reason
			switch de.Err {
			case hist.ErrTruncated:
				sentinel = ErrTruncated
			case hist.ErrLimit:
				sentinel = ErrLimit
			}
		}
		r.fail(field+sub, reason, sentinel)
		return hist.Histogram{}
	}
	r.p += n
	return h
}

// section reads a length-prefixed section and returns a reader over it.
func (r *reader) section(field string) reader {
	n := r.length(field, 0, 1)
	b := r.bytes(field, n)
	return reader{src: b, rec: r.rec, prefix: r.prefix, lim: r.lim, minor: r.minor, err: r.err, check: r.check}
}

// end finishes a section: bytes left over are fields of a newer minor
// version, skipped; from a sender of this minor version or older they are
// an error.
func (r *reader) end(field string) {
	if r.err == nil && r.left() > 0 && r.minor <= Minor {
		r.fail(field, strconv.Itoa(r.left())+" bytes after the last field", ErrInvalid)
	}
}

// checkText is checkString for a string of a field known to be a path
// field (isPathField) or not: one pass over an ASCII path instead of two,
// and no conversion to []byte.
func checkText(s string, path bool) string {
	if !path {
		if !utf8.ValidString(s) {
			return "invalid UTF-8"
		}
		return ""
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || c == '?' || c == '#' {
			// s[:i] is ASCII without a query or fragment: the verdict is
			// s[i:]'s, found as checkString finds it.
			if !utf8.ValidString(s[i:]) {
				return "invalid UTF-8"
			}
			for k := i; k < len(s); k++ {
				if s[k] == '?' || s[k] == '#' {
					return "contains a query or fragment"
				}
			}
			return ""
		}
	}
	return ""
}

// checkString returns why s may not be sent, or "".
func checkString(field string, s []byte) string {
	if !utf8.Valid(s) {
		return "invalid UTF-8"
	}
	if isPathField(field) {
		for _, c := range s {
			if c == '?' || c == '#' {
				return "contains a query or fragment"
			}
		}
	}
	return ""
}

func isPathField(field string) bool {
	switch field {
	case "page_path", "url_path", "page_origin", "url_origin", "route":
		return true
	}
	return false
}

// checkFloat returns why f may not be sent, or "".
func checkFloat(f float32) string {
	if !(f >= 0) || f > math.MaxFloat32 {
		return "not a finite non-negative number"
	}
	return ""
}
