package promoter

import (
	"context"
	"time"
)

// SetStep makes Run call step instead of Step for each shard. Set it before
// Run.
func (p *Promoter) SetStep(step func(ctx context.Context, sh Shard) (Look, error)) {
	p.step = step
}

// SetKinds makes p know only these inbox kinds: an older collector's
// promoter. Set it before Run.
func (p *Promoter) SetKinds(kinds ...string) {
	p.kinds = map[string]bool{}
	for _, k := range kinds {
		p.kinds[k] = true
	}
}

// SetTakeover shortens the stall after which the next promoter takes over.
func (p *Promoter) SetTakeover(d time.Duration) { p.takeover = d }

// ID is p's id in itl_promoters.
func (p *Promoter) ID() string { return p.id }

// Pages is how many pages p promoted, in windows it finished or not.
func (p *Promoter) Pages() uint64 { return p.pages.Load() }

// SetCutAfterPages makes p stop each window's promotion before page n, once
// pages 0 to n-1 have landed: a collector killed there.
func (p *Promoter) SetCutAfterPages(n int) { p.cutAfterPages = n }

// SetEarlierRelease makes p page windows as the releases before
// itl_promote_pages: 2,000 rows, recorded nowhere, page 0 under the
// window's own token.
func (p *Promoter) SetEarlierRelease() { p.earlierRelease = true }

// SetMaxSpan makes p span at most n windows a run (1: window by window).
func (p *Promoter) SetMaxSpan(n int) { p.maxSpan = n }

// SetCutAfterRecord makes p stop each run once its span and page size are
// recorded, before any other insert; SetCutBeforeMark once its pages have
// landed, before its itl_promoted row: a collector killed there.
func (p *Promoter) SetCutAfterRecord() { p.cutAfterRecord = true }
func (p *Promoter) SetCutBeforeMark()  { p.cutBeforeMark = true }
