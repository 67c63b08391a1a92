package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"syscall/js"
	"time"
	"unicode/utf8"

	"github.com/syumai/workers"
	"github.com/syumai/workers/cloudflare"
	"github.com/syumai/workers/cloudflare/fetch"

	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// main serves one request: worker.mjs starts a new Go instance for every
// request (nothing survives between requests). It returns once the response
// body is done and the timeline is posted, which ends the instance.
func main() {
	// The Workers global is a Proxy (worker.mjs); fetch must be called on
	// the real global object.
	client := fetch.NewClient(fetch.WithBinding(js.Global().Get("globalThis")))
	var pending sync.WaitGroup
	var h http.Handler
	cfg, err := ParseConfig(cloudflare.Getenv)
	if err != nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "itlmon edge: "+err.Error(), http.StatusInternalServerError)
		})
	} else {
		p := &Proxy{
			Config: cfg,
			Fetch: func(r *http.Request) (*http.Response, error) {
				return client.Do(&fetch.Request{Request: r}, &fetch.RequestInit{Redirect: fetch.RedirectModeManual})
			},
			Post: func(ctx context.Context, url, key string, body []byte) error {
				return post(ctx, client, url, key, body)
			},
			Background: func(f func()) {
				pending.Add(1)
				cloudflare.WaitUntil(func() {
					defer pending.Done()
					f()
				})
			},
			Facts: func(*http.Request) beacon.Edge { return facts(js.Global().Get("context").Get("cf")) },
			Now:   time.Now,
			NewID: origin.NewID,
			Logf:  func(format string, args ...any) { fmt.Printf(format+"\n", args...) },
		}
		p.Relay = func(ctx context.Context, w http.ResponseWriter, body io.ReadCloser, observe func([]byte, time.Time)) meter.Stop {
			if how, ok := relayJS(w, body, observe, p.Logf); ok {
				return how
			}
			return p.copyBody(ctx, w, body, observe)
		}
		h = p
	}
	started := make(chan struct{})
	workers.ServeNonBlock(streamed(h, &pending, started))
	workers.Ready()
	<-started
	pending.Wait() // the handler, then the timeline's POST (waitUntil): the instance must live until both end
}

// streamed serves h with a response body of its own (bodyWriter) and a
// request context that ends when the client goes away. It holds pending
// while h runs, and closes started once it has.
func streamed(h http.Handler, pending *sync.WaitGroup, started chan<- struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pending.Add(1)
		close(started)
		defer pending.Done()
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		bw := &bodyWriter{ResponseWriter: w, clientGone: cancel, pending: pending}
		defer bw.close()
		h.ServeHTTP(bw, r.WithContext(ctx))
	})
}

// errClientGone is what a write returns once the runtime cancelled the
// response body (the client went away).
var errClientGone = errors.New("client went away")

// bodyWriter replaces syumai/workers' response body. Its own sends the
// status and headers on the first Write and streams each Write to the
// runtime as one chunk, like syumai's; unlike syumai's (v0.32.0), a body
// cancelled by the runtime (the client went away) makes Write fail and ends
// the request's context instead of crashing the instance (its pull closes a
// cancelled stream, which throws, and the panic ends the Go program).
type bodyWriter struct {
	http.ResponseWriter // syumai/workers' *jshttp.ResponseWriter
	clientGone          func()
	pending             *sync.WaitGroup // held from the first Write until the runtime has the whole body, or cancelled it
	pw                  *io.PipeWriter
	raw                 bool // the body is a JS stream of relayJS's
}

// sendRaw makes stream the response body and hands the Response to the
// runtime. Only before the first Write.
func (b *bodyWriter) sendRaw(stream js.Value) {
	b.raw = true
	b.ResponseWriter.(interface{ WriteRawJSBody(js.Value) }).WriteRawJSBody(stream)
	b.ResponseWriter.(interface{ Ready() }).Ready()
}

// relayJS relays the origin's body with worker.mjs's relay: the chunks go
// from the origin's stream to the response's in JavaScript, stamped there as
// they arrive, and observe sees them in batches. It returns once the body
// ended or was cancelled; false when it cannot (w or body not the runtime's,
// or headers already sent).
func relayJS(w http.ResponseWriter, body io.ReadCloser, observe func([]byte, time.Time), logf func(string, ...any)) (meter.Stop, bool) {
	bw, ok := w.(*bodyWriter)
	rb, ok2 := body.(interface{ GetRawJSBody() js.Value })
	relay := js.Global().Get("context").Get("relay")
	if !ok || !ok2 || bw.pw != nil || relay.Type() != js.TypeFunction {
		return 0, false
	}
	if observe == nil {
		// Not measured: the runtime pipes the origin's body itself, and how
		// it ends is not needed.
		bw.sendRaw(rb.GetRawJSBody())
		return meter.StopBodyEnd, true
	}
	onChunks := js.Undefined()
	{
		var buf []byte
		f := js.FuncOf(func(_ js.Value, args []js.Value) any {
			bytes, lengths, times := args[0], args[1], args[2]
			n := bytes.Get("byteLength").Int()
			if cap(buf) < n {
				buf = make([]byte, max(n, 16<<10))
			}
			js.CopyBytesToGo(buf[:n], bytes)
			off := 0
			for i, k := 0, lengths.Length(); i < k; i++ {
				l := lengths.Index(i).Int()
				observe(buf[off:off+l], time.UnixMicro(int64(times.Index(i).Float()*1000)))
				off += l
			}
			return nil
		})
		defer f.Release() // after done: relay calls it no more
		onChunks = f.Value
	}
	res := relay.Invoke(rb.GetRawJSBody(), onChunks)
	bw.sendRaw(res.Get("readable"))
	how := await(res.Get("done")).String()
	switch {
	case how == "end":
		return meter.StopBodyEnd, true
	case how == "abort":
		bw.clientGone()
		return meter.StopAbort, true
	default:
		logf("itlmon edge: origin body: %s", how)
		return meter.StopError, true
	}
}

// await waits for a promise that resolves (relay's done never rejects).
func await(p js.Value) js.Value {
	ch := make(chan js.Value, 1)
	var then js.Func
	then = js.FuncOf(func(_ js.Value, args []js.Value) any {
		then.Release()
		ch <- args[0]
		return nil
	})
	p.Call("then", then)
	return <-ch
}

func (b *bodyWriter) Write(p []byte) (int, error) {
	if b.pw == nil {
		pr, pw := io.Pipe()
		b.pw = pw
		b.pending.Add(1)
		b.ResponseWriter.(interface{ WriteRawJSBody(js.Value) }).WriteRawJSBody(readableStream(pr, b.clientGone, b.pending.Done))
		b.ResponseWriter.(interface{ Ready() }).Ready() // the runtime gets the Response now
	}
	if len(p) == 0 {
		return 0, nil
	}
	return b.pw.Write(p)
}

// Flush does nothing: each Write is handed to the runtime as it happens.
func (b *bodyWriter) Flush() {}

// close ends the body once the handler returned.
func (b *bodyWriter) close() {
	if b.raw {
		return
	}
	if b.pw == nil {
		b.Write(nil)
	}
	b.pw.Close()
}

// readableStream is a JS ReadableStream that pulls each chunk from pr when
// the runtime asks for one (high water mark 0: nothing is read ahead). Its
// cancel closes pr and calls gone. It calls ended once, when it closed (pr's
// end) or was cancelled: the runtime will not call into Go for it again.
func readableStream(pr *io.PipeReader, gone, ended func()) js.Value {
	var once sync.Once
	end := func() { once.Do(ended) }
	buf := make([]byte, readBuf)
	// pull and cancel are not released: they live as long as the instance,
	// which serves one request.
	pull := js.FuncOf(func(_ js.Value, args []js.Value) any {
		controller := args[0]
		return promise(func(resolve js.Value) {
			n, err := pr.Read(buf)
			jsSafe(func() {
				if n > 0 {
					chunk := js.Global().Get("Uint8Array").New(n)
					js.CopyBytesToJS(chunk, buf[:n])
					controller.Call("enqueue", chunk)
				}
				switch {
				case err == io.EOF:
					controller.Call("close")
				case err != nil:
					controller.Call("error", js.Global().Get("Error").New(err.Error()))
				}
			})
			resolve.Invoke()
			if err != nil {
				end()
			}
		})
	})
	cancel := js.FuncOf(func(js.Value, []js.Value) any {
		pr.CloseWithError(errClientGone)
		gone()
		end()
		return js.Undefined()
	})
	src := js.Global().Get("Object").New()
	src.Set("pull", pull)
	src.Set("cancel", cancel)
	strategy := js.Global().Get("Object").New()
	strategy.Set("highWaterMark", 0)
	return js.Global().Get("ReadableStream").New(src, strategy)
}

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

// jsSafe runs f, recovering the panic of a JS exception (a stream the
// runtime closed meanwhile).
func jsSafe(f func()) {
	defer func() {
		if e := recover(); e != nil {
			if _, ok := e.(js.Error); !ok {
				panic(e)
			}
		}
	}()
	f()
}

// post sends body to the collector through the Workers fetch.
func post(ctx context.Context, client *fetch.Client, url, key string, body []byte) error {
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
