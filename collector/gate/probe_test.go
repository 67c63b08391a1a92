package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/itlmon/itlmon/internal/memnet"
	"github.com/itlmon/itlmon/wasm/meter"
)

// cadence describes a test server's stream: events content events, one every
// every, k tokens per event, and a hitch of hitch before every hitchEvery-th event.
type cadence struct {
	events     int
	every      time.Duration
	k          int
	hitch      time.Duration
	hitchEvery int
	usage      bool // send the OpenAI usage chunk with completion_tokens = events*k
}

// The test servers are real http.Servers on an in-memory network (memnet),
// which the probe dials (Env.DialContext): inside a testing/synctest bubble
// their cadence runs on the fake clock, so the probe measures it exactly
// however loaded the machine.
var testNet = memnet.NewNetwork()

// testServer is a server on testNet.
type testServer struct {
	URL   string
	close func()
}

// Close stops the server: dials to it are refused.
func (s *testServer) Close() { s.close() }

func serveTest(t *testing.T, h http.Handler) *testServer {
	t.Helper()
	ln, addr := testNet.Listen()
	srv := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	var once sync.Once
	s := &testServer{URL: "http://" + addr, close: func() {
		once.Do(func() {
			srv.Close()
			<-served
		})
	}}
	t.Cleanup(s.Close)
	return s
}

// streamServer is an OpenAI-compatible SSE endpoint with a controlled cadence.
func streamServer(t *testing.T, c cadence) *testServer {
	t.Helper()
	srv := serveTest(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk-test-secret-123456" {
			http.Error(w, `{"error":"bad key"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		fl := w.(http.Flusher)
		send := func(s string) {
			fmt.Fprintf(w, "data: %s\n\n", s)
			fl.Flush()
		}
		send(`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`)
		word := strings.Repeat("tok ", max(c.k, 1))
		next := time.Now()
		for i := range c.events {
			next = next.Add(c.every)
			if c.hitchEvery > 0 && i > 0 && i%c.hitchEvery == 0 {
				next = next.Add(c.hitch)
			}
			select { // the client gone, or the server closed: stop
			case <-time.After(time.Until(next)):
			case <-r.Context().Done():
				return
			}
			send(`{"choices":[{"index":0,"delta":{"content":"` + word + `"}}]}`)
		}
		if c.usage {
			send(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":%d,"total_tokens":%d}}`, c.events*max(c.k, 1), 12+c.events*max(c.k, 1)))
		}
		send("[DONE]")
	}))
	return srv
}

// jsonResult is the part of `gate --json` the tests read.
type jsonResult struct {
	Pass   bool `json:"pass"`
	Report struct {
		Streams   int64 `json:"streams"`
		Errors    int64 `json:"errors"`
		Tokens    int64 `json:"tokens"`
		ITL       jsonDist
		ITLTokens jsonDist `json:"itl_tokens"`
		TTFT      jsonDist
		TPS       float64 `json:"tokens_per_sec_p50"`
		Jank      float64 `json:"jank"`
		Verdict   string  `json:"verdict"`
	} `json:"report"`
	Checks []Check `json:"checks"`
}

type jsonDist struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
}

func (r *jsonResult) check(t *testing.T, flag string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Flag == flag {
			return c
		}
	}
	t.Fatalf("no check %s in %+v", flag, r.Checks)
	return Check{}
}

type run struct {
	code           int
	stdout, stderr string
}

func runGate(t *testing.T, env map[string]string, args ...string) run {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, Env{
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
		Getenv:      func(k string) string { return env[k] },
		DialContext: testNet.DialContext,
	})
	return run{code, out.String(), errb.String()}
}

var keyEnv = map[string]string{"TEST_KEY": "sk-test-secret-123456"}

func probeJSON(t *testing.T, url string, extra ...string) (run, jsonResult) {
	t.Helper()
	args := append([]string{"probe", url, "-H", "Authorization: Bearer $TEST_KEY", "--json",
		"--concurrency", "4", "--requests", "4", "--warmup", "1"}, extra...)
	r := runGate(t, keyEnv, args...)
	var res jsonResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("exit %d, stdout not JSON: %v\n%s\nstderr: %s", r.code, err, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, "sk-test-secret") {
		t.Errorf("the API key was printed:\n%s\n%s", r.stdout, r.stderr)
	}
	return r, res
}

func TestProbeSmoothPasses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// 50 ms gaps: the jank limit (5x the median) leaves 200 ms for scheduling
		// noise on a loaded CI machine.
		srv := streamServer(t, cadence{events: 30, every: 50 * time.Millisecond, usage: true})
		r, res := probeJSON(t, srv.URL+"/v1/chat/completions")
		if got, want := r.code, ExitPass; got != want {
			t.Fatalf("exit = %d, want %d\n%s%s", got, want, r.stdout, r.stderr)
		}
		if got, want := res.Report.Streams, int64(4); got != want {
			t.Errorf("streams = %d, want %d (warm-up not counted)", got, want)
		}
		if got, want := res.Report.ITL.Count, uint64(4*29); got != want {
			t.Errorf("ITL gaps = %d, want %d", got, want)
		}
		if got, want := res.Report.Tokens, int64(4*30); got != want {
			t.Errorf("tokens = %d, want %d", got, want)
		}
		if p50 := res.Report.ITL.P50; p50 < 49 || p50 > 80 {
			t.Errorf("ITL p50 = %.2f ms, want about 50", p50)
		}
		if got, want := res.Report.Verdict, "SMOOTH"; got != want {
			t.Errorf("verdict = %s, want %s", got, want)
		}
	})
}

func TestProbeSlowFailsTokensPerSecond(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := streamServer(t, cadence{events: 14, every: 150 * time.Millisecond, usage: true})
		// The ITL p99 limit is raised from its default (250 ms) to 1 s so that only
		// tokens/s can fail here: on a loaded machine one late arrival among
		// these 52 gaps is their p99 and can pass 250 ms (seen: 432 ms).
		// TestProbeStutterFailsP99AndJank tests the p99 check itself.
		r, res := probeJSON(t, srv.URL, "--max-itl-p99", "1s")
		if got, want := r.code, ExitFail; got != want {
			t.Fatalf("exit = %d, want %d\n%s%s", got, want, r.stdout, r.stderr)
		}
		tps := res.check(t, "--min-tps-p50")
		if tps.Pass || tps.Value > 7 || tps.Value < 4 {
			t.Errorf("tokens/s check = %+v, want a fail at about 6.7 tokens/s", tps)
		}
		if !strings.HasPrefix(tps.Margin, "short by ") {
			t.Errorf("margin = %q, want \"short by ...\"", tps.Margin)
		}
		if c := res.check(t, "--max-itl-p99"); !c.Pass {
			t.Errorf("ITL p99 check failed on a steady 150 ms cadence: %+v", c)
		}
		if c := res.check(t, "--max-jank"); !c.Pass {
			t.Errorf("jank check failed on a steady cadence: %+v", c)
		}
	})
}

func TestProbeStutterFailsP99AndJank(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// A 400 ms hitch every 50 tokens: 2 per 149 gaps, over 1 % of gaps.
		srv := streamServer(t, cadence{events: 150, every: 10 * time.Millisecond, hitch: 400 * time.Millisecond, hitchEvery: 50, usage: true})
		r, res := probeJSON(t, srv.URL, "--junit", filepath.Join(t.TempDir(), "junit.xml"))
		if got, want := r.code, ExitFail; got != want {
			t.Fatalf("exit = %d, want %d\n%s%s", got, want, r.stdout, r.stderr)
		}
		p99 := res.check(t, "--max-itl-p99")
		// The hitches are 2/149 > 1 % of gaps, so p99 lands on them (~410 ms; a
		// loaded machine can shift single arrivals by tens of ms).
		if p99.Pass || p99.Value < 300 {
			t.Errorf("ITL p99 check = %+v, want a fail at about 410 ms", p99)
		}
		if !strings.HasPrefix(p99.Margin, "over by ") {
			t.Errorf("margin = %q, want \"over by ...\"", p99.Margin)
		}
		if c := res.check(t, "--max-jank"); c.Pass || c.Value < 10 {
			t.Errorf("jank check = %+v, want a fail far above 5", c)
		}
		if c := res.check(t, "--min-tps-p50"); !c.Pass {
			t.Errorf("tokens/s check failed: %+v", c)
		}
		if got, want := res.Report.Verdict, "JANKY"; got != want {
			t.Errorf("verdict = %s, want %s", got, want)
		}
	})
}

func TestProbeBatchedReportsBothITLs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := streamServer(t, cadence{events: 40, every: 20 * time.Millisecond, k: 4, usage: true})
		// Only the reporting matters here: the timing gates are off.
		r, res := probeJSON(t, srv.URL, "--max-jank", "0", "--max-itl-p99", "0")
		if r.code != ExitPass {
			t.Fatalf("exit = %d, want %d\n%s%s", r.code, ExitPass, r.stdout, r.stderr)
		}
		rep := res.Report
		if got, want := rep.Tokens, int64(4*4*40); got != want {
			t.Errorf("tokens = %d, want %d (from usage)", got, want)
		}
		if got, want := rep.ITL.Count, uint64(4*39); got != want {
			t.Errorf("chunk ITL gaps = %d, want %d", got, want)
		}
		if got, want := rep.ITLTokens.Count, uint64(4*39*4); got != want {
			t.Errorf("token ITL samples = %d, want %d", got, want)
		}
		if ratio := rep.ITL.P50 / rep.ITLTokens.P50; math.Abs(ratio-4) > 4*0.05 {
			t.Errorf("chunk ITL p50 / token ITL p50 = %.2f (%.2f / %.2f ms), want 4", ratio, rep.ITL.P50, rep.ITLTokens.P50)
		}
		// tokens/s counts tokens, not events: about 4/20 ms = 200.
		if rep.TPS < 120 || rep.TPS > 205 {
			t.Errorf("tokens/s p50 = %.1f, want about 200", rep.TPS)
		}
		// Both lines appear in the text report, labelled.
		txt := runGate(t, keyEnv, "probe", srv.URL, "-H", "Authorization: Bearer $TEST_KEY", "--requests", "1", "--concurrency", "1")
		for _, want := range []string{"ITL (per chunk)", "ITL (per token)", "token gaps"} {
			if !strings.Contains(txt.stdout, want) {
				t.Errorf("text report lacks %q:\n%s", want, txt.stdout)
			}
		}
	})
}

func TestProbeExitCodesAndRedaction(t *testing.T) {
	t.Parallel()
	srv := streamServer(t, cadence{events: 5, every: time.Millisecond})
	dead := serveTest(t, http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()

	bodyFile := filepath.Join(t.TempDir(), "body.json")
	os.WriteFile(bodyFile, []byte(`{"model":"x","stream":true}`), 0o644)
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		want   int
		stderr string
	}{
		{"no source", nil, nil, ExitUsage, "usage"},
		{"unknown source", nil, []string{"bench"}, ExitUsage, "want probe or rum"},
		{"no url", nil, []string{"probe"}, ExitUsage, "want exactly one URL"},
		{"bad url", nil, []string{"probe", "ftp://x"}, ExitUsage, "http:// or https://"},
		{"bad flag", nil, []string{"probe", srv.URL, "--concurrency", "x"}, ExitUsage, "invalid value"},
		{"missing env", nil, []string{"probe", srv.URL, "-H", "Authorization: Bearer $TEST_KEY"}, ExitUsage, "TEST_KEY is not set"},
		{"bad header", keyEnv, []string{"probe", srv.URL, "-H", "nocolon"}, ExitUsage, "want 'Name: value'"},
		{"wrong key", map[string]string{"TEST_KEY": "sk-wrong-key-999999"}, []string{"probe", srv.URL, "-H", "Authorization: Bearer $TEST_KEY", "--requests", "2"}, ExitUsage, "refused the credentials"},
		{"refused", keyEnv, []string{"probe", deadURL + "/v1?api_key=sk-query-secret", "--requests", "1", "--timeout", "5s"}, ExitUsage, "connection refused"},
		{"bad share", keyEnv, []string{"probe", srv.URL, "--max-stall-share", "150%"}, ExitUsage, "want a share"},
		{"body file and model", keyEnv, []string{"probe", srv.URL, "-H", "Authorization: Bearer $TEST_KEY", "--body", bodyFile, "--model", "m2", "--requests", "1", "--min-tps-p50", "0", "--max-jank", "0", "--max-itl-p99", "0"}, ExitPass, ""},
		{"help", nil, []string{"probe", "-h"}, ExitPass, "Synthetic streaming load"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runGate(t, tc.env, tc.args...)
			if r.code != tc.want {
				t.Errorf("exit = %d, want %d\nstdout: %s\nstderr: %s", r.code, tc.want, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("stderr = %q, want it to mention %q", r.stderr, tc.stderr)
			}
			for _, secret := range []string{"sk-wrong-key", "sk-test-secret", "sk-query-secret"} {
				if strings.Contains(r.stdout+r.stderr, secret) {
					t.Errorf("output leaks %s:\n%s\n%s", secret, r.stdout, r.stderr)
				}
			}
		})
	}
}

func TestJUnitAndText(t *testing.T) {
	res := newResult("probe", "http://x/v1", sampleReport(), DefaultThresholds())
	var b bytes.Buffer
	if err := res.WriteJUnit(&b); err != nil {
		t.Fatal(err)
	}
	var suites junitSuites
	if err := xml.Unmarshal(b.Bytes(), &suites); err != nil {
		t.Fatalf("junit is not XML: %v\n%s", err, b.String())
	}
	s := suites.Suites[0]
	if got, want := s.Tests, 3; got != want {
		t.Errorf("tests = %d, want %d", got, want)
	}
	if got, want := s.Failures, 2; got != want {
		t.Errorf("failures = %d, want %d\n%s", got, want, b.String())
	}
	if f := s.Cases[0].Failure; f == nil || !strings.Contains(f.Message, "over by") {
		t.Errorf("first case should be the failure with its margin: %+v", s.Cases[0])
	}
	b.Reset()
	res.WriteText(&b)
	for _, want := range []string{"FAIL: 2 of 3 checks failed", "ITL p99 400 ms > 250 ms (--max-itl-p99), over by 150 ms (+60%)", "TTFT", "reading floor", "JANKY"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

func TestProbeDurationAndNDJSON(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// An Ollama-style NDJSON endpoint: any streaming format the meter knows works.
		srv := serveTest(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-ndjson")
			fl := w.(http.Flusher)
			for i := range 12 {
				time.Sleep(5 * time.Millisecond)
				fmt.Fprintf(w, `{"model":"m","message":{"role":"assistant","content":"w%d "},"done":false}`+"\n", i)
				fl.Flush()
			}
			fmt.Fprint(w, `{"model":"m","message":{"role":"assistant","content":""},"done":true,"eval_count":12}`+"\n")
		}))
		r := runGate(t, nil, "probe", srv.URL+"/api/chat", "--duration", "400ms", "--concurrency", "2", "--json",
			"--max-jank", "0", "--max-itl-p99", "0") // 5 ms gaps: only the count matters here
		var res jsonResult
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("exit %d: %v\n%s%s", r.code, err, r.stdout, r.stderr)
		}
		if r.code != ExitPass {
			t.Errorf("exit = %d, want %d\n%s", r.code, ExitPass, r.stdout)
		}
		if res.Report.Streams < 2 || res.Report.Errors != 0 {
			t.Errorf("streams = %d, errors = %d; want >= 2 streams in 400 ms, none failed", res.Report.Streams, res.Report.Errors)
		}
		if got, want := res.Report.ITL.Count, uint64(res.Report.Streams*11); got != want {
			t.Errorf("ITL gaps = %d, want %d (11 per stream)", got, want)
		}
	})
}

func BenchmarkAggregatorAdd(b *testing.B) {
	var sums []meter.Summary
	for i := range 16 {
		m := meter.New(meter.Options{ContentType: "text/event-stream"})
		ev := []byte(`data: {"choices":[{"index":0,"delta":{"content":"tok "}}]}` + "\n\n")
		for k := range 300 {
			m.Feed(ev, meter.Duration(100+k*20+i)*meter.Millisecond)
		}
		m.End(7*meter.Second, meter.StatusComplete, 200)
		sums = append(sums, m.Summary())
	}
	b.ReportAllocs()
	b.ResetTimer()
	var a Aggregator
	for i := range b.N {
		a.Add(&sums[i%len(sums)])
	}
	_ = a.Report()
}

func TestProbeInterrupted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := streamServer(t, cadence{events: 100, every: 50 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		var out, errb bytes.Buffer
		code := Main(ctx, []string{"probe", srv.URL, "-H", "Authorization: Bearer $TEST_KEY"}, Env{Stdout: &out, Stderr: &errb,
			Getenv: func(k string) string { return keyEnv[k] }, DialContext: testNet.DialContext})
		if code != ExitUsage || !strings.Contains(errb.String(), "interrupted") {
			t.Errorf("exit = %d, stderr %q; want %d and \"interrupted\"", code, errb.String(), ExitUsage)
		}
		if out.Len() != 0 {
			t.Errorf("an interrupted probe printed a verdict:\n%s", out.String())
		}
	})
}

// TestProbeBeforeHeaders: requests that get no response headers within the
// timeout count as failed before the headers, and
// --max-before-headers-share gates on their share.
func TestProbeBeforeHeaders(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		stop := make(chan struct{})
		srv := serveTest(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body) // then the server notices the client leave
			if n.Add(1)%2 == 0 {
				select { // never answers
				case <-r.Context().Done():
				case <-stop:
				}
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 5 {
				fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
				w.(http.Flusher).Flush()
				time.Sleep(time.Millisecond)
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
		}))
		t.Cleanup(func() { close(stop) }) // runs before srv.Close
		r := runGate(t, nil, "probe", srv.URL, "--json", "--concurrency", "1", "--requests", "4", "--warmup", "0",
			"--timeout", "500ms", "--min-tps-p50", "0", "--max-jank", "0", "--max-itl-p99", "0", "--max-before-headers-share", "40%", "--max-error-share", "1")
		var res struct {
			Report struct {
				Streams       int64   `json:"streams"`
				Errors        int64   `json:"errors"`
				BeforeHeaders int64   `json:"before_headers"`
				Share         float64 `json:"before_headers_share"`
			} `json:"report"`
			Checks []Check `json:"checks"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("exit %d, stdout not JSON: %v\n%s\nstderr: %s", r.code, err, r.stdout, r.stderr)
		}
		if got, want := fmt.Sprint(res.Report.Streams, res.Report.Errors, res.Report.BeforeHeaders, res.Report.Share), "4 2 2 0.5"; got != want {
			t.Errorf("streams, errors, before headers, share = %s, want %s", got, want)
		}
		text := runGate(t, nil, "probe", srv.URL, "--concurrency", "1", "--requests", "2", "--warmup", "0", "--timeout", "500ms",
			"--min-tps-p50", "0", "--max-jank", "0", "--max-itl-p99", "0", "--max-error-share", "1")
		if want := "2 streams (1 failed, 1 of them before the response headers)"; !strings.Contains(text.stdout, want) {
			t.Errorf("text report lacks %q:\n%s", want, text.stdout)
		}
		pass := map[string]bool{}
		for _, c := range res.Checks {
			pass[c.Flag] = c.Pass
		}
		if p, ok := pass["--max-before-headers-share"]; r.code != ExitFail || !ok || p || !pass["--max-error-share"] {
			t.Errorf("exit %d, checks %+v; want %d, --max-before-headers-share failed, --max-error-share passed", r.code, res.Checks, ExitFail)
		}
	})
}
