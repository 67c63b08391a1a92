// Command browser is the itlmon browser module (itl.wasm): the thin glue
// between a web page and the pure packages wasm/meter and wasm/beacon. It
// runs in a dedicated Worker that itl.js starts (the default; the page's
// calls then arrive as messages, see workerHost in itl.js), or on the page's
// main thread. Its global object is the Worker's or the window.
//
// It exports one object, globalThis.__itlmon_go, whose functions the JS shim
// in web/static/itl.js calls:
//
//	configure(cfg)                          -> true | error string
//	start(t0, startUnixMs, url, method, model, contentType, httpStatus,
//	      originID, streamID Uint8Array(16), pagePath, headersAt)
//	                                        -> stream id (>= 0), or -1; headersAt: performance.now()
//	                                           when the response headers arrived, -1 when the request
//	                                           ended before them (end() follows); absent: not known
//	feed(bytes Uint8Array, ops Uint8Array, nOps)
//	                                        // a batch of staged operations, see below
//	end(id, at, kind, httpStatus, proto, out Uint8Array)
//	                                        -> true, the summary written to out as
//	                                           float64s (see summaryFields); kind (meter.Stop): 1 body
//	                                           read to its end, 2 aborted (AbortSignal), 3 network
//	                                           error, 4 the page cancelled the body, 5 the page went
//	                                           away; status and end follow meter.Outcome
//	pagehide(), pageshow()                  // bfcache: close the socket + sendBeacon; allow reconnect
//	mirror(now?)                            -> [held, open] | null: what pagehide would send now, for
//	                                           a module in a Worker (no sendBeacon there; see
//	                                           itl-module.js): two beacon batches (or nulls), the
//	                                           records held and the streams still open
//	stats()                                 -> counters, for tests
//	_crash(mode)                            test hook, only with configure({testHooks: true})
//
// A call from JS into Go costs tens of microseconds in Chromium, far more
// than the per-chunk budget, so the shim does not call per chunk: it stamps
// each read with performance.now(), copies its bytes into a staging buffer
// and appends an operation of four float64s (little endian) to ops:
//
//	id >= 0: [id, n, at, 0]      the next n staged bytes are one read of stream id at time at
//	id = -1: [-1, 0, start, end] the main thread was busy (long animation frame / long task)
//
// and hands the batch to feed when a stream ends, when the staging buffer
// passes 256 KiB in a Worker (64 KiB on the main thread), or 250 ms (1 s)
// after the first staged operation. Arrival times are taken in JS on the
// page's main thread at arrival, so neither the batching nor the Worker
// changes a measurement (a Worker's performance.now() has another origin:
// the module only ever compares the page's stamps with each other).
//
// Rules: nothing here blocks inside a js.FuncOf callback (a blocked callback
// makes Go exit, and every later call from the page throws). All state is
// touched only from JS callbacks (the event loop of the page or the Worker
// serialises them), timers are JS timers, and there are no goroutines,
// channels or locks to wait on. A panic inside a callback is
// recovered, reported once with console.warn, and returns null: the shim
// leaves that response unmeasured and the page untouched. If the Go program
// exits anyway, every later call throws and the shim restores the page's own
// fetch for good.
package main

import (
	"syscall/js"
)

// Version is the module version sent with every batch.
const Version = "0.1.0"

var (
	global      = js.Global()
	performance = global.Get("performance")
	app         *module
	warned      bool
	exports     []js.Func
)

func main() {
	app = newModule()
	api := global.Get("Object").New()
	export(api, "configure", app.configure)
	export(api, "start", app.start)
	export(api, "feed", app.feed)
	export(api, "end", app.end)
	export(api, "pagehide", app.pagehide)
	export(api, "pageshow", app.pageshow)
	export(api, "mirror", app.mirror)
	export(api, "stats", app.stats)
	export(api, "_crash", app.crash)
	global.Set("__itlmon_go", api)
	if ready := global.Get("__itlmon_ready"); ready.Type() == js.TypeFunction {
		ready.Invoke(api)
	}
	select {} // serve callbacks forever; the JS side releases nothing it needs from us
}

// export sets obj[name] to a js.Func that runs fn with panics recovered. A
// recovered panic returns js.Null() (the shim treats it as "not measured").
func export(obj js.Value, name string, fn func(args []js.Value) any) {
	changes := name != "mirror" && name != "stats" // what a mirror would hold
	f := js.FuncOf(func(_ js.Value, args []js.Value) (ret any) {
		defer func() {
			if r := recover(); r != nil {
				report(name, r)
				ret = js.Null()
			}
		}()
		if changes {
			app.dirty = true
		}
		return fn(args)
	})
	exports = append(exports, f)
	obj.Set(name, f)
}

// report logs the first recovered panic to the console; later ones only count.
func report(where string, r any) {
	app.panics++
	if warned {
		return
	}
	warned = true
	msg := "panic"
	switch v := r.(type) {
	case string:
		msg = v
	case error:
		msg = v.Error()
	}
	global.Get("console").Call("warn", "itlmon: recovered in "+where+":", msg, "(measuring continues)")
}

// argString returns args[i] as a string, "" when absent or not a string.
func argString(args []js.Value, i int) string {
	if i < len(args) && args[i].Type() == js.TypeString {
		return args[i].String()
	}
	return ""
}

// argFloat returns args[i] as a number, 0 when absent or not a number.
func argFloat(args []js.Value, i int) float64 {
	if i < len(args) && args[i].Type() == js.TypeNumber {
		return args[i].Float()
	}
	return 0
}

// propString returns o[key] as a string, "" unless it is a string.
func propString(o js.Value, key string) string {
	if v := o.Get(key); v.Type() == js.TypeString {
		return v.String()
	}
	return ""
}

func propFloat(o js.Value, key string) float64 {
	if v := o.Get(key); v.Type() == js.TypeNumber {
		return v.Float()
	}
	return 0
}

func propBool(o js.Value, key string) bool { return o.Get(key).Truthy() }
