package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/internal/chtest"
)

// TestMigrateClusterCommand: `itlmon migrate --cluster NAME --replication
// none` on one node of a two-shard cluster of embedded engines creates the
// layout on both (the local tables in itlmon_local, a Distributed table per
// local table in itlmon); run again, it applies nothing. --cluster without a
// DSN and an unknown replication mode are usage errors.
func TestMigrateClusterCommand(t *testing.T) {
	t.Parallel()
	itlmontest.ChdbLib(t)
	nodes := chtest.Cluster(t, "itl", 2)
	dsn := "clickhouse://" + nodes[1].NativeAddr() + "/itlmon"
	for _, args := range [][]string{
		{"--cluster", "itl", "--replication", "none"},
		{"--clickhouse", dsn, "--cluster", "itl", "--replication", "sometimes"},
	} {
		var stderr bytes.Buffer
		if code := runMigrate(t.Context(), args, &bytes.Buffer{}, &stderr); code != 2 {
			t.Errorf("itlmon migrate %s exited %d, want 2 (usage); stderr: %s", strings.Join(args, " "), code, stderr.String())
		}
	}
	for run := 1; run <= 2; run++ {
		var stdout, stderr bytes.Buffer
		args := []string{"--clickhouse", dsn, "--cluster", "itl", "--replication", "none", "--log-format", "json"}
		if code := runMigrate(t.Context(), args, &stdout, &stderr); code != 0 {
			t.Fatalf("run %d: itlmon migrate --cluster exited %d; stderr: %s", run, code, stderr.String())
		}
		applied := strings.Count(stderr.String(), "schema migration applied")
		if run == 1 && applied == 0 || run == 2 && applied != 0 {
			t.Errorf("run %d: %d migrations applied; want some on the first run, none on the second", run, applied)
		}
		if !strings.Contains(stdout.String(), "cluster itl: schema up to date") {
			t.Errorf("run %d: stdout %q", run, stdout.String())
		}
	}
	for i, e := range nodes {
		c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{e.NativeAddr()}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var engine string
		if err := c.QueryRow(context.Background(),
			"SELECT engine_full FROM system.tables WHERE database = 'itlmon' AND name = 'itl_streams'").Scan(&engine); err != nil {
			t.Fatalf("node %d: itlmon.itl_streams: %v", i+1, err)
		}
		if want := "Distributed('itl', 'itlmon_local', 'itl_streams', cityHash64(stream_id))"; engine != want {
			t.Errorf("node %d: itlmon.itl_streams engine = %s, want %s", i+1, engine, want)
		}
		var local string
		if err := c.QueryRow(context.Background(),
			"SELECT engine FROM system.tables WHERE database = 'itlmon_local' AND name = 'itl_streams'").Scan(&local); err != nil || local != "ReplacingMergeTree" {
			t.Errorf("node %d: itlmon_local.itl_streams engine %q, %v; want ReplacingMergeTree", i+1, local, err)
		}
	}
}
