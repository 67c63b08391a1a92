package promoter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/promoter"
)

// The promoter's Run loop under testing/synctest: the shards' Step is a fake
// (Promoter.SetStep), so the tests read exact fake times of every step and
// sleep no wall-clock time.

const interval = 250 * time.Millisecond

// stepCall is one call of the fake step.
type stepCall struct {
	at    time.Time
	shard string
}

// stepper is the shards' Step: answer decides what the n-th call (from 0)
// on a shard reports.
type stepper struct {
	mu     sync.Mutex
	answer func(ctx context.Context, shard string, n int) (promoter.Look, error)
	calls  []stepCall
	n      map[string]int
}

func (s *stepper) step(ctx context.Context, sh promoter.Shard) (promoter.Look, error) {
	s.mu.Lock()
	if s.n == nil {
		s.n = map[string]int{}
	}
	n := s.n[sh.Name]
	s.n[sh.Name]++
	s.calls = append(s.calls, stepCall{time.Now(), sh.Name})
	answer := s.answer
	s.mu.Unlock()
	if answer == nil {
		return promoter.Look{}, nil
	}
	return answer(ctx, sh.Name, n) // may block: outside the lock
}

func (s *stepper) setAnswer(answer func(ctx context.Context, shard string, n int) (promoter.Look, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = answer
}

// on returns the times of the calls on shard.
func (s *stepper) on(shard string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var at []time.Time
	for _, c := range s.calls {
		if c.shard == shard {
			at = append(at, c.at)
		}
	}
	return at
}

// logLine is a log line with the bubble time it was written.
type logLine struct {
	at      time.Time
	Level   string `json:"level"`
	Message string `json:"message"`
	Error   string `json:"error"`
	Shard   string `json:"shard"`
}

type logSink struct {
	mu    sync.Mutex
	lines []logLine
}

func (s *logSink) Write(p []byte) (int, error) {
	var l logLine
	if err := json.Unmarshal(p, &l); err != nil {
		return 0, err
	}
	l.at = time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, l)
	return len(p), nil
}

func (s *logSink) with(msg string) []logLine {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []logLine
	for _, l := range s.lines {
		if l.Message == msg {
			out = append(out, l)
		}
	}
	return out
}

func testLogger(t *testing.T) (zerolog.Logger, *logSink) {
	logs := &logSink{}
	return zerolog.New(zerolog.MultiLevelWriter(logs, zerolog.NewTestWriter(t))).With().Timestamp().Logger(), logs
}

// fakeConn is a shard's connection: only Close is used (Step is a fake).
type fakeConn struct {
	driver.Conn
	closed atomic.Int32
}

func (c *fakeConn) Close() error {
	c.closed.Add(1)
	return nil
}

func shards(names ...string) []promoter.Shard {
	out := make([]promoter.Shard, len(names))
	for i, n := range names {
		out[i] = promoter.Shard{Name: n, Conn: &fakeConn{}}
	}
	return out
}

// runPromoter runs p with s as its step until stop; done is closed when
// Run returns. The test's end stops it and waits for it.
func runPromoter(t *testing.T, p *promoter.Promoter, s *stepper) (stop func(), done <-chan struct{}) {
	p.SetStep(s.step)
	ctx, stop := context.WithCancel(context.Background())
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		p.Run(ctx)
	}()
	t.Cleanup(func() {
		stop()
		<-ch
	})
	return stop, ch
}

func newTestPromoter(t *testing.T, sh []promoter.Shard) (*promoter.Promoter, *logSink) {
	t.Helper()
	log, logs := testLogger(t)
	p, err := promoter.New(sh, promoter.Config{Interval: interval, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return p, logs
}

// every returns n times from start, step apart.
func every(start time.Time, step time.Duration, n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = start.Add(time.Duration(i) * step)
	}
	return out
}

// A sealed window that waits (for a running insert, for the leader) is
// looked at every Interval.
func TestRunPollsAtIntervalWhileASealedWindowWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sh := shards("1", "2")
		p, _ := newTestPromoter(t, sh)
		s := &stepper{answer: func(context.Context, string, int) (promoter.Look, error) {
			return promoter.Look{Known: true, Age: 1500 * time.Millisecond}, nil
		}}
		start := time.Now()
		stop, done := runPromoter(t, p, s)
		time.Sleep(10*interval + interval/2)
		stop()
		<-done
		for _, name := range []string{"1", "2"} {
			if got, want := s.on(name), every(start, interval, 11); !slices.EqualFunc(got, want, time.Time.Equal) {
				t.Errorf("shard %s stepped at %v, want every %v from %v: %v", name, offsets(got, start), interval, start, offsets(want, start))
			}
		}
		for _, sh := range sh {
			if n := sh.Conn.(*fakeConn).closed.Load(); n != 0 {
				t.Errorf("shard %s closed %d times: Run does not own the shards it was given", sh.Name, n)
			}
		}
		if st := p.Stats(); st.Lag != 1500*time.Millisecond || st.Errors != 0 {
			t.Errorf("stats %+v: want lag 1.5 s, no errors", st)
		}
	})
}

// A shard with nothing to promote is looked at every IdleInterval (1 s
// here: the default hold and grace are longer).
func TestRunLooksLessOftenWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newTestPromoter(t, shards("1", "2"))
		s := &stepper{answer: func(context.Context, string, int) (promoter.Look, error) {
			return promoter.Look{Known: true, Idle: true}, nil
		}}
		start := time.Now()
		stop, done := runPromoter(t, p, s)
		time.Sleep(5*time.Second + interval)
		stop()
		<-done
		for _, name := range []string{"1", "2"} {
			if got, want := s.on(name), every(start, time.Second, 6); !slices.EqualFunc(got, want, time.Time.Equal) {
				t.Errorf("shard %s stepped at %v, want every second: %v", name, offsets(got, start), offsets(want, start))
			}
		}
		if st := p.Stats(); st.Lag != 0 {
			t.Errorf("lag %v while idle, want 0", st.Lag)
		}
	})
}

// IdleInterval is at most the hold plus the grace, so that a record inserted
// just after a look is found before its window seals; and at least Interval.
func TestIdleIntervalDefault(t *testing.T) {
	for _, tc := range []struct {
		cfg  promoter.Config
		want time.Duration
	}{
		{promoter.Config{}, time.Second},
		{promoter.Config{Hold: 100 * time.Millisecond, Grace: 50 * time.Millisecond}, 250 * time.Millisecond},
		{promoter.Config{Hold: 100 * time.Millisecond, Grace: 50 * time.Millisecond, Interval: 20 * time.Millisecond}, 150 * time.Millisecond},
		{promoter.Config{IdleInterval: 5 * time.Second}, 5 * time.Second},
	} {
		synctest.Test(t, func(t *testing.T) {
			tc.cfg.Logger = zerolog.Nop()
			p, err := promoter.New(shards("1"), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			s := &stepper{answer: func(context.Context, string, int) (promoter.Look, error) {
				return promoter.Look{Known: true, Idle: true}, nil
			}}
			start := time.Now()
			stop, done := runPromoter(t, p, s)
			time.Sleep(2*tc.want + tc.want/2)
			stop()
			<-done
			if got, want := s.on("1"), every(start, tc.want, 3); !slices.EqualFunc(got, want, time.Time.Equal) {
				t.Errorf("%+v: stepped at %v, want every %v", tc.cfg, offsets(got, start), tc.want)
			}
		})
	}
}

// A window found but not sealed yet is looked at again when its seal is
// due (Look.Seals), not every Interval nor IdleInterval, and at least every
// 2 s (the heartbeat's period); a round waits for the soonest look any
// shard needs.
func TestRunLooksAgainWhenTheWindowSeals(t *testing.T) {
	for _, tc := range []struct {
		shards []string
		want   []time.Duration
	}{
		// 0: sealed in 2.7 s, looked at again in 2 s (the heartbeat's
		// period) and at 2.7: promoted, a round at once; idle since.
		{[]string{"1"}, []time.Duration{0, 2 * time.Second, 2700 * time.Millisecond, 2700 * time.Millisecond,
			3700 * time.Millisecond, 4700 * time.Millisecond}},
		// Shard 2, idle, is looked at every second: so is shard 1, whose
		// last wait is what remains to its seal (0.7 s).
		{[]string{"1", "2"}, []time.Duration{0, time.Second, 2 * time.Second, 2700 * time.Millisecond, 2700 * time.Millisecond,
			3700 * time.Millisecond, 4700 * time.Millisecond}},
	} {
		synctest.Test(t, func(t *testing.T) {
			p, _ := newTestPromoter(t, shards(tc.shards...))
			start := time.Now()
			seal := start.Add(2700 * time.Millisecond)
			promoted := false
			s := &stepper{answer: func(_ context.Context, shard string, _ int) (promoter.Look, error) {
				switch now := time.Now(); {
				case shard != "1" || promoted:
					return promoter.Look{Known: true, Idle: true}, nil
				case now.Before(seal):
					return promoter.Look{Known: true, Seals: seal.Sub(now)}, nil
				default:
					promoted = true
					return promoter.Look{Known: true, Promoted: true}, nil
				}
			}}
			stop, done := runPromoter(t, p, s)
			time.Sleep(5 * time.Second)
			stop()
			<-done
			for _, name := range tc.shards {
				if got := offsets(s.on(name), start); !slices.Equal(got, tc.want) {
					t.Errorf("shards %v: shard %s stepped at %v, want %v", tc.shards, name, got, tc.want)
				}
			}
		})
	}
}

func TestRunBackToBackWhileWindowsAreSealed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newTestPromoter(t, shards("1", "2"))
		// Shard 1 has 5 sealed windows, shard 2 has 2: rounds go on without
		// a pause while either promoted one.
		sealed := map[string]int{"1": 5, "2": 2}
		s := &stepper{answer: func(_ context.Context, shard string, n int) (promoter.Look, error) {
			if n < sealed[shard] {
				return promoter.Look{Promoted: true, Known: true, Age: time.Duration(sealed[shard]-n) * time.Second}, nil
			}
			return promoter.Look{Known: true}, nil
		}}
		start := time.Now()
		stop, done := runPromoter(t, p, s)
		synctest.Wait()
		if st := p.Stats(); st.Lag != 0 {
			t.Errorf("lag %v after catching up, want 0", st.Lag)
		}
		time.Sleep(2*interval + interval/2)
		stop()
		<-done
		// 6 rounds at start (5 that promoted, 1 that found nothing), then
		// one per interval.
		want := append(every(start, 0, 6), every(start.Add(interval), interval, 2)...)
		for _, name := range []string{"1", "2"} {
			if got := s.on(name); !slices.EqualFunc(got, want, time.Time.Equal) {
				t.Errorf("shard %s stepped at %v, want %v", name, offsets(got, start), offsets(want, start))
			}
		}
	})
}

func TestRunKeepsGoingAfterStepErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const msg = "promotion failed; retrying"
		p, logs := newTestPromoter(t, shards("1", "2"))
		// Shard 1 is unreachable; shard 2 has 3 sealed windows.
		var failing atomic.Bool
		failing.Store(true)
		s := &stepper{answer: func(_ context.Context, shard string, n int) (promoter.Look, error) {
			if shard == "1" && failing.Load() {
				return promoter.Look{}, fmt.Errorf("promoter: look for a window: %w", errors.New("connection refused"))
			}
			return promoter.Look{Promoted: shard == "2" && n < 3, Known: true}, nil
		}}
		start := time.Now()
		runPromoter(t, p, s)
		time.Sleep(95 * time.Second)
		synctest.Wait()

		// Shard 2's windows were promoted back to back despite shard 1.
		got := s.on("2")
		if want := every(start, 0, 4); len(got) < 5 || !slices.EqualFunc(got[:4], want, time.Time.Equal) || !got[4].Equal(start.Add(interval)) {
			t.Fatalf("shard 2 stepped at %v: want 4 steps at once, then one per interval", offsets(got, start))
		}
		// Shard 1 was retried every round, each failure counted.
		failed := s.on("1")
		if !slices.EqualFunc(failed, got, time.Time.Equal) {
			t.Fatalf("shard 1 stepped at %v, shard 2 at %v: want the same rounds", offsets(failed, start), offsets(got, start))
		}
		if st := p.Stats(); st.Errors != uint64(len(failed)) {
			t.Fatalf("%d errors counted, want %d", st.Errors, len(failed))
		}
		// Logged at the first failure, then at the first failure more
		// than 30 s after the last line.
		lines := logs.with(msg)
		var want []time.Time
		for _, at := range failed {
			if len(want) == 0 || at.Sub(want[len(want)-1]) > 30*time.Second {
				want = append(want, at)
			}
		}
		var logged []time.Time
		for _, l := range lines {
			logged = append(logged, l.at)
			if l.Shard != "1" || l.Error == "" || l.Level != "error" {
				t.Errorf("line %+v: want an error of shard 1", l)
			}
		}
		if len(want) != 4 || !slices.EqualFunc(logged, want, time.Time.Equal) {
			t.Fatalf("logged at %v, want %v (at most one line per 30 s)", offsets(logged, start), offsets(want, start))
		}

		// Shard 1 answers again: no more errors.
		failing.Store(false)
		errs := p.Stats().Errors
		time.Sleep(10 * interval)
		if st := p.Stats(); st.Errors != errs {
			t.Fatalf("errors grew from %d to %d after shard 1 recovered", errs, st.Errors)
		}
	})
}

func TestRunStopsOnCancel(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, _ := newTestPromoter(t, shards("1"))
			s := &stepper{}
			stop, done := runPromoter(t, p, s)
			time.Sleep(interval / 2) // between two polls
			at := time.Now()
			stop()
			synctest.Wait()
			select {
			case <-done:
			default:
				t.Fatal("Run still running after its context ended")
			}
			if !time.Now().Equal(at) {
				t.Errorf("Run returned %v after the cancel, want at once", time.Since(at))
			}
			if n := len(s.on("1")); n != 1 {
				t.Errorf("%d steps, want 1", n)
			}
		})
	})
	t.Run("in a step", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, logs := newTestPromoter(t, shards("1", "2"))
			// Shard 1's step waits for its query, which the cancel ends.
			s := &stepper{answer: func(ctx context.Context, shard string, _ int) (promoter.Look, error) {
				<-ctx.Done()
				return promoter.Look{}, fmt.Errorf("promoter: look for a window: %w", ctx.Err())
			}}
			stop, done := runPromoter(t, p, s)
			synctest.Wait()
			stop()
			synctest.Wait()
			select {
			case <-done:
			default:
				t.Fatal("Run still running after its context ended")
			}
			if n1, n2 := len(s.on("1")), len(s.on("2")); n1 != 1 || n2 != 0 {
				t.Errorf("steps: %d on shard 1, %d on shard 2; want 1 and none after the cancel", n1, n2)
			}
			if st := p.Stats(); st.Errors != 0 || len(logs.with("promotion failed; retrying")) != 0 {
				t.Errorf("the cancelled step counted (%d errors) or logged as a failure", st.Errors)
			}
		})
	})
}

func TestClusterPromoterRetriesTheResolver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const msg = "cannot reach the cluster's shards yet; retrying"
		sh := shards("1", "2")
		var mu sync.Mutex
		var resolved []time.Time
		resolve := func(ctx context.Context) ([]promoter.Shard, error) {
			mu.Lock()
			defer mu.Unlock()
			resolved = append(resolved, time.Now())
			switch n := len(resolved); {
			case n > 10:
				return sh, nil
			case n%3 == 0:
				return nil, nil // no shard yet: retried as an error
			default:
				return nil, errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")
			}
		}
		log, logs := testLogger(t)
		p, err := promoter.NewCluster(resolve, promoter.Config{Interval: interval, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		s := &stepper{}
		start := time.Now()
		stop, done := runPromoter(t, p, s)
		time.Sleep(70 * time.Second)
		stop()
		<-done

		// The waits double from the interval up to 10 s.
		mu.Lock()
		got := slices.Clone(resolved)
		mu.Unlock()
		want := []time.Time{start}
		for _, wait := range []time.Duration{interval, 2 * interval, 4 * interval, 8 * interval, 16 * interval, 32 * interval,
			10 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second} {
			want = append(want, want[len(want)-1].Add(wait))
		}
		if !slices.EqualFunc(got, want, time.Time.Equal) {
			t.Fatalf("resolved at %v, want %v", offsets(got, start), offsets(want, start))
		}
		// Logged at the first failure and at the first more than 30 s
		// later (35.75 s), not at each.
		var logged []time.Time
		for _, l := range logs.with(msg) {
			logged = append(logged, l.at)
		}
		if w := []time.Time{want[0], want[8]}; !slices.EqualFunc(logged, w, time.Time.Equal) {
			t.Errorf("logged at %v, want %v", offsets(logged, start), offsets(w, start))
		}
		// Then the shards were promoted from the moment they resolved, and
		// closed once when Run returned.
		for _, name := range []string{"1", "2"} {
			if at := s.on(name); len(at) == 0 || !at[0].Equal(want[10]) {
				t.Errorf("shard %s stepped at %v, want from %v", name, offsets(at, start), want[10].Sub(start))
			}
		}
		for _, sh := range sh {
			if n := sh.Conn.(*fakeConn).closed.Load(); n != 1 {
				t.Errorf("shard %s closed %d times, want once", sh.Name, n)
			}
		}
	})
}

func TestClusterPromoterStopsWhileResolving(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		resolve := func(ctx context.Context) ([]promoter.Shard, error) {
			calls.Add(1)
			return nil, errors.New("connection refused")
		}
		p, err := promoter.NewCluster(resolve, promoter.Config{Interval: interval, Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		s := &stepper{}
		stop, done := runPromoter(t, p, s)
		time.Sleep(5 * time.Second)
		n := calls.Load()
		stop()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("Run still resolving after its context ended")
		}
		time.Sleep(time.Minute)
		if calls.Load() != n || len(s.calls) != 0 {
			t.Fatalf("resolved %d times after the cancel, stepped %d times", calls.Load()-n, len(s.calls))
		}
	})
}

// offsets are times as durations since start, for messages.
func offsets(at []time.Time, start time.Time) []time.Duration {
	out := make([]time.Duration, len(at))
	for i, t := range at {
		out[i] = t.Sub(start)
	}
	return out
}

// The lag is the age of the oldest sealed, unpromoted window, failures
// included: it grows while every step fails, from the last age a shard
// told, or from the last time it said none waited; it is 0 when idle.
func TestRunLagWhileStepsFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newTestPromoter(t, shards("1", "2"))
		var failing atomic.Bool
		s := &stepper{answer: func(_ context.Context, shard string, n int) (promoter.Look, error) {
			switch {
			case failing.Load():
				return promoter.Look{}, errors.New("connection refused")
			case shard == "1" && n == 0:
				// A window sealed, waiting for another promoter (5 s after its end).
				return promoter.Look{Known: true, Age: 5 * time.Second}, nil
			}
			return promoter.Look{Known: true, Idle: true}, nil
		}}
		runPromoter(t, p, s)
		synctest.Wait()
		if got, want := p.Stats().Lag, 5*time.Second; got != want {
			t.Fatalf("lag %v, want %v", got, want)
		}
		time.Sleep(interval)
		synctest.Wait()
		if got := p.Stats().Lag; got != 0 {
			t.Fatalf("lag %v once the window was promoted, want 0", got)
		}
		// A quiet minute: still 0 (no jump from the last promoted window).
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := p.Stats().Lag; got != 0 {
			t.Fatalf("lag %v after a quiet minute, want 0", got)
		}
		// ClickHouse goes away: the lag grows from the last clear answer.
		failing.Store(true)
		began := time.Now()
		time.Sleep(30*time.Second + interval/2)
		synctest.Wait()
		if got, want := p.Stats().Lag, time.Since(began).Truncate(interval); got != want {
			t.Fatalf("lag %v after %v of failures, want %v", got, time.Since(began), want)
		}
	})
}

// A sealed window that fails to promote keeps its age growing.
func TestRunLagWhilePromotionFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newTestPromoter(t, shards("1"))
		start := time.Now()
		s := &stepper{answer: func(_ context.Context, _ string, n int) (promoter.Look, error) {
			// Found sealed, 4 s old, at the first step; every insert fails.
			return promoter.Look{Known: true, Age: 4*time.Second + time.Since(start)}, errors.New("insert: timeout")
		}}
		runPromoter(t, p, s)
		time.Sleep(10*time.Second + interval/2)
		synctest.Wait()
		if got, want := p.Stats().Lag, 14*time.Second; got != want {
			t.Fatalf("lag %v, want %v", got, want)
		}
		if st := p.Stats(); st.Errors != 41 {
			t.Fatalf("%d errors, want one per step (41)", st.Errors)
		}
	})
}

func TestRegisterMetrics(t *testing.T) {
	p, _ := newTestPromoter(t, shards("1"))
	reg := prometheus.NewRegistry()
	if err := p.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, want := range []string{"itlmon_promote_lag_seconds", "itlmon_promote_blocked_shards", "itlmon_promote_blocked_windows_total",
		"itlmon_promote_join_conflicts_total", "itlmon_promote_heartbeat_errors_total", "itlmon_promote_windows_total"} {
		if !names[want] {
			t.Errorf("%s not registered; got %v", want, names)
		}
	}
	if got, want := len(mfs), 14+2; got != want {
		t.Errorf("%d metric families, want %d", got, want)
	}
}

// Hold waits for the step under way, no step starts while held, the next
// starts at release, and a held promoter still stops when its context ends.
func TestHoldKeepsStepsOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newTestPromoter(t, shards("1"))
		const took = 100 * time.Millisecond
		s := &stepper{answer: func(context.Context, string, int) (promoter.Look, error) {
			time.Sleep(took)
			return promoter.Look{Known: true, Age: 1500 * time.Millisecond}, nil
		}}
		start := time.Now()
		stop, done := runPromoter(t, p, s)
		// Steps start at 0, 350 and 700 ms; Hold comes during the third.
		time.Sleep(750 * time.Millisecond)
		release := p.Hold()
		if held := time.Since(start); held != 800*time.Millisecond {
			t.Errorf("Hold returned at %v, want 800ms (the end of the step under way)", held)
		}
		time.Sleep(2200 * time.Millisecond)
		release()
		release() // a second call does nothing
		synctest.Wait()
		want := []time.Time{start, start.Add(350 * time.Millisecond), start.Add(700 * time.Millisecond), start.Add(3 * time.Second)}
		if got := s.on("1"); !slices.EqualFunc(got, want, time.Time.Equal) {
			t.Errorf("stepped at %v, want %v", offsets(got, start), offsets(want, start))
		}
		time.Sleep(took)
		p.Hold()
		stop()
		<-done
	})
}
