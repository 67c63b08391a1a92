package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/query"
)

// MaxLatest caps StreamFilter.Limit.
const MaxLatest = 1000

var _ collector.StreamReader = (*DB)(nil)

// LatestStreams returns stored streams of f.Site received at or after
// f.Since, newest first, at most f.Limit (default 100, at most MaxLatest),
// one per stream id (its newest row). Timelines are not filled in.
func (db *DB) LatestStreams(ctx context.Context, f collector.StreamFilter) ([]collector.Stream, error) {
	if f.Site == "" {
		return nil, errors.New("store: latest streams: no site")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, MaxLatest)
	// Two phases (query.TopRows): the newest rows' ids and times, reading
	// those two columns only, then every column of just those rows.
	where, args := "site = ? AND received_at >= ?", []any{f.Site, f.Since.UTC()}
	const order = " ORDER BY received_at DESC"
	keys, err := query.TopRows(ctx, db.conn, "itl_streams", where+order, args, limit)
	if err != nil {
		return nil, fmt.Errorf("store: latest streams: %w", err)
	}
	if len(keys) == 0 {
		return []collector.Stream{}, nil
	}
	kw, kargs := keys.Where()
	var rows []streamRow
	err = db.conn.Select(ctx, &rows, "SELECT "+streamColumns+" FROM itl_streams WHERE "+where+kw+order+
		" LIMIT 1 BY stream_id LIMIT ?", append(append(args, kargs...), limit)...)
	if err != nil {
		return nil, fmt.Errorf("store: latest streams: %w", err)
	}
	streams := make([]collector.Stream, 0, len(rows))
	for i := range rows {
		s, err := rows[i].stream()
		if err != nil {
			return nil, fmt.Errorf("store: latest streams: row %d: %w", i, err)
		}
		streams = append(streams, s)
	}
	return streams, nil
}
