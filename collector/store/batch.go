package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ClickHouse/clickhouse-go/v2"
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

// v1Codes is what a version 1 frame holds that a version 2 rowBatch does not.
// gob matches fields by name: decoding a version 1 frame into a rowBatch
// skips these, decoding it into v1Codes reads only these.
type v1Codes struct {
	Streams []struct {
		Format, Status, TTFTCause uint8
		StallCause                []uint8
	}
}

// inboxRows turns a version 1 or 2 frame's rows into inbox rows.
func (b *rowBatch) inboxRows() ([]InboxRow, error) {
	tls := make(map[string]timelineRow, len(b.Timelines))
	for _, tl := range b.Timelines {
		tls[tl.StreamID] = tl
	}
	rows := make([]InboxRow, 0, len(b.Streams))
	for i := range b.Streams {
		s, err := b.Streams[i].stream()
		if err != nil {
			return nil, fmt.Errorf("decode spool frame v2: %w", err)
		}
		if tl, ok := tls[b.Streams[i].StreamID]; ok {
			s.Timeline = tl.timeline()
		}
		row, err := ClientRow(&s)
		if err != nil {
			return nil, fmt.Errorf("decode spool frame v2: %w", err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// decodeBatch decodes a version 1 or 2 frame.
func decodeBatch(p []byte) (rowBatch, error) {
	var b rowBatch
	if len(p) == 0 || (p[0] != frameV2 && p[0] != frameV1) {
		return b, errSpoolVersion
	}
	if err := gob.NewDecoder(bytes.NewReader(p[1:])).Decode(&b); err != nil {
		return b, fmt.Errorf("decode spool frame: %w", err)
	}
	if p[0] == frameV1 {
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

// insertHooks, set only by tests, maps a connection to a func called
// before (sent false) and after (sent true) each table's insert on it; an
// error it returns fails the insert, as a refused insert or a lost reply
// would. Per connection, so that tests of other databases run beside one
// that sets a hook; hooked counts the hooks set, so that an insert looks
// at the map only while a test has one.
var (
	insertHooks sync.Map // driver.Conn → func(table string, sent bool) error
	hooked      atomic.Int32
)

// insertHook returns the hook set for conn, or nil.
func insertHook(conn driver.Conn) func(table string, sent bool) error {
	if hooked.Load() == 0 {
		return nil
	}
	if h, ok := insertHooks.Load(conn); ok {
		return h.(func(string, bool) error)
	}
	return nil
}

// insertInbox lands rows in itl_inbox: one plain insert, no deduplication
// (copies are the promoter's business). On a cluster the insert goes through
// the Distributed table and returns once the shards have the rows; when it
// fails, the rows of the shards that answer are landed anyway (landByShard).
//
// The rows are those of parts, in order, as one insert: the writer's
// batches are the rows of many Submits, inserted without copying them
// into one slice first.
func (db *DB) insertInbox(ctx context.Context, parts ...[]InboxRow) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n == 0 {
		return nil
	}
	ctx = WithServerCPU(ctx, &db.inboxCPU)
	set := clickhouse.Settings{}
	if db.cluster != "" {
		set["distributed_foreground_insert"] = 1
	}
	err := insertBlocks(ctx, db.conn, "itl_inbox", inboxColumns, set, n, inboxBlocks(parts))
	if err != nil && db.cluster != "" && !refused(err) && ctx.Err() == nil {
		// A shard may be away: the others get their rows now (shardsplit.go).
		if landed, lerr := db.landByShard(ctx, slices.Concat(parts...), set); landed > 0 || lerr != nil {
			db.log.Debug().Err(lerr).Int("rows", n).Int("landed", landed).Msg("inbox insert failed; landed the rows of the shards that answer")
		}
	}
	return err
}

// InboxServerCPU is the CPU (user and system) ClickHouse reported spending
// in this DB's inbox inserts so far, failed ones and those a cluster's
// shards were landed by included: the ProfileEvents the server sends back
// during each query. Merges, which the inserted parts cause later in the
// background, are not in it.
func (db *DB) InboxServerCPU() time.Duration {
	return time.Duration(db.inboxCPU.Load()) * time.Microsecond
}

// WithServerCPU is ctx with the server's CPU for its queries (the user and
// system time of every thread of theirs, as ProfileEvents report it) added
// to *us in microseconds.
func WithServerCPU(ctx context.Context, us *atomic.Int64) context.Context {
	return clickhouse.Context(ctx, clickhouse.WithProfileEvents(func(events []clickhouse.ProfileEvent) {
		var n int64
		for _, e := range events {
			if e.Type == "increment" && (e.Name == "UserTimeMicroseconds" || e.Name == "SystemTimeMicroseconds") {
				n += e.Value
			}
		}
		us.Add(n)
	}))
}

// InsertStreams inserts the timelines of streams into itl_timelines, then
// streams into itl_streams, each insert with insert_deduplication_token
// token+"/"+table and deduplicate_blocks_in_dependent_materialized_views:
// retried with the same streams in the same order and the same token, it
// completes what an earlier try left undone (a materialized view target
// included) and inserts nothing twice. The caller (the promoter) owns the
// token's uniqueness.
func InsertStreams(ctx context.Context, conn driver.Conn, streams []collector.Stream, token string) error {
	b := newRowBatch(streams)
	if err := insertRows(ctx, conn, "itl_timelines", timelineColumns, TokenSettings(token+"/itl_timelines"), b.Timelines); err != nil {
		return err
	}
	return insertRows(ctx, conn, "itl_streams", streamColumns, TokenSettings(token+"/itl_streams"), b.Streams)
}

// InsertRows inserts rows (structs whose fields carry `ch:"column"` tags, in
// table order or not) into table as one batch with the settings set (for
// example TokenSettings). The promoter's inserts outside this package use it.
func InsertRows[R any](ctx context.Context, conn driver.Conn, table string, set clickhouse.Settings, rows []R) error {
	return insertRows(ctx, conn, table, columnList[R](), set, rows)
}

// TokenSettings are the settings of an insert that must happen once: its
// deduplication token, applied to the materialized views it feeds too.
func TokenSettings(token string) clickhouse.Settings {
	return clickhouse.Settings{
		"insert_deduplication_token":                         token,
		"deduplicate_blocks_in_dependent_materialized_views": 1,
	}
}

// insertSettings are set with every insert, set's own settings winning.
// With low_cardinality_allow_in_native_format = 0 the server describes the
// table's LowCardinality(String) columns to the driver as String and
// converts what it receives: the driver appends plain strings instead of
// looking each value up in a dictionary it builds per column. Measured
// (BenchmarkInsertInbox, same run): the client's CPU per 10,000-row inbox
// insert 12-13 ms instead of 22, the engine's the same or less (it encodes
// the dictionaries of the part it writes either way); the rows stored are
// the same.
func insertSettings(set clickhouse.Settings) clickhouse.Settings {
	out := make(clickhouse.Settings, len(set)+1)
	out["low_cardinality_allow_in_native_format"] = 0
	for k, v := range set {
		out[k] = v
	}
	return out
}

// errUnencodable marks rows the driver refuses to encode: like a ClickHouse
// refusal, trying again cannot help.
var errUnencodable = errors.New("rows the driver cannot encode")

// refused reports whether err is ClickHouse (or the driver) refusing the
// rows themselves: a data error, which the same rows would meet again. Only
// the codes below count. Everything else (the server unreachable, an
// authentication or access error, a full disk, a missing table, overload)
// is ClickHouse being unavailable: the rows wait in the spool, whatever it
// takes, and are never set aside for it.
func refused(err error) bool {
	if errors.Is(err, errUnencodable) {
		return true
	}
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) {
		return false
	}
	return dataErrors[ex.Code]
}

// Refused is refused for other packages (the promoter).
func Refused(err error) bool { return refused(err) }

// dataErrors are the ClickHouse error codes that mean "these rows are
// wrong" (ClickHouse's src/Common/ErrorCodes.cpp).
var dataErrors = map[int32]bool{
	6:   true, // CANNOT_PARSE_TEXT
	27:  true, // CANNOT_PARSE_INPUT_ASSERTION_FAILED
	38:  true, // CANNOT_PARSE_DATE
	41:  true, // CANNOT_PARSE_DATETIME
	53:  true, // TYPE_MISMATCH
	69:  true, // ARGUMENT_OUT_OF_BOUND
	70:  true, // CANNOT_CONVERT_TYPE
	72:  true, // CANNOT_PARSE_NUMBER
	117: true, // INCORRECT_DATA
	131: true, // TOO_LARGE_STRING_SIZE
	190: true, // SIZES_OF_ARRAYS_DONT_MATCH
	321: true, // VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
	349: true, // CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN
	469: true, // VIOLATED_CONSTRAINT
}

// blockRows is the most rows insertRows puts in one block.
var blockRows = 1024

// insertRows sends rows as one batch: PrepareBatch with an explicit column
// list, Append, Send.
func insertRows[R any](ctx context.Context, conn driver.Conn, table, columns string, set clickhouse.Settings, rows []R) error {
	return insertBlocks(ctx, conn, table, columns, set, len(rows), func(cols []any, k, n int) []any {
		return toColumnsReusing(cols, rows[k:k+n])
	})
}

// insertBlocks is insertRows of n rows whose columns block makes: the
// columns of rows k to k+n-1, asked for in order, in the room of cols
// (the last block's, sent by then).
func insertBlocks(ctx context.Context, conn driver.Conn, table, columns string, set clickhouse.Settings, n int, block func(cols []any, k, n int) []any) error {
	if n == 0 {
		return nil
	}
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(insertSettings(set)))
	hook := insertHook(conn)
	if hook != nil {
		if err := hook(table, false); err != nil {
			return fmt.Errorf("insert %s: %w", table, err)
		}
	}
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+table+" ("+columns+")")
	if err != nil {
		return fmt.Errorf("prepare %s insert: %w", table, err)
	}
	defer batch.Close()
	// Blocks of blockRows, each sent before the next is built: the
	// driver's column buffers are reused from block to block instead of
	// growing (and being copied) to the whole insert's size, and the server
	// squashes the blocks of one INSERT into the same parts
	// (min_insert_block_size_rows).
	// The columns of a block are made in the room of the last block's
	// (sent by then, and copied by the driver when appended).
	var cols []any
	for k := 0; k < n; k += blockRows {
		if k > 0 {
			if err := batch.Flush(); err != nil {
				return fmt.Errorf("insert %s: %w", table, err)
			}
		}
		cols = block(cols, k, min(blockRows, n-k))
		if k == 0 {
			presize(batch, cols)
		}
		if err := appendColumns(batch, cols); err != nil {
			return fmt.Errorf("append %s rows: %w: %w", table, errUnencodable, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("insert %s: %w", table, err)
	}
	if hook != nil {
		if err := hook(table, true); err != nil {
			return fmt.Errorf("insert %s: %w", table, err)
		}
	}
	return nil
}

// presize makes room in the batch's String columns for blocks like cols
// (the first of an insert). clickhouse-go (v2.51) has no way to size a
// column: a String column's buffer grows by append, and its columns are new
// with every insert, so a block of inbox payloads (~600 KB) grew by ~35
// reallocations, a quarter larger each, copying ~5 times its bytes into
// fresh memory, every insert. One string as long as the column's strings
// and a quarter more, appended and taken back (Reset keeps the room),
// leaves the room at once. Columns under 64 KiB grow as they would.
func presize(batch driver.Batch, cols []any) {
	dst := batch.Columns()
	for i, c := range cols {
		s, ok := c.([]string)
		if !ok || i >= len(dst) || dst[i].Type() != "String" {
			continue
		}
		n := 0
		for _, v := range s {
			n += len(v)
		}
		if n += n / 4; n < 64<<10 {
			continue
		}
		n = min(n, len(zeros))
		if _, err := dst[i].Append([]string{unsafe.String(&zeros[0], n)}); err == nil {
			dst[i].Reset()
		}
	}
}

// zeros is what presize appends. Never written, its pages stay the
// system's shared zero page: it takes no memory.
var zeros [8 << 20]byte

// InsertDirect inserts streams with one plain batch per table: no queue, no
// dedup check, no spool. It is the baseline the ingest benchmarks compare the
// Writer with, and a tool for back-fills of rows known to be new.
func InsertDirect(ctx context.Context, conn driver.Conn, streams []collector.Stream) error {
	b := newRowBatch(streams)
	ids := make([]string, len(b.Streams))
	for i := range b.Streams {
		ids[i] = b.Streams[i].StreamID
	}
	if err := insertRows(ctx, conn, "itl_streams", streamColumns, TokenSettings(dedupToken(ids)), b.Streams); err != nil {
		return err
	}
	tlIDs := make([]string, len(b.Timelines))
	for i := range b.Timelines {
		tlIDs[i] = b.Timelines[i].StreamID
	}
	return insertRows(ctx, conn, "itl_timelines", timelineColumns, TokenSettings(dedupToken(tlIDs)), b.Timelines)
}
