package promoter_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/promoter"
	"github.com/itlmon/itlmon/collector/store"
)

// TestReportBacklog (make bench, ITLMON_BENCH_REPORT=1): a backlog as a
// spool replay after an outage lands it (big inserts, so big windows) is
// promoted by one promoter in pages of 2,000 rows (the default until
// 2026-12-04), 5,000 and 10,000 (the default: what a larger page buys, the
// pages' fixed cost in the engine paid less often, against the memory they
// take), and by one reading each window
// whole (a page larger than any window: what the promoter did before it
// paged), each on a fresh database, in the same run. It prints
// the catch-up rate and the peak memory of this process above its level
// before (Go heap in use and RSS: the engine runs in a child process, so
// this is the collector's side alone). Several collectors behind one load
// balancer catch up the same way: the leader promotes while it makes
// progress (lead.go), so each collector's peak is one page's. It asserts
// only that every record was promoted once.
func TestReportBacklog(t *testing.T) {
	if os.Getenv("ITLMON_BENCH_REPORT") != "1" {
		t.Skip("set ITLMON_BENCH_REPORT=1 (make bench) to run the reports")
	}
	const (
		records = 60_000
		perLand = 15_000 // rows per replayed insert: one window each
	)
	type result struct {
		name          string
		took          time.Duration
		heap, rss     uint64 // peak above the level before
		windows, rows uint64
	}
	var results []result
	for _, tc := range []struct {
		name string
		page int
	}{
		{"pages of 2,000 rows (the default until 2026-12-04)", 2_000},
		{"pages of 5,000 rows", 5_000},
		{"pages of 10,000 rows (the default)", promoter.DefaultPageRows},
		{"whole windows (no paging)", 1 << 30},
	} {
		db := newDB(t)
		ctx := t.Context()
		rows := make([]store.InboxRow, 0, perLand)
		for i := range records {
			s := clientOf(pausedOrigin("backlog-"+strconv.Itoa(i)), "chat")
			r, err := store.ClientRow(&s)
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, r)
			if len(rows) == perLand {
				if err := store.InsertRows(ctx, db.Conn(), "itl_inbox", nil, rows); err != nil {
					t.Fatal(err)
				}
				rows = rows[:0]
			}
		}
		p, err := promoter.New([]promoter.Shard{{Conn: db.Conn()}}, promoter.Config{
			Hold: 100 * time.Millisecond, Grace: 50 * time.Millisecond, PageRows: tc.page, Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		heap0, rss0 := heapInUse(), rss()
		var peakHeap, peakRSS uint64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				peakHeap, peakRSS = max(peakHeap, heapInUse()), max(peakRSS, rss())
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		})
		began := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		err = p.CatchUp(cctx)
		cancel()
		took := time.Since(began)
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		if err := db.Conn().QueryRow(ctx, "SELECT count() FROM itl_streams").Scan(&n); err != nil || n != records {
			t.Fatalf("%s: %d streams promoted (err %v), want %d", tc.name, n, err, records)
		}
		st := p.Stats()
		results = append(results, result{tc.name, took, sub(peakHeap, heap0), sub(peakRSS, rss0), st.Windows, st.Records})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "promoter backlog report: %d records replayed in inserts of %d (one window each), one promoter\n", records, perLand)
	fmt.Fprintf(&b, "  %-52s %12s %14s %16s %14s\n", "read", "catch-up", "records/s", "peak heap +MB", "peak RSS +MB")
	for _, r := range results {
		fmt.Fprintf(&b, "  %-52s %12v %14.0f %16.1f %14.1f\n", r.name, r.took.Round(10*time.Millisecond),
			float64(r.rows)/r.took.Seconds(), float64(r.heap)/(1<<20), float64(r.rss)/(1<<20))
	}
	ratios := func(base result, rs []result) {
		for _, r := range rs {
			if base.heap > 0 {
				fmt.Fprintf(&b, "  %s / %s: peak heap %.2fx, catch-up rate %.2fx\n", r.name, base.name,
					float64(r.heap)/float64(base.heap), base.took.Seconds()/r.took.Seconds())
			}
		}
	}
	ratios(results[0], results[1:len(results)-1])
	ratios(results[len(results)-1], results[:len(results)-1])
	fmt.Print(b.String())
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// heapInUse is the Go heap's bytes in live and not yet swept objects.
func heapInUse() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// rss is this process's resident set size (Linux), 0 when unknown.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}
