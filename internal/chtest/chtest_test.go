package chtest

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/store"
)

func TestMain(m *testing.M) {
	chdb.MaybeRunChild()
	os.Exit(Main(m))
}

// TestNewDBEqualsMigration: a database NewDB copies from the template holds
// exactly what migrating it holds: every table and view with the same
// CREATE statement (its own database named), the same columns in the same
// order, and the same schema_migrations versions.
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
	s := strings.Join([]string{tables, columns, versions}, "\n")
	s = strings.ReplaceAll(s, "`"+db.Database()+"`.", "DB.")
	return strings.ReplaceAll(s, db.Database()+".", "DB.")
}
