//go:build unix

package meter

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

func reportCPU(b *testing.B, start time.Duration, perOp float64) {
	if d := processCPU() - start; d > 0 {
		b.ReportMetric(float64(d.Nanoseconds())/float64(b.N)*perOp, "cpu-ns/op")
	}
}
