package otlp

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
)

// TestRunEvery: Run's loop on testing/synctest's fake clock, with a fake
// export: one export per interval, the first failure of a run logged and
// the recovery after it, nothing else; it returns when ctx ends.
func TestRunEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Minute
		var at []time.Duration
		start := time.Now()
		fails := map[int]bool{2: true, 3: true, 4: true} // exports 2-4 fail
		export := func(context.Context) (int, error) {
			at = append(at, time.Since(start))
			if fails[len(at)] {
				return 0, errors.New("receiver down")
			}
			return 1, nil
		}
		var log bytes.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			runEvery(ctx, interval, export, zerolog.New(&log))
		}()
		time.Sleep(6*interval + interval/2)
		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("runEvery still runs after its ctx ended")
		}
		if len(at) != 6 {
			t.Fatalf("%d exports in 6.5 intervals, want 6", len(at))
		}
		for i, d := range at {
			if want := time.Duration(i+1) * interval; d != want {
				t.Fatalf("export %d at %v, want %v", i+1, d, want)
			}
		}
		lines := strings.Split(strings.TrimSpace(log.String()), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], `"level":"warn"`) || !strings.Contains(lines[0], "receiver down") ||
			!strings.Contains(lines[1], `"level":"info"`) || !strings.Contains(lines[1], "recovered") {
			t.Fatalf("log = %q, want one failure, then one recovery", lines)
		}
	})
}
