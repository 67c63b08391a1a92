package store

import (
	"bytes"
	"context"
	"encoding/gob"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/schema"
)

// SpoolStreams appends streams to the spool in dir as one frame, as a writer
// does when an insert fails.
func SpoolStreams(dir string, streams []collector.Stream) error {
	sp, err := openSpool(dir, zerolog.Nop())
	if err != nil {
		return err
	}
	defer sp.Close()
	rows, bad := inboxRows(streams)
	if len(bad) > 0 {
		return bad[0]
	}
	p, err := encodeFrame(rows)
	if err != nil {
		return err
	}
	return sp.Append(p)
}

// SetInsertHook makes every insert on conn (a DB's Conn, which its writers
// and a promoter given it insert through) call hook(table, false) before
// sending and hook(table, true) after; an error from hook fails the insert.
// A second hook on conn replaces the first. The returned func removes
// conn's hook. Set it before starting a writer, remove it whenever.
func SetInsertHook(conn driver.Conn, hook func(table string, sent bool) error) (remove func()) {
	if _, replaced := insertHooks.Swap(conn, hook); !replaced {
		hooked.Add(1)
	}
	return func() {
		if _, ok := insertHooks.LoadAndDelete(conn); ok {
			hooked.Add(-1)
		}
	}
}

// SpoolBatches appends each batch as one frame, all to one new spool segment
// in dir, and returns the segment's path.
func SpoolBatches(dir string, batches ...[]collector.Stream) (string, error) {
	sp, err := openSpool(dir, zerolog.Nop())
	if err != nil {
		return "", err
	}
	defer sp.Close()
	num := sp.next
	for _, streams := range batches {
		rows, bad := inboxRows(streams)
		if len(bad) > 0 {
			return "", bad[0]
		}
		p, err := encodeFrame(rows)
		if err != nil {
			return "", err
		}
		if err := sp.Append(p); err != nil {
			return "", err
		}
	}
	return sp.path(num), nil
}

// SpooledStreamIDs returns the ids of the streams in every frame of the spool
// in dir (SpoolDir, or its quarantine).
func SpooledStreamIDs(dir string) (map[[16]byte]bool, error) {
	sp, err := openSpool(dir, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	defer sp.Close()
	ids := map[[16]byte]bool{}
	for _, num := range sp.sealed {
		frames, err := sp.Read(num)
		if err != nil {
			return nil, err
		}
		for _, f := range frames {
			rows, err := decodeFrame(f)
			if err != nil {
				return nil, err
			}
			for _, r := range rows {
				if r.Kind == KindClient {
					ids[[16]byte([]byte(r.StreamID))] = true
				}
			}
		}
	}
	return ids, nil
}

// MigrateUpTo applies the migrations up to version last only, as an older
// collector would have.
func (db *DB) MigrateUpTo(ctx context.Context, last uint32) error { return db.migrateUpTo(ctx, last) }

// WithSchemaLock runs migrate holding db's schema lock (creating its table
// first), with done as the check of whether anything is left to do, as a
// migration does.
func (db *DB) WithSchemaLock(ctx context.Context, done func(context.Context) (bool, error), migrate func(context.Context) error) error {
	for _, q := range bootstrapDDL() {
		if err := db.conn.Exec(ctx, q); err != nil {
			return err
		}
	}
	return db.withLease(ctx, db.conn, lockTable, db.database, done, migrate)
}

// MigrationAttempts counts MigrateInBackground's attempts so far.
func (db *DB) MigrationAttempts() int64 { return db.attempts.Load() }

// encodeBatch encodes b as a version 2 frame, as collectors before the inbox
// (schema/007_inbox.sql) spooled it.
func encodeBatch(b *rowBatch) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(2)
	if err := gob.NewEncoder(&buf).Encode(b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// SpoolLegacyStreams appends streams to the spool in dir as one version 2
// frame (itl_streams rows), as a collector before the inbox did.
func SpoolLegacyStreams(dir string, streams []collector.Stream) error {
	sp, err := openSpool(dir, zerolog.Nop())
	if err != nil {
		return err
	}
	defer sp.Close()
	b := newRowBatch(streams)
	p, err := encodeBatch(&b)
	if err != nil {
		return err
	}
	return sp.Append(p)
}

// MigrateClusterWith is MigrateCluster applying migs instead of the
// embedded schema.
func (db *DB) MigrateClusterWith(ctx context.Context, l ClusterLayout, migs []schema.Migration) error {
	return db.migrateCluster(ctx, l, migs)
}

// ClusterBootDDL and DistributedDDL are the statements MigrateCluster
// builds itself (the files' statements come from schema.Cluster).
func ClusterBootDDL(l ClusterLayout) []string { return bootDDL(l) }

func DistributedDDL(l ClusterLayout, table, key string) string { return distributedDDL(l, table, key) }

// A row kept past its batch's insert reads as zeros in every test.
func init() { poisonBatchMem = true }

// Inbox is what a Writer needs of ClickHouse, for a fake: a test's Writer
// on one (NewWriterOn) runs without a network, in a synctest bubble.
type Inbox interface {
	SchemaReady() error
	InsertInbox(ctx context.Context, parts ...[]InboxRow) error // the rows of parts, in order, as one insert; keeps none of their strings (InboxRow)
}

type inboxOf struct{ Inbox }

func (in inboxOf) insertInbox(ctx context.Context, parts ...[]InboxRow) error {
	return in.InsertInbox(ctx, parts...)
}

// NewWriterOn is NewWriter inserting through in instead of a DB.
func NewWriterOn(in Inbox, opts WriterOptions) (*Writer, error) { return newWriter(inboxOf{in}, opts) }

// SetBlockRows sets the rows of an insert's blocks until the test ends.
func SetBlockRows(tb interface{ Cleanup(func()) }, n int) {
	old := blockRows
	blockRows = n
	tb.Cleanup(func() { blockRows = old })
}

// encodeFrameV3 encodes rows as the gob frames of version 3 (the releases
// before the explicit codec wrote them): the benchmarks' baseline.
func encodeFrameV3(rows []InboxRow) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(frameV3)
	if err := gob.NewEncoder(&buf).Encode(inboxFrame{Rows: rows}); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// SpoolRawFrames appends each payload as one frame, as it is (a frame of
// any version), to a new spool segment in dir.
func SpoolRawFrames(dir string, payloads ...[]byte) error {
	sp, err := openSpool(dir, zerolog.Nop())
	if err != nil {
		return err
	}
	defer sp.Close()
	for _, p := range payloads {
		if err := sp.Append(p); err != nil {
			return err
		}
	}
	return nil
}

// SetMigrateHook makes Migrate call hook after statement k (from 1) of
// migration m; an error from hook cuts the migration there. Set it before
// migrating.
func (db *DB) SetMigrateHook(hook func(ctx context.Context, m schema.Migration, k int) error) {
	db.stmtHook = hook
}

// SetLeaseTiming sets the schema lock's lease length, renewal and poll
// periods. Set it before migrating.
func (db *DB) SetLeaseTiming(ttl, renew, poll time.Duration) {
	db.leaseTiming = leaseTiming{TTL: ttl, Renew: renew, Poll: poll}
}

// LeaseHolder is how db names itself in the schema lock.
func (db *DB) LeaseHolder() string { return db.holder }

// Bootstrap creates the tables Migrate uses itself (schema_migrations and
// the schema lock's), nothing else.
func (db *DB) Bootstrap(ctx context.Context) error {
	for _, q := range bootstrapDDL() {
		if err := db.conn.Exec(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// MigrateWith applies migs instead of the embedded schema (no TTL step).
func (db *DB) MigrateWith(ctx context.Context, migs []schema.Migration) error {
	return db.migrateWith(ctx, migs)
}

// StreamColumnList is itl_streams' insert column list.
var StreamColumnList = streamColumns

// StreamColumns are the columns of streams' itl_streams rows, as an insert
// appends them.
func StreamColumns(streams []collector.Stream) []any { return toColumns(newRowBatch(streams).Streams) }

// AppendColumns appends cols to b as an insert does, or, with whole, each
// column with one Append (the driver's reflective way for an Array column):
// the baseline of BenchmarkAppendColumns.
func AppendColumns(b driver.Batch, cols []any, whole bool) error {
	if !whole {
		return appendColumns(b, cols)
	}
	for i, c := range cols {
		if err := b.Column(i).Append(c); err != nil {
			return err
		}
	}
	return nil
}
