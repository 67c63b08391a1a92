package query

import (
	"encoding/json"
	"math"
	"time"
)

// JSON carries durations as milliseconds (floats, microsecond precision), the
// unit dashboards and CI tooling read without conversion.

func jsonMs(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// MarshalJSON writes the distribution in milliseconds.
func (d Dist) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Count uint64  `json:"count"`
		Mean  float64 `json:"mean_ms"`
		P50   float64 `json:"p50_ms"`
		P95   float64 `json:"p95_ms"`
		P99   float64 `json:"p99_ms"`
		Max   float64 `json:"max_ms"`
	}{d.Count, jsonMs(d.Mean), jsonMs(d.P50), jsonMs(d.P95), jsonMs(d.P99), jsonMs(d.Max)})
}

// MarshalJSON writes TPOT in milliseconds.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report
	return json.Marshal(struct {
		plain
		TPOTP50 float64 `json:"tpot_p50_ms"`
	}{plain(r), jsonMs(r.TPOTP50)})
}

// MarshalJSON writes the point's times in milliseconds.
func (p Point) MarshalJSON() ([]byte, error) {
	type plain Point
	return json.Marshal(struct {
		plain
		TTFTP50 float64 `json:"ttft_p50_ms"`
		TTFTP95 float64 `json:"ttft_p95_ms"`
		ITLP50  float64 `json:"itl_p50_ms"`
		ITLP95  float64 `json:"itl_p95_ms"`
		ITLP99  float64 `json:"itl_p99_ms"`
	}{plain(p), jsonMs(p.TTFTP50), jsonMs(p.TTFTP95), jsonMs(p.ITLP50), jsonMs(p.ITLP95), jsonMs(p.ITLP99)})
}
