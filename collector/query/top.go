package query

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// RowKey names one row of itl_streams: a stream and when it was received.
type RowKey struct {
	StreamID   string // the 16 raw bytes
	ReceivedAt time.Time
}

// RowKeys are rows of itl_streams, in the order they were found.
type RowKeys []RowKey

// TopRows is the first phase of a top-N read of table (itl_streams, or a
// table with its stream_id and received_at): the rows that
//
//	SELECT ... FROM table WHERE <whereOrder> LIMIT 1 BY stream_id LIMIT n
//
// returns, in that order, read from stream_id and received_at only (and
// what the WHERE and ORDER BY of whereOrder use). It asks for the first
// rows in that order without the LIMIT BY, which the engine can answer
// with a partial sort of the ORDER BY columns, keeps the first row of each
// stream, and asks for more rows only when copies of a stream (rows the
// table has not merged yet) left fewer than n streams. Reading the details
// of just these rows with the same ORDER BY, LIMIT 1 BY stream_id and
// LIMIT n then gives the one-phase result: each chosen row sorts first
// among its stream's rows.
func TopRows(ctx context.Context, conn Conn, table, whereOrder string, args []any, n int) (RowKeys, error) {
	for m := 2 * n; ; m *= 8 {
		rows, err := conn.Query(ctx, "SELECT stream_id, received_at FROM "+table+" WHERE "+whereOrder+" LIMIT "+strconv.Itoa(m), args...)
		if err != nil {
			return nil, err
		}
		var (
			keys RowKeys
			seen = map[string]bool{}
			got  int
		)
		for rows.Next() {
			var k RowKey
			if err := rows.Scan(&k.StreamID, &k.ReceivedAt); err != nil {
				rows.Close()
				return nil, fmt.Errorf("scan: %w", err)
			}
			got++
			if len(keys) < n && !seen[k.StreamID] {
				seen[k.StreamID] = true
				keys = append(keys, k)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if len(keys) == n || got < m {
			return keys, nil
		}
	}
}

// Where is the condition (" AND (...)") selecting ks's rows (and copies of
// them, which LIMIT 1 BY stream_id drops), and its arguments: one time and
// stream id per row, so the engine reads only the granules of those times.
// Times are passed as Unix milliseconds (received_at is DateTime64(3); a
// bound time.Time would lose its milliseconds).
func (ks RowKeys) Where() (string, []any) {
	args := make([]any, 0, 2*len(ks))
	var b strings.Builder
	b.WriteString(" AND (")
	for i, k := range ks {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("received_at = fromUnixTimestamp64Milli(?, 'UTC') AND stream_id = ?")
		args = append(args, k.ReceivedAt.UnixMilli(), k.StreamID)
	}
	b.WriteString(")")
	return b.String(), args
}
