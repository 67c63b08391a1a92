package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
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

	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/internal/freeport"
)

// Collector is the real collector, `itlmon serve` (the binary built from
// collector/cmd/itlmon, with its embedded ClickHouse engine), run on a fixed
// loopback port and a t.TempDir() data root so it can be stopped and started
// again with its data.
type Collector struct {
	URL  string
	Addr string
	Data string
	// ReadURL and Token are where and how Streams reads: by default URL
	// (the collector runs with --demo, which serves the read side there to
	// local clients) and no token.
	ReadURL string
	Token   string
	args    []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	waited chan struct{}
	logs   *syncBuf
}

// testJoinHold is the --join-hold StartCollector gives a collector unless
// its args say otherwise.
const testJoinHold = 200 * time.Millisecond

// StartCollector starts `itlmon serve --demo` with the given --site values
// (KEY=ORIGIN[,ORIGIN...]) and waits until /readyz answers. It skips (or
// fails under ITLMON_REQUIRE_REAL=1) without the ClickHouse engine library.
func StartCollector(t *testing.T, sites ...string) *Collector {
	t.Helper()
	return StartCollectorArgs(t, nil, sites...)
}

// StartCollectorArgs is StartCollector with more `itlmon serve` flags after
// the defaults (a later flag wins): --clickhouse DSN (a second collector on
// the ClickHouse of a first one: see ClickHouseDSN), --origin-key SITE=KEY,
// --log-level info, --join-hold 3s (the default is testJoinHold: pass the
// hold a test of the origin or edge join needs).
func StartCollectorArgs(t *testing.T, args []string, sites ...string) *Collector {
	t.Helper()
	if testing.Short() {
		t.Skip(errSkipShort.Error())
	}
	lib := os.Getenv("CHDB_LIB_PATH")
	if _, err := os.Stat(lib); lib == "" || err != nil {
		requireReal(t, "clickhouse engine (CHDB_LIB_PATH)", fmt.Errorf("%q: %v", lib, err))
	}
	c := &Collector{Data: t.TempDir(), logs: &syncBuf{}}
	// The embedded engine (--data D keeps it in D/clickhouse) starts with
	// the migrated schema: the collector finds every migration applied
	// instead of applying them, the longest step of its first start.
	if !slices.Contains(args, "--clickhouse") {
		chtest.SeedEngineDir(t, filepath.Join(c.Data, "clickhouse"))
	}
	// A port picked free can still be taken before the collector binds it
	// (by another test's server): a start that loses that race is retried
	// on another port.
	for attempt := 1; ; attempt++ {
		addr, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		c.URL, c.Addr = "http://"+addr, addr
		// --join-hold: what a test stores is readable about this long after
		// its window (1 s) ends. The default (3 s) gives origin timelines
		// time to join; tests that send none need not wait for them, and
		// tests that do pass their own hold.
		c.args = []string{"serve", "--addr", addr, "--data", c.Data, "--demo", "--log-level", "warn", "--log-format", "json",
			"--shutdown-timeout", "10s", "--join-hold", testJoinHold.String()}
		for _, s := range sites {
			c.args = append(c.args, "--site", s)
		}
		c.args = append(c.args, args...)
		err = c.start(t)
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
		t.Logf("collector start %d: %v; trying another port", attempt, err)
	}
	t.Cleanup(func() {
		c.Stop(t)
		if t.Failed() {
			t.Logf("collector log:\n%s", c.logs.String())
		}
	})
	return c
}

// Start starts the collector process (again) on the same address and data.
func (c *Collector) Start(t *testing.T) {
	t.Helper()
	if err := c.start(t); err != nil {
		t.Fatal(err)
	}
}

// start starts the collector process and waits until it is ready; it
// returns an error if the process exits first or is not ready in 90 s.
func (c *Collector) start(t *testing.T) error {
	t.Helper()
	exe := engineExe(t) // the itlmon binary, built once per package (attribution_test.go)
	c.mu.Lock()
	cmd := exec.Command(exe, c.args...)
	// The collector (and with it its engine) dies with the test binary, even
	// one killed before its cleanups ran. Only a locked thread exits, and no
	// test starts a collector from one.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	mark := len(c.logs.String())
	cmd.Stdout, cmd.Stderr = c.logs, c.logs
	if err := cmd.Start(); err != nil {
		c.mu.Unlock()
		return fmt.Errorf("start collector: %w", err)
	}
	c.cmd, c.waited = cmd, make(chan struct{})
	go func(w chan struct{}) { cmd.Wait(); close(w) }(c.waited)
	waited := c.waited
	c.mu.Unlock()
	// At info or debug, ready also means the start-up line is in c.logs:
	// the collector logs it before it serves, but the lines reach c.logs
	// through a pipe that may be copied after /readyz answered.
	logsServing := func() bool { return true }
	if level := lastArg(c.args, "--log-level"); level == "info" || level == "debug" {
		logsServing = func() bool { return strings.Contains(c.logs.String()[mark:], `"message":"itlmon serving"`) }
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(c.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && logsServing() {
				return nil
			}
		}
		select {
		case <-waited:
			c.mu.Lock()
			c.cmd = nil
			c.mu.Unlock()
			return fmt.Errorf("collector exited during start-up:\n%s", c.logs.String()[mark:])
		case <-time.After(50 * time.Millisecond): // look at /readyz again
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("collector not ready within 90s (last: %v):\n%s", err, c.logs.String()[mark:])
		}
	}
}

// lastArg returns the value after the last flag in args, or "".
func lastArg(args []string, flag string) string {
	v := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			v = args[i+1]
		}
	}
	return v
}

// Stop ends the collector gracefully (SIGTERM), waiting up to 30 s.
func (c *Collector) Stop(t testing.TB) {
	t.Helper()
	if err := c.stop(); err != nil {
		t.Error(err)
	}
}

func (c *Collector) stop() error {
	c.mu.Lock()
	cmd, waited := c.cmd, c.waited
	c.cmd = nil
	c.mu.Unlock()
	if cmd == nil {
		return nil
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-waited:
		return nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-waited
		return errors.New("collector did not stop within 30s of SIGTERM")
	}
}

// sharedSites is how many site keys the shared collector has (s1 ... sN).
const sharedSites = 100

var shared struct {
	once  sync.Once
	c     *Collector
	err   error
	data  string
	sites atomic.Int32
}

// SharedCollector returns the package's one collector for tests that store
// streams and read them back (started at first use, stopped after the
// tests), and a site key of t's own on it, allowed from any page origin:
// the test reads back only its own streams. A test that stops, restarts or
// configures its collector, or tests which origins a site allows, starts
// its own (StartCollector).
func SharedCollector(t *testing.T) (*Collector, string) {
	t.Helper()
	if testing.Short() {
		t.Skip(errSkipShort.Error())
	}
	lib := os.Getenv("CHDB_LIB_PATH")
	if _, err := os.Stat(lib); lib == "" || err != nil {
		requireReal(t, "clickhouse engine (CHDB_LIB_PATH)", fmt.Errorf("%q: %v", lib, err))
	}
	shared.once.Do(func() {
		if shared.data, shared.err = os.MkdirTemp("", "itlmon-e2e-shared"); shared.err != nil {
			return
		}
		c := &Collector{Data: shared.data, logs: &syncBuf{}}
		for attempt := 1; attempt <= 3; attempt++ {
			var addr string
			if addr, shared.err = freeport.Addr(); shared.err != nil {
				return
			}
			c.URL, c.Addr = "http://"+addr, addr
			c.args = []string{"serve", "--addr", addr, "--data", c.Data, "--demo", "--log-level", "warn", "--log-format", "json",
				"--shutdown-timeout", "10s", "--join-hold", testJoinHold.String()}
			for i := 1; i <= sharedSites; i++ {
				c.args = append(c.args, "--site", "s"+strconv.Itoa(i)+"=*")
			}
			if shared.err = c.start(t); shared.err == nil || !strings.Contains(shared.err.Error(), "address already in use") {
				break
			}
		}
		if shared.err == nil {
			shared.c = c
		}
	})
	if shared.err != nil || shared.c == nil {
		t.Fatalf("shared collector did not start: %v", shared.err)
	}
	n := shared.sites.Add(1)
	if n > sharedSites {
		t.Fatalf("the shared collector has %d sites, all taken: raise sharedSites", sharedSites)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("shared collector log:\n%s", shared.c.logs.String())
		}
	})
	return shared.c, "s" + strconv.Itoa(int(n))
}

// stopShared stops the shared collector, if one was started (TestMain).
func stopShared() {
	if shared.c != nil {
		if err := shared.c.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "shared collector:", err)
		}
	}
	if shared.data != "" {
		os.RemoveAll(shared.data)
	}
}

// Restart stops the collector and starts it again on the same port and data.
func (c *Collector) Restart(t *testing.T) {
	t.Helper()
	c.Stop(t)
	c.Start(t)
}

// StoredStream is one row of the collector's /api/streams.
type StoredStream struct {
	StreamID      string   `json:"stream_id"`
	PageOrigin    string   `json:"page_origin"`
	PagePath      string   `json:"page_path"`
	URLOrigin     string   `json:"url_origin"`
	URLPath       string   `json:"url_path"`
	Model         string   `json:"model"`
	OriginID      string   `json:"origin_id"`
	ContentType   string   `json:"content_type"`
	Format        string   `json:"format"`
	Status        string   `json:"status"`
	End           string   `json:"end"`
	HeadersMs     *float64 `json:"headers_ms"`
	BeforeHeaders bool     `json:"before_headers"`
	HTTPStatus    uint16   `json:"http_status"`
	TTFBMs        *float64 `json:"ttfb_ms"`
	TTFTMs        *float64 `json:"ttft_ms"`
	DurationMs    *float64 `json:"duration_ms"`
	Events        uint32   `json:"events"`
	ContentEvents uint32   `json:"content_events"`
	Tokens        uint32   `json:"tokens"`
	Reads         uint32   `json:"reads"`
	Bytes         uint64   `json:"bytes"`
	GapP50Ms      float64  `json:"gap_p50_ms"`
	GapP99Ms      float64  `json:"gap_p99_ms"`
	GapMaxMs      float64  `json:"gap_max_ms"`
	Stalls        uint32   `json:"stalls"`
	StalledMs     float64  `json:"stalled_ms"`
	TokensPerSec  float64  `json:"tokens_per_sec"`
	Smooth        bool     `json:"smooth"`
	Browser       string   `json:"browser"`
	ModuleVersion string   `json:"module_version"`
}

// StreamView is what the dashboard's one-stream view (/api/stream) says of a
// stored stream, the fields tests look at.
type StreamView struct {
	Status    string   `json:"status"`
	Content   uint32   `json:"content_events"`
	TTFTMs    *float64 `json:"ttft_ms"`
	TTFTCause string   `json:"ttft_cause"`
	StallList []struct {
		StartMs float64 `json:"start_ms"`
		EndMs   float64 `json:"end_ms"`
		Cause   string  `json:"cause"`
	} `json:"stall_list"`
}

// ViewStream waits until the site has n streams stored, id among them, and
// returns id's one-stream view.
func (c *Collector) ViewStream(t testing.TB, site string, n int, id string) StreamView {
	t.Helper()
	StreamByID(t, WaitStreams(t, c, site, n), id)
	resp, err := http.Get(c.URL + "/api/stream?" + url.Values{"site": {site}, "id": {id}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v StreamView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("/api/stream?id=%s: %v", id, err)
	}
	return v
}

// Streams returns the site's stored streams, newest first.
func (c *Collector) Streams(t testing.TB, site string) ([]StoredStream, error) {
	t.Helper()
	base := c.URL
	if c.ReadURL != "" {
		base = c.ReadURL
	}
	req, err := http.NewRequest("GET", base+"/api/streams?"+url.Values{"site": {site}, "since": {"1h"}, "limit": {"1000"}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/api/streams: %s", resp.Status)
	}
	var out struct {
		Streams []StoredStream `json:"streams"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("/api/streams: %w", err)
	}
	return out.Streams, nil
}

// WaitStreams polls /api/streams until the site has at least n stored
// streams (deadline 45 s) and returns them, newest first.
func WaitStreams(t testing.TB, c *Collector, site string, n int) []StoredStream {
	t.Helper()
	var got []StoredStream
	var err error
	if !Eventually(45*time.Second, 50*time.Millisecond, func() bool {
		got, err = c.Streams(t, site)
		return err == nil && len(got) >= n
	}) {
		t.Fatalf("stored streams for site %q = %d (err %v), want >= %d within 45s", site, len(got), err, n)
	}
	return got
}

// Later collects checks of a site's stored streams, run together after one
// wait for all of them (Run): a test that streams several times then waits
// out the collector's promotion (about 2.5 s with testJoinHold: the
// writer's flush, the window's end, the hold and the grace) once instead of
// once per stream. A page whose streams are checked later must stay open
// until its module holds nothing (AckedIn): a page closed by automation may
// lose its last batch.
type Later struct {
	c      *Collector
	site   string
	n      int // streams the site stored or will store
	checks []laterCheck
}

type laterCheck struct {
	name, id string
	check    func(t *testing.T, row StoredStream)
}

// StoredLater starts a Later for site's streams on c; base is how many the
// site stored before.
func StoredLater(c *Collector, site string, base int) *Later {
	return &Later{c: c, site: site, n: base}
}

// Check counts a stream the page measured (id: its onStream summary's id)
// and, at Run, calls check with its stored row.
func (l *Later) Check(name, id string, check func(t *testing.T, row StoredStream)) {
	l.n++
	l.checks = append(l.checks, laterCheck{name, id, check})
}

// Count counts a stream that will be stored but is not checked.
func (l *Later) Count() { l.n++ }

// Run waits until the site stored every stream counted, then runs each
// check as a subtest ("NAME stored").
func (l *Later) Run(t *testing.T) {
	t.Helper()
	var rows []StoredStream
	var err error
	if !Eventually(45*time.Second, 50*time.Millisecond, func() bool {
		rows, err = l.c.Streams(t, l.site)
		return err == nil && len(rows) >= l.n
	}) {
		var missing []string
		for _, c := range l.checks {
			if !slices.ContainsFunc(rows, func(r StoredStream) bool { return r.StreamID == c.id }) {
				missing = append(missing, c.name+" ("+c.id+")")
			}
		}
		t.Fatalf("stored streams for site %q = %d (err %v), want %d within 45s; not stored: %s", l.site, len(rows), err, l.n, strings.Join(missing, ", "))
	}
	for _, c := range l.checks {
		t.Run(c.name+" stored", func(t *testing.T) { c.check(t, StreamByID(t, rows, c.id)) })
	}
}

// StreamByID returns the stored stream with the page-side id (itlmon.onStream's summary.id).
func StreamByID(t testing.TB, rows []StoredStream, id string) StoredStream {
	t.Helper()
	for _, r := range rows {
		if r.StreamID == id {
			return r
		}
	}
	t.Fatalf("stream %s not among %d stored streams", id, len(rows))
	return StoredStream{}
}

// syncBuf is a goroutine-safe log buffer.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// collectorPage starts an origin and a collector that allows it, and opens
// the origin's page in a new tab with itlmon ready.
func collectorPage(t *testing.T, init map[string]any) (*Origin, *Collector, context.Context) {
	t.Helper()
	Browser(t)
	o := StartOrigin(t)
	c := StartCollector(t, "e2e="+o.URL)
	o.SetCollector(c.URL, "e2e")
	ctx := NewTab(t)
	if !OpenPage(t, ctx, o.PageURL(init, false)) {
		t.Fatalf("itlmon did not become ready: %s", Eval[string](t, ctx, `itlmon.timing.error`))
	}
	return o, c, ctx
}

// sharedCollectorPage is collectorPage on the shared collector: it returns
// the test's site key too.
func sharedCollectorPage(t *testing.T, init map[string]any) (*Origin, *Collector, context.Context, string) {
	t.Helper()
	return sharedCollectorPageIn(t, init, NewTab)
}

// sharedCollectorPageIn is sharedCollectorPage in the tab that tab opens
// (FullBrowserTab: one of the full browser).
func sharedCollectorPageIn(t *testing.T, init map[string]any, tab func(testing.TB) context.Context) (*Origin, *Collector, context.Context, string) {
	t.Helper()
	Browser(t)
	o := StartOrigin(t)
	c, site := SharedCollector(t)
	o.SetCollector(c.URL, site)
	ctx := tab(t)
	if !OpenPage(t, ctx, o.PageURL(init, false)) {
		t.Fatalf("itlmon did not become ready: %s", Eval[string](t, ctx, `itlmon.timing.error`))
	}
	return o, c, ctx, site
}

func lastSummary(t *testing.T, ctx context.Context) Summary {
	t.Helper()
	s := PageSummaries(t, ctx)
	if len(s) == 0 {
		t.Fatal("no itlmon.onStream summary")
	}
	return s[len(s)-1]
}
