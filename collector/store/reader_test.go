package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
)

// A read of the latest streams over 30 days reads the last day first: the
// answer is the whole range's newest, whether the day holds enough of them
// or not, with a stream stored twice (one copy before the day, one in it)
// counted once, by its newest copy.
func TestLatestStreamsLastDayFirst(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	db := chtest.NewDB(t, store.Options{})
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	// Newest first: five received in the last day (the second also stored
	// three days before), five three to four days before.
	var want []collector.Stream
	for i := range 10 {
		at := now.Add(-time.Duration(i+1) * time.Hour)
		if i >= 5 {
			at = now.Add(-72*time.Hour - time.Duration(i)*time.Hour)
		}
		s := makeStream(i, "site", at)
		s.ReceivedAt = at
		want = append(want, s)
	}
	old := want[1]
	old.ReceivedAt = now.Add(-73 * time.Hour)
	if err := store.InsertStreams(ctx, db.Conn(), append(append([]collector.Stream(nil), want...), old), ""); err != nil {
		t.Fatal(err)
	}
	since := now.Add(-30 * 24 * time.Hour)
	for _, limit := range []int{3, 5, 8, 10, 20} {
		got, err := db.LatestStreams(ctx, collector.StreamFilter{Site: "site", Since: since, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		n := min(limit, len(want))
		if len(got) != n {
			t.Fatalf("limit %d: %d streams, want %d", limit, len(got), n)
		}
		for i := range got {
			if got[i].StreamID != want[i].StreamID || !got[i].ReceivedAt.Equal(want[i].ReceivedAt) {
				t.Fatalf("limit %d: stream %d is %x received %v, want %x received %v", limit, i,
					got[i].StreamID, got[i].ReceivedAt, want[i].StreamID, want[i].ReceivedAt)
			}
		}
	}
}
