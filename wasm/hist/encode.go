package hist

import (
	"errors"
	"math"
	"math/bits"
	"strconv"
)

// The binary encoding of a Histogram (AppendBinary, DecodeBinary):
//
//	uvarint  zero                count of the zero bucket
//	uvarint  slots               bucket counts that follow; 0 = no buckets
//	if slots > 0:
//	  varint   first             index of the first bucket (zig-zag)
//	  runs, until slots counts are read:
//	    uvarint  length          >= 1
//	    length × uvarint count   a run starts and ends with a non-zero count
//	    uvarint  gap             >= 1 empty indexes before the next run (only
//	                             when slots remain)
//	if zero + the bucket counts > 0:
//	  floatvar sum, min, max
//
// A floatvar is the uvarint of the byte-reversed IEEE 754 bits (as in
// encoding/gob): values with short mantissas, such as whole microseconds,
// take 2-3 bytes instead of 8. The encoder bridges a single empty bucket with
// a zero count (1 byte) rather than ending the run (2 bytes). An empty
// histogram is 2 bytes.

// Sentinel errors wrapped by *DecodeError; match them with errors.Is.
var (
	ErrTruncated = errors.New("hist: truncated")
	ErrLimit     = errors.New("hist: limit exceeded")
	ErrInvalid   = errors.New("hist: invalid")
)

// DecodeError says which part of an encoded histogram (or of FromSparse's
// input) is wrong and why. Err is ErrTruncated, ErrLimit or ErrInvalid.
type DecodeError struct {
	Field  string // "zero", "buckets", "index", "count", "sum", "min", "max"
	Reason string
	Err    error
}

func (e *DecodeError) Error() string { return "hist: " + e.Field + ": " + e.Reason }

// Unwrap returns the sentinel error.
func (e *DecodeError) Unwrap() error { return e.Err }

func invalid(field, reason string) error {
	return &DecodeError{Field: field, Reason: reason, Err: ErrInvalid}
}

func truncated(field string) error {
	return &DecodeError{Field: field, Reason: "truncated", Err: ErrTruncated}
}

func itoa(i int) string { return strconv.Itoa(i) }

func utoa(u uint64) string { return strconv.FormatUint(u, 10) }

// AppendBinary appends the compact encoding of h to dst.
func (h *Histogram) AppendBinary(dst []byte) []byte {
	dst = appendUvarint(dst, h.zero)
	if h.count == h.zero {
		dst = appendUvarint(dst, 0)
	} else {
		c := h.counts[h.lo-h.first : h.hi-h.first+1]
		// Slots: every non-empty bucket plus the single empty buckets bridged.
		slots := 0
		for k := 0; k < len(c); {
			if c[k] != 0 {
				slots++
				k++
				continue
			}
			e := k
			for e < len(c) && c[e] == 0 {
				e++
			}
			if e-k == 1 {
				slots++
			}
			k = e
		}
		dst = appendUvarint(dst, uint64(slots))
		dst = appendVarint(dst, int64(h.lo))
		for k := 0; k < len(c); {
			// c[k] != 0: a run starts here and goes on over single empty buckets.
			e := k + 1
			for e < len(c) && (c[e] != 0 || (e+1 < len(c) && c[e+1] != 0)) {
				e++
			}
			dst = appendUvarint(dst, uint64(e-k))
			for _, v := range c[k:e] {
				dst = appendUvarint(dst, v)
			}
			if e == len(c) {
				break
			}
			next := e
			for c[next] == 0 {
				next++
			}
			dst = appendUvarint(dst, uint64(next-e))
			k = next
		}
	}
	if h.count > 0 {
		dst = appendFloat(dst, h.sum)
		dst = appendFloat(dst, h.min)
		dst = appendFloat(dst, h.max)
	}
	return dst
}

// DecodeBinary decodes a histogram encoded by AppendBinary from the start of
// src and returns it with the number of bytes consumed. It rejects more than
// maxBuckets non-empty buckets (maxBuckets <= 0: only the index range
// limits them), indexes outside [MinIndex, MaxIndex], counts whose total
// overflows uint64, and sum/min/max that FromSparse would reject. Errors are
// *DecodeError wrapping ErrTruncated, ErrLimit or ErrInvalid.
func DecodeBinary(src []byte, maxBuckets int) (Histogram, int, error) {
	return decodeBinary(src, maxBuckets, true)
}

// CheckBinary checks a histogram as DecodeBinary does, without building
// it: it returns the bytes DecodeBinary would consume, or its error. For a
// caller that keeps the encoded form (a collector storing what it
// received), it costs no allocation and one pass over the buckets.
func CheckBinary(src []byte, maxBuckets int) (int, error) {
	_, n, err := decodeBinary(src, maxBuckets, false)
	return n, err
}

// decodeBinary is DecodeBinary; without build the counts are checked but
// not stored (the histogram returned has its totals, bounds and stats).
func decodeBinary(src []byte, maxBuckets int, build bool) (Histogram, int, error) {
	var h Histogram
	p := 0
	zero, err := readUvarint(src, &p, "zero")
	if err != nil {
		return Histogram{}, 0, err
	}
	h.zero, h.count = zero, zero
	slots, err := readUvarint(src, &p, "buckets")
	if err != nil {
		return Histogram{}, 0, err
	}
	if slots > uint64(NumIndexes) {
		return Histogram{}, 0, invalid("buckets", utoa(slots)+" slots exceed the "+itoa(NumIndexes)+" indexes")
	}
	if slots > uint64(len(src)-p) {
		// Every slot takes at least one byte.
		return Histogram{}, 0, truncated("buckets")
	}
	if slots > 0 {
		first, err := readVarint(src, &p, "index")
		if err != nil {
			return Histogram{}, 0, err
		}
		if first < int64(MinIndex) || first > int64(MaxIndex) {
			return Histogram{}, 0, invalid("index", "first index "+strconv.FormatInt(first, 10)+" outside ["+itoa(int(MinIndex))+", "+itoa(int(MaxIndex))+"]")
		}
		// Pass 1: validate and find the span; pass 2 fills one allocation.
		runs := p
		last, total, err := walkRuns(src, &p, int32(first), int(slots), maxBuckets, nil)
		if err != nil {
			return Histogram{}, 0, err
		}
		if h.count+total < h.count {
			return Histogram{}, 0, invalid("count", "total count overflows uint64")
		}
		h.count += total
		h.first, h.lo, h.hi = int32(first), int32(first), last
		if build {
			h.counts = make([]uint64, last-int32(first)+1)
			walkRuns(src, &runs, int32(first), int(slots), maxBuckets, h.counts)
		}
	}
	if h.count > 0 {
		var f [3]float64
		for k, name := range [3]string{"sum", "min", "max"} {
			u, err := readUvarint(src, &p, name)
			if err != nil {
				return Histogram{}, 0, err
			}
			f[k] = math.Float64frombits(bits.ReverseBytes64(u))
		}
		sum, min, max := f[0], f[1], f[2]
		if err := h.setStats(sum, min, max); err != nil {
			return Histogram{}, 0, err
		}
	}
	return h, p, nil
}

// walkRuns reads the runs of slots bucket counts starting at index first and
// returns the last index and the total count. With fill != nil (a second pass over validated input) it also
// stores the counts at fill[index-first].
func walkRuns(src []byte, p *int, first int32, slots, maxBuckets int, fill []uint64) (last int32, total uint64, err error) {
	if fill == nil {
		if end, last, total, ok := checkRunsFast(src, *p, first, slots, maxBuckets); ok {
			*p = end
			return last, total, nil
		}
	}
	idx := int64(first)
	nonEmpty := 0
	for slots > 0 {
		// Runs and gaps are mostly a few slots long: their one-byte
		// lengths are read without a call.
		var n uint64
		if *p < len(src) && src[*p] < 0x80 {
			n = uint64(src[*p])
			*p++
		} else if n, err = readUvarint(src, p, "buckets"); err != nil {
			return 0, 0, err
		}
		if n == 0 {
			return 0, 0, invalid("buckets", "empty run")
		}
		if n > uint64(slots) {
			return 0, 0, invalid("buckets", "run of "+utoa(n)+" exceeds the "+itoa(slots)+" slots left")
		}
		if idx+int64(n)-1 > int64(MaxIndex) {
			return 0, 0, invalid("index", "run ends at "+strconv.FormatInt(idx+int64(n)-1, 10)+" beyond "+itoa(int(MaxIndex)))
		}
		fast := false
		if fill == nil {
			if n == 1 && *p < len(src) {
				// A run of one bucket (the commonest): sumRun's check of one
				// count, without the call.
				if c := uint64(src[*p]); c != 0 && c < 0x80 && (maxBuckets <= 0 || nonEmpty < maxBuckets) && total+c >= total {
					total, nonEmpty = total+c, nonEmpty+1
					*p++
					idx++
					fast = true
				}
			} else {
				var sum uint64
				var nz int
				if sum, nz, fast = sumRun(src, *p, int(n), total, nonEmpty, maxBuckets); fast {
					total, nonEmpty = total+sum, nonEmpty+nz
					*p += int(n)
					idx += int64(n)
				}
			}
		}
		for k := uint64(0); k < n && !fast; k++ {
			var c uint64
			if *p < len(src) && src[*p] < 0x80 { // the common one-byte count
				c = uint64(src[*p])
				*p++
			} else if c, err = readUvarint(src, p, "count"); err != nil {
				return 0, 0, err
			}
			if c == 0 && (k == 0 || k == n-1) {
				return 0, 0, invalid("count", "run at index "+strconv.FormatInt(idx, 10)+" starts or ends with an empty bucket")
			}
			if c != 0 {
				nonEmpty++
				if maxBuckets > 0 && nonEmpty > maxBuckets {
					return 0, 0, &DecodeError{Field: "buckets", Reason: "more than " + itoa(maxBuckets) + " non-empty buckets", Err: ErrLimit}
				}
				if total+c < total {
					return 0, 0, invalid("count", "total count overflows uint64")
				}
				total += c
				if fill != nil {
					fill[idx-int64(first)] = c
				}
			}
			idx++
		}
		slots -= int(n)
		if slots == 0 {
			break
		}
		var gap uint64
		if *p < len(src) && src[*p] < 0x80 {
			gap = uint64(src[*p])
			*p++
		} else if gap, err = readUvarint(src, p, "buckets"); err != nil {
			return 0, 0, err
		}
		if gap == 0 {
			return 0, 0, invalid("buckets", "gap of 0 between runs")
		}
		if gap > uint64(MaxIndex) || idx+int64(gap) > int64(MaxIndex) {
			return 0, 0, invalid("index", "gap of "+utoa(gap)+" after index "+strconv.FormatInt(idx-1, 10)+" goes beyond "+itoa(int(MaxIndex)))
		}
		idx += int64(gap)
	}
	return int32(idx - 1), total, nil
}

// checkRunsFast is the checking pass over runs whose every value (run
// length, count and gap) is one byte, the common case, in one call: it
// walks the runs by their lengths and gaps only (each run's first and last
// counts must not be zero), then sums the whole span eight bytes at a time,
// lengths and gaps included, and takes theirs back out. ok is false unless
// walkRuns would accept the runs with the same result; the caller then
// walks them run by run, which finds the error, if any. A value of two
// bytes or more is read wrongly by the walk and refused by the sum (a byte
// of 0x80 or more in the span).
func checkRunsFast(src []byte, p int, first int32, slots, maxBuckets int) (end int, last int32, total uint64, ok bool) {
	idx, q, marks := int(first), p, 0
	var markSum uint64 // the lengths and gaps (marks): none is zero, so each counts once in nz below
	for {
		if q >= len(src) {
			return 0, 0, 0, false
		}
		n := int(src[q])
		if n == 0 || n > slots || q+n >= len(src) || src[q+1] == 0 || src[q+n] == 0 || idx+n-1 > int(MaxIndex) {
			return 0, 0, 0, false
		}
		markSum += uint64(n)
		marks++
		idx += n
		q += 1 + n
		if slots -= n; slots == 0 {
			break
		}
		if q >= len(src) {
			return 0, 0, 0, false
		}
		g := int(src[q])
		if g == 0 || g >= 0x80 { // past MaxIndex: the next run's check fails
			return 0, 0, 0, false
		}
		markSum += uint64(g)
		marks++
		idx += g
		q++
	}
	sum, nz, one := sumOneByte(src[p:q])
	if !one {
		return 0, 0, 0, false
	}
	if nonEmpty := nz - marks; maxBuckets > 0 && nonEmpty > maxBuckets {
		return 0, 0, 0, false
	}
	// At most 127 a slot and fewer than NumIndexes slots: no overflow.
	return q, int32(idx - 1), sum - markSum, true
}

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

func appendFloat(dst []byte, f float64) []byte {
	return appendUvarint(dst, bits.ReverseBytes64(math.Float64bits(f)))
}

// sumRun is the checking pass's fast way over a run of n counts at src[p:]
// that are all one byte (the common case): their sum and how many are not
// zero. ok is false, and the caller reads the run count by count (which
// finds the error, if any), unless every count is one byte, the first and
// the last are not zero, the bucket limit holds and the total cannot
// overflow: then the slow way would accept the run with the same result.
func sumRun(src []byte, p, n int, total uint64, nonEmpty, maxBuckets int) (sum uint64, nz int, ok bool) {
	if n > len(src)-p || total > math.MaxUint64-127*uint64(n) {
		return 0, 0, false
	}
	run := src[p : p+n]
	if run[0] == 0 || run[n-1] == 0 {
		return 0, 0, false
	}
	sum, nz, ok = sumOneByte(run)
	if !ok || maxBuckets > 0 && nonEmpty+nz > maxBuckets {
		return 0, 0, false
	}
	return sum, nz, true
}

// sumOneByte sums the bytes of b and counts those that are not zero, eight
// at a time (SWAR), then the rest one by one; ok is false (the sums are
// then meaningless) unless every byte is below 0x80. While they are, the
// lanes never carry into each other: a byte b plus 0x7f has its top bit set
// exactly when b is not 0, and byte pairs summed in 16-bit lanes stay under
// 0x100.
func sumOneByte(b []byte) (sum uint64, nz int, ok bool) {
	const (
		ones  = 0x0101010101010101
		highs = 0x80 * ones
		evens = 0x00ff00ff00ff00ff
	)
	var or uint64
	for len(b) >= 8 {
		x := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		or |= x
		nz += bits.OnesCount64((x + 0x7f*ones) & highs)
		pairs := x&evens + x>>8&evens             // four 16-bit lanes, each at most 0xfe
		sum += (pairs * 0x0001000100010001) >> 48 // their sum, at most 0x3f8
		b = b[8:]
	}
	for _, c := range b {
		or |= uint64(c)
		sum += uint64(c)
		nz += int((c | -c) >> 7) // 1 unless c is 0 (c < 0x80 here)
	}
	return sum, nz, or&highs == 0
}

// readUvarint reads a uvarint at src[*p:] and advances *p.
func readUvarint(src []byte, p *int, field string) (uint64, error) {
	var v uint64
	for i, s := 0, uint(0); i < 10; i, s = i+1, s+7 {
		if *p+i >= len(src) {
			return 0, truncated(field)
		}
		b := src[*p+i]
		if b < 0x80 {
			if i == 9 && b > 1 {
				break
			}
			*p += i + 1
			return v | uint64(b)<<s, nil
		}
		v |= uint64(b&0x7f) << s
	}
	return 0, invalid(field, "varint overflows 64 bits")
}

func readVarint(src []byte, p *int, field string) (int64, error) {
	u, err := readUvarint(src, p, field)
	return int64(u>>1) ^ -int64(u&1), err
}
