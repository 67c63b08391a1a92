package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/itlmon/itlmon/collector"
)

// MaxLatest caps StreamFilter.Limit.
const MaxLatest = 1000

var _ collector.StreamReader = (*DB)(nil)

// LatestStreams returns stored streams of f.Site received at or after
// f.Since, newest first, at most f.Limit (default 100, at most MaxLatest),
// one per stream id. Timelines are not filled in.
func (db *DB) LatestStreams(ctx context.Context, f collector.StreamFilter) ([]collector.Stream, error) {
	if f.Site == "" {
		return nil, errors.New("store: latest streams: no site")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, MaxLatest)
	var rows []streamRow
	err := db.conn.Select(ctx, &rows, "SELECT "+streamColumns+" FROM itl_streams"+
		" WHERE site = ? AND received_at >= ?"+
		" ORDER BY received_at DESC LIMIT 1 BY stream_id LIMIT ?",
		f.Site, f.Since.UTC(), limit)
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
