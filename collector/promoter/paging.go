package promoter

import (
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

// unrecordedRows is the most records of a window promoted without a record
// of its page size: it fits in one page of every collector, whose page size
// is at least this (--promote-page-rows), so every run of it is that one
// page under the window's own token. A larger window is recorded, even when
// it fits in one page of this promoter, so that no promoter of another size
// can cut it otherwise at the same moment.
const unrecordedRows = 100

// paging is how a window is cut into pages: the page size, and how its
// pages' tokens are named.
//
// A page's inserts are deduplicated by their tokens alone, so a rerun of a
// cut window must cut it as the first run did: with another size, a token
// would name other rows. The first promoter to start a window of more than
// unrecordedRows records its page size in itl_promote_pages (one row per
// window: a second insert at the same moment is deduplicated), and every
// run of the window pages it by that row, whatever its own
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
	Collector string    `ch:"collector"`
}

// pagingOf decides how window w is paged: by its itl_promote_pages row if
// it has one; in one page, unrecorded, if it fits in one page of any
// promoter (unrecordedRows) and of this one; else by the row this promoter
// records (its own size, or the earlier release's if one started the
// window: its pages' ids are there without a row), or by the row another
// promoter recorded first.
func (w *windowRun) pagingOf() (paging, error) {
	got, ok, err := w.readPaging()
	if err != nil || ok {
		return got, err
	}
	own := w.p.cfg.PageRows
	if w.records <= min(own, unrecordedRows) {
		return pagingFor(w.records, own, false), nil
	}
	want := pagingFor(w.records, own, false)
	if w.records > legacyPageRows {
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
	row := []promotePages{{Window: w.start, PageRows: uint32(want.rows), Legacy: want.legacy, Collector: w.p.cfg.Collector}}
	if err := store.InsertRows(w.ctx, w.sh.Conn, "itl_promote_pages", store.TokenSettings(w.token+"/pages"), row); err != nil {
		return paging{}, fmt.Errorf("promoter: record the window's page size: %w", err)
	}
	// Another promoter's row may have landed first (then ours was
	// deduplicated): read the one that did.
	if got, ok, err = w.readPaging(); err != nil || ok {
		return got, err
	}
	if w.sh.Replicas != "" {
		// Deduplicated against a row inserted on another replica, not
		// fetched here yet.
		if err := w.sh.Conn.Exec(w.ctx, "SYSTEM SYNC REPLICA itl_promote_pages"); err != nil {
			return paging{}, fmt.Errorf("promoter: sync replica: %w", err)
		}
		if got, ok, err = w.readPaging(); err != nil || ok {
			return got, err
		}
	}
	return paging{}, errors.New("promoter: the window's page size was recorded but is not readable yet: tried again later")
}

// readPaging reads the window's itl_promote_pages row, if any.
func (w *windowRun) readPaging() (paging, bool, error) {
	q, err := w.sh.Conn.Query(w.ctx, `SELECT page_rows, legacy FROM itl_promote_pages
		WHERE promoted_window = ? ORDER BY recorded_at, collector LIMIT 1`, w.start.Unix())
	if err != nil {
		return paging{}, false, fmt.Errorf("promoter: read the window's page size: %w", err)
	}
	defer q.Close()
	if !q.Next() {
		return paging{}, false, q.Err()
	}
	var rows uint32
	var legacy bool
	if err := q.Scan(&rows, &legacy); err != nil {
		return paging{}, false, fmt.Errorf("promoter: read the window's page size: %w", err)
	}
	if rows == 0 {
		return paging{}, false, errors.New("promoter: the window's recorded page size is 0")
	}
	got := pagingFor(w.records, int(rows), legacy)
	if got.rows != w.p.cfg.PageRows {
		w.p.log.Debug().Time("window", w.start).Int("page_rows", got.rows).Bool("legacy", legacy).
			Msg("window started in pages of another size: finishing it in those")
	}
	return got, true, nil
}
