// Package schema holds the ClickHouse DDL of itlmon as numbered .sql files,
// embedded in the binary and applied in order by store.Migrate.
//
// API summary:
//
//	migs, err := schema.Migrations() // ascending by Version
//	for _, m := range migs { for _, stmt := range m.Statements { ... } }
//
// Rules for the files: named NNN_name.sql, never renumbered or edited once
// released (add a new file instead), every statement idempotent (IF NOT
// EXISTS), statements end with ";" at the end of a line, no data-rewriting
// mutations. Tables: itl_streams (raw, one row per stream), itl_stream_ids
// (dedup check), itl_rollup_1m (per-minute aggregates via a materialized
// view), itl_timelines (sampled raw timelines).
package schema

import (
	"embed"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed *.sql
var files embed.FS

// Migration is one numbered .sql file.
type Migration struct {
	Version    uint32
	Name       string   // file name, e.g. "001_streams.sql"
	Statements []string // in file order, without the trailing ";"
}

// Migrations returns the embedded migrations in ascending version order. It
// fails on a badly named file or a duplicate version.
func Migrations() ([]Migration, error) {
	entries, err := files.ReadDir(".")
	if err != nil {
		return nil, fmt.Errorf("read schema: %w", err)
	}
	var migs []Migration
	seen := map[uint32]string{}
	for _, e := range entries {
		name := e.Name()
		if path.Ext(name) != ".sql" {
			continue
		}
		v, err := version(name)
		if err != nil {
			return nil, err
		}
		if prev, ok := seen[v]; ok {
			return nil, fmt.Errorf("schema: %s and %s share version %d", prev, name, v)
		}
		seen[v] = name
		body, err := files.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		migs = append(migs, Migration{Version: v, Name: name, Statements: Split(string(body))})
	}
	sort.Slice(migs, func(i, j int) bool { return migs[i].Version < migs[j].Version })
	return migs, nil
}

// version parses the NNN of NNN_name.sql.
func version(name string) (uint32, error) {
	num, _, ok := strings.Cut(name, "_")
	v, err := strconv.ParseUint(num, 10, 32)
	if !ok || err != nil || v == 0 {
		return 0, fmt.Errorf("schema: %s: want a name like 001_name.sql", name)
	}
	return uint32(v), nil
}

// Split cuts a file into statements at lines ending with ";". Comment-only
// and blank statements are dropped.
func Split(sql string) []string {
	var stmts []string
	var cur strings.Builder
	flush := func() {
		if s := strings.TrimSpace(cur.String()); hasCode(s) {
			stmts = append(stmts, s)
		}
		cur.Reset()
	}
	for _, line := range strings.SplitAfter(sql, "\n") {
		trimmed := strings.TrimRight(line, " \t\r\n")
		if strings.HasSuffix(trimmed, ";") && !strings.HasPrefix(strings.TrimSpace(trimmed), "--") {
			cur.WriteString(strings.TrimSuffix(trimmed, ";"))
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return stmts
}

// hasCode reports whether s holds anything but comments and space.
func hasCode(s string) bool {
	for _, line := range strings.Split(s, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "--") {
			return true
		}
	}
	return false
}
