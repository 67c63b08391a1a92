package main

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// module assembles a WebAssembly module: the header and the given sections.
func module(sections ...[]byte) []byte {
	b := append([]byte(nil), magic...)
	for _, s := range sections {
		b = append(b, s...)
	}
	return b
}

func section(id byte, body []byte) []byte {
	return append(appendULEB([]byte{id}, uint64(len(body))), body...)
}

// memoryOf returns the image the data section of m writes, without the zeros
// at either end, and where it starts.
func memoryOf(tb testing.TB, m []byte) ([]byte, uint32, int) {
	tb.Helper()
	r := reader{b: m, off: len(magic)}
	for r.off < len(r.b) {
		id := r.byte()
		body := r.bytes(int(r.u32()))
		if r.err != nil {
			tb.Fatalf("module: %v", r.err)
		}
		if id != secData {
			continue
		}
		segs, err := parseData(body)
		if err != nil {
			tb.Fatal(err)
		}
		img, base, err := image(segs)
		if err != nil {
			tb.Fatal(err)
		}
		img, base = trimZeros(img, base)
		return img, base, len(segs)
	}
	return nil, 0, 0
}

// checkPacked fails unless out writes what in writes and its segments follow
// the contract: no zero at either end, no run of minGap zeros inside.
func checkPacked(tb testing.TB, in, out []byte, minGap int) {
	tb.Helper()
	wantImg, wantBase, _ := memoryOf(tb, in)
	gotImg, gotBase, _ := memoryOf(tb, out)
	if !bytes.Equal(gotImg, wantImg) || len(wantImg) > 0 && gotBase != wantBase {
		tb.Fatalf("memory image changed: %d bytes at %d, want %d bytes at %d", len(gotImg), gotBase, len(wantImg), wantBase)
	}
	r := reader{b: out, off: len(magic)}
	for r.off < len(r.b) {
		if id, body := r.byte(), r.bytes(int(r.u32())); id == secData {
			segs, err := parseData(body)
			if err != nil {
				tb.Fatal(err)
			}
			for i, s := range segs {
				if len(s.data) == 0 || s.data[0] == 0 || s.data[len(s.data)-1] == 0 {
					tb.Fatalf("segment %d (%d bytes at %d) is empty or has a zero at an end", i, len(s.data), s.off)
				}
				if bytes.Contains(s.data, make([]byte, minGap)) {
					tb.Fatalf("segment %d holds a run of %d zeros", i, minGap)
				}
			}
		}
	}
}

func dataSection(segs ...segment) []byte {
	return section(secData, encodeData(segs))
}

func TestPack(t *testing.T) {
	typ := section(1, []byte{1, 0x60, 0, 0})          // one type: func()
	mem := section(5, []byte{1, 0, 17})               // one memory, 17 pages
	name := section(0, []byte{4, 'n', 'a', 'm', 'e'}) // a custom section
	for _, tc := range []struct {
		name     string
		segs     []segment
		minGap   int
		wantSegs int
	}{
		{"no segments", nil, 8, 0},
		{"all zeros", []segment{{100, make([]byte, 50)}}, 8, 0},
		{"adjacent merged", []segment{{8, []byte{1, 2}}, {12, []byte{3}}, {20, []byte{4}}}, 8, 1},
		{"gap kept", []segment{{8, []byte{1, 2}}, {40, []byte{3}}}, 8, 2},
		{"gap of exactly minGap", []segment{{0, []byte{1}}, {9, []byte{2}}}, 8, 2},
		{"gap of minGap-1", []segment{{0, []byte{1}}, {8, []byte{2}}}, 8, 1},
		{"zeros trimmed", []segment{{0, []byte{0, 0, 5, 0, 0, 0}}}, 2, 1},
		{"later overwrites earlier", []segment{{0, []byte{1, 1, 1, 1}}, {1, []byte{0, 0}}}, 1, 2},
		{"out of order", []segment{{64, []byte{9}}, {0, []byte{7}}}, 100, 1},
		{"high offset", []segment{{0x7fff_fff0, []byte{1}}, {0x8000_0000, []byte{2}}}, 4, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := module(typ, mem, dataSection(tc.segs...), name)
			out, err := Pack(in, tc.minGap)
			if err != nil {
				t.Fatal(err)
			}
			checkPacked(t, in, out, tc.minGap)
			if _, _, n := memoryOf(t, out); n != tc.wantSegs {
				t.Errorf("segments = %d, want %d", n, tc.wantSegs)
			}
			// Every section but the data section is copied as it is, in order.
			want := module(typ, mem, dataSection(splitSegs(t, tc.segs, tc.minGap)...), name)
			if !bytes.Equal(out, want) {
				t.Errorf("module = %x\nwant %x", out, want)
			}
		})
	}
}

// splitSegs is what Pack's data section holds for segs.
func splitSegs(t *testing.T, segs []segment, minGap int) []segment {
	img, base, err := image(segs)
	if err != nil {
		t.Fatal(err)
	}
	return split(img, base, minGap)
}

func TestPackRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		var segs []segment
		for range rng.IntN(20) {
			data := make([]byte, rng.IntN(64))
			for j := range data {
				if rng.IntN(3) == 0 { // mostly zeros, in runs of all lengths
					data[j] = byte(rng.IntN(256))
				}
			}
			segs = append(segs, segment{off: uint32(rng.IntN(4096)), data: data})
		}
		in := module(dataSection(segs...))
		gap := 1 + rng.IntN(40)
		out, err := Pack(in, gap)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		checkPacked(t, in, out, gap)
	}
}

func TestPackErrors(t *testing.T) {
	seg := func(b ...byte) []byte { return section(secData, b) }
	for _, tc := range []struct {
		name string
		in   []byte
		gap  int
	}{
		{"not wasm", []byte("\x7fELF\x02\x01\x01\x00"), 8},
		{"version 2", []byte{0, 'a', 's', 'm', 2, 0, 0, 0}, 8},
		{"gap 0", module(), 0},
		{"passive segment", module(seg(1, 1, 1, 'x')), 8},
		{"memory index", module(seg(1, 2, 0, opI32Const, 0, opEnd, 1, 'x')), 8},
		{"global offset", module(seg(1, 0, 0x23, 0, opEnd, 1, 'x')), 8},
		{"i64 offset", module(seg(1, 0, 0x42, 0, opEnd, 1, 'x')), 8},
		{"long offset expression", module(seg(1, 0, opI32Const, 0, opI32Const, 0, opEnd, 1, 'x')), 8},
		{"segment longer than section", module(seg(1, 0, opI32Const, 0, opEnd, 5, 'x')), 8},
		{"fewer segments than counted", module(seg(2, 0, opI32Const, 0, opEnd, 1, 'x')), 8},
		{"trailing bytes", module(seg(1, 0, opI32Const, 0, opEnd, 1, 'x', 0)), 8},
		{"u32 too long", module(seg(0x80, 0x80, 0x80, 0x80, 0x80, 0)), 8},
		{"u32 too large", module(seg(0xff, 0xff, 0xff, 0xff, 0x7f)), 8},
		{"section longer than module", append(module(), secData, 10, 0), 8},
		{"data count section", module(section(secDataCount, []byte{0}), seg(0)), 8},
		{"past 4 GiB", module(seg(1, 0, opI32Const, 0x7f, opEnd, 2, 'x', 'y')), 8},
		{"span too large", module(seg(2, 0, opI32Const, 0, opEnd, 1, 'x', 0, opI32Const, 0x80, 0x80, 0x80, 0x80, 0x01, opEnd, 1, 'y')), 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Pack(tc.in, tc.gap)
			if err == nil {
				t.Fatalf("Pack = %x, want an error", out)
			}
			t.Log(err)
		})
	}
}

// TestPackTruncated decodes every prefix of a module: one that ends inside a
// section is an error, one that ends between sections is a module.
func TestPackTruncated(t *testing.T) {
	secs := [][]byte{section(5, []byte{1, 0, 1}), dataSection(segment{16, []byte("hello")}, segment{1000, []byte("world")}), section(0, []byte{1, 'x', 7})}
	in := module(secs...)
	ends := map[int]bool{len(magic): true}
	n := len(magic)
	for _, s := range secs {
		n += len(s)
		ends[n] = true
	}
	for i := range len(in) {
		out, err := Pack(in[:i], 8)
		switch {
		case i < len(magic) || !ends[i]:
			if err == nil {
				t.Fatalf("prefix of %d bytes: Pack = %x, want an error", i, out)
			}
		case err != nil:
			t.Fatalf("prefix of %d bytes (whole sections): %v", i, err)
		}
	}
}

func FuzzPack(f *testing.F) {
	f.Add(module(dataSection(segment{0, []byte{1, 0, 0, 2}}, segment{40, []byte{3}})), 2)
	f.Add(module(section(1, []byte{0}), dataSection(segment{8, []byte{0, 9}}, segment{9, []byte{0}})), 1)
	f.Fuzz(func(t *testing.T, in []byte, gap int) {
		if gap < 1 || gap > 1<<16 {
			return
		}
		out, err := Pack(in, gap)
		if err != nil {
			return
		}
		checkPacked(t, in, out, gap)
		if again, err := Pack(out, gap); err != nil || !bytes.Equal(again, out) {
			t.Fatalf("Pack(Pack(m)) = %x, %v; want Pack(m) = %x", again, err, out)
		}
	})
}

// TestPackGoModule packs a module the Go linker wrote and runs both under
// Node with Go's wasm_exec.js: same output, far fewer segments, smaller
// compressed.
func TestPackGoModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a js/wasm program")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("ITLMON_REQUIRE_REAL") == "1" {
			t.Fatalf("node: %v (ITLMON_REQUIRE_REAL=1)", err)
		}
		t.Skip("node not found")
	}
	dir := t.TempDir()
	// Data the program reads back: static tables, strings, a map literal, and
	// runtime type and function metadata (the panic's traceback).
	src := `package main

import (
	"os"
	"strconv"
)

var table = [...]uint32{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 1 << 31, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 42}

var names = map[string]int{"alpha": 1, "beta": 2, "gamma": 3}

type T struct{ A, B int }

func main() {
	s := 0
	for _, v := range table {
		s = s*31 + int(v)
	}
	var x any = T{names["beta"], names["gamma"]}
	os.Stdout.WriteString(strconv.Itoa(s) + " " + strconv.Quote("é\x00ok") + " " + strconv.Itoa(x.(T).A+x.(T).B) + "\n")
	defer func() { os.Stdout.WriteString(strconv.Quote(recover().(error).Error()) + "\n") }()
	var y any = 1.5
	_ = y.(string)
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module prog\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wasm := filepath.Join(dir, "prog.wasm")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", wasm, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOOS=js", "GOARCH=wasm", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	in, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	// The toolchain's own GOROOT (runtime.GOROOT is empty in a binary built
	// with -trimpath, as make builds the tests).
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	execNode := filepath.Join(strings.TrimSpace(string(goroot)), "lib", "wasm", "wasm_exec_node.js")
	run := func(name string) string {
		cmd := exec.Command(node, execNode, name)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("node %s: %v\n%s", name, err, out)
		}
		return string(out)
	}
	want := run(wasm)
	if !strings.Contains(want, `"interface conversion: interface {} is float64, not string"`) {
		t.Fatalf("unpacked program printed %q", want)
	}

	if err := packFile(wasm, defaultGap); err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	checkPacked(t, in, out, defaultGap)
	if got := run(wasm); got != want {
		t.Fatalf("packed program printed %q, want %q", got, want)
	}
	_, _, before := memoryOf(t, in)
	_, _, after := memoryOf(t, out)
	if after*100 > before {
		t.Errorf("segments: %d packed, %d before; want under 1%%", after, before)
	}
	t.Logf("segments %d → %d, raw %d → %d bytes", before, after, len(in), len(out))
}
