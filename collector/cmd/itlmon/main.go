// Command itlmon is the itlmon collector: it receives stream measurements
// from the browser module, stores them in ClickHouse (an embedded engine by
// default, or any server given by DSN) and serves them back.
//
// Usage:
//
//	itlmon [serve] [flags]   run the collector (default)
//	itlmon migrate [flags]   apply the schema and exit
//	itlmon help              list the subcommands
//
// Every flag has an ITLMON_* environment equivalent (--log-level:
// ITLMON_LOG_LEVEL); flags win over the environment.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/itlmon/itlmon/collector/chdb"
)

// command is one subcommand. Subcommands living in their own files register
// themselves in init: commands["gate"] = command{...}.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{
	"serve":   {"run the collector (default)", runServe},
	"migrate": {"apply the ClickHouse schema and exit", runMigrate},
}

func main() {
	// The embedded ClickHouse engine runs as a re-exec of this binary.
	chdb.MaybeRunChild()

	ctx, stop := signalContext()
	defer stop()
	os.Exit(dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// dispatch runs the subcommand named by the first argument ("serve" when the
// first argument is a flag or absent).
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	name := "serve"
	if len(args) > 0 && (!strings.HasPrefix(args[0], "-") || isHelp(args[0])) {
		name, args = args[0], args[1:]
	}
	if name == "help" || isHelp(name) {
		usage(stdout)
		return 0
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "itlmon: unknown command %q\n\n", name)
		usage(stderr)
		return 2
	}
	return cmd.run(ctx, args, stdout, stderr)
}

// isHelp reports whether arg asks for help: itlmon -h lists the commands
// (itlmon serve -h prints serve's flags).
func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: itlmon <command> [flags]   (itlmon <command> -h for its flags)")
	fmt.Fprintln(w)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
}

// signalContext is cancelled by the first SIGINT/SIGTERM (graceful
// shutdown); a second one exits the process at once.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig, ok := <-sigs
		if !ok {
			return
		}
		fmt.Fprintf(os.Stderr, "itlmon: %v: shutting down gracefully (send it again to exit at once)\n", sig)
		cancel()
		if sig, ok = <-sigs; ok {
			fmt.Fprintf(os.Stderr, "itlmon: %v again: exiting now\n", sig)
			os.Exit(1)
		}
	}()
	return ctx, func() { signal.Stop(sigs); cancel() }
}
