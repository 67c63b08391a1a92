package chtest

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/schema"
)

func TestMain(m *testing.M) {
	chdb.MaybeRunChild()
	os.Exit(Main(m))
}

// TestNewDBEqualsMigration: a database NewDB copies from the template holds
// exactly what migrating it holds: every table and view with the same
// CREATE statement (its own database named), the same columns in the same
// order, the same schema_migrations versions, and as many rows in every
// table (itl_rollup_1h_from's says from when the hourly tables are whole).
func TestNewDBEqualsMigration(t *testing.T) {
	copied := NewDB(t, store.Options{})
	migrated := NewMigratedDB(t, store.Options{})
	if a, b := schemaOf(t, copied), schemaOf(t, migrated); a != b {
		t.Errorf("NewDB's schema differs from a migrated one:\ncopied   %s\nmigrated %s", a, b)
	}
}

// schemaOf returns db's tables, views, columns and applied migrations as
// text, its database's name replaced by DB.
func schemaOf(t *testing.T, db *store.DB) string {
	t.Helper()
	var tables, columns, versions string
	ctx := context.Background()
	if err := db.Conn().QueryRow(ctx, `SELECT
		(SELECT toString(groupArray((name, engine, create_table_query))) FROM (SELECT * FROM system.tables WHERE database = currentDatabase() ORDER BY name)),
		(SELECT toString(groupArray((table, position, name, type, default_kind, default_expression, comment)))
			FROM (SELECT * FROM system.columns WHERE database = currentDatabase() ORDER BY table, position)),
		(SELECT toString(groupArray((version, name))) FROM (SELECT * FROM schema_migrations FINAL ORDER BY version))`).Scan(&tables, &columns, &versions); err != nil {
		t.Fatal(err)
	}
	// The rows the migrations wrote, counted (their values may hold the
	// time of the migration); the schema lock's are each database's own.
	var names []string
	if err := db.Conn().QueryRow(ctx, `SELECT groupArray(name) FROM (SELECT name FROM system.tables
		WHERE database = currentDatabase() AND engine NOT LIKE '%View' AND NOT startsWith(name, '.inner')
		AND name != 'schema_lock' ORDER BY name)`).Scan(&names); err != nil {
		t.Fatal(err)
	}
	counts := make([]string, 0, len(names))
	for _, name := range names {
		var n uint64
		if err := db.Conn().QueryRow(ctx, "SELECT count() FROM `"+name+"`").Scan(&n); err != nil {
			t.Fatal(err)
		}
		counts = append(counts, fmt.Sprintf("%s:%d", name, n))
	}
	s := strings.Join([]string{tables, columns, versions, strings.Join(counts, " ")}, "\n")
	s = strings.ReplaceAll(s, "`"+db.Database()+"`.", "DB.")
	return strings.ReplaceAll(s, db.Database()+".", "DB.")
}

// TestSeedEngineDir: an engine started on a seeded directory holds the
// migrated schema in database itlmon (Migrate finds nothing to apply), and
// no link of the copy leads back into the seed.
func TestSeedEngineDir(t *testing.T) {
	lib := libPath(t)
	dir := filepath.Join(t.TempDir(), "clickhouse")
	SeedEngineDir(t, dir)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return err
		}
		target, err := os.Readlink(path)
		if err == nil && strings.HasPrefix(target, filepath.Dir(seedDir)) {
			t.Errorf("%s links to %s, in the seed", path, target)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e, err := chdb.Start(ctx, chdb.Options{LibPath: lib, Dir: dir, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	var applied []string
	log := zerolog.New(zerolog.ConsoleWriter{Out: writerFunc(func(p []byte) (int, error) {
		applied = append(applied, string(p))
		return len(p), nil
	}), NoColor: true}).Level(zerolog.InfoLevel)
	db, err := store.Open(ctx, store.Options{Addr: e.NativeAddr(), Dial: e.DialContext, Database: "itlmon", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if len(applied) > 0 {
		t.Errorf("Migrate on a seeded engine logged %q, want nothing to apply", applied)
	}
	migs, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := db.Conn().QueryRow(ctx, "SELECT count() FROM schema_migrations FINAL").Scan(&n); err != nil || n != uint64(len(migs)) {
		t.Errorf("schema_migrations: %d rows (err %v), want %d", n, err, len(migs))
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
