// Package hist implements the gap histogram shared by the browser module, the
// collector and the gate: a base-2 exponential histogram at one fixed scale
// (OpenTelemetry's exponential histogram layout), values in microseconds.
//
// Bucket i covers (base^i, base^(i+1)] with base = 2^(2^-Scale). Values at or
// below ZeroThresholdMicros are counted in a separate zero bucket (gaps under
// the timer floor). Because the scale is fixed, histograms from every browser
// merge by adding counts per index, in Go (Merge) and in ClickHouse (sumMap).
//
// Bucket boundaries are exact: the index of a value is computed from its
// float64 exponent (math.Frexp) and a table of the 32 correctly rounded
// boundaries 2^(j/32) in [1, 2), never from a logarithm, so a value equal to a
// boundary always lands in the bucket that boundary closes, on every platform
// (amd64, arm64, js/wasm) alike. LowerBound gives the same boundaries.
//
// Quantiles follow numpy's default (linear interpolation between the two
// order statistics around rank q*(n-1)); each order statistic is replaced by
// its bucket's representative value BucketValue, clamped to [Min, Max], and
// the rank 0 and n-1 statistics are Min and Max exactly. Because a linear
// interpolation is a convex combination, the relative error of each
// representative carries over unchanged to the interpolated quantile:
//
//	|Quantile(q) - exact(q)| <= RelativeError*exact(q) + ZeroThresholdMicros
//
// where the absolute term only applies when one of the two order statistics
// is in the zero bucket. The representative 2*L*U/(L+U) of a bucket (L, U]
// has a relative error of at most (base-1)/(base+1) ≈ 1.09 % against any value
// in the bucket, half of RelativeError, which is the stated bound of the
// layout (base-1 ≈ 2.19 %).
//
// The zero value is an empty, usable histogram. A Histogram is not safe for
// concurrent use. A Histogram holds a slice: a plain struct copy shares the
// bucket storage; use Clone for an independent copy.
package hist

import "math"

// Scale is the fixed OpenTelemetry exponential-histogram scale. At scale 5 the
// relative error of a quantile read from a bucket is at most 2^(2^-5)-1 ≈ 2.19 %.
const Scale = 5

// ZeroThresholdMicros: values <= this many microseconds go to the zero bucket.
//
// It stays at 1 µs although browser timer floors are coarser (100 µs in
// Chromium, 5 µs when cross-origin isolated, 1 ms in Firefox): the floor
// differs per browser and per page, so a per-floor threshold would make
// histograms from different browsers disagree on what the zero bucket means.
// A 1 µs threshold holds exactly the zero-length gaps (several events in one
// read) and keeps every measurable gap in a real bucket; the share of gaps
// under the page's own floor travels separately (beacon.Record.SubFloorShare).
const ZeroThresholdMicros = 1.0

// RelativeError is the largest relative error of Quantile against the exact
// quantile of the recorded values.
const RelativeError = 0.0219

const (
	// subBuckets is the number of buckets per power of two (2^Scale).
	subBuckets = 1 << Scale

	// MinIndex is the index of the lowest bucket: (ZeroThresholdMicros, ...].
	// With the threshold at 2^0 µs it is 0.
	MinIndex int32 = 0
	// MaxIndex is the index of the highest bucket, which ends at
	// MaxMicros = 2^40 µs (about 12.7 days). Larger values are counted in it
	// (Sum, Min and Max stay exact; the error bound holds up to MaxMicros).
	MaxIndex int32 = 40<<Scale - 1
	// MaxMicros is the upper bound of bucket MaxIndex.
	MaxMicros = 1 << 40

	// NumIndexes is the number of buckets between MinIndex and MaxIndex.
	NumIndexes = int(MaxIndex-MinIndex) + 1
)

// bounds[j] is 2^(j/32) correctly rounded to float64 (checked against
// math/big in TestBoundsTable).
var bounds = [subBuckets]float64{
	0x1p+00, 0x1.059b0d3158574p+00, 0x1.0b5586cf9890fp+00, 0x1.11301d0125b51p+00,
	0x1.172b83c7d517bp+00, 0x1.1d4873168b9aap+00, 0x1.2387a6e756238p+00, 0x1.29e9df51fdee1p+00,
	0x1.306fe0a31b715p+00, 0x1.371a7373aa9cbp+00, 0x1.3dea64c123422p+00, 0x1.44e086061892dp+00,
	0x1.4bfdad5362a27p+00, 0x1.5342b569d4f82p+00, 0x1.5ab07dd485429p+00, 0x1.6247eb03a5585p+00,
	0x1.6a09e667f3bcdp+00, 0x1.71f75e8ec5f74p+00, 0x1.7a11473eb0187p+00, 0x1.82589994cce13p+00,
	0x1.8ace5422aa0dbp+00, 0x1.93737b0cdc5e5p+00, 0x1.9c49182a3f09p+00, 0x1.a5503b23e255dp+00,
	0x1.ae89f995ad3adp+00, 0x1.b7f76f2fb5e47p+00, 0x1.c199bdd85529cp+00, 0x1.cb720dcef9069p+00,
	0x1.d5818dcfba487p+00, 0x1.dfc97337b9b5fp+00, 0x1.ea4afa2a490dap+00, 0x1.f50765b6e454p+00,
}

// bounds1 is bounds followed by 2, so bounds1[j+1] needs no length check.
var bounds1 = func() (b [subBuckets + 1]float64) {
	copy(b[:], bounds[:])
	b[subBuckets] = 2
	return b
}()

// guessBits: a mantissa in [1, 2) is split linearly into 2^guessBits slices;
// each slice is narrower than the narrowest bucket (2^(1/32)-1 ≈ 0.0219 >
// 1/64), so it holds at most one boundary and one comparison finds the bucket.
const guessBits = 6

// guess[m] is the largest j with bounds[j] <= 1 + m/64.
var guess = func() (g [1 << guessBits]uint8) {
	for m := range g {
		f := 1 + float64(m)/(1<<guessBits)
		j := 0
		for j+1 < subBuckets && bounds[j+1] <= f {
			j++
		}
		g[m] = uint8(j)
	}
	return g
}()

// repFactor turns a bucket's lower bound L into 2*L*U/(L+U) with U = L*base:
// the point whose largest relative error against any value in (L, U] is
// smallest, (base-1)/(base+1).
var repFactor = 2 * bounds[1] / (1 + bounds[1])

// BucketIndex returns the index of the bucket holding us (> ZeroThresholdMicros):
// the i with base^i < us <= base^(i+1), clamped to [MinIndex, MaxIndex].
func BucketIndex(us float64) int32 {
	if !(us > ZeroThresholdMicros) { // also NaN
		return MinIndex
	}
	if us > MaxMicros {
		return MaxIndex
	}
	// us > 1 is a normal float64: us = 1.m × 2^e.
	b := math.Float64bits(us)
	e := int32(b>>52&0x7ff) - 1023
	mant := b & (1<<52 - 1)
	if mant == 0 {
		// An exact power of two closes the bucket below it.
		return e<<Scale - 1
	}
	f := math.Float64frombits(mant | 1023<<52) // in (1, 2)
	j := int32(guess[mant>>(52-guessBits)])
	if bounds1[j+1] < f { // guess[m] <= 31, bounds1[32] = 2
		j++
	}
	return e<<Scale + j
}

// LowerBound returns the exclusive lower bound base^index of a bucket; its
// inclusive upper bound is LowerBound(index+1).
func LowerBound(index int32) float64 {
	return math.Ldexp(bounds[index&(subBuckets-1)], int(index>>Scale))
}

// BucketValue returns the representative value of bucket index used by
// Quantile, before clamping to [Min, Max]: 2*L*U/(L+U) for the bucket (L, U].
func BucketValue(index int32) float64 {
	return LowerBound(index) * repFactor
}

// Histogram is a base-2 exponential histogram of microsecond values at scale
// Scale. The zero value is empty and ready to use.
type Histogram struct {
	counts []uint64 // counts[k] is the count of bucket first+k
	first  int32    // index of counts[0]
	lo, hi int32    // lowest and highest non-empty bucket; valid when count > zero
	zero   uint64   // values <= ZeroThresholdMicros
	count  uint64   // all values, zero bucket included
	sum    float64
	min    float64 // valid when count > 0
	max    float64
}

// Record adds one value in microseconds. Negative, NaN and infinite values are
// ignored.
func (h *Histogram) Record(us float64) { h.RecordN(us, 1) }

// RecordN adds n copies of one value in microseconds. Negative, NaN and
// infinite values are ignored.
func (h *Histogram) RecordN(us float64, n uint64) {
	if n == 0 || !(us >= 0) || us > math.MaxFloat64 {
		return
	}
	if us <= ZeroThresholdMicros {
		h.zero += n
	} else {
		i := BucketIndex(us)
		k := i - h.first
		if uint32(k) >= uint32(len(h.counts)) {
			h.grow(i, i)
			k = i - h.first
		}
		h.counts[k] += n
		if h.count == h.zero {
			h.lo, h.hi = i, i
		} else if i < h.lo {
			h.lo = i
		} else if i > h.hi {
			h.hi = i
		}
	}
	if h.count == 0 {
		h.min, h.max = us, us
	} else if us < h.min {
		h.min = us
	} else if us > h.max {
		h.max = us
	}
	h.count += n
	h.sum += us * float64(n)
}

// grow makes counts cover the indexes [lo, hi] (and what it covered before),
// with some headroom so a histogram settles after a few values.
func (h *Histogram) grow(lo, hi int32) {
	const pad = 16
	oldLo, oldHi := h.first, h.first+int32(len(h.counts))-1
	if len(h.counts) == 0 {
		oldLo, oldHi = lo, hi
	}
	nlo, nhi := min(lo, oldLo), max(hi, oldHi)
	// Headroom grows with the span, so repeated growth is amortised.
	extra := max(pad, (nhi-nlo+1)/2)
	if lo < oldLo || len(h.counts) == 0 {
		nlo -= extra
	}
	if hi > oldHi || len(h.counts) == 0 {
		nhi += extra
	}
	nlo, nhi = max(nlo, MinIndex), min(nhi, MaxIndex)
	n := int(nhi-nlo) + 1
	var counts []uint64
	if cap(h.counts) >= n && len(h.counts) == 0 {
		counts = h.counts[:n]
		clear(counts)
	} else {
		counts = make([]uint64, n)
		if len(h.counts) > 0 {
			copy(counts[h.first-nlo:], h.counts)
		}
	}
	h.counts, h.first = counts, nlo
}

// Merge adds every value of o to h. o is not changed; h and o may be the same.
func (h *Histogram) Merge(o *Histogram) {
	if o.count == 0 {
		return
	}
	if h == o {
		c := o.Clone()
		o = &c
	}
	if o.count > o.zero {
		if h.count == h.zero {
			if len(h.counts) == 0 || o.lo < h.first || o.hi >= h.first+int32(len(h.counts)) {
				h.counts = h.counts[:0]
				h.grow(o.lo, o.hi)
			}
			h.lo, h.hi = o.lo, o.hi
		} else {
			if o.lo < h.first || o.hi >= h.first+int32(len(h.counts)) {
				h.grow(o.lo, o.hi)
			}
			h.lo, h.hi = min(h.lo, o.lo), max(h.hi, o.hi)
		}
		src := o.counts[o.lo-o.first : o.hi-o.first+1]
		dst := h.counts[o.lo-h.first : o.hi-h.first+1]
		for k, c := range src {
			dst[k] += c
		}
	}
	if h.count == 0 {
		h.min, h.max = o.min, o.max
	} else {
		h.min, h.max = min(h.min, o.min), max(h.max, o.max)
	}
	h.zero += o.zero
	h.count += o.count
	h.sum += o.sum
}

// Clone returns an independent copy of h.
func (h *Histogram) Clone() Histogram {
	c := *h
	c.counts = nil
	if h.count > h.zero {
		c.counts = append([]uint64(nil), h.counts[h.lo-h.first:h.hi-h.first+1]...)
		c.first = h.lo
	} else {
		c.first = 0
	}
	return c
}

// Reset empties h and keeps its storage.
func (h *Histogram) Reset() {
	if h.count > h.zero {
		clear(h.counts[h.lo-h.first : h.hi-h.first+1])
	}
	counts, first := h.counts, h.first
	*h = Histogram{counts: counts, first: first}
}

// Count returns the number of recorded values, zero bucket included.
func (h *Histogram) Count() uint64 { return h.count }

// ZeroCount returns the number of values <= ZeroThresholdMicros.
func (h *Histogram) ZeroCount() uint64 { return h.zero }

// Sum returns the sum of the recorded values (not derived from the buckets).
func (h *Histogram) Sum() float64 { return h.sum }

// Min returns the smallest recorded value, 0 when empty.
func (h *Histogram) Min() float64 {
	if h.count == 0 {
		return 0
	}
	return h.min
}

// Max returns the largest recorded value, 0 when empty.
func (h *Histogram) Max() float64 {
	if h.count == 0 {
		return 0
	}
	return h.max
}

// Equal reports whether h and o hold the same counts, sum, min and max.
func (h *Histogram) Equal(o *Histogram) bool {
	if h.count != o.count || h.zero != o.zero || h.sum != o.sum || h.Min() != o.Min() || h.Max() != o.Max() {
		return false
	}
	if h.count == h.zero {
		return true
	}
	if h.lo != o.lo || h.hi != o.hi {
		return false
	}
	a := h.counts[h.lo-h.first : h.hi-h.first+1]
	b := o.counts[o.lo-o.first : o.hi-o.first+1]
	for k := range a {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

// Buckets calls fn for every non-empty bucket in ascending index order. The
// zero bucket is not included (see ZeroCount).
func (h *Histogram) Buckets(fn func(index int32, count uint64)) {
	if h.count == h.zero {
		return
	}
	for k, c := range h.counts[h.lo-h.first : h.hi-h.first+1] {
		if c != 0 {
			fn(h.lo+int32(k), c)
		}
	}
}

// NumBuckets returns the number of non-empty buckets, zero bucket excluded.
func (h *Histogram) NumBuckets() int {
	if h.count == h.zero {
		return 0
	}
	n := 0
	for _, c := range h.counts[h.lo-h.first : h.hi-h.first+1] {
		if c != 0 {
			n++
		}
	}
	return n
}

// Sparse returns the non-empty buckets as parallel slices in ascending index
// order, the shape of a ClickHouse Map(Int32, UInt64) / sumMap column.
func (h *Histogram) Sparse() (index []int32, counts []uint64) {
	n := h.NumBuckets()
	if n == 0 {
		return nil, nil
	}
	index, counts = make([]int32, 0, n), make([]uint64, 0, n)
	h.Buckets(func(i int32, c uint64) {
		index = append(index, i)
		counts = append(counts, c)
	})
	return index, counts
}

// FromSparse builds a histogram from its parts, as Sparse and the accessors
// return them. Indexes must be strictly ascending within [MinIndex,
// MaxIndex]; empty buckets are skipped. sum, min and max must be finite and
// non-negative, and min and max must fall in the lowest and highest non-empty
// bucket (the zero bucket included), as they do for any histogram built by
// Record and Merge. For an empty histogram sum, min and max are ignored.
func FromSparse(zero uint64, index []int32, counts []uint64, sum, min, max float64) (Histogram, error) {
	if len(index) != len(counts) {
		return Histogram{}, invalid("buckets", "index and counts lengths differ ("+itoa(len(index))+" vs "+itoa(len(counts))+")")
	}
	var h Histogram
	h.zero, h.count = zero, zero
	nonEmpty := 0
	for k, i := range index {
		if i < MinIndex || i > MaxIndex {
			return Histogram{}, invalid("buckets", "index "+itoa(int(i))+" outside ["+itoa(int(MinIndex))+", "+itoa(int(MaxIndex))+"]")
		}
		if k > 0 && i <= index[k-1] {
			return Histogram{}, invalid("buckets", "index "+itoa(int(i))+" not above previous "+itoa(int(index[k-1])))
		}
		c := counts[k]
		if c == 0 {
			continue
		}
		if h.count+c < h.count {
			return Histogram{}, invalid("buckets", "total count overflows uint64")
		}
		h.count += c
		if nonEmpty == 0 {
			h.lo = i
		}
		h.hi = i
		nonEmpty++
	}
	if nonEmpty > 0 {
		h.first = h.lo
		h.counts = make([]uint64, h.hi-h.lo+1)
		for k, i := range index {
			if counts[k] != 0 {
				h.counts[i-h.lo] = counts[k]
			}
		}
	}
	if err := h.setStats(sum, min, max); err != nil {
		return Histogram{}, err
	}
	return h, nil
}

// setStats validates and stores sum, min and max against the counts already in h.
func (h *Histogram) setStats(sum, min, max float64) error {
	if h.count == 0 {
		return nil
	}
	for _, f := range [...]struct {
		name string
		v    float64
	}{{"sum", sum}, {"min", min}, {"max", max}} {
		if !(f.v >= 0) || f.v > math.MaxFloat64 {
			return invalid(f.name, "not a finite non-negative number")
		}
	}
	if min > max {
		return invalid("min", "above max")
	}
	// min must lie in the lowest non-empty bucket, max in the highest.
	minOK := min <= ZeroThresholdMicros
	if h.zero == 0 {
		minOK = !minOK && BucketIndex(min) == h.lo
	}
	if !minOK {
		return invalid("min", "not in the lowest non-empty bucket")
	}
	maxOK := max <= ZeroThresholdMicros
	if h.count > h.zero {
		maxOK = !maxOK && BucketIndex(max) == h.hi
	}
	if !maxOK {
		return invalid("max", "not in the highest non-empty bucket")
	}
	h.sum, h.min, h.max = sum, min, max
	return nil
}

// Quantile returns the q-quantile (q in [0, 1], clamped) of the recorded
// values, 0 for an empty histogram. See the package comment for the method
// and its error bound.
func (h *Histogram) Quantile(q float64) float64 {
	if h.count == 0 {
		return 0
	}
	if !(q > 0) {
		return h.min
	}
	if q >= 1 {
		return h.max
	}
	pos := q * float64(h.count-1)
	k := uint64(pos)
	t := pos - float64(k)
	if k >= h.count-1 {
		return h.max
	}
	a, b := h.rankValues(k)
	if t == 0 {
		return a
	}
	// numpy's _lerp: exact at both ends and monotone in t.
	d := b - a
	if t >= 0.5 {
		return b - d*(1-t)
	}
	return a + d*t
}

// rankValues returns the representative values of the order statistics k and
// k+1 (0-based, k+1 < count).
func (h *Histogram) rankValues(k uint64) (a, b float64) {
	// The zero bucket's values lie in [0, ZeroThresholdMicros]: Min (which is
	// one of them) represents them all within ZeroThresholdMicros.
	cum := h.zero
	haveA, haveB := false, false
	if k < cum {
		a, haveA = h.min, true
	}
	if k+1 < cum {
		b, haveB = h.min, true
	}
	if !haveB {
		for off, c := range h.counts[h.lo-h.first : h.hi-h.first+1] {
			if c == 0 {
				continue
			}
			cum += c
			if !haveA && k < cum {
				a, haveA = h.clamp(BucketValue(h.lo+int32(off))), true
			}
			if k+1 < cum {
				b, haveB = h.clamp(BucketValue(h.lo+int32(off))), true
				break
			}
		}
	}
	if !haveA || !haveB {
		panic("BUG: hist: rank beyond count")
	}
	// The extreme order statistics are known exactly.
	if k == 0 {
		a = h.min
	}
	if k+2 == h.count {
		b = h.max
	}
	return a, b
}

func (h *Histogram) clamp(v float64) float64 {
	return min(max(v, h.min), h.max)
}
