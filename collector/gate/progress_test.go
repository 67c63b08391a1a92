package gate

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgressBar(t *testing.T) {
	var b bytes.Buffer
	bar := newProgressBar(&b)
	for _, tc := range []struct {
		p    Progress
		want string
	}{
		{Progress{Warmup: true}, "warming up"},
		{Progress{Done: 5, Total: 20, Elapsed: 1500 * time.Millisecond}, " 25%  5/20 streams  1.5s"},
		{Progress{Done: 3, Duration: 10 * time.Second, Elapsed: 5 * time.Second, Failed: 1}, " 50%  3 streams  5s  1 failed"},
	} {
		b.Reset()
		bar.draw(tc.p)
		if got := b.String(); !strings.HasPrefix(got, "\r[") || !strings.Contains(got, tc.want) || !strings.HasSuffix(got, "\x1b[K") {
			t.Errorf("draw(%+v) = %q, want a redrawn line with %q", tc.p, got, tc.want)
		}
	}
	b.Reset()
	bar.clear()
	if got, want := b.String(), "\r\x1b[K"; got != want {
		t.Errorf("clear = %q, want %q", got, want)
	}
	// Not a terminal: Main draws nothing on stderr during a probe.
	srv := streamServer(t, cadence{events: 3, every: time.Millisecond})
	r := runGate(t, keyEnv, "probe", srv.URL, "-H", "Authorization: Bearer $TEST_KEY", "--requests", "2",
		"--max-jank", "0", "--max-itl-p99", "0", "--min-tps-p50", "0")
	if r.code != ExitPass || r.stderr != "" {
		t.Errorf("exit %d, stderr %q; want 0 and a quiet stderr off a terminal", r.code, r.stderr)
	}
}
