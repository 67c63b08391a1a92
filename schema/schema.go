// Package schema holds the ClickHouse DDL of itlmon as numbered .sql files,
// embedded in the binary and applied in order by store.Migrate, one
// migrator at a time (store's schema lock). A migration may be cut after
// any statement (a killed collector) and is then run again from its first
// statement by the next migrator, on whatever the cut left: hence the rule
// below that every statement be idempotent.
//
// API summary:
//
//	migs, err := schema.Migrations() // ascending by Version
//	for _, m := range migs { for _, stmt := range m.Statements { ... } }
//
// Rules for the files: named NNN_name.sql, never renumbered or edited once
// released (add a new file instead), every statement idempotent (IF NOT
// EXISTS), statements end with ";" at the end of a line, no data-rewriting
// mutations. The one statement ClickHouse cannot make idempotent, ALTER TABLE
// t RENAME COLUMN [IF EXISTS] a TO b, is skipped by the runner when t already
// has a column b (see RenameColumn). A CREATE ... IF NOT EXISTS of an object
// that exists is skipped by the runner too (see CreateIfMissing): ClickHouse
// analyses a view's query before it looks for the view, so run again after
// a later statement of its file changed a column the query reads, it would
// fail. Tables: itl_inbox (records as they
// arrived, at least once), itl_promoted_ids and itl_promoted (what the
// promoter moved, exactly once, into:) itl_streams (raw, one row per
// stream), itl_rollup_1m (per-minute aggregates via materialized views;
// itl_rollup_1m_site the same per minute and site alone),
// itl_rollup_1h and itl_rollup_1h_dim (per hour, by every dimension and by
// one at a time; itl_rollup_1h_from: the hour from which they are complete),
// itl_rollup_1d_dim (per day, by one dimension at a time; complete from the
// day itl_rollup_1d_from holds),
// itl_streams_sample (the streams whose id hashes into the lowest
// sixteenth: a comparison's sample; complete from the hour
// itl_streams_sample_from holds), itl_rechunk_1h (the re-chunking
// counters per hour and one dimension at a time; complete from the hour
// itl_rechunk_1h_from holds),
// itl_timelines (sampled raw timelines), itl_origin and itl_origin_1m (the
// origin vantage point and its rollup), itl_edge (the edge vantage point); itl_otlp_exports (the minutes the
// OpenTelemetry export claimed).
//
// Parse and Cluster (cluster.go) give each statement its form in the cluster
// layout (itlmon migrate --cluster): the per-shard local database, ON
// CLUSTER and Replicated engines with replication, and the ALTER or DROP
// that keeps the main database's Distributed table in step.
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

// RenameColumn reports whether stmt is a single-column rename,
// "ALTER TABLE t RENAME COLUMN [IF EXISTS] from TO to" (keywords in any case,
// leading comment lines allowed, identifiers plain or in backquotes), and
// returns its table and column names. Such a statement is done once t has a
// column named to: running it again would fail (or, had a column of the old
// name been added since, rename the wrong one), so the runner skips it then.
func RenameColumn(stmt string) (table, from, to string, ok bool) {
	var words []string
	for _, line := range strings.Split(stmt, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "--") {
			words = append(words, strings.Fields(l)...)
		}
	}
	kw := func(i int, want string) bool { return i < len(words) && strings.EqualFold(words[i], want) }
	if !kw(0, "ALTER") || !kw(1, "TABLE") || len(words) < 3 || !kw(3, "RENAME") || !kw(4, "COLUMN") {
		return "", "", "", false
	}
	i := 5
	if kw(i, "IF") && kw(i+1, "EXISTS") {
		i += 2
	}
	if len(words) != i+3 || !kw(i+1, "TO") {
		return "", "", "", false
	}
	return unquote(words[2]), unquote(words[i]), unquote(words[i+2]), true
}

// RenameInPlace reports whether stmt is RENAME TABLE v TO t, t TO v: a
// view renamed and back in one statement, which leaves everything as it was
// except what the server holds of the view since it last loaded it (see
// 011_view_ids.sql). A statement cut between its two renames (a server
// that died inside it) left v named t: RenameInPlaceRest gives what
// completes it.
func RenameInPlace(stmt string) (view, temp string, ok bool) {
	toks, err := lex(stmt)
	if err != nil {
		return "", "", false
	}
	return renameInPlace(toks)
}

// renameInPlace parses RENAME TABLE v TO t, t TO v (names unqualified).
func renameInPlace(toks []token) (view, temp string, ok bool) {
	if len(toks) == 10 && toks[9].text == ";" {
		toks = toks[:9]
	}
	if len(toks) != 9 || !toks[0].is("RENAME") || !toks[1].is("TABLE") || !toks[3].is("TO") ||
		toks[5].text != "," || !toks[7].is("TO") {
		return "", "", false
	}
	for _, i := range []int{2, 4, 6, 8} {
		if !toks[i].isName() {
			return "", "", false
		}
	}
	v, t := toks[2].name(), toks[4].name()
	if v == t || toks[6].name() != t || toks[8].name() != v {
		return "", "", false
	}
	return v, t, true
}

// RenameInPlaceRest is the second rename of q, a rename in place in the
// form it runs (qualified, maybe ON CLUSTER): RENAME TABLE t TO v.
func RenameInPlaceRest(q string) (string, bool) {
	toks, err := lex(q)
	if err != nil {
		return "", false
	}
	for _, t := range toks {
		if t.text == "," {
			return "RENAME TABLE " + strings.TrimSpace(q[t.end:]), true
		}
	}
	return "", false
}

// unquote strips one pair of backquotes.
func unquote(id string) string {
	if len(id) >= 2 && id[0] == '`' && id[len(id)-1] == '`' {
		return id[1 : len(id)-1]
	}
	return id
}

// CreateIfMissing reports whether stmt is a CREATE TABLE or CREATE
// [MATERIALIZED] VIEW ... IF NOT EXISTS, and returns the object it creates.
// Such a statement is done once the object exists, and the runner skips it
// then.
func CreateIfMissing(stmt string) (object string, ok bool) {
	s, err := Parse(stmt)
	if err != nil || !s.IfNotExists || s.Kind != CreateTable && s.Kind != CreateView {
		return "", false
	}
	return s.Object, true
}
