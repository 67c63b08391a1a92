package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
)

// TestInboxShardAway: on a two-shard cluster whose shard 2 is down, an
// inbox insert through the Distributed table fails (the writer spools the
// batch), yet shard 1 holds its rows of it, exactly those whose key the
// engine itself places on shard 1; once shard 2 is back the same insert
// (the spool's replay) succeeds, and shard 1 holds those rows twice: copies,
// which the promoter drops.
func TestInboxShardAway(t *testing.T) {
	t.Parallel() // engines of its own; its assertions time nothing
	nodes := chtest.Cluster(t, "itl", 2)
	ctx := context.Background()
	db, err := store.Open(ctx, store.Options{DSN: "clickhouse://" + nodes[0].NativeAddr() + "/itlmon", Cluster: "itl", Lazy: true,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.MigrateCluster(ctx, store.NewClusterLayout("itl", "itlmon", store.NoReplication)); err != nil {
		t.Fatal(err)
	}
	var rows []store.InboxRow
	var keys []string
	for i := range 20 {
		r := store.InboxRow{Kind: "client", Site: "away", StreamID: fmt.Sprintf("stream-%02d", i), ReceivedAt: time.Now(), Payload: "x"}
		if i%3 == 0 {
			r.OriginID = fmt.Sprintf("origin-%02d", i) // the join key, when there is one
		}
		rows = append(rows, r)
		if r.OriginID != "" {
			keys = append(keys, r.OriginID)
		} else {
			keys = append(keys, r.StreamID)
		}
	}
	local1 := mustConn(t, nodes[0], "itlmon_local")
	var onShard1 []string // the keys the engine places on shard 1 of 2
	query(t, local1, "SELECT arraySort(arrayFilter(k -> cityHash64(k) % 2 = 0, ?))", []any{keys}, &onShard1)
	if len(onShard1) == 0 || len(onShard1) == len(keys) {
		t.Fatalf("keys on shard 1: %v of %d; want some, not all", onShard1, len(keys))
	}
	stored := func() []string {
		var got []string
		query(t, local1, "SELECT arraySort(groupArray(if(origin_id != '', origin_id, stream_id))) FROM itl_inbox", nil, &got)
		return got
	}

	if err := nodes[1].Crash(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := store.InsertInbox(ctx, db, rows); err == nil {
		t.Fatal("inbox insert with shard 2 down succeeded, want an error (the batch is spooled)")
	}
	t.Logf("the failed insert and the rows landed by shard took %v", time.Since(began).Round(time.Millisecond))
	if got := stored(); !slices.Equal(got, onShard1) {
		t.Fatalf("shard 1's inbox with shard 2 away = %v, want its own rows %v", got, onShard1)
	}

	if err := nodes[1].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := store.InsertInbox(ctx, db, rows); err != nil {
		t.Fatalf("inbox insert with shard 2 back: %v", err)
	}
	twice := slices.Sorted(slices.Values(append(slices.Clone(onShard1), onShard1...)))
	if got := stored(); !slices.Equal(got, twice) {
		t.Fatalf("shard 1's inbox after the replay = %v, want its rows twice %v", got, twice)
	}
	var n uint64
	query(t, mustConn(t, nodes[1], "itlmon_local"), "SELECT count() FROM itl_inbox", nil, &n)
	if got, want := int(n), len(keys)-len(onShard1); got != want {
		t.Fatalf("shard 2's inbox after the replay: %d rows, want %d", got, want)
	}
}
