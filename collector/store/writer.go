package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
)

const (
	defaultMaxRows       = 10_000
	defaultMinRows       = 1_000
	defaultFlushInterval = time.Second
	defaultQueueSize     = 4096
	// DefaultInserts is WriterOptions.Inserts' default: the next full
	// batch is built and sent while one waits for its parts' fsync. With
	// the engine pinned to one core, the ingest report's WebSocket path
	// cost it 1.1-2.8 µs more a record two at a time than one at a time
	// (over the 6-7 an inbox insert costs, for the same rows, parts and
	// merges); a direct insert of the same rows two at a time did not
	// cost it more, so the cause is not settled. The embedded engine on
	// two cores shared with the collector spent about the same either
	// way, and acked faster with two. --inbox-inserts 1 is for a
	// ClickHouse whose cores are all busy.
	DefaultInserts = 2
	// DefaultMaxSpoolBytes is WriterOptions.MaxSpoolBytes's default: at
	// about 1 KB a record, a million records, an hour of a busy site.
	DefaultMaxSpoolBytes = 1 << 30
	insertTimeout        = 30 * time.Second
	minRetry             = time.Second
	maxRetry             = 30 * time.Second
	errorLogInterval     = 30 * time.Second
	replayBudget         = 2 * time.Second // replay work per tick, so live rows keep flowing
	// quarantineAfter refusals of one spooled frame, with backoff between
	// them, and it is stored in parts: the streams ClickHouse refuses on
	// their own are set aside in SpoolDir/quarantine.
	quarantineAfter = 3
)

// ErrClosed is returned by Submit after Shutdown.
var ErrClosed = errors.New("store: writer shut down")

// WriterOptions configure NewWriter. SpoolDir is required.
type WriterOptions struct {
	SpoolDir string // local spool for when ClickHouse is unreachable (DATA/spool)
	// MaxSpoolBytes bounds the spool on disk: to append a batch beyond it
	// the oldest segments are deleted, their records counted as dropped and
	// logged. Default 1 GiB; negative: unbounded.
	MaxSpoolBytes int64
	MaxRows       int           // flush at this many records; default 10,000
	MinRows       int           // flush at this many once nothing more is queued (group commit); default 1,000
	FlushInterval time.Duration // flush at least this often; default 1 s
	QueueSize     int           // Submit calls queued before Submit blocks; default 4096
	// Inserts is how many live inserts may run at once while ClickHouse
	// answers (one at a time after a failure); default DefaultInserts (2).
	Inserts int
	Logger  zerolog.Logger
}

// Stats are the Writer's counters and gauges, for Prometheus
// (CounterFunc/GaugeFunc over Writer.Stats). Counters only grow.
type Stats struct {
	QueueDepth    int // Submit calls waiting for the writer (gauge)
	QueueCapacity int

	InboxRowsInserted uint64 // records of every kind (browser streams, origin and edge timelines) inserted into itl_inbox, replays included
	RowsSpooled       uint64 // records appended to the spool
	RowsReplayed      uint64 // records moved from the spool to ClickHouse
	RowsFailed        uint64 // records whose done got an error (neither inserted nor spooled)
	RowsQuarantined   uint64 // spooled records ClickHouse refuses, set aside in SpoolDir/quarantine
	RowsDropped       uint64 // spooled records deleted with the oldest segments to keep the spool within MaxSpoolBytes
	BytesDropped      uint64 // ... and their bytes

	Inserts       uint64  // successful batch inserts (live and replay)
	InsertErrors  uint64  // failed batch inserts
	InsertSeconds float64 // total time of successful inserts
	LastBatchRows int     // records in the last flushed batch (gauge)

	SpoolSegments int   // gauge
	SpoolBytes    int64 // gauge
}

// inbox is what a Writer needs of ClickHouse: *DB, or a fake in tests.
type inbox interface {
	SchemaReady() error
	// insertInbox inserts the rows of parts, in order, as one insert, and
	// keeps none of their strings once it returns (InboxRow).
	insertInbox(ctx context.Context, parts ...[]InboxRow) error
}

// Writer is the collector.Sink for ClickHouse: one goroutine batches the
// queued records into inserts into itl_inbox (up to Inserts at once), and
// spools a batch it cannot insert. Safe for concurrent use.
type Writer struct {
	db    inbox
	opts  WriterOptions
	log   zerolog.Logger
	queue chan job
	spool *spool // owned by run's goroutine

	mu        sync.RWMutex // held (read) by Submit while it sends to queue
	closed    bool
	closeOnce sync.Once
	closing   chan struct{} // closed by Shutdown: wakes blocked Submits
	drain     chan struct{} // closed by Shutdown after Submits are fenced off
	done      chan struct{} // closed when run returns

	// state of run's goroutine
	retryAt  time.Time // no insert attempts before this (ClickHouse down)
	healthy  bool      // the last insert succeeded: more than one may run at once
	retry    time.Duration
	lastErr  string
	lastLog  time.Time
	repeated int
	// Replay's own backoff, for a spooled frame ClickHouse refuses while it
	// answers: live inserts go on meanwhile. refusals counts them per frame.
	replayAt    time.Time
	replayRetry time.Duration
	refusals    map[frameKey]int
	quarantine  *spool // opened on first use

	st struct {
		inserted, spooled, replayed, failed  atomic.Uint64
		quarantined, dropped, droppedBytes   atomic.Uint64
		inserts, insertErrors, insertNanos   atomic.Uint64
		lastBatch, spoolSegments, spoolBytes atomic.Int64
	}
}

// frameKey names frame i of spool segment seg.
type frameKey struct {
	seg uint64
	i   int
}

// job is one Submit call.
type job struct {
	rows []InboxRow
	done func(error)
	mem  *batchMem // the memory of rows, given back once they are done (nil: none of the writer's)
}

var _ collector.Sink = (*Writer)(nil)

// NewWriter opens the spool and starts the writer. Spool segments left by an
// earlier run are replayed once ClickHouse answers.
func NewWriter(db *DB, opts WriterOptions) (*Writer, error) {
	return newWriter(db, opts)
}

func newWriter(db inbox, opts WriterOptions) (*Writer, error) {
	if opts.SpoolDir == "" {
		return nil, errors.New("store: no spool directory")
	}
	if opts.MaxRows <= 0 {
		opts.MaxRows = defaultMaxRows
	}
	if opts.MinRows <= 0 {
		opts.MinRows = min(defaultMinRows, opts.MaxRows)
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = defaultFlushInterval
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = defaultQueueSize
	}
	if opts.Inserts <= 0 {
		opts.Inserts = DefaultInserts
	}
	if opts.MaxSpoolBytes == 0 {
		opts.MaxSpoolBytes = DefaultMaxSpoolBytes
	}
	log := opts.Logger.With().Str("component", "writer").Logger()
	sp, err := openSpool(opts.SpoolDir, log)
	if err != nil {
		return nil, err
	}
	if opts.MaxSpoolBytes > 0 {
		// Segments of an eighth of the bound: making room deletes about
		// that much, not the whole spool.
		sp.segBytes = min(sp.segBytes, max(opts.MaxSpoolBytes/8, 4<<10))
	}
	w := &Writer{
		db: db, opts: opts, log: log, spool: sp, refusals: map[frameKey]int{},
		queue:   make(chan job, opts.QueueSize),
		closing: make(chan struct{}),
		drain:   make(chan struct{}),
		done:    make(chan struct{}),
		retry:   minRetry,
	}
	w.updateSpoolStats()
	if n := sp.Segments(); n > 0 {
		log.Info().Int("segments", n).Int64("bytes", sp.Bytes()).Msg("spool from an earlier run; replaying")
	}
	go w.run()
	return w, nil
}

// Submit queues a batch's streams (collector.Sink): their inbox rows are
// made before it returns. It blocks while the queue is full until ctx ends.
// If it returns an error nothing was queued and done is never called;
// otherwise done is called exactly once, from the writer's goroutine, with
// nil when every stream is inserted or spooled and fsynced.
func (w *Writer) Submit(ctx context.Context, b *collector.Batch, done func(error)) error {
	mem := getBatchMem()
	rows, bad := batchRowsIn(b, mem)
	w.unstorable(bad)
	return w.submit(ctx, job{rows: rows, done: done, mem: mem})
}

// SubmitStreams queues streams, with Submit's contract.
func (w *Writer) SubmitStreams(ctx context.Context, streams []collector.Stream, done func(error)) error {
	rows, bad := inboxRows(streams)
	w.unstorable(bad)
	return w.SubmitRows(ctx, rows, done)
}

// unstorable logs and counts the streams that could not be made inbox
// rows: they were checked at ingest and cannot be encoded again, a bug,
// not the sender's. The rest go on.
func (w *Writer) unstorable(bad []error) {
	for _, err := range bad {
		w.st.failed.Add(1)
		w.log.Error().Err(err).Msg("stream not stored")
	}
}

// SubmitRows queues inbox rows (ClientRow, OriginRow), with Submit's
// contract.
func (w *Writer) SubmitRows(ctx context.Context, rows []InboxRow, done func(error)) error {
	return w.submit(ctx, job{rows: rows, done: done})
}

// submit queues j, with Submit's contract.
func (w *Writer) submit(ctx context.Context, j job) error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return ErrClosed
	}
	select {
	case w.queue <- j: // room: ctx not looked at (a caller may make it lazily)
		return nil
	default:
	}
	select {
	case w.queue <- j:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-w.closing:
		return ErrClosed
	}
}

// Shutdown stops taking streams, flushes what is queued (to ClickHouse, or to
// the spool) and returns when done or when ctx ends.
func (w *Writer) Shutdown(ctx context.Context) error {
	w.closeOnce.Do(func() {
		close(w.closing) // wakes Submits blocked on a full queue
		w.mu.Lock()      // waits until no Submit is between its check and its send
		w.closed = true
		w.mu.Unlock()
		close(w.drain) // everything queued is now seen by run's last flush
	})
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats returns the current counters.
func (w *Writer) Stats() Stats {
	return Stats{
		QueueDepth:        len(w.queue),
		QueueCapacity:     cap(w.queue),
		InboxRowsInserted: w.st.inserted.Load(),
		RowsSpooled:       w.st.spooled.Load(),
		RowsReplayed:      w.st.replayed.Load(),
		RowsFailed:        w.st.failed.Load(),
		RowsQuarantined:   w.st.quarantined.Load(),
		RowsDropped:       w.st.dropped.Load(),
		BytesDropped:      w.st.droppedBytes.Load(),
		Inserts:           w.st.inserts.Load(),
		InsertErrors:      w.st.insertErrors.Load(),
		InsertSeconds:     time.Duration(w.st.insertNanos.Load()).Seconds(),
		LastBatchRows:     int(w.st.lastBatch.Load()),
		SpoolSegments:     int(w.st.spoolSegments.Load()),
		SpoolBytes:        w.st.spoolBytes.Load(),
	}
}

// run is the writer's goroutine: it owns the pending batch and the spool.
// Up to Inserts live inserts of full batches run at once (each on a
// goroutine of its own, handing its outcome back here): while one waits for
// ClickHouse (its part written and fsynced, or the network), the next full
// batch is built and sent. After a failure, one at a time until an insert
// succeeds again.
func (w *Writer) run() {
	defer close(w.done)
	defer w.spool.Close()
	defer func() {
		if w.quarantine != nil {
			w.quarantine.Close()
		}
	}()
	tick := time.NewTicker(w.opts.FlushInterval)
	defer tick.Stop()
	results := make(chan flushed, w.opts.Inserts)
	var pending []job
	rows, inFlight := 0, 0
	due := false       // the tick found rows while an insert was in flight
	replayDue := false // the tick's replay waits for the inserts in flight
	// start says whether the pending batch goes now: when nothing is in
	// flight, as soon as it is worth an insert (ready); beside inserts in
	// flight only as a full batch, while inserts succeed. Batches stay as
	// large as a serial writer's: a second insert never goes out half empty.
	start := func(ready bool) bool {
		if inFlight == 0 {
			return ready
		}
		return rows >= w.opts.MaxRows && inFlight < w.opts.Inserts && w.healthy
	}
	flush := func() {
		if w.begin(pending, results) {
			inFlight++
		}
		pending, rows, due = nil, 0, false
	}
	for {
		queue := w.queue
		if rows >= w.opts.MaxRows {
			queue = nil // a full batch waits for a free insert: Submits wait meanwhile
		}
		select {
		case j := <-queue:
			pending = append(pending, j)
			// Group commit: flush at MaxRows, or as soon as the queue is
			// drained with a batch worth an insert. Under load, batches
			// grow with what arrives during the inserts in flight; a
			// trickle waits for the tick (about one insert a second).
			if rows += len(j.rows); start(rows >= w.opts.MaxRows || rows >= w.opts.MinRows && len(w.queue) == 0) {
				flush()
			}
		case f := <-results:
			inFlight--
			w.end(f)
			if len(pending) > 0 && start(rows >= w.opts.MinRows || due) {
				flush()
			}
			if replayDue && inFlight == 0 {
				replayDue = false
				w.replay()
			}
		case <-tick.C:
			if len(pending) > 0 {
				if start(true) {
					flush()
				} else {
					due = true
				}
			}
			// The replay waits for the live inserts' outcome: whether
			// ClickHouse is down, and what they spooled.
			if inFlight == 0 {
				w.replay()
			} else {
				replayDue = true
			}
		case <-w.drain:
			pending = append(pending, w.queued()...)
			for ; inFlight > 0; inFlight-- {
				w.end(<-results)
			}
			if len(pending) > 0 && w.begin(pending, results) {
				w.end(<-results)
			}
			return
		}
	}
}

// queued takes every job left in the queue without waiting.
func (w *Writer) queued() []job {
	var jobs []job
	for {
		select {
		case j := <-w.queue:
			jobs = append(jobs, j)
		default:
			return jobs
		}
	}
}

// flushed is the outcome of storing jobs' rows: the insert's error
// (tried: an insert was made; else err says why none was).
type flushed struct {
	jobs  []job
	tried bool
	err   error
}

// rowsOf is the rows of jobs: each job's slice, not copied.
func rowsOf(jobs []job) [][]InboxRow {
	parts := make([][]InboxRow, len(jobs))
	for i, j := range jobs {
		parts[i] = j.rows
	}
	return parts
}

// begin starts storing the jobs' rows: an insert on a goroutine of its own,
// whose outcome goes to results for end (true); or, when ClickHouse cannot
// be tried now, the spool at once (false).
func (w *Writer) begin(jobs []job, results chan<- flushed) bool {
	if len(jobs) == 0 {
		return false
	}
	// The jobs' rows go to the insert as they are: copied into one slice
	// (a flush holds thousands), they were a twentieth of the collector's
	// CPU at saturation, and the copy doubled the memory of the rows in
	// flight.
	parts := rowsOf(jobs)
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	w.st.lastBatch.Store(int64(n))
	if err := w.ready(); err != nil {
		w.end(flushed{jobs: jobs, err: err})
		return false
	}
	go func() { results <- flushed{jobs: jobs, tried: true, err: w.send(parts...)} }()
	return true
}

// ready says why ClickHouse is not to be tried now, if it is not: its
// schema is not ready, or it is down and the retry time has not come.
func (w *Writer) ready() error {
	if err := w.db.SchemaReady(); err != nil {
		return err // DB.MigrateInBackground logs its state
	}
	if time.Now().Before(w.retryAt) {
		return errors.New("clickhouse down: waiting to retry")
	}
	return nil
}

// end completes what begin started: the retry state and the log after an
// insert, the spool for rows not inserted, then every job's done. Rows
// ClickHouse refuses do not mean it is down: they are logged, spooled, and
// set aside by the replay.
func (w *Writer) end(f flushed) {
	err := f.err
	if f.tried {
		switch {
		case err == nil:
			w.recovered()
		case refused(err):
			w.logError(err, "clickhouse refused a batch; spooled, and its refused streams will be set aside")
		default:
			w.failed(err)
		}
	}
	inserted := err == nil
	var rows []InboxRow
	if !inserted {
		rows = slices.Concat(rowsOf(f.jobs)...)
		err = w.toSpool(rows)
	}
	if err != nil {
		w.st.failed.Add(uint64(len(rows)))
	}
	for _, j := range f.jobs {
		j.done(err)
		// Its rows are in ClickHouse or the spool (copied), or refused to
		// the sender: nothing reads them again.
		putBatchMem(j.mem)
	}
	if inserted && w.spool.Segments() > 0 {
		w.replay() // ClickHouse is up: a good moment to empty the spool
	}
}

// send inserts the rows of parts, in order, and keeps the counters. It
// touches no state of run's goroutine: live inserts call it on goroutines
// of their own.
func (w *Writer) send(parts ...[]InboxRow) error {
	ctx, cancel := context.WithTimeout(context.Background(), insertTimeout)
	defer cancel()
	began := time.Now()
	if err := w.db.insertInbox(ctx, parts...); err != nil {
		w.st.insertErrors.Add(1)
		return err
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	w.st.inserts.Add(1)
	w.st.insertNanos.Add(uint64(time.Since(began)))
	w.st.inserted.Add(uint64(n))
	return nil
}

// tryInsert is send with the retry state reset on success, for the
// replay (on run's goroutine).
func (w *Writer) tryInsert(b []InboxRow) error {
	err := w.send(b)
	if err == nil {
		w.recovered()
	}
	return err
}

// toSpool appends b to the spool and fsyncs it, first making room within
// MaxSpoolBytes.
func (w *Writer) toSpool(b []InboxRow) error {
	p, err := encodeFrame(b)
	if err == nil {
		err = w.makeRoom(int64(len(p) + frameHeader))
	}
	if err == nil {
		err = w.spool.Append(p)
	}
	w.updateSpoolStats()
	if err != nil {
		w.log.Error().Err(err).Int("rows", len(b)).Msg("spool append failed: batch not stored")
		return err
	}
	w.st.spooled.Add(uint64(len(b)))
	return nil
}

// replay moves spool segments into ClickHouse, oldest first, for up to
// replayBudget. A segment is deleted only after all its frames were
// inserted; a segment cut short by a failure is replayed again from its
// start later, which the insert deduplication makes harmless. A segment that
// cannot be read (other than a torn tail) is kept on disk and skipped. A
// frame ClickHouse refuses while it answers is retried with replay's own
// backoff, and after quarantineAfter refusals stored in parts (see isolate),
// so it cannot hold up the frames after it.
func (w *Writer) replay() {
	began := time.Now()
	for time.Since(began) < replayBudget && !time.Now().Before(w.retryAt) && !time.Now().Before(w.replayAt) &&
		w.db.SchemaReady() == nil {
		num, ok := w.spool.Oldest()
		if !ok {
			return
		}
		frames, err := w.spool.Read(num)
		if err != nil {
			// Not a torn tail: acked frames may follow the bad one, so the
			// segment is neither replayed in part nor removed.
			w.log.Error().Err(err).Uint64("segment", num).
				Msg("spool segment corrupt or unreadable; kept on disk, skipped until restart")
			w.spool.Skip(num)
			w.updateSpoolStats()
			continue
		}
		for i, f := range frames {
			b, err := decodeFrame(f)
			if err != nil {
				w.log.Error().Err(err).Uint64("segment", num).Msg("spool segment unreadable; kept on disk, skipped until restart")
				w.spool.Skip(num)
				return
			}
			before := w.st.inserted.Load()
			if err := w.tryInsert(b); err != nil {
				if !refused(err) {
					w.failed(err)
					return
				}
				k := frameKey{num, i}
				if w.refusals[k]++; w.refusals[k] < quarantineAfter {
					w.replayRefused(err)
					return
				}
				if err := w.isolate(num, i, b); err != nil {
					return
				}
			}
			w.st.replayed.Add(w.st.inserted.Load() - before)
		}
		if err := w.spool.Remove(num); err != nil {
			w.failed(err)
			return
		}
		for k := range w.refusals {
			if k.seg == num {
				delete(w.refusals, k)
			}
		}
		w.replayRetry = 0
		w.updateSpoolStats()
		w.log.Info().Uint64("segment", num).Int("frames", len(frames)).Msg("spool segment replayed")
	}
}

// makeRoom deletes the oldest spool segments until need more bytes fit
// within MaxSpoolBytes, counting and logging what they held: when ClickHouse
// is away longer than the spool can hold, the newest records are kept.
// Segments set aside as unreadable stay (an operator's), and count.
func (w *Writer) makeRoom(need int64) error {
	limit := w.opts.MaxSpoolBytes
	if limit < 0 {
		return nil
	}
	if need > limit {
		return fmt.Errorf("spool: a batch of %d bytes is larger than the spool's bound (%d bytes)", need, limit)
	}
	for w.spool.Bytes()+need > limit {
		num, ok := w.spool.Oldest() // seals the open segment when it is the only one
		if !ok {
			return fmt.Errorf("spool: %d bytes of unreadable segments leave no room within its bound (%d bytes)", w.spool.Bytes(), limit)
		}
		before := w.spool.Bytes()
		records := 0
		if frames, err := w.spool.Read(num); err == nil {
			for _, f := range frames {
				if rows, err := decodeFrame(f); err == nil {
					records += len(rows)
				}
			}
		}
		if err := w.spool.Remove(num); err != nil {
			return err
		}
		for k := range w.refusals {
			if k.seg == num {
				delete(w.refusals, k)
			}
		}
		w.st.dropped.Add(uint64(records))
		w.st.droppedBytes.Add(uint64(before - w.spool.Bytes()))
		w.log.Error().Uint64("segment", num).Int("records", records).Int64("bytes", before-w.spool.Bytes()).
			Int64("max_bytes", limit).Msg("spool full: oldest segment deleted, its records lost (ClickHouse away too long; raise --spool-max)")
	}
	w.updateSpoolStats()
	return nil
}

func (w *Writer) updateSpoolStats() {
	w.st.spoolSegments.Store(int64(w.spool.Segments()))
	w.st.spoolBytes.Store(w.spool.Bytes())
}

// failed backs off further inserts with jitter and logs err.
func (w *Writer) failed(err error) {
	w.healthy = false
	w.retryAt, w.retry = backoff(w.retry)
	w.logError(err, "clickhouse insert failed; spooling")
}

// replayRefused backs off the replay alone after ClickHouse refused a spooled
// frame: live inserts are not held up by it.
func (w *Writer) replayRefused(err error) {
	w.replayAt, w.replayRetry = backoff(w.replayRetry)
	w.logError(err, "clickhouse refused a spooled batch; retrying it later")
}

// backoff returns when to try again after a failure, waiting about retry
// (at least minRetry) with jitter, and the wait for the next failure.
func backoff(retry time.Duration) (time.Time, time.Duration) {
	retry = max(retry, minRetry)
	jitter := time.Duration(rand.Int64N(int64(retry) / 2))
	return time.Now().Add(retry/2 + jitter + retry/4), min(2*retry, maxRetry)
}

// logError logs err, a repeating error once per errorLogInterval (logtail
// style).
func (w *Writer) logError(err error, msg string) {
	text := err.Error()
	if text == w.lastErr && time.Since(w.lastLog) < errorLogInterval {
		w.repeated++
		return
	}
	at := w.retryAt
	if w.replayAt.After(at) {
		at = w.replayAt
	}
	w.log.Error().Err(err).Int("repeated", w.repeated).Time("retry_at", at).Msg(msg)
	w.lastErr, w.lastLog, w.repeated = text, time.Now(), 0
}

// isolate stores frame i of segment seg, a batch ClickHouse keeps refusing,
// in halves, and those halves in halves, down to the streams it refuses on
// their own: these are appended to the quarantine spool (SpoolDir/quarantine),
// kept there for an operator, never deleted. It returns an error, and the
// frame is tried again later, when ClickHouse stops answering meanwhile or
// the quarantine cannot be written.
func (w *Writer) isolate(seg uint64, i int, b []InboxRow) error {
	var bad []InboxRow
	var why error
	var split func(b []InboxRow) error
	split = func(b []InboxRow) error {
		if len(b) == 1 {
			bad = append(bad, b...)
			return nil
		}
		for _, half := range halves(b) {
			err := w.tryInsert(half)
			if err != nil && refused(err) {
				why = err
				err = split(half)
			} else if err != nil {
				w.failed(err)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := split(b); err != nil {
		return err
	}
	if len(bad) == 0 {
		return nil
	}
	if w.quarantine == nil {
		q, err := openSpool(filepath.Join(w.opts.SpoolDir, "quarantine"), w.log)
		if err != nil {
			w.failed(err)
			return err
		}
		w.quarantine = q
	}
	p, err := encodeFrame(bad)
	if err == nil {
		err = w.quarantine.Append(p)
	}
	if err != nil {
		w.failed(fmt.Errorf("quarantine: %w", err))
		return err
	}
	w.st.quarantined.Add(uint64(len(bad)))
	w.log.Error().AnErr("clickhouse", why).Uint64("segment", seg).Int("frame", i).Int("records", len(bad)).
		Str("dir", w.quarantine.dir).Msg("clickhouse refuses these spooled streams; set aside in quarantine, the rest stored")
	return nil
}

// halves splits b in two.
func halves(b []InboxRow) [2][]InboxRow {
	n := len(b) / 2
	return [2][]InboxRow{b[:n:n], b[n:]}
}

// recovered resets the backoff after a successful insert.
func (w *Writer) recovered() {
	if w.lastErr != "" {
		w.log.Info().Int("repeated", w.repeated).Msg("clickhouse inserts work again")
	}
	w.retry, w.retryAt, w.lastErr, w.repeated = minRetry, time.Time{}, "", 0
	w.healthy = true
}
