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
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
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

// Main runs the tests and then stops the engine, if one was started (Stop).
func Main(m *testing.M) int {
	code := m.Run()
	Stop()
	return code
}

// Stop stops the shared engine and removes its directory and
// SeedEngineDir's, for a TestMain that runs its tests otherwise than
// through Main.
func Stop() {
	if engine != nil {
		engine.Close(context.Background())
	}
	if dir != "" {
		os.RemoveAll(dir)
	}
	if seedDir != "" {
		os.RemoveAll(filepath.Dir(seedDir))
	}
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
// a fresh name) holding the migrated schema, and closes it when tb ends.
// Addr, Dial, CreateDatabase and Logger (tb's log, info level) are set here.
//
// The schema is copied, not migrated again: the first call migrates a
// template database (store's Migrate, every schema file in order), and each
// database gets the template's tables, then its views, from the CREATE
// statements the engine keeps for them, plus the rows the migrations wrote
// (schema_migrations, itl_rollup_1h_from); then
// Migrate runs on it as on any database (nothing left to apply; the TTL of
// opts). A migration is ~120 statements, several of them slow ALTERs; the
// copy is ~20 CREATEs, a few times faster, and every test of the package
// used to pay the migration. Tests of the migrations themselves use
// NewMigratedDB.
func NewDB(tb testing.TB, opts store.Options) *store.DB {
	tb.Helper()
	db := open(tb, opts)
	ctx := context.Background()
	stmts, err := templateSchema(tb)
	if err != nil {
		tb.Fatalf("template schema: %v", err)
	}
	quoted := "`" + db.Database() + "`."
	for _, stmt := range stmts {
		if err := db.Conn().Exec(ctx, strings.ReplaceAll(stmt, templateRef, quoted)); err != nil {
			tb.Fatalf("copy the template schema into %s: %v", db.Database(), err)
		}
	}
	if err := db.Migrate(ctx); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return db
}

// NewMigratedDB is NewDB applying every migration to the new database
// itself, for tests of the migrations.
func NewMigratedDB(tb testing.TB, opts store.Options) *store.DB {
	tb.Helper()
	db := open(tb, opts)
	if err := db.Migrate(context.Background()); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return db
}

// open opens (creating it) a database of its own on the shared engine,
// closed when tb ends.
func open(tb testing.TB, opts store.Options) *store.DB {
	tb.Helper()
	e := Engine(tb)
	opts.Addr, opts.Dial, opts.CreateDatabase = e.NativeAddr(), e.DialContext, true
	if opts.Database == "" {
		opts.Database = fmt.Sprintf("t%d_%d", time.Now().UnixNano()%1e9, seq.Add(1))
	}
	opts.Logger = zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.InfoLevel)
	DropAtEnd(tb, opts.Database)
	db, err := store.Open(context.Background(), opts)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// DropAtEnd drops database name from the shared engine when tb ends, after
// the cleanups registered later (the test's DB, writers and promoters on
// it, closed first), so a test leaves nothing behind on the engine. An idle
// database's tables cost the engine ~3 ms of CPU a second in background
// tasks (measured: one database 13 ms/s, 61 of them 191 ms/s); whole
// packages' CPU moved within the noise between runs with the drop. A
// failure to drop is logged, not fatal: the engine's directory goes when
// the test binary ends.
func DropAtEnd(tb testing.TB, name string) {
	tb.Helper()
	e := Engine(tb)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{e.NativeAddr()}, DialContext: e.DialContext})
		if err == nil {
			defer conn.Close()
			err = conn.Exec(ctx, "DROP DATABASE IF EXISTS `"+name+"` SYNC")
		}
		if err != nil {
			tb.Logf("drop database %s: %v", name, err)
		}
	})
}

// The template database: migrated once per test binary, copied by NewDB.
const templateDB = "chtest_template"

// templateRef is how the template's CREATE statements name its objects
// (the engine writes database.name, quoting neither plain name).
const templateRef = templateDB + "."

var (
	templateOnce  sync.Once
	templateStmts []string
	templateErr   error
)

// templateSchema migrates the template database on first use and returns
// the statements that copy it: its tables, then its views (each view's
// source and target tables exist by then), then the rows the migrations
// wrote.
// They name the template's objects as templateRef.
func templateSchema(tb testing.TB) ([]string, error) {
	tb.Helper()
	e := Engine(tb)
	templateOnce.Do(func() {
		ctx := context.Background()
		db, err := store.Open(ctx, store.Options{Addr: e.NativeAddr(), Dial: e.DialContext, Database: templateDB,
			CreateDatabase: true, Logger: zerolog.Nop()})
		if err != nil {
			templateErr = err
			return
		}
		defer db.Close()
		if templateErr = db.Migrate(ctx); templateErr != nil {
			return
		}
		rows, err := db.Conn().Query(ctx, `SELECT name, create_table_query FROM system.tables
			WHERE database = ? AND NOT startsWith(name, '.inner') ORDER BY engine LIKE '%View', name`, templateDB)
		if err != nil {
			templateErr = err
			return
		}
		defer rows.Close()
		for rows.Next() {
			var name, create string
			if templateErr = rows.Scan(&name, &create); templateErr != nil {
				return
			}
			if !strings.Contains(create, templateRef+name) {
				templateErr = fmt.Errorf("the CREATE statement of %s does not name it %s%s: %s", name, templateRef, name, create)
				return
			}
			templateStmts = append(templateStmts, create)
		}
		if templateErr = rows.Err(); templateErr != nil {
			return
		}
		// The rows the migrations wrote (schema_migrations, and rows such as
		// itl_rollup_1h_from's that say from when a table is complete), but
		// the template's own schema lock.
		var filled []string
		if templateErr = db.Conn().QueryRow(ctx, `SELECT groupArray(name) FROM system.tables
			WHERE database = ? AND engine NOT LIKE '%View' AND NOT startsWith(name, '.inner')
			AND name != 'schema_lock' AND total_rows > 0`, templateDB).Scan(&filled); templateErr != nil {
			return
		}
		for _, name := range filled {
			templateStmts = append(templateStmts, "INSERT INTO "+templateRef+name+" SELECT * FROM `"+templateDB+"`."+name)
		}
	})
	return templateStmts, templateErr
}

// The engine directory SeedEngineDir copies: made once per test binary.
var (
	seedOnce sync.Once
	seedDir  string // its clickhouse/ holds the migrated schema in database itlmon
	seedErr  error
)

// SeedEngineDir fills dir, which must not exist yet, with the files of an
// embedded engine whose database itlmon holds the migrated schema, as a
// collector's first start leaves them (`itlmon serve --data D` keeps its
// engine in D/clickhouse): a collector started on it finds every migration
// applied instead of applying them (the longest step of a first start). The
// first call starts an engine of its own, migrates it and stops it; each
// call copies its directory (symbolic links into it are pointed at the
// copy). It skips or fails tb as Engine does when the engine library is
// missing. Tests of the migrations, or of a first start, start on an
// empty directory instead.
func SeedEngineDir(tb testing.TB, dir string) {
	tb.Helper()
	lib := libPath(tb)
	seedOnce.Do(func() {
		var root string
		if root, seedErr = os.MkdirTemp("", "itlmon-test-seed-"); seedErr != nil {
			return
		}
		seedDir = filepath.Join(root, "clickhouse")
		ctx := context.Background()
		e, err := chdb.Start(ctx, chdb.Options{LibPath: lib, Dir: seedDir, Logger: zerolog.New(os.Stderr).Level(zerolog.WarnLevel)})
		if err != nil {
			seedErr = err
			return
		}
		defer e.Close(ctx)
		db, err := store.Open(ctx, store.Options{Addr: e.NativeAddr(), Dial: e.DialContext, Database: "itlmon",
			CreateDatabase: true, Logger: zerolog.Nop()})
		if err != nil {
			seedErr = err
			return
		}
		defer db.Close()
		seedErr = db.Migrate(ctx)
	})
	if seedErr != nil {
		tb.Fatalf("seed engine directory: %v", seedErr)
	}
	if err := copyTree(seedDir, dir); err != nil {
		tb.Fatalf("seed engine directory: %v", err)
	}
}

// copyTree copies the directory from to to (which must not exist): files,
// directories and symbolic links, a link to a path under from pointed at
// the same path under to.
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if r, err := filepath.Rel(from, target); err == nil && filepath.IsAbs(target) && !strings.HasPrefix(r, "..") {
				target = filepath.Join(to, r)
			}
			return os.Symlink(target, dst)
		case d.IsDir():
			return os.Mkdir(dst, 0o750)
		case d.Type().IsRegular():
			return copyFile(path, dst)
		default:
			return nil // sockets, pipes: none a stopped engine leaves
		}
	})
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
