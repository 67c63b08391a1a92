package promoter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/itlmon/itlmon/collector/store"
)

// legacyPageRows is the page size of the releases before itl_promote_pages
// (schema/017_promote_pages.sql): they recorded nothing, paged every window
// in 2,000 rows, and named a window's first page with the window's own
// token. A window they left cut in the middle is finished the same way.
const legacyPageRows = 2000

// paging is how a window is cut into pages: the page size, and how its
// pages' tokens are named.
//
// A page's inserts are deduplicated by their tokens alone, so a rerun of a
// cut run must cut it as the first run did: with another size, or another
// span of windows (span.go), a token would name other rows. The first
// promoter to start a window records the page size and the span it
// promotes it in, in itl_promote_pages (one row per window: a second insert
// at the same moment is deduplicated), before its first insert, and every
// run of the window promotes it by that row, whatever its own
// Config.PageRows.
//
// Tokens: a window of at most legacyPageRows records in one page is the
// whole window under any size, as it was for the earlier releases: its
// page has the window's own token. Other pages carry their size in their
// tokens, so a run that could not see the record (a collector of an
// earlier release) stores what it repeats twice instead of dropping rows;
// an earlier release's own run is finished under its tokens (legacy).
type paging struct {
	rows   int
	whole  bool // one page of at most legacyPageRows records: the window's token
	legacy bool // an earlier release's run: page 0 the window's token, then /p<n>
}

// pagingFor is the paging of a window of records records in pages of rows.
func pagingFor(records, rows int, legacy bool) paging {
	return paging{rows: rows, whole: records <= min(rows, legacyPageRows), legacy: legacy}
}

// token is page n's token, the window's being window.
func (pg paging) token(window string, n int) string {
	switch {
	case pg.whole:
		return window
	case pg.legacy && n == 0:
		return window
	case pg.legacy:
		return window + "/p" + strconv.Itoa(n)
	default:
		return window + "/r" + strconv.Itoa(pg.rows) + "/p" + strconv.Itoa(n)
	}
}

// promotePages is a row of itl_promote_pages.
type promotePages struct {
	Window    time.Time `ch:"promoted_window"`
	PageRows  uint32    `ch:"page_rows"`
	Legacy    bool      `ch:"legacy"`
	Windows   uint16    `ch:"windows"`
	Collector string    `ch:"collector"`
}

// record is what itl_promote_pages says of a run: its page size, whether
// an earlier release started it, and the windows it spans.
type record struct {
	rows    int
	legacy  bool
	windows int
}

// pagingOf records how run w is paged (its own page size, or the earlier
// release's if one started the window: its pages' ids are there without a
// row) and the windows it spans, and returns the row that landed: its own,
// or another promoter's that landed first (errRaced when that one spans
// other windows: the run starts again by it).
func (w *windowRun) pagingOf() (paging, error) {
	want := pagingFor(w.records, w.p.cfg.PageRows, false)
	if w.windows == 1 && w.records > legacyPageRows {
		var n uint64
		err := w.sh.Conn.QueryRow(w.ctx, "SELECT count() FROM itl_promoted_ids WHERE promoted_window = ?", w.start.Unix()).Scan(&n)
		if err != nil {
			return paging{}, fmt.Errorf("promoter: pages of the window: %w", err)
		}
		if n > 0 {
			want = pagingFor(w.records, legacyPageRows, true)
			w.p.log.Warn().Time("window", w.start).Uint64("promoted_ids", n).
				Msg("window started by a collector of an earlier release (pages of 2,000, not recorded): finishing it in its pages")
		}
	}
	row := []promotePages{{Window: w.start, PageRows: uint32(want.rows), Legacy: want.legacy, Windows: uint16(w.windows), Collector: w.p.cfg.Collector}}
	if err := store.InsertRows(w.ctx, w.sh.Conn, "itl_promote_pages", store.TokenSettings(w.windowToken+"/pages"), row); err != nil {
		return paging{}, fmt.Errorf("promoter: record the window's page size: %w", err)
	}
	// Another promoter's row may have landed first (then ours was
	// deduplicated): read the one that did.
	got, ok, err := readRecord(w.ctx, w.sh, w.start)
	if err == nil && !ok && w.sh.Replicas != "" {
		// Deduplicated against a row inserted on another replica, not
		// fetched here yet.
		if err := w.sh.Conn.Exec(w.ctx, "SYSTEM SYNC REPLICA itl_promote_pages"); err != nil {
			return paging{}, fmt.Errorf("promoter: sync replica: %w", err)
		}
		got, ok, err = readRecord(w.ctx, w.sh, w.start)
	}
	switch {
	case err != nil:
		return paging{}, err
	case !ok:
		return paging{}, errors.New("promoter: the window's page size was recorded but is not readable yet: tried again later")
	case got.windows != w.windows:
		return paging{}, errRaced
	}
	return w.pagingBy(got), nil
}

// errRaced: another promoter recorded the window first, spanning other
// windows than this run; the run starts again by its row.
var errRaced = errors.New("promoter: another promoter started the window over another span")

// pagingBy is the paging of run w by its recorded row.
func (w *windowRun) pagingBy(r record) paging {
	if r.rows != w.p.cfg.PageRows {
		w.p.log.Debug().Time("window", w.start).Int("page_rows", r.rows).Bool("legacy", r.legacy).
			Msg("window started in pages of another size: finishing it in those")
	}
	return pagingFor(w.records, r.rows, r.legacy)
}

// readRecord reads window start's itl_promote_pages row, if any.
func readRecord(ctx context.Context, sh Shard, start time.Time) (record, bool, error) {
	q, err := sh.Conn.Query(ctx, `SELECT page_rows, legacy, windows FROM itl_promote_pages
		WHERE promoted_window = ? ORDER BY recorded_at, collector LIMIT 1`, start.Unix())
	if err != nil {
		return record{}, false, fmt.Errorf("promoter: read the window's page size: %w", err)
	}
	defer q.Close()
	if !q.Next() {
		return record{}, false, q.Err()
	}
	var rows uint32
	var legacy bool
	var windows uint16
	if err := q.Scan(&rows, &legacy, &windows); err != nil {
		return record{}, false, fmt.Errorf("promoter: read the window's page size: %w", err)
	}
	if rows == 0 || windows == 0 {
		return record{}, false, fmt.Errorf("promoter: the window's recorded page size %d or span %d is 0", rows, windows)
	}
	return record{rows: int(rows), legacy: legacy, windows: int(windows)}, true, nil
}
