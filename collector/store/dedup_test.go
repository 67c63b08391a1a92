package store_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/wasm/hist"
)

// counts promotes what was written and returns the streams in itl_streams
// (FINAL) and in the rollup. It fails unless the hourly rollups (010: a view
// on itl_streams and a view on that view's target), the per-site minute
// rollup (012: a view on the minute rollup's) and the daily one (013: a view
// on the per-dimension hourly one's) count what the minute rollup counts,
// the comparison's sample (014) holds the rows of itl_streams below its
// bound, once each, and the re-chunking rollup (015) counts what the
// minute rollup counts.
func counts(t *testing.T, db *store.DB) (raw, rollup uint64) {
	t.Helper()
	promote(t, db)
	raw, rollup = queryUint(t, db, "SELECT count() FROM itl_streams FINAL"), queryUint(t, db, "SELECT sum(streams) FROM itl_rollup_1m")
	hourly, byDim := queryUint(t, db, "SELECT sum(streams) FROM itl_rollup_1h"), queryUint(t, db, "SELECT sum(streams) FROM itl_rollup_1h_dim WHERE dim = 'browser'")
	bySite, byDay := queryUint(t, db, "SELECT sum(streams) FROM itl_rollup_1m_site"), queryUint(t, db, "SELECT sum(streams) FROM itl_rollup_1d_dim WHERE dim = 'model'")
	if hourly != rollup || byDim != rollup || bySite != rollup || byDay != rollup {
		t.Fatalf("streams: itl_rollup_1m %d, itl_rollup_1h %d, itl_rollup_1h_dim %d, itl_rollup_1m_site %d, itl_rollup_1d_dim %d", rollup, hourly, byDim, bySite, byDay)
	}
	sampled, sample := queryUint(t, db, "SELECT count() FROM itl_streams WHERE cityHash64(stream_id) < pow(2, 60)"), queryUint(t, db, "SELECT count() FROM itl_streams_sample")
	if sample != sampled {
		t.Fatalf("itl_streams_sample holds %d rows, itl_streams %d below its bound", sample, sampled)
	}
	if rechunk := queryUint(t, db, "SELECT sum(streams) FROM itl_rechunk_1h WHERE dim = 'api_origin'"); rechunk != rollup {
		t.Fatalf("streams: itl_rollup_1m %d, itl_rechunk_1h %d", rollup, rechunk)
	}
	return raw, rollup
}

func TestDedupResend(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	db := chtest.NewDB(t, store.Options{})
	w := newWriter(t, db, store.WriterOptions{})
	at := time.Now().UTC()
	in := makeStreams(10, "demo", at)
	submit(t, w, in)

	// A resend after a lost ack, minutes later: new ReceivedAt, same ids,
	// plus a duplicate within one batch and two new streams.
	resent := append([]collector.Stream(nil), in...)
	for i := range resent {
		resent[i].ReceivedAt = at.Add(3 * time.Minute)
	}
	fresh := makeStreams(2, "demo", at.Add(3*time.Minute))
	submit(t, w, append(append(resent, fresh...), fresh[0]))

	raw, rollup := counts(t, db)
	if got, want := raw, uint64(12); got != want {
		t.Fatalf("itl_streams FINAL rows = %d, want %d", got, want)
	}
	if got, want := queryUint(t, db, "SELECT count() FROM itl_streams"), uint64(12); got != want {
		t.Fatalf("itl_streams rows without FINAL = %d, want %d", got, want)
	}
	if got, want := rollup, uint64(12); got != want {
		t.Fatalf("rollup streams = %d, want %d", got, want)
	}
}

// TestRetriedInsertCountsOnce is the lost-response case: the same rows sent
// again as the same insert (no id check in InsertDirect) are dropped by the
// deduplication token, in the table and in the views.
func TestRetriedInsertCountsOnce(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	db := chtest.NewDB(t, store.Options{})
	in := makeStreams(8, "demo", time.Now().UTC())
	for try := 0; try < 2; try++ {
		if err := store.InsertDirect(context.Background(), db.Conn(), in); err != nil {
			t.Fatalf("insert %d: %v", try, err)
		}
	}
	raw, rollup := counts(t, db)
	if raw != 8 || rollup != 8 {
		t.Fatalf("raw = %d, rollup = %d; want 8 and 8", raw, rollup)
	}
	if got, want := queryUint(t, db, "SELECT count() FROM itl_timelines"), uint64(2); got != want {
		t.Fatalf("timelines = %d, want %d", got, want)
	}
}

// TestRollupMatchesRaw checks the rollup's merged histograms and counters
// against a Go merge of the records written.
func TestRollupMatchesRaw(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	db := chtest.NewDB(t, store.Options{})
	w := newWriter(t, db, store.WriterOptions{})
	at := time.Now().UTC()
	in := makeStreams(50, "demo", at)
	// Per-stream speeds over many buckets, and streams without a TPOT sample:
	// one content event, no time between the content events (tokens/s 0), a
	// TPOT of at most 1 µs (the zero bucket).
	for i := range in {
		r := &in[i].Record
		r.TokensPerSec = 5 + float32(i)*1.37
		switch {
		case i%10 == 3:
			r.ContentEvents = 1
		case i%10 == 5:
			r.TokensPerSec = 0
		case i == 7:
			r.TokensPerSec = 2e6
		}
	}
	submit(t, w, in[:25])
	submit(t, w, in[25:])
	promote(t, db)

	// The rollup's TPOT histogram: one sample of 1e6/tokens_per_sec µs per
	// stream with at least two content events and tokens/s > 0.
	var wantTPOT hist.Histogram
	wantTPOTSum := map[int32]float64{}
	for i := range in {
		if r := &in[i].Record; r.ContentEvents >= 2 && r.TokensPerSec > 0 {
			v := 1e6 / float64(r.TokensPerSec)
			wantTPOT.Record(v)
			if v > hist.ZeroThresholdMicros {
				wantTPOTSum[hist.BucketIndex(v)] += v
			}
		}
	}
	var (
		tpotIdx, tpotSumIdx []int32
		tpotCnt             []uint64
		tpotSum             []float64
		tpotZero            uint64
	)
	if err := db.Conn().QueryRow(context.Background(), `
		SELECT sumMap(tpot).1, sumMap(tpot).2, sum(tpot_zero), sumMap(tpot_sum).1, sumMap(tpot_sum).2
		FROM itl_rollup_1m WHERE site = 'demo'`).Scan(&tpotIdx, &tpotCnt, &tpotZero, &tpotSumIdx, &tpotSum); err != nil {
		t.Fatalf("rollup tpot query: %v", err)
	}
	if wantTPOT.Count() != 50-5-5 || wantTPOT.ZeroCount() != 1 || wantTPOT.NumBuckets() < 10 {
		t.Fatalf("fixture: %d TPOT samples, %d in the zero bucket, %d buckets; want 40, 1, >= 10",
			wantTPOT.Count(), wantTPOT.ZeroCount(), wantTPOT.NumBuckets())
	}
	checkSparse(t, "tpot", &wantTPOT, tpotZero, tpotIdx, tpotCnt)
	if len(tpotSumIdx) != len(wantTPOTSum) {
		t.Fatalf("tpot_sum: %d buckets, want %d", len(tpotSumIdx), len(wantTPOTSum))
	}
	for k, i := range tpotSumIdx {
		if w := wantTPOTSum[i]; math.Abs(tpotSum[k]-w) > 1e-9*w {
			t.Errorf("tpot_sum bucket %d = %v, want %v", i, tpotSum[k], w)
		}
	}

	var wantITL, wantTok, wantTTFT hist.Histogram
	var wantStalls, wantTokens uint64
	for i := range in {
		wantITL.Merge(&in[i].ITL)
		wantTok.Merge(&in[i].ITLTokens)
		if in[i].TTFTUs != ^uint32(0) {
			wantTTFT.Record(float64(in[i].TTFTUs))
		}
		wantStalls += uint64(in[i].Stalls)
		wantTokens += uint64(in[i].Tokens)
	}
	var (
		itlIdx, tokIdx, ttftIdx           []int32
		itlCnt, tokCnt, ttftCnt           []uint64
		itlZero, tokZero, ttftZero        uint64
		streams, stalls, tokens, withTTFT uint64
	)
	err := db.Conn().QueryRow(context.Background(), `
		SELECT sumMap(itl).1, sumMap(itl).2, sum(itl_zero),
		       sumMap(itl_tok).1, sumMap(itl_tok).2, sum(itl_tok_zero),
		       sumMap(ttft).1, sumMap(ttft).2, sum(ttft_zero),
		       sum(streams), sum(stalls), sum(tokens), sum(with_ttft)
		FROM itl_rollup_1m WHERE site = 'demo'`).Scan(
		&itlIdx, &itlCnt, &itlZero, &tokIdx, &tokCnt, &tokZero, &ttftIdx, &ttftCnt, &ttftZero,
		&streams, &stalls, &tokens, &withTTFT)
	if err != nil {
		t.Fatalf("rollup query: %v", err)
	}
	checkSparse(t, "itl", &wantITL, itlZero, itlIdx, itlCnt)
	checkSparse(t, "itl_tok", &wantTok, tokZero, tokIdx, tokCnt)
	checkSparse(t, "ttft", &wantTTFT, ttftZero, ttftIdx, ttftCnt)
	if streams != 50 || stalls != wantStalls || tokens != wantTokens || withTTFT != wantTTFT.Count() {
		t.Fatalf("rollup counters streams=%d stalls=%d tokens=%d with_ttft=%d, want 50 %d %d %d",
			streams, stalls, tokens, withTTFT, wantStalls, wantTokens, wantTTFT.Count())
	}
	// A quantile from the rollup equals the Go merge's, up to the bucket
	// representative (min and max are not in the rollup).
	got, err := hist.FromSparse(itlZero, itlIdx, itlCnt, wantITL.Sum(), wantITL.Min(), wantITL.Max())
	if err != nil {
		t.Fatalf("FromSparse: %v", err)
	}
	if g, w := got.Quantile(0.95), wantITL.Quantile(0.95); g != w {
		t.Fatalf("p95 from rollup = %v, from Go merge = %v", g, w)
	}
}

func checkSparse(t *testing.T, name string, want *hist.Histogram, zero uint64, idx []int32, cnt []uint64) {
	t.Helper()
	wi, wc := want.Sparse()
	if zero != want.ZeroCount() {
		t.Errorf("%s zero = %d, want %d", name, zero, want.ZeroCount())
	}
	if len(idx) != len(wi) {
		t.Fatalf("%s: %d buckets, want %d", name, len(idx), len(wi))
	}
	for k := range wi {
		if idx[k] != wi[k] || cnt[k] != wc[k] {
			t.Fatalf("%s bucket %d: (%d, %d), want (%d, %d)", name, k, idx[k], cnt[k], wi[k], wc[k])
		}
	}
}

// TestReplayOfInsertedBatch: an insert that landed but whose answer was lost
// is spooled too; replaying it later stores nothing twice.
func TestReplayOfInsertedBatch(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	db := chtest.NewDB(t, store.Options{})
	w := newWriter(t, db, store.WriterOptions{})
	in := makeStreams(12, "demo", time.Now().UTC())
	submit(t, w, in)

	spoolDir := t.TempDir()
	if err := store.SpoolStreams(spoolDir, in); err != nil {
		t.Fatalf("spool: %v", err)
	}
	w2 := newWriter(t, db, store.WriterOptions{SpoolDir: spoolDir})
	waitSpoolEmpty(t, w2)
	raw, rollup := counts(t, db)
	if raw != 12 || rollup != 12 {
		t.Fatalf("raw = %d, rollup = %d; want 12 and 12", raw, rollup)
	}
	if got, want := queryUint(t, db, "SELECT count() FROM itl_timelines"), uint64(3); got != want {
		t.Fatalf("timelines = %d, want %d", got, want)
	}
}

// TestRerunAfterRestartCountedOnce: a promotion that inserted its pages and
// was cut before it recorded them (the server killed) is run again after
// the server's restart with the same tokens, on a schema migrated in the
// server's run before (as a fresh install, or an upgrade, is): every
// rollup counts each row once. Before 011_view_ids.sql the views whose
// queries 006 and 009 changed got other deduplication tokens after the
// restart, and itl_rollup_1m and itl_origin_1m counted the rerun again.
func TestRerunAfterRestartCountedOnce(t *testing.T) {
	t.Parallel() // an engine of its own; its assertions time nothing
	e, err := chdb.Start(context.Background(), chdb.Options{LibPath: itlmontest.ChdbLib(t), Dir: t.TempDir(),
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	ctx := t.Context()
	db, err := store.Open(ctx, store.Options{Addr: e.NativeAddr(), Dial: e.DialContext, CreateDatabase: true, Database: "itlmon"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	streams := makeStreams(6, "rerun", time.Now().UTC())
	at := time.Now().UTC()
	insertWindow := func() error {
		if err := store.InsertStreams(ctx, db.Conn(), streams, "itlmon/promote/test"); err != nil {
			return err
		}
		octx := clickhouse.Context(ctx, clickhouse.WithSettings(store.TokenSettings("itlmon/promote/test/itl_origin")))
		return db.Conn().Exec(octx, `INSERT INTO itl_origin (received_at, site, origin_id, version, started_at, route, format, status,
			client_received_at, ttft_cause, stall_cause) VALUES (?, 'rerun', 'req-1', 1, ?, '/v1/chat', 'openai_chat', 'complete', ?, 'network', ['network'])`,
			at, at, at)
	}
	counts := func(when string) {
		t.Helper()
		var got string
		if err := db.Conn().QueryRow(ctx, `SELECT toString((
			(SELECT count() FROM itl_streams WHERE site = 'rerun'), (SELECT sum(streams) FROM itl_rollup_1m WHERE site = 'rerun'),
			(SELECT sum(ttft_unknown + ttft_network + ttft_page + ttft_origin) FROM itl_rollup_1m WHERE site = 'rerun'),
			(SELECT sum(streams) FROM itl_rollup_1m_site WHERE site = 'rerun'),
			(SELECT sum(streams) FROM itl_rollup_1h WHERE site = 'rerun'), (SELECT sum(streams) FROM itl_rollup_1h_dim WHERE site = 'rerun' AND dim = ''),
			(SELECT sum(streams) FROM itl_rollup_1d_dim WHERE site = 'rerun' AND dim = ''),
			(SELECT count() FROM itl_origin WHERE site = 'rerun'), (SELECT sum(streams) FROM itl_origin_1m WHERE site = 'rerun')))`).Scan(&got); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		// itl_rollup_1m's streams come from one view, its causes from the other.
		if want := "(6,6,6,6,6,6,6,1,1)"; got != want {
			t.Errorf("%s: itl_streams, itl_rollup_1m streams and TTFT causes, itl_rollup_1m_site, itl_rollup_1h, itl_rollup_1h_dim, itl_rollup_1d_dim, itl_origin, itl_origin_1m = %s, want %s",
				when, got, want)
		}
	}
	if err := insertWindow(); err != nil {
		t.Fatal(err)
	}
	counts("promoted")
	pid := e.PID()
	if err := e.Kill(); err != nil {
		t.Fatal(err)
	}
	// The rerun, once the server answers again.
	var rerr error
	itlmontest.Settle(t, time.Minute, func() bool {
		rerr = insertWindow()
		return rerr == nil
	})
	if e.PID() == pid {
		t.Fatalf("engine pid %d after the kill: not restarted", pid)
	}
	counts("promoted again after the server's restart")
}
