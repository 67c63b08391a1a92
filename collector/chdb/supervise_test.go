package chdb

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
)

// The supervisor's restart policy (backoff, its reset, Stop and Restart,
// the SIGTERM grace) on testing/synctest's fake clock, with fake children:
// launching a real engine takes seconds, so these times are only testable
// apart from it (the real engine's restarts are in engine_test.go).

// fakeLauncher is Engine.launcher: each launch records its time and
// publishes a fake child, or fails while fail > 0.
type fakeLauncher struct {
	e          *Engine
	mu         sync.Mutex
	launches   []time.Time
	children   []*fakeChild
	fail       int  // the next launches that fail
	ignoreTerm bool // children ignore SIGTERM
}

type fakeChild struct {
	*child
	once sync.Once
}

// exit ends the child as its process exiting would.
func (c *fakeChild) exit(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.exited)
	})
}

func (f *fakeLauncher) launch(ctx context.Context) (*child, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.launches = append(f.launches, time.Now())
	if f.fail > 0 {
		f.fail--
		return nil, errors.New("engine exited before it was ready")
	}
	fc := &fakeChild{child: &child{pid: 1000 + len(f.launches), exited: make(chan struct{})}}
	ignoreTerm := f.ignoreTerm
	fc.signal = func(sig os.Signal) error {
		if sig == syscall.SIGTERM && ignoreTerm {
			return nil
		}
		go fc.exit(errors.New("signal: " + sig.String()))
		return nil
	}
	if !f.e.publish(fc.child, 9000, 8123) {
		return nil, errUnwanted
	}
	f.children = append(f.children, fc)
	return fc.child, nil
}

func (f *fakeLauncher) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.launches)
}

// crash ends the current child as a crash would and returns when the
// supervisor has seen it (the engine is down).
func (f *fakeLauncher) crash(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	c := f.children[len(f.children)-1]
	f.mu.Unlock()
	c.exit(errors.New("signal: segmentation fault"))
	synctest.Wait()
	if pid := f.e.PID(); pid != 0 {
		t.Fatalf("PID after a crash = %d, want 0 (down)", pid)
	}
}

func startFake(t *testing.T, f *fakeLauncher, stopTimeout time.Duration) *Engine {
	t.Helper()
	e := newEngine(Options{Logger: zerolog.Nop(), StopTimeout: stopTimeout})
	f.e = e
	e.launcher = f.launch
	if err := e.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

// TestRestartBackoff: a child that dies is relaunched after a backoff that
// starts at minBackoff and doubles up to maxBackoff; a child that ran
// stableAfter resets it; a failed launch is retried on the same backoff.
func TestRestartBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeLauncher{}
		e := startFake(t, f, time.Second)
		ctx := context.Background()
		// restartAfter crashes the child and returns how long the engine
		// stayed down.
		restartAfter := func() time.Duration {
			t.Helper()
			f.crash(t)
			down := time.Now()
			if err := e.Ready(ctx); err != nil {
				t.Fatal(err)
			}
			return time.Since(down)
		}
		for i, want := range []time.Duration{
			200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond,
			3200 * time.Millisecond, 6400 * time.Millisecond, maxBackoff, maxBackoff,
		} {
			if got := restartAfter(); got != want {
				t.Fatalf("crash %d: down %v, want %v", i+1, got, want)
			}
		}
		time.Sleep(stableAfter + time.Second) // the child runs long enough to count as stable
		if got := restartAfter(); got != minBackoff {
			t.Fatalf("after a stable run: down %v, want the backoff reset to %v", got, minBackoff)
		}
		// Two failed launches: each waits the next backoff.
		f.mu.Lock()
		f.fail = 2
		f.mu.Unlock()
		before := f.count()
		if got, want := restartAfter(), 400*time.Millisecond+800*time.Millisecond+1600*time.Millisecond; got != want {
			t.Fatalf("two failed launches: down %v, want %v (three backoffs)", got, want)
		}
		if got := f.count() - before; got != 3 {
			t.Fatalf("%d launches, want 3 (two failed, one up)", got)
		}
	})
}

// TestStopRestartClose: a stopped engine stays down however long, Restart
// brings it up at once, Close ends the supervisor and Ready then says so.
func TestStopRestartClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeLauncher{}
		e := startFake(t, f, time.Second)
		ctx := context.Background()
		if err := e.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if pid := e.PID(); pid != 0 { // down when Stop returns: a Restart now waits for a new child
			t.Fatalf("PID after Stop = %d, want 0", pid)
		}
		time.Sleep(time.Hour)
		if n, pid := f.count(), e.PID(); n != 1 || pid != 0 {
			t.Fatalf("an hour after Stop: %d launches, PID %d; want 1 and down", n, pid)
		}
		began := time.Now()
		if err := e.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if n, took := f.count(), time.Since(began); n != 2 || took != 0 {
			t.Fatalf("Restart: %d launches after %v, want 2 at once", n, took)
		}
		if err := e.Close(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-e.done:
		default:
			t.Fatal("the supervisor runs after Close")
		}
		if err := e.Ready(ctx); err != ErrClosed {
			t.Fatalf("Ready after Close = %v, want ErrClosed", err)
		}
	})
}

// TestCrashHolds: a crashed engine (SIGKILL) stays down however long, as a
// stopped one does, until Restart, which brings it up at once; a killed one
// comes back by itself after the backoff.
func TestCrashHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeLauncher{}
		e := startFake(t, f, time.Second)
		ctx := context.Background()
		if err := e.Crash(); err != nil {
			t.Fatal(err)
		}
		if pid := e.PID(); pid != 0 {
			t.Fatalf("PID after Crash = %d, want 0", pid)
		}
		time.Sleep(time.Hour)
		if n, pid := f.count(), e.PID(); n != 1 || pid != 0 {
			t.Fatalf("an hour after Crash: %d launches, PID %d; want 1 and down", n, pid)
		}
		began := time.Now()
		if err := e.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if n, took := f.count(), time.Since(began); n != 2 || took != 0 {
			t.Fatalf("Restart after Crash: %d launches after %v, want 2 at once", n, took)
		}
		if err := e.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := e.Ready(ctx); err != nil {
			t.Fatal(err)
		}
		if n, took := f.count(), time.Since(began); n != 3 || took != minBackoff {
			t.Fatalf("after Kill: %d launches after %v, want 3 after %v (the backoff)", n, took, minBackoff)
		}
	})
}

// TestStopTimeout: a child that ignores SIGTERM is killed after StopTimeout.
func TestStopTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 7 * time.Second
		f := &fakeLauncher{ignoreTerm: true}
		e := startFake(t, f, grace)
		began := time.Now()
		if err := e.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(began); got != grace {
			t.Fatalf("Close took %v, want the SIGTERM grace %v", got, grace)
		}
		if err := f.children[0].err; err == nil || err.Error() != "signal: killed" {
			t.Fatalf("child ended with %v, want killed", err)
		}
	})
}
