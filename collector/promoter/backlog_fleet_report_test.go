package promoter_test

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/collector/promoter"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/poll"
)

// Budget of a collector's RSS while it catches up, as docs/operating.md
// derives it (267.5 MiB): a collector idle on a DSN (65-72 MiB measured),
// plus the pages the promoter holds (promoter.PagesHeld: two in flight, the
// next being read) of DefaultPageRows rows, each row held as its inbox
// payload (up to 4 KB), its decoded record and the rows inserted for it
// with the driver's column buffers (16 KiB in all, generously), twice over:
// the Go heap grows to twice its live size before a collection (GOGC=100).
const (
	idleRSSBudget = 80 << 20 // a collector on a DSN with no traffic
	pageRowBudget = 16 << 10 // per inbox row of a page, everything it costs
	catchUpBudget = idleRSSBudget + 2*promoter.PagesHeld*promoter.DefaultPageRows*pageRowBudget
)

// TestReportBacklogFleet (make bench, ITLMON_BENCH_REPORT=1): the backlog of
// a 30-minute outage at operators' scale. Three `itlmon serve` processes run
// on one ClickHouse (the embedded engine, as a DSN) with their promoters;
// the backlog, ITLMON_BACKLOG_RECORDS browser records (default 1,000,000)
// started over the 30 minutes, plus the origin timelines of one in
// twenty, lands in the inbox as the three collectors' spools replay it:
// three at once, each inserting its third in frames of 10,000 rows (the
// writer's largest batch), so a window holds what the three inserted in
// its second. The report gives per collector its RSS before the catch-up,
// its peak RSS during it (sampled, and VmHWM) next to the budget, and the
// windows and records it promoted; overall the time to insert the backlog
// and to promote it, and the catch-up rate. It asserts that every record
// was promoted exactly once, and that each collector's peak RSS stays
// under the budget (a margin of several times the page's share).
func TestReportBacklogFleet(t *testing.T) {
	if os.Getenv("ITLMON_BENCH_REPORT") != "1" {
		t.Skip("set ITLMON_BENCH_REPORT=1 (make bench) to run the reports")
	}
	records := 1_000_000
	if s := os.Getenv("ITLMON_BACKLOG_RECORDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("ITLMON_BACKLOG_RECORDS=%q: want a positive count", s)
		}
		records = n
	}
	const (
		collectors = 3
		frameRows  = 10_000 // a spool frame: one of the writer's batches (MaxRows)
		originOf   = 20     // one record in originOf has its origin timeline
		outage     = 30 * time.Minute
	)
	lib := itlmontest.ChdbLib(t)
	ctx := t.Context()
	eng := itlmontest.StartEngine(t, chdb.Options{LibPath: lib})
	admin, err := clickhouse.Open(&clickhouse.Options{Addr: []string{eng.NativeAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.Exec(ctx, "CREATE DATABASE backlog"); err != nil {
		t.Fatal(err)
	}
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{eng.NativeAddr()}, Auth: clickhouse.Auth{Database: "backlog"},
		MaxOpenConns: collectors + 2})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	dsn := "clickhouse://" + eng.NativeAddr() + "/backlog"
	procs := make([]*itlmontest.Proc, collectors)
	for i := range procs {
		procs[i] = itlmontest.StartProcess(t, lib, t.TempDir(), "--clickhouse", dsn)
	}
	// The schema is there and every promoter has beaten: the leadership
	// is settled before the backlog lands, as after an outage.
	var beating uint64
	itlmontest.Settle(t, 2*time.Minute, func() bool {
		err := conn.QueryRow(ctx, "SELECT uniqExact(collector) FROM itl_promoters").Scan(&beating)
		return err == nil && beating == collectors
	})
	if beating != collectors {
		t.Fatalf("%d promoters beat, want %d", beating, collectors)
	}

	mem := make([]*rssSampler, collectors)
	for i, p := range procs {
		mem[i] = sampleRSS(p.Cmd.Process.Pid, 100*time.Millisecond)
	}
	began := time.Now()
	outageStart := began.Add(-outage)
	var inserted time.Time
	{
		var wg sync.WaitGroup
		errs := make([]error, collectors)
		for c := range collectors {
			wg.Go(func() {
				errs[c] = replaySpool(ctx, conn, c, collectors, records, frameRows, originOf, outageStart, outage)
			})
		}
		wg.Wait()
		inserted = time.Now()
		for c, err := range errs {
			if err != nil {
				t.Fatalf("collector %d's spool replay: %v", c, err)
			}
		}
	}
	// Every window sealed before the last insert has been promoted once
	// the watermark passes the last row's window.
	var last time.Time
	itlmontest.QueryRow(t, conn, "SELECT max(ingested_at) FROM itl_inbox", &last)
	var promoted uint64
	var w time.Time
	if !poll.Until(3*time.Hour, time.Second, func() bool {
		err = conn.QueryRow(ctx, "SELECT max(promoted_window) FROM itl_promoted").Scan(&w)
		return err == nil && !w.Before(last.Truncate(time.Second))
	}) {
		conn.QueryRow(ctx, "SELECT count() FROM itl_streams").Scan(&promoted)
		t.Fatalf("backlog not promoted within 3 h: %d of %d streams (watermark %v, last row %v, err %v)", promoted, records, w, last, err)
	}
	done := time.Now()
	for _, m := range mem {
		m.stop()
	}

	var streams, ids, origins uint64
	itlmontest.QueryRow(t, conn, "SELECT count(), uniqExact(stream_id) FROM itl_streams", &streams, &ids)
	itlmontest.QueryRow(t, conn, "SELECT count() FROM itl_origin FINAL", &origins) // two versions of a joined row until merged
	if streams != uint64(records) || ids != uint64(records) {
		t.Errorf("itl_streams: %d rows of %d stream ids, want %d of %d (each record promoted exactly once)", streams, ids, records, records)
	}
	wantOrigins := uint64((records + originOf - 1) / originOf)
	if origins != wantOrigins {
		t.Errorf("itl_origin: %d rows, want %d", origins, wantOrigins)
	}
	var windows, maxWindow uint64
	itlmontest.QueryRow(t, conn, `SELECT count(), max(n) FROM (SELECT count() AS n FROM itl_inbox
		GROUP BY toStartOfInterval(ingested_at, INTERVAL 1 SECOND))`, &windows, &maxWindow)

	var b strings.Builder
	fmt.Fprintf(&b, "promoter fleet backlog report: %d browser records started over %v (+%d origin timelines), replayed by %d spools at once in frames of %d rows: %d windows, the largest %d rows; %d collectors (itlmon serve on one engine), pages of %d rows\n",
		records, outage, wantOrigins, collectors, frameRows, windows, maxWindow, collectors, promoter.DefaultPageRows)
	fmt.Fprintf(&b, "  %-10s %14s %16s %12s %12s %10s %10s %10s\n", "collector", "RSS before MiB", "peak RSS MiB", "VmHWM MiB", "budget MiB", "windows", "records", "streams")
	for i, p := range procs {
		m := mem[i]
		st := scrapePromote(t, p.ReadURL)
		fmt.Fprintf(&b, "  %-10d %14.1f %16.1f %12.1f %12.1f %10.0f %10.0f %10.0f\n", i, mb(m.before), mb(m.peak), mb(m.hwm),
			mb(catchUpBudget), st["windows_total"], st["records_total"], st["streams_total"])
		if peak := max(m.peak, m.hwm); peak > catchUpBudget {
			t.Errorf("collector %d: peak RSS %.1f MB over the budget of %.1f MB", i, mb(peak), mb(catchUpBudget))
		}
		if w := p.Warnings(); len(w) > 0 {
			t.Logf("collector %d logged %d warnings, the first: %s", i, len(w), w[0])
		}
	}
	total := done.Sub(began)
	fmt.Fprintf(&b, "  inserted in %v (%.0f records/s); promoted %v after the last insert; catch-up %v from the first insert: %.0f records/s\n",
		inserted.Sub(began).Round(time.Second), float64(records)/inserted.Sub(began).Seconds(),
		done.Sub(inserted).Round(time.Second), total.Round(time.Second), float64(records)/total.Seconds())
	fmt.Fprintf(&b, "  itl_streams: %d rows, %d distinct stream ids (want %d); itl_origin: %d rows (want %d)\n", streams, ids, records, origins, wantOrigins)
	fmt.Print(b.String())
}

// replaySpool inserts collector c's share of the backlog (every
// collectors-th record from c) in frames of frameRows rows, as its writer
// replays its spool: the records started over the outage, each with the
// time it reached the collector, and one in originOf with its origin
// timeline, in the same frame.
func replaySpool(ctx context.Context, conn clickhouse.Conn, c, collectors, records, frameRows, originOf int, from time.Time, outage time.Duration) error {
	rows := make([]store.InboxRow, 0, frameRows)
	flush := func() error {
		if len(rows) == 0 {
			return nil
		}
		err := store.InsertRows(ctx, conn, "itl_inbox", nil, rows)
		rows = rows[:0]
		return err
	}
	for i := c; i < records; i += collectors {
		at := from.Add(time.Duration(int64(outage) * int64(i) / int64(records)))
		o := pausedOrigin("backlog-" + strconv.Itoa(i))
		o.StartUnixMs = at.UnixMilli()
		s := clientOf(o, "chat")
		s.ReceivedAt = at.Add(2 * time.Second)
		r, err := store.ClientRow(&s)
		if err != nil {
			return err
		}
		rows = append(rows, r)
		if i%originOf == 0 {
			r, err := store.OriginRow("chat", at.Add(1500*time.Millisecond), &o)
			if err != nil {
				return err
			}
			rows = append(rows, r)
		}
		if len(rows) >= frameRows {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// rssSampler reads a process's VmRSS every interval until stopped: before
// is the first sample, peak the largest, hwm the kernel's VmHWM (the peak
// since the process started) at stop.
type rssSampler struct {
	before, peak, hwm uint64
	quit              chan struct{}
	wg                sync.WaitGroup
	pid               int
}

func sampleRSS(pid int, every time.Duration) *rssSampler {
	s := &rssSampler{pid: pid, quit: make(chan struct{})}
	s.before, _ = procStatus(pid)
	s.peak = s.before
	s.wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-s.quit:
				return
			case <-tick.C:
				if rss, _ := procStatus(pid); rss > s.peak {
					s.peak = rss
				}
			}
		}
	})
	return s
}

func (s *rssSampler) stop() {
	close(s.quit)
	s.wg.Wait()
	_, s.hwm = procStatus(s.pid)
}

// procStatus returns pid's VmRSS and VmHWM in bytes (0 when unknown).
func procStatus(pid int) (rss, hwm uint64) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		n, _ := strconv.ParseUint(f[0], 10, 64)
		switch k {
		case "VmRSS":
			rss = n << 10
		case "VmHWM":
			hwm = n << 10
		}
	}
	return rss, hwm
}

// scrapePromote reads a collector's itlmon_promote_* counters from /metrics,
// by name without the prefix.
func scrapePromote(t *testing.T, readURL string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for line := range strings.SplitSeq(itlmontest.GetText(t, readURL+"/metrics"), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(name, "itlmon_promote_") {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(f) {
			out[strings.TrimPrefix(name, "itlmon_promote_")] = f
		}
	}
	return out
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }
