package sleepcheck

import (
	"fmt"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestModule: every time.Sleep in the module's tests runs in a synctest
// bubble or says why it stays on the real clock. `go test -v -run
// TestModule ./internal/sleepcheck` lists the real-clock ones with their
// reasons and logs the counts.
func TestModule(t *testing.T) {
	sleeps, err := Module("../..")
	if err != nil {
		t.Fatal(err)
	}
	var n [3]int
	for _, s := range sleeps {
		n[s.Kind]++
		switch s.Kind {
		case Unexplained:
			t.Errorf("%s:%d: time.Sleep on the real clock: wait on the condition, move the test into a synctest bubble, "+
				"or say why it stays in a `// sleep:` comment on its line or the line above", s.Pos.Filename, s.Pos.Line)
		case Explained:
			t.Logf("%s:%d: %s", s.Pos.Filename, s.Pos.Line, s.Reason)
		}
	}
	if len(sleeps) == 0 {
		t.Fatal("no time.Sleep found in the module's tests: is the root right?")
	}
	t.Logf("time.Sleep in tests: %d; in synctest bubbles %d, on the real clock with a reason %d, without one %d",
		len(sleeps), n[Bubble], n[Explained], n[Unexplained])
	checkDoc(t, len(sleeps), n[Bubble], n[Explained])
}

const docPath = "../../docs/development.md"

// checkDoc holds the counts in docs/development.md's "Sleeps in tests" to
// the module: the total, the bubbles' and the real clock's in its text, and
// the sum of its table's "sleeps" column.
func checkDoc(t *testing.T, total, bubble, explained int) {
	t.Helper()
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Sleeps in tests\n")
	if !ok {
		t.Fatalf("%s has no section \"Sleeps in tests\"", docPath)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	text := strings.Join(strings.Fields(sec), " ")
	for _, want := range []string{
		fmt.Sprintf(": %d `time.Sleep` in tests", total),
		fmt.Sprintf("%d of them in synctest bubbles", bubble),
		fmt.Sprintf("%d on the real clock", explained),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("%s, \"Sleeps in tests\", does not say %q: update its counts", docPath, want)
		}
	}
	sum, rows := 0, 0
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(line, "|") {
			continue
		}
		if k, err := strconv.Atoi(strings.TrimSpace(cells[2])); err == nil {
			sum += k
			rows++
		}
	}
	if rows == 0 || sum != explained {
		t.Errorf("%s: the table of the sleeps that stay counts %d in %d rows, the module has %d on the real clock", docPath, sum, rows, explained)
	}
}

// The check's own cases: what counts as a bubble, what as a reason.
func TestKinds(t *testing.T) {
	const src = `package p

import (
	"testing"
	st "testing/synctest"
	"time"
)

func TestLit(t *testing.T) {
	st.Test(t, func(t *testing.T) {
		time.Sleep(time.Second) // want bubble
		go func() { time.Sleep(1) }() // want bubble
	})
	time.Sleep(1) // want unexplained
}

func TestNamed(t *testing.T) { st.Test(t, testNamed) }

func testNamed(t *testing.T) { time.Sleep(1) } // want bubble

// handler is used only in bubbles, helper (through handler) too.
func handler() { helper() }

func helper() { time.Sleep(1) } // want bubble

func TestHandler(t *testing.T) { st.Test(t, func(t *testing.T) { handler() }) }

// both is used in a bubble and out of one.
func both() { time.Sleep(1) } // want unexplained

func TestBoth(t *testing.T) {
	st.Test(t, func(t *testing.T) { both() })
	both()
}

type srv struct{}

func (srv) wait() { time.Sleep(1) } // want bubble

func TestMethod(t *testing.T) { st.Test(t, func(t *testing.T) { srv{}.wait() }) }

func unused() { time.Sleep(1) } // want unexplained

func TestReasons(t *testing.T) {
	time.Sleep(1) // sleep: the origin's cadence  want explained
	// sleep: a collector down for a second,
	// as the scenario has it.
	time.Sleep(1) // want explained
	// not a reason
	time.Sleep(1) // want unexplained
	// sleep:
	time.Sleep(1) // want unexplained (an empty reason)
	f := time.Sleep // want unexplained
	f(1)
	/* sleep: a block comment is not one */ time.Sleep(1) // want unexplained
	time.Sleep(1) // sleep: this one's own  want explained
	time.Sleep(1) // want unexplained (the comment above is the line's)
}
`
	other := `package p

import "time"

// A package that names time otherwise.
func TestOther(t *testing.T) { time.Sleep(1) } // want unexplained
`
	sleeps, err := Sources(token.NewFileSet(), map[string][]byte{"a_test.go": []byte(src), "b_test.go": []byte(other)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for name, s := range map[string]string{"a_test.go": src, "b_test.go": other} {
		for i, line := range strings.Split(s, "\n") {
			if _, w, ok := strings.Cut(line, "want "); ok {
				want[fmt.Sprintf("%s:%d", name, i+1)] = strings.Fields(w)[0]
			}
		}
	}
	got := map[string]string{}
	for _, s := range sleeps {
		got[fmt.Sprintf("%s:%d", s.Pos.Filename, s.Pos.Line)] = s.Kind.String()
	}
	for at, w := range want {
		if got[at] != w {
			t.Errorf("%s: %q, want %q", at, got[at], w)
		}
	}
	for at, g := range got {
		if _, ok := want[at]; !ok {
			t.Errorf("%s: %q, want no sleep there", at, g)
		}
	}
	reasons := map[string]bool{}
	for _, s := range sleeps {
		reasons[s.Reason] = true
	}
	for _, r := range []string{"the origin's cadence  want explained", "a collector down for a second, as the scenario has it."} {
		if !reasons[r] {
			t.Errorf("no sleep with the reason %q: %v", r, reasons)
		}
	}
}

// Dir checks the test files and the test helpers (files that import
// "testing"), not the rest of the package.
func TestDirHelpers(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"a_test.go": "package p\n\nimport \"time\"\n\nfunc TestA(t *testing.T) { time.Sleep(1) }\n",
		"helper.go": "package p\n\nimport (\n\t\"testing\"\n\t\"time\"\n)\n\nfunc Wait(t testing.TB) { time.Sleep(1) }\n",
		"prod.go":   "package p\n\nimport \"time\"\n\nfunc Pace() { time.Sleep(1) }\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sleeps, err := Dir(token.NewFileSet(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range sleeps {
		got = append(got, fmt.Sprintf("%s:%d %s", filepath.Base(s.Pos.Filename), s.Pos.Line, s.Kind))
	}
	if want := "a_test.go:5 unexplained|helper.go:8 unexplained"; strings.Join(got, "|") != want {
		t.Fatalf("sleeps %q, want %q", got, want)
	}
}
