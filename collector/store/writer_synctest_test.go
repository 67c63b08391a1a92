package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/store"
)

// The Writer's timing (batching, backoff, replay, quarantine, log rate) under
// testing/synctest: inside a bubble time only moves when every goroutine
// waits, so the tests read exact fake times and sleep no wall-clock time
// (every time.Sleep below is inside a bubble: it advances the fake clock).
// ClickHouse is a fake (store.NewWriterOn); the spool is real, on disk.

// The backoff's bounds (writer.go): after a failure with retry r the next
// attempt waits r/2 + r/4 + jitter, jitter in [0, r/2); r starts at 1 s and
// doubles up to 30 s.
const (
	minRetry = time.Second
	maxRetry = 30 * time.Second
)

// errDown is ClickHouse not answering: the writer backs off.
var errDown = errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")

// errRefused is ClickHouse refusing the rows themselves (a data error): the
// writer spools them and sets them aside in the end, without backing off live
// inserts.
var errRefused = fmt.Errorf("insert itl_inbox: %w", &clickhouse.Exception{Code: 53, Name: "TYPE_MISMATCH", Message: "bad row"})

// fakeInbox is ClickHouse as a Writer sees it: it records every insert with
// its (bubble) time and answers with what answer returns for the rows.
type fakeInbox struct {
	mu     sync.Mutex
	answer func(rows []store.InboxRow) error // nil: every insert succeeds
	schema error                             // SchemaReady's answer
	calls  []insertCall
}

type insertCall struct {
	at  time.Time
	ids []string
	err error
}

func (f *fakeInbox) SchemaReady() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.schema
}

func (f *fakeInbox) setSchema(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.schema = err
}

func (f *fakeInbox) InsertInbox(_ context.Context, parts ...[]store.InboxRow) error {
	rows := slices.Concat(parts...)
	f.mu.Lock()
	answer := f.answer
	f.mu.Unlock()
	var err error
	if answer != nil {
		err = answer(rows) // may block: outside the lock
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, insertCall{at: time.Now(), ids: rowIDs(rows), err: err})
	return err
}

func (f *fakeInbox) setAnswer(answer func(rows []store.InboxRow) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = answer
}

func (f *fakeInbox) snapshot() []insertCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func always(err error) func([]store.InboxRow) error {
	return func([]store.InboxRow) error { return err }
}

// logLine is a log line of the writer with the bubble time it was written.
type logLine struct {
	at       time.Time
	Level    string `json:"level"`
	Message  string `json:"message"`
	Error    string `json:"error"`
	Repeated int    `json:"repeated"`
}

// logSink collects a zerolog logger's lines.
type logSink struct {
	mu    sync.Mutex
	lines []logLine
}

func (s *logSink) Write(p []byte) (int, error) {
	var l logLine
	if err := json.Unmarshal(p, &l); err != nil {
		return 0, err
	}
	l.at = time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, l)
	return len(p), nil
}

// with returns the lines whose message is msg.
func (s *logSink) with(msg string) []logLine {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []logLine
	for _, l := range s.lines {
		if l.Message == msg {
			out = append(out, l)
		}
	}
	return out
}

// newFakeWriter starts a Writer on in, in the calling bubble, and shuts it
// down when the test ends (cleanups run inside the bubble).
func newFakeWriter(t *testing.T, in *fakeInbox, opts store.WriterOptions) (*store.Writer, *logSink) {
	t.Helper()
	if opts.SpoolDir == "" {
		opts.SpoolDir = t.TempDir()
	}
	logs := &logSink{}
	opts.Logger = zerolog.New(zerolog.MultiLevelWriter(logs, zerolog.NewTestWriter(t))).With().Timestamp().Logger()
	w, err := store.NewWriterOn(in, opts)
	if err != nil {
		t.Fatalf("new writer: %v", err)
	}
	t.Cleanup(func() {
		if err := w.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return w, logs
}

// inboxRow is client row i: its stream id (16 bytes, as a real one) names i.
func inboxRow(i int) store.InboxRow {
	return store.InboxRow{Kind: store.KindClient, Site: "s", StreamID: fmt.Sprintf("%016d", i),
		ReceivedAt: time.Unix(1_800_000_000, 0).UTC(), Payload: "p"}
}

func inboxRowsFrom(first, n int) []store.InboxRow {
	rows := make([]store.InboxRow, n)
	for i := range rows {
		rows[i] = inboxRow(first + i)
	}
	return rows
}

func rowIDs(rows []store.InboxRow) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = strings.Clone(r.StreamID) // the writer may reuse a row's bytes once it is done (InboxRow)
	}
	return ids
}

// queue submits rows and returns the channel their done writes to.
func queue(t *testing.T, w *store.Writer, rows []store.InboxRow) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	if err := w.SubmitRows(context.Background(), rows, func(err error) { done <- err }); err != nil {
		t.Fatalf("submit: %v", err)
	}
	return done
}

// stored submits rows and waits (in bubble time) for their done, which must
// be nil: inserted or spooled.
func stored(t *testing.T, w *store.Writer, rows []store.InboxRow) {
	t.Helper()
	if err := <-queue(t, w, rows); err != nil {
		t.Fatalf("done: %v", err)
	}
}

// failedCalls are the calls that failed, in order.
func failedCalls(calls []insertCall) []insertCall {
	var out []insertCall
	for _, c := range calls {
		if c.err != nil {
			out = append(out, c)
		}
	}
	return out
}

// checkBackoff checks the waits between consecutive failed attempts: after
// the k-th consecutive failure (retry r = minRetry doubled k-1 times, at most
// maxRetry) the next attempt comes at the first flush tick at or after the
// jittered deadline, so after [3r/4, 5r/4 + tick).
func checkBackoff(t *testing.T, failed []insertCall, tick time.Duration) {
	t.Helper()
	r := minRetry
	var ratios []float64
	for k := 1; k < len(failed); k++ {
		gap := failed[k].at.Sub(failed[k-1].at)
		if lo, hi := r/2+r/4, r/2+r/2+r/4+tick; gap < lo || gap >= hi {
			t.Errorf("attempt %d came %v after failure %d (retry %v): want [%v, %v)", k+1, gap, k, r, lo, hi)
		}
		ratios = append(ratios, float64(gap)/float64(r))
		r = min(2*r, maxRetry)
	}
	// Jitter: the waits are not a fixed fraction of the retry.
	if len(ratios) > 3 && slices.Max(ratios)-slices.Min(ratios) < 0.05 {
		t.Errorf("waits over retry %.3f: no jitter", ratios)
	}
}

func TestWriterBacksOffWhileClickHouseIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tick = 10 * time.Millisecond
		// Two spool segments left by an earlier run, replayed first.
		dir := t.TempDir()
		var earlier []string
		for range 2 {
			streams := makeStreams(3, "s", time.Now())
			if _, err := store.SpoolBatches(dir, streams); err != nil {
				t.Fatal(err)
			}
			for _, s := range streams {
				earlier = append(earlier, string(s.StreamID[:]))
			}
		}
		in := &fakeInbox{answer: always(errDown)}
		w, _ := newFakeWriter(t, in, store.WriterOptions{SpoolDir: dir, FlushInterval: tick})

		// The first batch is tried and spooled; the next one, a tick later,
		// is spooled without an attempt: the backoff is running.
		stored(t, w, inboxRowsFrom(0, 1))
		stored(t, w, inboxRowsFrom(1, 1))
		if calls := in.snapshot(); len(calls) != 1 {
			t.Fatalf("%d inserts tried, want 1 (the second batch came during the backoff)", len(calls))
		}
		if st := w.Stats(); st.RowsSpooled != 2 || st.InsertErrors != 1 || st.InboxRowsInserted != 0 {
			t.Fatalf("stats %+v: want 2 spooled, 1 insert error, none inserted", st)
		}

		// ClickHouse stays down: more batches, and replays of the spool,
		// each attempt only after the backoff.
		submitted := 2
		for len(failedCalls(in.snapshot())) < 9 {
			stored(t, w, inboxRowsFrom(submitted, 1))
			submitted++
			time.Sleep(500 * time.Millisecond)
		}
		failed := failedCalls(in.snapshot())
		checkBackoff(t, failed, tick)
		if calls := in.snapshot(); len(calls) != len(failed) {
			t.Fatalf("%d of %d attempts succeeded while ClickHouse was down", len(calls)-len(failed), len(calls))
		}

		// ClickHouse answers again: the first attempt after the backoff
		// replays the whole spool, oldest first, then live rows go in at
		// once.
		in.setAnswer(nil)
		before := len(in.snapshot())
		time.Sleep(maxRetry + maxRetry/2) // past the longest possible wait
		synctest.Wait()
		var replayed []string
		for _, c := range in.snapshot()[before:] {
			if c.err != nil {
				t.Fatalf("insert failed after recovery: %v", c.err)
			}
			replayed = append(replayed, c.ids...)
		}
		if want := append(slices.Clone(earlier), rowIDs(inboxRowsFrom(0, submitted))...); !slices.Equal(replayed, want) {
			t.Fatalf("replayed %d rows %q, want every spooled row oldest first %q", len(replayed), replayed, want)
		}
		if st := w.Stats(); st.RowsReplayed != uint64(len(earlier)+submitted) || st.SpoolSegments != 0 || st.SpoolBytes != 0 {
			t.Fatalf("stats %+v: want %d replayed, spool empty", st, len(earlier)+submitted)
		}
		at := time.Now()
		stored(t, w, inboxRowsFrom(submitted, 1))
		submitted++
		if c := in.snapshot(); c[len(c)-1].err != nil || !slices.Equal(c[len(c)-1].ids, rowIDs(inboxRowsFrom(submitted-1, 1))) ||
			c[len(c)-1].at.Sub(at) > tick {
			t.Fatalf("last insert %+v: want the live batch after recovery, inserted within a tick of %v", c[len(c)-1], at)
		}

		// Recovery reset the backoff: the next outage starts again at 1 s,
		// not at the 30 s the last one reached.
		in.setAnswer(always(errDown))
		before = len(in.snapshot())
		for len(in.snapshot()) < before+3 {
			stored(t, w, inboxRowsFrom(submitted, 1))
			submitted++
			time.Sleep(100 * time.Millisecond)
		}
		checkBackoff(t, in.snapshot()[before:before+3], tick)
	})
}

func TestWriterQuarantinesARefusedFrame(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tick = 100 * time.Millisecond
		// ClickHouse refuses every batch holding row 2 or row 5, and
		// stores every other one.
		poison := map[string]bool{inboxRow(2).StreamID: true, inboxRow(5).StreamID: true}
		in := &fakeInbox{answer: func(rows []store.InboxRow) error {
			for _, r := range rows {
				if poison[r.StreamID] {
					return errRefused
				}
			}
			return nil
		}}
		dir := t.TempDir()
		w, _ := newFakeWriter(t, in, store.WriterOptions{SpoolDir: dir, FlushInterval: tick})

		frame := inboxRowsFrom(0, 8)
		stored(t, w, frame) // refused, hence spooled
		// Live rows keep flowing, each inserted at the next tick, while the
		// replay of the refused frame backs off on its own.
		live := 100
		for w.Stats().RowsQuarantined == 0 {
			at := time.Now()
			row := inboxRowsFrom(live, 1)
			stored(t, w, row)
			i := slices.IndexFunc(in.snapshot(), func(c insertCall) bool { return slices.Equal(c.ids, rowIDs(row)) })
			if c := in.snapshot(); i < 0 || c[i].err != nil || c[i].at.Sub(at) > tick {
				t.Fatalf("live row %d not inserted within a tick of %v: inserts %+v", live, at, c)
			}
			live++
			if live > 200 {
				t.Fatal("the refused frame was never set aside")
			}
		}
		synctest.Wait()

		// The whole frame was tried live, then replayed and refused three
		// times with the replay's backoff in between (1 s, then 2 s,
		// jittered); the third refusal split it.
		var whole []insertCall
		for _, c := range in.snapshot() {
			if slices.Equal(c.ids, rowIDs(frame)) {
				whole = append(whole, c)
			}
		}
		if len(whole) != 4 {
			t.Fatalf("the refused frame was tried whole %d times, want 4 (live, then 3 replays)", len(whole))
		}
		if !whole[1].at.Equal(whole[0].at) {
			t.Errorf("first replay at %v, want at the live attempt's tick %v", whole[1].at, whole[0].at)
		}
		for k, r := range []time.Duration{minRetry, 2 * minRetry} {
			gap := whole[k+2].at.Sub(whole[k+1].at)
			if lo, hi := r/2+r/4, r+r/4+tick; gap < lo || gap >= hi {
				t.Errorf("replay %d came %v after replay %d: want [%v, %v)", k+2, gap, k+1, lo, hi)
			}
		}
		// Live inserts went on between the refusals.
		between := 0
		for _, c := range in.snapshot() {
			if c.err == nil && c.at.After(whole[1].at) && c.at.Before(whole[3].at) {
				between++
			}
		}
		if between < 10 {
			t.Errorf("%d live inserts during the replay's backoff, want one per tick", between)
		}

		// Every row of the frame but the refused ones is stored, once; the
		// refused ones are in the quarantine, and the spool is empty.
		stored := map[string]int{}
		for _, c := range in.snapshot() {
			if c.err == nil {
				for _, id := range c.ids {
					stored[id]++
				}
			}
		}
		for _, r := range frame {
			if want := map[bool]int{true: 0, false: 1}[poison[r.StreamID]]; stored[r.StreamID] != want {
				t.Errorf("row %s stored %d times, want %d", r.StreamID, stored[r.StreamID], want)
			}
		}
		q, err := store.SpooledStreamIDs(filepath.Join(dir, "quarantine"))
		if err != nil {
			t.Fatal(err)
		}
		if len(q) != len(poison) {
			t.Errorf("quarantine holds %d rows, want %d", len(q), len(poison))
		}
		for id := range q {
			if !poison[string(id[:])] {
				t.Errorf("row %s quarantined, but ClickHouse takes it", id)
			}
		}
		if st := w.Stats(); st.RowsQuarantined != 2 || st.RowsReplayed != 6 || st.SpoolSegments != 0 {
			t.Errorf("stats %+v: want 2 quarantined, 6 replayed, spool empty", st)
		}
	})
}

func TestWriterLogsARepeatingErrorOncePer30s(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const msg = "clickhouse insert failed; spooling"
		in := &fakeInbox{answer: always(errDown)}
		w, logs := newFakeWriter(t, in, store.WriterOptions{FlushInterval: 10 * time.Millisecond})
		stored(t, w, inboxRowsFrom(0, 1)) // spooled: replays keep failing
		time.Sleep(200 * time.Second)
		errOther := errors.New("code: 210, message: connection reset by peer")
		in.setAnswer(always(errOther))
		time.Sleep(maxRetry + maxRetry/2)
		in.setAnswer(nil)
		time.Sleep(maxRetry + maxRetry/2)
		synctest.Wait()

		calls := in.snapshot()
		failed := failedCalls(calls)
		lines := logs.with(msg)
		if len(failed) < 10 || len(lines) < 4 {
			t.Fatalf("%d failed attempts, %d logged: want a long outage", len(failed), len(lines))
		}
		// One line per 30 s of the outage, and one for the new error.
		if span := failed[len(failed)-1].at.Sub(failed[0].at); len(lines) > int(span/(30*time.Second))+2 {
			t.Errorf("%d lines in %v of failures: not rate limited", len(lines), span)
		}
		// Every failure is either logged or counted in the next line's
		// repeat count; a line comes at the first failure 30 s or more after
		// the previous line, or at once when the error changes.
		var last logLine
		suppressed, n := 0, 0
		for _, c := range failed {
			logged := n < len(lines) && lines[n].at.Equal(c.at)
			mustLog := n == 0 || c.err.Error() != last.Error || c.at.Sub(last.at) >= 30*time.Second
			switch {
			case mustLog && !logged:
				t.Fatalf("failure at %v (%v) not logged; last line at %v", c.at, c.err, last.at)
			case !mustLog && logged:
				t.Fatalf("failure at %v logged %v after the last line of the same error", c.at, c.at.Sub(last.at))
			case logged:
				if l := lines[n]; l.Error != c.err.Error() || l.Repeated != suppressed {
					t.Fatalf("line at %v: error %q repeated %d, want %q repeated %d", l.at, l.Error, l.Repeated, c.err, suppressed)
				}
				last, suppressed, n = lines[n], 0, n+1
			default:
				suppressed++
			}
		}
		if n != len(lines) {
			t.Fatalf("%d lines, %d of them at failures", len(lines), n)
		}
		// Recovery is logged once, with the failures not logged since.
		if rec := logs.with("clickhouse inserts work again"); len(rec) != 1 || rec[0].Repeated != suppressed {
			t.Fatalf("recovery lines %+v: want one with repeated %d", rec, suppressed)
		}
	})
}

func TestWriterShutdownSpoolsTheQueueWhenClickHouseIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		in := &fakeInbox{answer: func([]store.InboxRow) error {
			<-release // the first insert hangs, then fails
			return errDown
		}}
		dir := t.TempDir()
		const tick = 10 * time.Millisecond
		w, _ := newFakeWriter(t, in, store.WriterOptions{SpoolDir: dir, FlushInterval: tick})
		unblock := sync.OnceFunc(func() { close(release) })
		t.Cleanup(unblock) // before the writer's shutdown, should the test fail
		var dones []<-chan error
		dones = append(dones, queue(t, w, inboxRowsFrom(0, 1)))
		time.Sleep(tick)
		synctest.Wait() // the writer is stuck in the first insert, at the tick
		for i := 1; i < 6; i++ {
			dones = append(dones, queue(t, w, inboxRowsFrom(i, 1))) // queued behind it
		}
		synctest.Wait()
		for i, d := range dones {
			select {
			case err := <-d:
				// No insert succeeded yet: no second one runs beside it.
				t.Fatalf("done %d (%v) while the first insert hangs", i, err)
			default:
			}
		}
		shut := make(chan error, 1)
		go func() { shut <- w.Shutdown(context.Background()) }()
		synctest.Wait()
		if err := w.SubmitRows(context.Background(), inboxRowsFrom(6, 1), func(error) { t.Error("done of a refused submit") }); !errors.Is(err, store.ErrClosed) {
			t.Fatalf("submit during shutdown: %v, want ErrClosed", err)
		}
		select {
		case err := <-shut:
			t.Fatalf("shutdown returned %v while the writer is stuck", err)
		default:
		}
		in.setAnswer(always(errDown))
		unblock()
		if err := <-shut; err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		for i, d := range dones {
			if err := <-d; err != nil {
				t.Errorf("done %d: %v", i, err)
			}
		}
		if n := len(in.snapshot()); n != 1 {
			t.Errorf("%d inserts tried, want 1: ClickHouse was known down at shutdown", n)
		}
		ids, err := store.SpooledStreamIDs(dir)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			if id := inboxRow(i).StreamID; !ids[[16]byte([]byte(id))] {
				t.Errorf("row %s not in the spool", id)
			}
		}
		if len(ids) != 6 || w.Stats().RowsSpooled != 6 {
			t.Errorf("spool holds %d rows, stats say %d spooled: want 6", len(ids), w.Stats().RowsSpooled)
		}
	})
}

func TestWriterShutdownFlushesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := &fakeInbox{}
		w, _ := newFakeWriter(t, in, store.WriterOptions{FlushInterval: time.Hour})
		done := queue(t, w, inboxRowsFrom(0, 3))
		synctest.Wait()
		at := time.Now()
		if err := w.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if c := in.snapshot(); len(c) != 1 || len(c[0].ids) != 3 || !c[0].at.Equal(at) {
			t.Fatalf("inserts %+v: want the 3 queued rows at shutdown (%v), not at the next tick", c, at)
		}
	})
}

func TestWriterFlushesAtMaxRowsOrInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		in := &fakeInbox{}
		start := time.Now()
		w, _ := newFakeWriter(t, in, store.WriterOptions{FlushInterval: interval, MaxRows: 5})
		time.Sleep(300 * time.Millisecond)

		// 3 rows wait for more; 2 more make MaxRows: one insert of 5, now.
		a := queue(t, w, inboxRowsFrom(0, 3))
		synctest.Wait()
		if n := len(in.snapshot()); n != 0 {
			t.Fatalf("%d inserts of 3 rows below MaxRows before the interval", n)
		}
		b := queue(t, w, inboxRowsFrom(3, 2))
		synctest.Wait()
		c := in.snapshot()
		if len(c) != 1 || !slices.Equal(c[0].ids, rowIDs(inboxRowsFrom(0, 5))) || !c[0].at.Equal(start.Add(300*time.Millisecond)) {
			t.Fatalf("inserts %+v: want rows 0-4 in one insert at %v", c, start.Add(300*time.Millisecond))
		}
		for _, d := range []<-chan error{a, b} {
			if err := <-d; err != nil {
				t.Fatal(err)
			}
		}
		if st := w.Stats(); st.LastBatchRows != 5 || st.Inserts != 1 {
			t.Fatalf("stats %+v: want one insert of 5", st)
		}

		// 1 row waits for the interval's tick.
		stored(t, w, inboxRowsFrom(5, 1))
		c = in.snapshot()
		if len(c) != 2 || !slices.Equal(c[1].ids, rowIDs(inboxRowsFrom(5, 1))) || !c[1].at.Equal(start.Add(interval)) {
			t.Fatalf("inserts %+v: want row 5 alone at the tick %v", c, start.Add(interval))
		}
		// A submit of more than MaxRows goes in whole, at once.
		at := time.Now()
		stored(t, w, inboxRowsFrom(6, 7))
		c = in.snapshot()
		if len(c) != 3 || len(c[2].ids) != 7 || !c[2].at.Equal(at) {
			t.Fatalf("inserts %+v: want rows 6-12 in one insert at %v", c, at)
		}
		// Nothing pending, nothing inserted at later ticks.
		time.Sleep(10 * interval)
		if n := len(in.snapshot()); n != 3 {
			t.Fatalf("%d inserts, want 3: empty ticks insert nothing", n)
		}
	})
}

func TestWriterSpoolsUntilTheSchemaIsReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tick = 100 * time.Millisecond
		in := &fakeInbox{schema: fmt.Errorf("%w: clickhouse unreachable", store.ErrSchemaPending)}
		w, _ := newFakeWriter(t, in, store.WriterOptions{FlushInterval: tick})
		for i := range 5 {
			time.Sleep(time.Minute)
			stored(t, w, inboxRowsFrom(i, 1))
		}
		if n := len(in.snapshot()); n != 0 {
			t.Fatalf("%d inserts while the schema was pending", n)
		}
		if st := w.Stats(); st.RowsSpooled != 5 || st.InsertErrors != 0 {
			t.Fatalf("stats %+v: want 5 spooled, no insert error", st)
		}
		// Migrated: the next tick replays the spool, in order, without a
		// backoff (a pending schema is not a failed insert).
		in.setSchema(nil)
		at := time.Now()
		time.Sleep(tick)
		synctest.Wait()
		var replayed []string
		for _, c := range in.snapshot() {
			if c.at.Sub(at) > tick {
				t.Errorf("replay at %v, want within a tick of %v", c.at, at)
			}
			replayed = append(replayed, c.ids...)
		}
		if want := rowIDs(inboxRowsFrom(0, 5)); !slices.Equal(replayed, want) {
			t.Fatalf("replayed %q, want %q", replayed, want)
		}
	})
}

// TestWriterOverlapsInserts: once an insert succeeded, the next batch's
// insert starts while the first still waits for ClickHouse, up to Inserts
// at once; the batch after them waits for one to finish. After a failure
// they go one at a time again.
func TestWriterOverlapsInserts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := &fakeInbox{}
		w, _ := newFakeWriter(t, in, store.WriterOptions{MaxRows: 2, MinRows: 2, FlushInterval: time.Hour})
		stored(t, w, inboxRowsFrom(0, 2)) // ClickHouse answers: more than one insert may run
		if n, most := overlap(t, w, in, 2, 4); n != 2 || most != 2 {
			t.Fatalf("%d inserts running (at most %d), want 2: WriterOptions.Inserts' default", n, most)
		}
		if st := w.Stats(); st.InboxRowsInserted != 10 || st.Inserts != 5 || st.RowsSpooled != 0 {
			t.Fatalf("stats %+v: want 10 rows in 5 inserts, none spooled", st)
		}

		// A failure: the first attempt after the backoff runs alone.
		in.setAnswer(always(errDown))
		stored(t, w, inboxRowsFrom(10, 2))
		time.Sleep(maxRetry) // past the backoff
		if n, _ := overlap(t, w, in, 12, 3); n != 1 {
			t.Fatalf("%d inserts running after a failure, want 1 until one succeeds", n)
		}
	})
}

// TestWriterOneInsertAtATime: with Inserts 1 (--inbox-inserts 1) the next
// full batch waits for the insert in flight, however many are queued.
func TestWriterOneInsertAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := &fakeInbox{}
		w, _ := newFakeWriter(t, in, store.WriterOptions{MaxRows: 2, MinRows: 2, FlushInterval: time.Hour, Inserts: 1})
		stored(t, w, inboxRowsFrom(0, 2)) // ClickHouse answers
		if n, most := overlap(t, w, in, 2, 4); n != 1 || most != 1 {
			t.Fatalf("%d inserts running (at most %d), want 1 with Inserts 1", n, most)
		}
		if st := w.Stats(); st.InboxRowsInserted != 10 || st.RowsSpooled != 0 {
			t.Fatalf("stats %+v: want 10 rows inserted, none spooled", st)
		}
	})
}

// overlap queues full batches (of two rows) of rows from..., every insert
// held until all are queued and the writer waits; it returns how many
// inserts run then and the most that ran at once, and lets them all
// finish. In a synctest bubble.
func overlap(t *testing.T, w *store.Writer, in *fakeInbox, from, batches int) (n, most int) {
	t.Helper()
	var mu sync.Mutex
	running, peak := 0, 0
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	defer open() // a failed check leaves no insert hanging
	in.setAnswer(func([]store.InboxRow) error {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		<-gate
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	})
	var dones []<-chan error
	for i := range batches {
		dones = append(dones, queue(t, w, inboxRowsFrom(from+2*i, 2)))
	}
	synctest.Wait()
	mu.Lock()
	n, most = running, peak
	mu.Unlock()
	open()
	for i, d := range dones {
		if err := <-d; err != nil {
			t.Fatalf("done %d: %v", i, err)
		}
	}
	return n, most
}

// watchedContext counts the calls of its Done.
type watchedContext struct {
	context.Context
	looks atomic.Int32
}

func (c *watchedContext) Done() <-chan struct{} {
	c.looks.Add(1)
	return c.Context.Done()
}

// TestSubmitRoomLeavesContext: a Submit that finds room in the queue does
// not look at its context (ingest makes a batch's context only when
// something waits on it), and one that must wait does.
func TestSubmitRoomLeavesContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := &fakeInbox{}
		block := make(chan struct{})
		in.setAnswer(func([]store.InboxRow) error { <-block; return nil })
		w, _ := newFakeWriter(t, in, store.WriterOptions{QueueSize: 1, MaxRows: 1, Inserts: 1})
		ctx := &watchedContext{Context: context.Background()}
		var dones []chan error
		submit := func(c context.Context, i int) error {
			done := make(chan error, 1)
			dones = append(dones, done)
			return w.SubmitRows(c, inboxRowsFrom(i, 1), func(err error) { done <- err })
		}
		if err := submit(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if n := ctx.looks.Load(); n != 0 {
			t.Fatalf("a Submit with room looked at its context %d times, want 0", n)
		}
		// The first insert blocks: the next row waits in the writer, one
		// fills the queue, and the one after waits for room until its
		// context ends.
		synctest.Wait()
		if err := submit(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := submit(context.Background(), 2); err != nil {
			t.Fatal(err)
		}
		waiting, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		wctx := &watchedContext{Context: waiting}
		if err := submit(wctx, 3); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Submit on a full queue = %v, want context.DeadlineExceeded", err)
		}
		if wctx.looks.Load() == 0 {
			t.Fatal("a Submit that waited never looked at its context")
		}
		close(block)
		for _, d := range dones[:3] {
			if err := <-d; err != nil {
				t.Fatal(err)
			}
		}
	})
}
