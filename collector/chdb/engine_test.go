package chdb_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/itlmon/itlmon/collector/chdb"
)

func TestMain(m *testing.M) {
	chdb.MaybeRunChild()
	if dir := os.Getenv("ITLMON_CHDB_TEST_PARENT"); dir != "" {
		runParent(dir)
	}
	os.Exit(m.Run())
}

// runParent starts an engine, prints its pid and waits to be killed: the
// collector side of TestChildDiesWithParent.
func runParent(dir string) {
	e, err := chdb.Start(context.Background(), chdb.Options{Dir: dir})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Printf("pid=%d\n", e.PID())
	select {}
}

// TestChildDiesWithParent: a collector killed with SIGKILL (no Close) takes
// its engine with it, so no orphan keeps the ports and the data directory.
func TestChildDiesWithParent(t *testing.T) {
	libPath(t)
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), "ITLMON_CHDB_TEST_PARENT="+t.TempDir())
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	defer parent.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("parent output: %q, %v", line, err)
	}
	var pid int
	if _, err := fmt.Sscanf(line, "pid=%d", &pid); err != nil {
		t.Fatalf("parent said %q", line)
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	parent.Wait()
	// The engine is not our child: wait for its exit on a pidfd, which
	// becomes readable when the process ends.
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return // gone already
	} else if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 30_000)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll pidfd: %v", err)
		}
		if n == 0 {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("engine %d still running 30 s after its parent was killed", pid)
		}
		return
	}
}

// libPath returns the engine library, skipping the test when it is missing
// unless ITLMON_REQUIRE_REAL=1.
func libPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("CHDB_LIB_PATH")
	if _, err := os.Stat(p); p == "" || err != nil {
		if os.Getenv("ITLMON_REQUIRE_REAL") == "1" {
			t.Fatalf("CHDB_LIB_PATH=%q: real ClickHouse engine required", p)
		}
		t.Skip("CHDB_LIB_PATH not set or missing; skipping real-engine test")
	}
	return p
}

func connect(t *testing.T, e *chdb.Engine) clickhouse.Conn {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:        []string{e.NativeAddr()},
		DialContext: e.DialContext,
		DialTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func count(t *testing.T, ctx context.Context, conn clickhouse.Conn) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM persist_test").Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

// readyCount waits until the engine is up (it may be restarting) and counts.
func readyCount(t *testing.T, ctx context.Context, e *chdb.Engine, conn clickhouse.Conn) uint64 {
	t.Helper()
	if err := e.Ready(ctx); err != nil {
		t.Fatalf("ready: %v", err)
	}
	return count(t, ctx, conn)
}

func TestEngineLifecycle(t *testing.T) {
	lib := libPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var died syncBuffer
	log := zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), &died))

	began := time.Now()
	e, err := chdb.Start(ctx, chdb.Options{LibPath: lib, Dir: dir, Logger: log})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	t.Logf("engine ready in %v on native %s http %s", time.Since(began), e.NativeAddr(), e.HTTPAddr())
	if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", e.PID())); err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "VmRSS") {
				t.Logf("engine %s", line)
			}
		}
	}

	conn := connect(t, e)
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS persist_test (x UInt64) ENGINE = MergeTree ORDER BY x",
		"INSERT INTO persist_test SELECT number FROM numbers(1000)",
	} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if got, want := count(t, ctx, conn), uint64(1000); got != want {
		t.Fatalf("count = %d, want %d", got, want)
	}

	// An outage on purpose: the engine stays down until Restart.
	if err := e.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatalf("ping after Stop succeeded, want an error")
	}
	began = time.Now()
	if err := e.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Logf("restarted in %v", time.Since(began))
	if got, want := readyCount(t, ctx, e, conn), uint64(1000); got != want {
		t.Fatalf("count after restart = %d, want %d", got, want)
	}

	// A crash: the supervisor brings it back by itself.
	if err := e.Kill(); err != nil { // returns with the engine down
		t.Fatalf("kill: %v", err)
	}
	if pid := e.PID(); pid != 0 {
		t.Fatalf("PID after Kill = %d, want 0 (down)", pid)
	}
	if got, want := readyCount(t, ctx, e, conn), uint64(1000); got != want {
		t.Fatalf("count after crash = %d, want %d", got, want)
	}

	// An engine that aborts by itself: the supervisor's entry carries what
	// the engine logged of its end (the signal and its stack), read from
	// its own log.
	died.Reset()
	if err := syscall.Kill(e.PID(), syscall.SIGABRT); err != nil {
		t.Fatalf("SIGABRT: %v", err)
	}
	entry, err := died.WaitFor(ctx, `"message":"clickhouse engine died"`)
	if err != nil {
		t.Fatalf("no entry for the aborted engine: %v", err)
	}
	if got, want := readyCount(t, ctx, e, conn), uint64(1000); got != want {
		t.Fatalf("count after abort = %d, want %d", got, want)
	}
	if !strings.Contains(entry, `"message":"clickhouse engine died"`) || !strings.Contains(entry, "Received signal") ||
		!strings.Contains(entry, filepath.Join(dir, "engine.log")) {
		t.Fatalf("the supervisor's entry on an abort lacks the engine's own report: %s", entry)
	}

	if err := e.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := e.Ready(ctx); err != chdb.ErrClosed {
		t.Fatalf("Ready after Close = %v, want ErrClosed", err)
	}

	// A new engine on the same directory (the collector restarted).
	e2, err := chdb.Start(ctx, chdb.Options{LibPath: lib, Dir: dir, Logger: log})
	if err != nil {
		t.Fatalf("start again: %v", err)
	}
	defer e2.Close(context.Background())
	if got, want := readyCount(t, ctx, e2, connect(t, e2)), uint64(1000); got != want {
		t.Fatalf("count in a new engine = %d, want %d", got, want)
	}
}

func TestStartErrors(t *testing.T) {
	tests := []struct {
		name string
		opts chdb.Options
	}{
		{"missing library", chdb.Options{LibPath: "/nonexistent/libchdb.so", Dir: t.TempDir()}},
		{"no data dir", chdb.Options{LibPath: os.Args[0]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := chdb.Start(context.Background(), tt.opts); err == nil {
				t.Fatalf("Start succeeded, want an error")
			}
		})
	}
}

// TestBusyPort: a taken port makes the engine print an error and exit 0; Start
// notices it never answered and retries on fresh ports.
func TestBusyPort(t *testing.T) {
	lib := libPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	e, err := chdb.Start(ctx, chdb.Options{LibPath: lib, Dir: t.TempDir(), NativePort: port, HTTPPort: port,
		Logger: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatalf("start with a busy port: %v", err)
	}
	defer e.Close(ctx)
	if got := e.NativeAddr(); got == taken.Addr().String() {
		t.Fatalf("NativeAddr = %s, the busy port", got)
	}
	if err := connect(t, e).Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
}

// TestDedupGhostRepaired: a block id the engine recorded in a table's
// deduplication log without its part (what a kill between the record and
// the part's rename leaves, made here by removing the part while the engine
// is down) would drop every retry with that token as a duplicate; the
// engine's next launch drops the id, and the retry is stored.
func TestDedupGhostRepaired(t *testing.T) {
	lib := libPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e, err := chdb.Start(ctx, chdb.Options{LibPath: lib, Dir: t.TempDir(), Logger: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	conn := connect(t, e)
	if err := conn.Exec(ctx, "CREATE TABLE ghost_test (x UInt32) ENGINE = MergeTree ORDER BY x SETTINGS non_replicated_deduplication_window = 100"); err != nil {
		t.Fatal(err)
	}
	insert := func() {
		t.Helper()
		tctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_deduplication_token": "window-1"}))
		if err := conn.Exec(tctx, "INSERT INTO ghost_test VALUES (1)"); err != nil {
			t.Fatal(err)
		}
	}
	rows := func() uint64 {
		t.Helper()
		if err := e.Ready(ctx); err != nil { // the engine may be restarting
			t.Fatalf("ready: %v", err)
		}
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM ghost_test").Scan(&n); err != nil {
			t.Fatalf("count: %v", err)
		}
		return n
	}
	insert()
	insert() // a retry of a stored insert: dropped
	if got := rows(); got != 1 {
		t.Fatalf("rows after an insert and its retry = %d, want 1", got)
	}
	var part string
	if err := conn.QueryRow(ctx, "SELECT path FROM system.parts WHERE table = 'ghost_test' AND active").Scan(&part); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := os.RemoveAll(part); err != nil {
		t.Fatal(err)
	}
	if err := e.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if got := rows(); got != 0 {
		t.Fatalf("rows with the part gone = %d, want 0", got)
	}
	insert() // the promoter's retry of the interrupted window
	if got := rows(); got != 1 {
		t.Fatalf("rows after the retry = %d, want 1: the retry was dropped as a duplicate of a part that does not exist", got)
	}
}

// syncBuffer is a bytes.Buffer safe for the supervisor's goroutine and the
// test's, which can wait for what it holds.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // closed and replaced at each Write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written != nil {
		close(s.written)
		s.written = nil
	}
	return s.b.Write(p)
}

// WaitFor returns the buffer once it contains sub, or ctx's error.
func (s *syncBuffer) WaitFor(ctx context.Context, sub string) (string, error) {
	for {
		s.mu.Lock()
		text := s.b.String()
		if s.written == nil {
			s.written = make(chan struct{})
		}
		written := s.written
		s.mu.Unlock()
		if strings.Contains(text, sub) {
			return text, nil
		}
		select {
		case <-written:
		case <-ctx.Done():
			return text, ctx.Err()
		}
	}
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}
