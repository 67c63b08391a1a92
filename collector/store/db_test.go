package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
)

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name string
		opts store.Options
	}{
		{"nothing to connect to", store.Options{}},
		{"bad DSN", store.Options{DSN: "clickhouse://[::1"}},
		{"TTL under a day", store.Options{Addr: "127.0.0.1:1", StreamsTTL: time.Hour}},
		{"nobody listening", store.Options{Addr: "127.0.0.1:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if db, err := store.Open(ctx, tt.opts); err == nil {
				db.Close()
				t.Fatalf("Open succeeded, want an error")
			}
		})
	}
}

// TestOpenDSN connects the way a production deployment does: a DSN naming
// the database, no custom dialer.
func TestOpenDSN(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	e := chtest.Engine(t)
	ctx := context.Background()
	dbName := fmt.Sprintf("dsn_%d", time.Now().UnixNano()%1e9)
	chtest.DropAtEnd(t, dbName)
	db, err := store.Open(ctx, store.Options{DSN: "clickhouse://" + e.NativeAddr() + "/" + dbName, CreateDatabase: true})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer db.Close()
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if got := queryUint(t, db, "SELECT count() FROM system.tables WHERE database = ? AND name = 'itl_streams'", dbName); got != 1 {
		t.Fatalf("itl_streams in %s: %d tables, want 1", dbName, got)
	}
	if _, err := db.LatestStreams(ctx, collector.StreamFilter{}); err == nil {
		t.Fatalf("LatestStreams without a site succeeded, want an error")
	}
}

// TestInboxServerCPU: the server's CPU for the inbox inserts, as its
// ProfileEvents report it, is counted insert by insert.
func TestInboxServerCPU(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	db := chtest.NewDB(t, store.Options{})
	rows := make([]store.InboxRow, 2000)
	for i, s := range makeStreams(len(rows), "cpu", time.Now().UTC()) {
		var err error
		if rows[i], err = store.ClientRow(&s); err != nil {
			t.Fatal(err)
		}
	}
	if got := db.InboxServerCPU(); got != 0 {
		t.Fatalf("server CPU before any insert = %v, want 0", got)
	}
	var last time.Duration
	for k := range 2 {
		if err := store.InsertInbox(t.Context(), db, rows); err != nil {
			t.Fatal(err)
		}
		got := db.InboxServerCPU()
		if got <= last {
			t.Fatalf("server CPU after insert %d = %v, want more than %v", k+1, got, last)
		}
		last = got
	}
}

// TestInboxRoundTrip: an insert of several blocks stores every row as it
// was given, the first block's payload column sized before it is filled
// (presize) and later blocks larger than that room.
func TestInboxRoundTrip(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	db := chtest.NewDB(t, store.Options{})
	const n = 3000 // blocks of 1,024 rows: ~350 KB of payloads, then ~1 MB and ~1.7 MB
	rows := make([]store.InboxRow, n)
	want := make(map[string]string, n)
	for i := range rows {
		id := fmt.Sprintf("rt-%05d", i)
		p := make([]byte, 100+i/2)
		for k := range p {
			p[k] = byte(i + k)
		}
		rows[i] = store.InboxRow{Kind: store.KindClient, Site: "rt", StreamID: id, ReceivedAt: time.Now().UTC(), Payload: string(p)}
		want[id] = string(p)
	}
	if err := store.InsertInbox(t.Context(), db, rows[:n/2], rows[n/2:]); err != nil {
		t.Fatal(err)
	}
	q, err := db.Conn().Query(t.Context(), "SELECT stream_id, payload FROM itl_inbox WHERE site = 'rt'")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	got := 0
	for q.Next() {
		var id, p string
		if err := q.Scan(&id, &p); err != nil {
			t.Fatal(err)
		}
		if w, ok := want[id]; !ok || p != w {
			t.Fatalf("row %s: payload of %d bytes, want %d bytes as inserted (known: %v)", id, len(p), len(w), ok)
		}
		delete(want, id)
		got++
	}
	if err := q.Err(); err != nil {
		t.Fatal(err)
	}
	if got != n || len(want) != 0 {
		t.Fatalf("read %d rows, want %d (%d missing)", got, n, len(want))
	}
}
