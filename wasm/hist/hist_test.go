package hist

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"pgregory.net/rapid"

	"github.com/itlmon/itlmon/internal/cpubench"
)

func TestBoundsTable(t *testing.T) {
	for j := range subBuckets {
		x := new(big.Float).SetPrec(300).SetInt64(1 << j)
		for range Scale {
			x.Sqrt(x)
		}
		want, _ := x.Float64()
		if got := bounds[j]; got != want {
			t.Fatalf("bounds[%d] = %x, want %x (2^(%d/32) correctly rounded)", j, got, want, j)
		}
	}
	// Each slice of the guess table holds at most one boundary.
	if w := bounds[1] - 1; w <= 1.0/(1<<guessBits) {
		t.Fatalf("narrowest bucket %v not wider than a guess slice", w)
	}
}

// refIndex is BucketIndex by binary search over the boundaries.
func refIndex(v float64) int32 {
	lo, hi := MinIndex, MaxIndex // find the i with LowerBound(i) < v <= LowerBound(i+1)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if v <= LowerBound(mid+1) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

func TestBucketIndexBoundaries(t *testing.T) {
	for i := MinIndex; i <= MaxIndex; i++ {
		lower, upper := LowerBound(i), LowerBound(i+1)
		if got := BucketIndex(upper); got != i {
			t.Fatalf("BucketIndex(%x = upper bound of %d) = %d, want %d", upper, i, got, i)
		}
		if got := BucketIndex(math.Nextafter(lower, math.Inf(1))); got != i {
			t.Fatalf("BucketIndex(just above %x, lower bound of %d) = %d", lower, i, got)
		}
		if got := BucketIndex(math.Nextafter(upper, 0)); got != i {
			t.Fatalf("BucketIndex(just below %x, upper bound of %d) = %d", upper, i, got)
		}
		if i > MinIndex {
			if got := BucketIndex(lower); got != i-1 {
				t.Fatalf("BucketIndex(%x = lower bound of %d) = %d, want %d", lower, i, got, i-1)
			}
		}
		if r := upper / lower; math.Abs(r-bounds[1]) > 1e-15 {
			t.Fatalf("bucket %d ratio %v", i, r)
		}
	}
	// Powers of two and their neighbours.
	for e := 0; e <= 40; e++ {
		v := math.Ldexp(1, e)
		if v <= ZeroThresholdMicros {
			continue
		}
		if got, want := BucketIndex(v), int32(e<<Scale-1); got != want {
			t.Fatalf("BucketIndex(2^%d) = %d, want %d", e, got, want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		v := math.Exp2(r.Float64() * 40)
		if v <= ZeroThresholdMicros {
			continue
		}
		if got, want := BucketIndex(v), refIndex(v); got != want {
			t.Fatalf("BucketIndex(%x) = %d, want %d", v, got, want)
		}
	}
	if got := BucketIndex(1e300); got != MaxIndex {
		t.Fatalf("BucketIndex(1e300) = %d, want MaxIndex", got)
	}
	if got, want := LowerBound(MaxIndex+1), float64(MaxMicros); got != want {
		t.Fatalf("LowerBound(MaxIndex+1) = %v, want %v", got, want)
	}
	if got, want := LowerBound(MinIndex), ZeroThresholdMicros; got != want {
		t.Fatalf("LowerBound(MinIndex) = %v, want %v", got, want)
	}
}

func TestZeroValue(t *testing.T) {
	var h Histogram
	if h.Count() != 0 || h.ZeroCount() != 0 || h.Sum() != 0 || h.Min() != 0 || h.Max() != 0 || h.Quantile(0.5) != 0 {
		t.Fatal("zero value not empty")
	}
	if idx, c := h.Sparse(); idx != nil || c != nil {
		t.Fatal("Sparse of empty histogram not nil")
	}
	h.Buckets(func(int32, uint64) { t.Fatal("bucket in empty histogram") })
	var o Histogram
	h.Merge(&o)
	if h.Count() != 0 {
		t.Fatal("merge of empties not empty")
	}
	if got, want := len(h.AppendBinary(nil)), 2; got != want {
		t.Fatalf("empty encoding = %d bytes, want %d", got, want)
	}
}

func TestRecordIgnores(t *testing.T) {
	var h Histogram
	for _, v := range []float64{-1, math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1) - 1e-300} {
		h.Record(v)
	}
	h.RecordN(5, 0)
	if got := h.Count(); got != 0 {
		t.Fatalf("Count = %d, want 0", got)
	}
	h.Record(0)
	h.Record(ZeroThresholdMicros)
	h.Record(math.Nextafter(ZeroThresholdMicros, 2))
	if got, want := h.ZeroCount(), uint64(2); got != want {
		t.Fatalf("ZeroCount = %d, want %d", got, want)
	}
	if got, want := h.Count(), uint64(3); got != want {
		t.Fatalf("Count = %d, want %d", got, want)
	}
}

func TestBasics(t *testing.T) {
	var h Histogram
	vals := []float64{1000, 0, 250, 250, 99999.5, 3}
	for _, v := range vals {
		h.Record(v)
	}
	h.RecordN(1000, 3)
	if got, want := h.Count(), uint64(9); got != want {
		t.Fatalf("Count = %d, want %d", got, want)
	}
	if got, want := h.ZeroCount(), uint64(1); got != want {
		t.Fatalf("ZeroCount = %d, want %d", got, want)
	}
	if got, want := h.Sum(), 1000+0+250+250+99999.5+3+3000.0; got != want {
		t.Fatalf("Sum = %v, want %v", got, want)
	}
	if h.Min() != 0 || h.Max() != 99999.5 || h.Quantile(0) != 0 || h.Quantile(1) != 99999.5 {
		t.Fatalf("Min/Max/Q0/Q1 = %v %v %v %v", h.Min(), h.Max(), h.Quantile(0), h.Quantile(1))
	}
	idx, counts := h.Sparse()
	want := []int32{BucketIndex(3), BucketIndex(250), BucketIndex(1000), BucketIndex(99999.5)}
	if !slices.Equal(idx, want) || !slices.Equal(counts, []uint64{1, 2, 4, 1}) {
		t.Fatalf("Sparse = %v %v, want %v [1 2 4 1]", idx, counts, want)
	}
	if got, want := h.NumBuckets(), 4; got != want {
		t.Fatalf("NumBuckets = %d, want %d", got, want)
	}
	c := h.Clone()
	h.Record(5)
	if c.Count() != 9 || !slices.Equal(mustSparse(&c), idx) {
		t.Fatal("Clone shares storage")
	}
	h.Reset()
	if h.Count() != 0 || h.NumBuckets() != 0 || h.Min() != 0 {
		t.Fatal("Reset left values")
	}
	h.Record(7)
	if got := mustSparse(&h); !slices.Equal(got, []int32{BucketIndex(7)}) {
		t.Fatalf("after Reset: buckets %v", got)
	}
}

func mustSparse(h *Histogram) []int32 { i, _ := h.Sparse(); return i }

func TestRecordNoAlloc(t *testing.T) {
	var h Histogram
	r := rand.New(rand.NewPCG(3, 4))
	vals := make([]float64, 1024)
	for i := range vals {
		vals[i] = math.Exp2(r.Float64() * 24)
	}
	for _, v := range vals { // settle
		h.Record(v)
	}
	if n := testing.AllocsPerRun(100, func() {
		for _, v := range vals {
			h.Record(v)
		}
	}); n != 0 {
		t.Fatalf("Record allocates %v times per 1024 values in the steady state", n)
	}
}

// exactQuantile is numpy.quantile(x, q) with the default method="linear".
func exactQuantile(sorted []float64, q float64) float64 {
	pos := q * float64(len(sorted)-1)
	k := int(math.Floor(pos))
	t := pos - float64(k)
	if k >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	a, b := sorted[k], sorted[k+1]
	d := b - a
	if t >= 0.5 {
		return b - d*(1-t)
	}
	return a + d*t
}

// zeroWeight is the interpolation weight of the order statistics around rank
// q*(n-1) that lie in the zero bucket: the absolute error allowance is
// zeroWeight*ZeroThresholdMicros.
func zeroWeight(sorted []float64, q float64) float64 {
	pos := q * float64(len(sorted)-1)
	k := int(math.Floor(pos))
	t := pos - float64(k)
	w := 0.0
	if sorted[k] <= ZeroThresholdMicros {
		w += 1 - t
	}
	if k+1 < len(sorted) && sorted[k+1] <= ZeroThresholdMicros {
		w += t
	}
	return w
}

var testQuantiles = []float64{0, 0.001, 0.01, 0.1, 0.25, 0.333, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1}

// tightError is the relative error the representative 2LU/(L+U) achieves:
// (base-1)/(base+1) ≈ 1.08 %, half of RelativeError.
var tightError = (bounds[1] - 1) / (bounds[1] + 1)

// genValues draws a value set of one of the shapes the property tests cover.
func genValues(t *rapid.T) (string, []float64) {
	kind := rapid.SampledFrom([]string{"tiny", "uniform", "bimodal", "pareto", "lognormal", "constant", "zeros+values", "timer-quantised"}).Draw(t, "kind")
	if kind == "tiny" {
		// Drawn value by value so rapid shrinks them; far-apart values test
		// the interpolation between two buckets.
		return kind, rapid.SliceOfN(rapid.OneOf(
			rapid.Float64Range(0, 1e9),
			rapid.SampledFrom([]float64{0, 0.5, 1, 1.0000001, 2, 100, 1e6}),
		), 1, 3).Draw(t, "values")
	}
	r := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 7))
	n := rapid.IntRange(1, 50).Draw(t, "n")
	if rapid.Bool().Draw(t, "large") { // rapid favours small sizes; make large sets common
		n = 50 + r.IntN(5000)
	}
	v := make([]float64, n)
	switch kind {
	case "uniform":
		lo := rapid.Float64Range(0, 1e5).Draw(t, "lo")
		hi := lo + rapid.Float64Range(0, 1e7).Draw(t, "width")
		for i := range v {
			v[i] = lo + r.Float64()*(hi-lo)
		}
	case "bimodal":
		// Fast tokens around 20 ms with a cluster of 300 ms-2 s stalls.
		share := rapid.Float64Range(0.01, 0.5).Draw(t, "stall share")
		for i := range v {
			if r.Float64() < share {
				v[i] = 3e5 + r.Float64()*1.7e6
			} else {
				v[i] = 2e4 * math.Exp(0.3*r.NormFloat64())
			}
		}
	case "pareto":
		alpha := rapid.Float64Range(0.5, 3).Draw(t, "alpha")
		xm := rapid.Float64Range(1, 1e4).Draw(t, "xm")
		for i := range v {
			v[i] = xm / math.Pow(1-r.Float64(), 1/alpha)
		}
	case "lognormal":
		mu := rapid.Float64Range(0, 14).Draw(t, "mu")
		sigma := rapid.Float64Range(0.01, 3).Draw(t, "sigma")
		for i := range v {
			v[i] = math.Exp(mu + sigma*r.NormFloat64())
		}
	case "constant":
		c := rapid.OneOf(rapid.Float64Range(0, 1e8), rapid.SampledFrom([]float64{0, 1, 2, 100, LowerBound(300)})).Draw(t, "c")
		for i := range v {
			v[i] = c
		}
	case "zeros+values":
		share := rapid.Float64Range(0, 1).Draw(t, "zero share")
		for i := range v {
			if r.Float64() < share {
				v[i] = r.Float64() * ZeroThresholdMicros
			} else {
				v[i] = math.Exp(8 + 2*r.NormFloat64())
			}
		}
	case "timer-quantised":
		// Chromium: 100 µs steps, many zero-length gaps from re-chunking.
		for i := range v {
			v[i] = 100 * float64(r.IntN(400)*r.IntN(2))
		}
	}
	return kind, v
}

func TestQuantileWithinRelativeError(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		kind, vals := genValues(t)
		var h Histogram
		for _, v := range vals {
			h.Record(v)
		}
		sorted := slices.Clone(vals)
		sort.Float64s(sorted)
		qs := append(slices.Clone(testQuantiles), rapid.Float64Range(0, 1).Draw(t, "q"))
		for _, q := range qs {
			got, want := h.Quantile(q), exactQuantile(sorted, q)
			diff := math.Abs(got - want)
			abs := zeroWeight(sorted, q) * ZeroThresholdMicros
			if diff > RelativeError*want+abs+1e-12*want {
				t.Fatalf("%s n=%d q=%v: hist %v, exact %v: error %v > %v*exact + %v", kind, len(vals), q, got, want, diff, RelativeError, abs)
			}
			// The representative achieves half the stated bound.
			if diff > tightError*want+abs+1e-12*want {
				t.Fatalf("%s n=%d q=%v: hist %v, exact %v: error %v > tight %v*exact + %v", kind, len(vals), q, got, want, diff, tightError, abs)
			}
		}
		if h.Count() != uint64(len(vals)) || h.Min() != sorted[0] || h.Max() != sorted[len(sorted)-1] {
			t.Fatalf("Count/Min/Max = %d %v %v", h.Count(), h.Min(), h.Max())
		}
	})
}

// TestQuantileTinyFarApart: with two values in far-apart buckets the exact
// median is their midpoint, in no bucket either value occupies; interpolating
// between the two representatives keeps the relative bound.
func TestQuantileTinyFarApart(t *testing.T) {
	var h Histogram
	h.Record(100)
	h.Record(1e6)
	for _, q := range []float64{0.1, 0.5, 0.9} {
		got, want := h.Quantile(q), exactQuantile([]float64{100, 1e6}, q)
		if math.Abs(got-want) > RelativeError*want {
			t.Fatalf("q=%v: %v, want %v ± %v", q, got, want, RelativeError*want)
		}
	}
	h.Reset()
	for _, v := range []float64{150, 5000, 7e4} {
		h.Record(v)
	}
	if got, want := h.Quantile(0.5), BucketValue(BucketIndex(5000)); got != want {
		t.Fatalf("median of 3 = %v, want bucket value %v", got, want)
	}
}

func TestMergeEqualsSingle(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, vals := genValues(t)
		parts := rapid.IntRange(1, 4).Draw(t, "parts")
		hs := make([]Histogram, parts)
		var all Histogram
		r := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "split"), 1))
		for _, v := range vals {
			all.Record(v)
			hs[r.IntN(parts)].Record(v)
		}
		var m Histogram
		if rapid.Bool().Draw(t, "merge into first") {
			m = hs[0].Clone()
			hs = hs[1:]
		}
		for i := range hs {
			m.Merge(&hs[i])
		}
		if m.Count() != all.Count() || m.ZeroCount() != all.ZeroCount() || m.Min() != all.Min() || m.Max() != all.Max() {
			t.Fatalf("merged Count/Zero/Min/Max %d %d %v %v, single %d %d %v %v", m.Count(), m.ZeroCount(), m.Min(), m.Max(), all.Count(), all.ZeroCount(), all.Min(), all.Max())
		}
		if math.Abs(m.Sum()-all.Sum()) > 1e-9*all.Sum() {
			t.Fatalf("merged Sum %v, single %v", m.Sum(), all.Sum())
		}
		mi, mc := m.Sparse()
		ai, ac := all.Sparse()
		if !slices.Equal(mi, ai) || !slices.Equal(mc, ac) {
			t.Fatalf("merged buckets %v %v, single %v %v", mi, mc, ai, ac)
		}
		for _, q := range testQuantiles {
			if got, want := m.Quantile(q), all.Quantile(q); got != want {
				t.Fatalf("q=%v: merged %v, single %v", q, got, want)
			}
		}
	})
}

func TestMergeSelf(t *testing.T) {
	var h Histogram
	for _, v := range []float64{0, 5, 500, 5e4} {
		h.Record(v)
	}
	h.Merge(&h)
	if got, want := h.Count(), uint64(8); got != want {
		t.Fatalf("Count = %d, want %d", got, want)
	}
	if _, c := h.Sparse(); !slices.Equal(c, []uint64{2, 2, 2}) {
		t.Fatalf("counts %v", c)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, vals := genValues(t)
		var h Histogram
		for _, v := range vals {
			h.Record(v)
		}
		b := h.AppendBinary([]byte{0xee})
		trailer := rapid.SliceOfN(rapid.Byte(), 0, 4).Draw(t, "trailer")
		b = append(b, trailer...)
		got, n, err := DecodeBinary(b[1:], 0)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if n != len(b)-1-len(trailer) {
			t.Fatalf("consumed %d of %d", n, len(b)-1-len(trailer))
		}
		if !got.Equal(&h) {
			t.Fatalf("round trip differs")
		}
		for _, q := range testQuantiles {
			if a, b := got.Quantile(q), h.Quantile(q); a != b {
				t.Fatalf("q=%v: decoded %v, original %v", q, a, b)
			}
		}
		idx, counts := h.Sparse()
		fs, err := FromSparse(h.ZeroCount(), idx, counts, h.Sum(), h.Min(), h.Max())
		if err != nil {
			t.Fatalf("FromSparse: %v", err)
		}
		if !fs.Equal(&h) {
			t.Fatal("FromSparse(Sparse) differs")
		}
		// Every strict prefix is rejected as truncated.
		enc := b[1 : 1+n]
		for i := range len(enc) {
			if _, _, err := DecodeBinary(enc[:i], 0); !errors.Is(err, ErrTruncated) {
				t.Fatalf("prefix %d of %d: err %v, want ErrTruncated", i, len(enc), err)
			}
		}
	})
}

func TestEncodeLayout(t *testing.T) {
	var h Histogram
	h.Record(0)
	h.Record(100)                      // index 212
	h.Record(LowerBound(214) * 1.0001) // 214: one empty bucket bridged
	h.Record(1000)                     // 318: a gap
	got := h.AppendBinary(nil)
	want := []byte{
		1,          // zero
		4,          // slots: 212, (213), 214, 318
		0xa8, 0x03, // first index 212, zig-zag
		3, 1, 0, 1, // run of 3
		103,  // gap: 215..317
		1, 1, // run of 1
	}
	if !slices.Equal(got[:len(want)], want) {
		t.Fatalf("encoding % x, want prefix % x", got, want)
	}
	// 100 is integral: its floatvar is short.
	if n := len(got) - len(want); n > 3+3+10 {
		t.Fatalf("sum/min/max take %d bytes", n)
	}
}

func TestDecodeErrors(t *testing.T) {
	valid := func() Histogram {
		var h Histogram
		h.Record(100)
		h.Record(200)
		return h
	}()
	enc := valid.AppendBinary(nil)
	f := func(v float64) []byte { return appendFloat(nil, v) }
	cat := func(parts ...[]byte) []byte { return slices.Concat(parts...) }
	i100, i200 := BucketIndex(100), BucketIndex(200)
	for _, tc := range []struct {
		name string
		in   []byte
		max  int
		is   error
		msg  string
	}{
		{"varint overflow", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 0, ErrInvalid, "hist: zero: varint overflows 64 bits"},
		{"slots beyond range", cat([]byte{0}, appendUvarint(nil, uint64(NumIndexes)+1)), 0, ErrInvalid, "hist: buckets: 1281 slots exceed the 1280 indexes"},
		{"first index negative", cat([]byte{0, 1}, appendVarint(nil, -1), []byte{1, 1}), 0, ErrInvalid, "hist: index: first index -1 outside [0, 1279]"},
		{"first index too high", cat([]byte{0, 1}, appendVarint(nil, int64(MaxIndex)+1), []byte{1, 1}), 0, ErrInvalid, "hist: index: first index 1280 outside [0, 1279]"},
		{"run too long", cat([]byte{0, 1}, appendVarint(nil, 10), []byte{2, 1, 1}), 0, ErrInvalid, "hist: buckets: run of 2 exceeds the 1 slots left"},
		{"empty run", cat([]byte{0, 1}, appendVarint(nil, 10), []byte{0, 1}), 0, ErrInvalid, "hist: buckets: empty run"},
		{"run past max", cat([]byte{0, 2}, appendVarint(nil, int64(MaxIndex)), []byte{2, 1, 1}), 0, ErrInvalid, "hist: index: run ends at 1280 beyond 1279"},
		{"zero gap", cat([]byte{0, 2}, appendVarint(nil, 10), []byte{1, 1, 0, 1, 1}), 0, ErrInvalid, "hist: buckets: gap of 0 between runs"},
		{"gap past max", cat([]byte{0, 2}, appendVarint(nil, 10), []byte{1, 1}, appendUvarint(nil, 5000), []byte{1, 1}), 0, ErrInvalid, "hist: index: gap of 5000 after index 10 goes beyond 1279"},
		{"run starts empty", cat([]byte{0, 2}, appendVarint(nil, 10), []byte{2, 0, 1}), 0, ErrInvalid, "hist: count: run at index 10 starts or ends with an empty bucket"},
		{"too many buckets", cat([]byte{0, 3}, appendVarint(nil, 10), []byte{3, 1, 1, 1}), 2, ErrLimit, "hist: buckets: more than 2 non-empty buckets"},
		{"count overflow", cat([]byte{0, 2}, appendVarint(nil, 10), []byte{2}, appendUvarint(nil, math.MaxUint64), []byte{1}), 0, ErrInvalid, "hist: count: total count overflows uint64"},
		{"zero+count overflow", cat(appendUvarint(nil, math.MaxUint64), []byte{1}, appendVarint(nil, 10), []byte{1, 1}), 0, ErrInvalid, "hist: count: total count overflows uint64"},
		{"nan sum", cat([]byte{0, 2}, appendVarint(nil, int64(i100)), []byte{1, 1, byte(i200 - i100 - 1), 1, 1}, f(math.NaN()), f(100), f(200)), 0, ErrInvalid, "hist: sum: not a finite non-negative number"},
		{"negative min", cat([]byte{0, 2}, appendVarint(nil, int64(i100)), []byte{1, 1, byte(i200 - i100 - 1), 1, 1}, f(300), f(-1), f(200)), 0, ErrInvalid, "hist: min: not a finite non-negative number"},
		{"inf max", cat([]byte{0, 2}, appendVarint(nil, int64(i100)), []byte{1, 1, byte(i200 - i100 - 1), 1, 1}, f(300), f(100), f(math.Inf(1))), 0, ErrInvalid, "hist: max: not a finite non-negative number"},
		{"min above max", cat([]byte{0, 2}, appendVarint(nil, int64(i100)), []byte{1, 1, byte(i200 - i100 - 1), 1, 1}, f(300), f(200), f(100)), 0, ErrInvalid, "hist: min: above max"},
		{"min outside lowest bucket", cat([]byte{0, 2}, appendVarint(nil, int64(i100)), []byte{1, 1, byte(i200 - i100 - 1), 1, 1}, f(300), f(150), f(200)), 0, ErrInvalid, "hist: min: not in the lowest non-empty bucket"},
		{"max outside highest bucket", cat([]byte{0, 2}, appendVarint(nil, int64(i100)), []byte{1, 1, byte(i200 - i100 - 1), 1, 1}, f(300), f(100), f(250)), 0, ErrInvalid, "hist: max: not in the highest non-empty bucket"},
		{"zero bucket but min high", cat([]byte{1, 0}, f(5), f(5), f(5)), 0, ErrInvalid, "hist: min: not in the lowest non-empty bucket"},
		{"truncated float", cat([]byte{1, 0}, f(0), f(0)), 0, ErrTruncated, "hist: max: truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := DecodeBinary(tc.in, tc.max)
			if !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			if got := err.Error(); got != tc.msg {
				t.Fatalf("err = %q, want %q", got, tc.msg)
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("err %T is not *DecodeError", err)
			}
		})
	}
	if _, _, err := DecodeBinary(enc, 2); err != nil {
		t.Fatalf("valid input at the bucket limit: %v", err)
	}
}

func TestFromSparseErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		index  []int32
		counts []uint64
		msg    string
	}{
		{"lengths", []int32{1}, nil, "hist: buckets: index and counts lengths differ (1 vs 0)"},
		{"range", []int32{MaxIndex + 1}, []uint64{1}, "hist: buckets: index 1280 outside [0, 1279]"},
		{"order", []int32{5, 5}, []uint64{1, 1}, "hist: buckets: index 5 not above previous 5"},
	} {
		if _, err := FromSparse(0, tc.index, tc.counts, 1, 2, 2); err == nil || err.Error() != tc.msg || !errors.Is(err, ErrInvalid) {
			t.Fatalf("%s: err = %v, want %q", tc.name, err, tc.msg)
		}
	}
	// Empty buckets are skipped, even outside the non-empty range.
	h, err := FromSparse(0, []int32{3, 10, 20}, []uint64{0, 2, 0}, 2*LowerBound(11), LowerBound(11), LowerBound(11))
	if err != nil {
		t.Fatal(err)
	}
	if idx := mustSparse(&h); !slices.Equal(idx, []int32{10}) {
		t.Fatalf("buckets %v", idx)
	}
}

func BenchmarkRecord(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	vals := make([]float64, 4096)
	for i := range vals {
		vals[i] = 2e4 * math.Exp(0.8*r.NormFloat64())
	}
	var h Histogram
	for _, v := range vals {
		h.Record(v)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := cpubench.Now()
	for i := 0; b.Loop(); i++ {
		h.Record(vals[i&4095])
	}
	cpubench.Report(b, start, 0)
}

func benchHist(n int, seed uint64) Histogram {
	r := rand.New(rand.NewPCG(seed, 6))
	var h Histogram
	for range n {
		if r.IntN(10) == 0 {
			h.Record(0)
		} else {
			h.Record(2e4 * math.Exp(0.5*r.NormFloat64()))
		}
	}
	return h
}

func BenchmarkMerge(b *testing.B) {
	src := benchHist(500, 1)
	var dst Histogram
	dst.Merge(&src)
	b.ReportAllocs()
	start := cpubench.Now()
	for b.Loop() {
		dst.Merge(&src)
	}
	b.ReportMetric(float64(src.NumBuckets()), "buckets")
	cpubench.Report(b, start, 0)
}

func BenchmarkQuantile(b *testing.B) {
	h := benchHist(500, 2)
	b.ReportAllocs()
	start := cpubench.Now()
	for b.Loop() {
		h.Quantile(0.99)
	}
	cpubench.Report(b, start, 0)
}

func BenchmarkAppendBinary(b *testing.B) {
	h := benchHist(500, 3)
	buf := h.AppendBinary(nil)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	start := cpubench.Now()
	for b.Loop() {
		buf = h.AppendBinary(buf[:0])
	}
	b.ReportMetric(float64(len(buf)), "bytes")
	b.ReportMetric(float64(h.NumBuckets()), "buckets")
	cpubench.Report(b, start, len(buf))
}

// BenchmarkDecodeBinary decodes a histogram ("decode") and checks it
// without building it ("check", CheckBinary: what a collector storing it as
// received does).
func BenchmarkDecodeBinary(b *testing.B) {
	h := benchHist(500, 3)
	buf := h.AppendBinary(nil)
	for _, mode := range []struct {
		name   string
		decode func() error
	}{
		{"decode", func() error { _, _, err := DecodeBinary(buf, 0); return err }},
		{"check", func() error { _, err := CheckBinary(buf, 0); return err }},
	} {
		b.Run(mode.name, func(b *testing.B) {
			cpubench.Loop(b, len(buf), mode.decode)
		})
	}
}

// FuzzDecodeBinary: no input panics, and whatever decodes re-encodes to an
// encoding that decodes to the same histogram.
func FuzzDecodeBinary(f *testing.F) {
	for _, n := range []int{0, 1, 500} {
		h := benchHist(n, 9)
		f.Add(h.AppendBinary(nil))
	}
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, n, err := DecodeBinary(data, 0)
		// CheckBinary agrees with DecodeBinary on every input, with a
		// bucket limit or without.
		for _, max := range []int{0, 2} {
			_, dn, derr := DecodeBinary(data, max)
			cn, cerr := CheckBinary(data, max)
			if cn != dn || fmt.Sprint(cerr) != fmt.Sprint(derr) {
				t.Fatalf("max %d: CheckBinary = %d, %v; DecodeBinary = %d, %v", max, cn, cerr, dn, derr)
			}
		}
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || de.Err == nil {
				t.Fatalf("error %#v is not a *DecodeError with a sentinel", err)
			}
			return
		}
		if n < 2 || n > len(data) {
			t.Fatalf("consumed %d of %d", n, len(data))
		}
		enc := h.AppendBinary(nil)
		h2, n2, err := DecodeBinary(enc, 0)
		if err != nil || n2 != len(enc) || !h2.Equal(&h) {
			t.Fatalf("re-encoding does not decode to the same histogram: %v", err)
		}
		for _, q := range testQuantiles {
			if v := h.Quantile(q); v < h.Min() || v > h.Max() {
				t.Fatalf("Quantile(%v) = %v outside [%v, %v]", q, v, h.Min(), h.Max())
			}
		}
	})
}

// walkBoth reads runs both ways, the checking pass (fill nil: one-byte runs
// summed at once, sumRun) and the filling one (count by count), and fails
// t unless they agree on the result, the error and where they stop.
func walkBoth(t *testing.T, src []byte, first int32, slots, maxBuckets int) {
	t.Helper()
	p1, p2 := 0, 0
	l1, t1, e1 := walkRuns(src, &p1, first, slots, maxBuckets, nil)
	l2, t2, e2 := walkRuns(src, &p2, first, slots, maxBuckets, make([]uint64, NumIndexes))
	if l1 != l2 || t1 != t2 || fmt.Sprint(e1) != fmt.Sprint(e2) || e1 == nil && p1 != p2 {
		t.Fatalf("runs %x (first %d, %d slots, max %d): checking %d, %d, %v at %d; filling %d, %d, %v at %d",
			src, first, slots, maxBuckets, l1, t1, e1, p1, l2, t2, e2, p2)
	}
}

// TestWalkRunsChecksAsItFills: the checking pass accepts and refuses runs
// exactly as the count-by-count reading does, on runs mostly valid and
// broken in every way a run can be (empty ends, zero counts inside,
// multi-byte and huge counts, the bucket limit, truncation).
func TestWalkRunsChecksAsItFills(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	count := func() []byte {
		switch k := rng.IntN(20); {
		case k == 0:
			return []byte{0}
		case k == 1:
			return binary.AppendUvarint(nil, uint64(128+rng.IntN(100000)))
		case k == 2:
			return binary.AppendUvarint(nil, math.MaxUint64-uint64(rng.IntN(3)))
		default:
			return []byte{byte(1 + rng.IntN(127))}
		}
	}
	for range 20000 {
		var src []byte
		slots := 0
		for runs := 1 + rng.IntN(4); runs > 0; runs-- {
			n := 1 + rng.IntN(40)
			src = binary.AppendUvarint(src, uint64(n))
			for range n {
				src = append(src, count()...)
			}
			slots += n
			src = binary.AppendUvarint(src, uint64(1+rng.IntN(5))) // the gap (after the last run: trailing bytes)
		}
		if rng.IntN(10) == 0 {
			src = src[:rng.IntN(len(src))]
		}
		slots = max(1, slots+rng.IntN(3)-1)
		first := MinIndex + int32(rng.IntN(NumIndexes))
		walkBoth(t, src, first, slots, rng.IntN(3)*rng.IntN(60))
	}
}

// TestCheckRunsFast: runs of one-byte lengths, counts and gaps (what
// checkRunsFast takes) are accepted and refused as the count-by-count
// reading does, whole and with a byte changed, cut or the slots miscounted;
// and the fast way takes every valid one (it is the one that runs).
func TestCheckRunsFast(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		var src []byte
		slots, nonEmpty := 0, 0
		for runs := 1 + rng.IntN(30); runs > 0; runs-- {
			n := 1 + rng.IntN(6)
			src = append(src, byte(n))
			for k := range n {
				c := byte(rng.IntN(128))
				if k == 0 || k == n-1 {
					c = byte(1 + rng.IntN(127))
				}
				if c != 0 {
					nonEmpty++
				}
				src = append(src, c)
			}
			slots += n
			src = append(src, byte(1+rng.IntN(3))) // the gap (after the last run: a trailing byte)
		}
		first := MinIndex + int32(rng.IntN(NumIndexes-300))                          // the runs and gaps span at most 270 indexes
		maxBuckets := [...]int{0, nonEmpty - 1, nonEmpty, nonEmpty + 1}[rng.IntN(4)] // the bucket limit, at its edge
		_, _, _, ok := checkRunsFast(src, 0, first, slots, maxBuckets)
		if valid := maxBuckets == 0 || nonEmpty <= maxBuckets; ok != valid {
			t.Fatalf("runs %x (first %d, %d slots, max %d, %d non-empty): the fast way says %v", src, first, slots, maxBuckets, nonEmpty, ok)
		}
		walkBoth(t, src, first, slots, maxBuckets)
		broken := bytes.Clone(src)
		switch rng.IntN(4) {
		case 0:
			broken[rng.IntN(len(broken))] = 0
		case 1:
			broken[rng.IntN(len(broken))] = byte(0x80 + rng.IntN(0x80))
		case 2:
			broken = broken[:rng.IntN(len(broken))]
		case 3:
			slots = max(1, slots+rng.IntN(5)-2)
		}
		walkBoth(t, broken, first, slots, maxBuckets)
		walkBoth(t, src, MaxIndex-int32(rng.IntN(300)), slots, 0) // runs past MaxIndex
	}
}

// FuzzWalkRuns: the same on any bytes.
func FuzzWalkRuns(f *testing.F) {
	f.Add([]byte{3, 1, 2, 3}, int32(0), uint16(3), uint8(0))
	f.Add([]byte{2, 1, 0x80, 1, 2, 1, 5}, int32(-10), uint16(3), uint8(2))
	f.Fuzz(func(t *testing.T, src []byte, first int32, slots uint16, maxBuckets uint8) {
		first = MinIndex + int32(uint32(first)%uint32(NumIndexes))
		walkBoth(t, src, first, 1+int(slots)%NumIndexes, int(maxBuckets))
	})
}
