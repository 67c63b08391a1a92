package join

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/rs/zerolog"
)

// writeQueue bounds the write requests waiting for the writer goroutine.
const writeQueue = 1024

// insertAttempts is how often one batch is tried before its requests fail.
const insertAttempts = 3

// rowWriter batches itl_origin rows: one insert per FlushInterval or MaxBatch
// rows. write waits until its rows are inserted (origin timelines: the
// reporter retries on error); writeAsync queues joined rows without waiting
// and drops them, counted, when the queue is full.
type rowWriter struct {
	conn     driver.Conn
	interval time.Duration
	maxBatch int
	log      zerolog.Logger

	in      chan writeReq
	mu      sync.RWMutex
	closed  bool
	closing chan struct{}
	done    chan struct{}

	written, dropped atomic.Uint64
}

type writeReq struct {
	rows []Row
	done chan error // nil for async
}

func newRowWriter(conn driver.Conn, interval time.Duration, maxBatch int, log zerolog.Logger) *rowWriter {
	w := &rowWriter{
		conn: conn, interval: interval, maxBatch: maxBatch, log: log,
		in: make(chan writeReq, writeQueue), closing: make(chan struct{}), done: make(chan struct{}),
	}
	go w.run()
	return w
}

func (w *rowWriter) stats() (written, dropped uint64) { return w.written.Load(), w.dropped.Load() }

func (w *rowWriter) write(ctx context.Context, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	req := writeReq{rows: rows, done: make(chan error, 1)}
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return ErrClosed
	}
	select {
	case w.in <- req:
		w.mu.RUnlock()
	case <-ctx.Done():
		w.mu.RUnlock()
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *rowWriter) writeAsync(rows []Row) {
	if len(rows) == 0 {
		return
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		w.dropped.Add(uint64(len(rows)))
		return
	}
	select {
	case w.in <- writeReq{rows: rows}:
	default:
		w.dropped.Add(uint64(len(rows)))
		w.log.Warn().Int("rows", len(rows)).Msg("itl_origin writer queue full; joined rows dropped")
	}
}

func (w *rowWriter) shutdown(ctx context.Context) error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.closing)
	}
	w.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *rowWriter) run() {
	defer close(w.done)
	var reqs []writeReq
	n := 0
	t := time.NewTimer(w.interval)
	t.Stop()
	flush := func() {
		t.Stop()
		if len(reqs) > 0 {
			w.flush(reqs, n)
		}
		clear(reqs)
		reqs, n = reqs[:0], 0
	}
	add := func(r writeReq) {
		if len(reqs) == 0 {
			t.Reset(w.interval)
		}
		reqs = append(reqs, r)
		if n += len(r.rows); n >= w.maxBatch {
			flush()
		}
	}
	for {
		select {
		case r := <-w.in:
			add(r)
		case <-t.C:
			flush()
		case <-w.closing:
			for {
				select {
				case r := <-w.in:
					add(r)
					continue
				default:
				}
				flush()
				return
			}
		}
	}
}

// flush inserts the rows of reqs as one batch and answers the requests.
func (w *rowWriter) flush(reqs []writeReq, n int) {
	rows := make([]Row, 0, n)
	for _, r := range reqs {
		rows = append(rows, r.rows...)
	}
	var err error
	for attempt := range insertAttempts {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
		}
		if err = w.insert(rows); err == nil {
			break
		}
	}
	if err == nil {
		w.written.Add(uint64(len(rows)))
	} else {
		w.log.Error().Err(err).Int("rows", len(rows)).Msg("insert itl_origin")
	}
	for _, r := range reqs {
		if r.done != nil {
			r.done <- err
		} else if err != nil {
			w.dropped.Add(uint64(len(r.rows)))
		}
	}
}

func (w *rowWriter) insert(rows []Row) error {
	h := sha256.New()
	for i := range rows {
		fmt.Fprintf(h, "%s\x00%s\x00%d\n", rows[i].Site, rows[i].OriginID, rows[i].Version)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"insert_deduplication_token": "itl_origin-" + hex.EncodeToString(h.Sum(nil)[:16]),
	}))
	batch, err := w.conn.PrepareBatch(ctx, "INSERT INTO itl_origin ("+rowColumns+")")
	if err != nil {
		return fmt.Errorf("prepare itl_origin insert: %w", err)
	}
	defer batch.Close()
	for i := range rows {
		if err := batch.AppendStruct(&rows[i]); err != nil {
			return fmt.Errorf("append itl_origin row: %w", err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("insert itl_origin: %w", err)
	}
	return nil
}
