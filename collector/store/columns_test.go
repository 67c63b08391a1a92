package store_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
)

// arrayRow has a column of every array type the tables hold.
type arrayRow struct {
	N      uint32   `ch:"n"`
	I32    []int32  `ch:"i32"`
	U32    []uint32 `ch:"u32"`
	U64    []uint64 `ch:"u64"`
	Bools  []bool   `ch:"bools"`
	Strs   []string `ch:"strs"`
	LCStrs []string `ch:"lc_strs"`
}

// TestArrayColumnsRoundTrip: arrays appended row by row (appendColumn)
// come back in their rows, in order, empty and nil rows included, values
// beyond a byte and negative ones too.
func TestArrayColumnsRoundTrip(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	db := chtest.NewDB(t, store.Options{})
	ctx := context.Background()
	if err := db.Conn().Exec(ctx, `CREATE TABLE arrays (n UInt32, i32 Array(Int32), u32 Array(UInt32), u64 Array(UInt64),
		bools Array(Bool), strs Array(String), lc_strs Array(LowCardinality(String))) ENGINE = MergeTree ORDER BY n`); err != nil {
		t.Fatal(err)
	}
	in := []arrayRow{
		{N: 0, I32: []int32{-5, 0, 70_000}, U32: []uint32{1, 300, 1 << 31}, U64: []uint64{1 << 40, 7}, Bools: []bool{true, false, true}, Strs: []string{"a", "", "ccc"}, LCStrs: []string{"network"}},
		{N: 1}, // every array nil
		{N: 2, I32: []int32{}, U32: []uint32{9}, U64: []uint64{}, Bools: []bool{false}, Strs: []string{}, LCStrs: []string{"page", "origin"}},
		{N: 3, I32: []int32{-1 << 31, 1<<31 - 1}, U32: []uint32{}, U64: []uint64{1<<64 - 1}, Strs: []string{"x"}},
	}
	if err := store.InsertRows(ctx, db.Conn(), "arrays", nil, in); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Conn().Query(ctx, "SELECT n, i32, u32, u64, bools, strs, lc_strs FROM arrays ORDER BY n")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []arrayRow
	for rows.Next() {
		var r arrayRow
		if err := rows.Scan(&r.N, &r.I32, &r.U32, &r.U64, &r.Bools, &r.Strs, &r.LCStrs); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(in) {
		t.Fatalf("read %d rows, want %d", len(got), len(in))
	}
	for i := range in {
		want := in[i]
		for _, p := range []any{&want.I32, &want.U32, &want.U64, &want.Bools, &want.Strs, &want.LCStrs} {
			// A nil array is stored as an empty one.
			if v := reflect.ValueOf(p).Elem(); v.IsNil() {
				v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			}
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], want)
		}
	}
}
