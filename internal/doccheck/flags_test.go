package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const operatingPath = "../../docs/operating.md"

// clusterCheckFile defines the flags of `itlmon cluster check`, which
// docs/reference.md lists (TestClusterCheckFlags), not operating.md.
const clusterCheckFile = "cluster.go"

// TestOperatingFlags compares the flags itlmon serve and migrate define
// (collector/cmd/itlmon) with the first cells of the flag table under
// "## Flags" in docs/operating.md ("| `--addr address` | ...").
func TestOperatingFlags(t *testing.T) {
	defined := commandFlags(t, "../../collector/cmd/itlmon", func(file string) bool { return file != clusterCheckFile })
	b, err := os.ReadFile(operatingPath)
	if err != nil {
		t.Fatal(err)
	}
	rowRe := regexp.MustCompile("^\\| `--([a-z0-9-]+)[^`]*` \\|")
	var documented []string
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = h
			continue
		}
		if m := rowRe.FindStringSubmatch(line); m != nil && section == "Flags" {
			documented = append(documented, m[1])
		}
	}
	for _, f := range defined {
		if !slices.Contains(documented, f) {
			t.Errorf("flag --%s is not in the table under \"## Flags\" in %s", f, operatingPath)
		}
	}
	for _, f := range documented {
		if !slices.Contains(defined, f) {
			t.Errorf("%s documents --%s, which itlmon serve and migrate do not define", operatingPath, f)
		}
	}
}

// TestClusterCheckFlags compares the flags of `itlmon cluster check`
// (collector/cmd/itlmon/cluster.go) with the first cells of the table under
// "### `itlmon cluster check`" in docs/reference.md.
func TestClusterCheckFlags(t *testing.T) {
	defined := commandFlags(t, "../../collector/cmd/itlmon", func(file string) bool { return file == clusterCheckFile })
	b, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	rowRe := regexp.MustCompile("^\\| `--([a-z0-9-]+)[^`]*` \\|")
	var documented []string
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#") {
			section = line
			continue
		}
		if m := rowRe.FindStringSubmatch(line); m != nil && section == "### `itlmon cluster check`" {
			documented = append(documented, m[1])
		}
	}
	for _, f := range defined {
		if !slices.Contains(documented, f) {
			t.Errorf("flag --%s of itlmon cluster check is not in the table under \"### `itlmon cluster check`\" in %s", f, referencePath)
		}
	}
	for _, f := range documented {
		if !slices.Contains(defined, f) {
			t.Errorf("%s documents --%s, which itlmon cluster check does not define", referencePath, f)
		}
	}
}

// commandFlags returns the names of the flags registered in dir's non-test
// files that keep holds for: the string literal naming the flag in each
// FlagSet method call.
func commandFlags(t *testing.T, dir string, keep func(file string) bool) []string {
	t.Helper()
	nameArg := map[string]int{
		"String": 0, "Bool": 0, "Int": 0, "Int64": 0, "Uint": 0, "Float64": 0, "Duration": 0, "Func": 0, "TextVar": 1,
		"StringVar": 1, "BoolVar": 1, "IntVar": 1, "Int64Var": 1, "UintVar": 1, "Float64Var": 1, "DurationVar": 1, "Var": 1,
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") || !keep(filepath.Base(path)) {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			recv, ok := sel.X.(*ast.Ident)
			i, known := nameArg[sel.Sel.Name]
			if !ok || recv.Name != "fs" || !known || len(call.Args) <= i {
				return true
			}
			lit, ok := call.Args[i].(*ast.BasicLit)
			if !ok {
				t.Errorf("%s: a flag whose name is not a literal", fset.Position(call.Pos()))
				return true
			}
			name, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
			return true
		})
	}
	if len(names) == 0 {
		t.Fatalf("no flags found in %s", dir)
	}
	slices.Sort(names)
	return slices.Compact(names)
}
