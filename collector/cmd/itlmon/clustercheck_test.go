package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/internal/chtest"
)

// clusterCheck runs `itlmon cluster check` with args and returns its exit
// code and output.
func clusterCheck(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runCluster(t.Context(), append([]string{"check"}, args...), &stdout, &stderr)
	return code, stdout.String() + stderr.String()
}

func nodeConn(t *testing.T, e *chdb.Engine) driver.Conn {
	t.Helper()
	c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{e.NativeAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func execAll(t *testing.T, c driver.Conn, queries ...string) {
	t.Helper()
	for _, q := range queries {
		if err := c.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestClusterCheckSharded: `itlmon cluster check` on a two-shard cluster of
// embedded engines (no replication) finds the schema missing before
// `migrate --cluster`, nothing wrong after it, a Distributed table sharded by
// another key, and a shard that does not answer; usage errors exit 2.
func TestClusterCheckSharded(t *testing.T) {
	t.Parallel()
	itlmontest.ChdbLib(t)
	nodes := chtest.Cluster(t, "itl", 2)
	dsn := "clickhouse://" + nodes[0].NativeAddr() + "/itlmon"
	for _, args := range [][]string{{"--cluster", "itl"}, {"--clickhouse", dsn}, {"--clickhouse", dsn, "--cluster", "itl", "extra"}} {
		if code, out := clusterCheck(t, args...); code != 2 {
			t.Errorf("cluster check %s exited %d, want 2 (usage):\n%s", strings.Join(args, " "), code, out)
		}
	}
	if code, out := clusterCheck(t, "--clickhouse", dsn, "--cluster", "nosuch"); code != 2 || !strings.Contains(out, "cluster not found") {
		t.Errorf("cluster check of an unknown cluster exited %d, want 2 saying it is not found:\n%s", code, out)
	}

	code, out := clusterCheck(t, "--clickhouse", dsn, "--cluster", "itl")
	if code != 1 || strings.Count(out, ": schema: itlmon_local.schema_migrations cannot be read") != 2 {
		t.Errorf("before migrate: exit %d, want 1 with the schema missing on both nodes:\n%s", code, out)
	}
	var stderr bytes.Buffer
	if code := runMigrate(t.Context(), []string{"--clickhouse", dsn, "--cluster", "itl", "--replication", "none", "--log-level", "warn"}, &bytes.Buffer{}, &stderr); code != 0 {
		t.Fatalf("migrate --cluster exited %d: %s", code, stderr.String())
	}
	code, out = clusterCheck(t, "--clickhouse", dsn, "--cluster", "itl")
	if want := "cluster itl: 2 shards, 2 nodes; replicated: no (one copy per shard)\nok: "; code != 0 || !strings.HasPrefix(out, want) {
		t.Fatalf("after migrate: exit %d, want 0 and %q:\n%s", code, want, out)
	}
	t.Logf("healthy:\n%s", out)

	// Shard 2's itl_streams sharded by rand(): a stream's rows would spread.
	node2 := fmt.Sprintf("shard 2 replica 1 (%s)", nodes[1].NativeAddr())
	c2 := nodeConn(t, nodes[1])
	execAll(t, c2, "DROP TABLE itlmon.itl_streams",
		"CREATE TABLE itlmon.itl_streams AS itlmon_local.itl_streams ENGINE = Distributed('itl', 'itlmon_local', 'itl_streams', rand())")
	code, out = clusterCheck(t, "--clickhouse", dsn, "--cluster", "itl")
	want := node2 + ": sharding key: itlmon.itl_streams is sharded by rand(); migrate --cluster gives it cityHash64(stream_id)"
	if code != 1 || !strings.Contains(out, want) || strings.Count(out, "\n") != 3 {
		t.Errorf("wrong sharding key: exit %d, want 1 and only %q:\n%s", code, want, out)
	}
	t.Logf("a wrong sharding key:\n%s", out)
	execAll(t, c2, "DROP TABLE itlmon.itl_streams",
		"CREATE TABLE itlmon.itl_streams AS itlmon_local.itl_streams ENGINE = Distributed('itl', 'itlmon_local', 'itl_streams', cityHash64(stream_id))")
	if code, out := clusterCheck(t, "--clickhouse", dsn, "--cluster", "itl"); code != 0 {
		t.Fatalf("sharding key restored: exit %d, want 0:\n%s", code, out)
	}

	// Shard 2 down.
	if err := nodes[1].Crash(); err != nil {
		t.Fatal(err)
	}
	code, out = clusterCheck(t, "--clickhouse", dsn, "--cluster", "itl", "--node-timeout", "5s")
	if want := node2 + ": reachable: does not answer"; code != 1 || !strings.Contains(out, want) || strings.Count(out, "\n") != 3 {
		t.Errorf("shard 2 down: exit %d, want 1 and only %q:\n%s", code, want, out)
	}
	t.Logf("one shard down:\n%s", out)
}

// TestClusterCheckReplicated: the engine's real answers for a replicated
// layout. One embedded engine with Debian's ZooKeeper, its cluster one shard
// of one replica, the layout migrated and itl_inbox made a
// ReplicatedMergeTree (migrate --cluster's replicated form needs ON CLUSTER,
// which the embedded engine refuses): the engine registers the replica, which
// stays read-only (its local mode has no interserver port), and the check
// must say so.
func TestClusterCheckReplicated(t *testing.T) {
	t.Parallel()
	itlmontest.ChdbLib(t)
	began := time.Now()
	keeper := chtest.ZooKeeper(t)
	t.Logf("ZooKeeper up in %v", time.Since(began).Round(time.Millisecond))
	e := chtest.KeeperEngine(t, "itl", keeper)
	t.Logf("engine up in %v", time.Since(began).Round(time.Millisecond))
	dsn := "clickhouse://" + e.NativeAddr() + "/itlmon"
	var stderr bytes.Buffer
	if code := runMigrate(t.Context(), []string{"--clickhouse", dsn, "--cluster", "itl", "--replication", "none", "--log-level", "warn"}, &bytes.Buffer{}, &stderr); code != 0 {
		t.Fatalf("migrate --cluster exited %d: %s", code, stderr.String())
	}
	t.Logf("migrated in %v", time.Since(began).Round(time.Millisecond))
	c := nodeConn(t, e)
	var sortingKey string
	if err := c.QueryRow(t.Context(), "SELECT sorting_key FROM system.tables WHERE database = 'itlmon_local' AND name = 'itl_inbox'").Scan(&sortingKey); err != nil {
		t.Fatal(err)
	}
	execAll(t, c, "RENAME TABLE itlmon_local.itl_inbox TO itlmon_local.itl_inbox_plain",
		"CREATE TABLE itlmon_local.itl_inbox AS itlmon_local.itl_inbox_plain ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}') ORDER BY ("+sortingKey+")",
		"DROP TABLE itlmon_local.itl_inbox_plain")
	code, out := clusterCheck(t, "--clickhouse", dsn, "--cluster", "itl", "--sync-bound", "5s")
	node := fmt.Sprintf("shard 1 replica 1 (%s)", e.NativeAddr())
	if want := node + ": replica: itlmon_local.itl_inbox is read-only"; code != 1 || !strings.Contains(out, want) {
		t.Errorf("read-only replica: exit %d, want 1 and %q:\n%s", code, want, out)
	}
	t.Logf("the engine's replicated table (checked in %v):\n%s", time.Since(began).Round(time.Millisecond), out)
	var dump string
	if err := c.QueryRow(t.Context(), `SELECT toString(tuple(is_readonly, is_session_expired, absolute_delay, queue_size, total_replicas, active_replicas, zookeeper_exception, replica_is_active)) FROM system.replicas WHERE database = 'itlmon_local'`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	t.Logf("system.replicas: %s", dump)
}
