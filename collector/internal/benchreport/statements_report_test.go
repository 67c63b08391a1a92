package benchreport

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/itlmon/itlmon/collector/query"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/internal/poll"
)

// TestDashboardStatements (make bench) times each statement of the two
// reads of raw rows the dashboard makes over long ranges, the worst
// streams (/api/worst, in each order) and a comparison (/api/compare),
// over 30 days of ITLMON_DASH_STREAMS streams (default 10,000,000,
// TestDashboardReport's rows), ITLMON_DASH_REPS runs after a warm-up, and
// the read's whole time: where a read's time goes, which
// TestDashboardReport's totals do not say.
// It seeds itl_streams with only the views these reads need
// (itl_streams_sample's, itl_rechunk_1h's; the rollups' dropped), in
// about a tenth of that report's time, then reads through collector/query
// (no HTTP). It asserts that the reads answer, never speed.
func TestDashboardStatements(t *testing.T) {
	benchReport(t)
	total := envInt(t, "ITLMON_DASH_STREAMS", 10_000_000)
	reps := envInt(t, "ITLMON_DASH_REPS", 7)
	conn, now := seedRawReads(t, total)
	ctx := context.Background()
	tc := &timedConn{Conn: conn}
	f := query.Filter{Site: "chat", Since: now.Add(-30 * 24 * time.Hour), Until: now}
	type read struct {
		name string
		run  func() error
	}
	var reads []read
	for _, order := range []string{"stalled", "jank", "ttft", "gap"} {
		reads = append(reads, read{"/api/worst?order=" + order + ", 30 days", func() error {
			got, err := query.WorstStreams(ctx, tc, f, order, 25)
			if err == nil && len(got) != 25 {
				err = fmt.Errorf("%d streams listed, want 25", len(got))
			}
			return err
		}})
	}
	reads = append(reads, read{"/api/compare?dim=release&a=web-2026.11.2&b=web-2026.11.3, 30 days", func() error {
		c, err := query.Compare(ctx, tc, f, "release", "web-2026.11.2", "web-2026.11.3")
		if err == nil && (c.StreamsA == 0 || c.StreamsB == 0) {
			err = fmt.Errorf("a side has no streams: %d and %d", c.StreamsA, c.StreamsB)
		}
		return err
	}})
	for _, read := range reads {
		var (
			totals []time.Duration
			each   = map[string][]time.Duration{}
			order  []string
		)
		for rep := 0; rep <= reps; rep++ {
			tc.take()
			t0 := time.Now()
			if err := read.run(); err != nil {
				t.Fatalf("%s: %v", read.name, err)
			}
			el := time.Since(t0)
			if rep == 0 {
				continue // the warm-up
			}
			totals = append(totals, el)
			for _, s := range tc.take() {
				key := s.label
				if !slices.Contains(order, key) {
					order = append(order, key)
				}
				each[key] = append(each[key], s.d)
			}
		}
		fmt.Printf("\n%s: p50 %.1f ms, p95 %.1f ms over %d runs; its statements (concurrent ones overlap), with their short text arguments:\n",
			read.name, msOf(quantileDur(totals, 0.5)), msOf(quantileDur(totals, 0.95)), reps)
		for _, key := range order {
			d := each[key]
			fmt.Printf("  p50 %7.1f ms  p95 %7.1f ms  (%d of %d runs)  %s\n", msOf(quantileDur(d, 0.5)), msOf(quantileDur(d, 0.95)), len(d), reps, key)
		}
	}
}

// seedRawReads seeds a new database with total streams over the 30 days
// before now (seedSQL) with only the views the reads of raw rows need,
// and waits for itl_streams' merges to settle.
func seedRawReads(t *testing.T, total int) (conn driver.Conn, now time.Time) {
	conn = chtest.NewMigratedDB(t, store.Options{}).Conn()
	ctx := context.Background()
	now = time.Now().UTC()

	var views []string
	rows, err := conn.Query(ctx, "SELECT name FROM system.tables WHERE database = currentDatabase() AND engine = 'MaterializedView'"+
		" AND name NOT IN ('itl_streams_sample_mv') AND name NOT LIKE 'itl_rechunk%'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		views = append(views, v)
	}
	rows.Close()
	for _, v := range views {
		if err := conn.Exec(ctx, "DROP VIEW "+v); err != nil {
			t.Fatal(err)
		}
	}
	const chunk = 500_000
	fmt.Printf("dashboard statements report: seeding %d streams over 30 days, the views of %s dropped\n", total, strings.Join(views, ", "))
	began := time.Now()
	for start := 0; start < total; start += chunk {
		if err := conn.Exec(ctx, seedSQL(now, start, min(chunk, total-start), total)); err != nil {
			msg, _, _ := strings.Cut(err.Error(), "In scope")
			t.Fatalf("seed rows %d..%d: %s", start, start+chunk, msg)
		}
	}
	fmt.Printf("seeded in %.1f s\n", time.Since(began).Seconds())

	// The reads are timed on the table as production holds it, not
	// while its parts from the seeding merge.
	t0 := time.Now()
	var n uint64
	poll.Until(15*time.Minute, 5*time.Second, func() bool {
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.merges WHERE database = currentDatabase()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	fmt.Printf("waited %.0f s for itl_streams' merges: %d running\n", time.Since(t0).Seconds(), n)
	return conn, now
}

// timedConn times each statement sent through it, from the call to the
// close of its rows.
type timedConn struct {
	query.Conn
	mu   sync.Mutex
	done []timedStatement
}

type timedStatement struct {
	label string // the statement's start and its short text arguments
	d     time.Duration
}

func (c *timedConn) Query(ctx context.Context, q string, args ...any) (driver.Rows, error) {
	t0 := time.Now()
	rows, err := c.Conn.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	label := strings.Join(strings.Fields(q), " ")
	if len(label) > 100 {
		label = label[:100] + "..."
	}
	var short []string
	for _, a := range args {
		if s, ok := a.(string); ok && len(s) <= 24 && strings.IndexFunc(s, func(r rune) bool { return r < ' ' || r > '~' }) < 0 {
			short = append(short, s)
		}
	}
	if len(short) > 0 {
		label += " [" + strings.Join(short, ", ") + "]"
	}
	return &timedRows{Rows: rows, c: c, label: label, t0: t0}, nil
}

// take returns the statements timed since the last call, in the order
// they finished.
func (c *timedConn) take() []timedStatement {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.done
	c.done = nil
	return out
}

type timedRows struct {
	driver.Rows
	c      *timedConn
	label  string
	t0     time.Time
	closed bool
}

func (r *timedRows) Close() error {
	err := r.Rows.Close()
	if !r.closed {
		r.closed = true
		r.c.mu.Lock()
		r.c.done = append(r.c.done, timedStatement{r.label, time.Since(r.t0)})
		r.c.mu.Unlock()
	}
	return err
}
