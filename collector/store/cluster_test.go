package store_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/internal/poll"
	"github.com/itlmon/itlmon/schema"
)

// kindsFixture has every statement kind a schema file may hold, on tables
// of its own: what each does to the local and the Distributed table is
// checked by TestMigrateCluster.
const kindsFixture = `
CREATE TABLE IF NOT EXISTS cl_kinds
(
    at        DateTime('UTC'),
    stream_id FixedString(16),
    a         UInt32,
    b         String
)
ENGINE = ReplacingMergeTree(at)
ORDER BY (toStartOfHour(at), stream_id)
TTL at + INTERVAL 9 DAY
SETTINGS non_replicated_deduplication_window = 100;
ALTER TABLE cl_kinds ADD COLUMN IF NOT EXISTS c String DEFAULT 'x' COMMENT 'an added column' AFTER a;
ALTER TABLE cl_kinds ADD COLUMN IF NOT EXISTS d UInt8 DEFAULT 1, ADD COLUMN IF NOT EXISTS e UInt8 DEFAULT 2;
ALTER TABLE cl_kinds RENAME COLUMN IF EXISTS b TO b_old;
ALTER TABLE cl_kinds MODIFY COLUMN a UInt64;
ALTER TABLE cl_kinds COMMENT COLUMN IF EXISTS b_old 'renamed';
ALTER TABLE cl_kinds DROP COLUMN IF EXISTS e;
ALTER TABLE cl_kinds MODIFY TTL at + INTERVAL 3 DAY;
ALTER TABLE cl_kinds MODIFY SETTING non_replicated_deduplication_window = 10;
CREATE TABLE IF NOT EXISTS cl_sum (at DateTime('UTC'), n SimpleAggregateFunction(sum, UInt64)) ENGINE = AggregatingMergeTree ORDER BY at;
CREATE MATERIALIZED VIEW IF NOT EXISTS cl_sum_mv TO cl_sum AS SELECT at, count() AS n FROM cl_kinds GROUP BY at;
ALTER TABLE cl_sum_mv MODIFY QUERY SELECT at, toUInt64(sum(a)) AS n FROM cl_kinds GROUP BY at;
CREATE TABLE IF NOT EXISTS cl_gone (x UInt8) ENGINE = MergeTree ORDER BY x;
CREATE MATERIALIZED VIEW IF NOT EXISTS cl_gone_mv TO cl_gone AS SELECT toUInt8(a) AS x FROM cl_kinds;
DROP VIEW IF EXISTS cl_gone_mv;
DROP TABLE IF EXISTS cl_gone;
`

// clusterMigrations is the embedded schema plus kindsFixture.
func clusterMigrations(tb testing.TB) []schema.Migration {
	tb.Helper()
	migs, err := schema.Migrations()
	if err != nil {
		tb.Fatal(err)
	}
	next := migs[len(migs)-1].Version + 1
	return append(migs, schema.Migration{Version: next, Name: "test_kinds.sql", Statements: schema.Split(kindsFixture)})
}

// TestMigrateCluster: two embedded engines as the two shards of a cluster
// (no replication: the embedded engine has no Keeper). The cluster layout
// is applied through one node, to both; then rows inserted through the
// Distributed itl_inbox and itl_streams on one node land on the shard their
// stream id hashes to, reads through the Distributed tables on either node
// see all of them, each shard's rollup view fills its local rollup and the
// Distributed rollup adds up to the total. Every Distributed table has its
// local table's columns after all the ALTERs. Migrating again changes
// nothing. A collector's check that the layout is there (ClusterSchemaReady,
// asked of the other node) fails with ErrSchemaPending before the migration
// and passes after it; the shards it lists are the two nodes in order.
// (One test: a cluster migration is the longest step of the package's
// integration tests.)
func TestMigrateCluster(t *testing.T) {
	t.Parallel() // engines of its own; its assertions time nothing
	const cluster = "itl"
	nodes := chtest.Cluster(t, cluster, 2)
	ctx := context.Background()
	migs := clusterMigrations(t)
	l := store.NewClusterLayout(cluster, "itlmon", store.NoReplication)

	// Two migrators at once, one through each node: one applies, the other
	// waits for it (the holder's first statement waits until the other
	// said so), then finds every migration recorded.
	var logs [2]*logBuf
	var migrators [2]*store.DB
	for i := range migrators {
		logs[i] = &logBuf{}
		m, err := store.Open(ctx, store.Options{DSN: "clickhouse://" + nodes[i].NativeAddr() + "/itlmon", Lazy: true,
			Logger: zerolog.New(io.MultiWriter(logs[i], zerolog.NewTestWriter(t))).Level(zerolog.InfoLevel)})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		m.SetLeaseTiming(30*time.Second, 10*time.Second, 50*time.Millisecond)
		migrators[i] = m
	}
	db := migrators[0]
	listed, err := store.ClusterNodes(ctx, mustConn(t, nodes[1], "default"), cluster)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(listed), fmt.Sprintf("[{1 1 127.0.0.1 %s false} {2 1 127.0.0.1 %s true}]",
		port(nodes[0]), port(nodes[1])); got != want {
		t.Fatalf("cluster nodes from node 2 = %s, want %s", got, want)
	}

	ready, err := store.Open(ctx, store.Options{Addr: nodes[1].NativeAddr(), Database: "default",
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	defer ready.Close()
	if err := ready.ClusterSchemaReady(ctx, l); !errors.Is(err, store.ErrSchemaPending) {
		t.Fatalf("ClusterSchemaReady before migrating = %v, want ErrSchemaPending", err)
	}

	began := time.Now()
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	errs := make(chan error, len(migrators))
	for i, m := range migrators {
		other := logs[1-i]
		m.SetMigrateHook(func(ctx context.Context, mig schema.Migration, k int) error {
			for mig.Version == migs[0].Version && k == 1 && len(lines(other.String(), "waiting for it", m.LeaseHolder())) == 0 {
				select {
				case <-ctx.Done():
					return errors.New("the other migrator never waited")
				case <-time.After(20 * time.Millisecond): // polling the other's log
				}
			}
			return nil
		})
		go func() { errs <- m.MigrateClusterWith(mctx, l, migs) }()
	}
	for range migrators {
		if err := <-errs; err != nil {
			t.Fatalf("migrate cluster: %v", err)
		}
	}
	t.Logf("cluster layout applied to both nodes in %v", time.Since(began).Round(time.Millisecond))
	applied := 0
	for _, l := range logs {
		applied += len(lines(l.String(), "schema migration applied"))
	}
	if want := len(nodes) * len(migs); applied != want {
		t.Errorf("%d 'schema migration applied' lines, want %d (each migration once per node)", applied, want)
	}
	if err := ready.ClusterSchemaReady(ctx, l); err != nil {
		t.Fatalf("ClusterSchemaReady after migrating: %v", err)
	}
	readyNodes, err := ready.ClusterNodes(ctx, cluster)
	if err != nil {
		t.Fatal(err)
	}
	if shards := store.Shards(readyNodes); len(shards) != 2 || shards[0].Addr() != nodes[0].NativeAddr() || shards[1].Addr() != nodes[1].NativeAddr() {
		t.Fatalf("shards = %v, want the two nodes in order", shards)
	}

	locals := make([]driver.Conn, len(nodes))
	mains := make([]driver.Conn, len(nodes))
	for i, e := range nodes {
		locals[i], mains[i] = mustConn(t, e, l.LocalDB), mustConn(t, e, l.Database)
	}

	// The layout: every local table has a Distributed table of the same
	// name, columns and sharding key in the main database; views live in
	// the local database only; dropped objects are gone from both.
	wantKeys := map[string]string{
		"itl_streams": "cityHash64(stream_id)", "itl_timelines": "cityHash64(stream_id)",
		"itl_origin": "cityHash64(origin_id)", "itl_inbox": "cityHash64(if(origin_id != '', origin_id, stream_id))",
		"itl_promoted_ids": "cityHash64(stream_id)", "itl_promoted": "rand()",
		"itl_rollup_1m": "rand()", "itl_origin_1m": "rand()", "cl_kinds": "cityHash64(stream_id)", "cl_sum": "rand()",
	}
	for i, c := range locals {
		var localTables, views, dist []string
		query(t, c, "SELECT groupArrayIf(name, engine NOT LIKE '%View' AND name NOT IN ('schema_migrations', 'schema_lock')), groupArrayIf(name, engine LIKE '%View') FROM (SELECT name, engine FROM system.tables WHERE database = ? ORDER BY name)",
			[]any{l.LocalDB}, &localTables, &views)
		query(t, c, "SELECT groupArray(name) FROM (SELECT name FROM system.tables WHERE database = ? AND engine = 'Distributed' ORDER BY name)",
			[]any{l.Database}, &dist)
		if strings.Join(localTables, " ") != strings.Join(dist, " ") {
			t.Errorf("node %d: local tables %v, Distributed tables %v: want the same names", i+1, localTables, dist)
		}
		for table, key := range wantKeys {
			var engine string
			query(t, c, "SELECT engine_full FROM system.tables WHERE database = ? AND name = ?", []any{l.Database, table}, &engine)
			if want := fmt.Sprintf("Distributed('%s', '%s', '%s', %s)", cluster, l.LocalDB, table, key); engine != want {
				t.Errorf("node %d: %s.%s engine = %q, want %q", i+1, l.Database, table, engine, want)
			}
		}
		for _, table := range localTables {
			var local, remote string
			// The same, but a DEFAULT of the insert's time is MATERIALIZED
			// there (computed by the shard).
			cols := "SELECT toString(groupArray((name, type, if(database = ? AND default_kind = 'DEFAULT' AND match(default_expression, '^now(64)?\\('), 'MATERIALIZED', default_kind), default_expression, comment))) FROM (SELECT * FROM system.columns WHERE database = ? AND table = ? ORDER BY position)"
			query(t, c, cols, []any{l.LocalDB, l.LocalDB, table}, &local)
			query(t, c, cols, []any{l.LocalDB, l.Database, table}, &remote)
			if local != remote {
				t.Errorf("node %d: %s columns differ:\nlocal       %s\ndistributed %s", i+1, table, local, remote)
			}
		}
		for _, gone := range []string{"cl_gone", "cl_gone_mv"} {
			var n uint64
			query(t, c, "SELECT count() FROM system.tables WHERE name = ? AND database IN (?, ?)", []any{gone, l.LocalDB, l.Database}, &n)
			if n != 0 {
				t.Errorf("node %d: %s still exists", i+1, gone)
			}
		}
		if !strings.Contains(strings.Join(views, " "), "itl_rollup_1m_mv") || !strings.Contains(strings.Join(views, " "), "cl_sum_mv") {
			t.Errorf("node %d: views %v", i+1, views)
		}
		var kinds, ttl string
		query(t, c, "SELECT toString(groupArray((name, type))) FROM (SELECT name, type FROM system.columns WHERE database = ? AND table = 'cl_kinds' ORDER BY position)",
			[]any{l.LocalDB}, &kinds)
		if want := "[('at','DateTime(\\'UTC\\')'),('stream_id','FixedString(16)'),('a','UInt64'),('c','String'),('b_old','String'),('d','UInt8')]"; kinds != want {
			t.Errorf("node %d: cl_kinds columns = %s, want %s", i+1, kinds, want)
		}
		query(t, c, "SELECT engine_full FROM system.tables WHERE database = ? AND name = 'cl_kinds'", []any{l.LocalDB}, &ttl)
		if !strings.Contains(ttl, "TTL at + toIntervalDay(3)") || !strings.Contains(ttl, "non_replicated_deduplication_window = 10") {
			t.Errorf("node %d: cl_kinds = %s, want TTL 3 days and the window 10", i+1, ttl)
		}
	}

	// Rows through the Distributed tables of node 1, acked once on their shard.
	foreground := func(e *chdb.Engine) driver.Conn {
		c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{e.NativeAddr()}, Auth: clickhouse.Auth{Database: l.Database},
			Settings: clickhouse.Settings{"distributed_foreground_insert": 1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// The inbox's window column is the shard's clock: the Distributed table
	// never sends it.
	for i, c := range mains {
		var kind string
		query(t, c, "SELECT default_kind FROM system.columns WHERE database = ? AND table = 'itl_inbox' AND name = 'ingested_at'",
			[]any{l.Database}, &kind)
		if kind != "MATERIALIZED" {
			t.Errorf("node %d: Distributed itl_inbox.ingested_at is %q, want MATERIALIZED (computed on the shard)", i+1, kind)
		}
	}
	const inboxRows, streams = 300, 200
	ins := foreground(nodes[0])
	batch, err := ins.PrepareBatch(ctx, "INSERT INTO itl_inbox (kind, site, stream_id, received_at, payload)")
	if err != nil {
		t.Fatal(err)
	}
	for i := range inboxRows {
		var id [16]byte
		rand.Read(id[:])
		if err := batch.Append([]string{"client", "origin"}[i%2], "s", fmt.Sprintf("%x", id), time.Now(), "p"); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatalf("insert into Distributed itl_inbox: %v", err)
	}
	at := time.Now().UTC().Truncate(time.Minute)
	if err := store.InsertDirect(ctx, ins, makeStreams(streams, "cl", at)); err != nil {
		t.Fatalf("insert into Distributed itl_streams: %v", err)
	}

	// Each shard holds some rows, and only rows whose id hashes to it
	// (weights 1 and 1: shard index = hash % 2).
	for _, tc := range []struct {
		table string
		total uint64
	}{{"itl_inbox", inboxRows}, {"itl_streams", streams}} {
		var sum uint64
		for i, c := range locals {
			var n, misplaced uint64
			query(t, c, fmt.Sprintf("SELECT count(), countIf(cityHash64(stream_id) %% 2 != %d) FROM %s", i, tc.table), nil, &n, &misplaced)
			if n == 0 || misplaced != 0 {
				t.Errorf("shard %d: local %s has %d rows, %d of another shard; want some, none", i+1, tc.table, n, misplaced)
			}
			t.Logf("shard %d: %d of %d %s rows", i+1, n, tc.total, tc.table)
			sum += n
		}
		if sum != tc.total {
			t.Errorf("%s: shards hold %d rows together, want %d", tc.table, sum, tc.total)
		}
		for i, c := range mains {
			var n uint64
			query(t, c, "SELECT count() FROM "+tc.table, nil, &n)
			if n != tc.total {
				t.Errorf("node %d: Distributed %s reads %d rows, want %d", i+1, tc.table, n, tc.total)
			}
		}
	}
	// The rollup: each shard's view counted its shard's streams; the
	// Distributed rollup adds up to all of them, read from either node.
	for i, c := range locals {
		var rows, rolled uint64
		query(t, c, "SELECT (SELECT count() FROM itl_streams WHERE site = 'cl'), (SELECT sum(streams) FROM itl_rollup_1m WHERE site = 'cl')", nil, &rows, &rolled)
		if rows != rolled {
			t.Errorf("shard %d: local rollup counts %d streams, local itl_streams has %d", i+1, rolled, rows)
		}
	}
	for i, c := range mains {
		var rolled, tokens, rawTokens uint64
		query(t, c, "SELECT sum(streams), sum(tokens), (SELECT sum(tokens) FROM itl_streams WHERE site = 'cl') FROM itl_rollup_1m WHERE site = 'cl'", nil, &rolled, &tokens, &rawTokens)
		if rolled != streams || tokens != rawTokens {
			t.Errorf("node %d: Distributed rollup = %d streams, %d tokens; want %d, %d (the raw rows)", i+1, rolled, tokens, streams, rawTokens)
		}
	}

	// Migrating again is a no-op: no statement runs, no record is added.
	snapshot := func() string {
		var b strings.Builder
		for _, c := range locals {
			var s string
			query(t, c, `SELECT toString((
				(SELECT groupArray((database, name, metadata_modification_time)) FROM (SELECT * FROM system.tables WHERE database IN (?, ?) ORDER BY database, name)),
				(SELECT groupArray((version, applied_at)) FROM (SELECT * FROM schema_migrations ORDER BY version))))`,
				[]any{l.LocalDB, l.Database}, &s)
			b.WriteString(s + "\n")
		}
		return b.String()
	}
	before := snapshot()
	// The times have whole seconds: wait until each node's clock has left
	// the second the snapshot was taken in, so that a statement the second
	// migration ran would show in them.
	for i, c := range locals {
		var taken, now uint32
		query(t, c, "SELECT toUInt32(now())", nil, &taken)
		if !poll.Until(10*time.Second, 20*time.Millisecond, func() bool {
			query(t, c, "SELECT toUInt32(now())", nil, &now)
			return now > taken
		}) {
			t.Fatalf("shard %d: the engine's clock stays at %d", i+1, taken)
		}
	}
	if err := db.MigrateClusterWith(ctx, l, migs); err != nil {
		t.Fatalf("migrate cluster again: %v", err)
	}
	if after := snapshot(); after != before {
		t.Errorf("migrating again changed the layout:\nbefore %s\nafter  %s", before, after)
	}
	var recorded uint64
	query(t, locals[1], "SELECT count() FROM schema_migrations", nil, &recorded)
	if recorded != uint64(len(migs)) {
		t.Errorf("shard 2 records %d migrations, want %d", recorded, len(migs))
	}
}

// TestClusterReplicatedDDL: with replication, every statement MigrateCluster
// would run (each file's statements in their cluster form, the Distributed
// tables' CREATE, ALTER and DROP, the databases and the migration record)
// is one the real engine parses, with ON CLUSTER and a Replicated engine
// for every MergeTree-family table. (The embedded engine has no Keeper to
// run them.)
func TestClusterReplicatedDDL(t *testing.T) {
	e := chtest.Engine(t)
	conn := mustConn(t, e, "default")
	ctx := context.Background()
	l := store.NewClusterLayout("prod", "itlmon", store.Replicated)
	sc := schema.Cluster{Name: l.Name, LocalDB: l.LocalDB, Replicated: true}
	var stmts []string
	stmts = append(stmts, store.ClusterBootDDL(l)...)
	for _, m := range clusterMigrations(t) {
		for _, stmt := range m.Statements {
			s, err := schema.Parse(stmt)
			if err != nil {
				t.Fatalf("%s: %v", m.Name, err)
			}
			local, err := sc.Local(s)
			if err != nil {
				t.Fatalf("%s: %v", m.Name, err)
			}
			stmts = append(stmts, local)
			if s.Kind == schema.CreateTable {
				stmts = append(stmts, store.DistributedDDL(l, s.Object, "cityHash64(stream_id)"))
			}
			if q, ok := sc.DistributedAlter(s, l.Database); ok {
				stmts = append(stmts, q)
			}
			if q, ok := sc.DistributedDrop(s, l.Database); ok {
				stmts = append(stmts, q)
			}
		}
	}
	tables := 0
	for _, stmt := range stmts {
		var formatted string
		if err := conn.QueryRow(ctx, "SELECT formatQuery(?)", stmt).Scan(&formatted); err != nil {
			t.Fatalf("the engine does not parse\n%s\n: %v", stmt, err)
		}
		if !strings.Contains(formatted, " ON CLUSTER prod") {
			t.Errorf("no ON CLUSTER in %s", formatted)
		}
		if strings.HasPrefix(formatted, "CREATE TABLE") && strings.Contains(formatted, "MergeTree") {
			tables++
			if !strings.Contains(formatted, "ENGINE = Replicated") ||
				!strings.Contains(formatted, "MergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}'") {
				t.Errorf("not a replicated engine: %s", formatted)
			}
		}
		if strings.HasPrefix(formatted, "CREATE TABLE IF NOT EXISTS itlmon_local.itl_streams ") &&
			!strings.Contains(formatted, "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}', received_at)") {
			t.Errorf("itl_streams keeps its version column: %s", formatted)
		}
		if strings.Contains(formatted, "non_replicated_deduplication_window") {
			t.Errorf("a replicated table with non_replicated_deduplication_window: %s", formatted)
		}
	}
	if tables < 8 {
		t.Errorf("%d replicated tables, want every table of the files and schema_migrations", tables)
	}
	t.Logf("%d statements parsed by the engine, %d replicated tables", len(stmts), tables)
}

func mustConn(tb testing.TB, e *chdb.Engine, database string) driver.Conn {
	tb.Helper()
	c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{e.NativeAddr()}, Auth: clickhouse.Auth{Database: database}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func query(tb testing.TB, c driver.Conn, q string, args []any, dest ...any) {
	tb.Helper()
	if err := c.QueryRow(context.Background(), q, args...).Scan(dest...); err != nil {
		tb.Fatalf("%s: %v", q, err)
	}
}

func port(e *chdb.Engine) string {
	_, p, _ := strings.Cut(e.NativeAddr(), ":")
	return p
}

func TestShardingKey(t *testing.T) {
	tests := []struct {
		columns    []string
		sortingKey string
		want       string
	}{
		{[]string{"received_at", "site", "stream_id", "origin_id"}, "site, toStartOfHour(received_at), region, stream_id", "cityHash64(stream_id)"},
		{[]string{"received_at", "site", "origin_id", "stream_id"}, "site, origin_id", "cityHash64(origin_id)"},                             // itl_origin
		{[]string{"kind", "stream_id", "origin_id", "ingested_at"}, "ingested_at", "cityHash64(if(origin_id != '', origin_id, stream_id))"}, // itl_inbox
		{[]string{"origin_id", "at"}, "at", "cityHash64(origin_id)"},
		{[]string{"minute", "site", "streams"}, "site, minute", "rand()"},
		{[]string{"my_stream_id", "x"}, "my_stream_id", "rand()"},
	}
	for _, tt := range tests {
		if got := store.ShardingKey(tt.columns, tt.sortingKey); got != tt.want {
			t.Errorf("ShardingKey(%v, %q) = %s, want %s", tt.columns, tt.sortingKey, got, tt.want)
		}
	}
}
