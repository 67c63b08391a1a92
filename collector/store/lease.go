package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/rs/zerolog"
)

// The schema lock: a lease in ClickHouse that one migrator at a time holds
// while it applies migrations, so that collectors started together on a
// fresh database (and `itlmon migrate`) do not run the same DDL at once.
//
// ClickHouse has no compare-and-set, but a MergeTree table with a
// deduplication window stores the first of several inserts carrying one
// insert_deduplication_token and drops the others, atomically (the same
// claim as itl_otlp_exports). A lease is numbered (epoch): whoever finds the
// latest lease free (none yet, released, or expired) claims the next epoch
// with the token "itlmon-schema-lock-<epoch>" and then reads which claim of
// that epoch was stored; only that one holds the lease. Every row of an
// epoch after its claim is its holder's renewal (ttl_ms from its time) or a
// release (ttl_ms 0, its holder's or an operator's); the lease ends ttl_ms
// after its latest row, or at its first release: a renewal that crosses a
// release (read before it, written after) does not revive the lease. All
// times are the server's (DEFAULT now64), so the migrators' clocks do not
// matter.
//
// The holder renews the lease every Renew (10 s) while it migrates, so a
// long statement keeps it; a holder that dies stops renewing, and its lease
// is taken over once it has expired (TTL, 30 s, after its last renewal). A
// holder that finds its lease gone when it renews (expired while it could
// not reach ClickHouse, and maybe taken; or released by an operator) stops
// before its next statement. Every statement is idempotent, so a migration
// cut by that, or by a kill, completes under the next holder.
//
// Waiters poll (every Poll, 1 s): they log once per lease whom they wait
// for, stop waiting as soon as every migration they know is recorded (the
// holder applied them), and otherwise claim the lease once it is free. A
// migrator that finds the lease held under its own name (its claim's answer
// was lost, or an earlier attempt could not release it; one DB migrates one
// at a time) goes on with it. A claim that left no row at all (its token
// still in the deduplication window from before the table was emptied by
// hand) moves every claimant on to the next epoch.

// lockTable is the lease's table, next to schema_migrations.
const lockTable = "schema_lock"

// RunnerTables are the tables the migration runner keeps for itself in a
// database (on a cluster, in each node's local database): schema_migrations
// and the schema lock's. They have no Distributed table.
var RunnerTables = []string{"schema_migrations", lockTable}

// lockTableDDL creates the lease's table as name, with engine and the
// ON CLUSTER clause on (empty on one server). Rows are few (a claim, a
// renewal every Renew while a migration runs, a release): no TTL, which
// could empty the table and restart the epochs at tokens still in the
// deduplication window.
func lockTableDDL(name, on, engine, dedupSetting string) string {
	return "CREATE TABLE IF NOT EXISTS " + name + on + ` (
		epoch  UInt64,
		holder String,
		seq    UInt32,
		at     DateTime64(6, 'UTC') DEFAULT now64(6),
		ttl_ms UInt32
	) ENGINE = ` + engine + ` ORDER BY (epoch, at, seq) SETTINGS ` + dedupSetting + ` = 1000`
}

// leaseTiming: a lease lasts TTL after its holder's last renewal, renewed
// every Renew; waiters look again every Poll.
type leaseTiming struct {
	TTL, Renew, Poll time.Duration
}

var defaultLeaseTiming = leaseTiming{TTL: 30 * time.Second, Renew: 10 * time.Second, Poll: time.Second}

// lease is one migrator's view of the schema lock on one connection.
type lease struct {
	conn   driver.Conn
	table  string // the lock table, qualified if need be
	holder string // this migrator
	timing leaseTiming
	log    zerolog.Logger
	// where names the database the lease guards, for the log.
	where string

	epoch   uint64    // held, once acquired
	seq     uint32    // rows written in epoch
	renewed time.Time // local time no later than the server's time of the lease's latest row
}

// leaseState is the latest lease: its epoch (0: none yet), holder, and the
// milliseconds until it ends (≤ 0: ended), by the server's clock.
type leaseState struct {
	epoch  uint64
	holder string
	leftMs int64
}

func (s leaseState) free() bool { return s.epoch == 0 || s.leftMs <= 0 }

// ErrLeaseLost is the cause of a migration stopped because its holder no
// longer holds the schema lock.
var ErrLeaseLost = errors.New("store: schema lock lost (expired or released while migrating)")

// newHolder names this process in the lock: host, pid and a random id (two
// migrators in one process are two holders).
func newHolder() string {
	host, _ := os.Hostname()
	var b [3]byte
	rand.Read(b[:])
	return host + " pid " + strconv.Itoa(os.Getpid()) + " " + hex.EncodeToString(b[:])
}

// read returns the latest lease.
func (l *lease) read(ctx context.Context) (leaseState, error) {
	var s leaseState
	rows, err := l.conn.Query(ctx, `SELECT epoch, argMin(holder, (at, seq)),
		if(countIf(ttl_ms = 0) > 0, toInt64(-1),
			argMax(toUnixTimestamp64Milli(at) + ttl_ms, (at, seq)) - toUnixTimestamp64Milli(now64(6)))
		FROM `+l.table+` WHERE epoch = (SELECT max(epoch) FROM `+l.table+`) GROUP BY epoch`)
	if err != nil {
		return s, fmt.Errorf("store: read schema lock: %w", err)
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(&s.epoch, &s.holder, &s.leftMs); err != nil {
			return s, fmt.Errorf("store: read schema lock: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("store: read schema lock: %w", err)
	}
	return s, nil
}

// holderOf returns who holds epoch (its first row's writer), "" if nobody
// claimed it.
func (l *lease) holderOf(ctx context.Context, epoch uint64) (string, error) {
	var holder string
	var n uint64
	if err := l.conn.QueryRow(ctx, "SELECT argMin(holder, (at, seq)), count() FROM "+l.table+" WHERE epoch = ?", epoch).Scan(&holder, &n); err != nil {
		return "", fmt.Errorf("store: read schema lock: %w", err)
	}
	if n == 0 {
		return "", nil
	}
	return holder, nil
}

// write appends a row of epoch for this holder with ttl (0: release), with
// the deduplication token token.
func (l *lease) write(ctx context.Context, epoch uint64, ttl time.Duration, token string) error {
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"insert_deduplication_token": token,
		"insert_deduplicate":         1,
		"async_insert":               0,
	}))
	err := l.conn.Exec(ctx, "INSERT INTO "+l.table+" (epoch, holder, seq, ttl_ms) VALUES (?, ?, ?, ?)",
		epoch, l.holder, l.seq, uint32(ttl/time.Millisecond))
	l.seq++
	if err != nil {
		return fmt.Errorf("store: write schema lock: %w", err)
	}
	return nil
}

// acquire waits until it holds the lease and returns nil, or until done
// reports that there is nothing left to do (then it returns errNothingToDo
// without holding it), or ctx ends.
func (l *lease) acquire(ctx context.Context, done func(context.Context) (bool, error)) error {
	var waitedFor uint64 // the epoch last logged as waited for
	var floor uint64     // the least epoch to claim (past claims that vanished)
	t := time.NewTimer(0)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			t.Reset(l.timing.Poll)
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-t.C:
			}
		}
		s, err := l.read(ctx)
		if err != nil {
			return err
		}
		if !s.free() && s.holder == l.holder {
			// Ours: a claim whose answer was lost, or an earlier attempt
			// of this DB (its attempts run one at a time) that could not
			// release it. Go on with it rather than wait for its expiry.
			if err := l.conn.QueryRow(ctx, "SELECT toUInt32(max(seq) + 1) FROM "+l.table+" WHERE epoch = ? AND holder = ?",
				s.epoch, l.holder).Scan(&l.seq); err != nil {
				return fmt.Errorf("store: read schema lock: %w", err)
			}
			l.epoch = s.epoch
			l.renewed = time.Now().Add(time.Duration(s.leftMs)*time.Millisecond - l.timing.TTL)
			l.log.Debug().Str("where", l.where).Uint64("lease", s.epoch).Msg("schema lock still ours")
			return nil
		}
		// Asked after the lease is read: a holder records its last
		// migration before it releases, so a lease read free after its
		// holder completed the schema is not claimed for nothing. (On the
		// first pass the caller has just asked; a lease held then is
		// waited for either way.)
		if !first || s.free() {
			if ok, err := done(ctx); err != nil {
				return err
			} else if ok {
				if waitedFor != 0 {
					l.log.Info().Str("where", l.where).Msg("schema applied by another migrator: done waiting")
				}
				return errNothingToDo
			}
		}
		if !s.free() {
			if s.epoch != waitedFor {
				waitedFor = s.epoch
				l.log.Info().Str("where", l.where).Str("holder", s.holder).Uint64("lease", s.epoch).
					Dur("expires_in", time.Duration(s.leftMs)*time.Millisecond).
					Msg("schema lock held by another migrator: waiting for it to apply the schema")
			}
			continue
		}
		epoch := max(s.epoch+1, floor)
		l.seq = 0
		l.renewed = time.Now() // before the claim's row gets its time
		if err := l.write(ctx, epoch, l.timing.TTL, "itlmon-schema-lock-"+strconv.FormatUint(epoch, 10)); err != nil {
			return err
		}
		holder, err := l.holderOf(ctx, epoch)
		if err != nil {
			return err
		}
		switch holder {
		case l.holder:
			l.epoch = epoch
			l.log.Debug().Str("where", l.where).Uint64("lease", epoch).Msg("schema lock taken")
			return nil
		case "":
			// No row of the epoch: the token was left in the deduplication
			// window by a lease that is gone (a table emptied by hand).
			// Every claimant sees the same and moves past it.
			floor = epoch + 1
		}
	}
}

// errNothingToDo ends acquire when the schema was applied meanwhile.
var errNothingToDo = errors.New("nothing to do")

// hold renews the lease every Renew until ctx ends, and cancels the
// migration (lost) with ErrLeaseLost when it finds the lease no longer its
// own, or when a renewal failed and the next could come too late: it gives
// the lease up before it can expire (the last renewal's send time plus
// TTL, which is no later than the server's expiry), so that no other
// migrator can take it over while this one starts another statement.
func (l *lease) hold(ctx context.Context, lost context.CancelCauseFunc) {
	t := time.NewTicker(l.timing.Renew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		err := l.renew(ctx)
		switch {
		case err == nil:
			l.renewed = sent
		case errors.Is(err, ErrLeaseLost):
			lost(err)
			return
		case ctx.Err() != nil:
			return
		case time.Since(l.renewed)+l.timing.Renew >= l.timing.TTL:
			lost(fmt.Errorf("%w: not renewed for %v, it would expire before the next try: %w",
				ErrLeaseLost, time.Since(l.renewed).Round(time.Millisecond), err))
			return
		default:
			l.log.Warn().Err(err).Str("where", l.where).Msg("schema lock not renewed; retrying")
		}
	}
}

// renew extends the held lease by TTL, or returns ErrLeaseLost when it is
// no longer this holder's.
func (l *lease) renew(ctx context.Context) error {
	s, err := l.read(ctx)
	if err != nil {
		return err
	}
	if s.epoch != l.epoch || s.holder != l.holder || s.leftMs <= 0 {
		return fmt.Errorf("%w: the latest lease is %d held by %s", ErrLeaseLost, s.epoch, s.holder)
	}
	return l.write(ctx, l.epoch, l.timing.TTL, l.token())
}

// release ends the held lease at once, so a waiter need not wait for it to
// expire.
func (l *lease) release(ctx context.Context) error {
	return l.write(ctx, l.epoch, 0, l.token())
}

// token is a unique deduplication token for a renewal or release.
func (l *lease) token() string {
	return "itlmon-schema-lock-" + strconv.FormatUint(l.epoch, 10) + "-" + l.holder + "-" + strconv.FormatUint(uint64(l.seq), 10)
}

// withLease runs migrate holding the schema lock on conn's table: it
// returns nil at once when done reports nothing to do (before or while
// waiting for the lock), else takes the lock, asks done again (the previous
// holder may have applied everything), runs migrate with a context that is
// cancelled if the lease is lost, and releases the lease.
func (db *DB) withLease(ctx context.Context, conn driver.Conn, table, where string,
	done func(context.Context) (bool, error), migrate func(context.Context) error) error {
	if ok, err := done(ctx); err != nil || ok {
		return err
	}
	l := &lease{conn: conn, table: table, holder: db.holder, timing: db.leaseTiming, log: db.log, where: where}
	if err := l.acquire(ctx, done); err != nil {
		if errors.Is(err, errNothingToDo) {
			return nil
		}
		return err
	}
	mctx, lost := context.WithCancelCause(ctx)
	held := make(chan struct{})
	go func() { defer close(held); l.hold(mctx, lost) }()
	err := migrate(mctx)
	cause := context.Cause(mctx)
	lost(nil)
	<-held
	if errors.Is(cause, ErrLeaseLost) {
		if err != nil {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
		return err // not ours to release
	}
	// Release even when ctx ended: a waiter then need not wait for expiry.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if rerr := l.release(rctx); rerr != nil && err == nil {
		db.log.Warn().Err(rerr).Str("where", where).Msg("schema lock not released: it expires on its own")
	}
	return err
}
