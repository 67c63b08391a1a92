package store_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/internal/poll"
)

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMigrateInBackgroundError: ClickHouse answers, but the migration fails
// with an error that is not "unreachable" (here a schema_migrations table of
// another shape: reading its versions fails): MigrateInBackground logs it as
// an error with its text once, however often it retries, SchemaReady reports
// it, and once the cause is gone the schema is applied.
func TestMigrateInBackgroundError(t *testing.T) {
	t.Parallel() // a database of its own; mostly waits out the backoff
	e := chtest.Engine(t)
	name := fmt.Sprintf("later_%d", time.Now().UnixNano()%1e9)
	chtest.DropAtEnd(t, name)
	mk, err := store.Open(t.Context(), store.Options{Addr: e.NativeAddr(), Dial: e.DialContext, Database: name,
		CreateDatabase: true})
	if err != nil {
		t.Fatalf("create database: %v", err)
	}
	defer mk.Close()
	if err := mk.Conn().Exec(t.Context(), "CREATE TABLE schema_migrations (version String) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	if err := mk.Conn().Exec(t.Context(), "INSERT INTO schema_migrations VALUES ('one')"); err != nil {
		t.Fatal(err)
	}

	var logs syncBuffer
	db, err := store.Open(t.Context(), store.Options{Addr: e.NativeAddr(), Dial: e.DialContext, Database: name,
		Lazy: true, Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatalf("lazy open: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := db.MigrateInBackground(ctx)
	defer func() { cancel(); <-done }()

	// Three attempts fail (the backoff starts at about a second).
	// They run against the real engine, on the real backoff.
	if !poll.Until(60*time.Second, 50*time.Millisecond, func() bool { return db.MigrationAttempts() >= 3 }) {
		t.Fatalf("%d migration attempts in 60 s: %s", db.MigrationAttempts(), logs.String())
	}
	err = db.SchemaReady()
	if err == nil || !strings.Contains(err.Error(), "schema_migrations") {
		t.Fatalf("SchemaReady with a broken schema_migrations = %v, want the migration's error", err)
	}
	if got := strings.Count(logs.String(), `"level":"error"`); got != 1 {
		t.Errorf("%d error lines for one repeating cause, want 1:\n%s", got, logs.String())
	}
	if !strings.Contains(logs.String(), "schema_migrations") || strings.Contains(logs.String(), "unreachable") {
		t.Errorf("log does not give the migration error's text (or calls it unreachable):\n%s", logs.String())
	}

	if err := mk.Conn().Exec(t.Context(), "DROP TABLE schema_migrations"); err != nil {
		t.Fatal(err)
	}
	if !poll.Until(90*time.Second, 50*time.Millisecond, func() bool { return db.SchemaReady() == nil }) {
		t.Fatalf("schema not applied after the cause was removed: %v\n%s", db.SchemaReady(), logs.String())
	}
	var n uint64
	if err := db.Conn().QueryRow(t.Context(), "SELECT count() FROM itl_streams").Scan(&n); err != nil {
		t.Fatalf("itl_streams after the background migration: %v", err)
	}
	if !strings.Contains(logs.String(), "schema applied") {
		t.Errorf("no log line says the schema was applied:\n%s", logs.String())
	}
}
