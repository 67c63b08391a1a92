// Package web embeds what the collector serves to browsers: the loader script
// (itl.js; pages load it with the inline snippet, itl-snippet.js, which is
// embedded for tests and documented, not served) and what it loads lazily (itl-module.js, itl-worker.js,
// wasm_exec.js and the browser module itl.wasm, precompressed), the demo chat
// page and the dashboard. The scripts are written in static, type-checked
// there (tsconfig.json and types/, make vet; not served), and served as
// `make wasm` copies them into dist: without their comments, nothing else
// rewritten (tsconfig.dist.json).
package web

import (
	"bufio"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"strings"
)

// dist holds the build outputs of `make wasm` (itl.wasm, wasm_exec.js, the
// scripts without comments, each with its .gz and .br copies); static holds
// the hand-written pages and scripts.
//
//go:embed dist static
var files embed.FS

// Dist returns the generated files (may lack them when `make wasm` has not
// run). A script there made from another version of its source than static's
// (edited since the last `make wasm`) is left out, so that the collector,
// which serves dist's copy of a file before static's, serves the source as
// it is rather than a stale copy.
func Dist() fs.FS { return freshDist{sub("dist")} }

// Static returns the hand-written files.
func Static() fs.FS { return sub("static") }

func sub(dir string) fs.FS { d, _ := fs.Sub(files, dir); return d }

// distHeader opens the first line of a script in dist: the sha256 of the
// source it was made from follows it, then " */".
const distHeader = "/*! itlmon "

type freshDist struct{ fs.FS }

func (d freshDist) Open(name string) (fs.File, error) {
	if strings.HasSuffix(name, ".js") && !fresh(d.FS, Static(), name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return d.FS.Open(name)
}

// fresh reports whether the script name in dist, if it names the source it
// was made from (its first line), was made from static's version of it. A
// script that names no source (wasm_exec.js: Go's own) or has none in static
// counts as fresh.
func fresh(dist, static fs.FS, name string) bool {
	f, err := dist.Open(name)
	if err != nil {
		return true // nothing to hide
	}
	first, _ := bufio.NewReader(f).ReadString('\n')
	f.Close()
	_, sum, ok := strings.Cut(first, "), from sha256:")
	if !strings.HasPrefix(first, distHeader) || !ok {
		return true
	}
	sum, _, _ = strings.Cut(sum, " ")
	src, err := fs.ReadFile(static, name)
	if err != nil {
		return true
	}
	h := sha256.Sum256(src)
	return sum == hex.EncodeToString(h[:])
}
