package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"syscall/js"
	"time"
	"unicode/utf8"

	"github.com/syumai/workers/cloudflare/fetch"

	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// main starts the Go half once per isolate: it hands worker.mjs the
// functions it calls for every measured request (begin, feed, end) through
// the runtime context's ready, then waits for those calls for as long as the
// isolate lives.
//
// Every call comes from worker.mjs in the async context of the request it is
// about, and a goroutine it starts runs until it blocks before the call
// returns (Go's js/wasm scheduler): so the timeline's fetch, and the
// callbacks of its promises, belong to that request, as the runtime wants
// of I/O. The Go half sets no timer of its own for that reason (the POST's
// deadline is an AbortSignal's).
func main() {
	w := &worker{streams: map[int]*Stream{}}
	api := js.Global().Get("Object").New()
	api.Set("begin", js.FuncOf(w.begin))
	api.Set("feed", js.FuncOf(w.feed))
	api.Set("end", js.FuncOf(w.end))
	js.Global().Get("context").Call("ready", api)
	select {} // the functions above are the program from now on
}

// worker is the Go half's state in the isolate: the measured streams in
// flight, by handle, and the configuration of the last env seen.
type worker struct {
	streams map[int]*Stream
	next    int
	env     js.Value // the env cfg was read from
	read    bool     // env is set
	cfg     Config
	cfgErr  error
	buf     []byte  // feed's copy of a batch
	poster  *Poster // the isolate's timeline posts (cfg's target, key and deadline)
}

// config reads env (the request's env) unless it is the one read last: an
// isolate's env does not change between requests.
func (w *worker) config(env js.Value) (*Config, error) {
	if !w.read || !w.env.Equal(env) {
		w.env, w.read = env, true
		w.cfg, w.cfgErr = ParseConfig(func(k string) string {
			if v := env.Get(k); v.Type() == js.TypeString {
				return v.String()
			}
			return ""
		})
		target, key := w.cfg.Target(), w.cfg.Key
		w.poster = &Poster{Timeout: w.cfg.PostTimeout, Logf: logf,
			Send: func(body []byte, timeout time.Duration) error {
				return post(context.Background(), target, key, body, timeout)
			}}
	}
	return &w.cfg, w.cfgErr
}

// begin(env, info): info holds the request's path, the response's status,
// the header values Response lists, start and headersAt (Date.now()
// milliseconds) and request.cf. It returns null when the response is not
// measured, else {handle, id, setID, expose}; {error} for a configuration
// error (worker.mjs answers 500). It never panics: a panic in a callback
// would end the Go program, and with it every stream in the isolate.
func (w *worker) begin(_ js.Value, args []js.Value) any {
	env, info := args[0], args[1]
	cfg, err := w.config(env)
	if err != nil {
		res := js.Global().Get("Object").New()
		res.Set("error", "itlmon edge: "+err.Error())
		return res
	}
	str := func(k string) string {
		if v := info.Get(k); v.Type() == js.TypeString {
			return v.String()
		}
		return ""
	}
	start := jsTime(info.Get("start"))
	r := Response{
		Path:        str("path"),
		Status:      info.Get("status").Int(),
		ContentType: str("contentType"),
		DataStream:  str("dataStream"),
		StreamID:    str("streamID"),
		RequestID:   str("requestID"),
		Expose:      str("expose"),
		Start:       start,
		HeadersAt:   jsTime(info.Get("headersAt")).Sub(start),
	}
	if !cfg.measures() {
		return nil
	}
	r.Edge = facts(info.Get("cf"))
	s := cfg.Begin(r, origin.NewID)
	if s == nil {
		return nil
	}
	w.next++
	w.streams[w.next] = s
	res := js.Global().Get("Object").New()
	res.Set("handle", w.next)
	res.Set("id", s.ID)
	res.Set("setID", s.SetID)
	res.Set("expose", s.Expose)
	return res
}

// measures: without a collector there is nothing to measure for.
func (c *Config) measures() bool { return c.Collector != "" }

// feed(handle, bytes, lengths, times): chunks of a stream, concatenated in
// bytes, their lengths and arrival times (Date.now()) in order.
func (w *worker) feed(_ js.Value, args []js.Value) any {
	s := w.streams[args[0].Int()]
	if s == nil {
		return nil
	}
	data, lengths, times := args[1], args[2], args[3]
	n := data.Get("byteLength").Int()
	if cap(w.buf) < n {
		w.buf = make([]byte, max(n, 16<<10))
	}
	buf := w.buf[:n]
	js.CopyBytesToGo(buf, data)
	off := 0
	for i, k := 0, lengths.Length(); i < k; i++ {
		l := lengths.Index(i).Int()
		s.Feed(buf[off:off+l], jsTime(times.Index(i)))
		off += l
	}
	if cap(w.buf) > 1<<20 { // one large batch does not stay with the isolate
		w.buf = nil
	}
	return nil
}

// end(handle, how, at, ctx): the body ended ("end"), the client went away
// ("abort") or the origin's body failed ("error: ..."), at at (Date.now()).
// The timeline's POST runs under ctx.waitUntil.
func (w *worker) end(_ js.Value, args []js.Value) any {
	h := args[0].Int()
	s := w.streams[h]
	if s == nil {
		return nil
	}
	delete(w.streams, h)
	how := meter.StopError
	switch v := args[1].String(); v {
	case "end":
		how = meter.StopBodyEnd
	case "abort":
		how = meter.StopAbort
	default:
		logf("itlmon edge: origin body: %s", v)
	}
	body, err := w.cfg.Batch(s.End(jsTime(args[2]), how))
	if err != nil {
		logf("itlmon edge: encode timeline: %v", err)
		return nil
	}
	poster := w.poster
	args[3].Call("waitUntil", promise(func(resolve js.Value) {
		defer resolve.Invoke()
		poster.Post(body)
	}))
	return nil
}

// jsTime is a Date.now() value as a time.
func jsTime(v js.Value) time.Time {
	return time.UnixMicro(int64(v.Float() * 1000))
}

func logf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// promise returns a JS Promise resolved by f, which runs on a goroutine.
func promise(f func(resolve js.Value)) js.Value {
	var executor js.Func
	executor = js.FuncOf(func(_ js.Value, args []js.Value) any {
		resolve := args[0]
		go f(resolve)
		return js.Undefined()
	})
	defer executor.Release()
	return js.Global().Get("Promise").New(executor)
}

// post sends body to the collector through the Workers fetch, bounded by
// timeout: the fetch is called on worker.mjs's deadlineFetch, which adds an
// AbortSignal.timeout to it (the Workers fetch ignores ctx), and the
// signal aborts the response's body too.
func post(ctx context.Context, url, key string, body []byte, timeout time.Duration) error {
	client := fetch.NewClient(fetch.WithBinding(js.Global().Get("context").Call("deadlineFetch", timeout.Milliseconds())))
	req, err := fetch.NewRequest(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", origin.ContentType)
	if key != "" {
		req.Header.Set(origin.HeaderKey, key)
	}
	resp, err := client.Do(req, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return &StatusError{Code: resp.StatusCode, Msg: string(bytes.TrimSpace(msg))}
	}
	return nil
}

// maxFact bounds a string the edge reports (a city name is the longest).
const maxFact = 100

// facts reads request.cf, the edge's facts on the client side, field by
// field: syumai/workers' IncomingProperties turns an absent string into
// "<undefined>" and does not map clientTcpRtt.
func facts(cf js.Value) beacon.Edge {
	e := beacon.Edge{ClientTCPRTTMs: beacon.NoTime, HeadersUs: beacon.NoTime}
	if cf.Type() != js.TypeObject {
		return e
	}
	str := func(k string) string {
		v := cf.Get(k)
		if v.Type() != js.TypeString {
			return ""
		}
		s := v.String() // valid UTF-8: Go converts a JS string with TextEncoder
		if len(s) > maxFact {
			s = s[:maxFact]
			for !utf8.ValidString(s) {
				s = s[:len(s)-1]
			}
		}
		return s
	}
	num := func(k string) (uint32, bool) {
		v := cf.Get(k)
		if v.Type() == js.TypeString { // a number sent as a string: taken too
			n, err := strconv.ParseUint(v.String(), 10, 32)
			return uint32(n), err == nil
		}
		if v.Type() != js.TypeNumber {
			return 0, false
		}
		f := v.Float()
		if f < 0 || f >= float64(beacon.NoTime) {
			return 0, false
		}
		return uint32(f), true
	}
	e.Colo, e.Country, e.Region, e.RegionCode, e.City = str("colo"), str("country"), str("region"), str("regionCode"), str("city")
	e.HTTPProto, e.TLSVersion = str("httpProtocol"), str("tlsVersion")
	e.ASN, _ = num("asn")
	if rtt, ok := num("clientTcpRtt"); ok {
		e.ClientTCPRTTMs = rtt
	}
	return e
}
