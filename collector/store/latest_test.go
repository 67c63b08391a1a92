package store_test

import (
	"context"
	"encoding/hex"
	"reflect"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
)

// TestLatestStreamsTwoPhases: LatestStreams (ids and times first, then the
// rows) lists what the one-statement read lists, with copies of a stream
// (rows the table has not merged yet) among the newest.
func TestLatestStreamsTwoPhases(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	db := chtest.NewDB(t, store.Options{})
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Millisecond).Add(-2 * time.Hour)
	in := makeStreams(300, "demo", base)
	for i := range in {
		in[i].ReceivedAt = base.Add(time.Duration(i*23+i%7) * time.Second) // distinct times over ~2 hours
	}
	if err := store.InsertDirect(ctx, db.Conn(), in); err != nil {
		t.Fatal(err)
	}
	// Copies of the newest streams: the same rows again, and copies a
	// second later than the stream's next-newest row.
	if err := db.Conn().Exec(ctx, "INSERT INTO itl_streams SELECT * FROM itl_streams WHERE site = 'demo' ORDER BY received_at DESC LIMIT 40"); err != nil {
		t.Fatal(err)
	}
	if err := db.Conn().Exec(ctx, "INSERT INTO itl_streams SELECT * REPLACE (received_at + INTERVAL 30 SECOND AS received_at) FROM itl_streams WHERE site = 'demo' ORDER BY received_at DESC LIMIT 5, 20"); err != nil {
		t.Fatal(err)
	}
	since := base.Add(10 * time.Minute)
	for _, limit := range []int{1, 7, 50, 200} {
		got, err := db.LatestStreams(ctx, collector.StreamFilter{Site: "demo", Since: since, Limit: limit})
		if err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		rows, err := db.Conn().Query(ctx, "SELECT lower(hex(stream_id)), received_at FROM itl_streams WHERE site = 'demo' AND received_at >= ?"+
			" ORDER BY received_at DESC LIMIT 1 BY stream_id LIMIT ?", since, limit)
		if err != nil {
			t.Fatal(err)
		}
		var want, have []string
		for rows.Next() {
			var (
				id string
				at time.Time
			)
			if err := rows.Scan(&id, &at); err != nil {
				t.Fatal(err)
			}
			want = append(want, id+" "+at.UTC().Format(time.RFC3339Nano))
		}
		rows.Close()
		for _, s := range got {
			have = append(have, hex.EncodeToString(s.StreamID[:])+" "+s.ReceivedAt.UTC().Format(time.RFC3339Nano))
		}
		if len(want) != limit {
			t.Fatalf("limit %d: the fixture has %d streams", limit, len(want))
		}
		if !reflect.DeepEqual(have, want) {
			t.Errorf("limit %d:\ngot  %v\nwant %v", limit, have, want)
		}
	}
}

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
