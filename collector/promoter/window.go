package promoter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// blockedRetry is how often a promoter tries again a window it could not
// promote for rows it does not know (a newer collector may promote it
// meanwhile).
const blockedRetry = 5 * time.Second

// blockedWindow is a window a promoter found holding rows it cannot promote.
type blockedWindow struct {
	start time.Time
	tried time.Time // this process's clock
}

// errBlocked: the window holds inbox rows this promoter cannot promote: of a
// kind it does not know, or that it cannot decode (a newer collector's). It
// is not promoted past them: it waits for a collector that can.
type errBlocked struct {
	start  time.Time
	reason string
}

func (e *errBlocked) Error() string {
	return fmt.Sprintf("promoter: window %s holds %s: left for a collector that can promote it",
		e.start.UTC().Format(time.RFC3339), e.reason)
}

// found is the one-round-trip answer of look.
type found struct {
	now, last, next time.Time
	oldestRunning   float64 // seconds: the oldest running inbox insert
}

// look reads the server clock, the watermark (the last promoted window),
// the next inbox row after it, and the age of the oldest running inbox
// insert.
func look(ctx context.Context, sh Shard) (found, error) {
	var f found
	processes := "system.processes"
	if sh.Replicas != "" {
		processes = "clusterAllReplicas(" + quoteString(sh.Replicas) + ", system.processes)"
	}
	err := sh.Conn.QueryRow(ctx, `
		WITH (SELECT max(promoted_window) FROM itl_promoted) AS last
		SELECT now64(6), last,
			(SELECT min(ingested_at) FROM itl_inbox WHERE ingested_at >= last + INTERVAL 1 SECOND),
			(SELECT max(elapsed) FROM `+processes+`
			  WHERE query_kind = 'Insert' AND positionCaseInsensitive(query, 'itl_inbox') > 0)`).
		Scan(&f.now, &f.last, &f.next, &f.oldestRunning)
	if err != nil {
		return f, fmt.Errorf("promoter: look for a window: %w", err)
	}
	return f, nil
}

// pagesPast counts the rows promoters inserted into itl_promoted_ids for
// windows past the watermark last: the pages of the window being promoted.
// Only recent parts are read (the table is partitioned by the window's day,
// and a part past the watermark is one of the last pages').
func pagesPast(ctx context.Context, sh Shard, last time.Time) (uint64, error) {
	var n uint64
	err := sh.Conn.QueryRow(ctx, "SELECT count() FROM itl_promoted_ids WHERE promoted_window > ?", last.Unix()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("promoter: pages past the watermark: %w", err)
	}
	return n, nil
}

// Step promotes the oldest unpromoted window of sh if it is sealed and it
// is this promoter's turn (lead.go). It reports what it found.
func (p *Promoter) Step(ctx context.Context, sh Shard) (Look, error) {
	return p.promoteOldest(ctx, sh, false)
}

// promoteOldest is Step; with always it promotes whatever p's rank, and
// sends no heartbeat (CatchUp).
func (p *Promoter) promoteOldest(ctx context.Context, sh Shard, always bool) (Look, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !always {
		p.heartbeat(ctx, sh)
	}
	f, err := look(ctx, sh)
	if err != nil {
		return Look{}, err
	}
	if f.next.Unix() <= 0 || !f.next.After(f.last) {
		p.unblock(sh)
		return Look{Known: true, Idle: true}, nil // nothing new
	}
	start := f.next.Truncate(Window)
	end := start.Add(Window)
	p.unblockBefore(sh, start)
	// Sealed: the server clock is past the window's end plus the hold and
	// the grace, and no inbox insert that began before end+hold is running.
	// While the shard's traffic is light, Run's step waits until Gather's
	// windows from start are sealed (Config.Gather), and takes them all.
	sealedAt := end.Add(p.cfg.Hold + p.cfg.Grace)
	if !always && p.gathering(sh) {
		sealedAt = start.Add(p.cfg.Gather + p.cfg.Hold + p.cfg.Grace)
	}
	if f.now.Before(sealedAt) {
		return Look{Known: true, Seals: sealedAt.Sub(f.now)}, nil
	}
	if f.oldestRunning > 0 && f.now.Add(-time.Duration(f.oldestRunning*float64(time.Second))).Before(end.Add(p.cfg.Hold)) {
		return Look{Known: true}, nil
	}
	l := Look{Known: true, Age: f.now.Sub(end)}
	if !always {
		// Pages of windows past the watermark: a leader's progress inside a
		// window larger than it promotes in takeoverLag.
		pages, err := pagesPast(ctx, sh, f.last)
		if err != nil {
			return l, err
		}
		if !p.mayPromote(ctx, sh, p.stalled(sh, mark{f.last, pages}, f.now.Sub(sealedAt))) {
			return l, nil // the leader promotes it
		}
	}
	if !p.retryBlocked(sh, start) {
		return l, nil
	}
	began := time.Now()
	last, records, windows, err := p.promote(ctx, sh, start, p.sealedEnd(f), !always)
	if err != nil {
		var b *errBlocked
		if errors.As(err, &b) {
			p.block(sh, start, err)
			return l, nil
		}
		return l, err
	}
	p.unblock(sh)
	p.promoted(sh, last, records, windows)
	p.busyNanos.Add(int64(time.Since(began)))
	l.Promoted = true
	return l, nil
}

// retryBlocked reports whether p tries window start of sh: not one it found
// blocked less than blockedRetry ago.
func (p *Promoter) retryBlocked(sh Shard, start time.Time) bool {
	p.blockMu.Lock()
	defer p.blockMu.Unlock()
	b, ok := p.blocked[sh.Name]
	return !ok || !b.start.Equal(start) || time.Since(b.tried) >= blockedRetry
}

// block records that window start of sh waits for another collector:
// counted and logged once per window.
func (p *Promoter) block(sh Shard, start time.Time, err error) {
	p.blockMu.Lock()
	defer p.blockMu.Unlock()
	b, ok := p.blocked[sh.Name]
	if !ok || !b.start.Equal(start) {
		p.blockedWindows.Add(1)
		p.log.Warn().Err(err).Str("shard", sh.Name).Time("window", start).
			Msg("window waits for a collector that can promote it (an upgrade in progress?)")
		if !ok {
			p.blockedNow.Add(1)
		}
	}
	p.blocked[sh.Name] = blockedWindow{start: start, tried: time.Now()}
}

// unblockBefore forgets sh's blocked window if it is before start: another
// collector promoted it.
func (p *Promoter) unblockBefore(sh Shard, start time.Time) {
	p.blockMu.Lock()
	b, ok := p.blocked[sh.Name]
	p.blockMu.Unlock()
	if ok && b.start.Before(start) {
		p.unblock(sh)
	}
}

// unblock forgets sh's blocked window: promoted (by p or another).
func (p *Promoter) unblock(sh Shard) {
	p.blockMu.Lock()
	defer p.blockMu.Unlock()
	if _, ok := p.blocked[sh.Name]; ok {
		delete(p.blocked, sh.Name)
		p.blockedNow.Add(-1)
	}
}

// CatchUp promotes, on every shard, every window holding inbox rows
// ingested before the call, waiting for each to seal (about the hold and
// the grace after its end), and returns when done or when ctx ends. Tests
// use it to read what they wrote; Run does the same continuously. Not to be
// called while Run runs on the same Promoter.
func (p *Promoter) CatchUp(ctx context.Context) error {
	if err := p.findShards(ctx); err != nil {
		return err
	}
	for _, sh := range p.shards {
		var until time.Time
		if err := sh.Conn.QueryRow(ctx, "SELECT now64(6)").Scan(&until); err != nil {
			return fmt.Errorf("promoter: %w", err)
		}
		for {
			var pending uint64
			err := sh.Conn.QueryRow(ctx, `SELECT count() FROM itl_inbox
				WHERE ingested_at < fromUnixTimestamp64Micro(?) AND ingested_at >= (SELECT max(promoted_window) FROM itl_promoted) + INTERVAL 1 SECOND`,
				micros(until)).Scan(&pending)
			if err != nil {
				return fmt.Errorf("promoter: %w", err)
			}
			if pending == 0 {
				break
			}
			look, err := p.promoteOldest(ctx, sh, true)
			if err != nil {
				return err
			}
			if !look.Promoted {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(max(look.Seals, 20*time.Millisecond)):
				}
			}
		}
	}
	return nil
}

// micros is t as a query argument for fromUnixTimestamp64Micro: exact to
// the microsecond, whatever the driver does with a time.Time.
func micros(t time.Time) int64 { return t.UnixMicro() }

// quoteString quotes s as a ClickHouse string literal.
func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
