package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/itlmon/itlmon/e2e/browsers"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// moduleStats are the counters of the module's sender (wasm/browser stats()).
type moduleStats struct {
	Pending      int     `json:"pending"`
	Unacked      int     `json:"unacked"`
	Acked        int     `json:"acked"`
	Connects     int     `json:"connects"`
	IdleCloses   int     `json:"idleCloses"`
	Shed         int     `json:"shed"`
	RetryAfterMs float64 `json:"retryAfterMs"`
	OpenSocket   int     `json:"openSocket"`
	Dropped      int     `json:"dropped"`
}

// waitStats polls the module's counters until ok says so, or fails after d.
func waitStats(t *testing.T, ctx context.Context, d time.Duration, what string, ok func(moduleStats) bool) moduleStats {
	t.Helper()
	var s moduleStats
	if !Eventually(d, 50*time.Millisecond, func() bool {
		s = Eval[moduleStats](t, ctx, `itlmon._stats()`)
		return ok(s)
	}) {
		t.Fatalf("module stats %+v: not %s within %v", s, what, d)
	}
	return s
}

// collectorMetric reads one sample from the collector's /metrics; series is
// the metric name with its labels as exposed (label names sorted).
func collectorMetric(t *testing.T, c *Collector, series string) float64 {
	t.Helper()
	resp, err := http.Get(c.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("/metrics has no %s", series)
	return 0
}

func waitMetric(t *testing.T, c *Collector, series string, want float64) {
	t.Helper()
	waitMetricFor(t, c, series, want, 20*time.Second)
}

func waitMetricFor(t *testing.T, c *Collector, series string, want float64, d time.Duration) {
	t.Helper()
	var got float64
	if !Eventually(d, 50*time.Millisecond, func() bool {
		got = collectorMetric(t, c, series)
		return got == want
	}) {
		t.Fatalf("%s = %v, want %v", series, got, want)
	}
}

// wantStoredOnce checks that every summary the page got is stored exactly once.
func wantStoredOnce(t *testing.T, c *Collector, sums []Summary) {
	t.Helper()
	rows := WaitStreams(t, c, "e2e", len(sums))
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.StreamID]++
	}
	for _, s := range sums {
		if seen[s.ID] != 1 {
			t.Errorf("stream %s stored %d times, want once", s.ID, seen[s.ID])
		}
	}
	if len(rows) != len(sums) {
		t.Errorf("stored %d streams, want %d", len(rows), len(sums))
	}
}

// TestSocketIdleClose: the module opens its WebSocket for a burst of
// streams, closes it once it has been idle for socketIdleMs with everything
// acknowledged (the collector then holds no connection for the tab), and
// opens a new one for the next burst; every stream is stored once.
func TestSocketIdleClose(t *testing.T) {
	t.Parallel()
	Browser(t)
	o := StartOrigin(t)
	c := StartCollector(t, "e2e="+o.URL)
	o.SetCollector(c.URL, "e2e")
	ctx := NewTab(t)
	if !OpenPage(t, ctx, o.PageURL(map[string]any{"flushMs": 200, "socketIdleMs": 1000}, false)) {
		t.Fatalf("itlmon did not become ready: %s", Eval[string](t, ctx, `itlmon.timing.error`))
	}
	burst := func() {
		for i := 0; i < 2; i++ {
			if r := RunStream(t, ctx, StreamOpts{Query: "tokens=5&interval_ms=5"}); r.Error != "" {
				t.Fatalf("stream: %s", r.Error)
			}
		}
		Eval[any](t, ctx, `itlmon.settled()`)
	}
	burst()
	s := waitStats(t, ctx, 20*time.Second, "idle-closed after the first burst", func(s moduleStats) bool {
		return s.IdleCloses == 1 && s.OpenSocket == 0
	})
	if s.Connects != 1 || s.Pending != 0 || s.Unacked != 0 || s.Acked < 1 {
		t.Fatalf("after the first burst: %+v; want one socket, everything acked", s)
	}
	waitMetric(t, c, "itlmon_ingest_connections", 0)

	burst()
	s = waitStats(t, ctx, 20*time.Second, "idle-closed after the second burst", func(s moduleStats) bool {
		return s.IdleCloses == 2 && s.OpenSocket == 0
	})
	if s.Connects != 2 || s.Pending != 0 || s.Unacked != 0 || s.Dropped != 0 {
		t.Fatalf("after the second burst: %+v; want a second socket, everything acked, none dropped", s)
	}
	waitMetric(t, c, "itlmon_ingest_connections", 0)
	if got := collectorMetric(t, c, "itlmon_ingest_connections_total"); got != 2 {
		t.Fatalf("collector accepted %v connections, want 2", got)
	}
	sums := PageSummaries(t, ctx)
	if len(sums) != 4 {
		t.Fatalf("page has %d summaries, want 4", len(sums))
	}
	wantStoredOnce(t, c, sums)
}

// stallFrame opens a WebSocket to the collector and sends the header of a
// frame declaring n bytes, then a few of them, and stalls: the collector
// holds n bytes of its memory budget for it until the frame times out.
func stallFrame(t *testing.T, c *Collector, origin string, n uint64) {
	t.Helper()
	h := http.Header{}
	h.Set("Origin", origin)
	ws, _, err := websocket.DefaultDialer.Dial(strings.Replace(c.URL, "http", "ws", 1)+"/v1/ws?site=e2e", h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	hdr := []byte{0x82, 0x80 | 127} // FIN + binary, masked, 64-bit length
	hdr = binary.BigEndian.AppendUint64(hdr, n)
	hdr = append(hdr, 0, 0, 0, 0, 1, 2, 3) // mask key 0, then 3 bytes of payload
	if _, err := ws.NetConn().Write(hdr); err != nil {
		t.Fatal(err)
	}
}

// TestSocketShed: with the collector's ingest memory budget spent (frames
// that stall half sent, as an attacker's would), the module's batch is shed
// with close 1013 and "retry-after=N". The module keeps its records, opens
// no socket for N s (plus jitter), then delivers: stored once. The stalled
// frames time out meanwhile and give their memory back.
func TestSocketShed(t *testing.T) {
	t.Parallel()
	Browser(t)
	o := StartOrigin(t)
	c := StartCollector(t, "e2e="+o.URL)
	o.SetCollector(c.URL, "e2e")
	ctx := NewTab(t)
	if !OpenPage(t, ctx, o.PageURL(map[string]any{"flushMs": 200}, false)) {
		t.Fatalf("itlmon did not become ready: %s", Eval[string](t, ctx, `itlmon.timing.error`))
	}

	// Fill the budget but for 64 bytes, less than any batch.
	budget := int64(collectorMetric(t, c, "itlmon_ingest_memory_budget_bytes"))
	// The largest frame the collector takes reserves its declared length; one
	// declaring more is refused at once (1009) and reserves nothing.
	largest := int64(beacon.DefaultLimits.MaxBytes)
	target := budget - 64
	full := target / largest
	for i := int64(0); i < full; i++ {
		stallFrame(t, c, o.URL, uint64(largest))
	}
	if rest := target - full*largest; rest > 0 {
		stallFrame(t, c, o.URL, uint64(rest))
	}
	waitMetric(t, c, "itlmon_ingest_memory_bytes", float64(target))

	if r := RunStream(t, ctx, StreamOpts{Query: "tokens=5&interval_ms=5"}); r.Error != "" {
		t.Fatalf("stream: %s", r.Error)
	}
	s := waitStats(t, ctx, 20*time.Second, "shed", func(s moduleStats) bool { return s.Shed == 1 })
	shedAt := time.Now()
	const retry = 15_000 // ingest.DefaultRetryAfter
	if s.RetryAfterMs < retry || s.RetryAfterMs >= retry*1.5 || s.Pending+s.Unacked == 0 {
		t.Fatalf("after the 1013: %+v; want a wait in [15 s, 22.5 s) and the record kept", s)
	}
	if got := collectorMetric(t, c, `itlmon_ingest_shed_total{cause="memory",transport="ws"}`); got != 1 {
		t.Fatalf("itlmon_ingest_shed_total{ws,memory} = %v, want 1", got)
	}
	// The stalled frames time out (10 s) and give their memory back.
	waitMetric(t, c, "itlmon_ingest_memory_bytes", 0)

	s = waitStats(t, ctx, 40*time.Second, "delivered", func(s moduleStats) bool {
		return s.Acked >= 1 && s.Pending == 0 && s.Unacked == 0
	})
	// Not before the wait: the page's stats are polled, so the ack came at
	// least retryAfterMs after the 1013 less one polling interval.
	if waited := time.Since(shedAt); waited < time.Duration(s.RetryAfterMs)*time.Millisecond-time.Second {
		t.Fatalf("delivered %v after the 1013, before the %v ms asked", waited, s.RetryAfterMs)
	}
	if s.Connects != 2 || s.Shed != 1 || s.Dropped != 0 {
		t.Fatalf("module stats %+v; want 2 sockets (the shed one and the retry), nothing dropped", s)
	}
	wantStoredOnce(t, c, PageSummaries(t, ctx))
}

// TestSocketClosedOnLeave: a page that leaves (pagehide) closes its socket
// at once, whatever socketIdleMs says. The module on the main thread only:
// in its Worker, it hears of pagehide by a message, and Chromium can freeze
// the Worker (back/forward cache) before it reads it; the socket then stays
// open in the frozen Worker (seen in 1 of 4 runs, before the idle close too).
func TestSocketClosedOnLeave(t *testing.T) {
	t.Parallel()
	Browser(t)
	o := StartOrigin(t)
	c := StartCollector(t, "e2e="+o.URL)
	o.SetCollector(c.URL, "e2e")
	ctx := NewTab(t)
	if !OpenPage(t, ctx, o.PageURL(map[string]any{"flushMs": 200, "socketIdleMs": 1e10, "worker": false}, false)) {
		t.Fatalf("itlmon did not become ready: %s", Eval[string](t, ctx, `itlmon.timing.error`))
	}
	if r := RunStream(t, ctx, StreamOpts{Query: "tokens=5&interval_ms=5"}); r.Error != "" {
		t.Fatalf("stream: %s", r.Error)
	}
	waitStats(t, ctx, 20*time.Second, "acked with its socket open", func(s moduleStats) bool {
		return s.Acked >= 1 && s.Unacked == 0 && s.OpenSocket == 1
	})
	waitMetric(t, c, "itlmon_ingest_connections", 1)
	NavigateIn(t, browsers.ChromiumTab(ctx, nil), "about:blank")
	waitMetricFor(t, c, "itlmon_ingest_connections", 0, 5*time.Second)
}
