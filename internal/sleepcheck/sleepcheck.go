// Package sleepcheck finds the time.Sleep calls in a module's tests that
// run on the real clock without saying why.
//
// A test waits on the condition itself; time inside one process passes on
// testing/synctest's fake clock. A time.Sleep in a test file (*_test.go, or
// a test helper: another .go file that imports "testing") is accepted when it runs in a synctest bubble, or when a comment starting
// "sleep:" on its line or ending on the line above says why it stays on the
// real clock. It runs in a bubble when it is inside
//
//   - a function literal passed to synctest.Test (or synctest.Run),
//   - a function of the package passed to one by name, or
//   - a function or method of the package's test files whose every use is
//     itself in a bubble (a handler or helper only bubbles call), found by
//     name, so a use anywhere else, or another function of the same name,
//     keeps it out.
//
// The test of this package runs the check over the whole module.
package sleepcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Kind says where a sleep runs.
type Kind int

const (
	Unexplained Kind = iota // the real clock, no reason given
	Bubble                  // a synctest bubble: fake time
	Explained               // the real clock, with a "sleep:" comment
)

func (k Kind) String() string {
	return [...]string{"unexplained", "bubble", "explained"}[k]
}

// Sleep is one reference to time.Sleep.
type Sleep struct {
	Pos    token.Position // file relative to the module root, and line
	Kind   Kind
	Reason string // the "sleep:" comment's text after the colon, for Explained
}

// Dir checks the test files of one directory (one package and its
// external test package) and returns their sleeps in file and line order.
func Dir(fset *token.FileSet, dir string) ([]Sleep, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	files := make(map[string][]byte, len(names))
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		if !strings.HasSuffix(n, "_test.go") {
			f, err := parser.ParseFile(token.NewFileSet(), n, b, parser.ImportsOnly)
			if err != nil {
				return nil, err
			}
			if importName(f, "testing") == "" {
				continue // not a test helper
			}
		}
		files[n] = b
	}
	return Sources(fset, files)
}

// Sources checks the given test files (name → source) as one package.
func Sources(fset *token.FileSet, files map[string][]byte) ([]Sleep, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var parsed []*ast.File
	for _, n := range names {
		f, err := parser.ParseFile(fset, n, files[n], parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		parsed = append(parsed, f)
	}
	return check(fset, parsed, files), nil
}

// Module checks every directory under root that holds test files,
// skipping testdata, vendor, node_modules and hidden directories. File
// names in the result are relative to root.
func Module(root string) ([]Sleep, error) {
	var all []Sleep
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
			name == "testdata" || name == "vendor" || name == "node_modules") {
			return filepath.SkipDir
		}
		sleeps, err := Dir(fset, path)
		if err != nil {
			return err
		}
		for _, s := range sleeps {
			if rel, err := filepath.Rel(root, s.Pos.Filename); err == nil {
				s.Pos.Filename = filepath.ToSlash(rel)
			}
			all = append(all, s)
		}
		return nil
	})
	return all, err
}

// span is a source range [from, to).
type span struct{ from, to token.Pos }

func (s span) holds(p token.Pos) bool { return s.from <= p && p < s.to }

func check(fset *token.FileSet, files []*ast.File, src map[string][]byte) []Sleep {
	var (
		bubbles []span                         // bodies known to run in a bubble
		byName  = map[string][]*ast.FuncDecl{} // top-level funcs and methods by name
		uses    = map[string][]token.Pos{}     // where each name is used: identifiers, selectors' included
		passed  = map[string]bool{}            // names passed to synctest.Test
		sleeps  []*ast.SelectorExpr
	)
	for _, f := range files {
		timeName, synctestName := importName(f, "time"), importName(f, "testing/synctest")
		declared := map[*ast.Ident]bool{}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Body != nil {
				byName[fn.Name.Name] = append(byName[fn.Name.Name], fn)
				declared[fn.Name] = true
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if synctestName != "" && isSel(n.Fun, synctestName, "Test", "Run") && len(n.Args) > 0 {
					switch arg := n.Args[len(n.Args)-1].(type) {
					case *ast.FuncLit:
						bubbles = append(bubbles, span{arg.Body.Pos(), arg.Body.End()})
					case *ast.Ident:
						passed[arg.Name] = true
					}
				}
			case *ast.SelectorExpr:
				if timeName != "" && isSel(n, timeName, "Sleep") {
					sleeps = append(sleeps, n)
				}
			case *ast.Ident:
				if !declared[n] {
					uses[n.Name] = append(uses[n.Name], n.Pos())
				}
			}
			return true
		})
	}
	inBubble := func(p token.Pos) bool {
		for _, b := range bubbles {
			if b.holds(p) {
				return true
			}
		}
		return false
	}
	// A name's functions join the bubbles once the name is passed to
	// synctest.Test, or once every use of it is in a bubble; each join can
	// put more uses in bubbles, so repeat until nothing joins.
	joined := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for name, ds := range byName {
			if joined[name] || name == "init" || name == "main" {
				continue
			}
			ok := passed[name]
			if !ok && len(uses[name]) > 0 {
				ok = true
				for _, p := range uses[name] {
					if !inBubble(p) {
						ok = false
						break
					}
				}
			}
			if ok {
				joined[name] = true
				changed = true
				for _, fn := range ds {
					bubbles = append(bubbles, span{fn.Body.Pos(), fn.Body.End()})
				}
			}
		}
	}
	var out []Sleep
	for _, s := range sleeps {
		pos := fset.Position(s.Pos())
		sl := Sleep{Pos: pos}
		switch reason, ok := reasonFor(fset, files, src, pos); {
		case inBubble(s.Pos()):
			sl.Kind = Bubble
		case ok:
			sl.Kind, sl.Reason = Explained, reason
		}
		out = append(out, sl)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pos.Filename != out[j].Pos.Filename {
			return out[i].Pos.Filename < out[j].Pos.Filename
		}
		return out[i].Pos.Line < out[j].Pos.Line
	})
	return out
}

// reasonFor finds the "sleep:" comment of a sleep at pos: a comment on its
// line that starts with "sleep:", or a comment group of lines of their own
// ending on the line above whose first line starts with it (the comment
// after another statement on the line above is that statement's).
func reasonFor(fset *token.FileSet, files []*ast.File, src map[string][]byte, pos token.Position) (string, bool) {
	for _, f := range files {
		if fset.Position(f.Pos()).Filename != pos.Filename {
			continue
		}
		for _, g := range f.Comments {
			end := fset.Position(g.End()).Line
			if end == pos.Line {
				for _, c := range g.List {
					if fset.Position(c.Pos()).Line == pos.Line {
						if r, ok := sleepReason(c.Text); ok {
							return r, true
						}
					}
				}
			}
			if end == pos.Line-1 && ownLine(src[pos.Filename], fset.Position(g.Pos())) {
				if r, ok := sleepReason(g.List[0].Text); ok {
					for _, c := range g.List[1:] {
						r += " " + strings.TrimSpace(strings.TrimPrefix(c.Text, "//"))
					}
					return r, true
				}
			}
		}
	}
	return "", false
}

// ownLine reports whether only blanks precede pos on its line.
func ownLine(src []byte, pos token.Position) bool {
	start := pos.Offset - (pos.Column - 1)
	return start >= 0 && pos.Offset <= len(src) && strings.TrimSpace(string(src[start:pos.Offset])) == ""
}

func sleepReason(text string) (string, bool) {
	t, ok := strings.CutPrefix(text, "//")
	if !ok {
		return "", false
	}
	r, ok := strings.CutPrefix(strings.TrimSpace(t), "sleep:")
	r = strings.TrimSpace(r)
	return r, ok && r != ""
}

// importName is the name a file refers to an import path by, or "".
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil || p != path {
			continue
		}
		if imp.Name != nil {
			if imp.Name.Name == "_" || imp.Name.Name == "." {
				return ""
			}
			return imp.Name.Name
		}
		return p[strings.LastIndex(p, "/")+1:]
	}
	return ""
}

// isSel reports whether e is pkg.Name for one of names.
func isSel(e ast.Expr, pkg string, names ...string) bool {
	s, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := s.X.(*ast.Ident)
	if !ok || x.Name != pkg {
		return false
	}
	for _, n := range names {
		if s.Sel.Name == n {
			return true
		}
	}
	return false
}
