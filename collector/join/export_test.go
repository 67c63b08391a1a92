package join

import (
	"context"
	"time"
)

// SetStep makes Run call step instead of Step for each shard. Set it before
// Run.
func (p *Promoter) SetStep(step func(ctx context.Context, sh Shard) (bool, time.Duration, error)) {
	p.step = step
}
