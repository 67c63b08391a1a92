package promoter_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/promoter"
	"github.com/itlmon/itlmon/collector/store"
)

// TestReportSmallWindows (make bench, ITLMON_BENCH_REPORT=1): the fixed
// cost of a window. A shard with steady light traffic has rows in nearly
// every one-second window, each promoted on its own, so a window's fixed
// cost bounds the traffic a shard keeps up with: above one second a window,
// it falls behind for good however few records there are. Windows of one
// client record and its origin timeline, and of ten of each, are promoted
// by one promoter (CatchUp: no seal to wait for, they are an hour old)
// window by window, in runs of five windows (what Config.Gather 5 s makes
// of steady light traffic) and in spans (several sealed windows a run, as
// a promoter behind takes them: span.go), against the baseline of a direct
// insert of the same client records into itl_streams, one insert per
// window, in the same run. Rounds alternate the four. It asserts only
// that every record was promoted once.
func TestReportSmallWindows(t *testing.T) {
	if os.Getenv("ITLMON_BENCH_REPORT") != "1" {
		t.Skip("set ITLMON_BENCH_REPORT=1 (make bench) to run the reports")
	}
	const (
		windows = 40
		rounds  = 3
	)
	var b strings.Builder
	fmt.Fprintf(&b, "promoter small-window report: %d windows a round, one promoter, %d rounds (best / median / worst, ms a window)\n", windows, rounds)
	for _, perWindow := range []int{1, 10} {
		var single, gathered, spans, direct []time.Duration
		for range rounds {
			single = append(single, promoteWindows(t, windows, perWindow, 1))
			gathered = append(gathered, promoteWindows(t, windows, perWindow, gatherWindows))
			spans = append(spans, promoteWindows(t, windows, perWindow, 0))
			direct = append(direct, insertWindows(t, windows, perWindow))
		}
		for _, d := range [][]time.Duration{single, gathered, spans, direct} {
			slices.Sort(d)
		}
		per := func(d []time.Duration) string {
			f := func(d time.Duration) string {
				return strconv.FormatFloat(float64(d.Microseconds())/1000/windows, 'f', 1, 64)
			}
			return f(d[0]) + " / " + f(d[rounds/2]) + " / " + f(d[rounds-1])
		}
		ratio := func(a, b []time.Duration) float64 { return a[rounds/2].Seconds() / b[rounds/2].Seconds() }
		fmt.Fprintf(&b, "  %2d client record(s) and origin timeline(s) a window:\n", perWindow)
		fmt.Fprintf(&b, "    promoted window by window  %s\n", per(single))
		fmt.Fprintf(&b, "    promoted %d windows a run   %s (--promote-gather %ds at steady light traffic)\n", gatherWindows, per(gathered), gatherWindows)
		fmt.Fprintf(&b, "    promoted in spans          %s\n", per(spans))
		fmt.Fprintf(&b, "    direct insert, one a window %s (the baseline)\n", per(direct))
		fmt.Fprintf(&b, "    median ratios: window by window / direct %.2fx, %d a run / window by window %.2fx, spans / direct %.2fx, spans / window by window %.2fx\n",
			ratio(single, direct), gatherWindows, ratio(gathered, single), ratio(spans, direct), ratio(spans, single))
	}
	fmt.Print(b.String())
}

// gatherWindows: the runs of --promote-gather 5s at steady light traffic.
const gatherWindows = 5

// windowStreams are n windows of perWindow client records each.
func windowStreams(n, perWindow int) [][]collector.Stream {
	out := make([][]collector.Stream, n)
	for w := range out {
		for i := range perWindow {
			out[w] = append(out[w], clientOf(pausedOrigin(fmt.Sprintf("small-%d-%d", w, i)), "chat"))
		}
	}
	return out
}

// promoteWindows lands n windows of perWindow client records and their
// origin timelines an hour ago in a fresh database's inbox and times one
// promoter's CatchUp over them, spanning at most maxSpan windows a run (0:
// the default).
func promoteWindows(t *testing.T, n, perWindow, maxSpan int) time.Duration {
	t.Helper()
	db := newDB(t)
	ctx := t.Context()
	// Each window's rows received (and ingested) a second after the last's:
	// inserts of now would share windows.
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	var rows []store.InboxRow
	for i, w := range windowStreams(n, perWindow) {
		at := base.Add(time.Duration(i) * time.Second)
		for _, s := range w {
			c, err := store.ClientRow(&s)
			if err != nil {
				t.Fatal(err)
			}
			o := pausedOrigin(s.OriginID)
			or, err := store.OriginRow("chat", at, &o)
			if err != nil {
				t.Fatal(err)
			}
			c.ReceivedAt = at
			rows = append(rows, c, or)
		}
	}
	landInbox(t, db, rows)
	p, err := promoter.New([]promoter.Shard{{Conn: db.Conn()}}, promoter.Config{
		Hold: 100 * time.Millisecond, Grace: 50 * time.Millisecond, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if maxSpan > 0 {
		p.SetMaxSpan(maxSpan)
	}
	began := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	err = p.CatchUp(cctx)
	cancel()
	took := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Streams != uint64(n*perWindow) || st.Joined != uint64(n*perWindow) {
		t.Fatalf("promoter stats %+v: want %d streams, each joined", st, n*perWindow)
	}
	return took
}

// insertWindows inserts n windows of perWindow client records into a fresh
// database's itl_streams, one insert each: the baseline.
func insertWindows(t *testing.T, n, perWindow int) time.Duration {
	t.Helper()
	db := newDB(t)
	ws := windowStreams(n, perWindow)
	began := time.Now()
	for i, w := range ws {
		if err := store.InsertStreams(t.Context(), db.Conn(), w, "small/"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	return time.Since(began)
}
