package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/itlmon/itlmon/e2e/nginx"
)

// Helpers for collectors behind a load balancer:
//
//	a := StartCollectorArgs(t, []string{"--log-level", "info"}, sites...) // embedded engine
//	b := StartCollectorArgs(t, []string{"--clickhouse", a.ClickHouseDSN(t)}, sites...)
//	lb := Balance(t, nginx.Options{RetryAfter: 5 * time.Second}, a, b) // or Mirror: true
//	// pages and the origin reporter use lb.URL() as the collector
//	b.Pause(t)  // POSTs sent to b wait, nginx retries them on a; b.Resume(t) processes them too
//	b.Kill(t)   // SIGKILL mid-run; b.Start(t) restarts it on the same address and data
//
// Killing or restarting the collector that runs the embedded engine moves
// the engine to new ports: a DSN taken before points nowhere.

// Balance starts nginx as the load balancer in front of cs (opts.Upstreams
// are set to their addresses): round robin for the ingest WebSocket, the
// beacon and origin POSTs and the rest; see nginx.Options for RetryAfter
// (longer than a collector's normal answer: a beacon is answered once
// durable, up to a flush interval and the origin join's hold) and Mirror.
func Balance(t *testing.T, opts nginx.Options, cs ...*Collector) *nginx.Server {
	t.Helper()
	opts.Upstream, opts.Upstreams = "", nil
	for _, c := range cs {
		opts.Upstreams = append(opts.Upstreams, c.Addr)
	}
	return nginx.Start(t, opts)
}

// signal sends sig to the running collector process.
func (c *Collector) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	c.mu.Lock()
	cmd := c.cmd
	c.mu.Unlock()
	if cmd == nil {
		t.Fatalf("collector %s not running", c.Addr)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatalf("collector %s: %v: %v", c.Addr, sig, err)
	}
}

// Kill SIGKILLs the collector (a crash: no graceful shutdown; its embedded
// engine, if any, dies with it) and waits until it is gone. Start brings it
// back on the same address and data.
func (c *Collector) Kill(t testing.TB) {
	t.Helper()
	c.signal(t, syscall.SIGKILL)
	c.mu.Lock()
	waited := c.waited
	c.cmd = nil
	c.mu.Unlock()
	<-waited
}

// Pause stops the collector process (SIGSTOP) until Resume or the end of the
// test: its connections stay open and requests to it wait unanswered, so a
// balancer with RetryAfter sends them to another collector, and Resume lets
// this one process them too.
func (c *Collector) Pause(t testing.TB) {
	t.Helper()
	c.signal(t, syscall.SIGSTOP)
	t.Cleanup(func() { c.resume() })
}

// Resume continues a paused collector (SIGCONT).
func (c *Collector) Resume(t testing.TB) {
	t.Helper()
	c.signal(t, syscall.SIGCONT)
}

func (c *Collector) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		c.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// engineAddrs returns the native and HTTP addresses of the collector's
// embedded engine from its last start-up log line, which needs
// --log-level info or debug.
func (c *Collector) engineAddrs(t testing.TB) (native, httpAddr string) {
	t.Helper()
	for _, line := range strings.Split(c.logs.String(), "\n") {
		var l struct {
			Message          string `json:"message"`
			ClickHouseNative string `json:"clickhouse_native"`
			ClickHouseHTTP   string `json:"clickhouse_http"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Message == "itlmon serving" && l.ClickHouseNative != "" {
			native, httpAddr = l.ClickHouseNative, l.ClickHouseHTTP
		}
	}
	if native == "" {
		t.Fatalf("collector %s: no embedded engine in its log (start it with --log-level info and without --clickhouse)", c.Addr)
	}
	return native, httpAddr
}

// ClickHouseDSN is the DSN of the collector's embedded engine, database
// itlmon, for another collector's --clickhouse. The collector must have
// been started with --log-level info (the address is in its start-up line).
func (c *Collector) ClickHouseDSN(t testing.TB) string {
	t.Helper()
	native, _ := c.engineAddrs(t)
	return "clickhouse://" + native + "/itlmon"
}

// Query runs query on the collector's embedded engine over its HTTP
// interface (database itlmon) and returns the result as text
// (TabSeparated), trimmed. Same condition as ClickHouseDSN.
func (c *Collector) Query(t testing.TB, query string) string {
	t.Helper()
	_, h := c.engineAddrs(t)
	resp, err := http.Post("http://"+h+"/?"+url.Values{"database": {"itlmon"}}.Encode(), "text/plain", strings.NewReader(query))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s %s", query, resp.Status, b)
	}
	return strings.TrimSpace(string(b))
}

// metric returns the value of an unlabelled or summed metric from the
// collector's /metrics (served to loopback clients).
func (c *Collector) metric(t testing.TB, name string) float64 {
	t.Helper()
	resp, err := http.Get(c.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && (f[0] == name || strings.HasPrefix(f[0], name+"{")) {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatalf("metric %s: %v", line, err)
			}
			sum += v
		}
	}
	return sum
}

// waitSpooled waits until none of cs holds a spooled insert: every record
// they acked is in an inbox then. A collector acks what it spooled while
// ClickHouse refused its inserts, and its replay lands the rows later, with
// the replay's ingested_at: a wait for promotion that starts before the
// replays would stop short of them.
func waitSpooled(t *testing.T, within time.Duration, cs ...*Collector) {
	t.Helper()
	for _, c := range cs {
		if !Eventually(within, 100*time.Millisecond, func() bool { return c.metric(t, "itlmon_store_spool_segments") == 0 }) {
			t.Fatalf("collector %s: %v spool segments left after %v", c.Addr, c.metric(t, "itlmon_store_spool_segments"), within)
		}
	}
}
