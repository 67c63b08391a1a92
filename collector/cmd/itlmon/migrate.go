package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/itlmon/itlmon/collector/server"
)

// runMigrate applies the schema (embedded engine or DSN) and exits.
func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := server.DefaultConfig()
	fs := flag.NewFlagSet("itlmon migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	storageFlags(fs, &c)
	if err := parseWithEnv(fs, args, os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "itlmon migrate: %v\n", err)
		return 2
	}
	if err := c.ValidateStorage(); err != nil {
		fmt.Fprintf(stderr, "itlmon migrate: %v\n", err)
		return 2
	}
	log := server.NewLogger(c.LogFormat, c.LogLevel, stderr)
	db, eng, err := server.OpenStorage(ctx, &c, false, log)
	if err != nil {
		log.Error().Err(err).Msg("migrate")
		return 1
	}
	defer func() {
		db.Close()
		if eng != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			eng.Close(cctx)
		}
	}()
	began := time.Now()
	if err := db.Migrate(ctx); err != nil {
		log.Error().Err(err).Msg("migrate")
		return 1
	}
	log.Info().Dur("took", time.Since(began)).Msg("schema up to date")
	fmt.Fprintln(stdout, "schema up to date")
	return 0
}
