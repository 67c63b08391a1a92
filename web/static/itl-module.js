// @ts-check
/*! itlmon module host: loads the browser module (wasm_exec.js, itl.wasm) for itl.js.
 *
 * itl.js fetches this file lazily (when the page is idle after its load event,
 * or at the first measured stream) and gets from it, through
 * itlmon.__module, a host whose start() runs the module in a dedicated Worker
 * (itl-worker.js; the default), or on the page's main thread when the Worker
 * cannot start (a Content-Security-Policy without blob: workers) or the page
 * asked for it (worker: false). Either way itl.js sees one API:
 *
 *   configure(cfg) -> Promise(true | error text)
 *   start(pid, args)               a stream the page numbered pid; args: the module's start arguments
 *   feed(stage, nb, ops, n) -> next  a staged batch: nb bytes, n ops (ids are pids); next: null to
 *                                  reuse the buffers, or [stage, ops] to stage into
 *                                  (in a Worker, which takes them)
 *   end(pid, at, kind, httpStatus, proto, done)
 *                                  done(summary float64s), now or later, if it was measured
 *   pagehide(), pageshow(), settled() -> Promise, query('stats' | 'crash', arg) -> Promise
 *   mode, flushMs, flushBytes      'worker' | 'main'; a batch leaves after this long, or this many bytes
 *
 * With the module in a Worker, what the module holds must still leave with
 * navigator.sendBeacon on pagehide, from the page: a Worker has no
 * sendBeacon, hears of pagehide too late, and the page cannot wait for its
 * answer there. So the page keeps two things (see workerAPI):
 *   - the Worker's mirror: the records its module holds, and the streams
 *     it has open, as beacon batches, with how many of the page's stream
 *     messages they reflect;
 *   - a copy of every stream the latest mirror does not show ended: its
 *     start and its end, as the page handed them over, and the batches
 *     that hold its reads (bytes and stamps; a batch is copied whole, and
 *     kept while a stream it holds is).
 * On pagehide it sends the mirror's records, and the streams the mirror
 * does not show ended (open ones, ended by the page at pagehide, and ones
 * whose last read or end the Worker had not answered yet: behind a
 * buffering proxy a whole answer arrives in one read, and the reader may
 * leave in that read's own task) are measured again by a module started on
 * the page there and then, from the compiled module the page already holds
 * and the copies (the same meter on the same stamps gives the same record),
 * and leave with a beacon of their own. That costs one module start on the
 * main thread during pagehide (measured: ~35 ms in Chromium, ~10-20 ms in
 * Firefox, 100-400 ms in WebKitGTK; several times that on a starved
 * machine), and only when such a stream exists; otherwise pagehide costs
 * nothing more. A module kept started for it would move that cost to every
 * page's load, and keep its memory (~3 MB) for the page's life.
 */
(function () {
  'use strict';
  /** @type {any} */
  var g = globalThis;
  var loader = g.itlmon;
  if (!loader || typeof loader.__module !== 'function') return;

  // UNMEASURED is a stream id the module never gives: reads of streams it
  // did not start are fed under it and ignored.
  var UNMEASURED = 2147483647;

  /** @type {ItlmonHost} */
  var host = {
    protocol: 2,
    start: function (env) {
      var worker = env.worker && typeof Worker === 'function' && typeof Blob === 'function' &&
        typeof URL.createObjectURL === 'function';
      return (worker ? startWorker(env).catch(function (e) {
        if (e && e.final) throw e;
        env.timing.workerError = String(e && e.message || e);
        return startMain(env);
      }) : startMain(env));
    },
  };

  // browserFacts is what the module's configure gets besides the page's
  // settings: what the browser says of itself, and its timer's resolution.
  /** @param {Record<string, unknown>} c */
  function browserFacts(c) {
    var nav = /** @type {any} */ (navigator), uad = nav.userAgentData, conn = nav.connection;
    c.userAgent = nav.userAgent;
    c.uaBrands = uad && uad.brands ? uad.brands.map(function (/** @type {any} */ b) { return b.brand + ';' + b.version; }).join(',') : '';
    c.uaPlatform = uad ? uad.platform || '' : '';
    c.uaMobile = !!(uad && uad.mobile);
    c.connType = conn && conn.effectiveType || '';
    c.connRTTMs = conn && +conn.rtt || 0;
    c.timerFloorUs = timerFloorUs();
    c.crossOriginIsolated = !!g.crossOriginIsolated;
    return c;
  }

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

  /** @param {string} text */
  function warnFromModule(text) {
    try { console.warn(String(text)); } catch (_) { /* no console */ }
  }

  // ---- in a Worker ----

  // WORKER_WAIT_MS bounds the Worker's start once it has the module (with
  // testHooks, the page may set another, testWorkerWaitMs); past it the
  // module runs on the main thread.
  var WORKER_WAIT_MS = 10000;

  // startWorker runs the module in a dedicated Worker made from a blob: URL
  // (a Worker's script must be same-origin; what it imports need not be),
  // which imports itl-worker.js from the collector. It rejects when the
  // Worker cannot start or load the module, and the module then runs on the
  // main thread.
  /** @param {ItlmonHostEnv} env @returns {Promise<ItlmonHostAPI>} */
  function startWorker(env) {
    var col = env.collector;
    return new Promise(function (resolve, reject) {
      var src = 'importScripts(' + JSON.stringify(col + '/itl-worker.js') + ');\nitlmonWorker(' + JSON.stringify(col) + ', ' +
        env.summaryFields + ');\n';
      var url = URL.createObjectURL(new Blob([src], { type: 'text/javascript' }));
      /** @type {Worker | null} */
      var w = null;
      var timer = 0, settled = false;
      /** @param {any} e */
      var done = function (e) {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        URL.revokeObjectURL(url);
        if (!w) return reject(e);
        w.onmessage = null;
        w.onerror = null;
        if (e) { w.terminate(); reject(e); return; }
        // What a pagehide replay needs on the page: wasm_exec.js's Go, and
        // the compiled module (without either, the Worker's mirror is sent
        // as it is).
        loadScript(col + '/wasm_exec.js', env.nonce).catch(function () {});
        resolve(workerAPI(w, env, compiled));
      };
      /** @type {WebAssembly.Module | null} */
      var compiled = null;
      try { w = new Worker(url, { name: 'itlmon' }); } catch (e) { return done(e); }
      var wk = w;
      // Compiling here (off the main thread: V8 compiles in the background)
      // while the Worker starts, rather than after, takes ~100 ms off the
      // time to ready; a WebAssembly.Module is sent without a copy.
      // A module the collector does not serve is not tried again anywhere.
      var wasmURL = col + '/itl.wasm';
      env.fetch.call(undefined, wasmURL, { credentials: 'omit' }).then(function (r) {
        if (!r.ok) {
          var e = /** @type {any} */ (new Error('GET ' + wasmURL + ': ' + r.status));
          e.final = true;
          throw e;
        }
        return WebAssembly.compileStreaming ? WebAssembly.compileStreaming(r) : null;
      }).then(function (mod) {
        compiled = mod;
        handOver(mod);
      }, function (e) {
        if (e && e.final) done(e);
        else handOver(null); // the Worker fetches and compiles it itself
      });
      // handOver gives the Worker the module. The Worker's start is bounded
      // from here, not from its creation: the download before takes what
      // the network takes (on a slow one, longer than the bound), and the
      // main thread would wait for the same bytes.
      /** @param {WebAssembly.Module | null} mod */
      var handOver = function (mod) {
        if (settled) return;
        wk.postMessage(['module', mod]);
        timer = setTimeout(function () { done(new Error('module not ready in its Worker')); }, env.workerWaitMs || WORKER_WAIT_MS);
      };
      wk.onmessage = function (ev) {
        var m = ev.data;
        if (m[0] === 'r') done(null);
        else if (m[0] === 'x') done(new Error(m[1]));
        else if (m[0] === 'w') warnFromModule(m[1]);
      };
      wk.onerror = function (ev) {
        if (ev && ev.preventDefault) ev.preventDefault();
        done(new Error(ev && ev.message || 'Worker failed'));
      };
    });
  }

  // KEEP_BYTES bounds the memory of the streams' copies the page keeps for
  // a pagehide replay (see workerAPI), which are copied into arrays of SLAB
  // bytes (with testHooks, the page may set a smaller bound, testKeepBytes,
  // and the slabs are an eighth of it); MAX_BUSY bounds the busy intervals
  // kept.
  var KEEP_BYTES = 8 << 20;
  var SLAB = 1 << 20;
  var MAX_BUSY = 256;

  // workerAPI is the module's API over messages to its Worker (the protocol
  // is in itl-worker.js). Ids are the page's; summaries and query results
  // come back as messages. On pagehide the Worker's last mirror leaves by
  // sendBeacon, with the streams it does not show ended measured again on
  // the page (replay); the mirror also leaves for the collector configured
  // before, when configure changes it.
  /** @param {Worker} w @param {ItlmonHostEnv} env @param {WebAssembly.Module | null} mod @returns {ItlmonHostAPI} */
  function workerAPI(w, env, mod) {
    /** @type {Map<number, (f: Float64Array) => void>} */
    var ends = new Map();
    /** @type {Array<() => void>} */
    var waiting = [];
    /** @type {Map<number, (v: any) => void>} */
    var queries = new Map();
    var nq = 0;
    // The Worker's latest mirror (beacon batches: the records its module
    // holds, and its open streams as pagehide would end them), reflecting
    // the first `seen` of the `posted` stream messages (s, f, e).
    /** @type {Uint8Array | null} */
    var held = null;
    /** @type {Uint8Array | null} */
    var open = null;
    var posted = 0, seen = 0;
    // kept: each stream the mirror does not show ended, by page id;
    // batches: copies of the batches posted that hold reads of a kept
    // stream, in order; slabs: the arrays they are in, the last one being
    // filled, and slabBytes their size; spareSlab: one emptied, for the
    // next; busy: recent busy intervals (start, end pairs); facts: the
    // configuration the Worker's module got.
    /** @type {Map<number, ItlmonKept>} */
    var kept = new Map();
    /** @type {ItlmonKeptBatch[]} */
    var batches = [];
    /** @type {ItlmonSlab[]} */
    var slabs = [];
    var slabBytes = 0;
    /** @type {Uint8Array | null} */
    var spareSlab = null;
    var keepBytes = env.keepBytes || KEEP_BYTES, slabSize = env.keepBytes ? env.keepBytes >> 3 : SLAB;
    /** @type {number[]} */
    var busy = [];
    /** @type {object | null} */
    var facts = null;
    var beaconURL = '';
    /** @type {Array<(r: true | string) => void>} */
    var configs = [];
    /** @type {Array<[Uint8Array, Float64Array]>} */
    var spares = []; // staging buffers the Worker has given back: no allocation per batch
    /** @param {number} pid */
    var needed = function (pid) {
      var k = kept.get(pid);
      return !!k && !k.lost;
    };
    // biggest is the stream with a copy that has read the most bytes.
    /** @returns {ItlmonKept | null} */
    var biggest = function () {
      /** @type {ItlmonKept | null} */
      var h = null;
      kept.forEach(function (k) { if (!k.lost && (!h || k.bytes > h.bytes)) h = k; });
      return h;
    };
    // prune drops the batches no kept stream needs any more, and the slabs
    // left empty (the last one emptied is kept for the next batches).
    var prune = function () {
      batches = batches.filter(function (b) {
        if (b.pids.some(needed)) return true;
        b.slab.batches--;
        return false;
      });
      slabs = slabs.filter(function (sl) {
        if (sl.batches) return true;
        slabBytes -= sl.bytes.byteLength;
        if (sl.bytes.byteLength === slabSize) spareSlab = sl.bytes;
        return false;
      });
    };
    // neededOf is the bytes and operations of a batch's reads of streams
    // with a copy.
    /** @param {Float64Array} ops @param {number} n @returns {[number, number]} */
    var neededOf = function (ops, n) {
      var nb = 0, k = 0;
      for (var j = 0; j < 4 * n; j += 4) {
        if (needed(ops[j])) { nb += ops[j + 1]; k++; }
      }
      return [nb, k];
    };
    // keep copies a batch (its bytes, its n ops) to the end of slab sl and
    // returns the kept batch: all of it (whole: nb bytes, k = n ops), or
    // only its reads of streams with a copy (nb bytes, k ops: neededOf).
    /**
     * @param {ItlmonSlab} sl @param {Uint8Array} bytes @param {Float64Array} ops @param {number} n
     * @param {number} nb @param {number} k @param {boolean} whole @param {number[]} pids @returns {ItlmonKeptBatch}
     */
    var keep = function (sl, bytes, ops, n, nb, k, whole, pids) {
      var at = sl.used, opsAt = (at + nb + 7) & ~7;
      var kb = sl.bytes.subarray(at, at + nb), ko = new Float64Array(sl.bytes.buffer, opsAt, 4 * k);
      if (whole) {
        kb.set(bytes.subarray(0, nb));
        ko.set(ops.subarray(0, 4 * n));
      } else {
        for (var j = 0, off = 0, w = 0, o = 0; j < 4 * n; j += 4) {
          var len = ops[j] >= 0 ? ops[j + 1] : 0;
          if (needed(ops[j])) {
            kb.set(bytes.subarray(off, off + len), w);
            ko.set(ops.subarray(j, j + 4), o);
            w += len;
            o += 4;
          }
          off += len;
        }
      }
      sl.used = opsAt + 32 * k;
      sl.batches++;
      return { slab: sl, bytes: kb, ops: ko, n: k, pids: pids };
    };
    // footprint is what a batch of nb bytes and k ops takes in a slab, at
    // most (its operations start 8-aligned).
    /** @param {number} nb @param {number} k */
    var footprint = function (nb, k) { return nb + 7 + 32 * k; };
    // compact copies what the streams with a copy need of the batches into
    // one new array, leaving out the reads of the others: the way a stream
    // that lost its copy gives back the memory of the batches it shared.
    var compact = function () {
      prune();
      var size = 0;
      var sizes = batches.map(function (b) {
        var c = neededOf(b.ops, b.n);
        size += footprint(c[0], c[1]);
        return c;
      });
      /** @type {ItlmonSlab} */
      var into = { bytes: new Uint8Array(size), used: 0, batches: 0 };
      batches = batches.map(function (b, i) {
        return keep(into, b.bytes, b.ops, b.n, sizes[i][0], sizes[i][1], false, b.pids.filter(needed));
      });
      slabs = batches.length ? [into] : [];
      slabBytes = batches.length ? size : 0;
    };
    // room is the slab a batch taking need bytes is copied to: the last
    // one, if it has the room, else null (a new one).
    /** @param {number} need */
    var room = function (need) {
      var sl = slabs[slabs.length - 1];
      return sl && sl.used + need <= sl.bytes.byteLength ? sl : null;
    };
    var settle = function () {
      if (ends.size) return;
      var ws = waiting;
      waiting = [];
      ws.forEach(function (r) { r(); });
    };
    /** @param {string} url @param {Uint8Array | null} wire */
    var beacon = function (url, wire) {
      try { if (wire && url && navigator.sendBeacon) navigator.sendBeacon(url, /** @type {BufferSource} */ (wire)); } catch (_) { /* page going away */ }
    };
    w.onmessage = function (ev) {
      var m = ev.data, f;
      switch (m[0]) {
        case 'e':
          f = ends.get(m[1]);
          ends.delete(m[1]);
          if (f && m[2]) { try { f(m[2]); } catch (e) { env.fail('shim failed', e); } }
          settle();
          break;
        case 'm':
          held = m[1];
          open = m[2];
          seen = m[3];
          // A stream the mirror shows ended is in held (or was sent): its copy goes.
          var gone = 0;
          kept.forEach(function (k, pid) { if (k.end && k.msg <= seen) { kept.delete(pid); gone++; } });
          if (gone) prune();
          break;
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
    /** @param {string} msg @param {unknown} why */
    var stopped = function (msg, why) {
      env.fail(msg, why);
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
        var cf = /** @type {any} */ (c);
        if (beaconURL && cf.beaconURL !== beaconURL) { beacon(beaconURL, held); beacon(beaconURL, open); } // what it held leaves for it
        beaconURL = cf.beaconURL;
        facts = browserFacts(cf);
        var f = facts;
        return new Promise(function (resolve) { configs.push(resolve); w.postMessage(['c', f]); });
      },
      start: function (pid, args) {
        kept.set(pid, { args: args, bytes: 0, msg: ++posted, end: null, lost: false });
        w.postMessage(/** @type {unknown[]} */ (['s', pid]).concat(args));
      },
      feed: function (stage, nb, ops, n) {
        var msg = ++posted, i, pid, last = -1, kb = 0, kn = 0, nbusy = 0;
        // The stage goes to the Worker; what a replay needs is kept as a
        // copy of it. First the streams it holds with a copy, in the order
        // they first read in it, each looked up once per run of its reads,
        // and the bytes (kb) and number (kn) of their reads.
        /** @type {number[]} */
        var pids = [];
        /** @type {ItlmonKept | undefined} */
        var cur;
        for (i = 0; i < 4 * n; i += 4) {
          pid = ops[i];
          if (pid < 0) {
            busy.push(ops[i + 2], ops[i + 3]);
            if (busy.length > 2 * MAX_BUSY) busy.splice(0, 2);
            nbusy++;
            continue;
          }
          if (pid !== last) {
            last = pid;
            cur = kept.get(pid);
            if (cur && cur.msg !== msg) {
              cur.msg = msg;
              if (!cur.lost) pids.push(pid);
            }
          }
          if (cur) {
            cur.bytes += ops[i + 1];
            if (!cur.lost) { kb += ops[i + 1]; kn++; }
          }
        }
        // The batch is copied whole when all it holds is reads of streams
        // with a copy and busy intervals (one copy, in the browser's own
        // code); else only those reads. Past the bound, the stream with the
        // most bytes kept loses its copy (it cannot be replayed; the
        // mirror's view of it is sent instead), and the memory it held
        // goes, in earlier batches and in this one, until the batch fits:
        // one long stream does not take the streams beside it along. The
        // batches it shared with others are copied without it only when
        // dropping those it had alone was not enough.
        var whole = kn + nbusy === n, part = whole ? [nb, n] : [kb, kn];
        var over = function () {
          var need = footprint(part[0], part[1]);
          return !room(need) && slabBytes + Math.max(need, slabSize) > keepBytes;
        };
        while (pids.length && over()) {
          var hog = biggest();
          if (!hog) break;
          hog.lost = true;
          pids = pids.filter(needed);
          part = neededOf(ops, n);
          whole = false;
          prune();
          if (over()) compact();
        }
        if (pids.length) {
          // Into memory kept from batch to batch: a fresh array per batch
          // (stage.slice) cost the page more than all of the batch's reads.
          var need = footprint(part[0], part[1]), sl = room(need);
          if (!sl) {
            var mem = need > slabSize ? new Uint8Array(need) : spareSlab || new Uint8Array(slabSize);
            if (mem === spareSlab) spareSlab = null;
            sl = { bytes: mem, used: 0, batches: 0 };
            slabs.push(sl);
            slabBytes += mem.byteLength;
          }
          batches.push(keep(sl, stage, ops, n, part[0], part[1], whole, pids));
        }
        var next = spares.pop() || [new Uint8Array(stage.length), new Float64Array(ops.length)];
        // ArrayBuffers, not their views: Chromium posts a view several
        // times slower (measured: 95 vs 14 µs for 72 KB).
        w.postMessage(['f', stage.buffer, ops.buffer, n, nb], [stage.buffer, ops.buffer]);
        return next;
      },
      end: function (pid, at, kind, status, proto, done) {
        var k = kept.get(pid);
        if (k) { k.end = [at, kind, status, proto]; k.msg = ++posted; } else posted++;
        ends.set(pid, done);
        w.postMessage(['e', pid, at, kind, status, proto]);
      },
      pagehide: function () {
        // The streams the mirror does not show ended (itl.js has ended
        // every stream by now): measured again here and sent, or, when
        // they cannot be (a copy past KEEP_BYTES, no compiled module or Go
        // on the page, the module fails), the mirror's open streams as the
        // Worker last saw them. The fresh ones first: the browser bounds
        // the bytes of beacons in flight.
        /** @type {Array<{pid: number, k: ItlmonKept}>} */
        var left = [];
        var whole = true;
        kept.forEach(function (k, pid) { if (k.msg > seen) { left.push({ pid: pid, k: k }); whole = whole && !k.lost; } });
        if (left.length && !(whole && replay(env, mod, facts, left, batches, busy))) beacon(beaconURL, open);
        beacon(beaconURL, held);
        w.postMessage(['h']);
      },
      pageshow: function () { w.postMessage(['p']); },
      settled: function () {
        return new Promise(function (r) { waiting.push(r); settle(); });
      },
      kept: function () {
        /** @type {Array<{pid: number, bytes: number, lost: boolean}>} */
        var streams = [];
        kept.forEach(function (k, pid) { streams.push({ pid: pid, bytes: k.bytes, lost: k.lost }); });
        return { streams: streams, batches: batches.length, slabs: slabs.length, slabBytes: slabBytes, spare: !!spareSlab };
      },
      query: function (what, arg) {
        var q = nq++;
        return new Promise(function (r) { queries.set(q, r); w.postMessage(['q', q, what, arg]); });
      },
    };
  }

  // replay measures the streams left (copies the page kept, see workerAPI)
  // again in a module started here and now on the page's main thread, from
  // the module compiled for the Worker (instantiating it synchronously is
  // allowed at its size in every engine; Go's main runs to its select{} and
  // hands over its API before go.run returns), and sends their records with
  // its own beacon: no socket (beaconOnly). The same meter on the same bytes
  // and stamps gives the records the Worker would have sent. False when it
  // could not.
  /**
   * @param {ItlmonHostEnv} env @param {WebAssembly.Module | null} mod @param {object | null} facts
   * @param {Array<{pid: number, k: ItlmonKept}>} left @param {ItlmonKeptBatch[]} batches @param {number[]} busy
   */
  function replay(env, mod, facts, left, batches, busy) {
    var Go = g.__itlmon_wasm_exec && g.__itlmon_wasm_exec.Go;
    if (!mod || !facts || typeof Go !== 'function') return false;
    /** @type {ItlmonGo | null} */
    var m = null;
    try {
      g.__itlmon_ready = function (/** @type {ItlmonGo} */ a) { m = a; };
      var go = new Go();
      go.run(new WebAssembly.Instance(mod, go.importObject)).catch(function () {});
    } catch (_) {
      return false;
    } finally {
      delete g.__itlmon_ready;
      delete g.__itlmon_go; // its API stays private to this call
    }
    if (!m) return false;
    var a = /** @type {ItlmonGo} */ (m);
    try {
      if (a.configure(Object.assign({}, facts, { beaconOnly: true })) !== true) return false;
      /** @type {Map<number, number>} */
      var ids = new Map(); // the page's ids of the streams left to the module's
      var i, j, pid, id;
      for (i = 0; i < left.length; i++) {
        id = a.start.apply(a, left[i].k.args);
        ids.set(left[i].pid, typeof id === 'number' && id >= 0 ? id : UNMEASURED);
      }
      // The batches as they were posted, the reads of other streams under
      // UNMEASURED and the busy intervals left out, then the busy intervals
      // (each marks the streams open at its end).
      for (i = 0; i < batches.length; i++) {
        var b = batches[i];
        if (!b.pids.some(function (p) { return ids.has(p); })) continue;
        var ops = new Float64Array(b.ops); // the kept copy stays as it is: the page may come back
        for (j = 0; j < 4 * b.n; j += 4) {
          pid = ops[j];
          id = pid >= 0 ? ids.get(pid) : undefined;
          ops[j] = id === undefined ? UNMEASURED : id;
        }
        a.feed(b.bytes, new Uint8Array(ops.buffer), b.n);
      }
      var n = busy.length / 2, o = 0;
      var bops = new Float64Array(4 * n);
      for (i = 0; i < busy.length; i += 2) { bops[o] = -1; bops[o + 2] = busy[i]; bops[o + 3] = busy[i + 1]; o += 4; }
      if (n) a.feed(new Uint8Array(0), new Uint8Array(bops.buffer), n);
      var out = new Uint8Array(8 * env.summaryFields);
      for (i = 0; i < left.length; i++) {
        var e = left[i].k.end || [performance.now(), 5, 0, ''];
        id = ids.get(left[i].pid);
        if (id !== UNMEASURED) a.end(/** @type {number} */ (id), e[0], e[1], e[2], e[3], out);
      }
      a.pagehide();
      env.timing.replayed = left.length;
      return true;
    } catch (_) {
      return false;
    }
  }

  // ---- on the main thread ----

  /** @param {string} src @param {string} nonce @returns {Promise<unknown>} */
  function loadScript(src, nonce) {
    return new Promise(function (resolve, reject) {
      var s = document.createElement('script');
      s.src = src;
      s.nonce = nonce;
      s.async = true;
      s.onload = resolve;
      s.onerror = function () { reject(new Error('load ' + src)); };
      (document.head || document.documentElement).appendChild(s);
    });
  }

  // instantiate compiles the module from first, a fetch of url already under
  // way (started together with wasm_exec.js), or from a new fetch.
  /** @param {ItlmonHostEnv} env @param {string} url @param {Promise<Response>} first @param {WebAssembly.Imports} imports */
  function instantiate(env, url, first, imports) {
    var get = function () {
      return env.fetch.call(undefined, url, { credentials: 'omit' }).then(function (r) {
        if (!r.ok) throw new Error('GET ' + url + ': ' + r.status);
        return r;
      });
    };
    var slow = function () {
      return get().then(function (r) { return r.arrayBuffer(); })
        .then(function (b) { return WebAssembly.instantiate(b, imports); });
    };
    if (!WebAssembly.instantiateStreaming) return slow();
    return WebAssembly.instantiateStreaming(first.then(function (r) {
      if (!r.ok) throw new Error('GET ' + url + ': ' + r.status);
      return r;
    }), imports).catch(slow); // served with another MIME type
  }

  // startMain runs the module on the page's main thread. The module's own
  // refusal probe gets the page's original fetch, never the shim.
  /** @param {ItlmonHostEnv} env @returns {Promise<ItlmonHostAPI>} */
  function startMain(env) {
    var col = env.collector;
    var wasmURL = col + '/itl.wasm';
    var first = env.fetch.call(undefined, wasmURL, { credentials: 'omit' }); // in parallel with wasm_exec.js
    first.catch(function () {});
    return loadScript(col + '/wasm_exec.js', env.nonce).then(function () {
      // Our wasm_exec.js (rewritten by make wasm) keeps its Go class and its
      // fs/process/path stubs in one namespace, off the page's globals.
      var Go = g.__itlmon_wasm_exec && g.__itlmon_wasm_exec.Go;
      if (typeof Go !== 'function') throw new Error('wasm_exec.js defined no Go');
      var go = new Go();
      return instantiate(env, wasmURL, first, go.importObject).then(function (res) {
        return new Promise(function (resolve, reject) {
          g.__itlmon_ready = function (/** @type {ItlmonGo} */ a) { delete g.__itlmon_ready; resolve(a); };
          go.run(res.instance).then(function () { env.fail('module exited'); }, function (/** @type {unknown} */ e) { env.fail('module exited', e); });
          setTimeout(function () { reject(new Error('module not ready')); }, 10000);
        });
      });
    }).then(function (/** @type {ItlmonGo} */ m) {
      var out = new Float64Array(env.summaryFields), outBytes = new Uint8Array(out.buffer);
      /** @type {Map<number, number>} */
      var ids = new Map(); // the page's stream ids to the module's (-1: not measured)
      /** @type {ItlmonHostAPI} */
      var a = {
        mode: 'main',
        flushMs: 1000,
        flushBytes: 64 << 10, // a batch of 64 KB keeps the module ~1.5 ms
        configure: function (c) {
          var cf = browserFacts(/** @type {any} */ (c));
          cf.fetch = env.fetch;
          return Promise.resolve(m.configure(cf));
        },
        start: function (pid, args) {
          var id = m.start.apply(m, args);
          ids.set(pid, typeof id === 'number' ? id : -1);
        },
        feed: function (stage, nb, ops, n) {
          for (var i = 0; i < 4 * n; i += 4) {
            if (ops[i] < 0) continue; // a busy interval
            var id = ids.get(ops[i]);
            ops[i] = id !== undefined && id >= 0 ? id : UNMEASURED;
          }
          m.feed(stage.subarray(0, nb), new Uint8Array(ops.buffer, 0, 32 * n), n);
          return null;
        },
        end: function (pid, at, kind, status, proto, done) {
          var id = ids.get(pid);
          ids.delete(pid);
          if (id !== undefined && id >= 0 && m.end(id, at, kind, status, proto, outBytes) === true) done(out);
        },
        pagehide: function () { m.pagehide(); },
        pageshow: function () { m.pageshow(); },
        settled: function () { return Promise.resolve(); },
        query: function (what, arg) { return Promise.resolve(what === 'stats' ? m.stats() : m._crash(arg)); },
      };
      return a;
    });
  }

  loader.__module(host);
})();
