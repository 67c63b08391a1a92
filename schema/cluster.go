package schema

import (
	"errors"
	"fmt"
	"strings"
)

// This file rewrites the statements of the .sql files for a cluster layout:
// the files' tables and views live in a per-shard local database, and the
// main database holds one Distributed table per local table (collector/store
// creates those). The rewriting works on tokens, so comments, strings and
// the files' formatting are kept, and it is general over the statement kinds
// ClickHouse DDL has, not over the statements the files hold today:
//
//   - CREATE TABLE, CREATE [MATERIALIZED] VIEW, ALTER TABLE, DROP
//     TABLE|VIEW|DICTIONARY: the object is qualified with the local database
//     and, with replication, ON CLUSTER follows its name;
//   - with replication, an engine of the MergeTree family becomes its
//     Replicated variant (path /clickhouse/tables/{shard}/{database}/{table},
//     replica {replica}, then the original arguments), and the setting
//     non_replicated_deduplication_window becomes
//     replicated_deduplication_window (what the files ask for, in a
//     replicated table's terms);
//   - RENAME TABLE v TO t, t TO v, a rename in place (see RenameInPlace):
//     every name qualified with the local database and, with replication,
//     ON CLUSTER at the end;
//   - any other statement (INSERT, another RENAME, TRUNCATE, OPTIMIZE,
//     SYSTEM, ...) is refused: a file that needs one must teach this code
//     what it means on a cluster first.
//
// The Distributed table of a local table mirrors its columns: DistributedAlter
// gives an ALTER's column commands (ADD, DROP, MODIFY, RENAME, COMMENT
// COLUMN) for it, and DistributedDrop a DROP TABLE.

// Kind is the kind of a schema statement.
type Kind int

// Statement kinds.
const (
	CreateTable Kind = iota + 1
	CreateView       // CREATE VIEW or CREATE MATERIALIZED VIEW
	AlterTable
	DropTable // DROP TABLE (which ClickHouse also applies to views)
	DropView  // DROP VIEW or DROP DICTIONARY
	// RenameInPlaceKind is RENAME TABLE v TO t, t TO v (RenameInPlace):
	// Object is v.
	RenameInPlaceKind
)

// Statement is a schema statement with the position of its object's name.
type Statement struct {
	Kind        Kind
	Object      string // the table or view, unquoted
	IfNotExists bool   // CREATE ... IF NOT EXISTS
	text        string
	toks        []token
	name        int    // index in toks of the object's name
	temp        string // a rename in place's passing name
}

// Cluster says how statements become their cluster form.
type Cluster struct {
	Name       string // the cluster in remote_servers (system.clusters)
	LocalDB    string // the per-shard database holding the files' tables and views
	Replicated bool   // Replicated engines and ON CLUSTER DDL
}

// ReplicatedPath is the Keeper path of a local table's replicas (macros
// expanded by the server: {shard} and {replica} from its config, {database}
// and {table} from the table).
const ReplicatedPath = "/clickhouse/tables/{shard}/{database}/{table}"

// ReplicaName is a local table's replica name (the server's {replica} macro).
const ReplicaName = "{replica}"

// Parse classifies stmt. It fails on a statement kind the cluster layout
// does not handle and on an object name qualified with a database (the
// files name objects of the current database only).
func Parse(stmt string) (Statement, error) {
	toks, err := lex(stmt)
	if err != nil {
		return Statement{}, err
	}
	s := Statement{text: stmt, toks: toks}
	kw := func(i int, words ...string) bool {
		for k, w := range words {
			if i+k >= len(toks) || !toks[i+k].is(w) {
				return false
			}
		}
		return true
	}
	i := 0
	switch {
	case kw(0, "CREATE", "TABLE"):
		s.Kind, i = CreateTable, 2
	case kw(0, "CREATE", "MATERIALIZED", "VIEW"):
		s.Kind, i = CreateView, 3
	case kw(0, "CREATE", "VIEW"):
		s.Kind, i = CreateView, 2
	case kw(0, "ALTER", "TABLE"):
		s.Kind, i = AlterTable, 2
	case kw(0, "DROP", "TABLE"):
		s.Kind, i = DropTable, 2
	case kw(0, "DROP", "VIEW"), kw(0, "DROP", "DICTIONARY"):
		s.Kind, i = DropView, 2
	case kw(0, "RENAME", "TABLE"):
		object, temp, ok := renameInPlace(toks)
		if !ok {
			return Statement{}, fmt.Errorf("schema: only a rename in place (RENAME TABLE v TO t, t TO v) is supported: %.60q", strings.TrimSpace(firstLine(toks, stmt)))
		}
		s.Kind, s.Object, s.temp, s.name = RenameInPlaceKind, object, temp, 2
		return s, nil
	default:
		return Statement{}, fmt.Errorf("schema: statement not supported in a cluster layout: %.60q", strings.TrimSpace(firstLine(toks, stmt)))
	}
	switch {
	case kw(i, "IF", "NOT", "EXISTS"):
		s.IfNotExists = true
		i += 3
	case kw(i, "IF", "EXISTS"):
		i += 2
	}
	if i >= len(toks) || !toks[i].isName() {
		return Statement{}, fmt.Errorf("schema: no object name in %.60q", firstLine(toks, stmt))
	}
	if i+1 < len(toks) && toks[i+1].text == "." {
		return Statement{}, fmt.Errorf("schema: %s names a database: the files name objects of the current database only", toks[i].text)
	}
	s.name, s.Object = i, toks[i].name()
	return s, nil
}

// firstLine is the statement from its first token to the end of that line,
// for error messages.
func firstLine(toks []token, stmt string) string {
	if len(toks) == 0 {
		return ""
	}
	rest := stmt[toks[0].pos:]
	if line, _, ok := strings.Cut(rest, "\n"); ok {
		return line
	}
	return rest
}

// Local returns s as it runs on a node of c: its object qualified with
// c.LocalDB and, with c.Replicated, ON CLUSTER c.Name after the name, a
// MergeTree-family engine made Replicated, non_replicated_deduplication_window
// named replicated_deduplication_window. Names inside the statement (a
// view's source and target tables, its query) stay unqualified: run it with
// c.LocalDB as the default database.
func (c Cluster) Local(s Statement) (string, error) {
	if s.Kind == RenameInPlaceKind {
		v, t := QuoteIdent(c.LocalDB)+"."+QuoteIdent(s.Object), QuoteIdent(c.LocalDB)+"."+QuoteIdent(s.temp)
		q := "RENAME TABLE " + v + " TO " + t + ", " + t + " TO " + v
		if c.Replicated {
			q += " ON CLUSTER " + QuoteIdent(c.Name)
		}
		return q, nil
	}
	var edits []edit
	name := s.toks[s.name]
	after := QuoteIdent(c.LocalDB) + "." + QuoteIdent(s.Object)
	if c.Replicated {
		after += " ON CLUSTER " + QuoteIdent(c.Name)
	}
	edits = append(edits, edit{name.pos, name.end, after})
	if c.Replicated {
		if s.Kind == CreateTable || s.Kind == CreateView {
			e, err := replicatedEngine(s)
			if err != nil {
				return "", err
			}
			edits = append(edits, e...)
		}
		for _, t := range s.toks {
			if t.kind == tokIdent && strings.EqualFold(t.text, "non_replicated_deduplication_window") {
				edits = append(edits, edit{t.pos, t.end, "replicated_deduplication_window"})
			}
		}
	}
	return apply(s.text, edits), nil
}

// replicatedEngine returns the edits that make the statement's MergeTree-
// family engine (the first ENGINE at the top level, before a view's AS) a
// Replicated one. Other engines are left alone.
func replicatedEngine(s Statement) ([]edit, error) {
	depth := 0
	for i := s.name + 1; i < len(s.toks); i++ {
		t := s.toks[i]
		switch {
		case t.text == "(":
			depth++
			continue
		case t.text == ")":
			depth--
			continue
		case depth != 0:
			continue
		case s.Kind == CreateView && t.is("AS"):
			return nil, nil // the query: no engine before it (a view with TO)
		case !t.is("ENGINE"):
			continue
		}
		j := i + 1
		if j < len(s.toks) && s.toks[j].text == "=" {
			j++
		}
		if j >= len(s.toks) || s.toks[j].kind != tokIdent {
			return nil, errors.New("schema: ENGINE without a name")
		}
		engine := s.toks[j]
		if !strings.HasSuffix(engine.text, "MergeTree") || strings.HasPrefix(engine.text, "Replicated") ||
			strings.HasPrefix(engine.text, "Shared") {
			return nil, nil
		}
		args := "'" + ReplicatedPath + "', '" + ReplicaName + "'"
		if j+1 < len(s.toks) && s.toks[j+1].text == "(" {
			open := s.toks[j+1]
			if j+2 < len(s.toks) && s.toks[j+2].text != ")" {
				args += ", "
			}
			return []edit{{engine.pos, open.end, "Replicated" + engine.text + "(" + args}}, nil
		}
		return []edit{{engine.pos, engine.end, "Replicated" + engine.text + "(" + args + ")"}}, nil
	}
	return nil, nil
}

// DistributedAlter returns, for an ALTER TABLE, the ALTER that gives the
// table's Distributed counterpart db.Object the same column changes (its ADD,
// DROP, MODIFY, RENAME and COMMENT COLUMN commands, in order, with ON
// CLUSTER when c.Replicated), and false when it has none (a view's MODIFY
// QUERY, MODIFY TTL, MODIFY SETTING, indexes: they concern the local table
// only).
func (c Cluster) DistributedAlter(s Statement, db string) (string, bool) {
	if s.Kind != AlterTable {
		return "", false
	}
	var cmds []string
	for _, cmd := range splitTop(s.toks[s.name+1:]) {
		if len(cmd) < 2 || !cmd[1].is("COLUMN") {
			continue
		}
		if cmd[0].is("ADD") || cmd[0].is("DROP") || cmd[0].is("MODIFY") || cmd[0].is("RENAME") || cmd[0].is("COMMENT") {
			cmds = append(cmds, s.text[cmd[0].pos:cmd[len(cmd)-1].end])
		}
	}
	if len(cmds) == 0 {
		return "", false
	}
	return "ALTER TABLE " + QuoteIdent(db) + "." + QuoteIdent(s.Object) + c.OnCluster() + "\n" +
		strings.Join(cmds, ",\n"), true
}

// DistributedDrop returns, for a DROP TABLE, the DROP of the table's
// Distributed counterpart db.Object (IF EXISTS: a DROP TABLE may name a
// view, which has none).
func (c Cluster) DistributedDrop(s Statement, db string) (string, bool) {
	if s.Kind != DropTable {
		return "", false
	}
	return "DROP TABLE IF EXISTS " + QuoteIdent(db) + "." + QuoteIdent(s.Object) + c.OnCluster(), true
}

// OnCluster is the ON CLUSTER clause (with a leading space) of c's DDL: empty
// without replication, where DDL runs on every node instead.
func (c Cluster) OnCluster() string {
	if !c.Replicated {
		return ""
	}
	return " ON CLUSTER " + QuoteIdent(c.Name)
}

// QuoteIdent quotes a ClickHouse identifier with backquotes.
func QuoteIdent(s string) string {
	return "`" + strings.NewReplacer(`\`, `\\`, "`", "\\`").Replace(s) + "`"
}

// splitTop cuts tokens at top-level commas.
func splitTop(toks []token) [][]token {
	var out [][]token
	depth, start := 0, 0
	for i, t := range toks {
		switch t.text {
		case "(", "[":
			depth++
		case ")", "]":
			depth--
		case ",":
			if depth == 0 && t.kind == tokPunct {
				out = append(out, toks[start:i])
				start = i + 1
			}
		}
	}
	return append(out, toks[start:])
}

// edit replaces text[from:to] with s.
type edit struct {
	from, to int
	s        string
}

// apply applies non-overlapping edits, given in any order.
func apply(text string, edits []edit) string {
	for i := 1; i < len(edits); i++ { // few edits: insertion sort by position
		for j := i; j > 0 && edits[j].from < edits[j-1].from; j-- {
			edits[j], edits[j-1] = edits[j-1], edits[j]
		}
	}
	var b strings.Builder
	last := 0
	for _, e := range edits {
		b.WriteString(text[last:e.from])
		b.WriteString(e.s)
		last = e.to
	}
	b.WriteString(text[last:])
	return b.String()
}

type tokKind int

const (
	tokIdent  tokKind = iota + 1 // a bare word: keyword or identifier
	tokQuoted                    // `ident` or "ident"
	tokString                    // 'string'
	tokNumber
	tokPunct
)

// token is one lexical token of a statement; pos and end are byte offsets.
type token struct {
	kind     tokKind
	text     string
	pos, end int
}

// is reports whether t is the bare word w, in any case.
func (t token) is(w string) bool { return t.kind == tokIdent && strings.EqualFold(t.text, w) }

func (t token) isName() bool { return t.kind == tokIdent || t.kind == tokQuoted }

// name is t's identifier without its quotes.
func (t token) name() string {
	if t.kind != tokQuoted {
		return t.text
	}
	inner := t.text[1 : len(t.text)-1]
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		if inner[i] == '\\' && i+1 < len(inner) {
			i++
		} else if inner[i] == t.text[0] && i+1 < len(inner) && inner[i+1] == t.text[0] {
			i++ // a doubled quote
		}
		b.WriteByte(inner[i])
	}
	return b.String()
}

// lex cuts a statement into tokens, skipping space and comments (-- to the
// end of the line, /* */).
func lex(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case strings.HasPrefix(s[i:], "--"):
			if n := strings.IndexByte(s[i:], '\n'); n >= 0 {
				i += n + 1
			} else {
				i = len(s)
			}
		case strings.HasPrefix(s[i:], "/*"):
			n := strings.Index(s[i+2:], "*/")
			if n < 0 {
				return nil, errors.New("schema: unterminated comment")
			}
			i += n + 4
		case c == '\'' || c == '`' || c == '"':
			j := i + 1
			for ; j < len(s); j++ {
				if s[j] == '\\' {
					j++
					continue
				}
				if s[j] == c {
					if j+1 < len(s) && s[j+1] == c { // doubled quote
						j++
						continue
					}
					break
				}
			}
			if j >= len(s) {
				return nil, fmt.Errorf("schema: unterminated %c at offset %d", c, i)
			}
			kind := tokQuoted
			if c == '\'' {
				kind = tokString
			}
			toks = append(toks, token{kind, s[i : j+1], i, j + 1})
			i = j + 1
		case isWordByte(c) && !(c >= '0' && c <= '9'):
			j := i
			for j < len(s) && isWordByte(s[j]) {
				j++
			}
			toks = append(toks, token{tokIdent, s[i:j], i, j})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(s) && (isWordByte(s[j]) || s[j] == '.') {
				j++
			}
			toks = append(toks, token{tokNumber, s[i:j], i, j})
			i = j
		default:
			toks = append(toks, token{tokPunct, s[i : i+1], i, i + 1})
			i++
		}
	}
	return toks, nil
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}
