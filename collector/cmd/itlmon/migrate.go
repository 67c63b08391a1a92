package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/server"
	"github.com/itlmon/itlmon/collector/store"
)

// runMigrate applies the schema (embedded engine or DSN) and exits; with
// --cluster, the cluster layout through the DSN's node (store.MigrateCluster).
func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := server.DefaultConfig()
	fs := flag.NewFlagSet("itlmon migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	storageFlags(fs, &c)
	var replication string
	fs.StringVar(&replication, "replication", string(store.Replicated), "`mode` with --cluster: replicated (Replicated* engines, ON CLUSTER DDL; needs Keeper) or none (plain engines, applied on every node system.clusters lists)")
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
	repl, err := store.ParseReplication(replication)
	if err != nil {
		fmt.Fprintf(stderr, "itlmon migrate: %v\n", err)
		return 2
	}
	log := server.NewLogger(c.LogFormat, c.LogLevel, stderr)
	if c.Cluster != "" {
		return migrateCluster(ctx, &c, c.Cluster, repl, stdout, log)
	}
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

// migrateCluster applies the cluster layout of cluster through the DSN's
// node. The DSN's database is the main database; it need not exist yet.
func migrateCluster(ctx context.Context, c *server.Config, cluster string, repl store.Replication, stdout io.Writer, log zerolog.Logger) int {
	db, err := store.Open(ctx, store.Options{DSN: c.ClickHouse.Reveal(), StreamsTTL: c.TTL, Lazy: true, Logger: log})
	if err != nil {
		log.Error().Err(err).Stringer("clickhouse", c.ClickHouse).Msg("migrate")
		return 1
	}
	defer db.Close()
	l := store.NewClusterLayout(cluster, db.Database(), repl)
	began := time.Now()
	if err := db.MigrateCluster(ctx, l); err != nil {
		log.Error().Err(err).Str("cluster", cluster).Msg("migrate")
		return 1
	}
	log.Info().Dur("took", time.Since(began)).Str("cluster", cluster).Str("database", l.Database).
		Str("local_database", l.LocalDB).Str("replication", string(repl)).Msg("cluster schema up to date")
	fmt.Fprintf(stdout, "cluster %s: schema up to date (tables in %s, Distributed tables in %s)\n", cluster, l.LocalDB, l.Database)
	return 0
}
