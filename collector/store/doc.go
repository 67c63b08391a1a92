// Package store keeps itlmon streams in ClickHouse (native protocol,
// clickhouse-go v2), with a local spool for when ClickHouse is unreachable.
//
// API summary:
//
//	db, err := store.Open(ctx, store.Options{DSN: "clickhouse://u:p@host:9000/db"})
//	db, err := store.Open(ctx, store.Options{Addr: e.NativeAddr(), Dial: e.DialContext,
//	                                         Database: "itlmon", CreateDatabase: true}) // embedded chdb engine
//	err = db.Migrate(ctx)                      // schema/*.sql in order, recorded in schema_migrations; idempotent;
//	                                           // under the schema lock (lease.go): one migrator at a time
//	err = db.WaitSchema(ctx)                   // returns once MigrateInBackground has applied the schema
//	w, err := store.NewWriter(db, store.WriterOptions{SpoolDir: filepath.Join(data, "spool")})
//	w.Submit(ctx, batch, done)                 // collector.Sink: blocks while the queue is full
//	w.Stats()                                  // counters/gauges for Prometheus (CounterFunc/GaugeFunc)
//	w.Shutdown(ctx)                            // drains the queue into ClickHouse or the spool
//	store.InsertStreams(ctx, conn, streams, token) // the promoter's exactly-once insert
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
// Batching: one goroutine collects Submits and flushes at MaxRows records
// or every FlushInterval, one insert into itl_inbox with an explicit column
// list, rows appended column by column in blocks of 1,024 rows (which the
// server squashes into one part). Up to WriterOptions.Inserts (2) inserts
// run at once while ClickHouse answers, so the next batch is built and
// sent while one waits for its parts' fsync; one at a time after a
// failure, until an insert succeeds (and always with Inserts 1, which
// costs a ClickHouse whose cores are busy less a record). While inserts
// fail, batches go straight to the spool for a jittered, doubling back-off
// (1 s to 30 s), and the error is logged once per 30 s. Only data errors
// (Refused) count as ClickHouse refusing rows; anything else is ClickHouse
// being unavailable.
//
// Exactly once: the writer lands records in itl_inbox at least once (a
// resend, a replay or another collector may land a copy); the promoter
// (collector/promoter) stores each once in the tables users read,
// using InsertStreams and InsertRows with TokenSettings. See
// schema/007_inbox.sql.
//
// Metrics: Writer.Stats returns counters and gauges; the command registers
// them as Prometheus CounterFunc/GaugeFunc.
package store
