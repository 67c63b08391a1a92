package e2e

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/itlmon/itlmon/wasm/beacon"
)

// redactSource cuts ID_SEGMENT and redactPath out of the loader as shipped.
var redactSource = regexp.MustCompile(`(?s)\n[ \t]*(var ID_SEGMENT = .*?\n[ \t]*function redactPath\(path\) \{.*?\n  \})\n`)

// TestRedactPathAgrees: the browser loader's path redaction (itl.js,
// evaluated as shipped in Node's V8, the engine of Chromium) and the Go rule
// of the origin middleware (beacon.RedactPath) give the same answer on every
// case of wasm/beacon/testdata/redact_paths.txt, and the answer the table
// wants.
func TestRedactPathAgrees(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs node")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		requireReal(t, "node", err)
	}
	src, err := os.ReadFile("../web/static/itl.js")
	if err != nil {
		t.Fatal(err)
	}
	m := redactSource.FindSubmatch(src)
	if m == nil {
		t.Fatal("itl.js: no ID_SEGMENT and redactPath found")
	}
	table, err := os.ReadFile("../wasm/beacon/testdata/redact_paths.txt")
	if err != nil {
		t.Fatal(err)
	}
	var in, want []string
	sc := bufio.NewScanner(bytes.NewReader(table))
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
			p, w, _ := strings.Cut(line, "\t")
			in, want = append(in, p), append(want, w)
		}
	}
	script := "var cfg = { paths: 'ids' };\n" + string(m[1]) + `
var lines = require('fs').readFileSync(0, 'utf8').split('\n');
lines.pop();
process.stdout.write(lines.map(redactPath).join('\n') + '\n');
`
	cmd := exec.Command(node, "-e", script)
	cmd.Stdin = strings.NewReader(strings.Join(in, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(got) != len(in) {
		t.Fatalf("node answered %d paths for %d", len(got), len(in))
	}
	for i := range in {
		if js, gov := got[i], beacon.RedactPath(in[i]); js != want[i] || gov != want[i] {
			t.Errorf("%q: itl.js %q, Go %q, want %q", in[i], js, gov, want[i])
		}
	}
}
