package clustercheck

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector/store"
)

// The judging of a cluster's answers, on answers the real engine gave
// (TestClusterCheckReplicated in collector/cmd/itlmon runs the check against
// the engine itself): a Replicated table the engine created with Debian's
// ZooKeeper 3.8 and left read-only, as system.replicas and SYSTEM SYNC
// REPLICA answered, and a healthy cluster's answers edited one fault at a
// time (a replicated cluster with active replicas cannot run here).

var testOpts = Options{Cluster: "itl", Database: "itlmon", SyncBound: 2 * time.Minute, MaxLag: 10 * time.Second}

var allVersions = []uint32{1, 2, 3}

// Two tables of the layout as system.tables and system.columns list them
// (sorting keys from schema/007_inbox.sql and 001_streams.sql), and their
// Distributed tables as the engine prints engine_full.
func healthyTables(replicated bool) ([]localTable, map[string]string) {
	prefix := ""
	if replicated {
		prefix = "Replicated"
	}
	locals := []localTable{
		{Name: "itl_inbox", Engine: prefix + "MergeTree", SortingKey: "ingested_at",
			Columns: []string{"kind", "site", "stream_id", "origin_id", "received_at", "ingested_at", "payload"}},
		{Name: "itl_streams", Engine: prefix + "ReplacingMergeTree", SortingKey: "site, toStartOfHour(start), stream_id",
			Columns: []string{"site", "start", "stream_id", "origin_id", "tokens"}},
		{Name: "schema_migrations", Engine: prefix + "ReplacingMergeTree", SortingKey: "version", Columns: []string{"version", "name", "applied_at"}},
		{Name: "schema_lock", Engine: prefix + "MergeTree", SortingKey: "lease", Columns: []string{"lease", "holder"}},
	}
	dist := map[string]string{
		"itl_inbox":   "Distributed('itl', 'itlmon_local', 'itl_inbox', cityHash64(if(origin_id != '', origin_id, stream_id)))",
		"itl_streams": "Distributed('itl', 'itlmon_local', 'itl_streams', cityHash64(stream_id))",
	}
	return locals, dist
}

// healthy is a cluster of shards×replicas nodes with nothing wrong.
func healthy(shards, replicas int, replicated bool) []nodeState {
	var nodes []nodeState
	for s := 1; s <= shards; s++ {
		for r := 1; r <= replicas; r++ {
			locals, dist := healthyTables(replicated)
			n := nodeState{
				Node:        store.ClusterNode{Shard: uint32(s), Replica: uint32(r), Host: fmt.Sprintf("ch-%d-%d", s, r), Port: 9000},
				Migrations:  slices.Clone(allVersions),
				Locals:      locals,
				Distributed: dist,
			}
			if replicated {
				n.Macros = map[string]string{"shard": fmt.Sprintf("%02d", s), "replica": fmt.Sprintf("r%d", r)}
				for _, t := range locals {
					n.Replicas = append(n.Replicas, replica{Table: t.Name, TotalReplicas: uint32(replicas), ActiveReplica: uint32(replicas)})
				}
				n.Synced, n.SyncTook = true, 20*time.Millisecond
			}
			nodes = append(nodes, n)
		}
	}
	return nodes
}

// engineReadOnly is what the embedded engine (26.7) answered for its
// ReplicatedMergeTree itl_inbox registered in ZooKeeper: system.replicas'
// (is_readonly, is_session_expired, absolute_delay, queue_size,
// total_replicas, active_replicas) = (1, 0, 1796222587, 0, 1, 0) with an
// empty zookeeper_exception, and SYSTEM SYNC REPLICA's error.
var engineReadOnly = replica{Table: "itl_inbox", ReadOnly: true, AbsoluteDelay: 1796222587, TotalReplicas: 1, ActiveReplica: 0}

const engineSyncErr = "code: 242, message: Table is in readonly mode (replica path: /clickhouse/tables/01/itlmon_local/itl_inbox/replicas/r1)"

func TestEvaluate(t *testing.T) {
	const n11, n12, n21 = "shard 1 replica 1 (ch-1-1:9000)", "shard 1 replica 2 (ch-1-2:9000)", "shard 2 replica 1 (ch-2-1:9000)"
	cases := []struct {
		name       string
		nodes      []nodeState
		edit       func(ns []nodeState)
		replicated bool
		want       []string // the problems, in order
	}{
		{name: "sharded, healthy", nodes: healthy(2, 1, false)},
		{name: "replicated, healthy", nodes: healthy(2, 2, true), replicated: true},
		{name: "the engine's read-only replica", nodes: healthy(1, 1, true), replicated: true,
			edit: func(ns []nodeState) {
				ns[0].Replicas = []replica{engineReadOnly}
				ns[0].Sync = errors.New(engineSyncErr)
			},
			want: []string{
				n11 + ": replica: itlmon_local.itl_inbox is read-only: inserts and promotions on this replica fail",
				n11 + ": sync: SYSTEM SYNC REPLICA itlmon_local.itl_inbox, which the promoter runs before every window: " + engineSyncErr,
			}},
		{name: "a shard down", nodes: healthy(2, 1, false),
			edit: func(ns []nodeState) {
				ns[1] = nodeState{Node: ns[1].Node, Err: errors.New("dial tcp: connection refused")}
			},
			want: []string{n21 + ": reachable: does not answer: dial tcp: connection refused"}},
		{name: "a migration missing", nodes: healthy(2, 1, false),
			edit: func(ns []nodeState) { ns[1].Migrations = []uint32{1, 2} },
			want: []string{n21 + ": schema: itlmon_local.schema_migrations lacks migrations [3] (run itlmon migrate --cluster itl)"}},
		{name: "a wrong sharding key", nodes: healthy(2, 1, false),
			edit: func(ns []nodeState) {
				ns[0].Distributed["itl_inbox"] = "Distributed('itl', 'itlmon_local', 'itl_inbox', cityHash64(stream_id))"
			},
			want: []string{"shard 1 replica 1 (ch-1-1:9000): sharding key: itlmon.itl_inbox is sharded by cityHash64(stream_id); migrate --cluster gives it " +
				"cityHash64(if(origin_id != '', origin_id, stream_id)) (rows a promotion must see together would land on different shards)"}},
		{name: "no sharding key", nodes: healthy(1, 1, false),
			edit: func(ns []nodeState) {
				ns[0].Distributed["itl_streams"] = "Distributed('itl', 'itlmon_local', 'itl_streams')"
			},
			want: []string{n11 + ": sharding key: itlmon.itl_streams has no sharding key; migrate --cluster gives it cityHash64(stream_id)"}},
		{name: "another cluster, a missing Distributed table", nodes: healthy(1, 1, false),
			edit: func(ns []nodeState) {
				ns[0].Distributed["itl_streams"] = "Distributed('other', 'itlmon_local', 'itl_streams', cityHash64(stream_id))"
				delete(ns[0].Distributed, "itl_inbox")
			},
			want: []string{
				n11 + ": distributed: itlmon_local.itl_inbox has no Distributed table itlmon.itl_inbox",
				n11 + ": distributed: itlmon.itl_streams reads cluster 'other', table itlmon_local.itl_streams; want cluster itl, table itlmon_local.itl_streams",
			}},
		{name: "macros missing", nodes: healthy(1, 2, true), replicated: true,
			edit: func(ns []nodeState) { delete(ns[1].Macros, "replica") },
			want: []string{n12 + ": macros: the {replica} macro is not set (<macros> in the server's config): Replicated tables cannot name their Keeper path"}},
		{name: "two shards with one {shard}", nodes: healthy(2, 1, true), replicated: true,
			edit: func(ns []nodeState) { ns[1].Macros["shard"] = "01" },
			want: []string{`macros: shards 1 and 2 both have {shard} = "01": their replicas would share one Keeper path`}},
		{name: "replicas disagree on {shard}, share {replica}", nodes: healthy(1, 2, true), replicated: true,
			edit: func(ns []nodeState) { ns[1].Macros["shard"], ns[1].Macros["replica"] = "07", "r1" },
			want: []string{
				`macros: shard 1's replicas disagree on {shard}: "01" on ch-1-1:9000, "07" on ch-1-2:9000`,
				`macros: shard 1: ch-1-1:9000, ch-1-2:9000 share {replica} = "r1"`,
			}},
		{name: "session expired, inactive peer, lag", nodes: healthy(1, 2, true), replicated: true,
			edit: func(ns []nodeState) {
				ns[0].Replicas[0].SessionExpired = true
				ns[1].Replicas[1].ActiveReplica = 1
				ns[1].Replicas[0].AbsoluteDelay, ns[1].Replicas[0].QueueSize = 60, 12
			},
			want: []string{
				n11 + ": replica: itlmon_local.itl_inbox has lost its Keeper session",
				n12 + ": lag: itlmon_local.itl_inbox is 1m0s behind its other replicas (queue 12), more than 10s",
				n12 + ": replica: itlmon_local.itl_streams: 1 of its 2 replicas active",
			}},
		{name: "a slow sync", nodes: healthy(1, 1, true), replicated: true,
			edit: func(ns []nodeState) { ns[0].SyncTook = 3 * time.Minute },
			want: []string{n11 + ": sync: SYSTEM SYNC REPLICA itlmon_local.itl_inbox took 3m0s, more than the promoter's bound 2m0s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.edit != nil {
				tc.edit(tc.nodes)
			}
			rep := evaluate(testOpts, allVersions, tc.nodes)
			var got []string
			for _, p := range rep.Problems {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if rep.OK() != (len(tc.want) == 0) || rep.Replicated != tc.replicated {
				t.Errorf("OK %v, replicated %v; want %v, %v", rep.OK(), rep.Replicated, len(tc.want) == 0, tc.replicated)
			}
		})
	}
}

func TestDistributedArgs(t *testing.T) {
	for _, tc := range []struct {
		full string
		want []string
	}{
		{"Distributed('itl', 'itlmon_local', 'itl_inbox', cityHash64(if(origin_id != '', origin_id, stream_id)))",
			[]string{"'itl'", "'itlmon_local'", "'itl_inbox'", "cityHash64(if(origin_id != '', origin_id, stream_id))"}},
		{"Distributed('it,l', 'db', 't', rand(), 'policy') SETTINGS fsync_after_insert = 1",
			[]string{"'it,l'", "'db'", "'t'", "rand()", "'policy'"}},
		{"Distributed('a\\')', 'db', 't')", []string{"'a\\')'", "'db'", "'t'"}},
		{"MergeTree", nil},
		{"Distributed('a', 'b'", nil},
	} {
		got, ok := distributedArgs(tc.full)
		if !slices.Equal(got, tc.want) || ok != (tc.want != nil) {
			t.Errorf("distributedArgs(%q) = %q, %v; want %q", tc.full, got, ok, tc.want)
		}
	}
}
