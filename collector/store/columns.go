package store

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// tagsOf returns, for each field of the row struct R in order, its ch
// tag. Every field must have one: the tags are the insert's column list.
func tagsOf[R any]() []string {
	t := reflect.TypeFor[R]()
	tags := make([]string, t.NumField())
	for i := range tags {
		tag := t.Field(i).Tag.Get("ch")
		if tag == "" {
			panic("BUG: store: " + t.Name() + "." + t.Field(i).Name + " has no ch tag")
		}
		tags[i] = tag
	}
	return tags
}

// columnList is the explicit column list of R's inserts and selects.
func columnList[R any]() string { return strings.Join(tagsOf[R](), ", ") }

// toColumns turns rows into one slice per field (column-major), the shape
// clickhouse-go appends fastest: one Column(i).Append per column instead of
// a reflective AppendStruct per row.
func toColumns[R any](rows []R) []any { return toColumnsReusing(nil, rows) }

// toColumnsReusing is toColumns that may reuse the room of cols, columns
// toColumns made for an earlier block of the same insert that the driver
// is done with (it copies what it is given, and the block was sent).
func toColumnsReusing[R any](cols []any, rows []R) []any {
	if in, ok := any(rows).([]InboxRow); ok {
		return inboxColumnsInto(cols, in) // every ingested record: no reflection
	}
	return reflectColumns(rows)
}

// reflectColumns is toColumns for any row struct.
func reflectColumns[R any](rows []R) []any {
	v := reflect.ValueOf(rows)
	t := reflect.TypeFor[R]()
	cols := make([]any, t.NumField())
	for f := range cols {
		col := reflect.MakeSlice(reflect.SliceOf(t.Field(f).Type), len(rows), len(rows))
		for i := range rows {
			col.Index(i).Set(v.Index(i).Field(f))
		}
		cols[f] = col.Interface()
	}
	return cols
}

// appendColumns appends column-major data to a prepared batch.
func appendColumns(b driver.Batch, cols []any) error {
	for i, c := range cols {
		if err := appendColumn(b.Column(i), c); err != nil {
			return fmt.Errorf("column %d: %w", i, err)
		}
	}
	return nil
}

// appendColumn appends one column's values. An Array column's values (a
// slice of slices) go in row by row: clickhouse-go's Append of the whole
// column (v2.51) hands each row on as a reflect.Value, which misses the
// driver's typed path for a row and reflects over, and allocates for,
// every element (the histograms' buckets, the timelines' reads: hundreds a
// record). A row as a typed slice takes that path, which still boxes each
// element: BenchmarkAppendColumns, 10,000 rows of 120-token answers, 130-153
// ms of CPU against 162-184 ms for the whole column (same run), and 0.59 of
// the allocations of BenchmarkInsertDirect's inserts.
func appendColumn(col driver.BatchColumn, c any) error {
	switch v := c.(type) {
	case [][]int32:
		return appendRows(col, v)
	case [][]uint32:
		return appendRows(col, v)
	case [][]uint64:
		return appendRows(col, v)
	case [][]bool:
		return appendRows(col, v)
	case [][]string:
		return appendRows(col, v)
	}
	return col.Append(c)
}

func appendRows[T any](col driver.BatchColumn, rows [][]T) error {
	for _, r := range rows {
		if err := col.AppendRow(r); err != nil {
			return err
		}
	}
	return nil
}

// inboxColumnsOf is toColumns for inbox rows, written out: the same
// columns in InboxRow's field order (TestInboxColumnsOf).
func inboxColumnsOf(rows []InboxRow) []any { return inboxColumnsInto(nil, rows) }

// inboxColumnsInto is inboxColumnsOf in the room of cols (its result for
// other rows), when there is enough.
func inboxColumnsInto(cols []any, rows []InboxRow) []any {
	cols = inboxColumnsSized(cols, len(rows))
	fillInboxColumns(cols, 0, rows)
	return cols
}

// inboxColumnsSized is n rows of inbox columns (inboxColumnsOf's shape), in
// the room of cols when there is enough, their values to be filled in
// (fillInboxColumns).
func inboxColumnsSized(cols []any, n int) []any {
	str := func(i int) []string {
		if i < len(cols) {
			if c, ok := cols[i].([]string); ok && cap(c) >= n {
				return c[:n]
			}
		}
		return make([]string, n)
	}
	kind, site, id, origin := str(0), str(1), str(2), str(3)
	at := make([]time.Time, n)
	if len(cols) > 4 {
		if c, ok := cols[4].([]time.Time); ok && cap(c) >= n {
			at = c[:n]
		}
	}
	country, region, browser := str(5), str(6), str(7)
	major := make([]uint16, n)
	if len(cols) > 8 {
		if c, ok := cols[8].([]uint16); ok && cap(c) >= n {
			major = c[:n]
		}
	}
	os, device, payload := str(9), str(10), str(11)
	return []any{kind, site, id, origin, at, country, region, browser, major, os, device, payload}
}

// fillInboxColumns sets rows k, k+1, ... of cols (inboxColumnsSized) to rows.
func fillInboxColumns(cols []any, k int, rows []InboxRow) {
	kind, site, id, origin := cols[0].([]string), cols[1].([]string), cols[2].([]string), cols[3].([]string)
	at := cols[4].([]time.Time)
	country, region, browser, major := cols[5].([]string), cols[6].([]string), cols[7].([]string), cols[8].([]uint16)
	os, device, payload := cols[9].([]string), cols[10].([]string), cols[11].([]string)
	for i := range rows {
		r, j := &rows[i], k+i
		kind[j], site[j], id[j], origin[j] = r.Kind, r.Site, r.StreamID, r.OriginID
		at[j] = r.ReceivedAt
		country[j], region[j], browser[j], major[j] = r.Country, r.Region, r.Browser, r.BrowserMajor
		os[j], device[j], payload[j] = r.OS, r.Device, r.Payload
	}
}

// inboxBlocks fills blocks of inbox columns from parts, in order: the
// rows of parts[0], then of parts[1], and so on, as if they were one
// slice. Its calls must ask for the rows in order, each from where the
// last ended (insertBlocks does).
func inboxBlocks(parts [][]InboxRow) func(cols []any, k, n int) []any {
	p, i := 0, 0 // the next row: parts[p][i]
	return func(cols []any, _, n int) []any {
		cols = inboxColumnsSized(cols, n)
		for j := 0; j < n; {
			for i == len(parts[p]) {
				p, i = p+1, 0
			}
			m := min(n-j, len(parts[p])-i)
			fillInboxColumns(cols, j, parts[p][i:i+m])
			i, j = i+m, j+m
		}
		return cols
	}
}
