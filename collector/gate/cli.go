package gate

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/itlmon/itlmon/collector/duration"
	"github.com/itlmon/itlmon/collector/query"
)

// Exit codes.
const (
	ExitPass  = 0 // every check passed
	ExitFail  = 1 // a threshold failed
	ExitUsage = 2 // bad flags, unreachable endpoint or database, nothing measured
)

// Env is what the command line touches outside its arguments.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	StderrTTY      bool // draw a progress bar on Stderr

	// OpenClickHouse connects for `gate rum`; nil means clickhouse-go with
	// the DSN.
	OpenClickHouse func(ctx context.Context, dsn string) (query.Conn, func() error, error)

	// DialContext connects the probe's requests; nil means the system's
	// network (tests serve endpoints in memory, on a fake clock).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// DefaultModel is the model of the default request body.
const DefaultModel = "gpt-4o-mini"

// defaultBody is a sensible OpenAI Chat Completions request: a few hundred
// tokens of prose, streamed, with the usage chunk so tokens are counted.
const defaultBody = `{
  "model": "gpt-4o-mini",
  "messages": [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Explain in about 300 words how a lighthouse keeper's day worked in the 19th century."}
  ],
  "max_tokens": 400,
  "temperature": 0.7,
  "stream": true,
  "stream_options": {"include_usage": true}
}`

const usageTop = `usage: itlmon gate probe URL [flags]     synthetic streaming load against an endpoint
       itlmon gate rum --site KEY [flags]    real-user data from ClickHouse

Exit status: 0 all checks pass, 1 a threshold failed, 2 usage or connection error.
Run "itlmon gate probe -h" or "itlmon gate rum -h" for the flags.
`

// Main runs `itlmon gate ARGS...` and returns the exit code.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	if env.Stdin == nil {
		env.Stdin = os.Stdin
	}
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usageTop)
		return ExitUsage
	}
	switch args[0] {
	case "probe":
		return mainProbe(ctx, args[1:], env)
	case "rum":
		return mainRUM(ctx, args[1:], env)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(env.Stdout, usageTop)
		return ExitPass
	}
	fmt.Fprintf(env.Stderr, "itlmon gate: unknown source %q: want probe or rum\n\n%s", args[0], usageTop)
	return ExitUsage
}

// outputFlags are shared by both sources.
type outputFlags struct {
	json  bool
	junit string
	th    Thresholds
}

func (o *outputFlags) register(fs *flag.FlagSet) {
	o.th = DefaultThresholds()
	fs.BoolVar(&o.json, "json", false, "print the report as JSON on stdout")
	fs.StringVar(&o.junit, "junit", "", "also write a JUnit XML `file` (one test case per check)")
	fs.Float64Var(&o.th.MinTPSP50, "min-tps-p50", o.th.MinTPSP50, "fail when the median stream's tokens/s is below this (0 = off)")
	fs.DurationVar(&o.th.MaxITLP99, "max-itl-p99", o.th.MaxITLP99, "fail when chunk ITL p99 is above this (0 = off)")
	fs.Float64Var(&o.th.MaxJank, "max-jank", o.th.MaxJank, "fail when jank (ITL p99/p50) is above this (0 = off)")
	fs.DurationVar(&o.th.MaxTTFTP95, "max-ttft-p95", 0, "fail when TTFT p95 is above this (default off)")
	fs.Func("max-stall-share", "fail when the `share` of gaps over 200 ms is above this: 0.01 or 1% (default off)", func(s string) error {
		v, err := parseShare(s)
		o.th.MaxStallShare, o.th.SetStallShare = v, true
		return err
	})
	fs.Func("max-before-headers-share", "fail when the `share` of streams aborted or failed before the response headers (before the first byte) is above this: 0.02 or 2% (default off)", func(s string) error {
		v, err := parseShare(s)
		o.th.MaxBeforeHeadersShare, o.th.SetBeforeHeadersShare = v, true
		return err
	})
}

func parseShare(s string) (float64, error) {
	s = strings.TrimSpace(s)
	div := 1.0
	if t, ok := strings.CutSuffix(s, "%"); ok {
		s, div = strings.TrimSpace(t), 100
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || v/div > 1 {
		return 0, fmt.Errorf("want a share like 0.01 or 1%%, got %q", s)
	}
	return v / div, nil
}

// parseInterspersed parses flags that may come before or after positional
// arguments ("probe URL --concurrency 8" and "probe --concurrency 8 URL").
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ", ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func usageError(env Env, fs *flag.FlagSet, format string, a ...any) int {
	fmt.Fprintf(env.Stderr, "itlmon gate %s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	fmt.Fprintf(env.Stderr, "run \"itlmon gate %s -h\" for the flags\n", fs.Name())
	return ExitUsage
}

func mainProbe(ctx context.Context, args []string, env Env) int {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var (
		out     outputFlags
		headers listFlag
		p       = Probe{Method: http.MethodPost}
		body    string
		model   string
		maxErr  string
	)
	out.register(fs)
	fs.Var(&headers, "H", "request header `'Name: value'`, repeatable; $VAR and ${VAR} expand from the environment; values are never printed")
	fs.StringVar(&body, "body", "", "request body from `FILE`, or @- for stdin (default: an OpenAI chat request with \"stream\": true)")
	fs.StringVar(&model, "model", "", "set the body's \"model\" field to `name` (default body: "+DefaultModel+")")
	fs.StringVar(&p.Method, "X", p.Method, "HTTP `method`")
	fs.IntVar(&p.Concurrency, "concurrency", 4, "streams in flight at once (stutter is born when requests share a batch)")
	fs.IntVar(&p.Requests, "requests", 20, "measured requests (ignored with --duration)")
	fs.DurationVar(&p.Duration, "duration", 0, "measure for this long instead of --requests")
	fs.IntVar(&p.Warmup, "warmup", 0, "requests issued first and not counted")
	fs.DurationVar(&p.Timeout, "timeout", 2*time.Minute, "per request, from sending it to the end of the body")
	fs.IntVar(&p.TokensPerEvent, "tokens-per-event", 0, "tokens each content event carries, when known and not reported in usage")
	fs.StringVar(&maxErr, "max-error-share", "0", "fail when more than this `share` of requests fail (HTTP >= 400, reset, timeout, no content): 0.05 or 5%")
	fs.Usage = func() {
		fmt.Fprintf(env.Stderr, "usage: itlmon gate probe URL [flags]\n\nSynthetic streaming load against an OpenAI-compatible (or any SSE/NDJSON) endpoint,\nmeasured with the browser module's own meter.\n\nExample:\n  itlmon gate probe https://api.openai.com/v1/chat/completions \\\n    -H 'Authorization: Bearer $OPENAI_API_KEY' --concurrency 8 --requests 40 --max-ttft-p95 2s\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return ExitPass
	}
	if err != nil {
		return ExitUsage // flag already printed the error and usage
	}
	if len(pos) != 1 {
		return usageError(env, fs, "want exactly one URL, got %d arguments", len(pos))
	}
	u, err := url.Parse(pos[0])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError(env, fs, "URL %q: want an absolute http:// or https:// URL", safeURL(pos[0]))
	}
	p.URL = pos[0]
	if p.Concurrency < 1 || p.Requests < 1 && p.Duration <= 0 || p.Warmup < 0 || p.Timeout <= 0 || p.TokensPerEvent < 0 {
		return usageError(env, fs, "--concurrency and --requests (or --duration) must be >= 1, --warmup and --tokens-per-event >= 0, --timeout > 0")
	}
	if out.th.MaxErrorShare, err = parseShare(maxErr); err != nil {
		return usageError(env, fs, "--max-error-share: %v", err)
	}
	out.th.SetErrorShare = true

	var red redactor
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			red.add(pw)
		}
	}
	for _, kv := range u.Query() {
		for _, v := range kv {
			red.add(v)
		}
	}
	p.Header = http.Header{}
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return usageError(env, fs, "-H: want 'Name: value', got a header without a name or colon")
		}
		var missing []string
		value = os.Expand(strings.TrimSpace(value), func(k string) string {
			v := env.Getenv(k)
			if v == "" {
				missing = append(missing, k)
			}
			return v
		})
		if len(missing) > 0 {
			return usageError(env, fs, "-H %s: environment variable %s is not set (export it, or pass the value)", name, strings.Join(missing, ", "))
		}
		red.add(value)
		p.Header.Add(name, value)
	}

	p.Body = []byte(defaultBody)
	switch {
	case body == "@-":
		if p.Body, err = io.ReadAll(env.Stdin); err != nil {
			return usageError(env, fs, "--body @-: read stdin: %v", err)
		}
	case body != "":
		if p.Body, err = os.ReadFile(strings.TrimPrefix(body, "@")); err != nil {
			return usageError(env, fs, "--body: %v", err)
		}
	}
	if model != "" {
		if p.Body, err = setModel(p.Body, model); err != nil {
			return usageError(env, fs, "--model: %v", err)
		}
	}

	var bar *progressBar
	if env.StderrTTY {
		bar = newProgressBar(env.Stderr)
		p.Progress = bar.draw
	}
	p.Dial = env.DialContext
	res, err := p.Run(ctx)
	if bar != nil {
		bar.clear() // Run calls Progress only while it runs
	}
	if ctx.Err() != nil {
		fmt.Fprintf(env.Stderr, "itlmon gate probe: interrupted after %d measured requests; no verdict\n", res.Requests)
		return ExitUsage
	}
	if err != nil {
		msg := red.String(err.Error())
		fmt.Fprintf(env.Stderr, "itlmon gate probe: %s: %s\n", safeURL(p.URL), strings.ReplaceAll(msg, "\n", ": "))
		fmt.Fprintln(env.Stderr, hint(res))
		return ExitUsage
	}
	result := newResult("probe", safeURL(p.URL), res.Agg.Report(), out.th)
	result.Concurrency = p.Concurrency
	result.Elapsed = res.Elapsed
	result.Failures = res.Agg.Failures()
	return finish(env, &out, &result, &red)
}

// hint says what to fix after every request failed.
func hint(res *ProbeResult) string {
	if res == nil {
		return "check the URL and that the server is up"
	}
	reasons := make([]string, 0, len(res.Agg.Failures()))
	for reason := range res.Agg.Failures() {
		reasons = append(reasons, reason)
	}
	// The most common reason decides the hint.
	sort.Slice(reasons, func(i, j int) bool {
		fi, fj := res.Agg.Failures()[reasons[i]], res.Agg.Failures()[reasons[j]]
		return fi > fj || fi == fj && reasons[i] < reasons[j]
	})
	for _, reason := range reasons {
		switch {
		case strings.HasPrefix(reason, "HTTP 401"), strings.HasPrefix(reason, "HTTP 403"):
			return "the server refused the credentials: check the -H 'Authorization: Bearer $VAR' header and that VAR holds a valid key"
		case strings.HasPrefix(reason, "HTTP 404"):
			return "check the URL path (OpenAI-compatible servers serve /v1/chat/completions)"
		case strings.HasPrefix(reason, "HTTP 400"), strings.HasPrefix(reason, "HTTP 422"):
			return "the server rejected the request body: check --body and --model"
		case strings.HasPrefix(reason, "HTTP 429"):
			return "rate limited: lower --concurrency or raise the account's limits"
		case strings.HasPrefix(reason, "no content"):
			return "the response carried no token events: send \"stream\": true in the body, or check the endpoint streams SSE/NDJSON"
		case strings.Contains(reason, "refused"), strings.Contains(reason, "no such host"):
			return "check the URL's host and port, and that the server is up"
		}
	}
	return "check the URL, the headers and the body"
}

func setModel(body []byte, model string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("the body is not a JSON object, cannot set \"model\": %w", err)
	}
	mv, _ := json.Marshal(model)
	m["model"] = mv
	return json.Marshal(m)
}

// finish prints the result and returns the exit code.
func finish(env Env, out *outputFlags, res *Result, red *redactor) int {
	var b strings.Builder
	var err error
	if out.json {
		err = res.WriteJSON(&b)
	} else {
		err = res.WriteText(&b)
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "itlmon gate: write report: %v\n", err)
		return ExitUsage
	}
	io.WriteString(env.Stdout, red.String(b.String()))
	if out.junit != "" {
		var jb strings.Builder
		if err := res.WriteJUnit(&jb); err == nil {
			err = os.WriteFile(out.junit, []byte(red.String(jb.String())), 0o644)
		}
		if err != nil {
			fmt.Fprintf(env.Stderr, "itlmon gate: --junit: %v\n", err)
			return ExitUsage
		}
	}
	if res.Pass {
		return ExitPass
	}
	return ExitFail
}

func mainRUM(ctx context.Context, args []string, env Env) int {
	fs := flag.NewFlagSet("rum", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var (
		out    outputFlags
		where  listFlag
		site   string
		since  time.Duration
		until  time.Duration
		dsn    string
		minStr int64
	)
	out.register(fs)
	fs.StringVar(&site, "site", "", "site `key` (required)")
	since = time.Hour
	fs.Func("since", "look back this far: a `duration` like 30m, 6h, 7d (default 1h)", func(s string) (err error) {
		since, err = duration.Parse(s)
		return err
	})
	fs.Func("until", "stop this long before now: a `duration` (default now)", func(s string) (err error) {
		until, err = duration.Parse(s)
		return err
	})
	fs.Var(&where, "where", "`dim=value` filter, repeatable ("+strings.Join(query.Dimensions(), ", ")+")")
	fs.StringVar(&dsn, "clickhouse", "", "ClickHouse `dsn`, e.g. clickhouse://default@127.0.0.1:9000/itlmon (default $ITLMON_CLICKHOUSE)")
	fs.Int64Var(&minStr, "min-streams", 1, "fail with exit 2 when fewer streams match (too little data to judge)")
	fs.Usage = func() {
		fmt.Fprintf(env.Stderr, "usage: itlmon gate rum --site KEY [--since 1h] [--where country=DE ...] [flags]\n\nThe same report from real-user streams in ClickHouse (the rollups).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return ExitPass
	}
	if err != nil {
		return ExitUsage
	}
	if len(pos) > 0 {
		return usageError(env, fs, "unexpected argument %q (filters go in --where dim=value)", pos[0])
	}
	if site == "" {
		return usageError(env, fs, "--site is required")
	}
	if since <= 0 || until < 0 || until >= since {
		return usageError(env, fs, "want --since > --until >= 0")
	}
	f := query.Filter{Site: site, Where: map[string]string{}}
	now := time.Now()
	f.Since, f.Until = now.Add(-since), now.Add(-until)
	for _, w := range where {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return usageError(env, fs, "--where %q: want dim=value", w)
		}
		f.Where[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if err := f.Validate(); err != nil {
		return usageError(env, fs, "%v", err)
	}
	if dsn == "" {
		dsn = env.Getenv("ITLMON_CLICKHOUSE")
	}
	if dsn == "" {
		return usageError(env, fs, "no ClickHouse to read: pass --clickhouse DSN or set ITLMON_CLICKHOUSE (\"itlmon serve\" logs its embedded engine's native port: clickhouse://default@127.0.0.1:PORT/itlmon)")
	}
	var red redactor
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			red.add(pw)
		}
	}
	open := env.OpenClickHouse
	if open == nil {
		open = OpenClickHouse
	}
	conn, closeConn, err := open(ctx, dsn)
	if err != nil {
		fmt.Fprintf(env.Stderr, "itlmon gate rum: %s\ncheck --clickhouse (or ITLMON_CLICKHOUSE) and that the server is up\n", red.String(err.Error()))
		return ExitUsage
	}
	defer closeConn()
	rep, err := query.Summary(ctx, conn, f)
	if err != nil {
		fmt.Fprintf(env.Stderr, "itlmon gate rum: %s\n", red.String(err.Error()))
		return ExitUsage
	}
	if rep.Streams < minStr {
		fmt.Fprintf(env.Stderr, "itlmon gate rum: %d streams match %s, need --min-streams %d: check --site, --since and --where\n", rep.Streams, describeFilter(f, since, until), minStr)
		return ExitUsage
	}
	result := newResult("rum", describeFilter(f, since, until), rep, out.th)
	return finish(env, &out, &result, &red)
}

func describeFilter(f query.Filter, since, until time.Duration) string {
	s := "site=" + f.Site + " since " + shortDur(since)
	if until > 0 {
		s += " until " + shortDur(until) + " ago"
	}
	keys := make([]string, 0, len(f.Where))
	for k := range f.Where {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s += " " + k + "=" + f.Where[k]
	}
	return s
}

// OpenClickHouse connects with clickhouse-go to the DSN and pings it.
func OpenClickHouse(ctx context.Context, dsn string) (query.Conn, func() error, error) {
	opts, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("parse DSN: %w", err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("open clickhouse: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := conn.Ping(pctx); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("connect to clickhouse at %s: %w", strings.Join(opts.Addr, ","), err)
	}
	return conn, conn.Close, nil
}

// shortDur prints 1h, 90m, 1h30m rather than 1h0m0s.
func shortDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
