package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/ext"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/wasm/meter"
)

// rowBatch is the unit of one flush, of one spool frame and of one replay.
type rowBatch struct {
	Streams   []streamRow
	Timelines []timelineRow
}

// newRowBatch turns streams into rows.
func newRowBatch(streams []collector.Stream) rowBatch {
	b := rowBatch{Streams: make([]streamRow, len(streams))}
	for i := range streams {
		b.Streams[i] = newStreamRow(&streams[i])
		if tl, ok := newTimelineRow(&streams[i]); ok {
			b.Timelines = append(b.Timelines, tl)
		}
	}
	return b
}

func (b *rowBatch) append(o rowBatch) {
	b.Streams = append(b.Streams, o.Streams...)
	b.Timelines = append(b.Timelines, o.Timelines...)
}

// spoolVersion is the first byte of every spool frame. Version 2: gob of a
// rowBatch. Version 1 (before schema/006_names.sql) had the format, status
// and causes as codes in fields of the names Format, Status, TTFTCause and
// StallCause; decodeBatch still reads it. A frame of an unknown version is
// kept on disk, never dropped.
const spoolVersion = 2

// v1Codes is what a version 1 frame holds that a version 2 rowBatch does not.
// gob matches fields by name: decoding a version 1 frame into a rowBatch
// skips these, decoding it into v1Codes reads only these.
type v1Codes struct {
	Streams []struct {
		Format, Status, TTFTCause uint8
		StallCause                []uint8
	}
}

var errSpoolVersion = errors.New("unknown spool frame version")

func encodeBatch(b *rowBatch) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(spoolVersion)
	if err := gob.NewEncoder(&buf).Encode(b); err != nil {
		return nil, fmt.Errorf("encode spool frame: %w", err)
	}
	return buf.Bytes(), nil
}

func decodeBatch(p []byte) (rowBatch, error) {
	var b rowBatch
	if len(p) == 0 || (p[0] != spoolVersion && p[0] != 1) {
		return b, errSpoolVersion
	}
	if err := gob.NewDecoder(bytes.NewReader(p[1:])).Decode(&b); err != nil {
		return b, fmt.Errorf("decode spool frame: %w", err)
	}
	if p[0] == 1 {
		var old v1Codes
		if err := gob.NewDecoder(bytes.NewReader(p[1:])).Decode(&old); err != nil {
			return b, fmt.Errorf("decode spool frame v1: %w", err)
		}
		if len(old.Streams) != len(b.Streams) {
			return b, fmt.Errorf("decode spool frame v1: %d rows, %d with codes", len(b.Streams), len(old.Streams))
		}
		for i := range b.Streams {
			row, o := &b.Streams[i], &old.Streams[i]
			row.FormatName = meter.Name(meter.FormatNames[:], o.Format)
			row.StatusName = meter.Name(meter.StatusNames[:], o.Status)
			row.TTFTCauseName = meter.Name(meter.CauseNames[:], o.TTFTCause)
			row.StallCauses = make([]string, len(o.StallCause))
			for k, c := range o.StallCause {
				row.StallCauses[k] = meter.Name(meter.CauseNames[:], c)
			}
		}
	}
	return b, nil
}

// dedupToken identifies a set of rows for insert_deduplication_token: the
// same rows retried get the same token, and ClickHouse drops the retry (and
// its materialized views' rows) if the first try landed.
func dedupToken(ids []string) string {
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// insertResult says what insertBatch did.
type insertResult struct {
	Inserted, Duplicates int
}

// insertHook, set only by tests, is called before (sent false) and after
// (sent true) each table's insert; an error it returns fails the insert, as
// a refused insert or a lost reply would.
var insertHook atomic.Pointer[func(table string, sent bool) error]

// insertBatch stores b: drops streams whose id is already stored or appears
// earlier in b, inserts the timelines of the rest into itl_timelines, then
// the rest into itl_streams, each with a deduplication token. A failed insert
// may be retried with the same b: nothing is counted twice.
//
// Timelines go first because fresh is computed against itl_stream_ids, which
// the itl_streams insert fills: until that insert lands a retry computes the
// same fresh set, so the same timelines with the same token, and ClickHouse
// drops them if the earlier try landed; once it has landed, the timelines
// have too. In the other order a retry after a failed timelines insert would
// find every id stored and never write the timelines.
func insertBatch(ctx context.Context, conn driver.Conn, b rowBatch, window time.Duration) (insertResult, error) {
	fresh, err := freshStreams(ctx, conn, b.Streams, window)
	if err != nil {
		return insertResult{}, err
	}
	res := insertResult{Inserted: len(fresh), Duplicates: len(b.Streams) - len(fresh)}
	keep := make(map[string]bool, len(fresh))
	ids := make([]string, len(fresh))
	for i := range fresh {
		keep[fresh[i].StreamID] = true
		ids[i] = fresh[i].StreamID
	}
	var tls []timelineRow
	var tlIDs []string
	for _, tl := range b.Timelines {
		if keep[tl.StreamID] {
			tls = append(tls, tl)
			tlIDs = append(tlIDs, tl.StreamID)
			delete(keep, tl.StreamID) // one timeline per stream
		}
	}
	if err := insertRows(ctx, conn, "itl_timelines", timelineColumns, dedupToken(tlIDs), tls); err != nil {
		return insertResult{}, err
	}
	if err := insertRows(ctx, conn, "itl_streams", streamColumns, dedupToken(ids), fresh); err != nil {
		return insertResult{}, err
	}
	return res, nil
}

// freshStreams returns the rows of streams whose id is not repeated earlier
// in rows and not stored since window before the oldest row was received.
func freshStreams(ctx context.Context, conn driver.Conn, rows []streamRow, window time.Duration) ([]streamRow, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	ids, err := ext.NewTable("batch_ids", ext.Column("id", "FixedString(16)"))
	if err != nil {
		return nil, fmt.Errorf("dedup table: %w", err)
	}
	seen := make(map[string]bool, len(rows))
	oldest := rows[0].ReceivedAt
	for i := range rows {
		if err := ids.Append(rows[i].StreamID); err != nil {
			return nil, fmt.Errorf("dedup table: %w", err)
		}
		if rows[i].ReceivedAt.Before(oldest) {
			oldest = rows[i].ReceivedAt
		}
	}
	q, err := conn.Query(clickhouse.Context(ctx, clickhouse.WithExternalTable(ids)),
		"SELECT DISTINCT stream_id FROM itl_stream_ids"+
			" WHERE received_at >= ? AND stream_id IN (SELECT id FROM batch_ids)", oldest.Add(-window))
	if err != nil {
		return nil, fmt.Errorf("dedup lookup: %w", err)
	}
	defer q.Close()
	for q.Next() {
		var id string
		if err := q.Scan(&id); err != nil {
			return nil, fmt.Errorf("dedup lookup: %w", err)
		}
		seen[id] = true
	}
	if err := q.Err(); err != nil {
		return nil, fmt.Errorf("dedup lookup: %w", err)
	}
	fresh := make([]streamRow, 0, len(rows))
	for i := range rows {
		if !seen[rows[i].StreamID] {
			seen[rows[i].StreamID] = true
			fresh = append(fresh, rows[i])
		}
	}
	return fresh, nil
}

// errUnencodable marks rows the driver refuses to encode: like a ClickHouse
// refusal, trying again cannot help.
var errUnencodable = errors.New("rows the driver cannot encode")

// refused reports whether err is ClickHouse (or the driver) refusing the
// rows themselves: the server answered with an exception other than those
// that pass (overload, timeouts, read-only, memory, too many parts), so the
// same insert would fail again, where an unreachable server would not.
func refused(err error) bool {
	if errors.Is(err, errUnencodable) {
		return true
	}
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) {
		return false
	}
	switch ex.Code {
	case 159, // TIMEOUT_EXCEEDED
		164, // READONLY
		202, // TOO_MANY_SIMULTANEOUS_QUERIES
		203, // NO_FREE_CONNECTION
		209, // SOCKET_TIMEOUT
		210, // NETWORK_ERROR
		236, // ABORTED
		241, // MEMORY_LIMIT_EXCEEDED
		242, // TABLE_IS_READ_ONLY
		252, // TOO_MANY_PARTS
		285, // TOO_FEW_LIVE_REPLICAS
		319, // UNKNOWN_STATUS_OF_INSERT
		394, // QUERY_WAS_CANCELLED
		425, // SYSTEM_ERROR
		999: // KEEPER_EXCEPTION
		return false
	}
	return true
}

// insertRows sends rows as one batch: PrepareBatch with an explicit column
// list, Append, Send.
func insertRows[R any](ctx context.Context, conn driver.Conn, table, columns, token string, rows []R) error {
	if len(rows) == 0 {
		return nil
	}
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"insert_deduplication_token": token,
	}))
	if hook := insertHook.Load(); hook != nil {
		if err := (*hook)(table, false); err != nil {
			return fmt.Errorf("insert %s: %w", table, err)
		}
	}
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+table+" ("+columns+")")
	if err != nil {
		return fmt.Errorf("prepare %s insert: %w", table, err)
	}
	defer batch.Close()
	if err := appendColumns(batch, toColumns(rows)); err != nil {
		return fmt.Errorf("append %s rows: %w: %w", table, errUnencodable, err)
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("insert %s: %w", table, err)
	}
	if hook := insertHook.Load(); hook != nil {
		if err := (*hook)(table, true); err != nil {
			return fmt.Errorf("insert %s: %w", table, err)
		}
	}
	return nil
}

// InsertDirect inserts streams with one plain batch per table: no queue, no
// dedup check, no spool. It is the baseline the ingest benchmarks compare the
// Writer with, and a tool for back-fills of rows known to be new.
func InsertDirect(ctx context.Context, conn driver.Conn, streams []collector.Stream) error {
	b := newRowBatch(streams)
	ids := make([]string, len(b.Streams))
	for i := range b.Streams {
		ids[i] = b.Streams[i].StreamID
	}
	if err := insertRows(ctx, conn, "itl_streams", streamColumns, dedupToken(ids), b.Streams); err != nil {
		return err
	}
	tlIDs := make([]string, len(b.Timelines))
	for i := range b.Timelines {
		tlIDs[i] = b.Timelines[i].StreamID
	}
	return insertRows(ctx, conn, "itl_timelines", timelineColumns, dedupToken(tlIDs), b.Timelines)
}
