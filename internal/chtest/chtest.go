// Package chtest gives a test binary one embedded ClickHouse engine (the
// real one: libchdb from CHDB_LIB_PATH), started on first use and stopped by
// Main, and fresh, migrated databases on it.
//
//	func TestMain(m *testing.M) {
//		chdb.MaybeRunChild()
//		os.Exit(chtest.Main(m))
//	}
package chtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/store"
)

var (
	once   sync.Once
	engine *chdb.Engine
	err    error
	dir    string
	seq    atomic.Int64
)

// Main runs the tests and then stops the engine, if one was started.
func Main(m *testing.M) int {
	code := m.Run()
	if engine != nil {
		engine.Close(context.Background())
	}
	if dir != "" {
		os.RemoveAll(dir)
	}
	return code
}

// Engine returns the shared engine, starting it on first use. Without
// CHDB_LIB_PATH, or with -short, it skips tb; with ITLMON_REQUIRE_REAL=1 a
// missing engine fails tb instead.
func Engine(tb testing.TB) *chdb.Engine {
	tb.Helper()
	lib := libPath(tb)
	once.Do(func() {
		if dir, err = os.MkdirTemp("", "itlmon-test-engine-"); err != nil {
			return
		}
		engine, err = chdb.Start(context.Background(), chdb.Options{LibPath: lib, Dir: dir,
			Logger: zerolog.New(os.Stderr).Level(zerolog.WarnLevel)})
	})
	if err != nil {
		tb.Fatalf("start engine: %v", err)
	}
	return engine
}

// libPath returns $CHDB_LIB_PATH, skipping tb under -short or when it is
// missing (failing it then with ITLMON_REQUIRE_REAL=1).
func libPath(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("real-engine test: not with -short")
	}
	lib := os.Getenv("CHDB_LIB_PATH")
	if _, statErr := os.Stat(lib); lib == "" || statErr != nil {
		if os.Getenv("ITLMON_REQUIRE_REAL") == "1" {
			tb.Fatalf("CHDB_LIB_PATH=%q: real ClickHouse engine required", lib)
		}
		tb.Skip("CHDB_LIB_PATH not set or missing; skipping real-engine test")
	}
	return lib
}

// NewDB opens a database of its own on the shared engine (opts.Database, or
// a fresh name), migrates it, and closes it when tb ends. Addr, Dial,
// CreateDatabase and Logger (tb's log, info level) are set here.
func NewDB(tb testing.TB, opts store.Options) *store.DB {
	tb.Helper()
	e := Engine(tb)
	ctx := context.Background()
	opts.Addr, opts.Dial, opts.CreateDatabase = e.NativeAddr(), e.DialContext, true
	if opts.Database == "" {
		opts.Database = fmt.Sprintf("t%d_%d", time.Now().UnixNano()%1e9, seq.Add(1))
	}
	opts.Logger = zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.InfoLevel)
	db, openErr := store.Open(ctx, opts)
	if openErr != nil {
		tb.Fatalf("open: %v", openErr)
	}
	tb.Cleanup(func() { db.Close() })
	if err := db.Migrate(ctx); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return db
}
