package promoter

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"time"
)

// Leadership: promoters beat every beatEvery; those seen within leaderTTL
// are ranked by id. Rank 0 leads: it promotes each window once sealed. Rank
// r promotes only once no other promoter has moved the watermark for
// r × takeoverLag while a sealed window waited, and then goes on until
// another moves it again. So when the leader is gone or stuck (or cannot
// promote a window: an older collector during an upgrade), the next takes
// over at 10 s, the one after it at 20 s if that one is stuck too: the
// collectors of a fleet do not all promote the same window at once, even
// far behind. Correctness never depends on it (the tokens do).
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

// progress is what p saw of a shard's watermark.
type progress struct {
	watermark time.Time // the last promoted window
	since     time.Time // this process's clock when another promoter last moved it
	mine      time.Time // the last window p promoted itself
}

// stalled is how long no other promoter has moved the watermark of sh
// while a window waited sealed for waited: at most waited. A window p
// promoted itself does not count as progress, so a promoter that took over
// goes on until the leader moves again.
func (p *Promoter) stalled(sh Shard, watermark time.Time, waited time.Duration) time.Duration {
	now := time.Now()
	p.beatMu.Lock()
	defer p.beatMu.Unlock()
	pr := p.progress[sh.Name]
	if pr.since.IsZero() || !pr.watermark.Equal(watermark) && !watermark.Equal(pr.mine) {
		pr.since = now
	}
	pr.watermark = watermark
	p.progress[sh.Name] = pr
	return min(now.Sub(pr.since), waited)
}

// promoted records that p promoted window start of sh.
func (p *Promoter) promoted(sh Shard, start time.Time) {
	p.beatMu.Lock()
	defer p.beatMu.Unlock()
	pr := p.progress[sh.Name]
	pr.mine = start
	p.progress[sh.Name] = pr
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
