package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/ingest"
	"github.com/itlmon/itlmon/collector/server"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// runMainEnv makes the test binary run the real program (dispatch) instead
// of the tests: the crash test starts it as a subprocess and SIGKILLs it.
const runMainEnv = "ITLMON_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	chdb.MaybeRunChild()
	if os.Getenv(signalChildEnv) == "1" {
		runSignalChild()
	}
	if os.Getenv(runMainEnv) == "1" {
		// SIGUSR1 collects garbage and returns it to the OS, so the memory
		// report measures live memory (test binary only).
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		go func() {
			for range usr1 {
				debug.FreeOSMemory()
			}
		}()
		ctx, stop := signalContext()
		code := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

const (
	pageOrigin = "https://chat.example.com"
	firefoxUA  = "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"
)

// chdbLib returns the engine library, or skips (fails under ITLMON_REQUIRE_REAL=1).
func chdbLib(t testing.TB) string {
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

// startMain runs the real program in-process on a free loopback port with
// the embedded engine in a temp dir.
func startMain(t testing.TB, mod func(*server.Config)) *server.Main {
	t.Helper()
	m := server.NewMain()
	m.Config.Addr = "127.0.0.1:0"
	m.Config.Data = t.TempDir()
	m.Config.ChdbLib = chdbLib(t)
	m.Config.Sites = []ingest.Site{{Key: "test", Origins: []string{pageOrigin}}}
	m.Config.TrustProxy = true
	m.Config.ConnRate, m.Config.SiteRate = 0, 0
	m.Config.ShutdownTimeout = 30 * time.Second
	if mod != nil {
		mod(&m.Config)
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

func wsURL(base, site string) string {
	return "ws" + strings.TrimPrefix(base, "http") + "/v1/ws?site=" + site
}

func dialWS(t testing.TB, base, site, origin string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	h := http.Header{}
	h.Set("Origin", origin)
	h.Set("User-Agent", firefoxUA)
	h.Set("CF-IPCountry", "DE")
	h.Set("CloudFront-Viewer-Country", "DE")
	c, resp, err := websocket.DefaultDialer.Dial(wsURL(base, site), h)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, resp, err
}

// record returns a distinct record: run and i make its stream id.
func record(run, i uint32) beacon.Record {
	r := beacon.Record{
		StartUnixMs: time.Now().UnixMilli(),
		PageOrigin:  pageOrigin,
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
	putID(&r.StreamID, run, i)
	return r
}

func putID(id *[16]byte, run, i uint32) {
	id[0], id[1], id[2], id[3] = 0x17, byte(run>>16), byte(run>>8), byte(run)
	id[12], id[13], id[14], id[15] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
}

// wantStoredOnce fails t unless every stream of the acked batches (run's
// ids, perBatch per batch, as sent) is stored exactly once; why says when.
func wantStoredOnce(t testing.TB, stored map[[16]byte]int, acked map[uint64]bool, run uint32, perBatch int, why string) {
	t.Helper()
	for s := range acked {
		for j := range perBatch {
			var id [16]byte
			putID(&id, run, uint32(s)*uint32(perBatch)+uint32(j))
			if n := stored[id]; n != 1 {
				t.Fatalf("acked stream %x stored %d times, want 1%s", id, n, why)
			}
		}
	}
}

func batchBytes(t testing.TB, seq uint64, recs []beacon.Record) []byte {
	t.Helper()
	b := beacon.Batch{Seq: seq, Client: beacon.Client{ConnType: "4g", Release: "r1", ModuleVersion: "test"}, Records: recs}
	p, err := b.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ackReader collects acks from a connection in the background.
type ackReader struct {
	mu   sync.Mutex
	seqs map[uint64]bool
	err  error
	more chan struct{}
}

func readAcks(c *websocket.Conn) *ackReader {
	a := &ackReader{seqs: map[uint64]bool{}, more: make(chan struct{}, 1)}
	go func() {
		for {
			_, p, err := c.ReadMessage()
			if err == nil {
				var ack beacon.Ack
				if ack, err = beacon.DecodeAck(p); err == nil {
					a.mu.Lock()
					a.seqs[ack.Seq] = true
					a.mu.Unlock()
				}
			}
			if err != nil {
				a.mu.Lock()
				a.err = err
				a.mu.Unlock()
			}
			select {
			case a.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return a
}

// wait blocks until n acks arrived (or the connection failed, or timeout).
func (a *ackReader) wait(t testing.TB, n int, timeout time.Duration) map[uint64]bool {
	t.Helper()
	deadline := time.After(timeout)
	for {
		a.mu.Lock()
		got, err := len(a.seqs), a.err
		a.mu.Unlock()
		if got >= n {
			return a.snapshot()
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

func (a *ackReader) snapshot() map[uint64]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[uint64]bool, len(a.seqs))
	for k := range a.seqs {
		out[k] = true
	}
	return out
}

func TestIngestStoresEnrichedRecords(t *testing.T) {
	m := startMain(t, nil)
	c, _, err := dialWS(t, m.URL(), "test", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	acks := readAcks(c)
	recs := []beacon.Record{record(1, 1), record(1, 2), record(1, 3)}
	if err := c.WriteMessage(websocket.BinaryMessage, batchBytes(t, 41, recs)); err != nil {
		t.Fatal(err)
	}
	if got := acks.wait(t, 1, 30*time.Second); !got[41] {
		t.Fatalf("acks = %v, want seq 41", got)
	}

	// Acked means durable; readable once promoted: through the store and the API.
	ctx := t.Context()
	waitPromoted(t, m.DB.Conn())
	streams, err := m.DB.LatestStreams(ctx, collectorFilter("test"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(streams), 3; got != want {
		t.Fatalf("stored streams = %d, want %d", got, want)
	}
	byID := map[[16]byte]int{}
	for i, s := range streams {
		byID[s.StreamID] = i
	}
	for _, r := range recs {
		i, ok := byID[r.StreamID]
		if !ok {
			t.Fatalf("stream %x not stored", r.StreamID)
		}
		s := streams[i]
		checks := []struct {
			name      string
			got, want any
		}{
			{"site", s.Site, "test"},
			{"model", s.Model, "gpt-test"},
			{"ttft", s.TTFTUs, r.TTFTUs},
			{"page path", s.PagePath, "/chat"},
			{"itl count", s.ITL.Count(), uint64(39)},
			{"browser", s.Browser, "Firefox"},
			{"browser major", s.BrowserMajor, uint16(133)},
			{"os", s.OS, "Linux"},
			{"device", s.Device, "desktop"},
			{"country", s.Country, "DE"},
			{"conn type", s.ConnType, "4g"},
			{"release", s.Release, "r1"},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("stream %x: %s = %v, want %v", r.StreamID[12:], c.name, c.got, c.want)
			}
		}
	}

	var body struct {
		Count   int `json:"count"`
		Streams []struct {
			Country string   `json:"country"`
			TTFTMs  *float64 `json:"ttft_ms"`
		} `json:"streams"`
	}
	getJSON(t, m.ReadURL()+"/api/streams?site=test&since=10m&limit=10", &body)
	if body.Count != 3 || body.Streams[0].Country != "DE" || body.Streams[0].TTFTMs == nil {
		t.Fatalf("/api/streams = %+v, want 3 streams from DE with a TTFT", body)
	}
	metrics := getText(t, m.ReadURL()+"/metrics")
	for _, want := range []string{"itlmon_ingest_records_acked_total 3", "itlmon_store_rows_inserted_total 3", "itlmon_ingest_connections 1"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if got := getStatus(t, m.URL()+"/readyz"); got != 200 {
		t.Errorf("/readyz = %d, want 200", got)
	}
}

// TestClickHouseOutage stops the engine mid-ingest and restarts it: every
// acked record is in ClickHouse exactly once, in the rows and in the rollup.
func TestClickHouseOutage(t *testing.T) {
	m := startMain(t, nil)
	c, _, err := dialWS(t, m.URL(), "test", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	acks := readAcks(c)
	const perBatch = 10
	seq := uint64(0)
	send := func(n int) {
		for i := 0; i < n; i++ {
			seq++
			recs := make([]beacon.Record, perBatch)
			for j := range recs {
				recs[j] = record(2, uint32(seq*perBatch)+uint32(j))
			}
			if err := c.WriteMessage(websocket.BinaryMessage, batchBytes(t, seq, recs)); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx := t.Context()
	send(5)
	acks.wait(t, 5, 30*time.Second)
	if err := m.Engine.Stop(ctx); err != nil {
		t.Fatalf("stop engine: %v", err)
	}
	send(10) // ClickHouse is down: these are acked from the spool
	acks.wait(t, 15, 60*time.Second)
	if got := getStatus(t, m.URL()+"/readyz"); got != 503 {
		t.Errorf("/readyz with ClickHouse down = %d, want 503", got)
	}
	if st := m.Writer.Stats(); st.RowsSpooled == 0 {
		t.Errorf("nothing spooled while ClickHouse was down: %+v", st)
	}
	if err := m.Engine.Restart(ctx); err != nil {
		t.Fatalf("restart engine: %v", err)
	}
	send(5)
	got := acks.wait(t, 20, 60*time.Second)

	want := len(got) * perBatch
	rows, uniq, rollup := waitRows(t, m, "test", want, 90*time.Second)
	if rows != want || uniq != want || rollup != want {
		t.Fatalf("after the outage: rows %d, distinct ids %d, rollup streams %d; want %d each (exactly once)", rows, uniq, rollup, want)
	}
	// Every acked batch's ids are there, once.
	wantStoredOnce(t, storedIDs(t, m.DB.Conn(), "test"), got, 2, perBatch, "")
}

// waitRows polls until site has want rows and rollup streams (the spool
// replays in the background) and returns rows, distinct stream ids and the
// rollup's count.
func waitRows(t testing.TB, m *server.Main, site string, want int, timeout time.Duration) (rows, uniq, rollup int) {
	t.Helper()
	ctx := t.Context()
	deadline := time.Now().Add(timeout)
	for {
		var r, u, ru uint64
		err := m.DB.Conn().QueryRow(ctx, "SELECT count(), uniqExact(stream_id) FROM itl_streams WHERE site = ?", site).Scan(&r, &u)
		if err == nil {
			err = m.DB.Conn().QueryRow(ctx, "SELECT toUInt64(sum(streams)) FROM itl_rollup_1m WHERE site = ?", site).Scan(&ru)
		}
		// The rollup's materialized view commits after the rows become
		// visible: wait for both.
		if err == nil && int(r) >= want && int(ru) >= want {
			return int(r), int(u), int(ru)
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %d rows and %d in the rollup, want %d (err %v, writer %+v)", timeout, r, ru, want, err, m.Writer.Stats())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRejections: a wrong Origin, an oversized frame, random bytes and an
// unknown version are each refused with a reason and counted in /metrics.
func TestRejections(t *testing.T) {
	m := startMain(t, nil)
	_, resp, err := dialWS(t, m.URL(), "test", "https://evil.example.net")
	if err == nil || resp == nil || resp.StatusCode != 403 {
		t.Fatalf("wrong origin: %v %v, want 403 before the upgrade", resp, err)
	}
	good := batchBytes(t, 1, []beacon.Record{record(3, 1)})
	badVersion := append([]byte(nil), good...)
	badVersion[3] = 200
	if _, v, _ := beacon.PeekKind(badVersion); v != 200 {
		t.Fatalf("PeekKind version = %d, want 200: header layout changed", v)
	}
	tests := []struct {
		name   string
		frame  []byte
		code   int
		text   string
		reason string
	}{
		{"oversized", make([]byte, beacon.DefaultLimits.MaxBytes+100), websocket.CloseMessageTooBig, "too big", "too_big"},
		{"random bytes", []byte("\x93\x11 this is not a beacon at all \xff\xfe"), websocket.CloseUnsupportedData, "bad batch", "decode_magic"},
		{"unknown version", badVersion, websocket.CloseUnsupportedData, "version", "version"},
	}
	for _, tt := range tests {
		c, _, err := dialWS(t, m.URL(), "test", pageOrigin)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WriteMessage(websocket.BinaryMessage, tt.frame); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for err == nil { // a refusal ack may come before the close
			_, _, err = c.ReadMessage()
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != tt.code || !strings.Contains(ce.Text, tt.text) {
			t.Errorf("%s: read = %v, want close %d with %q", tt.name, err, tt.code, tt.text)
		}
	}
	metrics := getText(t, m.ReadURL()+"/metrics")
	for _, reason := range []string{"origin", "too_big", "decode_magic", "version"} {
		want := fmt.Sprintf(`itlmon_ingest_rejected_total{reason=%q} 1`, reason)
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Still serving.
	c, _, err := dialWS(t, m.URL(), "test", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	acks := readAcks(c)
	c.WriteMessage(websocket.BinaryMessage, good)
	acks.wait(t, 1, 30*time.Second)
}

// TestCrashAfterAcks SIGKILLs the collector (a real process) right after
// acks, restarts it on the same data: nothing acked is missing.
func TestCrashAfterAcks(t *testing.T) {
	lib := chdbLib(t)
	data := t.TempDir()
	p1 := startProcess(t, lib, data)
	c, _, err := dialWS(t, p1.url, "test", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	acks := readAcks(c)
	// Send without waiting for acks and SIGKILL once some are in: batches
	// are acked, queued, in flight and unsent at the moment of the crash.
	const batches, perBatch = 400, 10
	go func() {
		for s := uint64(1); s <= batches; s++ {
			recs := make([]beacon.Record, perBatch)
			for j := range recs {
				recs[j] = record(4, uint32(s*perBatch)+uint32(j))
			}
			b := beacon.Batch{Seq: s, Client: beacon.Client{ConnType: "4g"}, Records: recs}
			p, _ := b.AppendBinary(nil)
			if c.WriteMessage(websocket.BinaryMessage, p) != nil {
				return // the collector is gone
			}
		}
	}()
	acks.wait(t, 20, 60*time.Second)
	p1.kill(t)
	got := acks.snapshot()
	t.Logf("%d of %d batches acked before SIGKILL", len(got), batches)
	if len(got) == batches {
		t.Log("every batch was acked before the kill: the crash hit an idle collector")
	}

	p2 := startProcess(t, lib, data)
	db, err := store.Open(t.Context(), store.Options{Addr: p2.native, Database: "itlmon"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(90 * time.Second)
	for {
		stored := storedIDs(t, db.Conn(), "test")
		missing := 0
		for s := range got {
			for j := 0; j < perBatch; j++ {
				var id [16]byte
				putID(&id, 4, uint32(s*perBatch)+uint32(j))
				if stored[id] == 0 {
					missing++
				}
			}
		}
		for id, n := range stored {
			if n > 1 {
				t.Fatalf("stream %x stored %d times", id, n)
			}
		}
		if missing == 0 {
			t.Logf("all %d acked records stored once (%d stored in all)", len(got)*perBatch, len(stored))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d acked records missing after the restart", missing)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// storedIDs counts the rows of each stream id of site.
func storedIDs(t testing.TB, conn driver.Conn, site string) map[[16]byte]int {
	t.Helper()
	waitPromoted(t, conn)
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

// proc is the collector running as a real process (this test binary re-executed).
type proc struct {
	cmd     *exec.Cmd
	url     string
	readURL string // where the read side is served (/metrics, /api/)
	native  string // the engine's native address when the collector started
	done    chan struct{}

	restarted atomic.Pointer[string] // the engine's native address after its latest restart

	mu       sync.Mutex
	problems []string // log lines at level warn and above
}

// warnings returns the lines the collector logged at level warn and above.
func (p *proc) warnings() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.problems...)
}

// engineAddr is the engine's current native address: the collector's
// supervisor restarts a dead engine, on the same ports unless taken.
func (p *proc) engineAddr() string {
	if a := p.restarted.Load(); a != nil {
		return *a
	}
	return p.native
}

// startProcess starts the collector on data with site "test", plus extra
// serve flags.
func startProcess(t *testing.T, lib, data string, extra ...string) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data", data, "--chdb-lib", lib,
		"--site", "test=" + pageOrigin, "--log-format", "json", "--conn-rate", "0", "--site-rate", "0"}
	cmd := exec.Command(exe, append(args, extra...)...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
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
				once.Do(func() { p.url, p.readURL, p.native = line.URL, line.ReadURL, line.Native; close(ready) })
			case "clickhouse engine restarted":
				p.restarted.Store(&line.Engine)
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill(t) })
	select {
	case <-ready:
	case <-p.done:
		t.Fatalf("collector exited before serving: %v", cmd.ProcessState)
	case <-time.After(2 * time.Minute):
		t.Fatal("collector did not start within 2 minutes")
	}
	return p
}

func (p *proc) kill(t testing.TB) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.done
	// The engine child dies with its parent (Pdeathsig); give the kernel a
	// moment to release its files and ports.
	time.Sleep(200 * time.Millisecond)
}

func getText(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func getStatus(t testing.TB, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func getJSON(t testing.TB, url string, v any) {
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

func collectorFilter(site string) collector.StreamFilter {
	return collector.StreamFilter{Site: site, Since: time.Now().Add(-time.Hour), Limit: 100}
}

// waitPromoted waits until a running collector's promoter has promoted every
// inbox row ingested so far (acked means durable in the inbox; readable in
// itl_streams a window, the hold and the grace later), at most 60 s.
func waitPromoted(t testing.TB, conn driver.Conn) {
	t.Helper()
	var until time.Time
	if err := conn.QueryRow(t.Context(), "SELECT now64(6)").Scan(&until); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var pending uint64
		err := conn.QueryRow(t.Context(), `SELECT count() FROM itl_inbox WHERE ingested_at < fromUnixTimestamp64Micro(?)
			AND ingested_at >= (SELECT max(promoted_window) FROM itl_promoted) + INTERVAL 1 SECOND`, until.UnixMicro()).Scan(&pending)
		if err == nil && pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("inbox rows not promoted within 60s: %d pending (err %v)", pending, err)
		}
	}
}
