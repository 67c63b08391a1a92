package schema

import (
	"strings"
	"testing"
)

func TestMigrations(t *testing.T) {
	migs, err := Migrations()
	if err != nil {
		t.Fatalf("Migrations: %v", err)
	}
	if len(migs) == 0 {
		t.Fatalf("no migrations embedded")
	}
	for i, m := range migs {
		if got, want := m.Version, uint32(i+1); got != want {
			t.Errorf("%s: version = %d, want %d (no gaps)", m.Name, got, want)
		}
		if len(m.Statements) == 0 {
			t.Errorf("%s: no statements", m.Name)
		}
		for _, s := range m.Statements {
			upper := strings.ToUpper(s)
			if strings.Contains(upper, "CREATE") && !strings.Contains(upper, "IF NOT EXISTS") {
				t.Errorf("%s: CREATE without IF NOT EXISTS: %.60s", m.Name, s)
			}
		}
	}
}

func TestSplit(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"two", "SELECT 1;\nSELECT 2;\n", []string{"SELECT 1", "SELECT 2"}},
		{"multi-line", "-- head\nCREATE TABLE t\n(x UInt8);\n", []string{"-- head\nCREATE TABLE t\n(x UInt8)"}},
		{"comment with semicolon", "-- a;\nSELECT 1;", []string{"-- a;\nSELECT 1"}},
		{"comment only", "-- nothing here;\n\n", nil},
		{"no trailing semicolon", "SELECT 1", []string{"SELECT 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Split(tt.in)
			if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
				t.Fatalf("Split(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestRenameColumn(t *testing.T) {
	tests := []struct {
		in              string
		table, from, to string
		ok              bool
	}{
		{"ALTER TABLE itl_streams RENAME COLUMN IF EXISTS status TO status_code", "itl_streams", "status", "status_code", true},
		{"-- why\nalter table `t` rename column `a` to `b`", "t", "a", "b", true},
		{"ALTER TABLE t RENAME COLUMN a TO b, RENAME COLUMN c TO d", "", "", "", false},
		{"ALTER TABLE t ADD COLUMN IF NOT EXISTS a UInt8", "", "", "", false},
		{"ALTER TABLE t RENAME COLUMN a", "", "", "", false},
		{"RENAME TABLE a TO b", "", "", "", false},
	}
	for _, tt := range tests {
		table, from, to, ok := RenameColumn(tt.in)
		if table != tt.table || from != tt.from || to != tt.to || ok != tt.ok {
			t.Errorf("RenameColumn(%q) = %q, %q, %q, %v, want %q, %q, %q, %v",
				tt.in, table, from, to, ok, tt.table, tt.from, tt.to, tt.ok)
		}
	}
}

// TestRenamesGuarded: every RENAME COLUMN in the files is one the runner can
// guard (a single rename, parsed by RenameColumn).
func TestRenamesGuarded(t *testing.T) {
	migs, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migs {
		for _, s := range m.Statements {
			if strings.Contains(strings.ToUpper(s), "RENAME COLUMN") {
				if _, _, _, ok := RenameColumn(s); !ok {
					t.Errorf("%s: a RENAME COLUMN the runner cannot guard: %.80s", m.Name, s)
				}
			}
		}
	}
}

func TestCreateIfMissing(t *testing.T) {
	tests := []struct {
		in     string
		object string
		ok     bool
	}{
		{"CREATE TABLE IF NOT EXISTS itl_streams (x UInt8) ENGINE = MergeTree ORDER BY x", "itl_streams", true},
		{"-- why\ncreate materialized view if not exists `v 1` TO t AS SELECT 1", "v 1", true},
		{"CREATE VIEW IF NOT EXISTS v AS SELECT 1", "v", true},
		{"CREATE TABLE t (x UInt8) ENGINE = Memory", "", false},
		{"ALTER TABLE t ADD COLUMN IF NOT EXISTS x UInt8", "", false},
		{"DROP TABLE IF EXISTS t", "", false},
		{"RENAME TABLE a TO b", "", false},
	}
	for _, tt := range tests {
		object, ok := CreateIfMissing(tt.in)
		if object != tt.object || ok != tt.ok {
			t.Errorf("CreateIfMissing(%q) = %q, %v, want %q, %v", tt.in, object, ok, tt.object, tt.ok)
		}
	}
}

func TestRenameInPlace(t *testing.T) {
	tests := []struct {
		in         string
		view, temp string
		ok         bool
	}{
		{"RENAME TABLE v TO v_tmp, v_tmp TO v", "v", "v_tmp", true},
		{"-- why\nrename table `a b` to t, t to `a b`;", "a b", "t", true},
		{"RENAME TABLE v TO t", "", "", false},
		{"RENAME TABLE v TO t, t TO w", "", "", false},
		{"RENAME TABLE db.v TO t, t TO db.v", "", "", false},
		{"ALTER TABLE v MODIFY QUERY SELECT 1", "", "", false},
	}
	for _, tt := range tests {
		view, temp, ok := RenameInPlace(tt.in)
		if view != tt.view || temp != tt.temp || ok != tt.ok {
			t.Errorf("RenameInPlace(%q) = %q, %q, %v, want %q, %q, %v", tt.in, view, temp, ok, tt.view, tt.temp, tt.ok)
		}
	}
	for in, want := range map[string]string{
		"RENAME TABLE `l`.`v` TO `l`.`t`, `l`.`t` TO `l`.`v` ON CLUSTER `c`": "RENAME TABLE `l`.`t` TO `l`.`v` ON CLUSTER `c`",
		"RENAME TABLE v TO t, t TO v":                                        "RENAME TABLE t TO v",
	} {
		if got, ok := RenameInPlaceRest(in); !ok || got != want {
			t.Errorf("RenameInPlaceRest(%q) = %q, %v, want %q", in, got, ok, want)
		}
	}
}

// TestModifiedViewsRenamed: a view whose query a file changes with ALTER
// ... MODIFY QUERY is renamed in place after its last change (so the server
// holds it as it will load it after a restart: 011_view_ids.sql), in that
// file; the files released before that rule, in 011.
func TestModifiedViewsRenamed(t *testing.T) {
	migs, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	pending := map[string]string{} // view -> file of its last MODIFY QUERY not followed by a rename in place
	for _, m := range migs {
		for _, stmt := range m.Statements {
			toks, err := lex(stmt)
			if err != nil {
				t.Fatal(err)
			}
			if len(toks) > 5 && toks[0].is("ALTER") && toks[1].is("TABLE") && toks[3].is("MODIFY") && toks[4].is("QUERY") {
				pending[toks[2].name()] = m.Name
			}
			if view, _, ok := RenameInPlace(stmt); ok {
				delete(pending, view)
			}
		}
		for view, file := range pending {
			if file == m.Name && m.Version > 10 {
				t.Errorf("%s: view %s's query changed (MODIFY QUERY) and not renamed in place after it in the file", m.Name, view)
			}
		}
		if m.Version == 11 && len(pending) > 0 {
			t.Errorf("011: views changed by earlier files not renamed in place: %v", pending)
		}
	}
	if len(pending) > 0 {
		t.Errorf("views changed (MODIFY QUERY) and never renamed in place after: %v", pending)
	}
}
