// Package itlmontest runs the real collector for tests: in-process
// (StartMain, server.Main with the embedded engine) or as a process of the
// itlmon binary (StartProcess, for kills and signals), and holds what the
// scenario, report and command tests share to talk to it (WebSocket batches
// and acks, stored rows, HTTP reads).
package itlmontest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/ingest"
	"github.com/itlmon/itlmon/collector/server"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/internal/poll"
	"github.com/itlmon/itlmon/wasm/beacon"
)

const (
	PageOrigin = "https://chat.example.com"
	FirefoxUA  = "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"
)

// ChdbLib returns the engine library, or skips (fails under ITLMON_REQUIRE_REAL=1).
func ChdbLib(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test with the real ClickHouse engine: skipped with -short")
	}
	lib := os.Getenv("CHDB_LIB_PATH")
	if _, err := os.Stat(lib); lib == "" || err != nil {
		if os.Getenv("ITLMON_REQUIRE_REAL") == "1" {
			t.Fatalf("ClickHouse engine library missing (CHDB_LIB_PATH=%q): run make deps-chdb", lib)
		}
		t.Skipf("ClickHouse engine library missing (CHDB_LIB_PATH=%q): run make deps-chdb", lib)
	}
	return lib
}

// StartMain runs the real program in-process on a free loopback port with
// the embedded engine in a temp dir, seeded with the migrated schema
// (chtest.SeedEngineDir).
func StartMain(t testing.TB, mod func(*server.Config)) *server.Main {
	t.Helper()
	m := server.NewMain()
	m.Config.Addr = "127.0.0.1:0"
	m.Config.Data = t.TempDir()
	m.Config.ChdbLib = ChdbLib(t)
	m.Config.Sites = []ingest.Site{{Key: "test", Origins: []string{PageOrigin}}}
	m.Config.TrustProxy = true
	m.Config.ConnRate, m.Config.SiteRate = 0, 0
	m.Config.ShutdownTimeout = 30 * time.Second
	if mod != nil {
		mod(&m.Config)
	}
	// The embedded engine's directory (Data/clickhouse) starts with the
	// migrated schema unless the test brought one (a restart on the same
	// data): the collector finds every migration applied.
	if engineDir := filepath.Join(m.Config.Data, "clickhouse"); m.Config.ClickHouse.IsZero() && m.Config.ChdbLib != "" {
		if _, err := os.Stat(engineDir); errors.Is(err, os.ErrNotExist) {
			chtest.SeedEngineDir(t, engineDir)
		}
	}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	m.Log = &log
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		m.Close()
		t.Fatalf("Run: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m
}

func WSURL(base, site string) string {
	return "ws" + strings.TrimPrefix(base, "http") + "/v1/ws?site=" + site
}

func DialWS(t testing.TB, base, site, origin string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	h := http.Header{}
	h.Set("Origin", origin)
	h.Set("User-Agent", FirefoxUA)
	h.Set("CF-IPCountry", "DE")
	h.Set("CloudFront-Viewer-Country", "DE")
	c, resp, err := websocket.DefaultDialer.Dial(WSURL(base, site), h)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, resp, err
}

// Record returns a distinct record: run and i make its stream id.
func Record(run, i uint32) beacon.Record {
	r := beacon.Record{
		StartUnixMs: time.Now().UnixMilli(),
		PageOrigin:  PageOrigin,
		PagePath:    "/chat",
		URLOrigin:   "https://api.example.com",
		URLPath:     "/v1/chat/completions",
		Model:       "gpt-test",
		HTTPProto:   "h2",
		ContentType: "text/event-stream",
		HTTPStatus:  200,
		TTFBUs:      12_000, TTFCUs: 15_000, TTFTUs: 20_000 + i, DurationUs: 900_000,
		Events: 42, ContentEvents: 40, Tokens: 40, Reads: 40, Bytes: 4096,
		GapP50Us: 20_000, GapP95Us: 30_000, GapP99Us: 40_000, GapMaxUs: 45_000,
		TPOTUs: 21_000, TokensPerSec: 47.6, Jank: 2, Smooth: true,
	}
	for g := 0; g < 39; g++ {
		r.ITL.Record(20_000)
	}
	PutID(&r.StreamID, run, i)
	return r
}

func PutID(id *[16]byte, run, i uint32) {
	id[0], id[1], id[2], id[3] = 0x17, byte(run>>16), byte(run>>8), byte(run)
	id[12], id[13], id[14], id[15] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
}

// WantStoredOnce fails t unless every stream of the acked batches (run's
// ids, perBatch per batch, as sent) is stored exactly once; why says when.
func WantStoredOnce(t testing.TB, stored map[[16]byte]int, acked map[uint64]bool, run uint32, perBatch int, why string) {
	t.Helper()
	for s := range acked {
		for j := range perBatch {
			var id [16]byte
			PutID(&id, run, uint32(s)*uint32(perBatch)+uint32(j))
			if n := stored[id]; n != 1 {
				t.Fatalf("acked stream %x stored %d times, want 1%s", id, n, why)
			}
		}
	}
}

func BatchBytes(t testing.TB, seq uint64, recs []beacon.Record) []byte {
	t.Helper()
	b := beacon.Batch{Seq: seq, Client: beacon.Client{ConnType: "4g", Release: "r1", ModuleVersion: "test"}, Records: recs}
	p, err := b.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// AckReader collects acks from a connection in the background.
type AckReader struct {
	mu   sync.Mutex
	seqs map[uint64]bool
	err  error
	more chan struct{}
}

func ReadAcks(c *websocket.Conn) *AckReader {
	a := NewAckReader()
	go func() {
		for {
			_, p, err := c.ReadMessage()
			if err == nil {
				var ack beacon.Ack
				if ack, err = beacon.DecodeAck(p); err == nil {
					a.Add(ack.Seq)
				}
			}
			if err != nil {
				a.Fail(err)
				return
			}
		}
	}()
	return a
}

// NewAckReader is an AckReader fed by Add and Fail (ReadAcks feeds one
// from a connection).
func NewAckReader() *AckReader {
	return &AckReader{seqs: map[uint64]bool{}, more: make(chan struct{}, 1)}
}

// Add records an ack: its seq, or any key (a connection and a seq).
func (a *AckReader) Add(key uint64) {
	a.mu.Lock()
	a.seqs[key] = true
	a.mu.Unlock()
	a.wake()
}

// Fail records a connection's failure (the first one is kept).
func (a *AckReader) Fail(err error) {
	a.mu.Lock()
	if a.err == nil {
		a.err = err
	}
	a.mu.Unlock()
	a.wake()
}

func (a *AckReader) wake() {
	select {
	case a.more <- struct{}{}:
	default:
	}
}

// Wait blocks until n acks arrived (or the connection failed, or timeout).
func (a *AckReader) Wait(t testing.TB, n int, timeout time.Duration) map[uint64]bool {
	t.Helper()
	deadline := time.After(timeout)
	for {
		a.mu.Lock()
		got, err := len(a.seqs), a.err
		a.mu.Unlock()
		if got >= n {
			return a.Snapshot()
		}
		if err != nil {
			t.Fatalf("connection failed after %d of %d acks: %v", got, n, err)
		}
		select {
		case <-a.more:
		case <-deadline:
			t.Fatalf("%d of %d acks after %v", got, n, timeout)
		}
	}
}

func (a *AckReader) Snapshot() map[uint64]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[uint64]bool, len(a.seqs))
	for k := range a.seqs {
		out[k] = true
	}
	return out
}

// WaitRows polls until site has want rows and rollup streams (the spool
// replays in the background) and returns rows, distinct stream ids and the
// rollup's count.
func WaitRows(t testing.TB, m *server.Main, site string, want int, timeout time.Duration) (rows, uniq, rollup int) {
	t.Helper()
	ctx := t.Context()
	var r, u, ru uint64
	var err error
	// Rows and the rollup's view commit inside the real engine; nothing
	// tells the test when.
	if !poll.Until(timeout, 200*time.Millisecond, func() bool {
		err = m.DB.Conn().QueryRow(ctx, "SELECT count(), uniqExact(stream_id) FROM itl_streams WHERE site = ?", site).Scan(&r, &u)
		if err == nil {
			err = m.DB.Conn().QueryRow(ctx, "SELECT toUInt64(sum(streams)) FROM itl_rollup_1m WHERE site = ?", site).Scan(&ru)
		}
		// The rollup's materialized view commits after the rows become
		// visible: wait for both.
		return err == nil && int(r) >= want && int(ru) >= want
	}) {
		t.Fatalf("after %v: %d rows and %d in the rollup, want %d (err %v, writer %+v)", timeout, r, ru, want, err, m.Writer.Stats())
	}
	return int(r), int(u), int(ru)
}

// StoredIDs counts the rows of each stream id of site.
func StoredIDs(t testing.TB, conn driver.Conn, site string) map[[16]byte]int {
	t.Helper()
	WaitPromoted(t, conn)
	rows, err := conn.Query(t.Context(), "SELECT stream_id, count() FROM itl_streams WHERE site = ? GROUP BY stream_id", site)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[[16]byte]int{}
	for rows.Next() {
		var id string
		var n uint64
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[[16]byte([]byte(id))] = int(n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Proc is the collector running as a real process: the itlmon binary (see
// Exe), started by StartProcess.
type Proc struct {
	Cmd     *exec.Cmd
	URL     string        // the collector's base URL
	ReadURL string        // where the read side is served (/metrics, /api/)
	Native  string        // the engine's native address when the collector started
	Done    chan struct{} // closed when the process has exited

	restarted atomic.Pointer[string] // the engine's native address after its latest restart
	freed     chan struct{}          // the binary's line after a SIGUSR1

	mu       sync.Mutex
	problems []string // log lines at level warn and above
}

// Warnings returns the lines the collector logged at level warn and above.
func (p *Proc) Warnings() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.problems...)
}

// EngineAddr is the engine's current native address: the collector's
// supervisor restarts a dead engine, on the same ports unless taken.
func (p *Proc) EngineAddr() string {
	if a := p.restarted.Load(); a != nil {
		return *a
	}
	return p.Native
}

// StartProcess starts the collector (Exe) on data with site "test", plus
// extra serve flags, and waits until it serves. A data root without an
// engine directory gets a seeded one (chtest.SeedEngineDir).
func StartProcess(t *testing.T, lib, data string, extra ...string) *Proc {
	t.Helper()
	// A fresh data root's engine starts with the migrated schema, as in
	// StartMain; a restart on the same data finds its own.
	if _, err := os.Stat(filepath.Join(data, "clickhouse")); errors.Is(err, os.ErrNotExist) && !slices.Contains(extra, "--clickhouse") {
		chtest.SeedEngineDir(t, filepath.Join(data, "clickhouse"))
	}
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data", data, "--chdb-lib", lib,
		"--site", "test=" + PageOrigin, "--log-format", "json", "--conn-rate", "0", "--site-rate", "0"}
	cmd := exec.Command(Exe(t), append(args, extra...)...)
	// The collector (and with it its engine) dies with the test binary, even
	// one killed before its cleanups ran. Only a locked thread exits, and no
	// test starts a collector from one.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd, Done: make(chan struct{}), freed: make(chan struct{}, 1)}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var once sync.Once
		for sc.Scan() {
			var line struct {
				Level   string `json:"level"`
				Message string `json:"message"`
				URL     string `json:"url"`
				ReadURL string `json:"read_url"`
				Native  string `json:"clickhouse_native"`
				Engine  string `json:"native"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			if line.Level == "warn" || line.Level == "error" || line.Level == "fatal" {
				p.mu.Lock()
				p.problems = append(p.problems, sc.Text())
				p.mu.Unlock()
			}
			switch line.Message {
			case "itlmon serving":
				once.Do(func() { p.URL, p.ReadURL, p.Native = line.URL, line.ReadURL, line.Native; close(ready) })
			case "clickhouse engine restarted":
				p.restarted.Store(&line.Engine)
			case "itlmontest: memory freed":
				p.freed <- struct{}{}
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() { cmd.Wait(); close(p.Done) }()
	t.Cleanup(func() {
		p.Kill(t)
		if w := p.Warnings(); t.Failed() && len(w) > 0 {
			// What the collector (and its engine) said went wrong: the
			// first place to look when a test of it fails.
			const most = 40
			t.Logf("collector %d logged %d warnings and errors (the last %d):\n%s",
				cmd.Process.Pid, len(w), min(len(w), most), strings.Join(w[max(0, len(w)-most):], "\n"))
		}
	})
	select {
	case <-ready:
	case <-p.Done:
		t.Fatalf("collector exited before serving: %v\n%s", cmd.ProcessState, strings.Join(p.Warnings(), "\n"))
	case <-time.After(2 * time.Minute):
		t.Fatal("collector did not start within 2 minutes")
	}
	return p
}

// FreeOSMemory makes the collector collect garbage and return it to the OS
// (SIGUSR1, in the binary Exe builds) and waits until it has.
func (p *Proc) FreeOSMemory(t testing.TB) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.freed:
	case <-p.Done:
		t.Fatal("collector exited")
	case <-time.After(time.Minute):
		t.Fatal("collector did not free its memory within a minute")
	}
}

// Kill SIGKILLs the collector and returns when it and its engine child
// (which dies with its parent) have exited, so their files and ports are
// free.
func (p *Proc) Kill(t testing.TB) {
	select {
	case <-p.Done:
		return
	default:
	}
	engine := EngineChild(p.Cmd.Process.Pid)
	var fd int = -1
	if engine > 0 {
		fd, _ = unix.PidfdOpen(engine, 0) // before the kill: the pid is not reused while we hold it
	}
	p.Cmd.Process.Kill()
	<-p.Done
	if fd >= 0 {
		WaitExit(t, fd, time.Minute)
		unix.Close(fd)
	}
}

// WaitExit waits until the process of pidfd fd has exited, at most timeout.
func WaitExit(t testing.TB, fd int, timeout time.Duration) {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(timeout/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll pidfd: %v", err)
		}
		if n == 0 {
			t.Fatalf("process still running after %v", timeout)
		}
		return
	}
}

// Exe returns the itlmon binary, built once per test binary (with the
// itlmontest tag: SIGUSR1 returns freed memory to the OS, for the memory
// reports). Main removes it.
func Exe(t testing.TB) string {
	t.Helper()
	exeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "itlmontest-")
		if err != nil {
			exeErr = err
			return
		}
		exeDir, exePath = dir, filepath.Join(dir, "itlmon")
		out, err := exec.Command("go", "build", "-tags", "itlmontest", "-o", exePath, "github.com/itlmon/itlmon/collector/cmd/itlmon").CombinedOutput()
		if err != nil {
			exeErr = fmt.Errorf("go build itlmon: %v: %s", err, out)
		}
	})
	if exeErr != nil {
		t.Fatal(exeErr)
	}
	return exePath
}

var (
	exeOnce         sync.Once
	exeDir, exePath string
	exeErr          error
)

// Main is TestMain for packages that run the collector: the engine child
// (chdb.MaybeRunChild), the tests, then the built binary removed.
func Main(m *testing.M) int {
	chdb.MaybeRunChild()
	code := chtest.Main(m) // removes the seeded engine directory too
	if exeDir != "" {
		os.RemoveAll(exeDir)
	}
	return code
}

func GetText(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func GetStatus(t testing.TB, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func GetJSON(t testing.TB, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func CollectorFilter(site string) collector.StreamFilter {
	return collector.StreamFilter{Site: site, Since: time.Now().Add(-time.Hour), Limit: 100}
}

// WaitPromoted waits until a running collector's promoter has promoted every
// inbox row ingested so far (acked means durable in the inbox; readable in
// itl_streams a window, the hold and the grace later), at most 60 s.
func WaitPromoted(t testing.TB, conn driver.Conn) {
	t.Helper()
	var until time.Time
	if err := conn.QueryRow(t.Context(), "SELECT now64(6)").Scan(&until); err != nil {
		t.Fatal(err)
	}
	// The promoter may run in another process; the inbox is polled in the
	// real engine.
	var pending uint64
	var err error
	if !poll.Until(60*time.Second, 100*time.Millisecond, func() bool {
		err = conn.QueryRow(t.Context(), `SELECT count() FROM itl_inbox WHERE ingested_at < fromUnixTimestamp64Micro(?)
			AND ingested_at >= (SELECT max(promoted_window) FROM itl_promoted) + INTERVAL 1 SECOND`, until.UnixMicro()).Scan(&pending)
		return err == nil && pending == 0
	}) {
		t.Fatalf("inbox rows not promoted within 60s: %d pending (err %v)", pending, err)
	}
}

// EnginePID returns the pid of the engine child of the collector process pid.
func EnginePID(t *testing.T, pid int) int {
	t.Helper()
	var c int
	// Another process's child, seen in /proc only.
	if !poll.Until(30*time.Second, 50*time.Millisecond, func() bool { c = EngineChild(pid); return c > 0 }) {
		t.Fatalf("no engine child of collector %d after 30 s", pid)
	}
	return c
}

// EngineChild finds, in /proc, a child of pid whose environment marks it as
// the engine (chdb.MaybeRunChild's ITLMON_CHDB_CHILD=1); 0 if none.
func EngineChild(pid int) int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		rest := b[bytes.LastIndexByte(b, ')')+1:]
		f := strings.Fields(string(rest))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		dir := filepath.Dir(st)
		env, err := os.ReadFile(filepath.Join(dir, "environ"))
		if err != nil || !bytes.Contains(env, []byte("\x00ITLMON_CHDB_CHILD=1\x00")) && !bytes.HasPrefix(env, []byte("ITLMON_CHDB_CHILD=1\x00")) {
			continue
		}
		child, err := strconv.Atoi(filepath.Base(dir))
		if err == nil {
			return child
		}
	}
	return 0
}

// CountByID runs q, which returns (key, count) rows, into a map.
func CountByID(t *testing.T, conn driver.Conn, q string) map[string]int {
	t.Helper()
	rows, err := conn.Query(t.Context(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n uint64
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = int(n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// query scans q's single row into dest.
func QueryRow(t *testing.T, conn driver.Conn, q string, dest ...any) {
	t.Helper()
	if err := conn.QueryRow(t.Context(), q).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// Settle polls done until it reports true or timeout passes.
func Settle(t testing.TB, timeout time.Duration, done func() bool) {
	t.Helper()
	poll.Until(timeout, 200*time.Millisecond, done) // done reads the real engine or process state
}

// WaitSchema waits until m (on a DSN: migrated in the background) has its schema.
func WaitSchema(t testing.TB, m *server.Main) {
	t.Helper()
	// The migration runs against the real engine with its own backoff;
	// SchemaReady has no event to wait on.
	if !poll.Until(90*time.Second, 50*time.Millisecond, func() bool { return m.DB.SchemaReady() == nil }) {
		t.Fatalf("schema not ready after 90 s: %v", m.DB.SchemaReady())
	}
}

// FreePort returns a loopback TCP port nothing listens on (now).
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

func GetBody(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// StartEngine starts an embedded engine of the test's own, outside any
// collector (one that collectors reach by a DSN, as a ClickHouse server),
// with opts' ports and the test's temporary directory and log (warnings and
// up) unless opts sets them, and closes it when t ends.
func StartEngine(t testing.TB, opts chdb.Options) *chdb.Engine {
	t.Helper()
	if opts.LibPath == "" {
		opts.LibPath = ChdbLib(t)
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	opts.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	eng, err := chdb.Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("start engine: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		eng.Close(ctx)
	})
	return eng
}
