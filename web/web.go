// Package web embeds what the collector serves to browsers: the loader script
// (itl.js; pages load it with the inline snippet, itl-snippet.js, which is
// embedded for tests and documented, not served) and what it loads lazily (itl-module.js, itl-worker.js,
// wasm_exec.js and the browser module itl.wasm, precompressed), the demo chat
// page and the dashboard. The scripts are served as written (no build step);
// tsconfig.json and types/ type-check them (make vet) and are not served.
package web

import (
	"embed"
	"io/fs"
)

// dist holds the build outputs of `make wasm` (itl.wasm, itl.wasm.gz,
// itl.wasm.br, wasm_exec.js); static holds the hand-written pages and scripts.
//
//go:embed dist static
var files embed.FS

// Dist returns the generated files (may lack itl.wasm when `make wasm` has not run).
func Dist() fs.FS { d, _ := fs.Sub(files, "dist"); return d }

// Static returns the hand-written files.
func Static() fs.FS { s, _ := fs.Sub(files, "static"); return s }
