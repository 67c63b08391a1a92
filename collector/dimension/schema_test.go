package dimension_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/dimension"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
)

func TestMain(m *testing.M) {
	chdb.MaybeRunChild()
	os.Exit(chtest.Main(m))
}

// TestSchemaMatchesRegistry holds schema/*.sql, applied to the real engine,
// to the registry: the rollups group by exactly its Rollup dimensions (the
// views' GROUP BY, the tables' sorting keys and dimension columns, and the
// per-dimension view's list of dims, each under its key), and every
// dimension's column is a string column of itl_streams and a column of
// itl_streams_sample and itl_origin, listed under its key by the
// re-chunking rollup's views. Adding a dimension to one side only fails
// here.
func TestSchemaMatchesRegistry(t *testing.T) {
	db := chtest.NewDB(t, store.Options{})
	ctx := context.Background()
	conn := db.Conn()

	var rollupCols []string
	for _, d := range dimension.Rollup() {
		rollupCols = append(rollupCols, d.Column)
	}
	slices.Sort(rollupCols)

	// tables: name -> (as_select, sorting_key).
	type table struct{ asSelect, sortingKey string }
	tables := map[string]table{}
	rows, err := conn.Query(ctx, "SELECT name, as_select, sorting_key FROM system.tables WHERE database = currentDatabase()")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		var tb table
		if err := rows.Scan(&name, &tb.asSelect, &tb.sortingKey); err != nil {
			t.Fatal(err)
		}
		tables[name] = tb
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}

	// columns: table -> column -> type.
	columns := map[string]map[string]string{}
	rows, err = conn.Query(ctx, "SELECT table, name, type FROM system.columns WHERE database = currentDatabase()")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var tbl, name, typ string
		if err := rows.Scan(&tbl, &name, &typ); err != nil {
			t.Fatal(err)
		}
		if columns[tbl] == nil {
			columns[tbl] = map[string]string{}
		}
		columns[tbl][name] = typ
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}

	// Every dimension's column is a string column of itl_streams.
	for _, d := range dimension.All() {
		typ, ok := columns["itl_streams"][d.Column]
		if !ok {
			t.Errorf("dimension %q: itl_streams has no column %q", d.Key, d.Column)
			continue
		}
		if typ != "String" && typ != "LowCardinality(String)" {
			t.Errorf("dimension %q: itl_streams.%s is %s, want String or LowCardinality(String)", d.Key, d.Column, typ)
		}
	}

	// A comparison reads its sample of itl_streams first, and the
	// re-chunking rollup's origin part groups joined origin timelines by the
	// browser's values copied into itl_origin: every dimension's column is a
	// column of both, of the same type.
	for _, d := range dimension.All() {
		for _, tbl := range []string{"itl_streams_sample", "itl_origin"} {
			if got, want := columns[tbl][d.Column], columns["itl_streams"][d.Column]; got != want {
				t.Errorf("dimension %q: %s.%s is %q, itl_streams.%s %q", d.Key, tbl, d.Column, got, d.Column, want)
			}
		}
	}

	// The re-chunking rollup's two views count every stream under every
	// dimension's key (the rollups' and the others), from its column.
	var all []string
	for _, d := range dimension.All() {
		all = append(all, d.Key+"="+d.Column)
	}
	slices.Sort(all)
	for _, view := range []string{"itl_rechunk_1h_mv", "itl_rechunk_1h_origin_mv"} {
		tb, ok := tables[view]
		if !ok {
			t.Errorf("no view %s", view)
			continue
		}
		var got []string
		for _, m := range dimPair.FindAllStringSubmatch(tb.asSelect, -1) {
			got = append(got, m[1]+"="+m[2])
		}
		slices.Sort(got)
		if !strings.Contains(tb.asSelect, "('', '')") {
			t.Errorf("%s does not count every stream under dim '': %s", view, tb.asSelect)
		}
		if !slices.Equal(got, all) {
			t.Errorf("%s has the dims (key=column) %v, the registry's dimensions are %v", view, got, all)
		}
	}

	// The views that fill the per-minute and per-hour rollups group by the
	// time, the site and exactly the rollup dimensions.
	for _, view := range []string{"itl_rollup_1m_mv", "itl_rollup_1m_cause_mv", "itl_rollup_1h_mv"} {
		tb, ok := tables[view]
		if !ok {
			t.Errorf("no view %s", view)
			continue
		}
		i := strings.LastIndex(tb.asSelect, "GROUP BY ")
		if i < 0 {
			t.Errorf("%s has no GROUP BY: %s", view, tb.asSelect)
			continue
		}
		got := dimsOf(strings.Split(tb.asSelect[i+len("GROUP BY "):], ","))
		if !slices.Equal(got, rollupCols) {
			t.Errorf("%s groups by the dimensions %v, the registry's rollup dimensions are %v", view, got, rollupCols)
		}
	}

	// The rollup tables sort by them and have exactly them as string
	// columns besides the site.
	for _, tbl := range []string{"itl_rollup_1m", "itl_rollup_1h"} {
		tb, ok := tables[tbl]
		if !ok {
			t.Errorf("no table %s", tbl)
			continue
		}
		if got := dimsOf(strings.Split(tb.sortingKey, ",")); !slices.Equal(got, rollupCols) {
			t.Errorf("%s sorts by the dimensions %v, the registry's rollup dimensions are %v", tbl, got, rollupCols)
		}
		var strs []string
		for name, typ := range columns[tbl] {
			if typ == "LowCardinality(String)" && name != "site" {
				strs = append(strs, name)
			}
		}
		slices.Sort(strs)
		if !slices.Equal(strs, rollupCols) {
			t.Errorf("%s has the dimension columns %v, the registry's rollup dimensions are %v", tbl, strs, rollupCols)
		}
	}

	// The per-dimension hourly view counts every stream once per rollup
	// dimension, under the dimension's key (what collector/query asks for
	// as dim = KEY), from the dimension's column, and once under ''.
	tb, ok := tables["itl_rollup_1h_dim_mv"]
	if !ok {
		t.Fatal("no view itl_rollup_1h_dim_mv")
	}
	var got, want []string
	for _, m := range dimPair.FindAllStringSubmatch(tb.asSelect, -1) {
		got = append(got, m[1]+"="+m[2])
	}
	for _, d := range dimension.Rollup() {
		want = append(want, d.Key+"="+d.Column)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !strings.Contains(tb.asSelect, "('', '')") {
		t.Errorf("itl_rollup_1h_dim_mv does not count every stream under dim '': %s", tb.asSelect)
	}
	if !slices.Equal(got, want) {
		t.Errorf("itl_rollup_1h_dim_mv has the dims (key=column) %v, the registry's rollup dimensions are %v", got, want)
	}
}

// dimPair is one entry of itl_rollup_1h_dim_mv's ARRAY JOIN list:
// ('key', toString(column)).
var dimPair = regexp.MustCompile(`\('(\w+)', toString\((\w+)\)\)`)

// dimsOf is a GROUP BY or sorting key list without the site and the time
// column, sorted.
func dimsOf(list []string) []string {
	var out []string
	for _, c := range list {
		c = strings.TrimSpace(c)
		switch c {
		case "site", "minute", "hour":
			continue
		}
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}
