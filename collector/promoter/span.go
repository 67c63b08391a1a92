package promoter

import (
	"fmt"
	"time"
)

// Spans: a promoter behind promotes several sealed windows in one run.
//
// A run's inserts cost ClickHouse about the same whatever their size: an
// insert into itl_streams writes a part to each of its views' tables
// (TestReportSmallWindows: 0.3 to 0.6 s of the engine for one record on a
// busy 2-core machine), and a window with rows is promoted on its own. A
// shard with steady light traffic has rows in nearly every one-second
// window, so a run costing more than a second would leave it behind for
// good, however few records there are. When several windows are sealed
// (after an outage, a busy spell, a restart), the promoter takes them in
// one run of up to maxSpanWindows windows and at most one page of records
// (Config.PageRows): the run's reads and inserts are paid once for all of
// them, and the watermark moves past the last.
//
// A span is a window of several seconds: it is read, deduplicated and
// joined as one (a record's copies and a timeline's client record inside
// it are matched as they would be across windows: the join rule is the
// records', timeline.go), its pages carry a token of the first window and
// the span (/w<n>), its promoted ids the first window, and its
// itl_promoted row the last. Its span is recorded with its page size
// before its first insert (itl_promote_pages, paging.go), so every rerun
// after a cut takes the same windows; a window some run started without
// a record (a collector of an earlier release: its promoted ids are there)
// is promoted alone, as that run did.

// maxSpanWindows is the most windows one run spans.
const maxSpanWindows = 30

// MaxGather is the longest Config.Gather: the longest span.
const MaxGather = maxSpanWindows * Window

// sealedEnd is the end of the last sealed window: the server clock less
// the hold and the grace, and no later than the hold before the oldest
// inbox insert still running began.
func (p *Promoter) sealedEnd(f found) time.Time {
	limit := f.now.Add(-(p.cfg.Hold + p.cfg.Grace))
	if f.oldestRunning > 0 {
		began := f.now.Add(-time.Duration(f.oldestRunning * float64(time.Second)))
		limit = minTime(limit, began.Add(-p.cfg.Hold))
	}
	return limit.Truncate(Window)
}

// spanOf is how many windows run w, recorded by nobody yet, takes: the
// sealed ones before sealedEnd (at most maxSpanWindows) while their records
// fit in one page, up to the first holding a kind w's promoter does not
// know; 1 when the first window already has promoted ids (a run of it
// started without a record).
func (w *windowRun) spanOf(sealedEnd time.Time) (int, error) {
	end := minTime(sealedEnd, w.start.Add(time.Duration(w.p.maxSpan)*Window))
	if end.Sub(w.start) < 2*Window {
		return 1, nil
	}
	counts, err := countInbox(w.ctx, w.sh.Conn, w.start, end)
	if err != nil {
		return 0, err
	}
	type second struct {
		records int
		unknown bool
	}
	seconds := make([]second, int(end.Sub(w.start)/Window))
	for _, c := range counts {
		if i := int(c.window.Sub(w.start) / Window); i >= 0 && i < len(seconds) {
			seconds[i].records += int(c.rows)
			seconds[i].unknown = seconds[i].unknown || !w.p.kinds[c.kind]
		}
	}
	// The span ends before the first window that would take it past a page
	// or holds a kind this promoter cannot promote (then it is that
	// window's turn alone). Sealed windows without rows are taken too: no
	// row will land in them (the seal), and the watermark moves past them.
	windows, records := 1, seconds[0].records
	for _, sec := range seconds[1:] {
		records += sec.records
		if sec.unknown || records > w.p.cfg.PageRows {
			break
		}
		windows++
	}
	if windows > 1 {
		var n uint64
		if err := w.sh.Conn.QueryRow(w.ctx, "SELECT count() FROM itl_promoted_ids WHERE promoted_window = ?", w.start.Unix()).Scan(&n); err != nil {
			return 0, fmt.Errorf("promoter: windows to span: %w", err)
		}
		if n > 0 {
			return 1, nil
		}
	}
	return windows, nil
}
