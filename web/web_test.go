package web

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"testing/fstest"
)

// TestSnippetDocumented: the snippet docs/browser-module.md tells pages to
// paste is the snippet itl.js is written against (web/static/itl-snippet.js).
func TestSnippetDocumented(t *testing.T) {
	want, err := fs.ReadFile(Static(), "itl-snippet.js")
	if err != nil {
		t.Fatalf("read the snippet: %v", err)
	}
	doc, err := os.ReadFile("../docs/browser-module.md")
	if err != nil {
		t.Fatalf("read the docs: %v", err)
	}
	const open = "<script data-src=\"https://COLLECTOR/itl.js\" data-site=\"KEY\">\n"
	_, rest, ok := strings.Cut(string(doc), "<!-- snippet: web/static/itl-snippet.js")
	if ok {
		_, rest, ok = strings.Cut(rest, open)
	}
	got, _, closed := strings.Cut(rest, "</script>\n```")
	if !ok || !closed {
		t.Fatal("docs/browser-module.md: no snippet block (the marker comment, then the tag as pages paste it)")
	}
	if got != string(want) {
		t.Fatalf("docs/browser-module.md's snippet differs from web/static/itl-snippet.js: paste the file again")
	}
}

// TestDistScriptFresh: a script in dist is served only while it was made
// from static's version of its source (its header names the source's
// sha256); Go's wasm_exec.js names none and is always served.
func TestDistScriptFresh(t *testing.T) {
	src := []byte("// the loader\nvar x = 1;\n")
	sum := sha256.Sum256(src)
	header := func(sum string) string {
		return "/*! itlmon itl.js without its comments (make wasm), from sha256:" + sum + " */\n"
	}
	static := fstest.MapFS{"itl.js": {Data: src}}
	for _, tc := range []struct {
		name, dist string
		want       bool
	}{
		{"made from this source", header(hex.EncodeToString(sum[:])) + "var x = 1;\n", true},
		{"made from an older source", header(strings.Repeat("0", 64)) + "var x = 0;\n", false},
		{"no header (not made by make wasm)", "var x = 1;\n", true},
	} {
		dist := fstest.MapFS{"itl.js": {Data: []byte(tc.dist)}}
		if got := fresh(dist, static, "itl.js"); got != tc.want {
			t.Errorf("%s: fresh = %v, want %v", tc.name, got, tc.want)
		}
	}
	if !fresh(fstest.MapFS{}, static, "itl.js") {
		t.Error("a script missing from dist: fresh = false, want true (nothing to hide)")
	}
}

// TestDistServesFreshScripts: whatever make wasm left in dist, Dist opens a
// script only if it is fresh, and then its code is static's without the
// comments: the header first, no line comment left.
func TestDistServesFreshScripts(t *testing.T) {
	for _, name := range []string{"itl.js", "itl-module.js", "itl-worker.js"} {
		b, err := fs.ReadFile(Dist(), name)
		if errors.Is(err, fs.ErrNotExist) {
			t.Logf("%s: not in dist (make wasm not run, or its source edited since): static's is served", name)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := fs.ReadFile(sub("dist"), name)
		if !fresh(sub("dist"), Static(), name) || !bytes.Equal(b, raw) {
			t.Fatalf("%s: Dist opened a stale copy", name)
		}
		first, rest, _ := strings.Cut(string(b), "\n")
		if !strings.HasPrefix(first, distHeader) {
			t.Errorf("%s: dist's copy starts %q, want the header", name, first)
		}
		for i, line := range strings.Split(rest, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				t.Errorf("%s: dist's line %d is a comment: %q", name, i+2, line)
				break
			}
		}
	}
}
