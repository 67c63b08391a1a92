/*! itlmon snippet 1: wraps fetch at once, loads itl.js (data-src) after the page's load or at its first stream */
(function (d, g) {
  var s = d.currentScript, src = s && s.getAttribute('data-src'), O = g.fetch, el, F, S, k, q = [], w = [], r0;
  if (!src || g.itlmon || typeof O !== 'function') return;
  var R = new Promise(function (r) { r0 = r; });
  var E = /\/(?:chat\/completions|responses|messages|api\/chat|api\/generate)\/*$/;
  var eager = function (i, n) {
    try {
      var b = n && n.body, m = String(n && n.method || i && i.method || 'GET').toUpperCase();
      var p = m === 'POST' && E.test(new URL(String(i && i.url || i), location.href).pathname);
      return typeof b === 'string' ? /"stream"\s*:\s*true/.test(b) || p && !/"stream"\s*:\s*false/.test(b) : p;
    } catch (_) { return false; }
  };
  var load = function () {
    if (el || k.shim) return;
    el = d.createElement('script');
    for (var a = s.attributes, i = 0; i < a.length; i++) {
      if (/^data-/.test(a[i].name) && a[i].name !== 'data-src') el.setAttribute(a[i].name, a[i].value);
    }
    el.src = src;
    el.async = true;
    el.nonce = s.nonce;
    el.onload = el.onerror = function () { if (!k.shim) off(); };
    k.loadAt = performance.now();
    (d.head || d.documentElement).appendChild(el);
  };
  var wake = function () { var x = w; w = []; for (var i = 0; i < x.length; i++) x[i](); };
  var off = function () {
    if (k.off) return;
    k.off = true;
    S.timing.error = 'itl.js not loaded';
    if (g.fetch === F) g.fetch = O;
    q = [];
    wake();
    r0(false);
  };
  var hand = function (r, a, t0, h) { try { return k.late ? k.late(r, a, t0, h) : r; } catch (_) { return r; } };
  F = function fetch(i, n) {
    if (k.shim) return k.shim.apply(this, arguments);
    var a = arguments, t0 = performance.now(), p = O.apply(this, /** @type {any} */ (a)), e = eager(i, n);
    if (e && !k.off) load();
    return p.then(function (r) {
      var h = performance.now();
      if (k.late || k.off || !(/event-stream|ndjson/i.test(r.headers.get('content-type') || '') || r.headers.get('x-vercel-ai-data-stream'))) return hand(r, a, t0, h);
      load();
      return new Promise(function (res) {
        var go = function () { clearTimeout(tm); res(hand(r, a, t0, h)); };
        var tm = setTimeout(function () { var j = w.indexOf(go); if (j >= 0) w.splice(j, 1); k.missed++; res(r); }, k.waitMs);
        w.push(go);
      });
    }, function (x) {
      if (e && !k.off) q.push(['x', a, t0, performance.now(), x]);
      throw x;
    });
  };
  k = { v: 1, orig: O, fetch: F, t: performance.now(), loadAt: -1, waitMs: 2000, missed: 0, off: false, shim: null, late: null,
    attach: function (h) {
      var x = q, i, c;
      q = [];
      k.shim = h.shim;
      k.late = h.late;
      for (i = 0; i < x.length; i++) {
        c = x[i];
        if (c[0] === 'x') h.lateError(c[1], c[2], c[3], c[4]);
        else if (c[0] === 'i') S.init(c[1]);
        else c[2] = S.onStream(c[1]);
      }
      wake();
      r0(h.ready);
    } };
  S = g.itlmon = {
    __itlmonSnippet: k,
    init: function (o) { q.push(['i', o]); return R; },
    onStream: function (cb) {
      var c = ['o', cb, null];
      q.push(c);
      return function () { var i = q.indexOf(c); if (i >= 0) q.splice(i, 1); else if (c[2]) c[2](); };
    },
    get ready() { return R; },
    settled: function st() { return R.then(function () { return S.settled !== st ? S.settled() : undefined; }); },
    fetch: function fetch(i, n) { return F.apply(undefined, arguments); },
    timing: { error: '' },
    get active() { return !k.off && g.fetch === F; },
    originalFetch: O,
  };
  g.fetch = F;
  if (d.readyState === 'complete') load(); else g.addEventListener('load', function () { setTimeout(load); });
})(document, globalThis);
