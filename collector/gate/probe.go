package gate

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/itlmon/itlmon/wasm/meter"
)

// Probe is synthetic streaming load against one endpoint. Each response body is
// read with a plain net/http client; every Read is stamped on arrival and fed
// to wasm/meter exactly as the browser module feeds it, so the numbers mean
// what the real-user numbers mean.
type Probe struct {
	URL    string
	Method string      // default POST
	Body   []byte      // request body, sent as is
	Header http.Header // sent on every request (values are secrets: never logged)

	Concurrency int           // streams in flight at once (default 1)
	Requests    int           // measured requests; ignored when Duration > 0
	Duration    time.Duration // measure for this long instead of a request count
	Warmup      int           // requests issued first and not counted
	Timeout     time.Duration // per request, headers to end of body (default 2m)

	TokensPerEvent int // known tokens per content event, 0 = from usage or unknown

	Client *http.Client // default: a transport with one connection per worker

	// Dial connects the default transport (nil: the system's network);
	// tests dial in-memory servers with it.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	// Progress, when set, is called from one goroutine after every finished
	// request and on a ticker: done measured requests, total (0 with
	// Duration), elapsed since the first measured request.
	Progress func(p Progress)
}

// Progress is a probe's state for a progress bar.
type Progress struct {
	Done, Total, Failed int
	Warmup              bool // still in the warm-up requests
	Elapsed             time.Duration
	Duration            time.Duration // the --duration budget, 0 with a request count
}

// ProbeResult is what a probe measured.
type ProbeResult struct {
	Agg      Aggregator
	Elapsed  time.Duration // measured phase, first measured request to last end
	Requests int           // measured requests issued
}

// ErrAllFailed is returned (wrapped with the reasons) when no request produced
// a measurable stream: a connection or configuration problem, not a slow model.
var ErrAllFailed = errors.New("every request failed")

const readBufSize = 32 << 10

// Run issues the requests and returns the aggregate. It returns an error only
// when the probe could not measure anything (every request failed) or ctx
// ended before any request finished.
func (p *Probe) Run(ctx context.Context) (*ProbeResult, error) {
	conc := max(p.Concurrency, 1)
	client := p.Client
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = conc
		tr.MaxConnsPerHost = conc
		if p.Dial != nil {
			tr.DialContext = p.Dial
		}
		client = &http.Client{Transport: tr}
		defer tr.CloseIdleConnections()
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}

	type outcome struct {
		sum    meter.Summary
		fail   string // connection-level failure (no response)
		warmup bool
	}
	var (
		issued   atomic.Int64 // requests handed out, warm-up included
		start    time.Time    // first measured request
		startMu  sync.Mutex
		deadline time.Time
	)
	total := p.Warmup + p.Requests
	// next hands out the next request: its index, whether it is warm-up, ok.
	next := func() (warmup, ok bool) {
		if ctx.Err() != nil {
			return false, false
		}
		i := int(issued.Add(1)) - 1
		if i < p.Warmup {
			return true, true
		}
		startMu.Lock()
		if start.IsZero() {
			start = time.Now()
			if p.Duration > 0 {
				deadline = start.Add(p.Duration)
			}
		}
		dl := deadline
		startMu.Unlock()
		if p.Duration > 0 {
			return false, time.Now().Before(dl)
		}
		return false, i < total
	}

	results := make(chan outcome, conc)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, readBufSize)
			for {
				warm, ok := next()
				if !ok {
					return
				}
				sum, fail := p.one(ctx, client, timeout, buf)
				results <- outcome{sum: sum, fail: fail, warmup: warm}
			}
		}()
	}
	go func() { wg.Wait(); close(results) }()

	res := &ProbeResult{}
	var tick <-chan time.Time
	if p.Progress != nil {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		tick = t.C
	}
	var warmDone, done, failed int
	var last time.Time
	report := func() {
		if p.Progress == nil {
			return
		}
		pr := Progress{Done: done, Total: p.Requests, Failed: failed, Duration: p.Duration,
			Warmup: warmDone < p.Warmup}
		if p.Duration > 0 {
			pr.Total = 0
		}
		startMu.Lock()
		if !start.IsZero() {
			pr.Elapsed = time.Since(start)
		}
		startMu.Unlock()
		p.Progress(pr)
	}
	for {
		select {
		case o, ok := <-results:
			if !ok {
				report()
				startMu.Lock()
				if !start.IsZero() {
					res.Elapsed = last.Sub(start)
				}
				startMu.Unlock()
				res.Requests = done
				if done == 0 && ctx.Err() != nil {
					return res, ctx.Err()
				}
				if res.Agg.streams > 0 && res.Agg.errors == res.Agg.streams {
					return res, errors.Join(ErrAllFailed, failureList(res.Agg.failures))
				}
				return res, nil
			}
			if o.warmup {
				warmDone++
				report()
				continue
			}
			done++
			last = time.Now()
			if o.fail != "" {
				res.Agg.streams++
				res.Agg.FailBeforeHeaders(o.fail)
			} else {
				res.Agg.Add(&o.sum)
			}
			if failure(&o.sum) != "" || o.fail != "" {
				failed++
			}
			report()
		case <-tick:
			report()
		}
	}
}

// one runs a single request and returns its summary, or a connection-level
// failure reason when no response arrived.
//
// Every request gets its own Meter: the summary (histograms, stall list) is
// handed to the aggregating goroutine and must not share memory with the next
// request's.
func (p *Probe) one(ctx context.Context, client *http.Client, timeout time.Duration, buf []byte) (meter.Summary, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	method := p.Method
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequestWithContext(ctx, method, p.URL, bytes.NewReader(p.Body))
	if err != nil {
		return meter.Summary{}, "bad request: " + err.Error()
	}
	for k, v := range p.Header {
		req.Header[k] = v
	}
	if req.Header.Get("Content-Type") == "" && len(p.Body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "text/event-stream, application/x-ndjson, */*")
	}

	t0 := time.Now() // just before the request is issued, as in the page
	resp, err := client.Do(req)
	if err != nil {
		return meter.Summary{}, connFailure(err)
	}
	defer resp.Body.Close()
	m := meter.New(meter.Options{
		ContentType: resp.Header.Get("Content-Type"),
		// Go's monotonic clock resolves nanoseconds; only the histogram's
		// zero bucket (<= 1 µs) limits resolution.
		TimerFloor:     meter.Microsecond,
		TokensPerEvent: p.TokensPerEvent,
	})
	if resp.StatusCode >= 400 {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		m.End(meter.Duration(time.Since(t0)), meter.StatusHTTPError, resp.StatusCode)
		return m.Summary(), ""
	}
	for {
		n, err := resp.Body.Read(buf)
		at := meter.Duration(time.Since(t0))
		if n > 0 {
			m.Feed(buf[:n], at)
		}
		switch {
		case err == nil:
			continue
		case errors.Is(err, io.EOF):
			m.End(at, meter.StatusComplete, resp.StatusCode)
		case ctx.Err() != nil:
			m.End(at, meter.StatusAborted, resp.StatusCode)
		default:
			m.End(at, meter.StatusNetworkError, resp.StatusCode)
		}
		return m.Summary(), ""
	}
}
