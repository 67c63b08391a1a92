package store_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/internal/freeport"
	"github.com/itlmon/itlmon/internal/poll"
)

// acked collects the ids of streams whose done reported success.
type acked struct {
	mu  sync.Mutex
	ids map[[16]byte]int
	err error
	wg  sync.WaitGroup
}

func (a *acked) submit(t *testing.T, w *store.Writer, streams []collector.Stream) {
	t.Helper()
	a.wg.Add(1)
	err := w.SubmitStreams(context.Background(), streams, func(err error) {
		defer a.wg.Done()
		a.mu.Lock()
		defer a.mu.Unlock()
		if err != nil {
			a.err = err
			return
		}
		if a.ids == nil {
			a.ids = map[[16]byte]int{}
		}
		for i := range streams {
			a.ids[streams[i].StreamID]++
		}
	})
	if err != nil {
		a.wg.Done()
		t.Fatalf("submit: %v", err)
	}
}

// waitSpoolEmpty waits until the writer has replayed its spool.
func waitSpoolEmpty(t *testing.T, w *store.Writer) {
	t.Helper()
	// The replay inserts into the real engine.
	if !poll.Until(2*time.Minute, 50*time.Millisecond, func() bool { return w.Stats().SpoolSegments == 0 }) {
		t.Fatalf("spool not replayed: %+v", w.Stats())
	}
}

// checkExactlyOnce asserts every acked id is stored exactly once, raw and in
// the rollup.
func checkExactlyOnce(t *testing.T, db *store.DB, a *acked) {
	t.Helper()
	want := uint64(len(a.ids))
	if want == 0 {
		t.Fatalf("nothing acked")
	}
	promote(t, db)
	if got := queryUint(t, db, "SELECT count() FROM itl_streams"); got != want {
		t.Errorf("itl_streams rows = %d, want %d acked", got, want)
	}
	if got := queryUint(t, db, "SELECT uniqExact(stream_id) FROM itl_streams"); got != want {
		t.Errorf("distinct stored ids = %d, want %d acked", got, want)
	}
	if got := queryUint(t, db, "SELECT sum(streams) FROM itl_rollup_1m"); got != want {
		t.Errorf("rollup streams = %d, want %d acked", got, want)
	}
	rows, err := db.Conn().Query(context.Background(), "SELECT stream_id FROM itl_streams")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	stored := map[[16]byte]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		stored[[16]byte([]byte(id))] = true
	}
	for id := range a.ids {
		if !stored[id] {
			t.Fatalf("acked stream %x missing", id)
		}
	}
}

// TestOutageMidIngest stops ClickHouse while streams keep coming: batches
// are acked through the spool, and after the restart every acked stream is
// stored exactly once.
func TestOutageMidIngest(t *testing.T) {
	db := chtest.NewDB(t, store.Options{})
	e := chtest.Engine(t)
	w := newWriter(t, db, store.WriterOptions{FlushInterval: 50 * time.Millisecond})
	ctx := context.Background()
	var a acked
	at := time.Now().UTC()
	for i := 0; i < 60; i++ {
		switch i {
		case 20:
			a.wg.Wait() // some batches inserted before the outage
			if err := e.Stop(ctx); err != nil {
				t.Fatalf("stop engine: %v", err)
			}
		case 40:
			a.wg.Wait() // these were acked while ClickHouse was down: spooled
			if got := w.Stats().RowsSpooled; got == 0 {
				t.Fatalf("nothing spooled during the outage: %+v", w.Stats())
			}
			if err := e.Restart(ctx); err != nil {
				t.Fatalf("restart engine: %v", err)
			}
		}
		a.submit(t, w, makeStreams(20, "demo", at.Add(time.Duration(i)*time.Second)))
		time.Sleep(10 * time.Millisecond) // sleep: the scenario's pace, batches spread over the real engine's stop and restart
	}
	a.wg.Wait()
	if a.err != nil {
		t.Fatalf("a batch failed: %v", a.err)
	}
	waitSpoolEmpty(t, w)
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	st := w.Stats()
	t.Logf("stats: %+v", st)
	if st.RowsReplayed == 0 {
		t.Fatalf("nothing replayed from the spool: %+v", st)
	}
	checkExactlyOnce(t, db, &a)
}

// TestSpoolSurvivesRestart: the writer shuts down while ClickHouse is down
// (its queue goes to the spool), the last spool frame is torn as by a crash,
// and a new writer on the same spool replays everything acked.
func TestSpoolSurvivesRestart(t *testing.T) {
	db := chtest.NewDB(t, store.Options{})
	e := chtest.Engine(t)
	ctx := context.Background()
	spoolDir := t.TempDir()
	if err := e.Stop(ctx); err != nil {
		t.Fatalf("stop engine: %v", err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			e.Restart(ctx)
		}
	})
	w := newWriter(t, db, store.WriterOptions{SpoolDir: spoolDir, FlushInterval: 20 * time.Millisecond})
	var a acked
	at := time.Now().UTC()
	for i := 0; i < 5; i++ {
		a.submit(t, w, makeStreams(10, "demo", at))
		a.wg.Wait()
	}
	if a.err != nil {
		t.Fatalf("a batch failed: %v", a.err)
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	tearLastSegment(t, spoolDir)

	if err := e.Restart(ctx); err != nil {
		t.Fatalf("restart engine: %v", err)
	}
	restarted = true
	w2 := newWriter(t, db, store.WriterOptions{SpoolDir: spoolDir})
	waitSpoolEmpty(t, w2)
	if got, want := w2.Stats().RowsReplayed, uint64(50); got != want {
		t.Fatalf("replayed %d rows, want %d", got, want)
	}
	checkExactlyOnce(t, db, &a)
}

// tearLastSegment appends half a frame to the newest spool segment, as a
// crash in the middle of a write would leave it.
func tearLastSegment(t *testing.T, dir string) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no spool segments in %s (%v)", dir, err)
	}
	f, err := os.OpenFile(segs[len(segs)-1], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte{200, 0, 0, 0, 1, 2, 3, 4, 'p', 'a', 'r'}); err != nil {
		t.Fatal(err)
	}
}

// lockedBuffer is a bytes.Buffer safe for the writer's goroutine and the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestOutageLogsOnce: a repeating insert error is logged once per interval,
// not once per batch, while every batch is still acked through the spool.
func TestOutageLogsOnce(t *testing.T) {
	db := chtest.NewDB(t, store.Options{})
	e := chtest.Engine(t)
	ctx := context.Background()
	if err := e.Stop(ctx); err != nil {
		t.Fatalf("stop engine: %v", err)
	}
	t.Cleanup(func() { e.Restart(ctx) })
	var logs lockedBuffer
	w, err := store.NewWriter(db, store.WriterOptions{SpoolDir: t.TempDir(), FlushInterval: 10 * time.Millisecond,
		Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(ctx)
	began := time.Now()
	for time.Since(began) < 3*time.Second {
		submit(t, w, makeStreams(2, "demo", time.Now()))
		// sleep: the scenario's pace, the real driver's refused connections
		// over several of the writer's backoffs for 3 s (the log rate itself
		// is tested on a fake clock in writer_synctest_test.go).
		time.Sleep(100 * time.Millisecond)
	}
	st := w.Stats()
	if st.InsertErrors < 2 {
		t.Fatalf("insert attempts during the outage = %d, want retries (>= 2)", st.InsertErrors)
	}
	if got, want := strings.Count(logs.String(), "clickhouse insert failed"), 1; got != want {
		t.Fatalf("%d error lines for %d failed inserts, want %d:\n%s", got, st.InsertErrors, want, logs.String())
	}
}

// TestReplayKeepsCorruptSegment: a spool segment with a corrupt frame in the
// middle (not a torn tail) is kept on disk byte for byte and skipped, so the
// acked frame after the corrupt one is not lost with it; later segments are
// still replayed.
func TestReplayKeepsCorruptSegment(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	db := chtest.NewDB(t, store.Options{})
	spoolDir := t.TempDir()
	at := time.Now().UTC()
	first, second, third := makeStreams(3, "demo", at), makeStreams(4, "demo", at), makeStreams(5, "demo", at)
	seg, err := store.SpoolBatches(spoolDir, first, second, third)
	if err != nil {
		t.Fatalf("spool: %v", err)
	}
	later := makeStreams(6, "demo", at)
	if err := store.SpoolStreams(spoolDir, later); err != nil {
		t.Fatalf("spool: %v", err)
	}
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	second0 := 8 + int(binary.LittleEndian.Uint32(b)) // the second frame's offset
	b[second0+8+20] ^= 0x55                           // inside its payload: CRC mismatch
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}

	w := newWriter(t, db, store.WriterOptions{SpoolDir: spoolDir, FlushInterval: 20 * time.Millisecond})
	// The replay inserts into the real engine.
	if !poll.Until(time.Minute, 20*time.Millisecond, func() bool { return w.Stats().SpoolSegments <= 1 }) {
		t.Fatalf("later segment not replayed: %+v", w.Stats())
	}
	if err := w.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	promote(t, db)
	if got, want := queryUint(t, db, "SELECT count() FROM itl_streams"), uint64(len(later)); got != want {
		t.Errorf("itl_streams rows = %d, want %d (the later segment only)", got, want)
	}
	got, err := os.ReadFile(seg)
	if err != nil {
		t.Fatalf("corrupt segment removed: %v", err)
	}
	if !bytes.Equal(got, b) {
		t.Fatalf("corrupt segment changed on disk")
	}
	if st := w.Stats(); st.SpoolSegments != 1 {
		t.Fatalf("SpoolSegments = %d, want the kept segment (1)", st.SpoolSegments)
	}
}

// TestReplaySetsAsideRefusedStreams: a spooled batch holding a stream that
// ClickHouse refuses every time (here: it violates a CHECK constraint on the
// inbox) does
// not hold up the spool or the live inserts. Replay backs off on its own, and
// after a few refusals stores the batch in parts and sets the refused stream
// aside in SpoolDir/quarantine; the frames and segments after it are
// replayed, and live batches are inserted meanwhile (a live batch ClickHouse
// refuses is spooled, and set aside the same way).
func TestReplaySetsAsideRefusedStreams(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	db := chtest.NewDB(t, store.Options{})
	ctx := context.Background()
	if err := db.Conn().Exec(ctx, "ALTER TABLE itl_inbox ADD CONSTRAINT no_poison CHECK position(payload, 'poison') = 0"); err != nil {
		t.Fatalf("add constraint: %v", err)
	}
	spoolDir := t.TempDir()
	at := time.Now().UTC()
	poisoned, after, later := makeStreams(9, "demo", at), makeStreams(4, "demo", at), makeStreams(3, "demo", at)
	poisoned[5].Model = "poison"
	if _, err := store.SpoolBatches(spoolDir, poisoned, after); err != nil {
		t.Fatalf("spool: %v", err)
	}
	if err := store.SpoolStreams(spoolDir, later); err != nil {
		t.Fatalf("spool: %v", err)
	}

	w := newWriter(t, db, store.WriterOptions{SpoolDir: spoolDir, FlushInterval: 20 * time.Millisecond})
	// The replay's first refusal, from the real engine.
	if !poll.Until(time.Minute, 10*time.Millisecond, func() bool { return w.Stats().InsertErrors > 0 }) {
		t.Fatalf("no refusal within a minute: %+v", w.Stats())
	}
	live := makeStreams(5, "demo", at)
	submit(t, w, live)
	if st := w.Stats(); st.RowsSpooled != 0 || st.SpoolSegments == 0 {
		t.Fatalf("stats %+v: want the live batch inserted (nothing spooled) while the spool is held up", st)
	}
	refusedLive := makeStreams(4, "demo", at)
	refusedLive[2].Model = "poison"
	submit(t, w, refusedLive)
	if st := w.Stats(); st.RowsSpooled != uint64(len(refusedLive)) {
		t.Fatalf("stats %+v: want the refused live batch spooled", st)
	}
	waitSpoolEmpty(t, w)
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	want := uint64(len(poisoned) + len(after) + len(later) + len(live) + len(refusedLive) - 2)
	promote(t, db)
	if got := queryUint(t, db, "SELECT count() FROM itl_streams"); got != want {
		t.Errorf("itl_streams rows = %d, want %d (all but the 2 refused)", got, want)
	}
	if got := queryUint(t, db, "SELECT uniqExact(stream_id) FROM itl_streams"); got != want {
		t.Errorf("distinct stored ids = %d, want %d", got, want)
	}
	if st := w.Stats(); st.RowsQuarantined != 2 {
		t.Errorf("RowsQuarantined = %d, want 2", st.RowsQuarantined)
	}
	set, err := store.SpooledStreamIDs(filepath.Join(spoolDir, "quarantine"))
	if err != nil {
		t.Fatalf("read quarantine: %v", err)
	}
	if len(set) != 2 || !set[poisoned[5].StreamID] || !set[refusedLive[2].StreamID] {
		t.Fatalf("quarantine holds %d streams, want exactly the 2 refused ones", len(set))
	}
}

// TestSpoolBound: while ClickHouse is away the spool keeps at most
// MaxSpoolBytes on disk: to append a batch beyond it the oldest segments go,
// their records counted as dropped; the newest records are kept, and
// every spooled record is either still in the spool or counted.
func TestSpoolBound(t *testing.T) {
	port, err := freeport.Pick() // nothing listens there: ClickHouse is away
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(context.Background(), store.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	spoolDir := t.TempDir()
	const bound = 256 << 10
	w := newWriter(t, db, store.WriterOptions{SpoolDir: spoolDir, FlushInterval: 10 * time.Millisecond, MaxSpoolBytes: bound})
	at := time.Now().UTC()
	var last []collector.Stream
	for range 60 {
		last = makeStreams(20, "demo", at)
		submit(t, w, last) // acked through the spool
		if st := w.Stats(); st.SpoolBytes > bound {
			t.Fatalf("spool holds %d bytes, bound %d", st.SpoolBytes, bound)
		}
	}
	if err := w.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.RowsDropped == 0 || st.BytesDropped == 0 {
		t.Fatalf("stats %+v: want the oldest records dropped", st)
	}
	kept, err := store.SpooledStreamIDs(spoolDir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := uint64(len(kept))+st.RowsDropped, st.RowsSpooled; got != want {
		t.Errorf("%d records in the spool + %d dropped = %d, want the %d spooled", len(kept), st.RowsDropped, got, want)
	}
	for i := range last {
		if !kept[last[i].StreamID] {
			t.Fatalf("newest record %d not in the spool: the oldest must go first", i)
		}
	}
	if st.SpoolBytes < bound/2 {
		t.Errorf("spool keeps %d bytes, want most of its %d-byte bound used (segments of an eighth of it)", st.SpoolBytes, bound)
	}
	t.Logf("bound %d bytes: %d records spooled, %d kept, %d dropped (%d bytes)", bound, st.RowsSpooled, len(kept), st.RowsDropped, st.BytesDropped)
}

// TestAuthFailureIsNotARefusal: ClickHouse answering "authentication
// failed" (or access denied) is ClickHouse being unavailable to this
// collector, not a refusal of the rows: every batch is acked through the
// spool, none is set aside in quarantine, the failure is logged once, and
// once the credentials are right (a new collector on the same spool) every
// acked record is stored exactly once.
//
// The embedded engine dies at the second failed login (chdb 26.7: the
// connection is reset, then refused), so this test has an engine of its own
// and restarts it before the replay.
func TestAuthFailureIsNotARefusal(t *testing.T) {
	t.Parallel() // an engine of its own; its assertions time nothing
	ctx := context.Background()
	e, err := chdb.Start(ctx, chdb.Options{LibPath: os.Getenv("CHDB_LIB_PATH"), Dir: t.TempDir(),
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatalf("start engine: %v", err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	db, err := store.Open(ctx, store.Options{Addr: e.NativeAddr(), Dial: e.DialContext, Database: "auth", CreateDatabase: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	bad, err := store.Open(ctx, store.Options{DSN: "clickhouse://nobody:wrong@" + e.NativeAddr() + "/" + db.Database(), Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	var logs lockedBuffer
	spoolDir := t.TempDir()
	w, err := store.NewWriter(bad, store.WriterOptions{SpoolDir: spoolDir, FlushInterval: 10 * time.Millisecond, Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	var a acked
	at := time.Now().UTC()
	for range 20 {
		a.submit(t, w, makeStreams(5, "demo", at))
		a.wg.Wait() // acked (spooled): the next goes in a flush of its own
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if a.err != nil {
		t.Fatalf("a batch was not acked: %v", a.err)
	}
	st := w.Stats()
	if st.RowsSpooled != 100 || st.RowsQuarantined != 0 || st.InsertErrors == 0 {
		t.Fatalf("stats %+v: want all 100 records spooled, none quarantined, failed inserts counted", st)
	}
	if !strings.Contains(logs.String(), "code: 516") || !strings.Contains(logs.String(), "clickhouse insert failed; spooling") ||
		strings.Contains(logs.String(), "quarantine") {
		t.Fatalf("want the authentication failure logged as an insert failure (spooling), no quarantine:\n%s", logs.String())
	}
	if err := e.Restart(ctx); err != nil {
		t.Fatalf("restart engine: %v", err)
	}
	w2 := newWriter(t, db, store.WriterOptions{SpoolDir: spoolDir})
	waitSpoolEmpty(t, w2)
	checkExactlyOnce(t, db, &a)
}

// TestSlowClickHouse: every inbox insert takes 1.5 s (a sleeping view):
// batches wait longer for their ack and flushes grow, but every acked
// record is stored exactly once, nothing spooled or lost.
func TestSlowClickHouse(t *testing.T) {
	db := chtest.NewDB(t, store.Options{})
	ctx := context.Background()
	if err := db.Conn().Exec(ctx, `CREATE MATERIALIZED VIEW test_slow_mv ENGINE = Null AS
		SELECT stream_id FROM itl_inbox WHERE sleep(1.5) = 0`); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, db, store.WriterOptions{FlushInterval: 50 * time.Millisecond})
	var a acked
	at := time.Now().UTC()
	began := time.Now()
	for range 40 {
		a.submit(t, w, makeStreams(5, "demo", at))
		time.Sleep(25 * time.Millisecond) // sleep: the scenario's pace, batches keep coming while the real engine's slow insert runs
	}
	a.wg.Wait()
	if a.err != nil {
		t.Fatalf("a batch failed: %v", a.err)
	}
	st := w.Stats()
	if st.RowsSpooled != 0 || st.InboxRowsInserted != 200 {
		t.Fatalf("stats %+v: want every record inserted, none spooled", st)
	}
	t.Logf("40 batches acked in %v through %d inserts (1.5 s each): the flushes grew", time.Since(began).Round(time.Millisecond), st.Inserts)
	if err := db.Conn().Exec(ctx, "DROP VIEW test_slow_mv"); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, db, &a)
}
