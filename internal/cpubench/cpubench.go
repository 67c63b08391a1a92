// Package cpubench lets benchmarks report CPU time per op next to wall time.
// The machines they run on are shared (2 cores, CI and neighbours), so wall
// time per op also measures the neighbours; the process's CPU time does not.
package cpubench

import (
	"testing"
	"time"
)

// Report adds cpu-ns/op (process CPU time since start, per b.N) to b's
// results and, with bytes > 0 per op, cpu-MB/s. It reports nothing where the
// platform gives no CPU time.
func Report(b *testing.B, start time.Duration, bytes int) {
	d := Now() - start
	if d <= 0 {
		return
	}
	ns := float64(d.Nanoseconds()) / float64(b.N)
	b.ReportMetric(ns, "cpu-ns/op")
	if bytes > 0 {
		b.ReportMetric(float64(bytes)/ns*1e3, "cpu-MB/s")
	}
}

// Loop runs op b.N times over an input of bytes, with allocations, MB/s
// and the CPU time per op reported; an error fails the benchmark.
func Loop(b *testing.B, bytes int, op func() error) {
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	start := Now()
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	Report(b, start, bytes)
}
