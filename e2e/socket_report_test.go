package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestSocketReport prints what the module's idle close costs and saves
// (make bench sets ITLMON_BENCH_REPORT=1), in Chromium against the real
// collector on loopback:
//   - one WebSocket handshake, as each burst of streams now pays it: time
//     from new WebSocket() to open, and the bytes each way of a whole socket
//     life with nothing sent (upgrade request and 101, close frames), counted
//     by a TCP relay in front of the collector;
//   - concurrent sockets against open tabs: tabs that each stream now and
//     then, with the idle close (socketIdleMs) and without it (a socket per
//     tab for the page's life), sampling the collector's open connections.
//
// It reports; it does not assert timings.
func TestSocketReport(t *testing.T) {
	if os.Getenv("ITLMON_BENCH_REPORT") == "" {
		t.Skip("report only: set ITLMON_BENCH_REPORT=1 (make bench)")
	}
	Browser(t)
	o := StartOrigin(t)
	c := StartCollector(t, "e2e="+o.URL)
	o.SetCollector(c.URL, "e2e")
	relay := startRelay(t, c.Addr)
	ctx := NewTab(t)
	if !OpenPage(t, ctx, o.PageURL(map[string]any{"flushMs": 200}, false)) {
		t.Fatal("itlmon did not become ready")
	}

	// Handshakes: sequential socket lives from the page, direct (time) and
	// through the relay (bytes).
	const lives = 30
	lifeJS := func(base string) string {
		return `(async (url, n) => {
			const ms = [];
			for (let i = 0; i < n; i++) {
				const t0 = performance.now();
				await new Promise((ok, fail) => {
					const ws = new WebSocket(url);
					ws.onopen = () => { ms.push(performance.now() - t0); ws.close(1000, 'idle'); };
					ws.onclose = ok;
					ws.onerror = () => fail(new Error('socket error'));
				});
			}
			return ms;
		})(` + jsString(strings.Replace(base, "http", "ws", 1)+"/v1/ws?site=e2e") + `, ` + fmt.Sprint(lives) + `)`
	}
	opens := Eval[[]float64](t, ctx, lifeJS(c.URL))
	Eval[[]float64](t, ctx, lifeJS("http://"+relay.addr))
	up, down, conns := relay.totals()
	if conns != lives {
		t.Fatalf("relay saw %d connections, want %d", conns, lives)
	}

	// Tabs streaming now and then: each tab one short stream every period,
	// the tabs' streams spread evenly over it.
	const (
		tabs   = 6
		period = 10 * time.Second
		rounds = 2
	)
	type sockets struct {
		mean, max  float64
		handshakes float64
		ok         bool
	}
	run := func(idleMs int) sockets {
		var tabCtx []context.Context
		for i := 0; i < tabs; i++ {
			tc := NewTab(t)
			if !OpenPage(t, tc, o.PageURL(map[string]any{"flushMs": 200, "socketIdleMs": idleMs}, false)) {
				t.Fatal("itlmon did not become ready")
			}
			tabCtx = append(tabCtx, tc)
		}
		before := collectorMetric(t, c, "itlmon_ingest_connections_total")
		for i, tc := range tabCtx {
			offset := int(period.Milliseconds()) * i / tabs
			Eval[bool](t, tc, fmt.Sprintf(`(() => { for (let k = 0; k < %d; k++) setTimeout(() => e2e.stream('tokens=5&interval_ms=20', {}), %d + k * %d); return true; })()`,
				rounds, offset, period.Milliseconds()))
		}
		var samples []float64
		end := time.Now().Add(rounds * period)
		for time.Now().Before(end) {
			samples = append(samples, collectorMetric(t, c, "itlmon_ingest_connections"))
			time.Sleep(200 * time.Millisecond) // sleep: the sampling period of a measurement over a fixed time, not a wait
		}
		s := sockets{max: slices.Max(samples), handshakes: collectorMetric(t, c, "itlmon_ingest_connections_total") - before, ok: true}
		for _, v := range samples {
			s.mean += v / float64(len(samples))
		}
		for _, tc := range tabCtx {
			st := waitStats(t, tc, 20*time.Second, "all acked", func(s moduleStats) bool { return s.Pending == 0 && s.Unacked == 0 })
			s.ok = s.ok && st.Acked >= 1 && st.Dropped == 0
		}
		return s
	}
	idle := run(2000)
	waitMetric(t, c, "itlmon_ingest_connections", 0) // closed idle
	never := run(1_000_000_000)                      // last: these tabs keep their sockets

	fmt.Printf("\nitlmon WebSocket per burst report (%s; Chromium, loopback, plain ws://)\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("  %-58s %s\n", "handshake: new WebSocket() -> open", fmt.Sprintf("median %.1f ms, quartiles %.1f-%.1f ms (%d sockets)",
		median(opens), quartile(opens, 1), quartile(opens, 3), lives))
	fmt.Printf("  %-58s %s\n", "bytes of one socket life with nothing sent (up / down)", fmt.Sprintf("%d / %d B (upgrade request and 101, close frames;"+
		" TCP and TLS handshakes not included)", up/int64(conns), down/int64(conns)))
	row := func(name string, s sockets) {
		fmt.Printf("  %-58s mean %.2f, max %.0f open sockets for %d open tabs; %.0f handshakes for %d streams%s\n", name,
			s.mean, s.max, tabs, s.handshakes, tabs*rounds, map[bool]string{true: "", false: " (NOT all acked)"}[s.ok])
	}
	row(fmt.Sprintf("%d tabs, a stream each per %v, socketIdleMs 2000", tabs, period), idle)
	row(fmt.Sprintf("%d tabs, a stream each per %v, no idle close", tabs, period), never)
	fmt.Println()
}

// relay is a TCP relay in front of the collector that counts the bytes of
// each connection, both ways.
type relay struct {
	addr                   string
	up, down, conn, active atomic.Int64
}

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			r.conn.Add(1)
			r.active.Add(2)
			pipe := func(dst, src net.Conn, n *atomic.Int64) {
				defer r.active.Add(-1)
				k, _ := io.Copy(dst, bufio.NewReader(src))
				n.Add(k)
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
			}
			go pipe(out, in, &r.up)
			go func() { pipe(in, out, &r.down); in.Close(); out.Close() }()
		}
	}()
	return r
}

// totals waits until every relayed connection has ended and returns the
// bytes up (to the collector), down, and the number of connections.
func (r *relay) totals() (up, down, conns int64) {
	Eventually(10*time.Second, 20*time.Millisecond, func() bool { return r.active.Load() == 0 })
	return r.up.Load(), r.down.Load(), r.conn.Load()
}
