// @ts-check
/*! itlmon module Worker: runs the browser module (wasm_exec.js, itl.wasm) off the page's main thread.
 *
 * itl-module.js starts a dedicated Worker from a blob: URL whose script
 * imports this file and calls itlmonWorker(collector, summaryFields). It
 * loads wasm_exec.js and itl.wasm from the collector and serves the page's
 * messages with the module's API. Messages are arrays; the first item says what:
 *   page -> worker: ['module', WebAssembly.Module | null] first, ['c', cfg] configure,
 *     ['s', pid, ...start args], ['f', stage, ops, n, nb] feed (ArrayBuffers),
 *     ['e', pid, at, kind, status, proto] end, ['h'] pagehide, ['p'] pageshow,
 *     ['q', qid, 'stats' | 'crash', arg]
 *   worker -> page: ['r'] ready, ['c', result], ['e', pid, summary | null],
 *     ['m', held, open, seen] what a beacon would carry now (the module's
 *     mirror: two beacon batches or nulls, see itl-module.js), having
 *     handled the page's first seen stream messages (s, f and e),
 *     ['q', qid, result], ['w', text] a console warning, ['x', why] stopped,
 *     ['b', stage, ops] a batch's buffers back, for reuse
 * The page numbers its streams; ids maps them to the module's (-1: not
 * measured).
 */

/**
 * @param {string} col the collector's base URL
 * @param {number} nSummary float64s in a summary
 */
function itlmonWorker(col, nSummary) {
  'use strict';
  /** @type {any} */
  var wself = self;
  /** @type {ItlmonGo | null} */
  var api = null;
  /** @type {Map<number, number>} */
  var ids = new Map();
  var out = new Uint8Array(8 * nSummary), mirrorTimer = 0;
  var seen = 0; // stream messages (s, f, e) handled, in the page's order
  var watch = 0, idle = 0; // the 1 s watch for acknowledgements, and its ticks without news
  var UNMEASURED = 2147483647; // a stream id the module never gives
  /** @param {unknown[]} m @param {Transferable[]} [transfer] */
  var post = function (m, transfer) { postMessage(m, transfer || []); };
  /** @param {any} [e] */
  var stop = function (e) { post(['x', String(e && e.message || e || 'module exited')]); };
  // The module's warnings belong on the page's console.
  console.warn = function () { post(['w', Array.prototype.join.call(arguments, ' ')]); };
  // postMirror sends the module's mirror m (when it changed) with the
  // count of stream messages it reflects.
  /** @param {[Uint8Array | null, Uint8Array | null] | null} m */
  var postMirror = function (m) {
    if (!m) return false;
    /** @type {Transferable[]} */
    var tr = [];
    if (m[0]) tr.push(m[0].buffer);
    if (m[1]) tr.push(m[1].buffer);
    post(['m', m[0], m[1], seen], tr);
    return true;
  };
  var mirror = function () {
    mirrorTimer = 0;
    if (api) postMirror(api.mirror());
  };
  /** @param {ItlmonGo} a @param {any[]} m */
  var handle = function (a, m) {
    var i, id;
    if (m[0] === 's' || m[0] === 'f' || m[0] === 'e') seen++;
    switch (m[0]) {
      case 'c': post(['c', a.configure(m[1])]); break;
      case 's':
        id = a.start.apply(null, m.slice(2));
        ids.set(m[1], typeof id === 'number' ? id : -1);
        break;
      case 'f':
        var ops = new Float64Array(m[2], 0, 4 * m[3]);
        for (i = 0; i < ops.length; i += 4) {
          if (ops[i] < 0) continue; // a busy interval
          id = ids.get(ops[i]);
          ops[i] = id !== undefined && id >= 0 ? id : UNMEASURED;
        }
        a.feed(new Uint8Array(m[1], 0, m[4]), new Uint8Array(m[2], 0, 32 * m[3]), m[3]);
        post(['b', m[1], m[2]], [m[1], m[2]]); // the module copied them: back for reuse
        break;
      case 'e':
        id = ids.get(m[1]);
        ids.delete(m[1]);
        var ok = id !== undefined && id >= 0 && a.end(id, m[2], m[3], m[4], m[5], out) === true;
        post(['e', m[1], ok ? new Float64Array(out.slice().buffer) : null]);
        break;
      case 'h': a.pagehide(); break;
      case 'p': a.pageshow(); break;
      case 'q': post(['q', m[1], m[2] === 'stats' ? a.stats() : a._crash(m[3])]); break;
    }
    // A stream's end shows in the mirror at once; reads within 100 ms.
    if (m[0] === 'e') { clearTimeout(mirrorTimer); mirror(); } else if (!mirrorTimer) mirrorTimer = setTimeout(mirror, 100);
    // Acknowledgements change what a beacon would carry too: watch for
    // them each second until 30 s pass without news. (A stale mirror only
    // resends records the collector already has: it keeps one per id.)
    idle = 0;
    if (!watch) {
      watch = setInterval(function () {
        if (mirrorTimer || !api) return;
        if (postMirror(api.mirror())) idle = 0; else if (++idle >= 30) { clearInterval(watch); watch = 0; }
      }, 1000);
    }
  };
  try {
    importScripts(col + '/wasm_exec.js');
    var Go = wself.__itlmon_wasm_exec && wself.__itlmon_wasm_exec.Go;
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
    /** @param {WebAssembly.Module | null} mod */
    var run = function (mod) {
      /** @type {Promise<{instance: WebAssembly.Instance}>} */
      var inst = mod ? WebAssembly.instantiate(mod, go.importObject).then(function (instance) { return { instance: instance }; }) :
        WebAssembly.instantiateStreaming ? WebAssembly.instantiateStreaming(get(), go.importObject).catch(function (e) {
          if (e && /^GET /.test(e.message)) throw e;
          return compile(); // served with another MIME type
        }) : compile();
      inst.then(function (res) { return go.run(res.instance); }).then(function () { stop(); }, stop);
    };
    wself.__itlmon_ready = function (/** @type {ItlmonGo} */ a) {
      delete wself.__itlmon_ready;
      api = a;
      post(['r']);
    };
    onmessage = function (ev) {
      if (ev.data[0] === 'module') return run(ev.data[1]);
      if (!api) return;
      try { handle(api, ev.data); } catch (e) { stop(e); }
    };
  } catch (e) { stop(e); }
}
