package benchreport

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/internal/poll"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// TestReportSoak (make bench; ITLMON_SOAK sets the length, default 10m):
// simulated browser tabs at a realistic mix against a collector process
// (with its embedded engine): most tabs open, some never streaming, the
// others streaming an answer now and then, each sending its record at the
// end of the stream over a socket it opens when it has something to send
// and closes after 30 s idle, as the module does. Every 10 s it samples the
// collector's RSS, CPU time and open sockets; at the end it prints records/s
// per collector core, the time to ack (p50, p99), the time from ack to
// readable in itl_streams (p50, p99, one record in readableEvery), RSS over
// time and open sockets against open tabs.
func TestReportSoak(t *testing.T) {
	benchReport(t)
	length := 10 * time.Minute
	if v := os.Getenv("ITLMON_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("ITLMON_SOAK=%q: %v", v, err)
		}
		length = d
	}
	const (
		tabs       = 3000
		idleShare  = 0.3              // tabs open but never asking anything
		meanEvery  = 20 * time.Second // between a streaming tab's answers
		idleClose  = 30 * time.Second // the module's socket idle close
		sampleEach = 10 * time.Second
		// readableEvery: one acked record in this many is looked for in
		// itl_streams until found (about 10 a second at the soak's rate).
		readableEvery = 10
	)
	if lim := raiseFDLimit(t, tabs+1000); lim < tabs+1000 {
		t.Fatalf("RLIMIT_NOFILE %d: too low for %d tabs", lim, tabs)
	}
	p := itlmontest.StartProcess(t, itlmontest.ChdbLib(t), t.TempDir())
	pid := p.Cmd.Process.Pid

	rd := newReadable()
	pollCtx, stopPolls := context.WithCancel(t.Context())
	polled := make(chan struct{})
	go func() { defer close(polled); rd.run(pollCtx, t, p.EngineAddr()) }()
	defer func() { stopPolls(); <-polled }()

	var acked, sent, everStreamed atomic.Int64
	var latMu sync.Mutex
	var lat []time.Duration
	stop := make(chan struct{})
	var wg sync.WaitGroup
	h := http.Header{}
	h.Set("Origin", itlmontest.PageOrigin)
	h.Set("User-Agent", itlmontest.FirefoxUA)
	dialer := websocket.Dialer{HandshakeTimeout: 30 * time.Second, ReadBufferSize: 1024, WriteBufferSize: 1024}
	for tab := range tabs {
		if float64(tab) < idleShare*tabs {
			continue // open, never streams: no socket
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(tab), 7))
			var c *websocket.Conn
			var lastUse time.Time
			var seq uint64
			streamed := false
			defer func() {
				if c != nil {
					c.Close()
				}
			}()
			for {
				wait := time.Duration(r.ExpFloat64() * float64(meanEvery))
				// Close the socket once idle, as the module does.
				if c != nil && wait > idleClose {
					select {
					case <-stop:
						return
					case <-time.After(idleClose - time.Since(lastUse)):
					}
					c.Close()
					c = nil
					wait -= idleClose
				}
				select {
				case <-stop:
					return
				case <-time.After(wait):
				}
				if c == nil {
					var err error
					if c, _, err = dialer.Dial(itlmontest.WSURL(p.URL, "test"), h); err != nil {
						t.Errorf("tab %d: dial: %v", tab, err)
						return
					}
				}
				if !streamed {
					streamed = true
					everStreamed.Add(1)
				}
				seq++
				rec := benchRecord(7, uint32(tab)<<16|uint32(seq))
				frame := itlmontest.BatchBytes(t, seq, []beacon.Record{rec})
				began := time.Now()
				sent.Add(1)
				if err := c.WriteMessage(websocket.BinaryMessage, frame); err != nil {
					t.Errorf("tab %d: send: %v", tab, err)
					return
				}
				c.SetReadDeadline(time.Now().Add(time.Minute))
				if _, msg, err := c.ReadMessage(); err != nil {
					t.Errorf("tab %d: ack: %v", tab, err)
					return
				} else if a, err := beacon.DecodeAck(msg); err != nil || a.Reject != beacon.RejectNone {
					t.Errorf("tab %d: ack %+v, %v", tab, a, err)
					return
				}
				d := time.Since(began)
				if n := acked.Add(1); n%readableEvery == 0 {
					rd.acked(rec.StreamID, time.Now())
				}
				latMu.Lock()
				lat = append(lat, d)
				latMu.Unlock()
				lastUse = time.Now()
			}
		}()
	}

	type sample struct {
		at                  time.Duration
		rss, cpu, engineCPU float64
		sockets, acked      float64
	}
	var samples []sample
	began := time.Now()
	engine := childPID(pid)
	for time.Since(began) < length && !t.Failed() {
		time.Sleep(sampleEach) // sleep: the sampling period, the soak samples a real process over minutes
		samples = append(samples, sample{
			at: time.Since(began), rss: procRSS(t, pid), cpu: procCPU(pid), engineCPU: procCPU(engine),
			sockets: metricValue(t, p.ReadURL, "itlmon_ingest_connections"), acked: float64(acked.Load()),
		})
	}
	close(stop)
	wg.Wait()
	if !poll.Until(time.Minute, readablePoll, func() bool { return rd.left() == 0 }) {
		t.Errorf("%d sampled acked records not readable in itl_streams a minute after the load stopped", rd.left())
	}
	stopPolls()
	<-polled
	if len(samples) < 2 {
		t.Fatalf("%d samples: soak too short", len(samples))
	}

	first, last := samples[0], samples[len(samples)-1]
	secs := (last.at - first.at).Seconds()
	recs := last.acked - first.acked
	latMu.Lock()
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	p50, p99 := q(0.50), q(0.99)
	latMu.Unlock()
	var sockets, rssMin, rssMax float64
	rssMin = first.rss
	for _, s := range samples {
		sockets += s.sockets
		rssMin, rssMax = min(rssMin, s.rss), max(rssMax, s.rss)
	}
	sockets /= float64(len(samples))

	var b strings.Builder
	fmt.Fprintf(&b, "\nsoak: %v, %d open tabs (%.0f%% never asking, the others an answer every %v on average), socket idle close %v\n",
		length, tabs, 100*idleShare, meanEvery, idleClose)
	fmt.Fprintf(&b, "%8s %10s %9s %12s %14s\n", "at", "RSS MiB", "sockets", "records", "collector CPU s")
	for i, s := range samples {
		if i%6 == 5 || i == len(samples)-1 { // each minute
			fmt.Fprintf(&b, "%8s %10.1f %9.0f %12.0f %14.1f\n", s.at.Round(time.Second), s.rss/(1<<20), s.sockets, s.acked, s.cpu)
		}
	}
	fmt.Fprintf(&b, "records acked: %.0f in %.0f s = %.1f records/s; collector CPU %.1f s = %.0f records per collector CPU-second (per core); engine CPU %.1f s\n",
		recs, secs, recs/secs, last.cpu-first.cpu, recs/max(last.cpu-first.cpu, 1e-9), last.engineCPU-first.engineCPU)
	fmt.Fprintf(&b, "time to ack: p50 %v, p99 %v (a flush interval, 1 s, bounds the wait of a lone record)\n", p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	r50, r99, rn := rd.quantiles()
	fmt.Fprintf(&b, "ack to readable in itl_streams under this load: p50 %v, p99 %v (%d records, one acked in %d, looked for every %v: late by up to that)\n",
		r50.Round(time.Millisecond), r99.Round(time.Millisecond), rn, readableEvery, readablePoll)
	fmt.Fprintf(&b, "RSS: %.1f MiB at the first sample, %.1f MiB at the last, %.1f..%.1f MiB over the run\n",
		first.rss/(1<<20), last.rss/(1<<20), rssMin/(1<<20), rssMax/(1<<20))
	fmt.Fprintf(&b, "open sockets: %.0f on average for %d open tabs (%d of which streamed; a socket per tab for the page's life would be %d)\n",
		sockets, tabs, everStreamed.Load(), everStreamed.Load())
	fmt.Println(b.String())
	if sent.Load() != acked.Load() {
		t.Errorf("%d records sent, %d acked", sent.Load(), acked.Load())
	}
}

// procCPU is the user+system CPU time of process pid in seconds (0 if gone).
func procCPU(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// childPID is the first child process of pid (the embedded engine of a
// collector), 0 if none.
func childPID(pid int) int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks { // the child's parent is whichever thread started it
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
			n, _ := strconv.Atoi(f[0])
			return n
		}
	}
	return 0
}
