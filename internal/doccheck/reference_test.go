// Package doccheck keeps the docs true: every table and column the
// schema creates, and every HTTP route the collector serves, is documented
// in docs/reference.md, every flag of itlmon serve and migrate in
// docs/operating.md, and nothing documented is missing from the code.
package doccheck

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/demo"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/origin"
)

func TestMain(m *testing.M) {
	chdb.MaybeRunChild()
	os.Exit(chtest.Main(m))
}

const referencePath = "../../docs/reference.md"

// reference is what docs/reference.md documents.
type reference struct {
	tables    map[string][]column // "### `itl_streams`" sections under "## Tables": their column tables
	views     []string            // first cells of the table under "### Materialized views"
	endpoints []string            // first cells of the tables under "## HTTP endpoints"
}

type column struct{ name, typ string }

func (r reference) isTable(heading string) bool {
	_, ok := r.tables[heading]
	return ok
}

var (
	headingRe = regexp.MustCompile("^(#{2,3}) (.*)$")
	cellRe    = regexp.MustCompile("^\\| *`([^`]+)` *\\|(?: *`([^`]+)` *\\|)?")
)

func readReference(t *testing.T) reference {
	t.Helper()
	b, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	ref := reference{tables: map[string][]column{}}
	var section, sub string
	for _, line := range strings.Split(string(b), "\n") {
		if m := headingRe.FindStringSubmatch(line); m != nil {
			if m[1] == "##" {
				section, sub = m[2], ""
			} else {
				sub = m[2]
				if name, ok := strings.CutPrefix(sub, "`"); ok && section == "Tables" && strings.HasSuffix(name, "`") {
					sub = strings.TrimSuffix(name, "`")
					if _, dup := ref.tables[sub]; dup {
						t.Errorf("reference: table %s documented twice", sub)
					}
					ref.tables[sub] = nil
				}
			}
			continue
		}
		switch {
		case section == "Tables" && sub == "Materialized views":
			if m := cellRe.FindStringSubmatch(line); m != nil {
				ref.views = append(ref.views, m[1])
			}
		case section == "Tables" && ref.tables[sub] != nil || ref.isTable(sub):
			if m := cellRe.FindStringSubmatch(line); m != nil && m[1] != "column" {
				ref.tables[sub] = append(ref.tables[sub], column{m[1], m[2]})
			}
		case section == "HTTP endpoints":
			if m := cellRe.FindStringSubmatch(line); m != nil {
				ref.endpoints = append(ref.endpoints, m[1])
			}
		}
	}
	if len(ref.tables) == 0 || len(ref.endpoints) == 0 {
		t.Fatalf("reference: no tables (%d) or no endpoints (%d) found: has its layout changed?", len(ref.tables), len(ref.endpoints))
	}
	return ref
}

// TestReferenceTables applies schema/*.sql to a fresh database on the real
// engine and compares every table's columns and types, in order, with the
// reference; every materialized view must be named in it.
func TestReferenceTables(t *testing.T) {
	ref := readReference(t)
	db := chtest.NewDB(t, store.Options{})
	ctx := context.Background()
	rows, err := db.Conn().Query(ctx, `SELECT t.name, t.engine, c.name, c.type
		FROM system.tables AS t LEFT JOIN system.columns AS c ON c.database = t.database AND c.table = t.name
		WHERE t.database = currentDatabase() AND NOT startsWith(t.name, '.inner')
		ORDER BY t.name, c.position`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	schema := map[string][]column{}
	var views []string
	for rows.Next() {
		var table, engine, name, typ string
		if err := rows.Scan(&table, &engine, &name, &typ); err != nil {
			t.Fatal(err)
		}
		if engine == "MaterializedView" || engine == "View" {
			if !slices.Contains(views, table) {
				views = append(views, table)
			}
			continue
		}
		schema[table] = append(schema[table], column{name, typ})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for table, cols := range schema {
		doc, ok := ref.tables[table]
		if !ok {
			t.Errorf("table %s is not documented; add to %s:\n### `%s`\n%s", table, referencePath, table, rowsFor(cols))
			continue
		}
		if missing := minus(cols, doc); len(missing) > 0 {
			t.Errorf("%s: columns not documented (or documented with another type); add:\n%s", table, rowsFor(missing))
		}
		if extra := minus(doc, cols); len(extra) > 0 {
			t.Errorf("%s: documented columns the schema does not have (or not with that type):\n%s", table, rowsFor(extra))
		}
	}
	for table := range ref.tables {
		if _, ok := schema[table]; !ok {
			t.Errorf("table %s is documented but the schema has no such table", table)
		}
	}
	for _, v := range views {
		if !slices.Contains(ref.views, v) {
			t.Errorf("materialized view %s is not named under \"### Materialized views\"", v)
		}
	}
	for _, v := range ref.views {
		if !slices.Contains(views, v) {
			t.Errorf("%s is named under \"### Materialized views\" but the schema has no such view", v)
		}
	}
}

func minus(a, b []column) []column {
	var out []column
	for _, c := range a {
		if !slices.Contains(b, c) {
			out = append(out, c)
		}
	}
	return out
}

func rowsFor(cols []column) string {
	var b strings.Builder
	for _, c := range cols {
		fmt.Fprintf(&b, "| `%s` | `%s` | |\n", c.name, c.typ)
	}
	return b.String()
}

// TestReferenceEndpoints reads the collector's source for the patterns it
// registers on its ServeMuxes (Handle and HandleFunc calls) and compares
// them with the reference's endpoint tables.
func TestReferenceEndpoints(t *testing.T) {
	ref := readReference(t)
	routes := collectorRoutes(t)
	for _, r := range routes {
		if !slices.Contains(ref.endpoints, r) {
			t.Errorf("route %q is not documented under \"## HTTP endpoints\" in %s", r, referencePath)
		}
	}
	for _, e := range ref.endpoints {
		if !slices.Contains(routes, e) {
			t.Errorf("%s documents endpoint %q, which the collector does not route", referencePath, e)
		}
	}
}

// collectorRoutes returns the route patterns of collector/ (tests
// excluded). A pattern is a string literal, or a literal joined to a value
// this function knows how to list (see dynamic); any other is an error, so
// a new kind of route cannot go unchecked.
func collectorRoutes(t *testing.T) []string {
	t.Helper()
	var routes []string
	fset := token.NewFileSet()
	err := filepath.WalkDir("../../collector", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
				return true
			}
			pats, err := patterns(path, call.Args[0])
			if err != nil {
				t.Errorf("%s: %v", fset.Position(call.Pos()), err)
			}
			routes = append(routes, pats...)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) == 0 {
		t.Fatal("no routes found in collector/")
	}
	slices.Sort(routes)
	return slices.Compact(routes)
}

func patterns(path string, e ast.Expr) ([]string, error) {
	switch e := e.(type) {
	case *ast.BasicLit:
		s, err := strconv.Unquote(e.Value)
		return []string{s}, err
	case *ast.BinaryExpr:
		lit, ok := e.X.(*ast.BasicLit)
		if !ok || e.Op != token.ADD {
			break
		}
		prefix, err := strconv.Unquote(lit.Value)
		if err != nil {
			return nil, err
		}
		key := filepath.Base(path) + ": " + exprString(e.Y)
		list, ok := dynamic[key]
		if !ok {
			return nil, fmt.Errorf("route pattern %q+%s: teach doccheck (dynamic) what it lists", prefix, key)
		}
		var out []string
		for _, s := range list(path) {
			out = append(out, prefix+s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("route pattern %s: not a literal doccheck can read", exprString(e))
}

// dynamic lists the values of the non-literal parts of route patterns, by
// file and expression.
var dynamic = map[string]func(path string) []string{
	// the ingest route for origin and edge timelines
	"handler.go: origin.Path": func(string) []string { return []string{origin.Path} },
	// the module's assets: the first field of each moduleAssets entry
	"assets.go: m.name": func(path string) []string { return literalStrings(path, "moduleAssets") },
	// the demo's streaming endpoints: apiPaths
	"demo.go: a.Path()": func(path string) []string { return literalStrings(path, "apiPaths") },
	// the demo page's configuration
	"demo.go: ConfigPath": func(string) []string { return []string{demo.ConfigPath} },
}

// literalStrings returns the first string literal of each element of the
// composite literal assigned to the package-level variable name in path.
func literalStrings(path, name string) []string {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		panic(err)
	}
	var out []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range gd.Specs {
			vs, ok := s.(*ast.ValueSpec)
			if !ok || len(vs.Names) != 1 || vs.Names[0].Name != name || len(vs.Values) != 1 {
				continue
			}
			cl, ok := vs.Values[0].(*ast.CompositeLit)
			if !ok {
				continue
			}
			for _, el := range cl.Elts {
				if inner, ok := el.(*ast.CompositeLit); ok && len(inner.Elts) > 0 {
					el = inner.Elts[0]
				}
				if lit, ok := el.(*ast.BasicLit); ok {
					if v, err := strconv.Unquote(lit.Value); err == nil {
						out = append(out, v)
					}
				}
			}
		}
	}
	if len(out) == 0 {
		panic(fmt.Sprintf("%s: no string literals in %s", path, name))
	}
	return out
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.CallExpr:
		return exprString(e.Fun) + "()"
	case *ast.BasicLit:
		return e.Value
	}
	return fmt.Sprintf("%T", e)
}
