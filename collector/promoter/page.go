package promoter

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/ext"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/itlmon/itlmon/collector/store"
)

// inboxRead is an itl_inbox row as the promoter reads it.
type inboxRead struct {
	store.InboxRow
	IngestedAt time.Time
	hash       uint64 // cityHash64(payload): the last key of the order
}

// recKey identifies a record for deduplication: a client record by its
// stream id, a timeline by its id, within a site.
type recKey struct{ kind, site, id string }

func keyOf(r *store.InboxRow) recKey { return recKey{r.Kind, r.Site, r.StreamID} }

// joinKey matches a client record to its timelines.
type joinKey struct{ site, originID string }

// inboxColumns are the columns readInbox and readPage scan.
const inboxColumns = `kind, site, stream_id, origin_id, received_at, ingested_at,
	country, region, browser, browser_major, os, device, payload, cityHash64(payload)`

// inboxOrder makes "the first copy" deterministic: a window's rows are read
// in this order, and a record's first copy is its first row.
const inboxOrder = `kind, site, stream_id, ingested_at, received_at, cityHash64(payload)`

func scanInbox(q driver.Rows) (inboxRead, error) {
	var r inboxRead
	err := q.Scan(&r.Kind, &r.Site, &r.StreamID, &r.OriginID, &r.ReceivedAt, &r.IngestedAt,
		&r.Country, &r.Region, &r.Browser, &r.BrowserMajor, &r.OS, &r.Device, &r.Payload, &r.hash)
	return r, err
}

// inboxCount is how many inbox rows of a kind one window holds.
type inboxCount struct {
	window time.Time
	kind   string
	rows   uint64
}

// countInbox counts the inbox rows of [start, end) per window (second) and
// kind, in window order.
func countInbox(ctx context.Context, conn driver.Conn, start, end time.Time) ([]inboxCount, error) {
	q, err := conn.Query(ctx, `SELECT toUnixTimestamp(ingested_at) AS second, kind, count() FROM itl_inbox
		WHERE ingested_at >= fromUnixTimestamp64Micro(?) AND ingested_at < fromUnixTimestamp64Micro(?)
		GROUP BY second, kind ORDER BY second`,
		micros(start), micros(end))
	if err != nil {
		return nil, fmt.Errorf("promoter: count the inbox: %w", err)
	}
	defer q.Close()
	var out []inboxCount
	for q.Next() {
		var second uint32
		var c inboxCount
		if err := q.Scan(&second, &c.kind, &c.rows); err != nil {
			return nil, fmt.Errorf("promoter: count the inbox: %w", err)
		}
		c.window = time.Unix(int64(second), 0).UTC()
		out = append(out, c)
	}
	return out, q.Err()
}

// windowKinds counts the inbox rows of [start, end) per kind, and lists
// the windows (seconds) holding any, in order.
func windowKinds(ctx context.Context, conn driver.Conn, start, end time.Time) (map[string]uint64, []time.Time, error) {
	counts, err := countInbox(ctx, conn, start, end)
	if err != nil {
		return nil, nil, err
	}
	kinds := map[string]uint64{}
	var windows []time.Time
	for _, c := range counts {
		kinds[c.kind] += c.rows
		if len(windows) == 0 || !windows[len(windows)-1].Equal(c.window) {
			windows = append(windows, c.window)
		}
	}
	return kinds, windows, nil
}

// readPages reads window [start, end) in one query, in inboxOrder, and
// calls page with each run of at most limit rows as they come (n from 0;
// prev is the last row of the page before, nil for the first). The server
// sends blocks of at most limit rows, and page's rows are reused after it
// returns: the collector holds one page, whatever the window's size. The
// order is total (a record's copies that tie on every key are the same
// bytes), so the pages are the same on any rerun: the window is sealed.
//
// The sort runs on one thread (max_threads = 1): sorting the rows with
// their payloads, it is the data moved between the threads' sorted blocks
// that costs, not the comparisons. Measured with 200,000 inbox rows of
// 120-token answers on two cores, read warm, three runs: 0.48-0.89 s of the
// engine's CPU against 0.96-1.45 s with the default threads, and no longer
// to the last row (0.62-1.07 s against 0.79-1.16); the promoter's
// parallelism is its pages in flight.
func readPages(ctx context.Context, conn driver.Conn, start, end time.Time, limit int,
	page func(n int, rows []inboxRead, prev *inboxRead) error) error {
	qctx, cancel := context.WithCancel(clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"max_block_size": limit, "max_threads": 1})))
	defer cancel()
	q, err := conn.Query(qctx, `SELECT `+inboxColumns+` FROM itl_inbox
		WHERE ingested_at >= fromUnixTimestamp64Micro(?) AND ingested_at < fromUnixTimestamp64Micro(?)
		ORDER BY `+inboxOrder, micros(start), micros(end))
	if err != nil {
		return fmt.Errorf("promoter: read inbox: %w", err)
	}
	defer q.Close()
	rows := make([]inboxRead, 0, min(limit, 1024))
	var prev inboxRead
	n := 0
	flush := func() error {
		var p *inboxRead
		if n > 0 {
			p = &prev
		}
		if err := page(n, rows, p); err != nil {
			return err
		}
		prev = rows[len(rows)-1]
		rows = rows[:0]
		n++
		return nil
	}
	for q.Next() {
		r, err := scanInbox(q)
		if err != nil {
			return fmt.Errorf("promoter: read inbox: %w", err)
		}
		rows = append(rows, r)
		if len(rows) == limit {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := q.Err(); err != nil {
		return fmt.Errorf("promoter: read inbox: %w", err)
	}
	if len(rows) > 0 {
		return flush()
	}
	return nil
}

// readInbox reads inbox rows matching where (with args), in inboxOrder.
// ids, if any, are sent as the external table want_ids(id String).
func readInbox(ctx context.Context, conn driver.Conn, where string, ids []string, args ...any) ([]inboxRead, error) {
	if len(ids) > 0 {
		var err error
		if ctx, err = withIDs(ctx, ids); err != nil {
			return nil, err
		}
	}
	q, err := conn.Query(ctx, `SELECT `+inboxColumns+` FROM itl_inbox WHERE `+where+` ORDER BY `+inboxOrder, args...)
	if err != nil {
		return nil, fmt.Errorf("promoter: read inbox: %w", err)
	}
	defer q.Close()
	var out []inboxRead
	for q.Next() {
		r, err := scanInbox(q)
		if err != nil {
			return nil, fmt.Errorf("promoter: read inbox: %w", err)
		}
		out = append(out, r)
	}
	if err := q.Err(); err != nil {
		return nil, fmt.Errorf("promoter: read inbox: %w", err)
	}
	return out, nil
}

// withIDs sends ids with the queries of ctx as the external table
// want_ids(id String).
func withIDs(ctx context.Context, ids []string) (context.Context, error) {
	t, err := ext.NewTable("want_ids", ext.Column("id", "String"))
	if err != nil {
		return ctx, fmt.Errorf("promoter: %w", err)
	}
	for _, id := range ids {
		if err := t.Append(id); err != nil {
			return ctx, fmt.Errorf("promoter: %w", err)
		}
	}
	return clickhouse.Context(ctx, clickhouse.WithExternalTable(t)), nil
}

// timelinesOf reads the timelines of kind whose id is one of ids and that
// reached the inbox in [from, to), per join key in inboxOrder.
func timelinesOf(ctx context.Context, conn driver.Conn, kind string, ids []string, from, to time.Time) (map[joinKey][]inboxRead, error) {
	out := map[joinKey][]inboxRead{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := readInbox(ctx, conn, "kind = ? AND ingested_at >= fromUnixTimestamp64Micro(?) AND ingested_at < fromUnixTimestamp64Micro(?) AND origin_id IN (SELECT id FROM want_ids)",
		ids, kind, micros(from), micros(to))
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		k := joinKey{r.Site, r.OriginID}
		out[k] = append(out[k], r)
	}
	return out, nil
}

// naming is a client record that names an origin id: its first copy.
type naming struct {
	at       time.Time // ingested_at
	streamID string
}

// readNaming reads, without payloads, the client records that name one of
// ids and reached the inbox in [from, to): per join key, the first copy of
// each record, in arrival order (ingested_at, then stream id).
func readNaming(ctx context.Context, conn driver.Conn, ids []string, from, to time.Time) (map[joinKey][]naming, error) {
	out := map[joinKey][]naming{}
	if len(ids) == 0 {
		return out, nil
	}
	ctx, err := withIDs(ctx, ids)
	if err != nil {
		return nil, err
	}
	q, err := conn.Query(ctx, `SELECT site, origin_id, stream_id, min(ingested_at) AS at FROM itl_inbox
		WHERE kind = ? AND ingested_at >= fromUnixTimestamp64Micro(?) AND ingested_at < fromUnixTimestamp64Micro(?)
		  AND origin_id IN (SELECT id FROM want_ids)
		GROUP BY site, origin_id, stream_id ORDER BY at, stream_id`, store.KindClient, micros(from), micros(to))
	if err != nil {
		return nil, fmt.Errorf("promoter: clients naming origin ids: %w", err)
	}
	defer q.Close()
	for q.Next() {
		var k joinKey
		var n naming
		if err := q.Scan(&k.site, &k.originID, &n.streamID, &n.at); err != nil {
			return nil, fmt.Errorf("promoter: clients naming origin ids: %w", err)
		}
		out[k] = append(out[k], n)
	}
	return out, q.Err()
}

// promotedBefore returns which of ids were promoted in a window in [from, to).
func promotedBefore(ctx context.Context, conn driver.Conn, ids []string, from, to time.Time) (map[recKey]bool, error) {
	known := map[recKey]bool{}
	if len(ids) == 0 {
		return known, nil
	}
	ctx, err := withIDs(ctx, ids)
	if err != nil {
		return nil, err
	}
	// The ids' 64-bit hashes first (id_hash, an integer set, 8 bytes a
	// row), then the ids of the rows that pass: the lookup reads the day's
	// rows whatever the granularity, as random ids spread over the sort
	// key, and the strings cost three times the integers (schema/019).
	q, err := conn.Query(ctx,
		`SELECT DISTINCT kind, site, stream_id FROM itl_promoted_ids
		 PREWHERE id_hash IN (SELECT cityHash64(id) FROM want_ids)
		 WHERE stream_id IN (SELECT id FROM want_ids) AND promoted_window >= fromUnixTimestamp64Micro(?) AND promoted_window < fromUnixTimestamp64Micro(?)`, micros(from), micros(to))
	if err != nil {
		return nil, fmt.Errorf("promoter: promoted ids: %w", err)
	}
	defer q.Close()
	for q.Next() {
		var k recKey
		if err := q.Scan(&k.kind, &k.site, &k.id); err != nil {
			return nil, fmt.Errorf("promoter: promoted ids: %w", err)
		}
		known[k] = true
	}
	return known, q.Err()
}

// uniq returns s sorted without repeats or "".
func uniq(s []string) []string {
	slices.Sort(s)
	s = slices.Compact(s)
	if len(s) > 0 && s[0] == "" {
		s = s[1:]
	}
	return s
}

func has[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}
