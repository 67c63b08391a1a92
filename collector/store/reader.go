package store

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	//
	// The newest streams of a long range are nearly always in its last
	// day, which holds a thirtieth of a 30-day range's rows: that day is
	// read first. When it holds limit streams, they are the range's newest
	// (a stream received in the day sorts before every one received only
	// before it); else the whole range is read.
	const order = " ORDER BY received_at DESC"
	var (
		where string
		args  []any
		keys  query.RowKeys
		err   error
	)
	for _, since := range latestRanges(f.Since, time.Now()) {
		where, args = "site = ? AND received_at >= ?", []any{f.Site, since.UTC()}
		if keys, err = query.TopRows(ctx, db.conn, "itl_streams", where+order, args, limit); err != nil {
			return nil, fmt.Errorf("store: latest streams: %w", err)
		}
		if len(keys) == limit {
			break
		}
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

// latestFirst is the span LatestStreams reads first of a longer range.
const latestFirst = 24 * time.Hour

// latestRanges are the starts LatestStreams reads from, in turn, for a read
// of the streams since since at now: the last latestFirst first when the
// range is longer, then the whole range.
func latestRanges(since, now time.Time) []time.Time {
	if first := now.Add(-latestFirst); since.Before(first) {
		return []time.Time{first, since}
	}
	return []time.Time{since}
}
