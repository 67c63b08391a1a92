package main

import (
	"context"
	"io"
	"os"

	"github.com/mattn/go-isatty"

	"github.com/itlmon/itlmon/collector/gate"
)

func init() {
	commands["gate"] = command{"fail a build when streaming gets worse (probe an endpoint, or real-user data)", runGate}
}

// runGate is `itlmon gate probe|rum ...`: exit 0 when every check passes, 1
// when a threshold fails, 2 for usage or connection errors.
func runGate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	tty := false
	if f, ok := stderr.(*os.File); ok {
		tty = isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
	}
	return gate.Main(ctx, args, gate.Env{
		Stdin:     os.Stdin,
		Stdout:    stdout,
		Stderr:    stderr,
		Getenv:    os.Getenv,
		StderrTTY: tty,
	})
}
