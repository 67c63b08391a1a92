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
func toColumns[R any](rows []R) []any {
	if in, ok := any(rows).([]InboxRow); ok {
		return inboxColumnsOf(in) // every ingested record: no reflection
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
		if err := b.Column(i).Append(c); err != nil {
			return fmt.Errorf("column %d: %w", i, err)
		}
	}
	return nil
}

// inboxColumnsOf is toColumns for inbox rows, written out: the same
// columns in InboxRow's field order (TestInboxColumnsOf).
func inboxColumnsOf(rows []InboxRow) []any {
	n := len(rows)
	kind, site, id, origin := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	at := make([]time.Time, n)
	country, region, browser := make([]string, n), make([]string, n), make([]string, n)
	major := make([]uint16, n)
	os, device, payload := make([]string, n), make([]string, n), make([]string, n)
	for i := range rows {
		r := &rows[i]
		kind[i], site[i], id[i], origin[i] = r.Kind, r.Site, r.StreamID, r.OriginID
		at[i] = r.ReceivedAt
		country[i], region[i], browser[i], major[i] = r.Country, r.Region, r.Browser, r.BrowserMajor
		os[i], device[i], payload[i] = r.OS, r.Device, r.Payload
	}
	return []any{kind, site, id, origin, at, country, region, browser, major, os, device, payload}
}
