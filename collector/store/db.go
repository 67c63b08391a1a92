package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/internal/halfclose"
	"github.com/itlmon/itlmon/schema"
)

// DefaultStreamsTTL is how long raw rows (itl_streams, itl_timelines) are kept.
const DefaultStreamsTTL = 90 * 24 * time.Hour

// Options say which ClickHouse to use. Either DSN, or Addr (with Database and
// optionally Dial) must be set.
type Options struct {
	DSN            string // clickhouse://user:pass@host:9000/db?dial_timeout=2s
	Addr           string // host:port of the native protocol (embedded engine)
	Database       string // with Addr; default "default"
	Dial           func(ctx context.Context, addr string) (net.Conn, error)
	CreateDatabase bool          // CREATE DATABASE IF NOT EXISTS at Open (embedded engine, tests)
	StreamsTTL     time.Duration // raw rows' TTL applied by Migrate; default 90 days
	// Lazy makes Open skip its ping: the pool dials on first use, so a
	// caller can start while ClickHouse is down (see MigrateInBackground).
	Lazy bool
	// Cluster names the ClickHouse cluster of a cluster layout (itlmon
	// migrate --cluster): inbox inserts go through its Distributed table
	// and wait for the shards. Empty: one server.
	Cluster string
	Logger  zerolog.Logger
}

// DB is a ClickHouse connection pool with itlmon's schema. Safe for
// concurrent use.
type DB struct {
	conn     driver.Conn
	opts     Options
	database string // the connection's default database
	cluster  string
	log      zerolog.Logger

	// pending is set while MigrateInBackground has not applied the schema
	// yet; cause says why (guarded by mu).
	pending  atomic.Bool
	applied  chan struct{} // closed once MigrateInBackground applied the schema
	attempts atomic.Int64  // of MigrateInBackground, for tests
	mu       sync.Mutex
	cause    error

	migrating   sync.Mutex  // one Migrate or MigrateCluster at a time: one holder of the schema lock
	holder      string      // this DB in the schema lock
	leaseTiming leaseTiming // of the schema lock
	// stmtHook, set only by tests before migrating, is called after
	// statement k (from 1) of migration m has run; an error cuts the
	// migration there.
	stmtHook func(ctx context.Context, m schema.Migration, k int) error

	// inboxCPU is the CPU ClickHouse reported for the inbox inserts, in
	// microseconds (InboxServerCPU).
	inboxCPU atomic.Int64
}

// ErrSchemaPending is returned by SchemaReady while MigrateInBackground has
// not applied the schema yet.
var ErrSchemaPending = errors.New("store: clickhouse schema not applied yet")

// Open connects and pings (unless opts.Lazy). It does not migrate.
func Open(ctx context.Context, opts Options) (*DB, error) {
	if opts.StreamsTTL <= 0 {
		opts.StreamsTTL = DefaultStreamsTTL
	}
	if opts.StreamsTTL < 24*time.Hour {
		return nil, errors.New("store: streams TTL must be at least one day")
	}
	chOpts, err := clickhouseOptions(opts)
	if err != nil {
		return nil, err
	}
	if opts.CreateDatabase && chOpts.Auth.Database != "default" {
		if err := createDatabase(ctx, *chOpts); err != nil {
			return nil, err
		}
	}
	conn, err := clickhouse.Open(chOpts)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	db := &DB{conn: conn, opts: opts, database: chOpts.Auth.Database, cluster: opts.Cluster,
		log:    opts.Logger.With().Str("component", "store").Logger(),
		holder: newHolder(), leaseTiming: defaultLeaseTiming, applied: make(chan struct{})}
	if opts.Lazy {
		return db, nil
	}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("store: ping: %w", err)
	}
	return db, nil
}

func clickhouseOptions(opts Options) (*clickhouse.Options, error) {
	var o *clickhouse.Options
	switch {
	case opts.DSN != "":
		var err error
		if o, err = clickhouse.ParseDSN(opts.DSN); err != nil {
			return nil, fmt.Errorf("store: clickhouse DSN: %w", err)
		}
	case opts.Addr != "":
		o = &clickhouse.Options{Addr: []string{opts.Addr}}
		o.Auth.Database = opts.Database
	default:
		return nil, errors.New("store: no ClickHouse DSN or address")
	}
	if o.Auth.Database == "" {
		o.Auth.Database = "default"
	}
	if o.DialTimeout == 0 || o.DialTimeout > 5*time.Second {
		o.DialTimeout = 2 * time.Second // fail fast to the spool
	}
	o.DialContext = opts.Dial
	if o.DialContext == nil {
		o.DialContext = halfCloseDial(o)
	}
	// A ClickHouse elsewhere gets LZ4 blocks, unless its DSN chose
	// (compress=lz4, zstd, ..., or false for none). The embedded engine
	// gets them uncompressed: over loopback, compressing would cost CPU on
	// both ends (the collector's and the engine's, on the same machine) to
	// save no network.
	if opts.DSN != "" && !dsnSets(opts.DSN, "compress") {
		o.Compression = &clickhouse.Compression{Method: clickhouse.CompressionLZ4}
	}
	return o, nil
}

// halfCloseDial is o's dial with connections that end without a reset
// (internal/halfclose: a reset mid-statement aborts the embedded engine,
// which a DSN may name too), or nil, clickhouse-go's own dial, for TLS,
// which clickhouse-go applies only when it dials itself.
func halfCloseDial(o *clickhouse.Options) func(context.Context, string) (net.Conn, error) {
	if o.TLS != nil {
		return nil
	}
	d := &net.Dialer{Timeout: o.DialTimeout}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return halfclose.Dial(ctx, d, "tcp", addr)
	}
}

// dsnSets reports whether dsn has the query parameter name.
func dsnSets(dsn, name string) bool {
	u, err := url.Parse(dsn)
	return err == nil && u.Query().Has(name)
}

// createDatabase creates o's database through a connection to "default".
func createDatabase(ctx context.Context, o clickhouse.Options) error {
	db := o.Auth.Database
	o.Auth.Database = "default"
	conn, err := clickhouse.Open(&o)
	if err != nil {
		return fmt.Errorf("store: open: %w", err)
	}
	defer conn.Close()
	if err := conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+quoteIdent(db)); err != nil {
		return fmt.Errorf("store: create database %s: %w", db, err)
	}
	return nil
}

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "\\`") + "`" }

// Conn is the underlying clickhouse-go connection.
func (db *DB) Conn() driver.Conn { return db.conn }

// Close closes the connection pool.
func (db *DB) Close() error { return db.conn.Close() }

// Migrate applies the embedded schema/*.sql files not yet recorded in
// schema_migrations, in order, then sets the raw tables' TTL. It holds the
// schema lock (lease.go) while it applies them, so that of several
// collectors starting at once one applies and the others wait; with every
// migration recorded it takes no lock. Every statement is idempotent (a
// column rename is skipped once its new name exists, see
// schema.RenameColumn), so a migration interrupted half-way is simply
// applied again, and recorded once.
func (db *DB) Migrate(ctx context.Context) error {
	return db.migrateUpTo(ctx, ^uint32(0))
}

// bootstrapDDL creates the tables Migrate itself uses, in the current
// database.
func bootstrapDDL() []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS schema_migrations
		(version UInt32, name String, applied_at DateTime DEFAULT now())
		ENGINE = ReplacingMergeTree ORDER BY version`,
		lockTableDDL(lockTable, "", "MergeTree", "non_replicated_deduplication_window"),
	}
}

// migrateUpTo is Migrate applying only the migrations up to version last;
// the TTL is set only when last takes in every migration.
func (db *DB) migrateUpTo(ctx context.Context, last uint32) error {
	migs, err := schema.Migrations()
	if err != nil {
		return err
	}
	var upTo []schema.Migration
	for _, m := range migs {
		if m.Version <= last {
			upTo = append(upTo, m)
		}
	}
	if err := db.migrateWith(ctx, upTo); err != nil || last != ^uint32(0) {
		return err
	}
	return db.applyTTL(ctx, db.conn, "")
}

// migrateWith applies the migrations of migs not yet recorded, in order,
// under the schema lock.
func (db *DB) migrateWith(ctx context.Context, migs []schema.Migration) error {
	db.migrating.Lock()
	defer db.migrating.Unlock()
	for _, q := range bootstrapDDL() {
		if err := db.conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("store: bootstrap: %.60s: %w", strings.TrimSpace(q), err)
		}
	}
	done := func(ctx context.Context) (bool, error) {
		applied, err := db.appliedVersions(ctx)
		if err != nil {
			return false, err
		}
		for _, m := range migs {
			if !applied[m.Version] {
				return false, nil
			}
		}
		return true, nil
	}
	return db.withLease(ctx, db.conn, lockTable, db.database, done, func(ctx context.Context) error {
		applied, err := db.appliedVersions(ctx) // under the lock
		if err != nil {
			return err
		}
		for _, m := range migs {
			if applied[m.Version] {
				continue
			}
			if err := db.applyMigration(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
}

// applyMigration runs m's statements and records m.
func (db *DB) applyMigration(ctx context.Context, m schema.Migration) error {
	for k, stmt := range m.Statements {
		if err := ctx.Err(); err != nil { // the lease lost: stop before the next statement
			return fmt.Errorf("store: migration %s: %w", m.Name, context.Cause(ctx))
		}
		if err := db.execStatement(ctx, stmt); err != nil {
			return fmt.Errorf("store: migration %s: %w", m.Name, err)
		}
		if db.stmtHook != nil {
			if err := db.stmtHook(ctx, m, k+1); err != nil {
				return fmt.Errorf("store: migration %s: %w", m.Name, err)
			}
		}
	}
	if err := db.conn.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES (?, ?)", m.Version, m.Name); err != nil {
		return fmt.Errorf("store: record migration %s: %w", m.Name, err)
	}
	db.log.Info().Str("migration", m.Name).Msg("schema migration applied")
	return nil
}

// execStatement runs one statement of a file, unless it is done already
// (execUnlessDone).
func (db *DB) execStatement(ctx context.Context, stmt string) error {
	return execUnlessDone(ctx, db.conn, db.database, stmt, stmt, true)
}

func (db *DB) appliedVersions(ctx context.Context) (map[uint32]bool, error) {
	rows, err := db.conn.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("store: read schema_migrations: %w", err)
	}
	defer rows.Close()
	applied := map[uint32]bool{}
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("store: read schema_migrations: %w", err)
		}
		applied[v] = true
	}
	return applied, rows.Err()
}

// applyTTL sets the raw tables' TTL in conn's current database when it
// differs from the configured one, with onCluster (" ON CLUSTER name" or "")
// after the table's name. materialize_ttl_after_modify = 0: old parts expire
// as they merge, nothing is rewritten at start-up.
func (db *DB) applyTTL(ctx context.Context, conn driver.Conn, onCluster string) error {
	days := int(db.opts.StreamsTTL / (24 * time.Hour))
	want := fmt.Sprintf("toDateTime(received_at) + toIntervalDay(%d)", days)
	for _, table := range []string{"itl_streams", "itl_streams_sample", "itl_timelines"} {
		var engine string
		err := conn.QueryRow(ctx,
			"SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = ?", table).Scan(&engine)
		if err != nil {
			return fmt.Errorf("store: read %s TTL: %w", table, err)
		}
		if strings.Contains(engine, "TTL "+want) {
			continue
		}
		stmt := fmt.Sprintf("ALTER TABLE %s%s MODIFY TTL toDateTime(received_at) + INTERVAL %d DAY", table, onCluster, days)
		if err := conn.Exec(clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
			"materialize_ttl_after_modify": 0,
		})), stmt); err != nil {
			return fmt.Errorf("store: set %s TTL: %w", table, err)
		}
		db.log.Info().Str("table", table).Int("days", days).Msg("TTL set")
	}
	return nil
}

// SchemaReady returns nil unless MigrateInBackground is still waiting to
// apply the schema; then an error wrapping ErrSchemaPending with the last
// cause (ClickHouse unreachable, or the migration's error).
func (db *DB) SchemaReady() error {
	if !db.pending.Load() {
		return nil
	}
	db.mu.Lock()
	cause := db.cause
	db.mu.Unlock()
	if cause == nil {
		return ErrSchemaPending
	}
	return fmt.Errorf("%w: %w", ErrSchemaPending, cause)
}

// WaitSchema returns nil once SchemaReady does (at once unless
// MigrateInBackground is still applying the schema), or ctx's error when it
// ends first. Whatever reads or writes the tables itself, not through a
// Writer (the promoter), starts after it.
func (db *DB) WaitSchema(ctx context.Context) error {
	if !db.pending.Load() {
		return nil
	}
	select {
	case <-db.applied:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// MigrateInBackground applies the schema as Migrate does, in a goroutine that
// retries with a jittered backoff capped at maxRetry until it succeeds or ctx
// ends; it logs once per change of state (unreachable, a migration error with
// its text, applied), not once per attempt. Until it succeeds SchemaReady
// returns an error, and a Writer on db spools every batch instead of
// inserting. The returned channel is closed when the goroutine ends.
func (db *DB) MigrateInBackground(ctx context.Context) <-chan struct{} {
	db.pending.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var state string // last logged state
		retry := minRetry
		for {
			err := db.migrateOnce(ctx)
			db.attempts.Add(1)
			if err == nil {
				db.pending.Store(false)
				close(db.applied)
				db.log.Info().Msg("clickhouse answers: schema applied, inserts start")
				return
			}
			if ctx.Err() != nil {
				return
			}
			db.mu.Lock()
			db.cause = err
			db.mu.Unlock()
			s := err.Error()
			if errors.Is(err, errUnreachable) {
				s = "unreachable" // its text may vary between attempts
			}
			if s != state {
				state = s
				switch {
				case errors.Is(err, errUnreachable):
					db.log.Warn().Err(err).Msg("clickhouse unreachable: spooling until it answers, then migrating")
				case errors.Is(err, ErrSchemaPending):
					// A cluster's collector waits for itlmon migrate --cluster.
					db.log.Warn().Err(err).Msg("waiting for the cluster schema; spooling meanwhile")
				default:
					db.log.Error().Err(err).Msg("schema migration failed; retrying with backoff, spooling meanwhile")
				}
			}
			var at time.Time
			at, retry = backoff(retry)
			t := time.NewTimer(time.Until(at))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	return done
}

// errUnreachable marks a failed ping in migrateOnce's error.
var errUnreachable = errors.New("clickhouse unreachable")

// migrateOnce pings, then migrates. A ping ClickHouse answers with an error
// (unknown database, bad credentials) is returned as it is; a ping that gets
// no answer, and a migration that fails because ClickHouse stopped answering
// meanwhile, are reported as unreachable.
func (db *DB) migrateOnce(ctx context.Context) error {
	if err := db.ping(ctx); err != nil {
		return err
	}
	if db.cluster != "" {
		// Collectors of a cluster run no DDL: itlmon migrate --cluster does.
		return db.ClusterSchemaReady(ctx, db.ClusterLayout())
	}
	if err := db.Migrate(ctx); err != nil {
		if perr := db.ping(ctx); perr != nil && errors.Is(perr, errUnreachable) {
			return perr
		}
		return err
	}
	return nil
}

// ping pings with a timeout; an error other than ClickHouse's own answer is
// wrapped in errUnreachable.
func (db *DB) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := db.conn.Ping(ctx)
	var ex *clickhouse.Exception
	if err == nil || errors.As(err, &ex) {
		return err
	}
	return fmt.Errorf("%w: %w", errUnreachable, err)
}
