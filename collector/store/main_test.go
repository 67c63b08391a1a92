package store_test

import (
	"context"
	"crypto/rand"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/promoter"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/hist"
)

func TestMain(m *testing.M) {
	chdb.MaybeRunChild()
	os.Exit(chtest.Main(m))
}

func newWriter(tb testing.TB, db *store.DB, opts store.WriterOptions) *store.Writer {
	tb.Helper()
	if opts.SpoolDir == "" {
		opts.SpoolDir = tb.TempDir()
	}
	if opts.FlushInterval == 0 {
		opts.FlushInterval = 100 * time.Millisecond
	}
	opts.Logger = zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.InfoLevel)
	w, err := store.NewWriter(db, opts)
	if err != nil {
		tb.Fatalf("new writer: %v", err)
	}
	tb.Cleanup(func() { w.Shutdown(context.Background()) })
	return w
}

// makeStream returns a typical enriched stream; i varies its values.
func makeStream(i int, site string, at time.Time) collector.Stream {
	var r beacon.Record
	rand.Read(r.StreamID[:])
	r.StartUnixMs = at.UnixMilli() - 3000
	r.PageOrigin, r.PagePath = "https://chat.example.com", "/c"
	r.URLOrigin, r.URLPath = "https://api.example.com", "/v1/chat/completions"
	r.Model, r.HTTPProto, r.ContentType = []string{"gpt-x", "llama-3"}[i%2], "h2", "text/event-stream"
	r.Format, r.Status, r.HTTPStatus = 1, 1, 200
	r.TTFBUs, r.TTFCUs, r.TTFTUs, r.DurationUs = 90_000, 120_000, uint32(150_000+i*1000), 2_500_000
	if i%5 == 4 {
		r.TTFTUs = beacon.NoTime
	}
	r.Events, r.ContentEvents, r.Tokens, r.Reads, r.Bytes = 120, 100+uint32(i%7), 130, 60, 24_000
	r.GapP50Us, r.GapP95Us, r.GapP99Us, r.GapMaxUs = 20_000, 45_000, 240_000, 260_000
	r.TPOTUs, r.TokensPerSec, r.Stalls, r.StalledUs = 21_000, 47.6, 1, 260_000
	r.Jank, r.Smooth = 12, i%3 == 0
	r.EventsPerRead, r.MaxEventsPerRead, r.BytesPerRead, r.SubFloorShare = 2, 5, 400, 0.1
	r.StallsByCause[2], r.StalledByCause[2] = 1, 260_000
	r.TTFTCause = 1
	for k := 0; k < 100; k++ {
		r.ITL.Record(float64(15_000 + (k*7919+i*31)%30_000))
	}
	r.ITL.Record(0.5) // zero bucket
	r.ITLTokens.RecordN(9_000, uint64(50+i%10))
	r.StallList = []beacon.Stall{{StartUs: 1_000_000, EndUs: 1_260_000, Cause: 2, NextReadEvents: 4}}
	if i%4 == 0 {
		for k := 0; k < 10; k++ {
			r.Timeline = append(r.Timeline, beacon.Stamp{AtUs: uint32(100_000 + k*20_000), Read: uint32(k / 2), Content: k > 0})
		}
	}
	return collector.Stream{
		Record: r, Site: site, ReceivedAt: at,
		Release: "r1", ModuleVersion: "0.1.0", ConnType: "4g", ConnRTTMs: 50, TimerFloorUs: 100,
		Country: []string{"DE", "US"}[i%2], Region: []string{"DE-BE", "US-CA"}[i%2],
		Browser: "Chrome", BrowserMajor: 130, OS: "Linux", Device: "desktop",
	}
}

func makeStreams(n int, site string, at time.Time) []collector.Stream {
	s := make([]collector.Stream, n)
	for i := range s {
		s[i] = makeStream(i, site, at)
	}
	return s
}

// submit queues streams and waits for their done.
func submit(tb testing.TB, w *store.Writer, streams []collector.Stream) {
	tb.Helper()
	done := make(chan error, 1)
	if err := w.SubmitStreams(context.Background(), streams, func(err error) { done <- err }); err != nil {
		tb.Fatalf("submit: %v", err)
	}
	if err := <-done; err != nil {
		tb.Fatalf("done: %v", err)
	}
}

// promote promotes every inbox row written so far into the tables (what a
// collector's promoter does continuously), with a short hold.
func promote(tb testing.TB, db *store.DB) {
	tb.Helper()
	if err := tryPromote(tb, db); err != nil {
		tb.Fatalf("promote: %v", err)
	}
}

// tryPromote is promote returning the promoter's error.
func tryPromote(tb testing.TB, db *store.DB) error {
	tb.Helper()
	p, err := promoter.New([]promoter.Shard{{Conn: db.Conn()}}, promoter.Config{
		Hold: 10 * time.Millisecond, Grace: 10 * time.Millisecond, Logger: zerolog.New(zerolog.NewTestWriter(tb)),
	})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return p.CatchUp(ctx)
}

func queryUint(tb testing.TB, db *store.DB, q string, args ...any) uint64 {
	tb.Helper()
	var n uint64
	if err := db.Conn().QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		tb.Fatalf("%s: %v", q, err)
	}
	return n
}

var _ = hist.Scale
