package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/clustercheck"
	"github.com/itlmon/itlmon/collector/server"
	"github.com/itlmon/itlmon/collector/store"
)

func init() {
	commands["cluster"] = command{"check a cluster for what the promoter relies on (itlmon cluster check)", runCluster}
}

// runCluster is `itlmon cluster check`: exit 0 when the promoter's
// preconditions hold on every node, 1 when one does not (each problem on a
// line of its own), 2 for usage errors or when the cluster cannot be listed.
func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, "usage: itlmon cluster check --clickhouse DSN --cluster NAME [flags]   (itlmon cluster check -h for its flags)")
		return 2
	}
	var dsn server.SecretDSN
	o := clustercheck.Options{}
	fs := flag.NewFlagSet("itlmon cluster check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&dsn, "clickhouse", "`dsn` of any node of the cluster (clickhouse://user:pass@host:9000/db), its database the main database")
	fs.StringVar(&o.Cluster, "cluster", "", "the cluster's `name` in remote_servers (as given to itlmon migrate --cluster)")
	fs.DurationVar(&o.SyncBound, "sync-bound", clustercheck.DefaultSyncBound, "SYSTEM SYNC REPLICA itl_inbox must answer within this `duration` (the promoter's bound on a window)")
	fs.DurationVar(&o.MaxLag, "max-lag", clustercheck.DefaultMaxLag, "report a replica further behind than this `duration`")
	fs.DurationVar(&o.NodeTimeout, "node-timeout", clustercheck.DefaultNodeTimeout, "bound on connecting to a node and on each of its queries (`duration`)")
	if err := parseWithEnv(fs, args[1:], os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "itlmon cluster check: %v\n", err)
		return 2
	}
	if dsn.IsZero() || o.Cluster == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "itlmon cluster check: --clickhouse and --cluster are required, and nothing else")
		return 2
	}
	db, err := store.Open(ctx, store.Options{DSN: dsn.Reveal(), Lazy: true, Logger: zerolog.Nop()})
	if err != nil {
		fmt.Fprintf(stderr, "itlmon cluster check: %s: %v\n", dsn, err)
		return 2
	}
	defer db.Close()
	o.Database, o.Connect = db.Database(), db.ConnectNode
	// The cluster is listed through the DSN's server, in database default:
	// the main database may not exist yet.
	parsed, err := clickhouse.ParseDSN(dsn.Reveal())
	if err != nil || len(parsed.Addr) == 0 {
		fmt.Fprintf(stderr, "itlmon cluster check: %s: no server in the DSN (%v)\n", dsn, err)
		return 2
	}
	seed, err := db.ConnectNode(ctx, parsed.Addr[0], "default")
	if err != nil {
		fmt.Fprintf(stderr, "itlmon cluster check: %s: %v\n", dsn, err)
		return 2
	}
	defer seed.Close()
	rep, err := clustercheck.Check(ctx, seed, o)
	if err != nil {
		fmt.Fprintf(stderr, "itlmon cluster check: %s: %v\n", dsn, err)
		return 2
	}
	repl := "no (one copy per shard)"
	if rep.Replicated {
		repl = "yes"
	}
	fmt.Fprintf(stdout, "cluster %s: %d shards, %d nodes; replicated: %s\n", rep.Cluster, rep.Shards, rep.Nodes, repl)
	for _, p := range rep.Problems {
		fmt.Fprintln(stdout, p)
	}
	if !rep.OK() {
		noun := "problems"
		if len(rep.Problems) == 1 {
			noun = "problem"
		}
		fmt.Fprintf(stdout, "%d %s: the promoter cannot rely on this cluster\n", len(rep.Problems), noun)
		return 1
	}
	fmt.Fprintln(stdout, "ok: every node answers and has what the promoter relies on")
	return 0
}
