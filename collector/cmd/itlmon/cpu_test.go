package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// cpuTimes is the CPU time spent so far by this test process (the
// collector, in process, and the benchmark's clients) and by the engine's
// process.
type cpuTimes struct{ self, engine time.Duration }

func cpuNow(t testing.TB, enginePID int) cpuTimes {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return cpuTimes{self: self, engine: time.Duration(procCPU(enginePID) * float64(time.Second))}
}

func (c cpuTimes) sub(d cpuTimes) cpuTimes { return cpuTimes{c.self - d.self, c.engine - d.engine} }

// quiesce waits (at most a minute) until the engine runs no merge and no
// mutation, so each timed phase starts from the same quiet state instead of
// paying for the previous phase's parts.
func quiesce(t testing.TB, conn driver.Conn) {
	t.Helper()
	settle(t, time.Minute, func() bool {
		var n uint64
		return conn.QueryRow(context.Background(), "SELECT (SELECT count() FROM system.merges) + (SELECT count() FROM system.mutations WHERE NOT is_done)").Scan(&n) == nil && n == 0
	})
}
