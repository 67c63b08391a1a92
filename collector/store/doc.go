// Package store keeps itlmon streams in ClickHouse (native protocol,
// clickhouse-go v2), with a local spool for when ClickHouse is unreachable.
//
// API summary:
//
//	db, err := store.Open(ctx, store.Options{DSN: "clickhouse://u:p@host:9000/db"})
//	db, err := store.Open(ctx, store.Options{Addr: e.NativeAddr(), Dial: e.DialContext,
//	                                         Database: "itlmon", CreateDatabase: true}) // embedded chdb engine
//	err = db.Migrate(ctx)                      // schema/*.sql in order, recorded in schema_migrations; idempotent
//	w, err := store.NewWriter(db, store.WriterOptions{SpoolDir: filepath.Join(data, "spool")})
//	w.Submit(ctx, streams, done)               // collector.Sink: blocks while the queue is full
//	w.Stats()                                  // counters/gauges for Prometheus (CounterFunc/GaugeFunc)
//	w.Shutdown(ctx)                            // drains the queue into ClickHouse or the spool
//	db.LatestStreams(ctx, collector.StreamFilter{...}) // collector.StreamReader, newest first
//	store.InsertDirect(ctx, db.Conn(), streams)  // one plain batch insert: the benchmark baseline
//	db.Close()
//
// Durability: done(nil) is called only once every row of a Submit is
// inserted into ClickHouse (the tables fsync their parts on insert), or
// appended to the spool and fsynced. If Submit returns an error, nothing was
// queued and done is never called. Spool segments are replayed when
// ClickHouse answers again (and at start, after a crash) and deleted only
// after their rows were inserted. A torn last frame (a crash mid-write) is
// detected by its length and CRC and dropped with a log line: it was never
// acknowledged.
//
// Batching: one goroutine collects Submits and flushes at MaxRows streams or
// every FlushInterval, one insert per table (itl_streams, itl_timelines)
// with an explicit column list, rows appended column by column. While
// inserts fail, batches go straight to the spool for a jittered, doubling
// back-off (1 s to 30 s), and the error is logged once per 30 s.
//
// Deduplication (a record resent after a lost ack must count once, in
// itl_streams and in the rollup, whose materialized view fires per insert):
// before each insert the writer drops duplicates within the batch and ids
// already in itl_stream_ids received since the batch's oldest row minus
// DedupWindow (24 h by default; one lookup per batch, covering resends and
// spool replays), and sends every insert with an insert_deduplication_token
// derived from its rows, so retrying an insert whose first try landed but
// whose answer was lost inserts nothing, views included. A batch's
// itl_timelines insert goes before its itl_streams insert, so a retry after
// either failed still writes each timeline once. Two collectors
// racing on one resend, or a resend later than the window, can still store
// a stream twice. See schema/002_stream_ids.sql.
//
// Metrics: Writer.Stats returns counters and gauges; the command registers
// them as Prometheus CounterFunc/GaugeFunc.
package store
