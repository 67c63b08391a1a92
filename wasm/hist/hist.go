// Package hist implements the gap histogram shared by the browser module, the
// collector and the gate: a base-2 exponential histogram at one fixed scale
// (OpenTelemetry's exponential histogram layout), values in microseconds.
//
// Bucket i covers (base^i, base^(i+1)] with base = 2^(2^-Scale). Values at or
// below ZeroThresholdMicros are counted in a separate zero bucket (gaps under
// the timer floor). Because the scale is fixed, histograms from every browser
// merge by adding counts per index, in Go (Merge) and in ClickHouse (sumMap).
//
// The zero value is an empty, usable histogram. A Histogram is not safe for
// concurrent use.
package hist

// Scale is the fixed OpenTelemetry exponential-histogram scale. At scale 5 the
// relative error of a quantile read from a bucket is at most 2^(2^-5)-1 ≈ 2.19 %.
const Scale = 5

// ZeroThresholdMicros: values <= this many microseconds go to the zero bucket.
const ZeroThresholdMicros = 1.0

// RelativeError is the largest relative error of Quantile against the exact
// quantile of the recorded values.
const RelativeError = 0.0219

// Histogram — contract (implementation in progress):
//
//	func (h *Histogram) Record(us float64)                 // one value, microseconds; negative/NaN ignored
//	func (h *Histogram) RecordN(us float64, n uint64)
//	func (h *Histogram) Merge(o *Histogram)
//	func (h *Histogram) Count() uint64                     // including zero bucket
//	func (h *Histogram) ZeroCount() uint64
//	func (h *Histogram) Sum() float64                      // exact sum of recorded values
//	func (h *Histogram) Min() float64; Max() float64       // exact
//	func (h *Histogram) Quantile(q float64) float64        // q in [0,1]; 0 for an empty histogram
//	func (h *Histogram) Buckets(fn func(index int32, count uint64)) // ascending index, non-zero only
//	func (h *Histogram) Sparse() (index []int32, counts []uint64)   // for ClickHouse sumMap columns
//	func FromSparse(zero uint64, index []int32, counts []uint64, sum, min, max float64) (Histogram, error)
//	func (h *Histogram) AppendBinary(dst []byte) []byte    // compact sparse encoding
//	func DecodeBinary(src []byte, maxBuckets int) (Histogram, int, error) // returns bytes consumed
//	func (h *Histogram) Reset()
type Histogram struct{}
