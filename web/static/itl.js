// @ts-check
/*! itlmon loader: real-user monitoring of streamed LLM responses.
 *
 * Install, in <head> before the app's scripts (it is small and wraps fetch at once):
 *           <script src="https://COLLECTOR/itl.js" data-site="KEY"></script>
 * Options:  itlmon.init({ collector, site, sampleRate, match: {contentTypes, urls, endpoints}, release,
 *                         optOut, modelField, paths, worker, socketIdleMs, debug })
 * Clients:  new OpenAI({ fetch: (...a) => (globalThis.itlmon?.fetch ?? fetch)(...a) })   // itlmon.fetch
 * Results:  const off = itlmon.onStream(summary => ...)   // one plain object per finished stream
 *           await itlmon.settled()   // every stream ended so far has been given to onStream
 *
 * What it does: replaces window.fetch with a thin shim as soon as it runs (and
 * offers the same shim as itlmon.fetch for clients that keep a fetch of their
 * own). The shim calls the page's ORIGINAL fetch first, and only for responses
 * matching the config (default: text/event-stream, application/x-ndjson and
 * the AI SDK's data stream (its x-vercel-ai-data-stream header), plus URL
 * patterns) hands the page a Response whose body is a stream pulled
 * from the original one, stamping every network read with performance.now()
 * and staging a copy. A request that looks like a streamed completion is
 * measured from the moment it is issued, so an abort or a network error
 * before the response headers is recorded too. The parser (itl-module.js,
 * wasm_exec.js and itl.wasm from the collector; in a Worker by default, on
 * the page's main thread when workers are not allowed or with worker: false)
 * is loaded when the browser is idle after the page's load event, or at the
 * first measured stream, whichever comes first; until it is ready, streams
 * are stamped and staged here and handed over when it is. The bytes, status,
 * headers, url, redirected, type and errors the page sees are the original
 * ones. Any error in the module or the shim turns measuring off and the page
 * keeps its own fetch.
 * Privacy: no body text leaves the page; the request body (a string init.body,
 * or the first 256 KiB of a clone of a Request's JSON body) is scanned only for
 * its top-level "model" and "stream" fields; the model may also come from the
 * path (Gemini's models/NAME:..., Azure's deployments/NAME/); URLs lose their
 * query and fragment.
 */
(function () {
  'use strict';
  /** @type {any} */
  var g = globalThis;
  if (g.itlmon && g.itlmon.__itlmon) return; // loaded twice
  var loaderStart = performance.now();
  var script = /** @type {HTMLScriptElement | null} */ (document.currentScript);
  var nonce = script && script.nonce || '';
  // snip: the inline snippet (itl-snippet.js) that ran before this file and
  // loaded it. It wrapped fetch when it ran, with a function of its own that
  // clients may have kept: that function stays window.fetch and calls the
  // shim from now on (attach, at the end of this file).
  /** @type {ItlmonSnippet | null} */
  var snip = g.itlmon && g.itlmon.__itlmonSnippet && g.itlmon.__itlmonSnippet.v === 1 ? g.itlmon.__itlmonSnippet : null;
  /** @type {typeof fetch} */
  var origFetch = snip ? snip.orig : g.fetch;

  // MAX_OPEN bounds the streams measured at once, as the module does
  // (wasm/browser maxOpen); more are passed through unmeasured.
  var MAX_OPEN = 64;
  // QUEUE_BYTES bounds what is staged while the module loads (bytes read plus
  // 32 per read); a stream whose read does not fit goes unmeasured.
  var QUEUE_BYTES = 8 << 20;
  // SILENT_MS: a stream whose body was reported collected ends after this
  // long without a read (see dropped).
  var SILENT_MS = 5 * 60 * 1000;
  // PROTOCOL is the version of the calls between this file and
  // itl-module.js: both come from one collector, but are cached apart.
  var PROTOCOL = 2;
  // SUMMARY names the float64s the module's end() writes (wasm/browser summaryFields).
  var SUMMARY = ['status', 'httpStatus', 'format', 'ttfbMs', 'ttfcMs', 'ttftMs', 'durationMs', 'events',
    'contentEvents', 'tokens', 'reads', 'bytes', 'itlP50Ms', 'itlP95Ms', 'itlP99Ms', 'itlMaxMs', 'tpotMs',
    'tokensPerSec', 'stalls', 'stalledMs', 'jank', 'smooth', 'eventsPerRead', 'ttftCause', 'tokensReported',
    'subFloorShare', 'end', 'headersMs'];
  var STATUS = ['open', 'complete', 'aborted', 'error', 'http_error'];
  var ENDS = ['', 'body_end', 'closed_after_end', 'abort', 'error'];
  // End kinds, the page-side facts end() gets (the module decides the status).
  var BODY_END = 1, ABORTED = 2, NET_ERROR = 3, CANCELLED = 4, PAGEHIDE = 5;

  /** @type {ItlmonHostAPI | null} */
  var api = null; // the module, once ready
  var broken = false;
  var warned = false;
  var installed = false;
  var loading = false;
  /** @type {Array<(s: ItlmonSummary) => void>} */
  var listeners = [];
  /** @type {Set<ItlmonRec>} */
  var measured = new Set(); // the streams being measured (see wrap); pagehide ends them
  var nextPID = 0;
  /** @type {ItlmonQueued[]} */
  var queue = []; // calls for the module made before it was ready, in order
  var queuedBytes = 0;
  var queuedEnds = 0;
  /** @type {Set<string> | null} */
  var debugSeen = null; // debug: the URLs the shim saw

  // A body the page drops unread would hold its stream (one of MAX_OPEN) open
  // for good. The registry says when a body was collected, but engines decide
  // when that is said: JavaScriptCore has called back while the page still
  // held a reader on the body and was reading it. So a callback only marks
  // the stream (collected), and the mark counts only while nothing proves the
  // body alive: a read in flight (while one is pending, the network holds the
  // stream: a collected body is never pulled again) or any later read clears
  // or outweighs it. Marked streams end, at their last read and as cancelled
  // by the page, only when their slot is needed, at pagehide, or after
  // SILENT_MS without a read: a wrong callback then costs nothing while the
  // body is being read, and a right one at most a slot for a while.
  var dropped = typeof FinalizationRegistry === 'function' ?
    new FinalizationRegistry(/** @param {ItlmonRec} rec */ function (rec) {
      if (rec.done) return;
      rec.collected = true;
      timing.collected++;
      sweepLater();
    }) : null;
  var sweepTimer = 0;

  var cfg = {
    collector: '',
    site: '',
    sampleRate: 1,
    match: {
      contentTypes: ['text/event-stream', 'application/x-ndjson'],
      /** @type {Array<string | RegExp>} */
      urls: [],
      // endpoints: path suffixes of streamed-completion APIs. A POST to one
      // (whose JSON body does not say "stream": false) is measured from the
      // moment it is issued, like one whose body says "stream": true or whose
      // URL matches urls: an abort or error before the headers is recorded.
      endpoints: ['/chat/completions', '/responses', '/messages', '/api/chat', '/api/generate'],
    },
    release: '',
    /** @type {boolean | (() => boolean)} */
    optOut: false,
    modelField: 'model',
    // paths: 'ids' (default) sends page and API paths with id-like segments
    // (UUIDs, numbers, long tokens with digits: conversation and thread ids)
    // replaced by ':id', which also keeps dashboards grouped by route;
    // 'raw' sends them as they are; a function(path) -> path decides itself.
    /** @type {'ids' | 'raw' | ((path: string) => string)} */
    paths: 'ids',
    // worker: run the module in a dedicated Worker (the default), so the
    // page's main thread only stamps and stages reads; false runs it on the
    // main thread, as it also does when the Worker cannot start (a CSP
    // without blob: in worker-src, for instance). Read when the module loads.
    worker: true,
    // socketIdleMs: the module opens its WebSocket to the collector when it
    // has records to send and closes it after this long with nothing to send
    // and nothing unacknowledged (the next record opens a new one), so open
    // sockets follow streaming tabs, not open ones. 0: the default, 30 s.
    socketIdleMs: 0,
    // debug: a console hint when a streamed fetch went past the shim.
    debug: false,
    flushMs: 0,
    testHooks: false,
    // testKeepBytes: with testHooks, a smaller bound for what the page keeps
    // for a pagehide replay with the module in a Worker (itl-module.js).
    testKeepBytes: 0,
    // testWorkerWaitMs: with testHooks, another bound for the Worker's start
    // once it has the module (itl-module.js).
    testWorkerWaitMs: 0,
  };

  /** @type {(ok: boolean) => void} */
  var readyResolve = function () {};
  var readySettled = false;
  /** @type {Promise<boolean>} */
  var ready = newReady();
  function newReady() {
    readySettled = false;
    return new Promise(function (r) {
      readyResolve = function (ok) { readySettled = true; r(ok); };
    });
  }

  // loaderMs: this file's own run; loadAt: when loading the module began;
  // readyAt: when it was ready (performance.now() ms); mode: 'worker' or
  // 'main'; workerError: why the Worker did not start; feedMs: the main
  // thread's time handing batches to the module; collected: bodies reported
  // collected; unmeasured: streams let through unmeasured (no slot, or past
  // the queue's bound while the module loaded); pagehideMs: the last
  // pagehide's work; replayed: streams it measured again on the page (a
  // module in a Worker, see itl-module.js).
  // snippetAt: when the snippet ran, loaderAt: when it requested this file
  // (-1 without a snippet); late: streams the snippet held back until this
  // file ran, lateMs: the longest such wait.
  var timing = { loaderStart: loaderStart, loaderMs: 0, snippetAt: -1, loaderAt: -1, late: 0, lateMs: 0,
    loadAt: -1, readyAt: -1, error: '', mode: '',
    workerError: '', feedMs: 0, feedOps: 0, feedCalls: 0, collected: 0, unmeasured: 0, pagehideMs: 0, replayed: 0 };

  /** @param {string} msg @param {unknown} [e] */
  function warn(msg, e) {
    if (warned) return;
    warned = true;
    try {
      console.warn('itlmon: ' + msg + (e ? ': ' + (/** @type {any} */ (e).message || e) : '') + ' (page fetch untouched)');
    } catch (_) { /* no console */ }
  }

  // fail turns measuring off for good: the page gets its own fetch back, and
  // what was queued for the module is dropped.
  /** @param {string} msg @param {unknown} [e] */
  function fail(msg, e) {
    if (broken) return;
    broken = true;
    timing.error = msg;
    warn(msg, e);
    try { if (g.fetch === wrapper) g.fetch = origFetch; } catch (_) { /* read-only fetch */ }
    queue = [];
    queuedBytes = 0;
    readyResolve(false);
  }

  function optedOut() {
    try { return typeof cfg.optOut === 'function' ? !!cfg.optOut() : !!cfg.optOut; } catch (_) { return true; }
  }

  // on: the shim measures (a site is set, the page has not opted out).
  function on() { return installed && !broken && !optedOut(); }

  // ---- request facts (before fetch; nothing kept but these few fields) ----

  /** @param {string} s @param {number} i @returns {number} the index of the closing quote of the string at i */
  function strEnd(s, i) {
    var j = i + 1, esc = false;
    for (; j < s.length; j++) {
      var d = s.charCodeAt(j);
      if (esc) esc = false; else if (d === 92) esc = true; else if (d === 34) break;
    }
    return j;
  }

  /** @param {string} s @param {number} i */
  function skipSpace(s, i) {
    while (i < s.length && s.charCodeAt(i) <= 32) i++;
    return i;
  }

  // topLevel scans a JSON object text for the string value of modelKey and
  // the literal value of "stream" at its top level (a tiny scanner: nothing
  // else of the body is parsed or kept). stream is null when absent.
  /** @param {string} s @param {string} modelKey */
  function topLevel(s, modelKey) {
    var out = { model: '', stream: /** @type {boolean | null} */ (null) };
    var depth = 0, i = 0, n = s.length;
    while (i < n) {
      var c = s.charCodeAt(i);
      if (c === 34) {
        var j = strEnd(s, i), k = skipSpace(s, j + 1);
        if (depth === 1 && s.charCodeAt(k) === 58) { // "key":
          var key = s.slice(i + 1, j), v = skipSpace(s, k + 1);
          if (key === 'stream') out.stream = s.startsWith('true', v) ? true : s.startsWith('false', v) ? false : null;
          if (key === modelKey && modelKey && s.charCodeAt(v) === 34) {
            var e = strEnd(s, v), raw = s.slice(v + 1, e);
            try { out.model = raw.indexOf('\\') >= 0 ? JSON.parse('"' + raw + '"') : raw; } catch (_) { out.model = ''; }
            i = e + 1;
            continue;
          }
          i = v;
          continue;
        }
        i = j + 1;
        continue;
      }
      if (c === 123 || c === 91) depth++;
      else if (c === 125 || c === 93) depth--;
      i++;
    }
    return out;
  }

  /** @param {string} href */
  function urlMatches(href) {
    var u = cfg.match.urls || [];
    for (var i = 0; i < u.length; i++) {
      var p = u[i];
      if (p instanceof RegExp ? p.test(href) : href.indexOf(String(p)) >= 0) return true;
    }
    return false;
  }

  /** @param {string} path */
  function endpointMatches(path) {
    var e = cfg.match.endpoints || [];
    path = path.replace(/\/+$/, '');
    for (var i = 0; i < e.length; i++) {
      var s = String(e[i]);
      if (path.length >= s.length && path.slice(path.length - s.length) === s) return true;
    }
    return false;
  }

  // The model named in the path, for the APIs that put it there: Gemini
  // (.../models/NAME:streamGenerateContent, Vertex AI's
  // .../publishers/google/models/NAME:...) and Azure OpenAI
  // (/openai/deployments/NAME/...).
  var PATH_MODEL = /\/(?:models|tunedModels)\/([^/:]+):[A-Za-z]+$|\/openai\/deployments\/([^/]+)\//;

  /** @param {string} pathname */
  function pathModel(pathname) {
    var m = PATH_MODEL.exec(pathname);
    if (!m) return '';
    try { return decodeURIComponent(m[1] || m[2]); } catch (_) { return ''; }
  }

  // MODEL_BYTES bounds what is read of a Request's body (a clone) for its model.
  var MODEL_BYTES = 256 << 10;

  // requestModel reads the model of a Request given without an init body
  // (fetch(new Request(url, init)), as the Mistral client calls it) from a
  // clone of its body: the page's own body is never read, and only the
  // clone's first MODEL_BYTES are scanned. A JSON body only (by its
  // Content-Type); one whose Content-Length says it is larger is skipped.
  // facts.model is set when found, and facts.modelRead settles when the read
  // ends: shimFetch issues the page's fetch then (a few microtasks for a
  // body the page gave as a string), or after MODEL_WAIT_MS at the most, so
  // that the stream starts with its model whatever the network's speed.
  /** @param {Request} req @param {ItlmonFacts} facts */
  function requestModel(req, facts) {
    var ct = req.headers.get('content-type') || '';
    var len = +(req.headers.get('content-length') || 0);
    // The page's Request is only cloned (its body is not touched here).
    if (req.bodyUsed || ct.indexOf('json') < 0 || len > MODEL_BYTES) return;
    var body = req.clone().body;
    if (!body) return;
    var rd = body.getReader(), dec = new TextDecoder(), text = '';
    /** @param {ReadableStreamReadResult<Uint8Array>} r @returns {any} */
    var next = function (r) {
      if (!r.done) text += dec.decode(r.value, { stream: true });
      if (!r.done && text.length < MODEL_BYTES) return rd.read().then(next);
      if (!r.done) rd.cancel().catch(function () {});
      var model = topLevel(text, cfg.modelField).model;
      text = '';
      if (model) facts.model = String(model).slice(0, 128); // the body's model before the path's
    };
    facts.modelRead = rd.read().then(next).catch(function () { /* no model: the page's fetch is not concerned */ });
  }

  // MODEL_WAIT_MS bounds how long a fetch(Request) waits for its model to be
  // read from a clone of its body (requestModel): a body the page streams
  // itself may take longer, and is then measured without its model.
  var MODEL_WAIT_MS = 50;

  /** @param {any} input @param {any} init @returns {ItlmonFacts | null} */
  function requestFacts(input, init) {
    var href = typeof input === 'string' ? input : input instanceof URL ? input.href : input && input.url;
    var u = new URL(String(href), location.href);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') return null;
    var method = String((init && init.method) || (input && input.method) || 'GET').toUpperCase();
    var body = init && init.body;
    var top = typeof body === 'string' && body.length <= (1 << 20) ? topLevel(body, cfg.modelField) : { model: '', stream: null };
    var urlMatch = urlMatches(u.href);
    var path = redactPath(u.pathname); // never the query or fragment
    /** @type {ItlmonFacts} */
    var facts = {
      href: u.origin + path,
      full: u.href.split('#')[0], // only to look up resource timing in this page; never sent
      method: method,
      model: String(top.model || pathModel(u.pathname)).slice(0, 128),
      signal: (init && init.signal) || (input && input.signal) || null,
      urlMatch: urlMatch,
      eager: urlMatch || top.stream === true || (top.stream === null && method === 'POST' && endpointMatches(u.pathname)),
      sampled: cfg.sampleRate >= 1 || Math.random() < cfg.sampleRate,
    };
    if (facts.sampled && !top.model && body == null && typeof Request === 'function' && input instanceof Request &&
        method !== 'GET' && method !== 'HEAD') {
      try { requestModel(input, facts); } catch (_) { /* a body that cannot be cloned: no model from it */ }
    }
    return facts;
  }

  var ID_SEGMENT = /^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\d{3,}|(?=[\w-]*\d)[\w-]{16,})$/i;

  // redactPath applies cfg.paths to a path (never with a query: callers
  // pass pathnames).
  /** @param {string} path */
  function redactPath(path) {
    try {
      var p = cfg.paths;
      if (typeof p === 'function') return String(p(path));
      if (p === 'raw') return path;
      return path.split('/').map(function (seg) { return ID_SEGMENT.test(seg) ? ':id' : seg; }).join('/');
    } catch (_) { return ''; }
  }

  /** @param {string} ct */
  function typeMatches(ct) {
    var mt = ct.split(';')[0].trim().toLowerCase();
    return (cfg.match.contentTypes || []).indexOf(mt) >= 0;
  }

  /** @param {string} href */
  function proto(href) {
    try {
      var e = /** @type {PerformanceResourceTiming[]} */ (performance.getEntriesByName(href, 'resource'));
      return e.length ? e[e.length - 1].nextHopProtocol || '' : '';
    } catch (_) { return ''; }
  }

  /** @param {ItlmonSummary} summary */
  function emit(summary) {
    for (var i = 0; i < listeners.length; i++) {
      try { listeners[i](summary); } catch (e) { setTimeout(function () { throw e; }); }
    }
  }

  /** @param {Uint8Array} u8 */
  function hexID(u8) {
    var s = '';
    for (var i = 0; i < u8.length; i++) s += (u8[i] < 16 ? '0' : '') + u8[i].toString(16);
    return s;
  }

  // ---- staging: one hand-over to the module per batch, not per chunk ----
  // A call into the Go module costs tens of µs, a message to its Worker
  // about as much; a read costs well under 1 µs to stage.
  // ops holds 4 float64s per operation: [id, n, at, 0] for a read of stream
  // id (its n bytes are next in stage), [-1, 0, start, end] for a busy interval.
  // Until the module is ready, a batch is cut into the queue at each stream's
  // end, so that the module later gets every call in the order it was made.

  /** @type {Uint8Array} */
  var stage = new Uint8Array(64 << 10);
  /** @type {Float64Array} */
  var ops = new Float64Array(4 * 512);
  var staged = 0, nops = 0;
  var flushTimer = 0;

  // pushOp stages one operation; false when it does not fit in the queue's
  // bound while the module loads (the caller's stream then goes unmeasured).
  /** @param {number} id @param {Uint8Array | null} chunk @param {number} a @param {number} b */
  function pushOp(id, chunk, a, b) {
    var n = chunk ? chunk.byteLength : 0;
    if (!api && queuedBytes + staged + n + 32 * (nops + 1) > QUEUE_BYTES) return false;
    if (staged + n > stage.length) {
      var s2 = new Uint8Array(Math.max(stage.length * 2, staged + n));
      s2.set(stage.subarray(0, staged));
      stage = s2;
    }
    if (chunk && n) { stage.set(chunk, staged); staged += n; }
    if (4 * nops + 4 > ops.length) {
      var o2 = new Float64Array(ops.length * 2);
      o2.set(ops);
      ops = o2;
    }
    var i = 4 * nops++;
    ops[i] = id; ops[i + 1] = n; ops[i + 2] = a; ops[i + 3] = b;
    if (!api) return true;
    if (staged >= api.flushBytes) flush();
    else if (!flushTimer) flushTimer = setTimeout(flush, api.flushMs);
    return true;
  }

  function flush() {
    if (flushTimer) { clearTimeout(flushTimer); flushTimer = 0; }
    if (!nops || broken) { nops = staged = 0; return; }
    var n = nops, nb = staged;
    nops = 0;
    staged = 0;
    if (!api) {
      queue.push(['f', stage.slice(0, nb), nb, ops.slice(0, 4 * n), n]);
      queuedBytes += nb + 32 * n;
      return;
    }
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

  // ---- streams ----

  // begin gives a new stream a slot and starts it in the module (or queues
  // the start); null when it is not measured.
  /** @param {ItlmonFacts} facts @param {number} t0 @param {number} status @param {string} ct @param {string} origin @param {number} headersAt */
  function begin(facts, t0, status, ct, origin, headersAt) {
    if (measured.size >= MAX_OPEN) {
      /** @type {ItlmonRec | null} */
      var oldest = null;
      measured.forEach(function (r) { if (abandoned(r) && (!oldest || r.lastAt < oldest.lastAt)) oldest = r; });
      if (!oldest) { timing.unmeasured++; return null; }
      endStream(oldest, CANCELLED, /** @type {ItlmonRec} */ (oldest).lastAt);
    }
    var sid = new Uint8Array(16);
    crypto.getRandomValues(sid);
    /** @type {ItlmonRec} */
    var rec = { pid: nextPID++, sid: sid, href: facts.href, model: facts.model, full: facts.full, status: status,
      lastAt: t0, queued: 0, done: false, collected: false, pulling: false, failedAt: -1 };
    call(['s', rec.pid, [t0, performance.timeOrigin + t0, facts.href, facts.method, facts.model, ct, status, origin,
      sid, redactPath(location.pathname), headersAt]]);
    measured.add(rec);
    watchStreams();
    observeBusy();
    load();
    return rec;
  }

  // call makes a call to the module, or queues it until the module is ready.
  /** @param {ItlmonQueued} c */
  function call(c) {
    if (broken) return;
    if (!api) {
      queue.push(c);
      if (c[0] === 'e') queuedEnds++;
      return;
    }
    try {
      if (c[0] === 's') api.start(c[1], c[2]);
      else if (c[0] === 'f') api.feed(c[1], c[2], c[3], c[4]);
      else if (c[0] === 'e') api.end(c[1], c[2], c[3], c[4], c[5], c[6]);
    } catch (e) { fail('module failed', e); }
  }

  // endStream ends a measured stream at time at, kind saying how (BODY_END,
  // ABORTED, NET_ERROR, CANCELLED, PAGEHIDE), and gives its summary to the
  // page's listeners.
  /** @param {ItlmonRec} rec @param {number} kind @param {number} at */
  function endStream(rec, kind, at) {
    if (rec.done) return;
    alive(performance.now()); // a suspension just ended is this stream's too
    rec.done = true;
    measured.delete(rec);
    watchStreams();
    if (dropped) dropped.unregister(rec);
    if (broken) return;
    flush(); // its reads first
    /** @param {string} p */
    var send = function (p) {
      call(['e', rec.pid, at, kind, rec.status, p, function (f) {
        /** @type {any} */
        var s = { id: hexID(rec.sid), url: rec.href, model: rec.model };
        for (var i = 0; i < SUMMARY.length; i++) s[SUMMARY[i]] = f[i];
        s.status = STATUS[s.status] || 'open';
        s.end = ENDS[s.end] || '';
        s.smooth = !!s.smooth;
        s.tokensReported = !!s.tokensReported;
        emit(s);
      }]);
    };
    var p = proto(rec.full);
    if (p || kind !== BODY_END) return send(p);
    // The fetch's resource timing entry (its nextHopProtocol: h2, http/1.1)
    // is added once its body is complete, which Chromium may do a moment
    // after the last read: look again a few times (~100 ms at most) before
    // sending the end without it. pagehide sends what is waiting at once.
    var tries = 0;
    /** @param {boolean} [now] */
    var again = function (now) {
      if (!protoWait.has(again)) return;
      p = proto(rec.full);
      if (!p && !now && ++tries < 6) { setTimeout(again, 20); return; }
      protoWait.delete(again);
      send(p);
      graceDone();
    };
    protoWait.add(again);
    inGrace++;
    setTimeout(again, 0);
  }

  // Firefox and WebKit fail the bodies (and pending fetches) of a page being
  // left with a network error (TypeError) as the navigation starts, right
  // after beforeunload, and fire pagehide only once the next page has
  // answered: as long after as that page takes (Chromium fires pagehide
  // first). So a network error ends its stream only after a grace without a
  // pagehide; a pagehide meanwhile ends it as cut by the navigation
  // (PAGEHIDE), at the time of the error. The grace is LEAVE_GRACE_MS when
  // the page said beforeunload shortly before (its navigation may still be
  // waiting for the next page, or have been called off), else ERROR_GRACE_MS
  // (engines without beforeunload, such as iOS Safari, or a navigation its
  // listener missed). The beforeunload listener is there only while a stream
  // is measured or awaited (watchStreams), so an idle page's back/forward
  // cache is never at stake (Firefox 153 keeps a page with an open stream
  // out of it anyway).
  var ERROR_GRACE_MS = 250;
  var LEAVE_GRACE_MS = 10000;
  var leavingAt = -Infinity; // the last beforeunload
  var watching = false; // watchStreams: a stream is measured or awaited
  function onBeforeUnload() { leavingAt = performance.now(); }

  // The page's main thread, when it cannot read, makes a stall the page's.
  // Chromium reports its long animation frames (observeBusy); Firefox and
  // Safari report nothing, and no engine reports a page the system
  // suspends (a mobile browser switched away from: iOS Safari soon after,
  // Android's freezer) or a long frame that ends with the stream (reported
  // after its end). In each, the network goes on and the backlog comes in
  // one read, which alone would blame the network. So while a stream is
  // measured or awaited (watchStreams) a timer ticks, and when the page's
  // code next runs (a tick, a read, an end) later than the timer allows
  // after it last did, the time between is a busy interval, as a long task
  // is: every ALIVE_TICK_MS, allowing ALIVE_GAP_MS (a task of ~100 ms or
  // more shows), on a visible page; every ALIVE_HIDDEN_TICK_MS, allowing
  // ALIVE_HIDDEN_GAP_MS, on a page hidden since, whose timers run late by up
  // to a second (Chromium, Firefox) and which a suspension stops.
  // Chromium's minute-long throttling of pages hidden 5 minutes, or
  // Firefox's delay of a busy hidden page's timers (up to 15 s), while reads
  // still run on time, can make a network stall in progress there the
  // page's.
  var ALIVE_TICK_MS = 50;
  var ALIVE_GAP_MS = 150;
  var ALIVE_HIDDEN_TICK_MS = 1000;
  var ALIVE_HIDDEN_GAP_MS = 2500;
  var aliveAt = 0; // the last time the page's code ran (while watching)
  var hidden = false; // document.hidden, kept by onVisibility (read per read: a DOM getter costs)
  var hiddenAt = -Infinity; // the last time the page was seen hidden
  var aliveTimer = 0;
  /** @param {number} now */
  function alive(now) {
    if (hidden) hiddenAt = now;
    if (now - aliveAt > (hiddenAt >= aliveAt ? ALIVE_HIDDEN_GAP_MS : ALIVE_GAP_MS)) stopped(aliveAt, now);
    aliveAt = now;
  }

  // stopped gives the module [from, to], a time the page ran nothing (it
  // applies to the streams open then), as a busy interval.
  /** @param {number} from @param {number} to */
  function stopped(from, to) {
    if (!watching || broken) return;
    try { pushOp(-1, null, from, to); } catch (e) { fail('shim failed', e); }
  }
  function aliveTick() {
    aliveTimer = 0;
    if (!watching) return;
    alive(performance.now());
    aliveTimer = setTimeout(aliveTick, hidden ? ALIVE_HIDDEN_TICK_MS : ALIVE_TICK_MS);
  }
  // onVisibility ticks at once on a change (the page may have been stopped
  // until now), then at the pace of the new state.
  function onVisibility() {
    if (document.hidden) hidden = true; // seen hidden: this tick judges by the hidden allowance
    else if (hidden) { hiddenAt = performance.now(); hidden = false; }
    clearTimeout(aliveTimer);
    aliveTick();
  }

  // watchStreams keeps the beforeunload listener and the alive timer while
  // a stream is measured or a request that looks like one waits for its
  // headers (waiting: the page busy then delays its first token; the module
  // keeps the last busy intervals for the streams it starts next).
  var waiting = 0;
  function watchStreams() {
    var want = measured.size > 0 || waiting > 0;
    if (want === watching) return;
    watching = want;
    if (want) {
      observeBusy();
      addEventListener('beforeunload', onBeforeUnload);
      document.addEventListener('visibilitychange', onVisibility);
      aliveAt = performance.now();
      hidden = document.hidden;
      if (!aliveTimer) aliveTimer = setTimeout(aliveTick, hidden ? ALIVE_HIDDEN_TICK_MS : ALIVE_TICK_MS);
    } else {
      removeEventListener('beforeunload', onBeforeUnload);
      document.removeEventListener('visibilitychange', onVisibility);
      clearTimeout(aliveTimer);
      aliveTimer = 0;
    }
  }

  var inGrace = 0; // ends waiting out their grace, or for their protocol (endStream)
  /** @type {Array<() => void>} */
  var graceWaiters = [];
  /** @type {Set<(now?: boolean) => void>} */
  var protoWait = new Set(); // ends waiting for their protocol (endStream)

  // graceDone: one end that waited has been sent; settled() may resolve.
  function graceDone() {
    if (--inGrace === 0) graceWaiters.splice(0).forEach(function (w) { w(); });
  }

  /** @param {ItlmonRec} rec @param {number} at */
  function endOnError(rec, at) {
    if (rec.done || rec.failedAt >= 0) return;
    rec.failedAt = at;
    inGrace++;
    setTimeout(function () {
      endStream(rec, NET_ERROR, at); // a no-op when pagehide ended it
      graceDone();
    }, at - leavingAt < LEAVE_GRACE_MS ? LEAVE_GRACE_MS : ERROR_GRACE_MS);
  }

  // stageRead stages a read of stream r made at time at. While the module
  // loads, a read that does not fit in the queue's bound costs the stream
  // that takes the most room in it (this one or another) its measuring, until
  // it fits: one long stream past the bound does not take the streams beside
  // it along.
  /** @param {ItlmonRec} r @param {Uint8Array} chunk @param {number} at */
  function stageRead(r, chunk, at) {
    var cost = chunk.byteLength + 32;
    while (!pushOp(r.pid, chunk, at, 0)) {
      /** @type {ItlmonRec | null} */
      var hog = null;
      measured.forEach(function (m) { if (m !== r && (!hog || m.queued > hog.queued)) hog = m; });
      if (!hog || /** @type {ItlmonRec} */ (hog).queued <= r.queued + cost) { unmeasure(r); return; }
      unmeasure(hog);
    }
    if (!api) r.queued += cost;
  }

  // unmeasure lets a stream through unmeasured: its reads did not fit in the
  // queue while the module loaded. Its start and what was staged or queued
  // for it are dropped (the module never hears of its id), and the room they
  // took in the queue's bound is given back to the other streams.
  /** @param {ItlmonRec} rec */
  function unmeasure(rec) {
    if (rec.done) return;
    rec.done = true;
    measured.delete(rec);
    watchStreams();
    if (dropped) dropped.unregister(rec);
    timing.unmeasured++;
    /** @type {ItlmonQueued[]} */
    var kept = [];
    for (var i = 0; i < queue.length; i++) {
      var c = queue[i];
      if (c[0] === 's' && c[1] === rec.pid) continue;
      if (c[0] === 'f') {
        var left = dropReads(c[1], c[2], c[3], c[4], rec.pid);
        if (!left[1]) { queuedBytes -= c[2] + 32 * c[4]; continue; }
        if (left[1] < c[4]) {
          queuedBytes -= c[2] - left[0] + 32 * (c[4] - left[1]);
          c = ['f', c[1].slice(0, left[0]), left[0], c[3].slice(0, 4 * left[1]), left[1]];
        }
      }
      kept.push(c);
    }
    queue = kept;
    var now = dropReads(stage, staged, ops, nops, rec.pid);
    staged = now[0];
    nops = now[1];
  }

  // dropReads removes stream id's reads from a batch (bytes st[0:nb], n
  // operations in op, as pushOp stages them), in place and keeping the order
  // of the rest, and returns what is left: [bytes, operations].
  /** @param {Uint8Array} st @param {number} nb @param {Float64Array} op @param {number} n @param {number} id @returns {[number, number]} */
  function dropReads(st, nb, op, n, id) {
    var src = 0, dst = 0, j = 0;
    for (var i = 0; i < n; i++) {
      var k = 4 * i, len = op[k + 1];
      if (op[k] === id) { src += len; continue; }
      if (dst !== src && len) st.copyWithin(dst, src, src + len);
      src += len;
      dst += len;
      if (j !== i) op.copyWithin(4 * j, k, k + 4);
      j++;
    }
    return [nb - (src - dst), j];
  }

  // sweep ends the streams whose bodies were reported collected and that
  // have not been read for silentMs.
  /** @param {number} silentMs */
  function sweep(silentMs) {
    if (sweepTimer) clearTimeout(sweepTimer);
    sweepTimer = 0;
    var now = performance.now(), next = Infinity, n = 0;
    measured.forEach(function (rec) {
      if (!abandoned(rec)) return;
      if (now - rec.lastAt >= silentMs) { endStream(rec, CANCELLED, rec.lastAt); n++; } else next = Math.min(next, rec.lastAt + silentMs - now);
    });
    if (next < Infinity) sweepTimer = setTimeout(function () { sweep(SILENT_MS); }, next + 1000);
    return n;
  }

  // abandoned: the stream's body was reported collected and nothing says otherwise.
  /** @param {ItlmonRec} rec */
  function abandoned(rec) { return rec.collected && !rec.pulling; }

  function sweepLater() {
    if (!sweepTimer) sweepTimer = setTimeout(function () { sweep(SILENT_MS); }, 1000);
  }

  // ---- the fetch shim ----

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
  /** @param {ReadableStream<Uint8Array>} body */
  function allowBYOB(body) {
    Object.defineProperty(body, 'getReader', {
      configurable: true,
      writable: true,
      value: /** @this {ReadableStream} @param {any} [opts] */ function getReaderBYOB(opts) {
        if (this !== body || !opts || opts.mode !== 'byob') return getReader.apply(this, /** @type {any} */ (arguments));
        var inner = /** @type {ReadableStreamDefaultReader<Uint8Array>} */ (getReader.call(body)); // throws on a locked body, as natively
        var bytes = new ReadableStream({
          type: 'bytes',
          pull: function (c) {
            return inner.read().then(/** @param {ReadableStreamReadResult<Uint8Array>} r @returns {any} */ function next(r) {
              if (r.done) {
                c.close();
                var br = c.byobRequest; // a pending BYOB read gets its done
                if (br) br.respond(0);
                return;
              }
              if (!r.value.byteLength) return inner.read().then(next); // enqueue would throw
              c.enqueue(/** @type {Uint8Array<ArrayBuffer>} */ (r.value));
            });
          },
          cancel: function (reason) { return inner.cancel(reason); },
        });
        return bytes.getReader(opts);
      },
    });
    return body;
  }

  /** @param {Response} resp @param {ItlmonFacts} facts @param {number} t0 @param {number} headersAt */
  function wrap(resp, facts, t0, headersAt) {
    /** @type {ReadableStreamDefaultReader<Uint8Array> | null} */
    var reader = null;
    /** @type {Response | null} */
    var out = null;
    var dead = false;
    try {
      if (!on() || !resp.body || resp.status < 200 || resp.status > 599) return resp;
      var ct = resp.headers.get('content-type') || '';
      // The AI SDK's data stream (AI SDK 3-4's useChat) is text/plain, told
      // by its header: measured as a token stream is.
      if (!facts.urlMatch && !typeMatches(ct) && !resp.headers.get('x-vercel-ai-data-stream')) return resp;
      if (resp.status === 204 || resp.status === 205 || resp.status === 304) return resp;
      var origin = resp.headers.get('x-itlmon-stream') || resp.headers.get('x-request-id') || '';
      var rec = begin(facts, t0, resp.status, ct.split(';')[0].trim().toLowerCase(), origin, headersAt);
      if (!rec) return resp; // not measured: the body is untouched
      var r = rec, src = resp.body;
      /** @param {number} kind */
      var finish = function (kind) { endStream(r, kind, performance.now()); };
      // The page's body is a stream pulled from the original one: each read
      // is stamped as it arrives (highWaterMark > 0: pull runs at network
      // pace, not at the page's), staged, and passed on as the same chunk.
      // Every outcome passes through here: end, error (abort or network),
      // and the page cancelling its body.
      // It is a default stream, not a byte stream like the original: a byte
      // stream costs ~6 µs more per chunk in Chromium (each enqueue transfers
      // the buffer). allowBYOB gives BYOB readers a byte stream on demand.
      // The handlers are made once per stream, not per chunk.
      /** @type {ReadableStreamDefaultController<Uint8Array>} */
      var ctrl;
      var sig = facts.signal;
      /** @type {(() => void) | null} */
      var onAbort = null;
      // unlisten drops our abort listener once an abort can no longer change
      // what the page gets, so a long-lived signal does not collect one per
      // request: the body errored, was cancelled, or was read to its end.
      var unlisten = function () {
        if (onAbort && sig) { try { sig.removeEventListener('abort', onAbort); } catch (_) { /* not a signal */ } onAbort = null; }
      };
      /** @param {ReadableStreamReadResult<Uint8Array>} x */
      var onRead = function (x) {
        var at = performance.now();
        alive(at);
        reading = false;
        r.lastAt = at;
        r.collected = r.pulling = false; // read: alive
        if (x.done) {
          try { ctrl.close(); } catch (_) { /* cancelled or errored meanwhile */ }
          // Until the page has read what is queued, an abort must still
          // discard it; after that (closed and drained) it changes nothing.
          if (ctrl.desiredSize === 0) unlisten();
          finish(BODY_END);
          return;
        }
        if (!r.done && !broken) {
          try { stageRead(r, x.value, at); } catch (e) { fail('shim failed', e); }
        }
        try { ctrl.enqueue(x.value); } catch (_) { return; } // cancelled or errored meanwhile
        if (/** @type {number} */ (ctrl.desiredSize) > 0) more();
      };
      // more reads the next chunk of the original while the page's stream
      // has room (desiredSize > 0): straight from the last read rather than
      // through the stream's next pull, which waits for the stream's own
      // bookkeeping of the last one (make bench: the cost per chunk). pull
      // calls it when the page has made room.
      var reading = false;
      var more = function () {
        if (reading || dead || !reader) return;
        reading = true;
        r.collected = false; // pulled: alive
        r.pulling = true;
        reader.read().then(onRead, onError);
      };
      /** @param {any} err */
      var onError = function (err) {
        reading = false;
        r.pulling = false;
        try { ctrl.error(err); } catch (_) { /* already errored */ }
        unlisten();
        if ((sig && sig.aborted) || (err && err.name === 'AbortError')) finish(ABORTED);
        else endOnError(r, performance.now());
      };
      var body = new ReadableStream({
        start: function (c) { ctrl = c; },
        pull: function () { more(); },
        // The page cancelled its body (reader.cancel(), or an SDK that stops
        // at its terminal event): not an abort by itself; the module decides.
        cancel: function (reason) {
          unlisten();
          finish(CANCELLED);
          return reader ? reader.cancel(reason) : undefined;
        },
      }, readableStrategy);
      allowBYOB(body);
      // Locked only now that nothing before it can throw: on a failure
      // below, the catch unlocks it and the page gets the response untouched.
      reader = src.getReader();
      try {
        out = new Response(body, { status: resp.status, statusText: resp.statusText, headers: resp.headers });
      } catch (e) {
        dead = true;
        reader.releaseLock();
        endStream(r, NET_ERROR, performance.now());
        return resp;
      }
      dress(out, resp);
      if (dropped) dropped.register(body, r, r);
      // Aborting a fetch errors its body at once and discards what was
      // queued (Fetch: "abort the fetch"); our stream has read ahead, so it
      // must do the same or the page would still get the queued chunks,
      // also when the body has already arrived in full.
      if (sig && typeof sig.addEventListener === 'function') {
        var s = sig;
        onAbort = function () {
          unlisten();
          var reason = s.reason !== undefined ? s.reason : new DOMException('The operation was aborted.', 'AbortError');
          try { ctrl.error(reason); } catch (e) { /* already closed or errored */ }
          finish(ABORTED);
        };
        if (s.aborted) onAbort(); else s.addEventListener('abort', onAbort);
      }
      return out;
    } catch (e) {
      if (reader && !out) {
        dead = true;
        try { /** @type {ReadableStreamDefaultReader} */ (reader).releaseLock(); } catch (_) { /* the page's response stays usable */ }
      }
      fail('shim failed', e);
      return resp;
    }
  }

  // dress gives a wrapped response what the Response constructor cannot:
  // the original's url, redirected and type, its immutable headers, and a
  // clone() whose copy keeps them too.
  /** @param {Response} r @param {Response} orig @returns {Response} */
  function dress(r, orig) {
    Object.defineProperty(r, 'url', { value: orig.url });
    Object.defineProperty(r, 'redirected', { value: orig.redirected });
    Object.defineProperty(r, 'type', { value: orig.type });
    Object.defineProperty(r, 'headers', { value: orig.headers });
    Object.defineProperty(r, 'clone', {
      value: /** @this {Response} */ function clone() {
        var c = dress(Response.prototype.clone.call(this), orig);
        // Cloning tees the body: this response and the clone get new streams.
        if (this.body) allowBYOB(this.body);
        if (c.body) allowBYOB(c.body);
        return c;
      },
    });
    return r;
  }

  // beforeHeaders records a request that looked like a streamed completion
  // and ended before any response headers: aborted, or a network error,
  // after the time waited.
  /** @param {ItlmonFacts} facts @param {number} t0 @param {any} err @param {number} [at] when it ended (now) */
  function beforeHeaders(facts, t0, err, at) {
    try {
      if (!on()) return;
      if (at === undefined) at = performance.now();
      var kind = (facts.signal && facts.signal.aborted) || (err && err.name === 'AbortError') ? ABORTED : NET_ERROR;
      var rec = begin(facts, t0, 0, '', '', -1);
      if (rec && kind === NET_ERROR) endOnError(rec, at);
      else if (rec) endStream(rec, kind, at);
    } catch (e) { fail('shim failed', e); }
  }

  /**
   * The page's fetch, measured: installed as window.fetch (and called with
   * the page's this, so it throws where the page's would).
   * @this {any}
   * @param {RequestInfo | URL} input
   * @param {RequestInit} [init]
   * @returns {Promise<Response>}
   */
  function shimFetch(input, init) {
    var self = this;
    if (!on()) return origFetch.apply(self, /** @type {any} */ (arguments));
    /** @type {ItlmonFacts | null} */
    var facts = null;
    try { facts = requestFacts(input, init); } catch (_) { facts = null; }
    var args = /** @type {any} */ (arguments);
    if (facts && facts.modelRead) {
      // fetch always answers with a promise: a page that waits for it waits
      // a few microtasks more (see requestModel), and t0 is taken after.
      var f0 = facts;
      return Promise.race([f0.modelRead, new Promise(function (r) { setTimeout(r, MODEL_WAIT_MS); })])
        .then(function () { return issueFetch(self, args, f0); });
    }
    return issueFetch(self, args, facts);
  }

  // wrapper is what window.fetch is while measuring: the shim, or the
  // snippet's function, which calls the shim once this file has run.
  /** @type {typeof fetch} */
  var wrapper = snip ? snip.fetch : shimFetch;

  // late measures a response to a request the snippet issued before this
  // file ran: args are the page's fetch arguments (a Request's body is used
  // by then, so its model comes from its path only), t0 when it was issued,
  // headersAt when its headers came. The snippet held a streamed response
  // back until now (see itl-snippet.js): its reads are stamped from here on.
  /** @param {Response} resp @param {IArguments} args @param {number} t0 @param {number} headersAt @returns {Response} */
  function late(resp, args, t0, headersAt) {
    try {
      if (!on()) return resp;
      var f = requestFacts(args[0], args[1]);
      if (!f || !f.sampled) return resp;
      var waited = performance.now() - headersAt;
      if (waited >= 1) { timing.late++; timing.lateMs = Math.max(timing.lateMs, waited); }
      if (f.eager) load();
      return wrap(resp, f, t0, headersAt);
    } catch (_) { return resp; }
  }

  // lateError records a request the snippet issued before this file ran
  // that ended before any response headers (see beforeHeaders).
  /** @param {IArguments} args @param {number} t0 @param {number} at @param {any} err */
  function lateError(args, t0, at, err) {
    try {
      var f = on() ? requestFacts(args[0], args[1]) : null;
      if (f && f.sampled && f.eager) beforeHeaders(f, t0, err, at);
    } catch (_) { /* not recorded */ }
  }

  /**
   * issueFetch calls the page's own fetch with its arguments and, for a
   * sampled request, wraps the response to measure it.
   * @param {any} self @param {any} args @param {ItlmonFacts | null} facts
   * @returns {Promise<Response>}
   */
  function issueFetch(self, args, facts) {
    if (facts && debugSeen) { if (debugSeen.size > 1000) debugSeen.clear(); debugSeen.add(facts.full); }
    var t0 = performance.now();
    var p = origFetch.apply(self, args);
    if (!facts || !facts.sampled) return p;
    var f = facts;
    if (!f.eager) return p.then(function (resp) { return wrap(resp, f, t0, performance.now()); });
    load(); // a stream is coming: the module is needed
    waiting++;
    watchStreams();
    var answered = function () { waiting--; watchStreams(); };
    return p.then(function (resp) {
      try { return wrap(resp, f, t0, performance.now()); } finally { answered(); }
    }, function (err) {
      beforeHeaders(f, t0, err);
      answered();
      throw err;
    });
  }

  // ---- long tasks: a busy main thread delays the stamps ----

  var busyObserved = false;
  function observeBusy() {
    if (busyObserved) return;
    busyObserved = true;
    try {
      var types = PerformanceObserver.supportedEntryTypes || [];
      var type = types.indexOf('long-animation-frame') >= 0 ? 'long-animation-frame' : types.indexOf('longtask') >= 0 ? 'longtask' : '';
      if (!type) return;
      new PerformanceObserver(function (list) {
        if (!watching || broken) return;
        var es = list.getEntries();
        for (var i = 0; i < es.length; i++) pushOp(-1, null, es[i].startTime, es[i].startTime + es[i].duration);
      }).observe({ type: type });
    } catch (_) { /* no observer: no busy intervals */ }
  }

  // ---- debug: clients the shim never saw ----

  // watchUnseen logs one console.info when a fetch to a streamed-completion
  // URL completes that the shim never saw: a client that kept the page's
  // fetch from before itl.js ran (the SDKs keep the fetch they saw when
  // constructed). A hint, never an error.
  function watchUnseen() {
    if (debugSeen || typeof PerformanceObserver !== 'function') return;
    var seen = debugSeen = new Set();
    try {
      var obs = new PerformanceObserver(function (list) {
        var es = /** @type {PerformanceResourceTiming[]} */ (list.getEntries());
        for (var i = 0; i < es.length; i++) {
          var e = es[i];
          if (e.initiatorType !== 'fetch' || seen.has(e.name)) continue;
          if (snip && e.startTime < loaderStart) continue; // issued through the snippet's fetch
          var u = new URL(e.name);
          if (!urlMatches(e.name) && !endpointMatches(u.pathname)) continue;
          obs.disconnect();
          console.info('itlmon: ' + u.origin + u.pathname + ' was fetched by a client that kept the page\'s fetch from before ' +
            'itl.js ran, so it is not measured. Put the itlmon snippet (or the itl.js tag) in <head> before the app\'s scripts, or give the client ' +
            'itlmon\'s fetch: { fetch: (...a) => (globalThis.itlmon?.fetch ?? fetch)(...a) }');
          return;
        }
      });
      obs.observe({ type: 'resource', buffered: true });
    } catch (_) { /* no resource timing */ }
  }

  // ---- the module, loaded lazily ----

  function collectorBase() { return cfg.collector.replace(/\/+$/, ''); }

  // scheduleLoad loads the module once the page has loaded and the browser
  // is idle (at most 5 s after load; 1 s after it where there is no
  // requestIdleCallback), unless a stream needed it earlier.
  var loadScheduled = false;
  function scheduleLoad() {
    if (loadScheduled) return;
    loadScheduled = true;
    var idle = function () {
      if (typeof g.requestIdleCallback === 'function') g.requestIdleCallback(function () { load(); }, { timeout: 5000 });
      else setTimeout(function () { load(); }, 1000);
    };
    if (document.readyState === 'complete') idle(); else addEventListener('load', idle, { once: true });
  }

  /** @type {((host: ItlmonHost) => void) | null} */
  var onHost = null;

  // load fetches itl-module.js, which loads the module (see there) and hands
  // back its API; then the queued calls are replayed in order.
  function load() {
    if (loading || broken || !installed) return;
    if (optedOut()) {
      if (!readySettled) readyResolve(false); // nothing to load for now; a later stream may
      return;
    }
    loading = true;
    if (readySettled) ready = newReady();
    timing.loadAt = performance.now();
    var col = collectorBase();
    new Promise(/** @param {(h: ItlmonHost) => void} resolve */ function (resolve, reject) {
      onHost = resolve;
      var s = document.createElement('script');
      s.src = col + '/itl-module.js';
      s.async = true;
      s.nonce = nonce; // a page whose CSP allows scripts by nonce gave the tag one
      s.onload = function () { reject(new Error('itl-module.js defined no module host')); };
      s.onerror = function () { reject(new Error('load ' + s.src)); };
      (document.head || document.documentElement).appendChild(s);
    }).then(function (host) {
      if (host.protocol !== PROTOCOL) throw new Error('itl-module.js speaks protocol ' + host.protocol + ', want ' + PROTOCOL);
      return host.start({ collector: col, worker: cfg.worker !== false, summaryFields: SUMMARY.length, fetch: origFetch,
        fail: fail, timing: timing, nonce: nonce, keepBytes: cfg.testHooks && +cfg.testKeepBytes > 0 ? +cfg.testKeepBytes : 0,
        workerWaitMs: cfg.testHooks && +cfg.testWorkerWaitMs > 0 ? +cfg.testWorkerWaitMs : 0 });
    }).then(function (a) {
      if (broken) return;
      return a.configure(moduleConfig()).then(function (ok) {
        if (ok !== true) throw new Error(String(ok));
        if (broken) return;
        api = a;
        timing.mode = a.mode;
        var q = queue;
        queue = [];
        queuedBytes = queuedEnds = 0;
        for (var i = 0; i < q.length; i++) call(q[i]);
        flush(); // what was staged since the last end
        if (stage.length < a.flushBytes) stage = new Uint8Array(a.flushBytes + (8 << 10));
        timing.readyAt = performance.now();
        readyResolve(!broken);
      });
    }).catch(function (e) { fail('not loaded', e); });
  }

  // moduleConfig is what the module's configure gets from the page's
  // settings (itl-module.js adds what it knows of the browser).
  /** @returns {ItlmonModuleConfig} */
  function moduleConfig() {
    var col = collectorBase();
    var site = encodeURIComponent(cfg.site);
    return {
      site: cfg.site,
      wsURL: col.replace(/^http/, 'ws') + '/v1/ws?site=' + site,
      beaconURL: col + '/v1/beacon?site=' + site,
      release: String(cfg.release || ''),
      flushMs: +cfg.flushMs || 0,
      socketIdleMs: +cfg.socketIdleMs || 0,
      testHooks: !!cfg.testHooks,
      pageOrigin: location.origin,
      pagePath: redactPath(location.pathname),
    };
  }

  // install wraps window.fetch (once a site is known) and schedules the module.
  function install() {
    if (!installed) {
      installed = true;
      addEventListener('pagehide', function () {
        // Streams still open are cut by the navigation: record them now, so
        // they leave with the beacon (those whose bodies were collected, at
        // their last read).
        var now = performance.now();
        timing.replayed = 0;
        protoWait.forEach(function (send) { send(true); });
        measured.forEach(function (rec) {
          if (rec.failedAt >= 0) endStream(rec, PAGEHIDE, rec.failedAt); // failed by the page's teardown
          else if (abandoned(rec)) endStream(rec, CANCELLED, rec.lastAt);
          else endStream(rec, PAGEHIDE, now);
        });
        try { if (api && !broken) api.pagehide(); } catch (e) { fail('module failed', e); }
        timing.pagehideMs = performance.now() - now;
      });
      addEventListener('pageshow', function (e) {
        try { if (e.persisted && api && !broken) api.pageshow(); } catch (x) { fail('module failed', x); }
      });
      // A frozen page (Chromium's Page Lifecycle: a background tab, a
      // mobile browser switched away from) runs nothing, its reads
      // included, while the network goes on: at resume the backlog comes
      // in one read, which alone would blame the stall on the network. The
      // time frozen is a busy interval, as a long task is.
      var frozenAt = -1;
      document.addEventListener('freeze', function () { frozenAt = performance.now(); });
      document.addEventListener('resume', function () {
        if (frozenAt >= 0) stopped(frozenAt, performance.now());
        frozenAt = -1;
      });
    }
    if (g.fetch === origFetch && !optedOut()) g.fetch = wrapper;
    if (loadScheduled && readySettled) load(); // opted in again after ready said false
    else scheduleLoad();
  }

  // ---- public API ----

  /** @param {any} [opts] @returns {Promise<boolean>} */
  function init(opts) {
    try {
      opts = opts || {};
      for (var k in opts) {
        if (!Object.prototype.hasOwnProperty.call(opts, k)) continue;
        if (k === 'match') {
          var m = opts.match || {};
          cfg.match = {
            contentTypes: (m.contentTypes || cfg.match.contentTypes).map(function (/** @type {string} */ s) { return String(s).toLowerCase(); }),
            urls: m.urls || cfg.match.urls,
            endpoints: m.endpoints || cfg.match.endpoints,
          };
        } else /** @type {any} */ (cfg)[k] = opts[k];
      }
      cfg.sampleRate = Math.max(0, Math.min(1, cfg.sampleRate == null ? 1 : +cfg.sampleRate));
      if (cfg.debug) watchUnseen();
      if (optedOut()) {
        if (g.fetch === wrapper) g.fetch = origFetch;
        if (!loading && !readySettled) readyResolve(false);
        return ready;
      }
      if (api && !broken) {
        // Resolves once the module has the new settings.
        return api.configure(moduleConfig()).then(function (r) {
          if (r !== true) { fail('configure', r); return false; }
          if (g.fetch === origFetch && !broken) g.fetch = wrapper;
          return !broken;
        }, function (e) { fail('configure', e); return false; });
      }
      if (!cfg.site) throw new Error('no site key (data-site or itlmon.init({site}))');
      if (!cfg.collector) throw new Error('no collector URL');
      install();
    } catch (e) { fail('init', e); }
    return ready;
  }

  /** @param {(s: ItlmonSummary) => void} cb */
  function onStream(cb) {
    if (typeof cb !== 'function') return function () {};
    listeners.push(cb);
    return function () { var i = listeners.indexOf(cb); if (i >= 0) listeners.splice(i, 1); };
  }

  /** @returns {Promise<void>} */
  function settled() {
    if (broken) return Promise.resolve();
    if (inGrace) return new Promise(function (w) { graceWaiters.push(function () { w(undefined); }); }).then(settled);
    if (api) return api.settled();
    // Ends wait in the queue for the module (loading: a stream started it).
    return queuedEnds && !readySettled ? ready.then(function () { return settled(); }) : Promise.resolve();
  }

  try {
    if (script && script.src) cfg.collector = new URL(script.src, location.href).origin;
    else cfg.collector = location.origin;
  } catch (_) { /* no collector until init */ }
  var auto = script && script.getAttribute('data-site');
  if (script && script.getAttribute('data-release')) cfg.release = script.getAttribute('data-release') || '';
  if (script && script.getAttribute('data-worker') === 'false') cfg.worker = false;
  if (script && script.hasAttribute('data-debug')) cfg.debug = true;

  var pub = {
    __itlmon: true,
    init: init,
    onStream: onStream,
    // ready resolves true once the module is ready (loaded lazily, see
    // load), false if it is off.
    get ready() { return ready; },
    // settled resolves once every stream that has ended so far has been
    // given to the onStream listeners (a summary arrives once the module has
    // it: a message later with the module in a Worker, or once it loaded).
    settled: settled,
    // fetch is the measuring fetch: give it to clients that keep their own
    // (the SDKs keep the fetch they saw when constructed). Whatever this a
    // client calls it with, the page's fetch gets none.
    /** @param {RequestInfo | URL} input @param {RequestInit} [init] */
    fetch: function fetch(input, init) { return shimFetch.apply(undefined, /** @type {any} */ (arguments)); },
    timing: timing,
    get active() { return installed && !broken && g.fetch === wrapper; },
    get originalFetch() { return origFetch; },
    // _stats: the module's counters (for tests and debugging).
    _stats: function () { return api && !broken ? api.query('stats') : Promise.resolve(null); },
    // _crash(mode): makes the module panic (testHooks only, see wasm/browser).
    /** @param {string} mode */
    _crash: function (mode) { return api && !broken ? api.query('crash', mode) : Promise.resolve(false); },
    // _wrap measures a Response as if fetch had returned it (testHooks only:
    // the browser cost benchmark feeds it a local stream).
    /** @param {Response} resp @param {string} href */
    _wrap: function (resp, href) {
      if (!cfg.testHooks) return resp;
      var u = new URL(href, location.href), t = performance.now();
      return wrap(resp, { href: u.origin + u.pathname, full: u.href, method: 'GET', model: '', signal: null, urlMatch: false,
        eager: false, sampled: true }, t, t);
    },
    // _collected() marks every open stream as reported collected, as a
    // FinalizationRegistry callback would, and _sweep(ms) ends those not read
    // for ms (testHooks only).
    _collected: function () { if (cfg.testHooks) measured.forEach(function (r) { r.collected = true; }); },
    /** @param {number} ms */
    _sweep: function (ms) { return cfg.testHooks ? sweep(ms) : 0; },
    // _kept() is what the page keeps for a pagehide replay with the module
    // in a Worker, null otherwise (testHooks only).
    _kept: function () { return cfg.testHooks && api && api.kept ? api.kept() : null; },
    // __module is how itl-module.js hands over its host.
    /** @param {ItlmonHost} host */
    __module: function (host) { if (onHost) { var f = onHost; onHost = null; f(host); } },
  };
  if (snip) {
    // The snippet's object becomes the API (a page may hold it), and what
    // it queued is replayed: init and onStream calls, requests that ended
    // before their headers, and streamed responses it held back.
    var stub = g.itlmon;
    Object.defineProperties(stub, Object.getOwnPropertyDescriptors(pub));
    timing.snippetAt = snip.t;
    timing.loaderAt = snip.loadAt;
    timing.unmeasured += snip.missed;
  } else g.itlmon = pub;
  if (auto) init({ site: auto });
  if (snip) snip.attach({ shim: shimFetch, late: late, lateError: lateError, ready: ready });
  timing.loaderMs = performance.now() - loaderStart;
})();
