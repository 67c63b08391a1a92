package chdb

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Environment of the child process.
const (
	childEnv = "ITLMON_CHDB_CHILD" // "1" makes MaybeRunChild run the engine
	libEnv   = "ITLMON_CHDB_LIB"   // path of libchdb.so for the child
)

// MaybeRunChild runs the ClickHouse engine and exits when this process was
// started by Start as the engine's child; otherwise it returns at once.
// Call it first thing in main, and in TestMain of test binaries that start an
// Engine, before any flag parsing.
func MaybeRunChild() {
	if os.Getenv(childEnv) != "1" {
		return
	}
	if err := runEngine(os.Getenv(libEnv), os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "chdb child: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runEngine loads libchdb.so and runs clickhouse-local's command line with
// args. It returns only when the engine's query ends.
func runEngine(lib string, args []string) error {
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return fmt.Errorf("load %s: %w", lib, err)
	}
	var query func(argc int32, argv []*byte) uintptr
	var resultError func(res uintptr) *byte
	purego.RegisterLibFunc(&query, h, "chdb_query_cmdline")
	purego.RegisterLibFunc(&resultError, h, "chdb_result_error")

	argv := append([]string{"clickhouse"}, args...)
	ptrs := make([]*byte, len(argv)+1) // NULL-terminated like C's argv
	for i, a := range argv {
		b := append([]byte(a), 0)
		ptrs[i] = &b[0]
	}
	res := query(int32(len(argv)), ptrs)
	if res == 0 {
		return fmt.Errorf("engine returned no result")
	}
	if msg := resultError(res); msg != nil {
		return fmt.Errorf("engine: %s", cString(msg))
	}
	return fmt.Errorf("engine query ended")
}

func cString(p *byte) string {
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}
