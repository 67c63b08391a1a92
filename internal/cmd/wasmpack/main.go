// Command wasmpack rewrites the data section of a WebAssembly module built
// by the Go linker into few segments, in place, so that it compresses better:
// itl.wasm goes from about 496 KB to 458 KB brotli. The memory image the
// module starts with is unchanged, byte for byte (see Pack).
//
// Usage:
//
//	wasmpack [-gap N] file.wasm
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	gap := flag.Int("gap", defaultGap, "cut the data into segments only at runs of at least this many zero bytes")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: wasmpack [-gap N] file.wasm")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := packFile(flag.Arg(0), *gap); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// defaultGap: a segment header costs brotli several bytes (its offset and
// length do not repeat), a run of zeros almost none; past a hundred zeros
// the size no longer moves (measured on itl.wasm: gap 16 → 492 KB, 32 →
// 459 KB, 96 to 1024 → 457.4-457.6 KB).
const defaultGap = 128

func packFile(name string, gap int) error {
	in, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	out, err := Pack(in, gap)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}
