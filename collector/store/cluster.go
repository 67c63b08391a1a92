package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/itlmon/itlmon/schema"
)

// The cluster layout (itlmon migrate --cluster NAME): the schema/*.sql
// files run, unchanged but for their engines, in a per-shard local database
// (LocalDB, "<db>_local"), which holds the MergeTree-family tables and the
// materialized views (a view on a shard's local itl_streams fills that
// shard's local rollup). The main database holds one Distributed table per
// local table, with the same name and columns, so readers use the names they
// use on one node and see every shard. The Distributed sharding key keeps a
// stream's rows on one shard: cityHash64(stream_id) or cityHash64(origin_id),
// preferring the one in the table's sorting key (rows a ReplacingMergeTree
// collapses share it, so they must share a shard: itl_origin's versions
// share origin_id), else the one the table has; rand() for tables with
// neither (the rollups, read only through the Distributed table).
//
// With Replicated (production, ClickHouse with Keeper) the local tables are
// Replicated*MergeTree and every statement runs once, ON CLUSTER, through
// the DSN's node. With NoReplication (one copy per shard, and the embedded
// engine, which has no Keeper) engines stay as they are and the migration
// connects to every node system.clusters lists for the cluster and applies
// the statements on each. Either way each shard records its migrations in
// LocalDB.schema_migrations, and a migration runs wherever it is not
// recorded yet (every statement is idempotent, so a partial run is simply
// run again).
//
// Migrations hold the schema lock (lease.go) of the cluster: the lease
// table LocalDB.schema_lock on the cluster's first node (shard 1, replica
// 1, as system.clusters orders them), so two `itlmon migrate --cluster`
// started at once apply one after the other, the second finding every
// migration recorded. Every migrator reads and writes the lease through that
// one node, which a migration cannot do without anyway; with replication
// the table is Replicated, and Keeper deduplicates the claims across its
// replicas. The lease guards the whole cluster's DDL, every shard's, not
// one server's. Collectors in cluster mode take no lock: they run no DDL.
//
// A column change of a local table (ALTER TABLE ADD, DROP, MODIFY, RENAME,
// COMMENT COLUMN) is applied to its Distributed table too, by the same
// ALTER; a DROP TABLE drops both. Other ALTERs (MODIFY QUERY, TTL, SETTING,
// indexes) concern the local object only. Collectors in cluster mode run no
// DDL: they wait for ClusterSchemaReady.

// Replication says how a cluster keeps its copies of a shard.
type Replication string

const (
	// Replicated: Replicated*MergeTree local tables (Keeper, the
	// {shard} and {replica} macros of each server) and ON CLUSTER DDL.
	Replicated Replication = "replicated"
	// NoReplication: plain engines, DDL applied node by node.
	NoReplication Replication = "none"
)

// ErrReplication is returned by ParseReplication for an unknown mode.
var ErrReplication = errors.New("replication must be replicated or none")

// ParseReplication parses "replicated" or "none".
func ParseReplication(s string) (Replication, error) {
	switch r := Replication(s); r {
	case Replicated, NoReplication:
		return r, nil
	}
	return "", fmt.Errorf("%q: %w", s, ErrReplication)
}

// ClusterLayout names a cluster layout.
type ClusterLayout struct {
	Name        string // the cluster, as in remote_servers and system.clusters
	Database    string // the main database: the Distributed tables
	LocalDB     string // the per-shard database: local tables and views
	Replication Replication
}

// NewClusterLayout is the layout of cluster name for main database db: the
// local database is db + "_local".
func NewClusterLayout(name, db string, r Replication) ClusterLayout {
	return ClusterLayout{Name: name, Database: db, LocalDB: db + "_local", Replication: r}
}

func (l ClusterLayout) validate() error {
	if l.Name == "" || l.Database == "" || l.LocalDB == "" || l.Database == l.LocalDB {
		return fmt.Errorf("store: cluster layout needs a cluster name and two distinct databases (got %q, %q, %q)",
			l.Name, l.Database, l.LocalDB)
	}
	if _, err := ParseReplication(string(l.Replication)); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

func (l ClusterLayout) schema() schema.Cluster {
	return schema.Cluster{Name: l.Name, LocalDB: l.LocalDB, Replicated: l.Replication == Replicated}
}

// ClusterNode is one server of a cluster, as system.clusters lists it.
type ClusterNode struct {
	Shard, Replica uint32
	Host           string // host_name, as remote_servers configures it
	Port           uint16 // its native port
	Local          bool   // the server that answered the listing
}

// Addr is host:port.
func (n ClusterNode) Addr() string {
	return net.JoinHostPort(n.Host, strconv.Itoa(int(n.Port)))
}

// ErrNoCluster is returned when system.clusters does not list the cluster.
var ErrNoCluster = errors.New("cluster not found in system.clusters")

// ClusterNodes lists the servers of cluster as system.clusters on conn has
// them, by shard then replica. Hosts are the configured names (host_name),
// which the servers themselves use to reach each other.
func ClusterNodes(ctx context.Context, conn driver.Conn, cluster string) ([]ClusterNode, error) {
	rows, err := conn.Query(ctx, `SELECT shard_num, replica_num, host_name, port, is_local
		FROM system.clusters WHERE cluster = ? ORDER BY shard_num, replica_num`, cluster)
	if err != nil {
		return nil, fmt.Errorf("store: read system.clusters: %w", err)
	}
	defer rows.Close()
	var nodes []ClusterNode
	for rows.Next() {
		var n ClusterNode
		var local uint8
		if err := rows.Scan(&n.Shard, &n.Replica, &n.Host, &n.Port, &local); err != nil {
			return nil, fmt.Errorf("store: read system.clusters: %w", err)
		}
		n.Local = local != 0
		nodes = append(nodes, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read system.clusters: %w", err)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("store: %s: %w", cluster, ErrNoCluster)
	}
	return nodes, nil
}

// Shards returns one node per shard of nodes (ordered as ClusterNodes
// orders them): its first replica.
func Shards(nodes []ClusterNode) []ClusterNode {
	var shards []ClusterNode
	for _, n := range nodes {
		if len(shards) == 0 || shards[len(shards)-1].Shard != n.Shard {
			shards = append(shards, n)
		}
	}
	return shards
}

// ClusterLayout is the layout of the cluster db was opened for
// (Options.Cluster), its main database the connection's.
func (db *DB) ClusterLayout() ClusterLayout {
	return NewClusterLayout(db.cluster, db.database, Replicated)
}

// ShardConn is a connection to one shard's local database, through its
// replicas in order (the first that answers).
type ShardConn struct {
	Shard      uint32
	Addrs      []string
	Conn       driver.Conn
	Replicated bool // its inbox is a Replicated table (a cluster with Keeper)
}

// ShardConns connects to every shard of db's cluster (Options.Cluster), to
// its local database, with db's credentials and settings: the promoter
// works there. On an error, the connections made so far are closed.
func (db *DB) ShardConns(ctx context.Context) ([]ShardConn, error) {
	if db.cluster == "" {
		return nil, errors.New("store: not opened for a cluster")
	}
	nodes, err := db.ClusterNodes(ctx, db.cluster)
	if err != nil {
		return nil, err
	}
	l := db.ClusterLayout()
	var out []ShardConn
	for i := 0; i < len(nodes); {
		sc := ShardConn{Shard: nodes[i].Shard}
		for ; i < len(nodes) && nodes[i].Shard == sc.Shard; i++ {
			sc.Addrs = append(sc.Addrs, nodes[i].Addr())
		}
		if sc.Conn, err = db.connect(ctx, sc.Addrs, l.LocalDB); err == nil {
			var engine string
			err = sc.Conn.QueryRow(ctx, "SELECT engine FROM system.tables WHERE database = currentDatabase() AND name = 'itl_inbox'").Scan(&engine)
			sc.Replicated = strings.HasPrefix(engine, "Replicated")
			if err != nil {
				sc.Conn.Close()
			}
		}
		if err != nil {
			for _, c := range out {
				c.Conn.Close()
			}
			return nil, fmt.Errorf("store: shard %d: %w", sc.Shard, err)
		}
		out = append(out, sc)
	}
	return out, nil
}

// ClusterNodes is ClusterNodes on db's connection.
func (db *DB) ClusterNodes(ctx context.Context, cluster string) ([]ClusterNode, error) {
	return ClusterNodes(ctx, db.conn, cluster)
}

// Database is the default database of db's connection (the DSN's, or
// Options.Database).
func (db *DB) Database() string { return db.database }

// ConnectNode opens a connection to the server at addr with db's
// credentials and settings (not Options.Dial, which reaches db's own server)
// and database as its default database, and pings it. A promoter uses it to
// work on one shard's local database.
func (db *DB) ConnectNode(ctx context.Context, addr, database string) (driver.Conn, error) {
	return db.connect(ctx, []string{addr}, database)
}

// connect opens and pings a connection to addrs (nil: db's own servers,
// through Options.Dial when set) with database as the default database.
func (db *DB) connect(ctx context.Context, addrs []string, database string) (driver.Conn, error) {
	o, err := clickhouseOptions(db.opts)
	if err != nil {
		return nil, err
	}
	if addrs != nil {
		o.Addr, o.DialContext = addrs, halfCloseDial(o)
	}
	o.Auth.Database = database
	conn, err := clickhouse.Open(o)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", strings.Join(o.Addr, ","), err)
	}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("store: ping %s: %w", strings.Join(o.Addr, ","), err)
	}
	return conn, nil
}

// ClusterSchemaReady returns nil when the server db is connected to records
// every embedded migration in l.LocalDB.schema_migrations, else an error
// wrapping ErrSchemaPending that says what is missing. A collector in
// cluster mode runs no DDL: it waits for this (itlmon migrate --cluster
// applies the schema).
func (db *DB) ClusterSchemaReady(ctx context.Context, l ClusterLayout) error {
	migs, err := schema.Migrations()
	if err != nil {
		return err
	}
	applied, err := appliedOn(ctx, db.conn, l.LocalDB)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSchemaPending, err)
	}
	for _, m := range migs {
		if !applied[m.Version] {
			return fmt.Errorf("%w: %s.schema_migrations has no %s (run itlmon migrate --cluster %s)",
				ErrSchemaPending, l.LocalDB, m.Name, l.Name)
		}
	}
	return nil
}

// MigrateCluster applies the embedded schema as the cluster layout l (see
// the top of this file): on every node of the cluster without replication,
// once ON CLUSTER with it.
func (db *DB) MigrateCluster(ctx context.Context, l ClusterLayout) error {
	migs, err := schema.Migrations()
	if err != nil {
		return err
	}
	return db.migrateCluster(ctx, l, migs)
}

func (db *DB) migrateCluster(ctx context.Context, l ClusterLayout, migs []schema.Migration) error {
	if err := l.validate(); err != nil {
		return err
	}
	db.migrating.Lock()
	defer db.migrating.Unlock()
	seed, err := db.connect(ctx, nil, "default")
	if err != nil {
		return err
	}
	defer seed.Close()
	nodes, err := ClusterNodes(ctx, seed, l.Name)
	if err != nil {
		return err
	}
	// The schema lock of the cluster: the lease table on its first node
	// (shard 1, replica 1; see the top of this file).
	first := nodes[0]
	lockConn, err := db.connect(ctx, []string{first.Addr()}, "default")
	if err != nil {
		return fmt.Errorf("store: node %s (shard %d, the schema lock): %w", first.Addr(), first.Shard, err)
	}
	defer lockConn.Close()
	for _, q := range bootDDL(l) {
		if err := lockConn.Exec(ctx, q); err != nil {
			return fmt.Errorf("store: %.60s: %w", q, err)
		}
	}
	where := l.Name + " (" + first.Addr() + ")"
	notYet := func(context.Context) (bool, error) { return false, nil }
	return db.withLease(ctx, lockConn, schema.QuoteIdent(l.LocalDB)+"."+lockTable, where, notYet, func(ctx context.Context) error {
		return db.migrateNodes(ctx, l, migs, nodes)
	})
}

// migrateNodes applies migs to nodes as the layout l says.
func (db *DB) migrateNodes(ctx context.Context, l ClusterLayout, migs []schema.Migration, nodes []ClusterNode) error {
	if l.Replication == Replicated {
		var recs []driver.Conn
		defer func() {
			for _, c := range recs {
				c.Close()
			}
		}()
		for _, n := range Shards(nodes) {
			c, err := db.connect(ctx, []string{n.Addr()}, "default")
			if err != nil {
				return fmt.Errorf("store: shard %d: %w", n.Shard, err)
			}
			recs = append(recs, c)
		}
		return db.migrateOn(ctx, l, migs, nil, recs)
	}
	for _, n := range nodes {
		c, err := db.connect(ctx, []string{n.Addr()}, "default")
		if err != nil {
			return fmt.Errorf("store: node %s (shard %d): %w", n.Addr(), n.Shard, err)
		}
		err = db.migrateOn(ctx, l, migs, []string{n.Addr()}, []driver.Conn{c})
		c.Close()
		if err != nil {
			return fmt.Errorf("store: node %s (shard %d): %w", n.Addr(), n.Shard, err)
		}
	}
	return nil
}

// bootDDL creates l's databases and the local database's migration record.
func bootDDL(l ClusterLayout) []string {
	sc := l.schema()
	on := sc.OnCluster()
	engine, lockEngine, dedup := "ReplacingMergeTree", "MergeTree", "non_replicated_deduplication_window"
	if sc.Replicated {
		args := "('" + schema.ReplicatedPath + "', '" + schema.ReplicaName + "')"
		engine, lockEngine, dedup = "ReplicatedReplacingMergeTree"+args, "ReplicatedMergeTree"+args, "replicated_deduplication_window"
	}
	return []string{
		"CREATE DATABASE IF NOT EXISTS " + schema.QuoteIdent(l.LocalDB) + on,
		"CREATE DATABASE IF NOT EXISTS " + schema.QuoteIdent(l.Database) + on,
		"CREATE TABLE IF NOT EXISTS " + schema.QuoteIdent(l.LocalDB) + ".schema_migrations" + on +
			" (version UInt32, name String, applied_at DateTime DEFAULT now()) ENGINE = " + engine + " ORDER BY version",
		lockTableDDL(schema.QuoteIdent(l.LocalDB)+"."+lockTable, on, lockEngine, dedup),
	}
}

// distributedDDL creates l.Database.table over l.LocalDB.table with key.
func distributedDDL(l ClusterLayout, table, key string) string {
	return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s%s AS %s.%s ENGINE = Distributed(%s, %s, %s, %s)",
		schema.QuoteIdent(l.Database), schema.QuoteIdent(table), l.schema().OnCluster(),
		schema.QuoteIdent(l.LocalDB), schema.QuoteIdent(table),
		quoteString(l.Name), quoteString(l.LocalDB), quoteString(table), key)
}

// migrateOn runs the migrations not yet recorded on every one of records
// through a connection to addrs (nil: db's servers) and records them on
// each record connection that lacks them.
func (db *DB) migrateOn(ctx context.Context, l ClusterLayout, migs []schema.Migration, addrs []string, records []driver.Conn) error {
	sc := l.schema()
	on := sc.OnCluster()
	boot, err := db.connect(ctx, addrs, "default")
	if err != nil {
		return err
	}
	for _, q := range bootDDL(l) {
		if err := boot.Exec(ctx, q); err != nil {
			boot.Close()
			return fmt.Errorf("store: %.60s: %w", q, err)
		}
	}
	boot.Close()
	conn, err := db.connect(ctx, addrs, l.LocalDB)
	if err != nil {
		return err
	}
	defer conn.Close()
	applied := make([]map[uint32]bool, len(records))
	for i, r := range records {
		if applied[i], err = appliedOn(ctx, r, l.LocalDB); err != nil {
			return err
		}
	}
	for _, m := range migs {
		done := true
		for _, a := range applied {
			done = done && a[m.Version]
		}
		if done {
			continue
		}
		for k, stmt := range m.Statements {
			if err := ctx.Err(); err != nil { // the lease lost: stop before the next statement
				return fmt.Errorf("store: migration %s: %w", m.Name, context.Cause(ctx))
			}
			if err := db.clusterStatement(ctx, conn, l, stmt); err != nil {
				return fmt.Errorf("store: migration %s: %w", m.Name, err)
			}
			if db.stmtHook != nil {
				if err := db.stmtHook(ctx, m, k+1); err != nil {
					return fmt.Errorf("store: migration %s: %w", m.Name, err)
				}
			}
		}
		for i, r := range records {
			if applied[i][m.Version] {
				continue
			}
			if err := r.Exec(ctx, "INSERT INTO "+schema.QuoteIdent(l.LocalDB)+".schema_migrations (version, name) VALUES (?, ?)",
				m.Version, m.Name); err != nil {
				return fmt.Errorf("store: record migration %s: %w", m.Name, err)
			}
		}
		db.log.Info().Str("migration", m.Name).Str("cluster", l.Name).Strs("addrs", addrs).Msg("schema migration applied")
	}
	return db.applyTTL(ctx, conn, on)
}

// clusterStatement runs one statement of a file in its cluster form on
// conn (whose default database is l.LocalDB), then what keeps the
// Distributed table in step: its creation after a CREATE TABLE, the column
// changes of an ALTER, the drop of a DROP TABLE. A statement done already is
// skipped, as Migrate does (execUnlessDone).
func (db *DB) clusterStatement(ctx context.Context, conn driver.Conn, l ClusterLayout, stmt string) error {
	sc := l.schema()
	s, err := schema.Parse(stmt)
	if err != nil {
		return err
	}
	local, err := sc.Local(s)
	if err != nil {
		return err
	}
	if err := execUnlessDone(ctx, conn, l.LocalDB, stmt, local, !sc.Replicated); err != nil {
		return err
	}
	switch s.Kind {
	case schema.CreateTable:
		return createDistributed(ctx, conn, l, s.Object)
	case schema.AlterTable:
		q, ok := sc.DistributedAlter(s, l.Database)
		if !ok {
			return nil
		}
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = ? AND engine = 'Distributed'",
			l.Database, s.Object).Scan(&n); err != nil {
			return fmt.Errorf("read system.tables: %w", err)
		}
		if n == 0 {
			return nil // a view, or a table made outside the files
		}
		return execUnlessDone(ctx, conn, l.Database, stmt, q, false)
	case schema.DropTable:
		q, _ := sc.DistributedDrop(s, l.Database)
		if err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%.60s: %w", q, err)
		}
	}
	return nil
}

// execUnlessDone runs q, the form of the file's statement stmt for
// database, unless stmt is done there already: a column rename whose new
// name the table has (schema.RenameColumn), or, with creates, a CREATE ...
// IF NOT EXISTS of an object that exists (schema.CreateIfMissing). Of a
// rename in place (schema.RenameInPlace) cut between its two renames, it
// runs the second. An ON
// CLUSTER statement goes to every server: that it is done on the one
// answering does not say it is on all (a shard added since), so its
// CREATE runs again (IF NOT EXISTS).
func execUnlessDone(ctx context.Context, conn driver.Conn, database, stmt, q string, creates bool) error {
	if table, _, to, ok := schema.RenameColumn(stmt); ok {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = ?",
			database, table, to).Scan(&n); err != nil {
			return fmt.Errorf("read columns of %s.%s: %w", database, table, err)
		}
		if n > 0 {
			return nil
		}
	}
	if view, temp, ok := schema.RenameInPlace(stmt); ok {
		// Cut between its two renames, it left the view named temp: the
		// second rename completes it.
		var views, temps uint64
		if err := conn.QueryRow(ctx, "SELECT countIf(name = ?), countIf(name = ?) FROM system.tables WHERE database = ?",
			view, temp, database).Scan(&views, &temps); err != nil {
			return fmt.Errorf("read tables of %s: %w", database, err)
		}
		if views == 0 && temps > 0 {
			if rest, ok := schema.RenameInPlaceRest(q); ok {
				q = rest
			}
		}
	}
	if object, ok := schema.CreateIfMissing(stmt); ok && creates {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = ?",
			database, object).Scan(&n); err != nil {
			return fmt.Errorf("read tables of %s: %w", database, err)
		}
		if n > 0 {
			return nil
		}
	}
	if err := conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("%.80s: %w", strings.TrimSpace(q), err)
	}
	return nil
}

// createDistributed creates l.Database.table, a Distributed table over
// l.LocalDB.table on every shard, with its columns and sharding key.
func createDistributed(ctx context.Context, conn driver.Conn, l ClusterLayout, table string) error {
	var sortingKey string
	var columns []string
	if err := conn.QueryRow(ctx, `SELECT sorting_key,
		(SELECT groupArray(name) FROM system.columns WHERE database = ? AND table = ?)
		FROM system.tables WHERE database = ? AND name = ?`, l.LocalDB, table, l.LocalDB, table).Scan(&sortingKey, &columns); err != nil {
		return fmt.Errorf("read %s.%s: %w", l.LocalDB, table, err)
	}
	if err := conn.Exec(ctx, distributedDDL(l, table, ShardingKey(columns, sortingKey))); err != nil {
		return fmt.Errorf("create distributed %s: %w", table, err)
	}
	// A column whose DEFAULT is the time of the insert (itl_inbox's
	// ingested_at, the promoter's window) must be computed by the shard
	// that stores the row, not by the node that forwards it: a Distributed
	// table fills a DEFAULT itself, so there it is MATERIALIZED (never sent,
	// computed by the local table's DEFAULT on the shard).
	rows, err := conn.Query(ctx, `SELECT name, default_expression FROM system.columns
		WHERE database = ? AND table = ? AND default_kind = 'DEFAULT' AND match(default_expression, '^now(64)?\\(')`, l.LocalDB, table)
	if err != nil {
		return fmt.Errorf("read columns of %s.%s: %w", l.LocalDB, table, err)
	}
	var alters []string
	for rows.Next() {
		var name, expr string
		if err := rows.Scan(&name, &expr); err != nil {
			rows.Close()
			return fmt.Errorf("read columns of %s.%s: %w", l.LocalDB, table, err)
		}
		alters = append(alters, fmt.Sprintf("ALTER TABLE %s.%s%s MODIFY COLUMN %s MATERIALIZED %s",
			schema.QuoteIdent(l.Database), schema.QuoteIdent(table), l.schema().OnCluster(), schema.QuoteIdent(name), expr))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read columns of %s.%s: %w", l.LocalDB, table, err)
	}
	for _, q := range alters {
		if err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%.80s: %w", q, err)
		}
	}
	return nil
}

// shardColumns are the columns a table is sharded by, in order of
// preference: a stream's client and origin records carry the same id.
var shardColumns = []string{"stream_id", "origin_id"}

// ShardingKey is the Distributed sharding key of a table with columns and
// sorting key (system.tables.sorting_key): cityHash64 of the first of
// shardColumns in the sorting key (rows a ReplacingMergeTree collapses must
// meet on one shard), else of the first the table has, else rand().
func ShardingKey(columns []string, sortingKey string) string {
	inKey := map[string]bool{}
	for _, f := range strings.FieldsFunc(sortingKey, func(r rune) bool {
		return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		inKey[f] = true
	}
	// A table keyed by neither that has both is one holding a stream's
	// records of either kind (itl_inbox): the join key, the origin's id when
	// the record has one, brings a client record and its origin timeline
	// to one shard.
	if slices.Contains(columns, "stream_id") && slices.Contains(columns, "origin_id") && !inKey["stream_id"] && !inKey["origin_id"] {
		return "cityHash64(if(origin_id != '', origin_id, stream_id))"
	}
	for _, pass := range []bool{true, false} {
		for _, c := range shardColumns {
			if slices.Contains(columns, c) && (inKey[c] || !pass) {
				return "cityHash64(" + c + ")"
			}
		}
	}
	return "rand()"
}

// appliedOn reads the versions recorded in database.schema_migrations.
func appliedOn(ctx context.Context, conn driver.Conn, database string) (map[uint32]bool, error) {
	rows, err := conn.Query(ctx, "SELECT version FROM "+schema.QuoteIdent(database)+".schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("store: read %s.schema_migrations: %w", database, err)
	}
	defer rows.Close()
	applied := map[uint32]bool{}
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("store: read %s.schema_migrations: %w", database, err)
		}
		applied[v] = true
	}
	return applied, rows.Err()
}

// quoteString is a ClickHouse string literal.
func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
