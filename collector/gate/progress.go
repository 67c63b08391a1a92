package gate

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progressBar draws one line on a terminal, redrawn in place.
type progressBar struct {
	mu    sync.Mutex
	w     io.Writer
	drawn bool
}

func newProgressBar(w io.Writer) *progressBar { return &progressBar{w: w} }

const barWidth = 30

func (b *progressBar) draw(p Progress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var frac float64
	var count string
	switch {
	case p.Warmup:
		count = "warming up"
	case p.Total > 0:
		frac = float64(p.Done) / float64(p.Total)
		count = fmt.Sprintf("%d/%d streams", p.Done, p.Total)
	case p.Duration > 0:
		frac = float64(p.Elapsed) / float64(p.Duration)
		count = fmt.Sprintf("%d streams", p.Done)
	}
	frac = min(max(frac, 0), 1)
	fill := int(frac * barWidth)
	line := fmt.Sprintf("\r[%s%s] %3.0f%%  %s  %s", strings.Repeat("█", fill), strings.Repeat("░", barWidth-fill),
		frac*100, count, p.Elapsed.Round(100*time.Millisecond))
	if p.Failed > 0 {
		line += fmt.Sprintf("  %d failed", p.Failed)
	}
	fmt.Fprintf(b.w, "%s\x1b[K", line)
	b.drawn = true
}

func (b *progressBar) clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprint(b.w, "\r\x1b[K")
	}
}
