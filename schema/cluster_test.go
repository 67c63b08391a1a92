package schema

import (
	"strings"
	"testing"
)

var (
	replicated = Cluster{Name: "prod", LocalDB: "itlmon_local", Replicated: true}
	plain      = Cluster{Name: "prod", LocalDB: "itlmon_local"}
)

func TestClusterLocal(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		repl, non string // Local with and without replication
	}{
		{"engine with args",
			"-- why; ENGINE = MergeTree\nCREATE TABLE IF NOT EXISTS itl_streams\n(x UInt8, s String DEFAULT 'ENGINE = MergeTree')\nENGINE = ReplacingMergeTree(received_at)\nORDER BY x\nSETTINGS non_replicated_deduplication_window = 1000",
			"-- why; ENGINE = MergeTree\nCREATE TABLE IF NOT EXISTS `itlmon_local`.`itl_streams` ON CLUSTER `prod`\n(x UInt8, s String DEFAULT 'ENGINE = MergeTree')\nENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}', received_at)\nORDER BY x\nSETTINGS replicated_deduplication_window = 1000",
			"-- why; ENGINE = MergeTree\nCREATE TABLE IF NOT EXISTS `itlmon_local`.`itl_streams`\n(x UInt8, s String DEFAULT 'ENGINE = MergeTree')\nENGINE = ReplacingMergeTree(received_at)\nORDER BY x\nSETTINGS non_replicated_deduplication_window = 1000"},
		{"engine without args",
			"CREATE TABLE IF NOT EXISTS r (m DateTime) ENGINE = AggregatingMergeTree PARTITION BY toYYYYMM(m) ORDER BY m",
			"CREATE TABLE IF NOT EXISTS `itlmon_local`.`r` ON CLUSTER `prod` (m DateTime) ENGINE = ReplicatedAggregatingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}') PARTITION BY toYYYYMM(m) ORDER BY m",
			"CREATE TABLE IF NOT EXISTS `itlmon_local`.`r` (m DateTime) ENGINE = AggregatingMergeTree PARTITION BY toYYYYMM(m) ORDER BY m"},
		{"empty args, no =, quoted name",
			"create table if not exists `in box` (x UInt8, INDEX i x TYPE minmax GRANULARITY 1) engine MergeTree() order by x",
			"create table if not exists `itlmon_local`.`in box` ON CLUSTER `prod` (x UInt8, INDEX i x TYPE minmax GRANULARITY 1) engine ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}') order by x",
			"create table if not exists `itlmon_local`.`in box` (x UInt8, INDEX i x TYPE minmax GRANULARITY 1) engine MergeTree() order by x"},
		{"other engine kept",
			"CREATE TABLE IF NOT EXISTS n (x UInt8) ENGINE = Null",
			"CREATE TABLE IF NOT EXISTS `itlmon_local`.`n` ON CLUSTER `prod` (x UInt8) ENGINE = Null",
			"CREATE TABLE IF NOT EXISTS `itlmon_local`.`n` (x UInt8) ENGINE = Null"},
		{"view with TO",
			"CREATE MATERIALIZED VIEW IF NOT EXISTS v TO r AS\nSELECT x AS engine FROM itl_streams",
			"CREATE MATERIALIZED VIEW IF NOT EXISTS `itlmon_local`.`v` ON CLUSTER `prod` TO r AS\nSELECT x AS engine FROM itl_streams",
			"CREATE MATERIALIZED VIEW IF NOT EXISTS `itlmon_local`.`v` TO r AS\nSELECT x AS engine FROM itl_streams"},
		{"view with its own engine",
			"CREATE MATERIALIZED VIEW IF NOT EXISTS v ENGINE = SummingMergeTree ORDER BY x AS SELECT x FROM t",
			"CREATE MATERIALIZED VIEW IF NOT EXISTS `itlmon_local`.`v` ON CLUSTER `prod` ENGINE = ReplicatedSummingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}') ORDER BY x AS SELECT x FROM t",
			"CREATE MATERIALIZED VIEW IF NOT EXISTS `itlmon_local`.`v` ENGINE = SummingMergeTree ORDER BY x AS SELECT x FROM t"},
		{"alter",
			"ALTER TABLE itl_streams ADD COLUMN IF NOT EXISTS e String DEFAULT '' AFTER s",
			"ALTER TABLE `itlmon_local`.`itl_streams` ON CLUSTER `prod` ADD COLUMN IF NOT EXISTS e String DEFAULT '' AFTER s",
			"ALTER TABLE `itlmon_local`.`itl_streams` ADD COLUMN IF NOT EXISTS e String DEFAULT '' AFTER s"},
		{"modify setting",
			"ALTER TABLE t MODIFY SETTING non_replicated_deduplication_window = 10000",
			"ALTER TABLE `itlmon_local`.`t` ON CLUSTER `prod` MODIFY SETTING replicated_deduplication_window = 10000",
			"ALTER TABLE `itlmon_local`.`t` MODIFY SETTING non_replicated_deduplication_window = 10000"},
		{"drop",
			"DROP TABLE IF EXISTS itl_stream_ids",
			"DROP TABLE IF EXISTS `itlmon_local`.`itl_stream_ids` ON CLUSTER `prod`",
			"DROP TABLE IF EXISTS `itlmon_local`.`itl_stream_ids`"},
		{"rename in place",
			"-- why\nRENAME TABLE v TO `v tmp`, `v tmp` TO v",
			"RENAME TABLE `itlmon_local`.`v` TO `itlmon_local`.`v tmp`, `itlmon_local`.`v tmp` TO `itlmon_local`.`v` ON CLUSTER `prod`",
			"RENAME TABLE `itlmon_local`.`v` TO `itlmon_local`.`v tmp`, `itlmon_local`.`v tmp` TO `itlmon_local`.`v`"},
		{"drop view",
			"DROP VIEW IF EXISTS itl_stream_ids_mv SYNC",
			"DROP VIEW IF EXISTS `itlmon_local`.`itl_stream_ids_mv` ON CLUSTER `prod` SYNC",
			"DROP VIEW IF EXISTS `itlmon_local`.`itl_stream_ids_mv` SYNC"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			for _, c := range []struct {
				cl   Cluster
				want string
			}{{replicated, tt.repl}, {plain, tt.non}} {
				got, err := c.cl.Local(s)
				if err != nil {
					t.Fatalf("Local (replicated %v): %v", c.cl.Replicated, err)
				}
				if got != c.want {
					t.Errorf("Local (replicated %v) =\n%s\nwant\n%s", c.cl.Replicated, got, c.want)
				}
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	for _, in := range []string{
		"INSERT INTO t VALUES (1)",
		"RENAME TABLE a TO b",
		"RENAME TABLE a TO b, b TO c",
		"RENAME TABLE a TO b, c TO a",
		"RENAME TABLE a TO a, a TO a",
		"RENAME TABLE db.a TO b, b TO db.a",
		"RENAME TABLE a TO b, b TO a, a TO b",
		"TRUNCATE TABLE t",
		"OPTIMIZE TABLE t FINAL",
		"ALTER TABLE other.t ADD COLUMN x UInt8",
		"CREATE TABLE IF NOT EXISTS db.t (x UInt8) ENGINE = MergeTree ORDER BY x",
		"CREATE TABLE (x UInt8)",
		"SELECT 'unterminated",
	} {
		if s, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = kind %d, want an error", in, s.Kind)
		}
	}
}

func TestDistributedAlter(t *testing.T) {
	tests := []struct {
		in, want string // want "" = nothing for the Distributed table
	}{
		{"ALTER TABLE t ADD COLUMN IF NOT EXISTS s Array(LowCardinality(String))\n    DEFAULT arrayMap(c -> transform(c, [0, 1]::Array(UInt8), ['a', 'b'], 'x'), c) COMMENT 'a, b' AFTER c",
			"ALTER TABLE `itlmon`.`t` ON CLUSTER `prod`\nADD COLUMN IF NOT EXISTS s Array(LowCardinality(String))\n    DEFAULT arrayMap(c -> transform(c, [0, 1]::Array(UInt8), ['a', 'b'], 'x'), c) COMMENT 'a, b' AFTER c"},
		{"ALTER TABLE t RENAME COLUMN IF EXISTS status TO status_code", "ALTER TABLE `itlmon`.`t` ON CLUSTER `prod`\nRENAME COLUMN IF EXISTS status TO status_code"},
		{"ALTER TABLE t MODIFY COLUMN x UInt64, MODIFY TTL m + INTERVAL 1 DAY, DROP COLUMN y, ADD INDEX i x TYPE minmax, COMMENT COLUMN z 'q'",
			"ALTER TABLE `itlmon`.`t` ON CLUSTER `prod`\nMODIFY COLUMN x UInt64,\nDROP COLUMN y,\nCOMMENT COLUMN z 'q'"},
		{"ALTER TABLE v MODIFY QUERY SELECT a, b FROM t", ""},
		{"ALTER TABLE t MODIFY TTL toDateTime(received_at) + INTERVAL 9 DAY", ""},
		{"ALTER TABLE t MODIFY SETTING non_replicated_deduplication_window = 10", ""},
		{"ALTER TABLE t MATERIALIZE COLUMN x", ""},
	}
	for _, tt := range tests {
		s, err := Parse(tt.in)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.in, err)
		}
		got, ok := replicated.DistributedAlter(s, "itlmon")
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("DistributedAlter(%q) = %q, %v; want %q", tt.in, got, ok, tt.want)
		}
	}
	s, _ := Parse("DROP TABLE IF EXISTS t")
	if got, ok := plain.DistributedDrop(s, "itlmon"); !ok || got != "DROP TABLE IF EXISTS `itlmon`.`t`" {
		t.Errorf("DistributedDrop = %q, %v", got, ok)
	}
	s, _ = Parse("DROP VIEW IF EXISTS v")
	if got, ok := plain.DistributedDrop(s, "itlmon"); ok {
		t.Errorf("DistributedDrop of a view = %q, want none", got)
	}
}

// TestClusterFiles: every statement of every file has a cluster form, and a
// replicated one names no non-replicated MergeTree engine.
func TestClusterFiles(t *testing.T) {
	migs, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migs {
		for _, stmt := range m.Statements {
			s, err := Parse(stmt)
			if err != nil {
				t.Errorf("%s: %v", m.Name, err)
				continue
			}
			local, err := replicated.Local(s)
			if err != nil {
				t.Errorf("%s: %v", m.Name, err)
				continue
			}
			if !strings.Contains(local, " ON CLUSTER `prod`") {
				t.Errorf("%s: no ON CLUSTER in %.80s", m.Name, local)
			}
			if s.Kind == CreateTable && strings.Contains(local, "MergeTree") && !strings.Contains(local, "ENGINE = Replicated") {
				t.Errorf("%s: %s keeps a non-replicated engine", m.Name, s.Object)
			}
		}
	}
}
