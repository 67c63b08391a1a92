package web

import (
	"io/fs"
	"os"
	"strings"
	"testing"
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
