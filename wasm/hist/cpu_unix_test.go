//go:build unix

package hist

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the process's user+system CPU time. Benchmarks report
// cpu-ns/op next to ns/op because the machine they run on is shared: wall
// time per op then measures the neighbours too.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports cpu-ns/op since start and, with bytes > 0, the
// throughput on CPU time (cpu-MB/s).
func reportCPU(b *testing.B, start time.Duration, bytes int) {
	d := processCPU() - start
	if d <= 0 {
		return
	}
	ns := float64(d.Nanoseconds()) / float64(b.N)
	b.ReportMetric(ns, "cpu-ns/op")
	if bytes > 0 {
		b.ReportMetric(float64(bytes)/ns*1e3, "cpu-MB/s")
	}
}
