package benchreport

import (
	"context"
	"errors"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"golang.org/x/sys/unix"

	"github.com/itlmon/itlmon/collector/internal/itlmontest"
)

// cpuTimes is the CPU time spent so far by this test process (the
// collector, in process; the ingest report's load clients run in a
// process of their own) and by the engine's process; after is the part of
// engine spent once a phase had ended, until its merges did (phaseCPU);
// inserts is the part of engine the server reported for the phase's
// inserts themselves (their ProfileEvents: the rest is the merges of the
// parts they wrote, and the engine's other work meanwhile).
type cpuTimes struct{ self, engine, after, inserts time.Duration }

func cpuNow(t testing.TB, enginePID int) cpuTimes {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return cpuTimes{self: self, engine: time.Duration(procCPU(enginePID) * float64(time.Second))}
}

// minorFaults is this process's minor page faults so far: first touches of
// memory the kernel maps in.
func minorFaults(t testing.TB) int64 {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Minflt
}

func (c cpuTimes) sub(d cpuTimes) cpuTimes {
	return cpuTimes{c.self - d.self, c.engine - d.engine, c.after - d.after, c.inserts - d.inserts}
}
func (c cpuTimes) add(d cpuTimes) cpuTimes {
	return cpuTimes{c.self + d.self, c.engine + d.engine, c.after + d.after, c.inserts + d.inserts}
}

// quiesce waits (at most a minute) until the engine runs no merge and no
// mutation, so each timed phase starts from the same quiet state instead of
// paying for the previous phase's parts.
func quiesce(t testing.TB, conn driver.Conn) {
	t.Helper()
	itlmontest.Settle(t, time.Minute, func() bool {
		var n uint64
		return conn.QueryRow(context.Background(), "SELECT (SELECT count() FROM system.merges) + (SELECT count() FROM system.mutations WHERE NOT is_done)").Scan(&n) == nil && n == 0
	})
}

// compact merges table's parts into one per partition (OPTIMIZE FINAL
// returns once it has): a phase inserting into it then pays the merges of
// its own parts, as the phase it is compared with does, not those earlier
// phases left.
func compact(t testing.TB, conn driver.Conn, table string) {
	t.Helper()
	if err := conn.Exec(context.Background(), "OPTIMIZE TABLE "+table+" FINAL"); err != nil {
		t.Fatalf("optimize %s: %v", table, err)
	}
}

// phaseCPU is what a timed phase that began at cpu0 and just ended cost:
// this process's part ends now, with its last ack or insert (later, the
// promoter would count); the engine's with the merges of the phase's parts.
func phaseCPU(t testing.TB, conn driver.Conn, enginePID int, cpu0 cpuTimes) cpuTimes {
	t.Helper()
	end := cpuNow(t, enginePID)
	quiesce(t, conn)
	c := cpuNow(t, enginePID).sub(cpu0)
	c.self = end.self - cpu0.self
	c.after = c.engine - (end.engine - cpu0.engine)
	return c
}

// cpuSplit places the collector and the engine on separate CPUs, as they
// run in production (on separate machines): this test process (the
// collector or the direct insert's client) on the
// first CPU it may use, the engine's process on the others. ok is false
// with fewer than two CPUs allowed.
type cpuSplit struct {
	all, self, engine unix.CPUSet
	ok                bool
}

func newCPUSplit(t testing.TB) cpuSplit {
	t.Helper()
	var s cpuSplit
	if err := unix.SchedGetaffinity(0, &s.all); err != nil {
		t.Fatal(err)
	}
	if s.all.Count() < 2 {
		return s
	}
	for c := 0; c < 1024; c++ {
		switch {
		case !s.all.IsSet(c):
		case s.self.Count() == 0:
			s.self.Set(c)
		default:
			s.engine.Set(c)
		}
	}
	s.ok = true
	return s
}

// pin puts this process on s.self and the engine on s.engine; unpin gives
// both every CPU back.
func (s cpuSplit) pin(t testing.TB, enginePID int) {
	t.Helper()
	setAffinity(t, os.Getpid(), &s.self)
	setAffinity(t, enginePID, &s.engine)
}

func (s cpuSplit) unpin(t testing.TB, enginePID int) {
	t.Helper()
	setAffinity(t, os.Getpid(), &s.all)
	setAffinity(t, enginePID, &s.all)
}

// setAffinity sets the CPU affinity of every thread of process pid (threads
// it starts later inherit their creator's).
func setAffinity(t testing.TB, pid int, set *unix.CPUSet) {
	t.Helper()
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		// A thread may end meanwhile (ESRCH): nothing to pin.
		if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
			t.Fatalf("set the CPU affinity of thread %d of process %d: %v", tid, pid, err)
		}
	}
}
