// Package clustercheck checks, against a real ClickHouse cluster, what the
// collectors' promoter relies on in the cluster layout (`itlmon migrate
// --cluster`), and says in words what is wrong:
//
//   - every node system.clusters lists for the cluster answers;
//   - every shard records every embedded migration;
//   - each Distributed table of the main database exists for its local table
//     and is sharded by the key `migrate --cluster` gives it
//     (store.ShardingKey of the local table's columns and sorting key), over
//     the right cluster, database and table;
//   - where the local tables are Replicated: the {shard} and {replica} macros
//     are set (one {shard} value per shard, distinct {replica} values within
//     it), no replica is read-only or without its Keeper session, every
//     replica of a table is active, no replica lags more than MaxLag, and
//     SYSTEM SYNC REPLICA itl_inbox, which the promoter runs before it reads
//     a window, answers within SyncBound.
//
// Check gathers what every node answers (gather), then evaluate judges it:
// a pure function of the answers, tested on the engine's own answers.
package clustercheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/schema"
)

// Defaults of Options.
const (
	// DefaultSyncBound is the promoter's bound on one window's promotion,
	// SYSTEM SYNC REPLICA included: a sync slower than this fails every
	// promotion of the shard.
	DefaultSyncBound = 2 * time.Minute
	// DefaultMaxLag: a replica further behind than this (absolute_delay)
	// is reported; the promoter would wait for it on every window.
	DefaultMaxLag = 10 * time.Second
	// DefaultNodeTimeout bounds connecting to a node and each of its
	// queries (but SYSTEM SYNC REPLICA).
	DefaultNodeTimeout = 10 * time.Second
)

// Options configure Check.
type Options struct {
	Cluster     string // as in remote_servers and system.clusters
	Database    string // the main database (Distributed tables); the local one is Database + "_local"
	SyncBound   time.Duration
	MaxLag      time.Duration
	NodeTimeout time.Duration
	// Connect opens a connection to the server at addr (host:port) with
	// database as its default database (store.DB.ConnectNode).
	Connect func(ctx context.Context, addr, database string) (driver.Conn, error)
}

func (o *Options) setDefaults() error {
	if o.Cluster == "" || o.Database == "" || o.Connect == nil {
		return errors.New("clustercheck: a cluster, a database and Connect are required")
	}
	if o.SyncBound <= 0 {
		o.SyncBound = DefaultSyncBound
	}
	if o.MaxLag <= 0 {
		o.MaxLag = DefaultMaxLag
	}
	if o.NodeTimeout <= 0 {
		o.NodeTimeout = DefaultNodeTimeout
	}
	return nil
}

// Problem is one thing wrong, on a node or the cluster.
type Problem struct {
	Node  string // "shard 2 replica 1 (host:9000)"; "" for the cluster as a whole
	Check string // reachable, schema, distributed, macros, replica, lag, sync
	Text  string // what is wrong, in words
}

func (p Problem) String() string {
	if p.Node == "" {
		return p.Check + ": " + p.Text
	}
	return p.Node + ": " + p.Check + ": " + p.Text
}

// Report is what Check found.
type Report struct {
	Cluster    string
	Shards     int
	Nodes      int
	Replicated bool // the local tables are Replicated (some node says so)
	Problems   []Problem
}

// OK reports whether nothing is wrong.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// Check lists the cluster's nodes on seed (a connection to any node of it),
// asks every node what the promoter relies on, and judges the answers.
// It returns an error only when the cluster cannot be listed; a node that
// does not answer is a Problem.
func Check(ctx context.Context, seed driver.Conn, o Options) (Report, error) {
	if err := o.setDefaults(); err != nil {
		return Report{}, err
	}
	lctx, cancel := context.WithTimeout(ctx, o.NodeTimeout)
	nodes, err := store.ClusterNodes(lctx, seed, o.Cluster)
	cancel()
	if err != nil {
		return Report{}, err
	}
	migs, err := schema.Migrations()
	if err != nil {
		return Report{}, err
	}
	var want []uint32
	for _, m := range migs {
		want = append(want, m.Version)
	}
	states := make([]nodeState, len(nodes))
	for i, n := range nodes {
		states[i] = gather(ctx, o, n)
	}
	return evaluate(o, want, states), nil
}

// nodeState is what one node answered.
type nodeState struct {
	Node        store.ClusterNode
	Err         error             // connecting failed: unreachable
	QueryErr    error             // asking failed
	Migrations  []uint32          // versions in LocalDB.schema_migrations
	MigErr      error             // reading them failed
	Macros      map[string]string // system.macros
	Locals      []localTable      // MergeTree-family tables of LocalDB
	Distributed map[string]string // Distributed tables of Database: name -> engine_full
	Replicas    []replica         // system.replicas of LocalDB
	Sync        error             // SYSTEM SYNC REPLICA itl_inbox (Replicated only)
	SyncTook    time.Duration
	Synced      bool // the sync was run
}

// localTable is a local table as system.tables and system.columns have it.
type localTable struct {
	Name, Engine, SortingKey string
	Columns                  []string
}

// replica is a row of system.replicas.
type replica struct {
	Table                        string
	ReadOnly, SessionExpired     bool
	AbsoluteDelay                uint64 // seconds
	QueueSize                    uint32
	TotalReplicas, ActiveReplica uint32
	KeeperException              string
}

// localDB is the per-shard database of o's layout.
func (o Options) localDB() string {
	return store.NewClusterLayout(o.Cluster, o.Database, store.NoReplication).LocalDB
}

// gather asks node n what evaluate needs. A failure to connect sets Err, a
// failed query QueryErr (the rest is then empty); a missing
// schema_migrations sets MigErr.
func gather(ctx context.Context, o Options, n store.ClusterNode) nodeState {
	st := nodeState{Node: n}
	cctx, cancel := context.WithTimeout(ctx, o.NodeTimeout)
	defer cancel()
	conn, err := o.Connect(cctx, n.Addr(), "default")
	if err != nil {
		st.Err = err
		return st
	}
	defer conn.Close()
	local := o.localDB()
	st.QueryErr = func() error {
		rows, err := conn.Query(cctx, "SELECT macro, substitution FROM system.macros")
		if err != nil {
			return fmt.Errorf("read system.macros: %w", err)
		}
		st.Macros = map[string]string{}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				rows.Close()
				return fmt.Errorf("read system.macros: %w", err)
			}
			st.Macros[k] = v
		}
		rows.Close()
		rows, err = conn.Query(cctx, `SELECT table, groupArray(name) FROM
			(SELECT table, name FROM system.columns WHERE database = ? ORDER BY table, position) GROUP BY table`, local)
		if err != nil {
			return fmt.Errorf("read the columns of %s: %w", local, err)
		}
		columns := map[string][]string{}
		for rows.Next() {
			var table string
			var cols []string
			if err := rows.Scan(&table, &cols); err != nil {
				rows.Close()
				return fmt.Errorf("read the columns of %s: %w", local, err)
			}
			columns[table] = cols
		}
		rows.Close()
		rows, err = conn.Query(cctx, `SELECT name, engine, sorting_key FROM system.tables
			WHERE database = ? AND engine LIKE '%MergeTree' ORDER BY name`, local)
		if err != nil {
			return fmt.Errorf("read the tables of %s: %w", local, err)
		}
		for rows.Next() {
			var t localTable
			if err := rows.Scan(&t.Name, &t.Engine, &t.SortingKey); err != nil {
				rows.Close()
				return fmt.Errorf("read the tables of %s: %w", local, err)
			}
			t.Columns = columns[t.Name]
			st.Locals = append(st.Locals, t)
		}
		rows.Close()
		rows, err = conn.Query(cctx, "SELECT name, engine_full FROM system.tables WHERE database = ? AND engine = 'Distributed'", o.Database)
		if err != nil {
			return fmt.Errorf("read the tables of %s: %w", o.Database, err)
		}
		st.Distributed = map[string]string{}
		for rows.Next() {
			var name, full string
			if err := rows.Scan(&name, &full); err != nil {
				rows.Close()
				return fmt.Errorf("read the tables of %s: %w", o.Database, err)
			}
			st.Distributed[name] = full
		}
		rows.Close()
		rows, err = conn.Query(cctx, `SELECT table, is_readonly, is_session_expired, absolute_delay, queue_size,
			total_replicas, active_replicas, zookeeper_exception FROM system.replicas WHERE database = ? ORDER BY table`, local)
		if err != nil {
			return fmt.Errorf("read system.replicas: %w", err)
		}
		for rows.Next() {
			var r replica
			if err := rows.Scan(&r.Table, &r.ReadOnly, &r.SessionExpired, &r.AbsoluteDelay, &r.QueueSize,
				&r.TotalReplicas, &r.ActiveReplica, &r.KeeperException); err != nil {
				rows.Close()
				return fmt.Errorf("read system.replicas: %w", err)
			}
			st.Replicas = append(st.Replicas, r)
		}
		rows.Close()
		return nil
	}()
	if st.QueryErr != nil {
		return st
	}
	rows, err := conn.Query(cctx, "SELECT version FROM "+schema.QuoteIdent(local)+".schema_migrations")
	if err != nil {
		st.MigErr = err
	} else {
		for rows.Next() {
			var v uint32
			if st.MigErr = rows.Scan(&v); st.MigErr != nil {
				break
			}
			st.Migrations = append(st.Migrations, v)
		}
		rows.Close()
	}
	if slices.ContainsFunc(st.Replicas, func(r replica) bool { return r.Table == "itl_inbox" }) {
		sctx, cancel := context.WithTimeout(ctx, o.SyncBound)
		began := time.Now()
		st.Sync = conn.Exec(sctx, "SYSTEM SYNC REPLICA "+schema.QuoteIdent(local)+".itl_inbox")
		st.SyncTook, st.Synced = time.Since(began), true
		if st.Sync != nil && sctx.Err() != nil {
			st.Sync = fmt.Errorf("no answer within %v", o.SyncBound)
		}
		cancel()
	}
	return st
}

// nodeName names a node in a Problem.
func nodeName(n store.ClusterNode) string {
	return fmt.Sprintf("shard %d replica %d (%s)", n.Shard, n.Replica, n.Addr())
}

// evaluate judges the nodes' answers; want are the embedded migrations'
// versions.
func evaluate(o Options, want []uint32, nodes []nodeState) Report {
	rep := Report{Cluster: o.Cluster, Nodes: len(nodes)}
	local := o.localDB()
	add := func(n *nodeState, check, format string, args ...any) {
		p := Problem{Check: check, Text: fmt.Sprintf(format, args...)}
		if n != nil {
			p.Node = nodeName(n.Node)
		}
		rep.Problems = append(rep.Problems, p)
	}
	shards := map[uint32]bool{}
	for i := range nodes {
		n := &nodes[i]
		shards[n.Node.Shard] = true
		if n.Err != nil {
			add(n, "reachable", "does not answer: %v", n.Err)
			continue
		}
		if n.QueryErr != nil {
			add(n, "query", "%v", n.QueryErr)
			continue
		}
		if slices.ContainsFunc(n.Locals, func(t localTable) bool { return strings.HasPrefix(t.Engine, "Replicated") }) {
			rep.Replicated = true
		}
	}
	rep.Shards = len(shards)
	shardMacro := map[uint32]map[string][]string{} // shard -> {shard} value -> nodes
	replicaMacro := map[uint32]map[string][]string{}
	for i := range nodes {
		n := &nodes[i]
		if n.Err != nil || n.QueryErr != nil {
			continue
		}
		// Schema.
		if n.MigErr != nil {
			add(n, "schema", "%s.schema_migrations cannot be read (run itlmon migrate --cluster %s): %v", local, o.Cluster, n.MigErr)
		} else if missing := missingVersions(want, n.Migrations); len(missing) > 0 {
			add(n, "schema", "%s.schema_migrations lacks migrations %v (run itlmon migrate --cluster %s)", local, missing, o.Cluster)
		}
		// Distributed tables and their sharding keys.
		for _, t := range n.Locals {
			if slices.Contains(store.RunnerTables, t.Name) || strings.HasPrefix(t.Name, ".inner") {
				continue
			}
			full, ok := n.Distributed[t.Name]
			if !ok {
				add(n, "distributed", "%s.%s has no Distributed table %s.%s", local, t.Name, o.Database, t.Name)
				continue
			}
			args, ok := distributedArgs(full)
			wantKey := store.ShardingKey(t.Columns, t.SortingKey)
			switch {
			case !ok || len(args) < 3:
				add(n, "distributed", "%s.%s: cannot read its engine %q", o.Database, t.Name, full)
			case unquote(args[0]) != o.Cluster || unquote(args[1]) != local || unquote(args[2]) != t.Name:
				add(n, "distributed", "%s.%s reads cluster %s, table %s.%s; want cluster %s, table %s.%s",
					o.Database, t.Name, args[0], unquote(args[1]), unquote(args[2]), o.Cluster, local, t.Name)
			case len(args) < 4:
				add(n, "sharding key", "%s.%s has no sharding key; migrate --cluster gives it %s", o.Database, t.Name, wantKey)
			case normalize(args[3]) != normalize(wantKey):
				add(n, "sharding key", "%s.%s is sharded by %s; migrate --cluster gives it %s (rows a promotion must see together would land on different shards)",
					o.Database, t.Name, args[3], wantKey)
			}
		}
		if !rep.Replicated {
			continue
		}
		// Macros.
		for _, m := range []string{"shard", "replica"} {
			if n.Macros[m] == "" {
				add(n, "macros", "the {%s} macro is not set (<macros> in the server's config): Replicated tables cannot name their Keeper path", m)
			}
		}
		if v := n.Macros["shard"]; v != "" {
			if shardMacro[n.Node.Shard] == nil {
				shardMacro[n.Node.Shard] = map[string][]string{}
			}
			shardMacro[n.Node.Shard][v] = append(shardMacro[n.Node.Shard][v], n.Node.Addr())
		}
		if v := n.Macros["replica"]; v != "" {
			if replicaMacro[n.Node.Shard] == nil {
				replicaMacro[n.Node.Shard] = map[string][]string{}
			}
			replicaMacro[n.Node.Shard][v] = append(replicaMacro[n.Node.Shard][v], n.Node.Addr())
		}
		// Replicas.
		for _, r := range n.Replicas {
			// A read-only replica's delay and peers mean nothing (it
			// follows no log): that it is read-only is the problem.
			switch {
			case r.ReadOnly:
				why := ""
				if r.KeeperException != "" {
					why = ": " + r.KeeperException
				}
				add(n, "replica", "%s.%s is read-only: inserts and promotions on this replica fail%s", local, r.Table, why)
				continue
			case r.SessionExpired:
				add(n, "replica", "%s.%s has lost its Keeper session", local, r.Table)
				continue
			}
			if r.ActiveReplica < r.TotalReplicas {
				add(n, "replica", "%s.%s: %d of its %d replicas active", local, r.Table, r.ActiveReplica, r.TotalReplicas)
			}
			if lag := time.Duration(r.AbsoluteDelay) * time.Second; lag > o.MaxLag {
				add(n, "lag", "%s.%s is %v behind its other replicas (queue %d), more than %v", local, r.Table, lag, r.QueueSize, o.MaxLag)
			}
		}
		if n.Synced && n.Sync != nil {
			add(n, "sync", "SYSTEM SYNC REPLICA %s.itl_inbox, which the promoter runs before every window: %v", local, n.Sync)
		} else if n.Synced && n.SyncTook > o.SyncBound {
			add(n, "sync", "SYSTEM SYNC REPLICA %s.itl_inbox took %v, more than the promoter's bound %v", local, n.SyncTook, o.SyncBound)
		} else if !n.Synced && len(n.Locals) > 0 {
			add(n, "replica", "%s.itl_inbox is not a Replicated table here, unlike on other nodes", local)
		}
	}
	// {shard} names one shard: the same on its replicas, distinct between
	// shards; {replica} distinct within a shard.
	owner := map[string]uint32{}
	for _, s := range sortedKeys(shardMacro) {
		vals := shardMacro[s]
		if len(vals) > 1 {
			add(nil, "macros", "shard %d's replicas disagree on {shard}: %s", s, describe(vals))
		}
		for v := range vals {
			if other, ok := owner[v]; ok && other != s {
				add(nil, "macros", "shards %d and %d both have {shard} = %q: their replicas would share one Keeper path", other, s, v)
			}
			owner[v] = s
		}
	}
	for _, s := range sortedKeys(replicaMacro) {
		for v, addrs := range replicaMacro[s] {
			if len(addrs) > 1 {
				add(nil, "macros", "shard %d: %s share {replica} = %q", s, strings.Join(addrs, ", "), v)
			}
		}
	}
	return rep
}

func sortedKeys[V any](m map[uint32]V) []uint32 {
	var ks []uint32
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// describe lists macro values and the nodes holding them.
func describe(vals map[string][]string) string {
	var parts []string
	for v, addrs := range vals {
		parts = append(parts, fmt.Sprintf("%q on %s", v, strings.Join(addrs, ", ")))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// missingVersions returns the versions of want not in have.
func missingVersions(want, have []uint32) []uint32 {
	var out []uint32
	for _, v := range want {
		if !slices.Contains(have, v) {
			out = append(out, v)
		}
	}
	return out
}

// distributedArgs splits the arguments of engine_full's
// "Distributed(a, b, c, key[, policy])" at its top-level commas (SETTINGS
// and the like after the closing parenthesis are ignored).
func distributedArgs(full string) ([]string, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(full), "Distributed(")
	if !ok {
		return nil, false
	}
	var args []string
	depth, start := 0, 0
	inQuote := byte(0)
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		switch {
		case inQuote != 0:
			if c == '\\' {
				i++
			} else if c == inQuote {
				inQuote = 0
			}
		case c == '\'' || c == '`' || c == '"':
			inQuote = c
		case c == '(' || c == '[':
			depth++
		case c == ')' && depth == 0:
			return append(args, strings.TrimSpace(rest[start:i])), true
		case c == ')' || c == ']':
			depth--
		case c == ',' && depth == 0:
			args = append(args, strings.TrimSpace(rest[start:i]))
			start = i + 1
		}
	}
	return nil, false
}

// unquote removes the quotes of a string literal or identifier.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '`' || s[0] == '"') && s[len(s)-1] == s[0] {
		return strings.NewReplacer(`\\`, `\`, `\'`, `'`).Replace(s[1 : len(s)-1])
	}
	return s
}

// normalize drops the spaces of an expression, for comparing the server's
// formatting with ours.
func normalize(expr string) string {
	return strings.Join(strings.Fields(expr), "")
}
