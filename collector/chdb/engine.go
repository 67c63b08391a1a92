// Package chdb runs the real ClickHouse engine (libchdb.so from npm
// @chdb/lib-linux-x64-gnu) as a supervised child process that listens on
// loopback, so the collector talks to it with clickhouse-go exactly as it
// would to a production server.
//
// API summary:
//
//	chdb.MaybeRunChild()                 // first line of main and of TestMain
//	e, err := chdb.Start(ctx, chdb.Options{LibPath: ..., Dir: ..., Logger: log})
//	e.NativeAddr(), e.HTTPAddr()         // "127.0.0.1:port" of the current child
//	e.PID(); e.Ready(ctx)                // child's pid (0 while down); wait until it answers
//	e.DialContext(ctx, addr)             // for clickhouse.Options.DialContext: dials the current native port
//	e.Kill()                             // SIGKILL (simulated crash): the supervisor restarts it
//	e.Stop(ctx); e.Restart(ctx)          // outage on purpose: stays down until Restart
//	e.Close(ctx)                         // SIGTERM, SIGKILL after StopTimeout; no restart
//
// The child is this same executable re-executed with ITLMON_CHDB_CHILD=1:
// MaybeRunChild sees it and runs chdb_query_cmdline with --path, --tcp_port,
// --http_port, --listen_host=127.0.0.1 and a query that starts the listeners
// and then sleeps one second per row over system.numbers (measured: under 1 %
// of a core; the process stays up until signalled). The engine is ready when
// GET /ping answers "Ok.": its exit code is never trusted (a busy port prints
// an error and exits 0), so a child that exits before it is ready is retried
// on new ports. Data lives in Options.Dir and persists across restarts.
package chdb

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/internal/halfclose"
)

const (
	defaultReadyTimeout = 60 * time.Second // a cold start on a busy 2-core machine
	defaultStopTimeout  = 10 * time.Second
	pingInterval        = 50 * time.Millisecond
	launchAttempts      = 5 // port collisions are retried on new ports
	minBackoff          = 200 * time.Millisecond
	maxBackoff          = 10 * time.Second
	stableAfter         = 30 * time.Second // a child up this long resets the backoff
)

// blockingQuery starts the listeners and then keeps the engine alive: one
// row per second from an endless table, output discarded.
const blockingQuery = "SYSTEM START LISTEN TCP; SYSTEM START LISTEN HTTP; " +
	"SELECT sleepEachRow(1) FROM system.numbers " +
	"SETTINGS max_block_size = 1, function_sleep_max_microseconds_per_block = 0, max_execution_time = 0 FORMAT Null"

// ErrClosed is returned by operations on a closed Engine.
var ErrClosed = errors.New("chdb: engine closed")

// Options configure Start. Dir is required.
type Options struct {
	LibPath      string         // libchdb.so; default $CHDB_LIB_PATH
	Dir          string         // data directory (--path), created if missing
	Exe          string         // executable to re-exec as the child; default os.Executable()
	Logger       zerolog.Logger // ports, restarts and the child's stderr go here
	NativePort   int            // first port to try for the native protocol; 0 picks a free one
	HTTPPort     int            // first port to try for HTTP; 0 picks a free one
	ReadyTimeout time.Duration  // per launch attempt, until /ping answers; default 60 s
	// ConfigFile is a server configuration file (--config-file), e.g. one
	// holding remote_servers. The command line's ports and path win over it.
	// A config that names this engine's own ports (a cluster of engines)
	// needs NativePort and HTTPPort set and FixedPorts.
	ConfigFile string
	// FixedPorts makes a launch whose ports are taken fail instead of
	// trying new ones, for engines other servers reach by a configured port.
	FixedPorts  bool
	StopTimeout time.Duration // SIGTERM grace before SIGKILL; default 10 s
	// LogFile is the engine's own log (its --logger.log), where it writes
	// why it failed: a fatal signal's stack, a logical error. Default
	// DIR/engine.log; "-" keeps no log. A child that dies has the log's
	// fatal lines since its start copied into Logger's "clickhouse engine
	// died" entry.
	LogFile string
	// LogLevel is the engine log's level (ClickHouse's names: fatal, error,
	// warning, information, debug, trace); default warning.
	LogLevel string
}

// Engine is a running, supervised ClickHouse child process. Its methods are
// safe for concurrent use.
type Engine struct {
	opts Options
	log  zerolog.Logger

	mu      sync.Mutex
	proc    *child        // current child, nil while down
	native  int           // current native (TCP) port
	http    int           // current HTTP port
	up      chan struct{} // closed while a ready child runs; replaced when it exits
	stopped bool          // Stop called: stay down until Restart
	closed  bool
	wake    chan struct{} // nudges the supervisor (Restart, Close)
	closing chan struct{} // closed by Close
	done    chan struct{} // closed when the supervisor has returned
	life    context.Context
	cancel  context.CancelFunc // ends life: aborts a launch in progress at Close

	// launcher starts a child, waits until it answers and publishes it:
	// launch, or a fake that tests the supervisor's restart policy on a
	// fake clock.
	launcher func(ctx context.Context) (*child, error)
}

// child is one engine process.
type child struct {
	pid     int
	logFrom int64                 // size of the engine log when the child started
	signal  func(os.Signal) error // the process's Signal
	exited  chan struct{}         // closed after Wait returned
	err     error                 // Wait's result, valid after exited
}

// Start launches the engine, waits until it answers /ping and supervises it
// until Close: a child that dies is restarted with backoff on the same data.
func Start(ctx context.Context, opts Options) (*Engine, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	e := newEngine(opts)
	e.launcher = e.launch
	began := time.Now()
	if err := e.start(ctx); err != nil {
		return nil, err
	}
	e.log.Info().Str("native", e.NativeAddr()).Str("http", e.HTTPAddr()).
		Dur("took", time.Since(began)).Str("dir", opts.Dir).Msg("clickhouse engine ready")
	return e, nil
}

// newEngine is an Engine with no child yet; start runs its supervisor.
func newEngine(opts Options) *Engine {
	e := &Engine{
		opts:    opts,
		log:     opts.Logger.With().Str("component", "chdb").Logger(),
		native:  opts.NativePort,
		http:    opts.HTTPPort,
		up:      make(chan struct{}),
		wake:    make(chan struct{}, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	e.life, e.cancel = context.WithCancel(context.Background())
	return e
}

// start runs the supervisor and waits for its first launch.
func (e *Engine) start(ctx context.Context) error {
	started := make(chan error, 1)
	go e.supervise(ctx, started)
	if err := <-started; err != nil {
		e.cancel()
		return err
	}
	return nil
}

func (o *Options) setDefaults() error {
	if o.LibPath == "" {
		o.LibPath = os.Getenv("CHDB_LIB_PATH")
	}
	if o.LibPath == "" {
		return errors.New("chdb: no libchdb.so path (set CHDB_LIB_PATH or --chdb-lib)")
	}
	if _, err := os.Stat(o.LibPath); err != nil {
		return fmt.Errorf("chdb: libchdb.so: %w", err)
	}
	if o.Dir == "" {
		return errors.New("chdb: no data directory")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return fmt.Errorf("chdb: data dir: %w", err)
	}
	o.Dir = dir
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return fmt.Errorf("chdb: data dir: %w", err)
	}
	if o.Exe == "" {
		if o.Exe, err = os.Executable(); err != nil {
			return fmt.Errorf("chdb: own executable: %w", err)
		}
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = defaultReadyTimeout
	}
	if o.LogFile == "" {
		o.LogFile = filepath.Join(o.Dir, "engine.log")
	}
	if o.LogLevel == "" {
		o.LogLevel = "warning"
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = defaultStopTimeout
	}
	return nil
}

// NativeAddr is the loopback address of the native protocol (clickhouse-go).
// It may change after a restart that found its old port taken.
func (e *Engine) NativeAddr() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(e.native))
}

// HTTPAddr is the loopback address of the HTTP interface.
func (e *Engine) HTTPAddr() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(e.http))
}

// PID is the process id of the current child, 0 while it is down.
func (e *Engine) PID() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.proc == nil {
		return 0
	}
	return e.proc.pid
}

// DialContext dials the engine's current native address whatever addr says,
// so a client configured once keeps working after a restart on new ports.
// Its signature fits clickhouse.Options.DialContext. Its connections end
// without a TCP reset however the client closes them (internal/halfclose):
// a reset that reaches the engine midway through a statement aborts it.
func (e *Engine) DialContext(ctx context.Context, _ string) (net.Conn, error) {
	return halfclose.Dial(ctx, &net.Dialer{}, "tcp", e.NativeAddr())
}

// Ready blocks until a child is up and answering, or ctx ends.
func (e *Engine) Ready(ctx context.Context) error {
	e.mu.Lock()
	up, closed := e.up, e.closed
	e.mu.Unlock()
	if closed {
		return ErrClosed
	}
	select {
	case <-up:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Kill sends SIGKILL to the current child, as a crash would, and returns
// once it has exited: the engine is down then (Ready waits), and the
// supervisor restarts it after a backoff.
func (e *Engine) Kill() error {
	return e.kill(false)
}

// Crash sends SIGKILL to the current child, as Kill does, and keeps the
// engine down until Restart: a server that died and was not brought back
// yet (a shard away).
func (e *Engine) Crash() error {
	return e.kill(true)
}

func (e *Engine) kill(hold bool) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	c := e.proc
	if hold && c != nil {
		e.stopped = true
	}
	e.mu.Unlock()
	if c == nil {
		return errors.New("chdb: engine not running")
	}
	if err := c.signal(os.Kill); err != nil {
		return err
	}
	<-c.exited
	e.clearProc(c)
	return nil
}

// Stop takes the engine down (SIGTERM, then SIGKILL after StopTimeout) and
// keeps it down until Restart. It returns when the child has exited.
func (e *Engine) Stop(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.stopped = true
	c := e.proc
	e.mu.Unlock()
	err := e.terminate(ctx, c)
	if c != nil {
		e.clearProc(c) // down now, not when the supervisor gets to it: a Restart right after waits for the new child
	}
	return err
}

// Restart brings a stopped engine back up (on its old ports when they are
// free) and waits until it answers, or ctx ends.
func (e *Engine) Restart(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.stopped = false
	e.mu.Unlock()
	e.nudge()
	return e.Ready(ctx)
}

// Close stops the engine for good: SIGTERM, SIGKILL after StopTimeout or when
// ctx ends. Later calls return nil.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	c := e.proc
	close(e.closing)
	e.cancel()
	e.mu.Unlock()
	err := e.terminate(ctx, c)
	<-e.done
	return err
}

func (e *Engine) nudge() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// terminate stops c with SIGTERM, then SIGKILL after StopTimeout or when ctx
// ends, and waits for it to exit. A nil c is a no-op.
func (e *Engine) terminate(ctx context.Context, c *child) error {
	if c == nil {
		return nil
	}
	_ = c.signal(syscall.SIGTERM)
	t := time.NewTimer(e.opts.StopTimeout)
	defer t.Stop()
	select {
	case <-c.exited:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	e.log.Warn().Int("pid", c.pid).Msg("clickhouse engine ignored SIGTERM; killing")
	_ = c.signal(os.Kill)
	<-c.exited
	return nil
}

// supervise launches the first child (reporting the result on started; it
// returns at once on failure), then waits for the child to exit and starts a
// new one unless the exit was asked for (Stop, Close). It runs until Close.
func (e *Engine) supervise(ctx context.Context, started chan<- error) {
	defer close(e.done)
	// Pdeathsig is delivered when the thread that started the child exits:
	// every launch happens on this one thread, locked for the supervisor's
	// lifetime. It is unlocked when the supervisor returns (no child of
	// its is alive then): a goroutine that ends locked ends its thread, and
	// that thread may have run other goroutines before it was locked here,
	// which may have started processes with Pdeathsig of their own (a test
	// binary's collectors and browsers): they would be killed with it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := e.launcher(ctx)
	started <- err
	if err != nil {
		return
	}
	backoff := minBackoff
	for {
		began := time.Now()
		if c != nil {
			<-c.exited
			if !e.clearProc(c) {
				if time.Since(began) > stableAfter {
					backoff = minBackoff
				}
				ev := e.log.Error().Err(c.err).Dur("uptime", time.Since(began)).Dur("restart_in", backoff)
				if lines := e.deathLines(c); len(lines) > 0 {
					ev = ev.Strs("engine_log", lines).Str("engine_log_file", e.opts.LogFile)
				}
				ev.Msg("clickhouse engine died")
				if !e.sleep(backoff) {
					return
				}
				backoff = min(2*backoff, maxBackoff)
			}
		}
		if !e.waitWanted() {
			return
		}
		if c, err = e.launcher(e.life); errors.Is(err, errUnwanted) {
			continue // Stop or Close came during the launch
		} else if err != nil && e.life.Err() != nil {
			return // Close aborted the launch
		} else if err != nil {
			e.log.Error().Err(err).Dur("retry_in", backoff).Msg("clickhouse engine start failed")
			if !e.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		e.log.Info().Str("native", e.NativeAddr()).Str("http", e.HTTPAddr()).Msg("clickhouse engine restarted")
	}
}

// clearProc marks the engine down after c exited (unless already done) and
// reports whether the exit was asked for.
func (e *Engine) clearProc(c *child) (intended bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.proc == c {
		e.proc = nil
		e.up = make(chan struct{})
	}
	return e.stopped || e.closed
}

// waitWanted blocks while the engine is stopped; false once it is closed.
func (e *Engine) waitWanted() bool {
	for {
		e.mu.Lock()
		stopped, closed := e.stopped, e.closed
		e.mu.Unlock()
		if closed {
			return false
		}
		if !stopped {
			return true
		}
		select {
		case <-e.wake:
		case <-e.closing:
			return false
		}
	}
}

// sleep waits d; false if the engine was closed meanwhile.
func (e *Engine) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-e.closing:
		return false
	}
}

// launch starts a child and waits until it answers /ping. The first attempt
// reuses the previous ports; a child that exits before it is ready (a port
// taken) is retried on fresh ones.
func (e *Engine) launch(ctx context.Context) (*child, error) {
	e.mu.Lock()
	native, httpPort := e.native, e.http
	e.mu.Unlock()
	// No engine runs on the directory now: repair what a kill left in the
	// tables' deduplication logs (see reconcileDedupLogs).
	if n, err := reconcileDedupLogs(e.opts.Dir); err != nil {
		e.log.Error().Err(err).Msg("cannot reconcile deduplication logs with the parts; a retried insert may be dropped")
	} else if n > 0 {
		e.log.Warn().Int("block_ids", n).Msg("deduplication logs named parts a kill left uncommitted; dropped those block ids so retries are stored")
	}
	var lastErr error
	for attempt := 0; attempt < launchAttempts; attempt++ {
		if attempt > 0 && e.opts.FixedPorts {
			break
		}
		if attempt > 0 || native == 0 || httpPort == 0 {
			var err error
			if native, httpPort, err = freePorts(); err != nil {
				return nil, err
			}
		}
		c, err := e.spawn(native, httpPort)
		if err != nil {
			return nil, err
		}
		err = e.waitReady(ctx, c, native, httpPort)
		if err == nil {
			if !e.publish(c, native, httpPort) {
				_ = e.terminate(ctx, c)
				return nil, errUnwanted
			}
			return c, nil
		}
		_ = c.signal(os.Kill)
		<-c.exited
		lastErr = err
		if !errors.Is(err, errExitedEarly) {
			break
		}
		e.log.Warn().Err(err).Int("native", native).Int("http", httpPort).Msg("clickhouse engine exited before ready; trying new ports")
	}
	return nil, fmt.Errorf("chdb: start engine: %w", lastErr)
}

// publish makes c the current child unless the engine was closed or stopped
// meanwhile.
func (e *Engine) publish(c *child, native, httpPort int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.stopped {
		return false
	}
	e.proc, e.native, e.http = c, native, httpPort
	close(e.up)
	return true
}

var (
	errExitedEarly = errors.New("engine exited before it was ready")
	errUnwanted    = errors.New("engine stopped or closed during its launch")
)

// spawn starts the child process with its stderr copied to the log.
func (e *Engine) spawn(native, httpPort int) (*child, error) {
	args := []string{
		"--path=" + e.opts.Dir,
		"--tcp_port=" + strconv.Itoa(native),
		"--http_port=" + strconv.Itoa(httpPort),
		"--listen_host=127.0.0.1",
		"--multiquery",
		"--query", blockingQuery,
	}
	if e.opts.ConfigFile != "" {
		args = append([]string{"--config-file=" + e.opts.ConfigFile}, args...)
	}
	var logFrom int64
	if e.opts.LogFile != "-" {
		args = append(args, "--logger.log="+e.opts.LogFile, "--log-level="+e.opts.LogLevel)
		if fi, err := os.Stat(e.opts.LogFile); err == nil {
			logFrom = fi.Size()
		}
	}
	cmd := exec.Command(e.opts.Exe, args...)
	cmd.Dir = e.opts.Dir
	cmd.Env = append(os.Environ(), childEnv+"=1", libEnv+"="+e.opts.LibPath)
	// Own process group: a terminal's Ctrl-C reaches the collector, which
	// drains into the engine before it stops it; the engine dies with the
	// collector (Pdeathsig) if the collector is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("chdb: stderr pipe: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("chdb: start child: %w", err)
	}
	c := &child{pid: cmd.Process.Pid, logFrom: logFrom, signal: cmd.Process.Signal, exited: make(chan struct{})}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		e.logStderr(stderr, cmd.Process.Pid)
	}()
	go func() {
		<-logged // Wait closes the pipe: read it to the end first
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// logStderr logs each line the child writes to stderr.
func (e *Engine) logStderr(r io.Reader, pid int) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "Logging ") && strings.Contains(sc.Text(), " to ") {
			// "Logging warning to DIR/engine.log": the engine says where
			// its log goes at each start.
			e.log.Debug().Int("pid", pid).Str("stderr", sc.Text()).Msg("clickhouse engine")
			continue
		}
		e.log.Warn().Int("pid", pid).Str("stderr", sc.Text()).Msg("clickhouse engine")
	}
}

// waitReady polls GET /ping until it answers "Ok.\n" and the native port
// takes a connection, the child exits, or the ready timeout or ctx ends.
func (e *Engine) waitReady(ctx context.Context, c *child, native, httpPort int) error {
	ctx, cancel := context.WithTimeout(ctx, e.opts.ReadyTimeout)
	defer cancel()
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort)) + "/ping"
	nativeAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(native))
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(pingInterval)
	defer tick.Stop()
	for {
		// /ping answers on the HTTP port; clients use the native one,
		// which must take connections too: a collector's first dial
		// right after /ping answered was refused once (a test's start-up
		// on a quiet machine).
		if ping(ctx, client, url) && accepts(ctx, nativeAddr) {
			return nil
		}
		select {
		case <-c.exited:
			return fmt.Errorf("%w: %v", errExitedEarly, c.err)
		case <-ctx.Done():
			return fmt.Errorf("engine not ready after %v: %w", e.opts.ReadyTimeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// accepts reports whether addr takes a TCP connection, which it ends at
// once, in order.
func accepts(ctx context.Context, addr string) bool {
	c, err := halfclose.Dial(ctx, &net.Dialer{Timeout: time.Second}, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func ping(ctx context.Context, client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	return resp.StatusCode == http.StatusOK && string(body) == "Ok.\n"
}

// freePorts returns two distinct free loopback ports. Another process may
// take them before the child binds them; launch retries then.
func freePorts() (native, httpPort int, err error) {
	var ls [2]net.Listener
	for i := range ls {
		if ls[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			for _, l := range ls[:i] {
				l.Close()
			}
			return 0, 0, fmt.Errorf("chdb: free port: %w", err)
		}
	}
	for _, l := range ls {
		l.Close()
	}
	return ls[0].Addr().(*net.TCPAddr).Port, ls[1].Addr().(*net.TCPAddr).Port, nil
}

// Bounds of what deathLines copies from the engine log.
const (
	deathLogBytes = 64 << 10
	deathLogLines = 40
)

// deathLines returns what the engine logged about its end since c started:
// its <Fatal> lines (a signal's report and stack), or else its last lines.
func (e *Engine) deathLines(c *child) []string {
	if e.opts.LogFile == "-" {
		return nil
	}
	f, err := os.Open(e.opts.LogFile)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() <= c.logFrom {
		return nil // rotated, or nothing written
	}
	from := max(c.logFrom, fi.Size()-deathLogBytes)
	b := make([]byte, fi.Size()-from)
	if _, err := f.ReadAt(b, from); err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if from > c.logFrom && len(all) > 1 {
		all = all[1:] // the first line was cut
	}
	var fatal []string
	for _, l := range all {
		if i := strings.Index(l, "<Fatal>"); i >= 0 && !stackFrame(l[i:]) {
			fatal = append(fatal, l)
		}
	}
	if len(fatal) == 0 && len(all) > 10 {
		return all[len(all)-10:] // a kill: what it was doing
	} else if len(fatal) == 0 {
		return all
	}
	if len(fatal) > deathLogLines {
		fatal = fatal[:deathLogLines] // the first say why
	}
	return fatal
}

// stackFrame reports whether a <Fatal> line is one frame of a stack trace
// ("<Fatal> ClientBase: 12. ? @ 0x000000001c8fa4b3"): the addresses of a
// stripped library, which the log file keeps.
func stackFrame(l string) bool {
	_, rest, ok := strings.Cut(l, ": ")
	if !ok {
		return false
	}
	num, _, ok := strings.Cut(strings.TrimSpace(rest), ". ")
	if !ok || num == "" {
		return false
	}
	for _, r := range num {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
