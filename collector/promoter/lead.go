package promoter

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"time"
)

// Leadership: promoters beat every beatEvery; those seen within leaderTTL
// are ranked by id. Rank 0 leads: it promotes each window once sealed, and
// beats between pages too, so a window longer than leaderTTL to promote
// does not cost it the lead. Rank r promotes only once no other promoter
// has moved the promotion (the watermark, or the pages past it: see
// stalled) for r × takeoverLag while a sealed window waited, and then goes
// on until another moves it again. So when the leader is gone or stuck (or
// cannot promote a window: an older collector during an upgrade), the next
// takes over at 10 s, the one after it at 20 s if that one is stuck too:
// the collectors of a fleet do not all promote the same window at once,
// even far behind. Correctness never depends on it (the tokens do).
const (
	beatEvery   = 2 * time.Second
	leaderTTL   = 10 * time.Second
	takeoverLag = 10 * time.Second
	// unrankedSlots spreads promoters that cannot read the ranking (or
	// are not in it: their heartbeat failed) over ranks 1 to unrankedSlots.
	unrankedSlots = 4
)

// beat records p in sh's itl_promoters, at most every beatEvery: idle or
// not, so the leadership is settled before there is work. A failed beat is
// counted and logged by the caller; it does not stop promotion.
func (p *Promoter) beat(ctx context.Context, sh Shard) error {
	p.beatMu.Lock()
	due := time.Since(p.beats[sh.Name]) >= beatEvery
	if due {
		p.beats[sh.Name] = time.Now()
	}
	p.beatMu.Unlock()
	if !due {
		return nil
	}
	if err := sh.Conn.Exec(ctx, "INSERT INTO itl_promoters (collector) VALUES (?)", p.id); err != nil {
		return fmt.Errorf("promoter: heartbeat: %w", err)
	}
	return nil
}

// heartbeat beats (beat) and counts and logs a failure: correctness does
// not depend on the heartbeat, so promotion goes on.
func (p *Promoter) heartbeat(ctx context.Context, sh Shard) {
	if err := p.beat(ctx, sh); err != nil {
		if p.beatErrs.Add(1) == 1 || p.beatErrs.Load()%100 == 0 {
			p.log.Warn().Err(err).Str("shard", sh.Name).Msg("heartbeat not recorded; promoting on")
		}
	}
}

// rank is p's place among the promoters of sh seen within leaderTTL,
// ordered by id: 0 leads. A promoter missing from the list, or one that
// cannot read it, takes a rank of its own from its id (1 to unrankedSlots
// past the listed ones).
func (p *Promoter) rank(ctx context.Context, sh Shard) (int, error) {
	var ids []string
	err := sh.Conn.QueryRow(ctx, `SELECT groupUniqArray(collector) FROM itl_promoters
		WHERE seen > now64(3) - toIntervalMillisecond(?)`, leaderTTL.Milliseconds()).Scan(&ids)
	if err != nil {
		return p.unranked(0), fmt.Errorf("promoter: leader: %w", err)
	}
	slices.Sort(ids)
	if i := slices.Index(ids, p.id); i >= 0 {
		return i, nil
	}
	if len(ids) == 0 {
		return 0, nil // nobody beats: promote
	}
	return p.unranked(len(ids)), nil
}

func (p *Promoter) unranked(listed int) int {
	h := fnv.New32a()
	h.Write([]byte(p.id))
	return max(listed, 1) + int(h.Sum32()%unrankedSlots)
}

// mark is where the promotion of a shard stands: the watermark (the last
// promoted window) and the pages promoted past it (itl_promoted_ids rows of
// later windows: the window in progress).
type mark struct {
	watermark time.Time
	pages     uint64
}

// progress is what p saw of a shard's promotion.
type progress struct {
	mark  mark
	since time.Time // this process's clock when another promoter last moved it
	mine  time.Time // the last window p promoted itself
	// heavy: p's last run of the shard took at least PageRows/10 records
	// a window holding any (Config.Gather).
	heavy bool
}

// stalled is how long no other promoter has moved the promotion of sh
// while a window waited sealed for waited: at most waited. Another moved
// it when the watermark moved to a window p did not promote itself, when
// the pages past an unchanged watermark changed (a leader in the middle of
// a window larger than it promotes in takeoverLag, as a backlog's are), or
// when there are pages past the window p just promoted (the leader is
// ahead of it). So a promoter that took over goes on until the leader
// moves again, and stands down as soon as it does. Pages p left of a window
// it failed to finish count as another's: it stands down, and takes over
// again after its rank's lag.
func (p *Promoter) stalled(sh Shard, m mark, waited time.Duration) time.Duration {
	now := time.Now()
	p.beatMu.Lock()
	defer p.beatMu.Unlock()
	pr := p.progress[sh.Name]
	var moved bool
	switch {
	case pr.mark.watermark.Equal(m.watermark):
		moved = pr.mark.pages != m.pages
	case m.watermark.Equal(pr.mine):
		moved = m.pages > 0
	default:
		moved = true
	}
	if pr.since.IsZero() || moved {
		pr.since = now
	}
	pr.mark = m
	p.progress[sh.Name] = pr
	return min(now.Sub(pr.since), waited)
}

// promoted records that p promoted sh up to window start (the last of a
// span).
func (p *Promoter) promoted(sh Shard, start time.Time, records, windows int) {
	p.beatMu.Lock()
	defer p.beatMu.Unlock()
	pr := p.progress[sh.Name]
	pr.mine, pr.heavy = start, records >= max(windows, 1)*(p.cfg.PageRows/10)
	p.progress[sh.Name] = pr
}

// gathering reports whether the sealed windows of sh gather before a run
// (Config.Gather): they do while its last run by p was light.
func (p *Promoter) gathering(sh Shard) bool {
	if p.cfg.Gather <= Window {
		return false
	}
	p.beatMu.Lock()
	defer p.beatMu.Unlock()
	return !p.progress[sh.Name].heavy
}

// mayPromote reports whether p promotes the waiting window of sh now: p
// leads, or the promotion has stalled long enough for p's rank to take
// over (a leader working through a backlog moves the watermark every
// window, so nobody takes over from it).
func (p *Promoter) mayPromote(ctx context.Context, sh Shard, stalled time.Duration) bool {
	r, err := p.rank(ctx, sh)
	if err != nil {
		p.log.Debug().Err(err).Str("shard", sh.Name).Msg("cannot read the promoters' ranking")
	}
	return r == 0 || stalled >= time.Duration(r)*p.takeover
}
