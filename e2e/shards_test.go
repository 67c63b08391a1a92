package e2e

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// make test runs this package as several `go test` processes side by side
// (the Makefile's E2E_SHARD_* lists, one process each, with its own browser
// and shared collector; the last process runs every test named in no list).
// TestShardLists keeps the lists true: every name in them is a top-level test
// of this package, and no test is in two lists, so a renamed test cannot
// drop out of its shard into the last one unnoticed, nor run twice.
func TestShardLists(t *testing.T) {
	shards := makefileShards(t, filepath.Join("..", "Makefile"))
	if len(shards) == 0 {
		t.Fatal("no E2E_SHARD_* lists in the Makefile")
	}
	tests := packageTests(t)
	seen := map[string]string{}
	var names []string
	for name := range shards {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, shard := range names {
		if len(shards[shard]) == 0 {
			t.Errorf("%s is empty", shard)
		}
		for _, test := range shards[shard] {
			if !tests[test] {
				t.Errorf("%s names %s, which is not a top-level test of package e2e", shard, test)
			}
			if other, ok := seen[test]; ok {
				t.Errorf("%s is in both %s and %s", test, other, shard)
			}
			seen[test] = shard
		}
	}
	if seen["TestMain"] != "" {
		t.Errorf("TestMain is in %s: it is not a test", seen["TestMain"])
	}
	left := 0
	for test := range tests {
		if _, ok := seen[test]; !ok && test != "TestMain" {
			left++
		}
	}
	if left == 0 {
		t.Error("every test is in a list: the last process (the tests in none) would run nothing")
	}
}

var shardLine = regexp.MustCompile(`^(E2E_SHARD_\w+)\s*:?=\s*(.*?)\s*(\\?)$`)

// makefileShards reads the E2E_SHARD_* variables (test names separated by
// spaces, continued with a trailing backslash).
func makefileShards(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	shards := map[string][]string{}
	cur := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if cur != "" {
			body := strings.TrimSpace(line)
			more := strings.HasSuffix(body, `\`)
			shards[cur] = append(shards[cur], strings.Fields(strings.TrimSuffix(body, `\`))...)
			if !more {
				cur = ""
			}
			continue
		}
		m := shardLine.FindStringSubmatch(line)
		if m == nil || m[1] == "E2E_SHARDS" {
			continue
		}
		shards[m[1]] = append(shards[m[1]], strings.Fields(m[2])...)
		if m[3] != "" {
			cur = m[1]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return shards
}

// packageTests is the set of this package's top-level Test functions.
func packageTests(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	tests := map[string]bool{}
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				tests[fn.Name.Name] = true
			}
		}
	}
	return tests
}
