package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/schema"
	"github.com/itlmon/itlmon/wasm/hist"
)

func TestMigrateIdempotent(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	db := chtest.NewMigratedDB(t, store.Options{StreamsTTL: 30 * 24 * time.Hour})
	ctx := context.Background()
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	migs, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := queryUint(t, db, "SELECT count() FROM schema_migrations FINAL"), uint64(len(migs)); got != want {
		t.Fatalf("schema_migrations rows = %d, want %d", got, want)
	}
	var engineFull string
	if err := db.Conn().QueryRow(ctx, "SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = 'itl_streams'").Scan(&engineFull); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(engineFull, "toIntervalDay(30)") {
		t.Fatalf("itl_streams TTL not 30 days: %s", engineFull)
	}
}

func TestWriterRoundTrip(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	db := chtest.NewDB(t, store.Options{})
	w := newWriter(t, db, store.WriterOptions{})
	at := time.Now().UTC().Truncate(time.Millisecond)
	in := makeStreams(20, "demo", at)
	submit(t, w, in[:10])
	submit(t, w, in[10:])
	promote(t, db)

	got, err := db.LatestStreams(context.Background(), collector.StreamFilter{Site: "demo", Since: at.Add(-time.Minute), Limit: 100})
	if err != nil {
		t.Fatalf("latest: %v", err)
	}
	if len(got) != len(in) {
		t.Fatalf("latest returned %d streams, want %d", len(got), len(in))
	}
	byID := map[[16]byte]collector.Stream{}
	for _, s := range got {
		byID[s.StreamID] = s
	}
	for i, want := range in {
		g, ok := byID[want.StreamID]
		if !ok {
			t.Fatalf("stream %d missing", i)
		}
		checkStream(t, i, g, want)
	}
	if got, want := queryUint(t, db, "SELECT count() FROM itl_timelines"), uint64(5); got != want {
		t.Fatalf("timelines = %d, want %d", got, want)
	}
	if got, want := queryUint(t, db, "SELECT sum(length(at_us)) FROM itl_timelines"), uint64(50); got != want {
		t.Fatalf("timeline stamps = %d, want %d", got, want)
	}
	if none, err := db.LatestStreams(context.Background(), collector.StreamFilter{Site: "other"}); err != nil || len(none) != 0 {
		t.Fatalf("other site: %d streams, err %v; want none", len(none), err)
	}
	st := w.Stats()
	if got, want := st.InboxRowsInserted, uint64(len(in)); got != want {
		t.Fatalf("Stats.InboxRowsInserted = %d, want %d", got, want)
	}
}

// checkStream compares what a reader gets back with what was written
// (the timeline is stored apart and not read back).
func checkStream(t *testing.T, i int, got, want collector.Stream) {
	t.Helper()
	want.Timeline = nil
	if !got.ReceivedAt.Equal(want.ReceivedAt) {
		t.Errorf("stream %d: ReceivedAt = %v, want %v", i, got.ReceivedAt, want.ReceivedAt)
	}
	got.ReceivedAt = want.ReceivedAt
	if !got.ITL.Equal(&want.ITL) || !got.ITLTokens.Equal(&want.ITLTokens) {
		t.Errorf("stream %d: histograms differ: got %d/%d values, want %d/%d", i,
			got.ITL.Count(), got.ITLTokens.Count(), want.ITL.Count(), want.ITLTokens.Count())
	}
	got.ITL, want.ITL, got.ITLTokens, want.ITLTokens = hist.Histogram{}, hist.Histogram{}, hist.Histogram{}, hist.Histogram{}
	gs, ws := strings.Fields(sprint(got)), strings.Fields(sprint(want))
	if strings.Join(gs, " ") != strings.Join(ws, " ") {
		t.Errorf("stream %d:\n got %v\nwant %v", i, sprint(got), sprint(want))
	}
}
