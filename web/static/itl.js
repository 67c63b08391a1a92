/*! itlmon loader: real-user monitoring of streamed LLM responses.
 *
 * Install:  <script src="https://COLLECTOR/itl.js" data-site="KEY" async></script>
 * Options:  itlmon.init({ collector, site, sampleRate, match: {contentTypes, urls}, release,
 *                         optOut, modelField, paths, worker })
 * Results:  const off = itlmon.onStream(summary => ...)   // one plain object per finished stream
 *           await itlmon.settled()   // every stream ended so far has been given to onStream
 *
 * What it does: loads wasm_exec.js and itl.wasm from the collector, in a Worker (default; on
 * the page's main thread when workers are not allowed, or with worker: false), and once the
 * module is ready replaces window.fetch with a thin shim. The shim calls the page's ORIGINAL fetch first, and only
 * for responses matching the config (default: text/event-stream and application/x-ndjson, plus
 * URL patterns) hands the page a Response whose body is a stream pulled from the original one,
 * stamping every network read with performance.now() and staging a copy for the module. The
 * bytes, status, headers, url, redirected, type and errors the page sees are the original ones.
 * Any error in the module or the shim turns measuring off and the page keeps its own fetch.
 * Privacy: no body text leaves the page; the request body is scanned only for its top-level
 * "model" field; URLs lose their query and fragment.
 */
(function () {
  'use strict';
  var g = globalThis;
  if (g.itlmon && g.itlmon.__itlmon) return; // loaded twice
  var loaderStart = performance.now();
  var script = document.currentScript;
  var origFetch = g.fetch;
  var api = null; // globalThis.__itlmon_go once the module is ready
  var broken = false;
  var warned = false;
  var loading = false;
  var listeners = [];
  var measured = new Set(); // the streams being measured (their recs, see wrap); pagehide ends them as aborted
  // A body the page drops unread would hold its stream open for good (and
  // the module measures at most 64 at once): when one is garbage collected,
  // its stream ends as aborted at its last read.
  var dropped = typeof FinalizationRegistry === 'function' ?
    new FinalizationRegistry(function (rec) { endStream(rec, 2, rec.lastAt); }) : null;
  var cfg = {
    collector: '',
    site: '',
    sampleRate: 1,
    match: { contentTypes: ['text/event-stream', 'application/x-ndjson'], urls: [] },
    release: '',
    optOut: false,
    modelField: 'model',
    // paths: 'ids' (default) sends page and API paths with id-like segments
    // (UUIDs, numbers, long tokens with digits: conversation and thread ids)
    // replaced by ':id', which also keeps dashboards grouped by route;
    // 'raw' sends them as they are; a function(path) -> path decides itself.
    paths: 'ids',
    // worker: run the module in a dedicated Worker (the default), so the
    // page's main thread only stamps and stages reads; false runs it on the
    // main thread, as it also does when the Worker cannot start (a CSP
    // without blob: in worker-src, for instance). Read when the module
    // loads: with data-site that is at once, so use data-worker="false".
    worker: true,
    flushMs: 0,
    testHooks: false,
  };
  var readyResolve;
  var ready = new Promise(function (r) { readyResolve = r; });
  // mode: 'worker' or 'main' once ready; workerError: why the Worker did not
  // start (then the module runs on the main thread); feedMs: the main
  // thread's time handing batches to the module.
  var timing = { loaderStart: loaderStart, readyAt: -1, error: '', mode: '', workerError: '', feedMs: 0, feedOps: 0,
    feedCalls: 0 };

  function warn(msg, e) {
    if (warned) return;
    warned = true;
    try { console.warn('itlmon: ' + msg + (e ? ': ' + (e && e.message || e) : '') + ' (page fetch untouched)'); } catch (_) {}
  }

  // fail turns measuring off for good: the page gets its own fetch back.
  function fail(msg, e) {
    if (broken) return;
    broken = true;
    timing.error = msg;
    warn(msg, e);
    try { if (g.fetch === shimFetch) g.fetch = origFetch; } catch (_) {}
    readyResolve(false);
  }

  function optedOut() {
    try { return typeof cfg.optOut === 'function' ? !!cfg.optOut() : !!cfg.optOut; } catch (_) { return true; }
  }

  // ---- request facts (before fetch; nothing kept but these few fields) ----

  // topLevelString returns the string value of key at the top level of a JSON
  // object text, or '' (a tiny scanner: nothing else of the body is kept).
  function topLevelString(s, key) {
    var depth = 0, i = 0, n = s.length, want = false;
    while (i < n) {
      var c = s.charCodeAt(i);
      if (c === 34) { // string
        var j = i + 1, esc = false;
        while (j < n) {
          var d = s.charCodeAt(j);
          if (esc) esc = false; else if (d === 92) esc = true; else if (d === 34) break;
          j++;
        }
        if (want) {
          var v = s.slice(i + 1, j);
          try { return v.indexOf('\\') >= 0 ? JSON.parse('"' + v + '"') : v; } catch (_) { return ''; }
        }
        if (depth === 1) {
          var k = j + 1;
          while (k < n && (s.charCodeAt(k) <= 32)) k++;
          if (s.charCodeAt(k) === 58 && s.slice(i + 1, j) === key) { // "key":
            i = k + 1;
            while (i < n && s.charCodeAt(i) <= 32) i++;
            if (s.charCodeAt(i) !== 34) return '';
            want = true;
            continue;
          }
        }
        i = j + 1;
        continue;
      }
      if (c === 123 || c === 91) depth++;
      else if (c === 125 || c === 93) depth--;
      i++;
    }
    return '';
  }

  function urlMatches(href) {
    var u = cfg.match.urls || [];
    for (var i = 0; i < u.length; i++) {
      var p = u[i];
      if (p instanceof RegExp ? p.test(href) : href.indexOf(String(p)) >= 0) return true;
    }
    return false;
  }

  function requestFacts(input, init) {
    var href = typeof input === 'string' ? input : input instanceof URL ? input.href : input && input.url;
    var u = new URL(String(href), location.href);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') return null;
    var method = (init && init.method) || (input && input.method) || 'GET';
    var model = '';
    var body = init && init.body;
    if (typeof body === 'string' && cfg.modelField && body.length <= (1 << 20)) {
      model = topLevelString(body, cfg.modelField).slice(0, 128);
    }
    return {
      origin: u.origin,
      path: redactPath(u.pathname), // never the query or fragment
      href: u.origin + redactPath(u.pathname),
      full: u.href.split('#')[0], // only to look up resource timing in this page; never sent
      method: String(method).toUpperCase(),
      model: model,
      signal: (init && init.signal) || (input && input.signal) || null,
      urlMatch: urlMatches(u.href),
    };
  }

  var ID_SEGMENT = /^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\d{3,}|(?=[\w-]*\d)[\w-]{16,})$/i;

  // redactPath applies cfg.paths to a path (never with a query: callers
  // pass pathnames).
  function redactPath(path) {
    try {
      if (typeof cfg.paths === 'function') return String(cfg.paths(path));
      if (cfg.paths === 'raw') return path;
      return path.split('/').map(function (seg) { return ID_SEGMENT.test(seg) ? ':id' : seg; }).join('/');
    } catch (_) { return ''; }
  }

  function typeMatches(ct) {
    var mt = ct.split(';')[0].trim().toLowerCase();
    var list = cfg.match.contentTypes || [];
    for (var i = 0; i < list.length; i++) if (mt === list[i]) return true;
    return false;
  }

  function proto(href) {
    try {
      var e = performance.getEntriesByName(href, 'resource');
      return e.length ? e[e.length - 1].nextHopProtocol || '' : '';
    } catch (_) { return ''; }
  }

  function emit(summary) {
    for (var i = 0; i < listeners.length; i++) {
      try { listeners[i](summary); } catch (e) { setTimeout(function () { throw e; }); }
    }
  }

  // ---- staging: one hand-over to the module per batch, not per chunk ----
  // A call into the Go module costs tens of µs, a message to its Worker
  // about as much; a read costs well under 1 µs to stage.
  // ops holds 4 float64s per operation: [id, n, at, 0] for a read of stream
  // id (its n bytes are next in stage), [-1, 0, start, end] for a busy interval.

  // A batch leaves at api.flushBytes staged: the stage has room for one
  // more read of a usual size past it, so it does not have to grow (see load).
  var stage = new Uint8Array(0), staged = 0;
  var ops = new Float64Array(4 * 512), nops = 0;
  var flushTimer = 0;

  function pushOp(id, chunk, a, b) {
    var n = chunk ? chunk.byteLength : 0;
    if (staged + n > stage.length) {
      var s2 = new Uint8Array(Math.max(stage.length * 2, staged + n));
      s2.set(stage.subarray(0, staged));
      stage = s2;
    }
    if (n) { stage.set(chunk, staged); staged += n; }
    if (4 * nops + 4 > ops.length) {
      var o2 = new Float64Array(ops.length * 2);
      o2.set(ops);
      ops = o2;
    }
    var i = 4 * nops++;
    ops[i] = id; ops[i + 1] = n; ops[i + 2] = a; ops[i + 3] = b;
    if (staged >= api.flushBytes) flush();
    else if (!flushTimer) flushTimer = setTimeout(flush, api.flushMs);
  }

  function flush() {
    if (flushTimer) { clearTimeout(flushTimer); flushTimer = 0; }
    if (!nops) return;
    var n = nops, nb = staged;
    nops = 0;
    staged = 0;
    if (broken) return;
    var t = performance.now();
    try {
      // A module in a Worker takes the buffers (transferred: no copy) and
      // gives others back to stage into.
      var next = api.feed(stage, nb, ops, n);
      if (next) { stage = next[0]; ops = next[1]; }
    } catch (e) { fail('module failed', e); }
    timing.feedMs += performance.now() - t;
    timing.feedOps += n;
    timing.feedCalls++;
  }

  // SUMMARY names the float64s the module's end() writes (wasm/browser summaryFields).
  var SUMMARY = ['status', 'httpStatus', 'format', 'ttfbMs', 'ttfcMs', 'ttftMs', 'durationMs', 'events',
    'contentEvents', 'tokens', 'reads', 'bytes', 'itlP50Ms', 'itlP95Ms', 'itlP99Ms', 'itlMaxMs', 'tpotMs',
    'tokensPerSec', 'stalls', 'stalledMs', 'jank', 'smooth', 'eventsPerRead', 'ttftCause', 'tokensReported',
    'subFloorShare'];
  var STATUS = ['open', 'complete', 'aborted', 'error', 'http_error'];

  function hexID(u8) {
    var s = '';
    for (var i = 0; i < u8.length; i++) s += (u8[i] < 16 ? '0' : '') + u8[i].toString(16);
    return s;
  }

  // ---- the fetch shim ----

  // endStream ends a measured stream (kind: 1 complete, 2 aborted, 3 network
  // error) at time at and gives its summary to the page's listeners.
  function endStream(rec, kind, at) {
    if (rec.done) return;
    rec.done = true;
    measured.delete(rec);
    if (dropped) dropped.unregister(rec);
    if (broken) return;
    try {
      flush();
      api.end(rec.id, at, kind, rec.status, proto(rec.full), function (f) {
        var s = { id: hexID(rec.sid), url: rec.href, model: rec.model };
        for (var i = 0; i < SUMMARY.length; i++) s[SUMMARY[i]] = f[i];
        s.status = STATUS[s.status] || 'open';
        s.smooth = !!s.smooth;
        s.tokensReported = !!s.tokensReported;
        emit(s);
      });
    } catch (e) { fail('module failed', e); }
  }

  // Chunks read ahead of the page (> 0: reads run at network pace, so they
  // are stamped on arrival even while the page is busy). Network reads are
  // at most a few tens of KB, so this bounds the read-ahead to a few MB in
  // the worst case of a page that stops reading a body that keeps coming.
  // Not a whole number: then desiredSize is 0 only once the stream is closed
  // and drained (a readable one has 128.5 - queued), which wrap relies on.
  var readableStrategy = { highWaterMark: 128.5 };

  var getReader = ReadableStream.prototype.getReader;

  // allowBYOB lets the page take a BYOB reader from body, a default stream,
  // as it could from the original byte stream: the request is served by a
  // byte stream made then, reading body (so body is locked, and the response
  // used, as with a native BYOB reader). Only pages that ask for one pay for
  // that extra layer.
  function allowBYOB(body) {
    Object.defineProperty(body, 'getReader', {
      configurable: true,
      writable: true,
      value: function getReaderBYOB(opts) {
        if (this !== body || !opts || opts.mode !== 'byob') return getReader.apply(this, arguments);
        var inner = getReader.call(body); // throws on a locked body, as natively
        var bytes = new ReadableStream({
          type: 'bytes',
          pull: function (c) {
            return inner.read().then(function next(r) {
              if (r.done) {
                c.close();
                var br = c.byobRequest; // a pending BYOB read gets its done
                if (br) br.respond(0);
                return;
              }
              if (!r.value.byteLength) return inner.read().then(next); // enqueue would throw
              c.enqueue(r.value);
            });
          },
          cancel: function (reason) { return inner.cancel(reason); },
        });
        return bytes.getReader(opts);
      },
    });
    return body;
  }

  function wrap(resp, facts, t0) {
    var reader = null, out = null, dead = false;
    try {
      if (broken || !api || !resp.body || resp.status < 200 || resp.status > 599) return resp;
      var ct = resp.headers.get('content-type') || '';
      if (!facts.urlMatch && !typeMatches(ct)) return resp;
      if (cfg.sampleRate < 1 && Math.random() >= cfg.sampleRate) return resp;
      if (resp.status === 204 || resp.status === 205 || resp.status === 304) return resp;
      var origin = resp.headers.get('x-itlmon-stream') || resp.headers.get('x-request-id') || '';
      var sid = new Uint8Array(16);
      crypto.getRandomValues(sid);
      var id = api.start(t0, performance.timeOrigin + t0, facts.href, facts.method, facts.model,
        ct.split(';')[0].trim().toLowerCase(), resp.status, origin, sid, redactPath(location.pathname));
      if (typeof id !== 'number' || id < 0) return resp; // not measured: the body is untouched
      // What ending the stream needs, and nothing that keeps the body alive
      // (the registry above holds it).
      var rec = { id: id, sid: sid, href: facts.href, model: facts.model, full: facts.full, status: resp.status,
        lastAt: t0, done: false };
      var finish = function (kind) { endStream(rec, kind, performance.now()); };
      // The page's body is a stream pulled from the original one: each read
      // is stamped as it arrives (highWaterMark > 0: pull runs at network
      // pace, not at the page's), staged, and passed on as the same chunk.
      // Every outcome passes through here: end, error (abort or network),
      // and the page cancelling its body.
      // It is a default stream, not a byte stream like the original: a byte
      // stream costs ~6 µs more per chunk in Chromium (each enqueue transfers
      // the buffer). allowBYOB gives BYOB readers a byte stream on demand.
      // The handlers are made once per stream, not per chunk.
      var ctrl = null, sig = facts.signal, onAbort = null;
      // unlisten drops our abort listener once an abort can no longer change
      // what the page gets, so a long-lived signal does not collect one per
      // request: the body errored, was cancelled, or was read to its end.
      var unlisten = function () {
        if (onAbort) { try { sig.removeEventListener('abort', onAbort); } catch (_) {} onAbort = null; }
      };
      var onRead = function (r) {
        var at = performance.now();
        rec.lastAt = at;
        if (r.done) {
          try { ctrl.close(); } catch (_) { /* cancelled or errored meanwhile */ }
          // Until the page has read what is queued, an abort must still
          // discard it; after that (closed and drained) it changes nothing.
          if (ctrl.desiredSize === 0) unlisten();
          finish(1);
          return;
        }
        if (!broken && !rec.done) {
          try { pushOp(id, r.value, at, 0); } catch (e) { fail('shim failed', e); }
        }
        ctrl.enqueue(r.value);
      };
      var onError = function (err) {
        try { ctrl.error(err); } catch (_) { /* already errored */ }
        unlisten();
        finish((facts.signal && facts.signal.aborted) || !(err instanceof TypeError) ? 2 : 3);
      };
      var body = new ReadableStream({
        start: function (c) { ctrl = c; },
        pull: function () {
          if (dead) return;
          return reader.read().then(onRead, onError);
        },
        cancel: function (reason) {
          unlisten();
          finish(2);
          return reader.cancel(reason);
        },
      }, readableStrategy);
      allowBYOB(body);
      // Locked only now that nothing before it can throw: on a failure
      // below, the catch unlocks it and the page gets the response untouched.
      reader = resp.body.getReader();
      try {
        out = new Response(body, { status: resp.status, statusText: resp.statusText, headers: resp.headers });
      } catch (e) {
        dead = true;
        reader.releaseLock();
        rec.done = true;
        api.end(id, performance.now(), 3, resp.status, '', null);
        return resp;
      }
      dress(out, resp);
      measured.add(rec);
      if (dropped) dropped.register(body, rec, rec);
      // Aborting a fetch errors its body at once and discards what was
      // queued (Fetch: "abort the fetch"); our stream has read ahead, so it
      // must do the same or the page would still get the queued chunks,
      // also when the body has already arrived in full.
      if (sig && typeof sig.addEventListener === 'function') {
        onAbort = function () {
          unlisten();
          var reason = sig.reason !== undefined ? sig.reason : new DOMException('The operation was aborted.', 'AbortError');
          try { ctrl.error(reason); } catch (e) { /* already closed or errored */ }
          finish(2);
        };
        if (sig.aborted) onAbort(); else sig.addEventListener('abort', onAbort);
      }
      return out;
    } catch (e) {
      if (reader && !out) {
        dead = true;
        try { reader.releaseLock(); } catch (_) { /* the page's response stays usable */ }
      }
      fail('shim failed', e);
      return resp;
    }
  }

  // dress gives a wrapped response what the Response constructor cannot:
  // the original's url, redirected and type, its immutable headers, and a
  // clone() whose copy keeps them too.
  function dress(r, orig) {
    Object.defineProperty(r, 'url', { value: orig.url });
    Object.defineProperty(r, 'redirected', { value: orig.redirected });
    Object.defineProperty(r, 'type', { value: orig.type });
    Object.defineProperty(r, 'headers', { value: orig.headers });
    Object.defineProperty(r, 'clone', {
      value: function clone() {
        var c = dress(Response.prototype.clone.call(this), orig);
        // Cloning tees the body: this response and the clone get new streams.
        if (this.body) allowBYOB(this.body);
        if (c.body) allowBYOB(c.body);
        return c;
      },
    });
    return r;
  }

  function shimFetch(input, init) {
    if (broken || !api || optedOut()) return origFetch.apply(this, arguments);
    var facts = null;
    try { facts = requestFacts(input, init); } catch (_) { facts = null; }
    var t0 = performance.now();
    var p = origFetch.apply(this, arguments);
    if (!facts) return p;
    return p.then(function (resp) { return wrap(resp, facts, t0); });
  }

  // ---- the module ----

  // timerFloorUs measures performance.now()'s resolution, spinning at most
  // ~2 ms or 100k reads: with coarse clocks (resistFingerprinting: 16-100 ms)
  // waiting for a tick would freeze the page, so a clock that did not tick
  // is reported as at least 2 ms.
  function timerFloorUs() {
    var min = Infinity, start = performance.now(), last = start, seen = 0, t = start;
    for (var i = 0; seen < 5 && t - start < 2 && i < 100000; i++) {
      t = performance.now();
      if (t !== last) { min = Math.min(min, t - last); seen++; last = t; }
    }
    if (!isFinite(min)) min = Math.max(t - start, 2);
    return Math.max(1, Math.round(min * 1000));
  }

  // moduleConfig is what the module's configure gets. In a Worker the
  // module's refusal probe uses the Worker's fetch, which is never the shim.
  function moduleConfig(mode) {
    var nav = navigator, uad = nav.userAgentData, conn = nav.connection;
    var col = cfg.collector.replace(/\/+$/, '');
    var site = encodeURIComponent(cfg.site);
    var c = {
      site: cfg.site,
      wsURL: col.replace(/^http/, 'ws') + '/v1/ws?site=' + site,
      beaconURL: col + '/v1/beacon?site=' + site,
      release: String(cfg.release || ''),
      flushMs: +cfg.flushMs || 0,
      testHooks: !!cfg.testHooks,
      pageOrigin: location.origin,
      pagePath: redactPath(location.pathname),
      userAgent: nav.userAgent,
      uaBrands: uad && uad.brands ? uad.brands.map(function (b) { return b.brand + ';' + b.version; }).join(',') : '',
      uaPlatform: uad ? uad.platform || '' : '',
      uaMobile: !!(uad && uad.mobile),
      connType: conn && conn.effectiveType || '',
      connRTTMs: conn && +conn.rtt || 0,
      timerFloorUs: timerFloorUs(),
      crossOriginIsolated: !!g.crossOriginIsolated,
    };
    if (mode === 'main') c.fetch = origFetch; // the module's refusal probe bypasses the shim
    return c;
  }

  function loadScript(src) {
    return new Promise(function (resolve, reject) {
      var s = document.createElement('script');
      s.src = src;
      s.async = true;
      s.onload = resolve;
      s.onerror = function () { reject(new Error('load ' + src)); };
      (document.head || document.documentElement).appendChild(s);
    });
  }

  // instantiate compiles the module from first, a fetch of url already under
  // way (started together with wasm_exec.js), or from a new fetch.
  function instantiate(url, first, imports) {
    var get = function () {
      return origFetch(url, { credentials: 'omit' }).then(function (r) {
        if (!r.ok) throw new Error('GET ' + url + ': ' + r.status);
        return r;
      });
    };
    if (WebAssembly.instantiateStreaming) {
      return WebAssembly.instantiateStreaming(first.then(function (r) {
        if (!r.ok) throw new Error('GET ' + url + ': ' + r.status);
        return r;
      }), imports).catch(function () {
        return get().then(function (r) { return r.arrayBuffer(); })
          .then(function (b) { return WebAssembly.instantiate(b, imports); });
      });
    }
    return get().then(function (r) { return r.arrayBuffer(); })
      .then(function (b) { return WebAssembly.instantiate(b, imports); });
  }

  // The module's API as the shim uses it, the same in both modes:
  //   configure(cfg) -> Promise(true | error text)
  //   start(...) -> stream id, or -1: not measured (see wasm/browser)
  //   feed(stage, nb, ops, n) -> next  a staged batch: nb bytes, n ops; next: null to
  //                                  reuse the buffers, or [stage, ops] to stage into
  //                                  (in a Worker, which takes them)
  //   end(id, at, kind, httpStatus, proto, done)
  //                                  done(summary float64s), now or later, if it was measured
  //   pagehide(), pageshow(), settled() -> Promise, query('stats' | 'crash', arg) -> Promise
  //   flushMs, flushBytes            a batch leaves after this long, or this many bytes

  // startMain runs the module on the page's main thread.
  function startMain(col) {
    var wasmURL = col + '/itl.wasm';
    var first = origFetch(wasmURL, { credentials: 'omit' }); // in parallel with wasm_exec.js
    first.catch(function () {});
    return loadScript(col + '/wasm_exec.js').then(function () {
      // Our wasm_exec.js (rewritten by make wasm) keeps its Go class and its
      // fs/process/path stubs in one namespace, off the page's globals.
      var Go = g.__itlmon_wasm_exec && g.__itlmon_wasm_exec.Go;
      if (typeof Go !== 'function') throw new Error('wasm_exec.js defined no Go');
      var go = new Go();
      return instantiate(wasmURL, first, go.importObject).then(function (res) {
        return new Promise(function (resolve, reject) {
          g.__itlmon_ready = function (a) { delete g.__itlmon_ready; resolve(a); };
          go.run(res.instance).then(function () { fail('module exited'); }, function (e) { fail('module exited', e); });
          setTimeout(function () { reject(new Error('module not ready')); }, 10000);
        });
      });
    }).then(function (m) {
      var out = new Float64Array(SUMMARY.length), outBytes = new Uint8Array(out.buffer);
      return {
        mode: 'main',
        flushMs: 1000,
        flushBytes: 64 << 10, // a batch of 64 KB keeps the module ~1.5 ms
        configure: function (c) { return Promise.resolve(m.configure(c)); },
        start: function () { return m.start.apply(m, arguments); },
        feed: function (stage, nb, ops, n) {
          m.feed(stage.subarray(0, nb), new Uint8Array(ops.buffer, 0, 32 * n), n);
          return null;
        },
        end: function (id, at, kind, status, proto, done) {
          if (m.end(id, at, kind, status, proto, outBytes) === true && done) done(out);
        },
        pagehide: function () { m.pagehide(); },
        pageshow: function () { m.pageshow(); },
        settled: function () { return Promise.resolve(); },
        query: function (what, arg) { return Promise.resolve(what === 'stats' ? m.stats() : m._crash(arg)); },
      };
    });
  }

  // workerHost is the module's Worker. It runs from this function's source
  // text alone (startWorker), so it uses nothing else from this file: it
  // loads wasm_exec.js and itl.wasm from the collector and serves the
  // page's messages with the module's API. Messages are arrays; the first
  // item says what:
  //   page -> worker: ['module', WebAssembly.Module | null] first, ['c', cfg] configure, ['s', id, ...start args],
  //     ['f', stage, ops, n, nb] feed (ArrayBuffers), ['e', id, at, kind, status, proto] end,
  //     ['h'] pagehide, ['p'] pageshow, ['q', qid, 'stats' | 'crash', arg]
  //   worker -> page: ['r'] ready, ['c', result], ['e', id, summary | null],
  //     ['m', mirror] what a beacon would carry now (sent on pagehide),
  //     ['q', qid, result], ['w', text] a console warning, ['x', why] stopped,
  //     ['b', stage, ops] a batch's buffers back, for reuse
  // The page numbers its streams; ids maps them to the module's (-1: not
  // measured).
  function workerHost(col, nSummary) {
    'use strict';
    var api = null, ids = new Map(), out = new Uint8Array(8 * nSummary), mirrorTimer = 0;
    var watch = 0, idle = 0; // the 1 s watch for acknowledgements, and its ticks without news
    var UNMEASURED = 2147483647; // a stream id the module never gives
    var post = function (m, transfer) { self.postMessage(m, transfer || []); };
    var stop = function (e) { post(['x', String(e && e.message || e || 'module exited')]); };
    // The module's warnings belong on the page's console.
    console.warn = function () { post(['w', Array.prototype.join.call(arguments, ' ')]); };
    var mirror = function () {
      mirrorTimer = 0;
      var m = api.mirror();
      if (m) post(['m', m], [m.buffer]);
    };
    var handle = function (m) {
      var i, id;
      switch (m[0]) {
        case 'c': post(['c', api.configure(m[1])]); break;
        case 's':
          id = api.start.apply(null, m.slice(2));
          ids.set(m[1], typeof id === 'number' ? id : -1);
          break;
        case 'f':
          var ops = new Float64Array(m[2], 0, 4 * m[3]);
          for (i = 0; i < ops.length; i += 4) {
            if (ops[i] < 0) continue; // a busy interval
            id = ids.get(ops[i]);
            ops[i] = id >= 0 ? id : UNMEASURED;
          }
          api.feed(new Uint8Array(m[1], 0, m[4]), new Uint8Array(m[2], 0, 32 * m[3]), m[3]);
          post(['b', m[1], m[2]], [m[1], m[2]]); // the module copied them: back for reuse
          break;
        case 'e':
          id = ids.get(m[1]);
          ids.delete(m[1]);
          var ok = id >= 0 && api.end(id, m[2], m[3], m[4], m[5], out) === true;
          post(['e', m[1], ok ? new Float64Array(out.slice().buffer) : null]);
          break;
        case 'h': api.pagehide(); break;
        case 'p': api.pageshow(); break;
        case 'q': post(['q', m[1], m[2] === 'stats' ? api.stats() : api._crash(m[3])]); break;
      }
      // A stream's end shows in the mirror at once; reads within 100 ms.
      if (m[0] === 'e') { clearTimeout(mirrorTimer); mirror(); } else if (!mirrorTimer) mirrorTimer = setTimeout(mirror, 100);
      // Acknowledgements change what a beacon would carry too: watch for
      // them each second until 30 s pass without news. (A stale mirror only
      // resends records the collector already has: it keeps one per id.)
      idle = 0;
      if (!watch) {
        watch = setInterval(function () {
          if (mirrorTimer) return;
          var m = api.mirror();
          if (m) { idle = 0; post(['m', m], [m.buffer]); } else if (++idle >= 30) { clearInterval(watch); watch = 0; }
        }, 1000);
      }
    };
    try {
      importScripts(col + '/wasm_exec.js');
      var Go = self.__itlmon_wasm_exec && self.__itlmon_wasm_exec.Go;
      if (typeof Go !== 'function') throw new Error('wasm_exec.js defined no Go');
      var go = new Go(), url = col + '/itl.wasm';
      var get = function () {
        return fetch(url, { credentials: 'omit' }).then(function (r) {
          if (!r.ok) throw new Error('GET ' + url + ': ' + r.status);
          return r;
        });
      };
      var compile = function () {
        return get().then(function (r) { return r.arrayBuffer(); })
          .then(function (b) { return WebAssembly.instantiate(b, go.importObject); });
      };
      // The page compiles the module while this Worker starts and sends it
      // (['module', WebAssembly.Module]), or null: then it is fetched here.
      var run = function (mod) {
        (mod ? WebAssembly.instantiate(mod, go.importObject).then(function (instance) { return { instance: instance }; }) :
          WebAssembly.instantiateStreaming ? WebAssembly.instantiateStreaming(get(), go.importObject).catch(function (e) {
            if (e && /^GET /.test(e.message)) throw e;
            return compile(); // served with another MIME type
          }) : compile()).then(function (res) { return go.run(res.instance); }).then(function () { stop(); }, stop);
      };
      self.__itlmon_ready = function (a) {
        delete self.__itlmon_ready;
        api = a;
        post(['r']);
      };
      self.onmessage = function (ev) {
        if (ev.data[0] === 'module') return run(ev.data[1]);
        if (!api) return;
        try { handle(ev.data); } catch (e) { stop(e); }
      };
    } catch (e) { stop(e); }
  }

  // startWorker runs the module in a dedicated Worker made from a blob: URL
  // (a Worker's script must be same-origin; what it imports need not be).
  // It rejects when the Worker cannot start or load the module, and the
  // module then runs on the main thread.
  function startWorker(col) {
    return new Promise(function (resolve, reject) {
      var src = '(' + workerHost + ')(' + JSON.stringify(col) + ', ' + SUMMARY.length + ');\n';
      var url = URL.createObjectURL(new Blob([src], { type: 'text/javascript' }));
      var w = null, timer = 0;
      var done = function (e) {
        clearTimeout(timer);
        URL.revokeObjectURL(url);
        if (!w) return reject(e);
        w.onmessage = w.onerror = null;
        if (e) { w.terminate(); reject(e); } else resolve(workerAPI(w));
      };
      try { w = new Worker(url, { name: 'itlmon' }); } catch (e) { return done(e); }
      // Compiling here (off the main thread: V8 compiles in the background)
      // while the Worker starts, rather than after, takes ~100 ms off the
      // time to ready; a WebAssembly.Module is sent without a copy.
      // A module the collector does not serve is not tried again anywhere.
      var wasmURL = col + '/itl.wasm';
      origFetch(wasmURL, { credentials: 'omit' }).then(function (r) {
        if (!r.ok) {
          var e = new Error('GET ' + wasmURL + ': ' + r.status);
          e.final = true;
          throw e;
        }
        return WebAssembly.compileStreaming ? WebAssembly.compileStreaming(r) : null;
      }).then(function (mod) {
        w.postMessage(['module', mod]);
      }, function (e) {
        if (e && e.final) done(e);
        else w.postMessage(['module', null]); // the Worker fetches and compiles it itself
      });
      timer = setTimeout(function () { done(new Error('module not ready in its Worker')); }, 10000);
      w.onmessage = function (ev) {
        var m = ev.data;
        if (m[0] === 'r') done(null);
        else if (m[0] === 'x') done(new Error(m[1]));
        else if (m[0] === 'w') warnFromModule(m[1]);
      };
      w.onerror = function (ev) {
        if (ev && ev.preventDefault) ev.preventDefault();
        done(new Error(ev && ev.message || 'Worker failed'));
      };
    });
  }

  function warnFromModule(text) {
    try { console.warn(String(text)); } catch (_) {}
  }

  // workerAPI is the module's API over messages to its Worker. Ids are the
  // page's; summaries and query results come back as messages. The last
  // mirror leaves by sendBeacon on pagehide, and for the collector
  // configured before, when configure changes it.
  function workerAPI(w) {
    var nextID = 0, open = 0, ends = new Map(), waiting = [], queries = new Map(), nq = 0;
    var mirror = null, beaconURL = '', configs = [];
    var spares = []; // staging buffers the Worker has given back: no allocation per batch
    var settle = function () {
      if (ends.size) return;
      var ws = waiting;
      waiting = [];
      ws.forEach(function (r) { r(); });
    };
    var beacon = function (url) {
      try { if (mirror && url && navigator.sendBeacon) navigator.sendBeacon(url, mirror); } catch (_) {}
    };
    w.onmessage = function (ev) {
      var m = ev.data, f;
      switch (m[0]) {
        case 'e':
          f = ends.get(m[1]);
          ends.delete(m[1]);
          if (f && m[2]) { try { f(m[2]); } catch (e) { fail('shim failed', e); } }
          settle();
          break;
        case 'm': mirror = m[1].byteLength ? m[1] : null; break;
        case 'b': if (spares.length < 2) spares.push([new Uint8Array(m[1]), new Float64Array(m[2])]); break;
        case 'c': (configs.shift() || function () {})(m[1]); break;
        case 'q': f = queries.get(m[1]); queries.delete(m[1]); if (f) f(m[2]); break;
        case 'w': warnFromModule(m[1]); break;
        case 'x': stopped('module exited', m[1]); break;
      }
    };
    w.onerror = function (ev) {
      if (ev && ev.preventDefault) ev.preventDefault();
      stopped('module failed', ev && ev.message);
    };
    // stopped: the Worker is gone, and with it any answer still to come.
    var stopped = function (msg, why) {
      fail(msg, why);
      w.terminate();
      ends.clear();
      settle();
      configs.splice(0).forEach(function (r) { r('module stopped'); });
      queries.forEach(function (r) { r(null); });
      queries.clear();
    };
    return {
      mode: 'worker',
      flushMs: 250, // a message is cheap: stage briefly, so the mirror stays recent
      // A message costs a few hundred µs on the page's side whatever its
      // size (measured in Chromium), and the page does not wait for the module.
      flushBytes: 256 << 10,
      configure: function (c) {
        if (beaconURL && c.beaconURL !== beaconURL) beacon(beaconURL); // what it held leaves for it
        beaconURL = c.beaconURL;
        return new Promise(function (resolve) { configs.push(resolve); w.postMessage(['c', c]); });
      },
      start: function (t0, unixMs, href, method, model, ct, status, origin, sid, path) {
        if (open >= 64) return -1; // as the module itself (wasm/browser maxOpen)
        var id = nextID++;
        open++;
        w.postMessage(['s', id, t0, unixMs, href, method, model, ct, status, origin, sid, path]);
        return id;
      },
      feed: function (stage, nb, ops, n) {
        var next = spares.pop() || [new Uint8Array(stage.length), new Float64Array(ops.length)];
        // ArrayBuffers, not their views: Chromium posts a view several
        // times slower (measured: 95 vs 14 µs for 72 KB).
        w.postMessage(['f', stage.buffer, ops.buffer, n, nb], [stage.buffer, ops.buffer]);
        return next;
      },
      end: function (id, at, kind, status, proto, done) {
        open--;
        ends.set(id, done);
        w.postMessage(['e', id, at, kind, status, proto]);
      },
      pagehide: function () { beacon(beaconURL); w.postMessage(['h']); },
      pageshow: function () { w.postMessage(['p']); },
      settled: function () {
        return new Promise(function (r) { waiting.push(r); settle(); });
      },
      query: function (what, arg) {
        var q = nq++;
        return new Promise(function (r) { queries.set(q, r); w.postMessage(['q', q, what, arg]); });
      },
    };
  }

  function load() {
    if (loading || broken) return;
    loading = true;
    var col = cfg.collector.replace(/\/+$/, '');
    var worker = cfg.worker !== false && typeof Worker === 'function' && typeof Blob === 'function' && g.URL &&
      typeof URL.createObjectURL === 'function';
    (worker ? startWorker(col).catch(function (e) {
      if (e && e.final) throw e;
      timing.workerError = String(e && e.message || e);
      return startMain(col);
    }) : startMain(col)).then(function (a) {
      if (broken) return;
      return a.configure(moduleConfig(a.mode)).then(function (r) {
        if (r !== true) throw new Error(String(r));
        if (broken) return;
        api = a;
        timing.mode = a.mode;
        stage = new Uint8Array(a.flushBytes + (8 << 10));
        observeBusy();
        addEventListener('pagehide', function () {
          // Streams still open are cut by the navigation: record them now, as
          // aborted, so they leave with the beacon.
          measured.forEach(function (rec) { endStream(rec, 2, performance.now()); });
          try { if (api && !broken) api.pagehide(); } catch (e) { fail('module failed', e); }
        });
        addEventListener('pageshow', function (e) { try { if (e.persisted && api && !broken) api.pageshow(); } catch (x) { fail('module failed', x); } });
        if (g.fetch === origFetch && !optedOut()) g.fetch = shimFetch;
        timing.readyAt = performance.now();
        readyResolve(true);
      });
    }).catch(function (e) { fail('not loaded', e); });
  }

  function observeBusy() {
    try {
      var types = PerformanceObserver.supportedEntryTypes || [];
      var type = types.indexOf('long-animation-frame') >= 0 ? 'long-animation-frame' : types.indexOf('longtask') >= 0 ? 'longtask' : '';
      if (!type) return;
      new PerformanceObserver(function (list) {
        if (!measured.size || broken) return;
        var es = list.getEntries();
        for (var i = 0; i < es.length; i++) pushOp(-1, null, es[i].startTime, es[i].startTime + es[i].duration);
      }).observe({ type: type });
    } catch (_) {}
  }

  // ---- public API ----

  function init(opts) {
    try {
      opts = opts || {};
      for (var k in opts) {
        if (!Object.prototype.hasOwnProperty.call(opts, k)) continue;
        if (k === 'match') {
          var m = opts.match || {};
          cfg.match = {
            contentTypes: (m.contentTypes || cfg.match.contentTypes).map(function (s) { return String(s).toLowerCase(); }),
            urls: m.urls || cfg.match.urls,
          };
        } else cfg[k] = opts[k];
      }
      cfg.sampleRate = Math.max(0, Math.min(1, cfg.sampleRate == null ? 1 : +cfg.sampleRate));
      if (optedOut()) { if (g.fetch === shimFetch) g.fetch = origFetch; return ready; }
      if (api && !broken) {
        // Resolves once the module has the new settings.
        return api.configure(moduleConfig(api.mode)).then(function (r) {
          if (r !== true) { fail('configure', r); return false; }
          if (g.fetch === origFetch && !broken) g.fetch = shimFetch;
          return !broken;
        }, function (e) { fail('configure', e); return false; });
      }
      if (!cfg.site) throw new Error('no site key (data-site or itlmon.init({site}))');
      if (!cfg.collector) throw new Error('no collector URL');
      load();
    } catch (e) { fail('init', e); }
    return ready;
  }

  function onStream(cb) {
    if (typeof cb !== 'function') return function () {};
    listeners.push(cb);
    return function () { var i = listeners.indexOf(cb); if (i >= 0) listeners.splice(i, 1); };
  }

  try {
    if (script && script.src) cfg.collector = new URL(script.src, location.href).origin;
    else cfg.collector = location.origin;
  } catch (_) {}
  var auto = script && script.getAttribute('data-site');
  if (script && script.getAttribute('data-release')) cfg.release = script.getAttribute('data-release');
  // Where the module runs is chosen when it loads, which data-site starts
  // at once: data-worker="false" keeps it on the main thread from the start.
  if (script && script.getAttribute('data-worker') === 'false') cfg.worker = false;

  g.itlmon = {
    __itlmon: true,
    init: init,
    onStream: onStream,
    ready: ready, // resolves true once fetch is wrapped, false if the module is off
    // settled resolves once every stream that has ended so far has been given
    // to the onStream listeners (with the module in a Worker, a summary
    // arrives a message later than the stream's end).
    settled: function () { return api && !broken ? api.settled() : Promise.resolve(); },
    timing: timing, // loaderStart, readyAt (performance.now() ms), error, mode
    get active() { return !!api && !broken && g.fetch === shimFetch; },
    get originalFetch() { return origFetch; },
    // _stats: the module's counters (for tests and debugging).
    _stats: function () { return api && !broken ? api.query('stats') : Promise.resolve(null); },
    // _crash(mode): makes the module panic (testHooks only, see wasm/browser).
    _crash: function (mode) { return api && !broken ? api.query('crash', mode) : Promise.resolve(false); },
    // _wrap measures a Response as if fetch had returned it (testHooks only:
    // the browser cost benchmark feeds it a local stream).
    _wrap: function (resp, href) {
      if (!cfg.testHooks) return resp;
      var u = new URL(href, location.href);
      return wrap(resp, { origin: u.origin, path: u.pathname, href: u.origin + u.pathname, method: 'GET', model: '',
        signal: null, urlMatch: false }, performance.now());
    },
  };
  if (auto) init({ site: auto });
})();
