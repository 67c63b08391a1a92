package store

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/go-faster/city"
)

// A shard away: an insert through the Distributed itl_inbox with
// distributed_foreground_insert fails as a whole when one shard does not
// answer, and the shards that do answer keep nothing of it (the engine
// cancels their part). Every batch holds rows of every shard, so while one
// shard is away no shard would get a row: the shards that answer would
// promote nothing until it returns. landByShard inserts the failed batch's
// rows again, one insert per shard: the shards that answer get theirs at
// once (their windows are promoted meanwhile), the away shard's insert
// fails. The batch still counts as failed and is spooled and replayed
// whole, so what landed here lands once more later: a copy, which the
// promoter drops as it drops a resend (itl_promoted_ids).

// inboxShardKey is the value the Distributed itl_inbox is sharded by:
// ShardingKey gives it the cityHash64 of origin_id when not empty, else of
// stream_id.
func inboxShardKey(r *InboxRow) string {
	if r.OriginID != "" {
		return r.OriginID
	}
	return r.StreamID
}

// landByShard inserts rows through the Distributed itl_inbox with set, one
// insert per shard of db's cluster, and returns how many rows landed. It
// places a row as the Distributed engine does: cityHash64 of its key modulo
// the shards' total weight, the shards holding consecutive slots by weight
// in shard order. A layout whose key differs only makes the inserts fail
// like the batch did.
func (db *DB) landByShard(ctx context.Context, rows []InboxRow, set clickhouse.Settings) (int, error) {
	q, err := db.conn.Query(ctx, `SELECT shard_weight FROM system.clusters
		WHERE cluster = ? AND replica_num = 1 ORDER BY shard_num`, db.cluster)
	if err != nil {
		return 0, fmt.Errorf("read system.clusters: %w", err)
	}
	var slots []int // slot -> shard index
	for q.Next() {
		var w uint32
		if err := q.Scan(&w); err != nil {
			q.Close()
			return 0, fmt.Errorf("read system.clusters: %w", err)
		}
		shard := len(slots)
		if len(slots) > 0 {
			shard = slots[len(slots)-1] + 1
		}
		for range w {
			slots = append(slots, shard)
		}
	}
	q.Close()
	if err := q.Err(); err != nil {
		return 0, fmt.Errorf("read system.clusters: %w", err)
	}
	if len(slots) == 0 {
		return 0, nil
	}
	byShard := map[int][]InboxRow{}
	for i := range rows {
		s := slots[city.CH64([]byte(inboxShardKey(&rows[i])))%uint64(len(slots))]
		byShard[s] = append(byShard[s], rows[i])
	}
	if len(byShard) < 2 {
		return 0, nil // one shard's rows: the batch's own insert failed for them
	}
	landed := 0
	for _, part := range byShard {
		if insertRows(ctx, db.conn, "itl_inbox", inboxColumns, set, part) == nil {
			landed += len(part)
		}
	}
	return landed, nil
}
