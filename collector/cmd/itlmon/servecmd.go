package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/itlmon/itlmon/collector/server"
)

// runServe is `itlmon serve`: it runs a server.Main until ctx ends (the
// first signal) or its HTTP server fails.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	m := server.NewMain()
	m.Stderr = stderr
	m.Logger = server.NewLogger("auto", "info", stderr)
	if err := parseServeFlags(&m.Config, stderr, args, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "itlmon serve: %v\n", err)
		return 2
	}
	if err := m.Run(ctx); err != nil {
		m.Logger.Error().Err(err).Msg("start")
		m.Close()
		return 1
	}
	code := 0
	select {
	case <-ctx.Done():
	case err := <-m.Err():
		m.Logger.Error().Err(err).Msg("http server stopped")
		code = 1
	}
	if err := m.Close(); err != nil {
		m.Logger.Error().Err(err).Msg("shutdown")
		return 1
	}
	return code
}

// parseServeFlags reads the environment (through getenv) and then args into
// c, and validates the result. Usage and flag errors go to stderr.
func parseServeFlags(c *server.Config, stderr io.Writer, args []string, getenv func(string) string) error {
	fs := flag.NewFlagSet("itlmon serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := serveFlags(fs, c)
	if err := parseWithEnv(fs, args, getenv); err != nil {
		return err
	}
	if err := check(); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return c.Validate()
}
