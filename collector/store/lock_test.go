package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/schema"
)

var dbSeq atomic.Int64

// freshName is a database name no other test uses.
func freshName(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano()%1e9, dbSeq.Add(1))
}

// logBuf keeps a DB's log lines for the test to read, safe for concurrent
// use.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// openLogged opens database name on e, its log (debug level) kept in the
// returned buffer and written to the test's log.
func openLogged(t *testing.T, e *chdb.Engine, name string) (*store.DB, *logBuf) {
	t.Helper()
	buf := &logBuf{}
	log := zerolog.New(io.MultiWriter(buf, zerolog.NewTestWriter(t))).Level(zerolog.DebugLevel).With().Str("db", name).Logger()
	chtest.DropAtEnd(t, name)
	db, err := store.Open(context.Background(), store.Options{Addr: e.NativeAddr(), Dial: e.DialContext,
		CreateDatabase: true, Database: name, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, buf
}

// openQuiet is openLogged logging warnings and errors only.
func openQuiet(t *testing.T, e *chdb.Engine, name string) (*store.DB, *logBuf) {
	t.Helper()
	buf := &logBuf{}
	log := zerolog.New(io.MultiWriter(buf, zerolog.NewTestWriter(t))).Level(zerolog.WarnLevel).With().Str("db", name).Logger()
	chtest.DropAtEnd(t, name)
	db, err := store.Open(context.Background(), store.Options{Addr: e.NativeAddr(), Dial: e.DialContext,
		CreateDatabase: true, Database: name, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, buf
}

// schemaOf describes the tables and views of db's database, its name
// replaced by DB: their definitions, column order, types, defaults and
// comments, what a migration makes (not the lock's rows or the records).
func schemaOf(t *testing.T, db *store.DB) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT concat(name, ' ', engine, ' ', replaceAll(create_table_query, currentDatabase(), 'DB'), ' sorting ', sorting_key)
			FROM system.tables WHERE database = currentDatabase() ORDER BY name`,
		`SELECT toString((table, position, name, type, default_kind, default_expression, comment))
			FROM system.columns WHERE database = currentDatabase() ORDER BY table, position`,
	} {
		rows, err := db.Conn().Query(context.Background(), q)
		if err != nil {
			t.Fatalf("read schema: %v", err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatalf("read schema: %v", err)
			}
			b.WriteString(line + "\n")
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatalf("read schema: %v", err)
		}
	}
	return b.String()
}

// wantOneRowPerVersion fails t unless db's schema_migrations holds exactly
// one row (without FINAL) for every embedded migration.
func wantOneRowPerVersion(t *testing.T, db *store.DB) {
	t.Helper()
	migs, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := db.Conn().QueryRow(context.Background(), `SELECT toString(groupArray((version, n))) FROM
		(SELECT version, count() AS n FROM schema_migrations GROUP BY version ORDER BY version)`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range migs {
		want = append(want, fmt.Sprintf("(%d,1)", m.Version))
	}
	if w := "[" + strings.Join(want, ",") + "]"; got != w {
		t.Errorf("schema_migrations (version, rows) = %s, want %s", got, w)
	}
}

var (
	refOnce   sync.Once
	refSchema string
)

// referenceSchema is the schema of a fresh database migrated in one go.
func referenceSchema(t *testing.T, e *chdb.Engine) string {
	t.Helper()
	refOnce.Do(func() {
		db, _ := openLogged(t, e, freshName("ref"))
		if err := db.Migrate(context.Background()); err != nil {
			t.Fatalf("migrate: %v", err)
		}
		refSchema = schemaOf(t, db)
	})
	if refSchema == "" {
		t.Fatal("no reference schema")
	}
	return refSchema
}

// lines returns the lines of log holding every one of words.
func lines(log string, words ...string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		ok := l != ""
		for _, w := range words {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// TestMigrateConcurrent: three collectors' stores migrating one fresh
// database at once, in several rounds: one applies every migration (one
// "applied" line each, one schema_migrations row each), the other two log
// that they wait and for whom, then see the schema; nobody logs an error,
// and the schema is the one a lone migrator makes.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel() // a database of its own; its assertions time nothing
	e := chtest.Engine(t)
	want := referenceSchema(t, e)
	migs, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	const collectors, rounds = 3, 2 // TestServeFleetOnFreshDatabase (collector/cmd/itlmon) runs three more rounds, as itlmon serve
	for round := range rounds {
		name := freshName("race")
		dbs := make([]*store.DB, collectors)
		logs := make([]*logBuf, collectors)
		for i := range dbs {
			dbs[i], logs[i] = openLogged(t, e, name)
			dbs[i].SetLeaseTiming(30*time.Second, 10*time.Second, 50*time.Millisecond)
		}
		// The holder's first statement waits until the two others have
		// said whom they wait for: they must see the lock held.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		for i, db := range dbs {
			db.SetMigrateHook(func(ctx context.Context, m schema.Migration, k int) error {
				if m.Version != 1 || k != 1 {
					return nil
				}
				for {
					waiting := 0
					for j, l := range logs {
						if j != i && len(lines(l.String(), "waiting for it", db.LeaseHolder())) > 0 {
							waiting++
						}
					}
					if waiting == collectors-1 {
						return nil
					}
					select {
					case <-ctx.Done():
						return fmt.Errorf("the others never waited for %s", db.LeaseHolder())
					case <-time.After(20 * time.Millisecond): // polling the others' logs
					}
				}
			})
		}
		errs := make([]error, collectors)
		var start, wg sync.WaitGroup
		start.Add(1)
		for i, db := range dbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start.Wait()
				errs[i] = db.Migrate(ctx)
			}()
		}
		start.Done()
		wg.Wait()
		cancel()
		applied := 0
		for i := range dbs {
			if errs[i] != nil {
				t.Errorf("round %d: collector %d: %v", round, i, errs[i])
			}
			log := logs[i].String()
			if l := lines(log, `"level":"error"`); len(l) > 0 {
				t.Errorf("round %d: collector %d logged errors: %q", round, i, l)
			}
			applied += len(lines(log, "schema migration applied"))
		}
		if applied != len(migs) {
			t.Errorf("round %d: %d 'schema migration applied' lines, want %d (one per migration)", round, applied, len(migs))
		}
		for i, db := range dbs {
			if got := schemaOf(t, db); got != want {
				t.Errorf("round %d: collector %d sees a schema unlike a lone migrator's:\n%s\nwant\n%s", round, i, got, want)
			}
		}
		wantOneRowPerVersion(t, dbs[0])
	}
}

var errCut = errors.New("cut here")

// TestMigrateCutAtEveryStatement: every migration is cut after each of its
// statements in turn (each next attempt runs the statements before the cut
// again, on the state they made, and one more), then completes; the result
// is the schema of an uncut run, with one schema_migrations row per
// version.
func TestMigrateCutAtEveryStatement(t *testing.T) {
	t.Parallel() // a database of its own, the package's longest test: beside the other long ones
	e := chtest.Engine(t)
	want := referenceSchema(t, e)
	migs, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	db, _ := openQuiet(t, e, freshName("cut"))
	ctx := context.Background()
	cuts := 0
	for _, m := range migs {
		for k := 1; k <= len(m.Statements); k++ {
			db.SetMigrateHook(func(_ context.Context, mm schema.Migration, kk int) error {
				if mm.Version == m.Version && kk == k {
					return errCut
				}
				return nil
			})
			if err := db.Migrate(ctx); !errors.Is(err, errCut) {
				t.Fatalf("%s cut after statement %d: Migrate = %v, want the cut", m.Name, k, err)
			}
			cuts++
		}
	}
	db.SetMigrateHook(nil)
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate after the cuts: %v", err)
	}
	t.Logf("%d cuts", cuts)
	if got := schemaOf(t, db); got != want {
		t.Errorf("schema after the cuts:\n%s\nwant (uncut)\n%s", got, want)
	}
	wantOneRowPerVersion(t, db)
}

// TestLeases runs the tests of the schema lock's lease, whose assertions
// are about time (leases expiring, renewed, given up), alone in the package:
// before its parallel tests, as one serial test would, but two at a time
// among themselves (-parallel), each on a database of its own. They mostly
// wait out leases, so side by side they take about half the time one after
// another does, without the package's heavy tests beside them.
func TestLeases(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"TakenOverAfterExpiry", leaseTakenOverAfterExpiry},
		{"Renewed", leaseRenewed},
		{"WaiterDoesNotClaimACompletedSchema", waiterDoesNotClaimACompletedSchema},
		{"ReleasedByHand", leaseReleasedByHand},
		{"ResumedByItsHolder", leaseResumedByItsHolder},
		{"GivenUpWhenUnrenewable", leaseGivenUpWhenUnrenewable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.test(t)
		})
	}
}

// leaseTakenOverAfterExpiry: a migrator that died holding the lock (its
// lease never renewed) holds up the next one only until the lease expires;
// the next one logs whom it waits for, then takes the lock and applies the
// schema.
func leaseTakenOverAfterExpiry(t *testing.T) {
	e := chtest.Engine(t)
	db, log := openLogged(t, e, freshName("expiry"))
	db.SetLeaseTiming(30*time.Second, 10*time.Second, 50*time.Millisecond)
	ctx := context.Background()
	if err := db.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	const dead = "gone-host pid 1 dead00"
	if err := db.Conn().Exec(ctx, "INSERT INTO schema_lock (epoch, holder, seq, ttl_ms) VALUES (1, ?, 0, 1500)", dead); err != nil {
		t.Fatal(err)
	}
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if l := lines(log.String(), "waiting for it", dead); len(l) != 1 {
		t.Errorf("log lines naming the dead holder: %q, want one", l)
	}
	var holder string
	var epoch uint64
	if err := db.Conn().QueryRow(ctx, "SELECT argMin(holder, (at, seq)), epoch FROM schema_lock GROUP BY epoch ORDER BY epoch DESC LIMIT 1").Scan(&holder, &epoch); err != nil {
		t.Fatal(err)
	}
	if epoch != 2 || holder != db.LeaseHolder() {
		t.Errorf("latest lease %d held by %q, want 2 held by %q", epoch, holder, db.LeaseHolder())
	}
	wantOneRowPerVersion(t, db)
}

// leaseRenewed: a migration that runs longer than the lease keeps it
// (renewed), so a second migrator waits instead of taking it over, and
// then finds the schema applied without taking the lock at all.
func leaseRenewed(t *testing.T) {
	e := chtest.Engine(t)
	name := freshName("renew")
	a, _ := openLogged(t, e, name)
	b, blog := openLogged(t, e, name)
	const ttl = 3 * time.Second
	a.SetLeaseTiming(ttl, 300*time.Millisecond, 50*time.Millisecond)
	b.SetLeaseTiming(ttl, 300*time.Millisecond, 50*time.Millisecond)
	testCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctx := testCtx
	bErr := make(chan error, 1)
	var renewedFor time.Duration
	a.SetMigrateHook(func(ctx context.Context, m schema.Migration, k int) error {
		if m.Version != 1 || k != 1 {
			return nil
		}
		go func() { bErr <- b.Migrate(testCtx) }()
		// Hold the first statement until the lease has been renewed for
		// longer than it lasts (the server's clock, from its rows).
		for {
			var ms int64
			if err := a.Conn().QueryRow(ctx, "SELECT toUnixTimestamp64Milli(max(at)) - toUnixTimestamp64Milli(min(at)) FROM schema_lock WHERE epoch = 1").Scan(&ms); err != nil {
				return err
			}
			if renewedFor = time.Duration(ms) * time.Millisecond; renewedFor > ttl+time.Second {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond): // polling the lock's rows
			}
		}
	})
	if err := a.Migrate(ctx); err != nil {
		t.Fatalf("a: %v", err)
	}
	if err := <-bErr; err != nil {
		t.Fatalf("b: %v", err)
	}
	t.Logf("lease renewed over %v", renewedFor)
	if l := lines(blog.String(), "waiting for it", a.LeaseHolder()); len(l) != 1 {
		t.Errorf("b's log lines naming a: %q, want one", l)
	}
	var epochs, holders uint64
	if err := a.Conn().QueryRow(ctx, "SELECT uniqExact(epoch), uniqExact(holder) FROM schema_lock").Scan(&epochs, &holders); err != nil {
		t.Fatal(err)
	}
	if epochs != 1 || holders != 1 {
		t.Errorf("schema_lock: %d leases by %d holders, want a's one", epochs, holders)
	}
	wantOneRowPerVersion(t, a)
}

// waiterDoesNotClaimACompletedSchema: a holder records its last
// migration and then releases the lease; a waiter whose last look found
// work left, and that next finds the lease free, asks again before it
// claims, and stops without a lease of its own (CI once saw the waiter take
// a lease for nothing when the holder finished between its two reads).
func waiterDoesNotClaimACompletedSchema(t *testing.T) {
	e := chtest.Engine(t)
	name := freshName("waiter")
	a, _ := openLogged(t, e, name)
	b, blog := openLogged(t, e, name)
	a.SetLeaseTiming(30*time.Second, 10*time.Second, 50*time.Millisecond)
	b.SetLeaseTiming(30*time.Second, 10*time.Second, 50*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var completed atomic.Bool // a's "last migration", recorded before it releases
	finish := make(chan struct{})
	aErr := make(chan error, 1)
	held := make(chan struct{})
	go func() {
		aErr <- a.WithSchemaLock(ctx, func(context.Context) (bool, error) { return completed.Load(), nil },
			func(ctx context.Context) error {
				close(held)
				select {
				case <-finish:
				case <-ctx.Done():
					return ctx.Err()
				}
				completed.Store(true)
				return nil
			})
	}()
	select {
	case <-held:
	case err := <-aErr:
		t.Fatalf("a: %v", err)
	}
	// b's checks: the first two find work left, and the second lets a
	// complete and release before it answers, so that b's next look at the
	// lease finds it free.
	var asked int
	bDone := func(context.Context) (bool, error) {
		asked++
		if asked == 2 {
			close(finish)
			if err := <-aErr; err != nil {
				return false, fmt.Errorf("a: %w", err)
			}
			return false, nil
		}
		return completed.Load(), nil
	}
	if err := b.WithSchemaLock(ctx, bDone, func(context.Context) error {
		return errors.New("b migrated a schema a had completed")
	}); err != nil {
		t.Fatalf("b: %v", err)
	}
	if asked < 3 {
		t.Fatalf("b asked %d times whether work was left, want 3 or more", asked)
	}
	var epochs, holders uint64
	if err := a.Conn().QueryRow(ctx, "SELECT uniqExact(epoch), uniqExact(holder) FROM schema_lock").Scan(&epochs, &holders); err != nil {
		t.Fatal(err)
	}
	if epochs != 1 || holders != 1 {
		t.Errorf("schema_lock: %d leases by %d holders, want a's one", epochs, holders)
	}
	if l := lines(blog.String(), "done waiting"); len(l) != 1 {
		t.Errorf("b's log: %q, want one line saying it is done waiting", l)
	}
}

// leaseReleasedByHand: the release an operator inserts (docs/operating.md)
// ends a lease: its holder stops before its next statement with
// ErrLeaseLost, and the next migrator takes the lock at once and completes
// the schema.
func leaseReleasedByHand(t *testing.T) {
	e := chtest.Engine(t)
	name := freshName("release")
	a, _ := openLogged(t, e, name)
	a.SetLeaseTiming(30*time.Second, 100*time.Millisecond, 50*time.Millisecond)
	a.SetMigrateHook(func(ctx context.Context, m schema.Migration, k int) error {
		if m.Version != 5 || k != 3 {
			return nil
		}
		if err := a.Conn().Exec(ctx, releaseByHand); err != nil {
			return err
		}
		<-ctx.Done() // the holder notices at its next renewal
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := a.Migrate(ctx); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("a after the release: %v, want ErrLeaseLost", err)
	}
	b, _ := openLogged(t, e, name)
	b.SetLeaseTiming(30*time.Second, 10*time.Second, 50*time.Millisecond)
	if err := b.Migrate(ctx); err != nil {
		t.Fatalf("b: %v", err)
	}
	if got, want := schemaOf(t, b), referenceSchema(t, e); got != want {
		t.Errorf("schema:\n%s\nwant\n%s", got, want)
	}
	wantOneRowPerVersion(t, b)
}

// releaseByHand is docs/operating.md's statement that clears a stuck lease.
const releaseByHand = `INSERT INTO schema_lock (epoch, holder, seq, ttl_ms)
SELECT max(epoch), 'released by hand', 4294967295, 0 FROM schema_lock`

// leaseResumedByItsHolder: a lease this migrator claimed without
// learning it (the claim's answer lost) or could not release is taken up
// again by its next attempt, not waited out for its 30 s.
func leaseResumedByItsHolder(t *testing.T) {
	e := chtest.Engine(t)
	db, log := openLogged(t, e, freshName("resume"))
	ctx := context.Background()
	if err := db.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Conn().Exec(ctx, "INSERT INTO schema_lock (epoch, holder, seq, ttl_ms) VALUES (1, ?, 0, 30000), (1, ?, 1, 30000)",
		db.LeaseHolder(), db.LeaseHolder()); err != nil {
		t.Fatal(err)
	}
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if l := lines(log.String(), "waiting for it"); len(l) > 0 {
		t.Errorf("waited for its own lease: %q", l)
	}
	var epochs, released, seqs uint64
	if err := db.Conn().QueryRow(ctx, "SELECT uniqExact(epoch), countIf(ttl_ms = 0), toUInt64(uniqExact(seq) = count()) FROM schema_lock").Scan(&epochs, &released, &seqs); err != nil {
		t.Fatal(err)
	}
	if epochs != 1 || released != 1 || seqs != 1 {
		t.Errorf("schema_lock: %d leases, %d releases, distinct seqs %v; want the one lease, released once, every row its own seq", epochs, released, seqs == 1)
	}
	wantOneRowPerVersion(t, db)
}

// TestMigrateViewCreatedAgain: a file that creates a view and then changes
// a column the view's query reads, cut after its last statement, completes
// on the next run: ClickHouse analyses a CREATE MATERIALIZED VIEW IF NOT
// EXISTS's query before it finds the view there (the query no longer fits
// the column: it fails), so the runner skips a CREATE of an object that
// exists.
func TestMigrateViewCreatedAgain(t *testing.T) {
	e := chtest.Engine(t)
	db, _ := openQuiet(t, e, freshName("view"))
	ctx := context.Background()
	mig := schema.Migration{Version: 1, Name: "001_view.sql", Statements: schema.Split(`
CREATE TABLE IF NOT EXISTS t (a UInt8) ENGINE = MergeTree ORDER BY tuple();
CREATE TABLE IF NOT EXISTS t_sum (n UInt64) ENGINE = SummingMergeTree ORDER BY tuple();
CREATE MATERIALIZED VIEW IF NOT EXISTS t_mv TO t_sum AS SELECT countIf(a = 1) AS n FROM t;
ALTER TABLE t MODIFY COLUMN a String;
ALTER TABLE t_mv MODIFY QUERY SELECT countIf(a = '1') AS n FROM t;
`)}
	last := len(mig.Statements)
	db.SetMigrateHook(func(_ context.Context, m schema.Migration, k int) error {
		if k == last {
			return errCut
		}
		return nil
	})
	if err := db.MigrateWith(ctx, []schema.Migration{mig}); !errors.Is(err, errCut) {
		t.Fatalf("first run: %v, want the cut", err)
	}
	// What the runner skips fails when run: the test stands on that.
	if err := db.Conn().Exec(ctx, mig.Statements[2]); err == nil {
		t.Fatalf("the view's CREATE IF NOT EXISTS ran again without an error: the runner's skip is not needed")
	}
	db.SetMigrateHook(nil)
	if err := db.MigrateWith(ctx, []schema.Migration{mig}); err != nil {
		t.Fatalf("run after the cut: %v", err)
	}
	if err := db.Conn().Exec(ctx, "INSERT INTO t VALUES ('1'), ('2')"); err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := db.Conn().QueryRow(ctx, "SELECT sum(n) FROM t_sum").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("the view counted %d, want 1 (its modified query)", n)
	}
}

// cutNet dials through dial until Cut, which closes every connection it
// made and refuses new ones: ClickHouse unreachable for one DB only.
type cutNet struct {
	dial  func(ctx context.Context, addr string) (net.Conn, error)
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

func (c *cutNet) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return nil, errors.New("cut off")
	}
	conn, err := c.dial(ctx, addr)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

func (c *cutNet) Cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = true
	for _, conn := range c.conns {
		conn.Close()
	}
}

// leaseGivenUpWhenUnrenewable: a holder cut off from ClickHouse in the
// middle of a migration cannot renew its lease; it gives the lease up
// (ErrLeaseLost, before its next statement) instead of going on, and the
// next migrator takes the lock once the lease has expired and completes
// the schema.
func leaseGivenUpWhenUnrenewable(t *testing.T) {
	e := chtest.Engine(t)
	name := freshName("cutoff")
	cn := &cutNet{dial: e.DialContext}
	a, err := store.Open(context.Background(), store.Options{Addr: e.NativeAddr(), Dial: cn.Dial,
		CreateDatabase: true, Database: name, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, blog := openLogged(t, e, name)
	a.SetLeaseTiming(2*time.Second, 250*time.Millisecond, 50*time.Millisecond)
	b.SetLeaseTiming(2*time.Second, 250*time.Millisecond, 50*time.Millisecond)
	a.SetMigrateHook(func(ctx context.Context, m schema.Migration, k int) error {
		if m.Version != 2 || k != 1 {
			return nil
		}
		cn.Cut()
		<-ctx.Done() // only giving the lease up ends this
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := a.Migrate(ctx); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("a cut off: %v, want ErrLeaseLost", err)
	}
	if err := b.Migrate(ctx); err != nil {
		t.Fatalf("b: %v", err)
	}
	if got, want := schemaOf(t, b), referenceSchema(t, e); got != want {
		t.Errorf("schema:\n%s\nwant\n%s", got, want)
	}
	wantOneRowPerVersion(t, b)
	t.Logf("b: %q", lines(blog.String(), "waiting for it"))
}
