package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// gatedOrigin streams SSE answers that stop after their first event until
// release is closed, then send the rest: so a test knows every stream is
// open at once without waiting on a clock.
type gatedOrigin struct {
	URL     string
	release chan struct{}
	first   sync.WaitGroup // one per stream the test expects; Done at its first event
}

const gatedTokens = 8

// gatedBody is what gatedOrigin sends for every stream.
var gatedBody = func() string {
	var b strings.Builder
	for i := range gatedTokens {
		fmt.Fprintf(&b, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
	}
	return b.String() + "data: [DONE]\n\n"
}()

func startGatedOrigin(t *testing.T) *gatedOrigin {
	t.Helper()
	g := &gatedOrigin{release: make(chan struct{})}
	g.URL, _ = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		events := strings.SplitAfter(gatedBody, "\n\n")
		w.Write([]byte(events[0]))
		w.(http.Flusher).Flush()
		g.first.Done()
		select {
		case <-g.release:
		case <-r.Context().Done():
			return
		}
		for _, e := range events[1:] {
			w.Write([]byte(e))
			w.(http.Flusher).Flush()
		}
	}))
	return g
}

// TestEdgeConcurrent: 1,000 concurrent measured streams through one Go
// Worker (one isolate, one Go runtime) under workerd, every one complete and
// byte-exact with its timeline posted; and the same 1,000 through the
// JavaScript pass-through in the same workerd. It reports workerd's RSS
// with all of them open against before (ITLMON_EDGE_STREAMS changes the
// count); make bench prints the line.
func TestEdgeConcurrent(t *testing.T) {
	n := 1000
	if v := os.Getenv("ITLMON_EDGE_STREAMS"); v != "" {
		fmt.Sscan(v, &n)
	}
	// The sink without serve's header timeout: the n POSTs start together
	// as the streams end, and on a loaded machine workerd may take longer
	// than that to send them all.
	sink, h := newEdgeSink()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	sink.URL = "http://" + ln.Addr().String()
	g := startGatedOrigin(t)
	wd := startWorkerd(t, g.URL, sink.URL)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, DisableCompression: true}}
	defer client.CloseIdleConnections()

	// one sends a stream through base and returns its body once read to
	// the end; headers closes when the response's first event arrived.
	one := func(base string, opened *sync.WaitGroup) (string, error) {
		req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"stream":true}`))
		req.Header.Set(cfBlobHeader, edgeCFJSON())
		resp, err := client.Do(req)
		opened.Done()
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return "", fmt.Errorf("status %d", resp.StatusCode)
		}
		return string(b), err
	}
	// run opens n streams through base at once, reads workerd's RSS once
	// the origin sent every one its first event and the client has every
	// response's headers, then lets them finish.
	run := func(name, base string) (before, open int64) {
		g.release = make(chan struct{})
		// A first stream, so the Worker (and the Go runtime) runs before
		// the baseline.
		g.first.Add(1)
		var warm sync.WaitGroup
		warm.Add(1)
		close(g.release)
		if body, err := one(base, &warm); err != nil || body != gatedBody {
			t.Fatalf("%s: warm-up stream: %v (%d bytes)", name, err, len(body))
		}
		g.release = make(chan struct{})
		before = wd.rss(t)
		var opened, done sync.WaitGroup
		var bad atomic.Int32
		var firstErr atomic.Value
		g.first.Add(n)
		opened.Add(n)
		done.Add(n)
		for range n {
			go func() {
				defer done.Done()
				body, err := one(base, &opened)
				if err != nil || body != gatedBody {
					bad.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%v (%d bytes)", err, len(body)))
				}
			}()
		}
		g.first.Wait()
		opened.Wait()
		open = wd.rss(t)
		close(g.release)
		done.Wait()
		if b := bad.Load(); b > 0 {
			t.Fatalf("%s: %d of %d streams failed, first: %v", name, b, n, firstErr.Load())
		}
		return before, open
	}
	jsBefore, jsOpen := run("JS pass-through", wd.JSURL)
	goBefore, goOpen := run("Go Worker", wd.URL)

	// Every stream through the Go Worker posted its timeline, complete.
	want := n + 1 // and the warm-up's
	if !sink.changed.Wait(60*time.Second, func() bool { return sink.len() >= want }) {
		t.Fatalf("%d timelines posted, want %d", sink.len(), want)
	}
	sink.mu.Lock()
	ids := map[string]bool{}
	for _, r := range sink.recs {
		if r.Vantage != beacon.VantageEdge || r.Status != uint8(meter.StatusComplete) || r.ContentEvents != gatedTokens {
			sink.mu.Unlock()
			t.Fatalf("timeline %s: vantage %v, %v, %d content events", r.ID, r.Vantage, meter.Status(r.Status), r.ContentEvents)
		}
		ids[r.ID] = true
	}
	sink.mu.Unlock()
	if len(ids) != want {
		t.Fatalf("%d distinct stream ids in %d timelines", len(ids), want)
	}
	mb := func(b int64) float64 { return float64(b) / (1 << 20) }
	per := func(before, open int64) float64 { return mb(open-before) / float64(n) }
	t.Logf("edge concurrency report: %d concurrent measured streams through one isolate: workerd RSS %.1f -> %.1f MB, %.3f MB per stream (goal 0.3); JavaScript pass-through %.1f -> %.1f MB, %.3f MB per stream",
		n, mb(goBefore), mb(goOpen), per(goBefore, goOpen), mb(jsBefore), mb(jsOpen), per(jsBefore, jsOpen))
}

// TestEdgePostDeadline: a collector that accepts the timelines' POSTs and
// never answers. Each POST is aborted at its deadline (ITLMON_POST_TIMEOUT_MS,
// 300 ms here), not left open until the runtime gives up, and the Worker
// counts the dropped ones (in its log).
func TestEdgePostDeadline(t *testing.T) {
	const streams = 3
	var opened, closed atomic.Int32
	var changed changes
	hang := make(chan struct{})
	defer close(hang)
	collector, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then a closed connection ends r's context
		opened.Add(1)
		changed.Notify()
		select {
		case <-r.Context().Done(): // the Worker aborted the POST
		case <-hang:
		}
		closed.Add(1)
		changed.Notify()
	}))
	g := startGatedOrigin(t)
	close(g.release)
	wd := startWorkerd(t, g.URL, collector, [2]string{"ITLMON_POST_TIMEOUT_MS", "300"})
	for range streams {
		g.first.Add(1)
		req, _ := http.NewRequest("POST", wd.URL+"/v1/chat/completions", strings.NewReader(`{"stream":true}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != gatedBody {
			t.Fatalf("body through the Worker: %q", b)
		}
	}
	// 10 s: the deadline is 300 ms; without it a POST stays open until
	// workerd ends the waitUntil work (30 s and more).
	if !changed.Wait(10*time.Second, func() bool { return closed.Load() == streams }) {
		t.Fatalf("%d of %d timeline POSTs still open 10 s after their streams (%d opened)", streams-closed.Load(), streams, opened.Load())
	}
	want := fmt.Sprintf("(%d dropped in this isolate)", streams)
	if !Eventually(10*time.Second, 20*time.Millisecond, func() bool { return strings.Contains(wd.log.String(), want) }) {
		t.Fatalf("workerd log does not count %d dropped POSTs:\n%s", streams, wd.log.String())
	}
}
