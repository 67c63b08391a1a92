package join_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/store"
)

// engine is the real ClickHouse engine shared by the package's tests; nil
// when CHDB_LIB_PATH is missing.
var engine *chdb.Engine

func TestMain(m *testing.M) {
	chdb.MaybeRunChild()
	flag.Parse()
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	lib := os.Getenv("CHDB_LIB_PATH")
	if _, err := os.Stat(lib); lib != "" && err == nil && !testing.Short() {
		dir, err := os.MkdirTemp("", "itlmon-join-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		e, err := chdb.Start(context.Background(), chdb.Options{LibPath: lib, Dir: dir,
			Logger: zerolog.New(os.Stderr).Level(zerolog.WarnLevel)})
		if err != nil {
			fmt.Fprintln(os.Stderr, "start engine:", err)
			return 1
		}
		engine = e
		defer e.Close(context.Background())
	}
	return m.Run()
}

var dbSeq atomic.Int64

// newDB opens a fresh, migrated database, skipping without the real engine
// unless ITLMON_REQUIRE_REAL=1.
func newDB(tb testing.TB) *store.DB {
	tb.Helper()
	if engine == nil {
		if os.Getenv("ITLMON_REQUIRE_REAL") == "1" {
			tb.Fatalf("CHDB_LIB_PATH=%q: real ClickHouse engine required", os.Getenv("CHDB_LIB_PATH"))
		}
		tb.Skip("CHDB_LIB_PATH not set or missing (or -short); skipping real-engine test")
	}
	ctx := context.Background()
	db, err := store.Open(ctx, store.Options{
		Addr: engine.NativeAddr(), Dial: engine.DialContext, CreateDatabase: true,
		Database: fmt.Sprintf("j%d_%d", time.Now().UnixNano()%1e9, dbSeq.Add(1)),
		Logger:   zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel),
	})
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() { db.Close() })
	if err := db.Migrate(ctx); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return db
}
