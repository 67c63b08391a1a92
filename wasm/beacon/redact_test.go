package beacon

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"testing"
)

// redactCases reads testdata/redact_paths.txt: the cases the Go rule and the
// browser loader's rule (web/static/itl.js) are both checked against.
func redactCases(tb testing.TB) [][2]string {
	tb.Helper()
	f, err := os.Open("testdata/redact_paths.txt")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var cases [][2]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
			in, want, ok := strings.Cut(line, "\t")
			if !ok {
				tb.Fatalf("redact_paths.txt: no tab in %q", line)
			}
			cases = append(cases, [2]string{in, want})
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return cases
}

func TestRedactPath(t *testing.T) {
	cases := redactCases(t)
	if len(cases) < 20 {
		t.Fatalf("%d cases in redact_paths.txt", len(cases))
	}
	for _, c := range cases {
		if got := RedactPath(c[0]); got != c[1] {
			t.Errorf("RedactPath(%q) = %q, want %q", c[0], got, c[1])
		}
	}
	if n := testing.AllocsPerRun(100, func() { RedactPath("/v1/chat/completions") }); n != 0 {
		t.Errorf("RedactPath of a path without ids allocates %v times", n)
	}
}

// The regular expression of itl.js in RE2 terms (no lookahead: a token of
// 16+ [\w-] with a digit is the conjunction of two expressions).
var (
	reUUIDOrNumber = regexp.MustCompile(`(?i)^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\d{3,})$`)
	reToken        = regexp.MustCompile(`^[\w-]{16,}$`)
	reDigit        = regexp.MustCompile(`\d`)
)

func regexpIDSegment(s string) bool {
	return reUUIDOrNumber.MatchString(s) || reToken.MatchString(s) && reDigit.MatchString(s)
}

func FuzzIDSegment(f *testing.F) {
	for _, c := range redactCases(f) {
		for _, seg := range strings.Split(c[0], "/") {
			f.Add(seg)
		}
	}
	f.Fuzz(func(t *testing.T, seg string) {
		if got, want := IDSegment(seg), regexpIDSegment(seg); got != want {
			t.Fatalf("IDSegment(%q) = %v, the regular expression says %v", seg, got, want)
		}
		if strings.Contains(seg, "/") {
			return
		}
		want := seg
		if regexpIDSegment(seg) {
			want = RedactID
		}
		if got := RedactPath("/a/" + seg + "/b"); got != "/a/"+want+"/b" {
			t.Fatalf("RedactPath(/a/%s/b) = %q", seg, got)
		}
	})
}

func BenchmarkRedactPath(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		RedactPath("/c/550e8400-e29b-41d4-a716-446655440000/messages/12345")
	}
}
