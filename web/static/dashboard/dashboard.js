// @ts-check
// itlmon dashboard: plain JS, no build step, no external requests. Charts are
// drawn by uPlot (vendor/uplot, embedded with the page). Every view's state is
// in the URL (?view=...&site=...), so any view can be shared.
// Reads the collector's dashboard API (collector/httpapi/dashboard.go).
//
// Model, release, API origin and path, route and the other stored strings are
// written by whoever holds a site's public key, and the URL by whoever sends
// a link: every one of them reaches the page as a text node or an attribute
// value (h below), never as markup. The collector serves the page with a
// Content-Security-Policy that allows no inline script and no HTML string
// sinks (Trusted Types): assigning a string to innerHTML throws.
(function () {
  "use strict";

  /** @param {string} s @param {ParentNode} [el] @returns {HTMLElement} */
  const $ = (s, el) => {
    const e = (el || document).querySelector(s);
    if (!(e instanceof HTMLElement)) throw new Error("dashboard: no element " + s);
    return e;
  };
  /** @param {string} s @param {ParentNode} [el] @returns {HTMLElement[]} */
  const $$ = (s, el) => Array.from((el || document).querySelectorAll(s)).filter(e => e instanceof HTMLElement);
  /** @param {string} s @returns {HTMLSelectElement} */
  const select = s => /** @type {HTMLSelectElement} */ ($(s));

  /**
   * @typedef {string | number | Node | null | undefined | false} Child
   * @typedef {{ class?: string, data?: Record<string, string | number>, style?: Record<string, string>,
   *   title?: string, colspan?: number, href?: string }} Attrs
   */
  /**
   * h makes an element: strings become text nodes (never markup), data
   * goes to dataset, style through the CSSOM (allowed without
   * 'unsafe-inline'), href only as a query of this page.
   * @param {string} tag @param {Attrs | null} [attrs] @param {...(Child | Child[])} kids
   * @returns {HTMLElement}
   */
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    if (attrs) {
      if (attrs.class) el.className = attrs.class;
      if (attrs.data) for (const [k, v] of Object.entries(attrs.data)) el.dataset[k] = String(v);
      if (attrs.style) for (const [k, v] of Object.entries(attrs.style)) el.style.setProperty(k, v);
      if (attrs.title != null) el.title = attrs.title;
      if (attrs.colspan != null) el.setAttribute("colspan", String(attrs.colspan));
      if (attrs.href != null) {
        if (!attrs.href.startsWith("?")) throw new Error("dashboard: link outside the dashboard");
        el.setAttribute("href", attrs.href);
      }
    }
    add(el, kids);
    return el;
  }
  /** add appends kids to el: strings and numbers as text. @param {Node} el @param {(Child | Child[])[]} kids */
  function add(el, kids) {
    for (const k of kids.flat()) {
      if (k == null || k === false || k === "") continue;
      el.appendChild(typeof k === "object" ? k : document.createTextNode(String(k)));
    }
  }
  /** frag groups nodes and text without an element. @param {...(Child | Child[])} kids */
  function frag(...kids) {
    const f = document.createDocumentFragment();
    add(f, kids);
    return f;
  }
  /** fill replaces el's content. @param {Element} el @param {...(Child | Child[])} kids */
  function fill(el, ...kids) {
    el.replaceChildren(frag(...kids));
  }
  /** @param {...(Child | Child[])} kids */
  const small = (...kids) => h("small", null, ...kids);
  /** @param {...(Child | Child[])} kids */
  const bold = (...kids) => h("b", null, ...kids);
  // bdi isolates a stored string's direction from the text around it: a
  // right-to-left override in a model name cannot reorder what follows.
  /** @param {string} text */
  const bdi = text => h("bdi", null, text);
  /** keyCell is a table's first cell: a stored value, cut with an ellipsis when long (whole in its title). @param {string} key */
  const keyCell = key => h("td", { class: "l key", title: key || "unknown" }, key || "unknown");
  /** @param {string} color */
  const dot = color => h("i", { class: "dot", style: { background: color } });

  const GATE_ITL_P99_MS = 250;
  const REFRESH_MS = 30000;
  const VIEWS = ["overview", "causes", "rechunk", "dist", "worst", "stream", "compare"];
  const CAUSES = ["origin", "network", "page", "unknown"];
  /** @type {Record<string, string>} */
  const CAUSE_COLOR = { origin: "#9b3fc9", network: "#e48a2e", page: "#3358d4", unknown: "#98a2b3" };
  /** @param {string} c */
  const causeColor = c => CAUSE_COLOR[c] || "#888";
  // The hops of a network delay, when the edge Worker reported the stream (collector/join).
  /** @type {Record<string, string>} */
  const HOP_NAME = { origin_edge: "origin→edge", edge_browser: "edge→browser" };
  /** @param {string} name */
  const css = name => getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";

  // ---------- state, in the URL ----------
  /** @typedef {"by" | "cby" | "rby" | "order" | "dim"} Tab */
  /** @type {Record<Tab, string> & { view: string, since: string }} */
  const DEFAULTS = { view: "overview", since: "1h", by: "region", cby: "region", rby: "api_origin", order: "stalled", dim: "release" };
  /** @type {Tab[]} */
  const TABS = ["by", "cby", "rby", "order", "dim"];
  /**
   * @typedef {{ view: string, site: string, since: string, where: Record<string, string>,
   *   by: string, cby: string, rby: string, order: string, id: string, dim: string, a: string, b: string,
   *   zoom: null | number[] }} UrlState
   */
  /** @type {UrlState & { sort: { key: string, desc: boolean }, rows: DashGroup[], timer: number, seq: number }} */
  const state = {
    view: "overview", site: "", since: "1h", where: {},
    by: "region", cby: "region", rby: "api_origin", order: "stalled", id: "", dim: "release", a: "", b: "",
    zoom: null,
    sort: { key: "streams", desc: true }, rows: [], timer: 0, seq: 0,
  };
  function readURL() {
    const q = new URLSearchParams(location.search);
    const view = q.get("view") || "";
    state.view = VIEWS.includes(view) ? view : DEFAULTS.view;
    state.site = q.get("site") || state.site || "";
    state.since = q.get("since") || DEFAULTS.since;
    for (const k of TABS) state[k] = q.get(k) || DEFAULTS[k];
    state.id = q.get("id") || "";
    state.a = q.get("a") || "";
    state.b = q.get("b") || "";
    const z = (q.get("zoom") || "").split("-").map(Number);
    state.zoom = z.length === 2 && z[0] > 0 && z[1] > z[0] ? z : null;
    state.where = {};
    q.getAll("where").forEach(w => {
      const i = w.indexOf("=");
      if (i > 0) state.where[w.slice(0, i)] = w.slice(i + 1);
    });
  }
  /** @type {Record<string, (Tab | "id" | "a" | "b")[]>} */
  const KEEP = { overview: ["by"], causes: ["cby"], rechunk: ["rby"], worst: ["order"], stream: ["id"], compare: ["dim", "a", "b"], dist: [] };
  /**
   * urlFor returns the query string of the current state with changes.
   * @param {Partial<UrlState>} [changes]
   */
  function urlFor(changes) {
    /** @type {UrlState} */
    const s = Object.assign({}, state, changes || {});
    const q = new URLSearchParams();
    if (s.view !== DEFAULTS.view) q.set("view", s.view);
    if (s.site) q.set("site", s.site);
    q.set("since", s.since);
    for (const [k, v] of Object.entries(s.where)) q.append("where", k + "=" + v);
    for (const k of KEEP[s.view] || []) {
      const v = s[k];
      if (v && !(k in DEFAULTS && v === DEFAULTS[/** @type {Tab} */ (k)])) q.set(k, v);
    }
    if (s.zoom && ["overview", "causes", "dist"].includes(s.view)) q.set("zoom", s.zoom.map(v => Math.round(v)).join("-"));
    return "?" + q.toString();
  }
  function writeURL() {
    const u = urlFor();
    if (u !== location.search) history.replaceState(null, "", u);
  }
  /** @param {Partial<UrlState>} changes */
  function go(changes) {
    Object.assign(state, changes);
    history.pushState(null, "", urlFor());
    render();
  }
  /** @param {Record<string, string>} [extra] */
  function params(extra) {
    const q = new URLSearchParams({ site: state.site, since: state.since });
    for (const [k, v] of Object.entries(state.where)) q.append("where", k + "=" + v);
    for (const [k, v] of Object.entries(extra || {})) q.set(k, v);
    return q;
  }

  // ---------- formatting ----------
  /** @param {number | null | undefined} v */
  function ms(v) {
    if (v == null || !isFinite(v) || v <= 0) return "—";
    if (v >= 10000) return (v / 1000).toFixed(1) + " s";
    if (v >= 1000) return (v / 1000).toFixed(2) + " s";
    if (v >= 100) return Math.round(v) + " ms";
    if (v >= 10) return v.toFixed(1) + " ms";
    if (v >= 0.01) return v.toFixed(2) + " ms";
    return (v * 1000).toFixed(1) + " µs";
  }
  /** pair shows "a / b", the shared unit once. @param {number} a @param {number} b */
  function pair(a, b) {
    const x = ms(a), y = ms(b);
    const ux = x.split(" ")[1], uy = y.split(" ")[1];
    const first = (ux && ux === uy) ? x.split(" ")[0] : x;
    return frag(first, " ", small("/ ", y));
  }
  /** @param {number | null | undefined} v */
  const pct = v => (v == null || !isFinite(v)) ? "—" : (v * 100 < 10 ? (v * 100).toFixed(2) : (v * 100).toFixed(1)) + " %";
  /** @param {number | null | undefined} v */
  const num = v => (v == null) ? "—" : Number(v).toLocaleString("en-US");
  /** @param {number | null | undefined} v @param {number} d */
  const fix = (v, d) => (v == null || !isFinite(v) || v === 0) ? "—" : v.toFixed(d);
  /** @param {string} t */
  const when = t => new Date(t).toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });

  // ---------- data ----------
  /** @param {string} path @param {URLSearchParams} q @returns {Promise<any>} */
  async function getJSON(path, q) {
    const r = await fetch(path + "?" + q.toString(), { headers: { Accept: "application/json" } });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || (r.status + " " + r.statusText));
    return body;
  }
  /** @param {unknown} e */
  const errText = e => e instanceof Error ? e.message : String(e);
  /** @param {string} msg @param {boolean} isErr */
  function banner(msg, isErr) {
    const b = $("#banner");
    b.hidden = !msg;
    b.textContent = msg;
    b.classList.toggle("err", !!isErr);
  }
  async function loadSites() {
    const sel = select("#site");
    try {
      /** @type {{ sites?: string[] }} */
      const d = await getJSON("/api/sites", new URLSearchParams({ since: "720h" }));
      const sites = d.sites || [];
      if (state.site && !sites.includes(state.site)) sites.unshift(state.site);
      if (!state.site && sites.length) state.site = sites[0];
      sel.replaceChildren(...(sites.length ? sites.map(s => new Option(s, s)) : [new Option("no sites yet", "")]));
      sel.value = state.site;
    } catch (e) {
      banner("Cannot list sites: " + errText(e), true);
    }
  }

  // ---------- dimensions (GET /api/dimensions: the collector's one list) ----------
  /** tabButton is a dimension's tab. @param {DashDimension} d */
  function tabButton(d) {
    const b = h("button", { data: { by: d.key }, title: d.title }, d.label);
    b.setAttribute("type", "button");
    b.setAttribute("role", "tab");
    return b;
  }
  /**
   * loadDimensions builds, once, the breakdown and cause tabs (the rollup
   * dimensions), the re-chunking tabs (every dimension, those only the raw
   * rows have first) and the compare list (every dimension).
   */
  async function loadDimensions() {
    try {
      /** @type {{ dimensions?: DashDimension[] }} */
      const d = await getJSON("/api/dimensions", new URLSearchParams());
      const all = d.dimensions || [];
      const rollup = all.filter(x => x.rollup);
      fill($("#tabs"), rollup.map(tabButton));
      fill($("#cause-tabs"), rollup.map(tabButton));
      fill($("#rechunk-tabs"), all.filter(x => !x.rollup).concat(rollup).map(tabButton));
      select("#cmp-dim").replaceChildren(...all.map(x => new Option(x.label, x.key)));
    } catch (e) {
      banner("Cannot list dimensions: " + errText(e), true);
    }
  }

  // ---------- charts (uPlot) ----------
  /** @typedef {{ u: uPlot, time: boolean, ready: boolean }} Chart */
  /** @type {Map<string, Chart>} */
  const charts = new Map();
  let syncing = false;
  /** @param {string} id */
  function dropChart(id) {
    const c = charts.get(id);
    if (c) { c.u.destroy(); charts.delete(id); }
  }
  /** @param {string} id */
  function host(id) {
    const el = document.getElementById(id);
    if (!el) throw new Error("dashboard: no element #" + id);
    return el;
  }
  /** @param {string} id @param {string} text */
  function empty(id, text) {
    dropChart(id);
    fill(host(id), h("div", { class: "empty" }, text));
  }
  /**
   * chart (re)creates a uPlot in #id. Time charts (opts.time) share the
   * zoom, which is part of the URL.
   * @param {string} id @param {Record<string, any>} opts @param {(number | null)[][]} data
   */
  function chart(id, opts, data) {
    dropChart(id);
    const el = host(id);
    el.replaceChildren();
    const w = Math.max(280, el.clientWidth), ht = plotHeight(el);
    const axisStroke = css("--muted"), grid = { stroke: css("--line"), width: 1 };
    /** @type {Record<string, any>} */
    const o = Object.assign({
      width: w, height: ht,
      cursor: { drag: { x: true, y: false, setScale: true } },
      legend: { live: true },
    }, opts);
    o.axes = (o.axes || [{}, {}]).map(/** @param {object} a */ a => Object.assign({ stroke: axisStroke, grid, ticks: grid }, a));
    o.hooks = Object.assign({}, o.hooks);
    /** @type {Chart} */
    const c = { u: /** @type {any} */ (null), time: !!opts.time, ready: false };
    if (opts.time) {
      o.hooks.setScale = (o.hooks.setScale || []).concat([/** @param {uPlot} u @param {string} key */ (u, key) => {
        if (key !== "x" || syncing || !c.ready) return;
        const xs = u.data[0], min = u.scales.x.min ?? 0, max = u.scales.x.max ?? 0;
        const full = !xs.length || (min <= (xs[0] ?? 0) && max >= (xs[xs.length - 1] ?? 0));
        state.zoom = full ? null : [min, max];
        writeURL();
        syncing = true;
        for (const [k, other] of charts) {
          if (k === id || !other.time) continue;
          const ox = other.u.data[0];
          other.u.setScale("x", state.zoom ? { min: state.zoom[0], max: state.zoom[1] } : { min: ox[0] ?? 0, max: ox[ox.length - 1] ?? 0 });
        }
        syncing = false;
      }]);
    }
    const u = new uPlot(o, data, el);
    c.u = u;
    if (opts.time && state.zoom && data[0].length) {
      syncing = true;
      u.setScale("x", { min: state.zoom[0], max: state.zoom[1] });
      syncing = false;
    }
    c.ready = true;
    charts.set(id, c);
    /** @type {any} */ (el)._u = u;
    return u;
  }
  /** plotHeight is the plot's height in el (the legend goes below it). @param {HTMLElement} el */
  function plotHeight(el) {
    const phone = innerWidth < 720;
    return el.classList.contains("tall") ? (phone ? 280 : 340) : (phone ? 200 : 240);
  }
  function resizeCharts() {
    for (const [id, c] of charts) {
      const el = document.getElementById(id);
      if (el && el.clientWidth) c.u.setSize({ width: Math.max(280, el.clientWidth), height: plotHeight(el) });
    }
  }
  /**
   * gapped inserts a null row where consecutive points are more than 1.5
   * steps apart, so lines break where a step had no streams.
   * @param {number[]} xs @param {(number | null)[][]} cols @param {number} stepS
   */
  function gapped(xs, cols, stepS) {
    /** @type {number[]} */
    const X = [];
    /** @type {(number | null)[][]} */
    const C = cols.map(() => []);
    xs.forEach((x, i) => {
      if (i > 0 && x - xs[i - 1] > stepS * 1.5) { X.push(xs[i - 1] + stepS); C.forEach(c => c.push(null)); }
      X.push(x); C.forEach((c, k) => c.push(cols[k][i]));
    });
    return [X, ...C];
  }
  /** @param {string} t */
  const tsec = t => new Date(t).getTime() / 1000;
  const COUNT_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6];
  // lonely marks the values with no neighbour (a step between gaps), which a
  // line cannot show: drawn as points.
  const lonely = { show: true, size: 6, filter: /** @param {uPlot} u @param {number} si */ (u, si) => {
    const d = u.data[si], out = [];
    for (let i = 0; i < d.length; i++) if (d[i] != null && d[i - 1] == null && d[i + 1] == null) out.push(i);
    return out;
  } };
  /** @param {uPlot} u @param {number | null} v */
  const msVal = (u, v) => v == null ? "—" : ms(v);
  /** @param {uPlot} u @param {(number | null)[]} vals */
  const msAxis = (u, vals) => vals.map(v => v == null ? "" : v === 0 ? "0" : ms(v));

  // ---------- overview ----------
  /**
   * @param {string} k @param {Child | DocumentFragment} value @param {string} cls
   * @param {string} [detail]
   */
  function tile(k, value, cls, detail) {
    const t = $(`.tile[data-k="${k}"]`);
    fill($(".v", t), value);
    t.classList.remove("good", "warn", "bad");
    if (cls) t.classList.add(cls);
    if (detail != null) $(".d", t).textContent = detail;
  }
  /** @param {Partial<DashReport>} r */
  function renderTiles(r) {
    const ttft = r.ttft || /** @type {DashDist} */ ({}), itl = r.itl || /** @type {DashDist} */ ({});
    const streams = r.streams || 0, before = r.before_headers_share || 0, stall = r.stall_share || 0, smooth = r.smooth_share || 0;
    tile("streams", num(r.streams), "", r.errors ? `${num(r.errors)} not completed: ${num(r.aborted)} aborted, ${num(r.failed)} failed`
      : (r.tokens ? num(r.tokens) + " tokens" : ""));
    tile("before", pct(r.before_headers_share), !streams ? "" : before > 0.02 ? "bad" : before > 0.005 ? "warn" : "good",
      r.before_headers ? `${num(r.before_headers)} streams · waited ${ms(r.before_headers_wait_ms)} on average` : "aborted or failed before the first byte");
    tile("ttft", pair(ttft.p50_ms, ttft.p95_ms), ttft.p95_ms > 3000 ? "warn" : "");
    tile("itl", pair(itl.p50_ms, itl.p99_ms), !itl.count ? "" : itl.p99_ms > GATE_ITL_P99_MS ? "bad" : "good",
      itl.count ? `jank ${fix(r.jank, 1)} · ${num(itl.count)} gaps` : "gap between content events");
    const tps = r.tokens_per_sec_p50;
    tile("tps", fix(tps, 1), !tps ? "" : tps < 6 ? "bad" : tps < 10 ? "warn" : "good");
    tile("stall", pct(r.stall_share), stall > 0.01 ? "bad" : stall > 0.002 ? "warn" : (itl.count ? "good" : ""),
      r.stalls ? num(r.stalls) + " stalls" : "");
    tile("smooth", pct(r.smooth_share), !streams ? "" : smooth < 0.8 ? "warn" : "good", r.verdict ? "overall " + r.verdict : "");
  }
  /** @type {Record<string, (r: DashGroup) => string | number>} */
  const sortVal = {
    key: r => r.key, streams: r => r.report.streams,
    ttft_p50: r => r.report.ttft.p50_ms, ttft_p95: r => r.report.ttft.p95_ms,
    itl_p50: r => r.report.itl.p50_ms, itl_p95: r => r.report.itl.p95_ms, itl_p99: r => r.report.itl.p99_ms,
    tps: r => r.report.tokens_per_sec_p50, stall: r => r.report.stall_share, jank: r => r.report.jank,
  };
  /** @param {number} cols @param {string} text */
  const noRows = (cols, text) => h("tr", null, h("td", { class: "l", colspan: cols }, text));
  function renderTable() {
    const tb = $("#breakdown tbody");
    const f = sortVal[state.sort.key] || sortVal.streams;
    const rows = state.rows.slice().sort((a, b) => {
      const x = f(a), y = f(b);
      const c = typeof x === "string" ? x.localeCompare(String(y)) : (x || 0) - (Number(y) || 0);
      return state.sort.desc ? -c : c;
    });
    $$("#breakdown th").forEach(th => {
      th.classList.toggle("sorted", th.dataset.sort === state.sort.key);
      th.classList.toggle("asc", th.dataset.sort === state.sort.key && !state.sort.desc);
    });
    if (!rows.length) {
      fill(tb, noRows(11, "No streams in this range."));
      return;
    }
    const maxN = Math.max(...rows.map(r => r.report.streams));
    fill(tb, rows.map(row => {
      const r = row.report, it = r.itl, tt = r.ttft;
      const p99cls = it.p99_ms > GATE_ITL_P99_MS ? "bad" : "";
      const tpscls = r.tokens_per_sec_p50 && r.tokens_per_sec_p50 < 6 ? "bad" : r.tokens_per_sec_p50 < 10 ? "warn" : "";
      const stallcls = r.stall_share > 0.01 ? "bad" : r.stall_share > 0.002 ? "warn" : "";
      const w = Math.max(2, Math.round(60 * r.streams / maxN));
      const v = (r.verdict || "NO DATA").replace(" ", "");
      return h("tr", { data: { key: row.key } },
        keyCell(row.key),
        h("td", null, num(r.streams), h("span", { class: "bar", style: { width: w + "px" } })),
        h("td", null, ms(tt.p50_ms)), h("td", null, ms(tt.p95_ms)),
        h("td", null, ms(it.p50_ms)), h("td", null, ms(it.p95_ms)), h("td", { class: p99cls }, ms(it.p99_ms)),
        h("td", { class: tpscls }, fix(r.tokens_per_sec_p50, 1)),
        h("td", { class: stallcls }, pct(r.stall_share)),
        h("td", null, fix(r.jank, 1)),
        h("td", { class: "l" }, h("span", { class: "pill " + v }, r.verdict || "NO DATA")));
    }));
  }
  /** @param {number} seq */
  async function viewOverview(seq) {
    /** @type {[DashSummary, DashTimeseries]} */
    const [sum, ts] = await Promise.all([getJSON("/api/summary", params({ by: state.by })), getJSON("/api/timeseries", params())]);
    if (seq !== state.seq) return;
    renderTiles(sum.report || {});
    state.rows = sum.rows || [];
    renderTable();
    $$("#tabs button").forEach(b => b.setAttribute("aria-selected", String(b.dataset.by === state.by)));
    const pts = ts.points || [];
    if (!pts.length) { empty("chart", "No streams in this range"); return; }
    const data = gapped(pts.map(p => tsec(p.t)), [
      pts.map(p => p.itl_p50_ms || null), pts.map(p => p.itl_p95_ms || null), pts.map(p => p.itl_p99_ms || null),
      pts.map(() => GATE_ITL_P99_MS), pts.map(p => p.streams)], ts.step_s || 60);
    chart("chart", {
      time: true,
      scales: { y: { range: /** @param {uPlot} u @param {number} mn @param {number} mx */ (u, mn, mx) => [0, Math.max(GATE_ITL_P99_MS * 1.1, mx * 1.05)] }, n: { auto: true } },
      series: [{ label: "time" },
        { label: "p50", stroke: css("--p50"), width: 1.5, value: msVal, points: lonely },
        { label: "p95", stroke: css("--p95"), width: 1.5, value: msVal, points: lonely },
        { label: "p99", stroke: css("--p99"), width: 2, value: msVal, points: lonely },
        { label: "250 ms gate", stroke: css("--muted"), dash: [4, 4], width: 1, value: msVal, points: { show: false } },
        { label: "streams", scale: "n", show: false, stroke: css("--muted"), value: /** @param {uPlot} u @param {number | null} v */ (u, v) => v == null ? "—" : num(v) }],
      axes: [{}, { values: msAxis, size: 64 }],
    }, data);
  }

  // ---------- causes ----------
  // stack turns per-cause columns into cumulative ones (drawn largest
  // first, so each fill shows its own band); the legend shows the own value.
  // Steps without streams had no stalls: they are filled with zeros.
  /**
   * @param {string} id @param {number[]} xs0 @param {number[][]} cols0 @param {number} stepS
   * @param {(v: number | null) => string} fmt @param {boolean} [counts]
   */
  function stacked(id, xs0, cols0, stepS, fmt, counts) {
    /** @type {number[]} */
    const xs = [];
    /** @type {number[][]} */
    const cols = cols0.map(() => []);
    xs0.forEach((x, i) => {
      for (let t = xs.length ? xs[xs.length - 1] + stepS : x; t < x; t += stepS) { xs.push(t); cols.forEach(c => c.push(0)); }
      xs.push(x); cols.forEach((c, k) => c.push(cols0[k][i]));
    });
    const cum = [];
    let run = xs.map(() => 0);
    for (const c of cols) { run = run.map((v, i) => v + (c[i] || 0)); cum.push(run); }
    const own = [xs, ...cols], tops = [xs, ...cum];
    const order = CAUSES.map((c, i) => i).reverse();
    /** @type {Record<string, any>[]} */
    const series = [{ label: "time" }].concat(order.map(i => ({
      label: CAUSES[i], stroke: CAUSE_COLOR[CAUSES[i]], fill: CAUSE_COLOR[CAUSES[i]] + "b0", width: 1, points: { show: false },
      value: /** @param {uPlot} u @param {number | null} v @param {number} s @param {number | null} idx */ (u, v, s, idx) => idx == null ? "—" : fmt(own[i + 1][idx]),
    })));
    chart(id, { time: true, series, axes: [{}, Object.assign({ values: /** @param {uPlot} u @param {number[]} vals */ (u, vals) => vals.map(v => fmt(v)), size: 60 }, counts ? { incrs: COUNT_INCRS } : {})],
      scales: { y: { range: /** @param {uPlot} u @param {number} mn @param {number} mx */ (u, mn, mx) => [0, Math.max(1, mx * 1.08)] } } },
    [tops[0]].concat(order.map(i => tops[i + 1])));
  }
  /** @param {number} seq */
  async function viewCauses(seq) {
    /** @type {DashCauses} */
    const d = await getJSON("/api/causes", params({ by: state.cby }));
    if (seq !== state.seq) return;
    const t = d.total, pts = d.points || [];
    const allStalled = CAUSES.reduce((s, c) => s + (t.stalled_ms_by_cause[c] || 0), 0);
    fill($("#cause-tiles"), CAUSES.map(c => h("div", { class: "tile cause", data: { cause: c } },
      h("div", { class: "k" }, dot(causeColor(c)), c),
      h("div", { class: "v" }, num(t.stalls_by_cause[c] || 0), " ", small("stalls")),
      h("div", { class: "d" }, ms(t.stalled_ms_by_cause[c]), " stalled", allStalled ? " · " + pct((t.stalled_ms_by_cause[c] || 0) / allStalled) + " of all" : ""))));
    if (!pts.length) {
      empty("cause-stalls", "No streams in this range"); empty("cause-time", "No streams in this range");
    } else {
      const xs = pts.map(p => tsec(p.t));
      stacked("cause-stalls", xs, CAUSES.map(c => pts.map(p => p.stalls_by_cause[c] || 0)), d.step_s, v => v == null ? "—" : num(v), true);
      stacked("cause-time", xs, CAUSES.map(c => pts.map(p => (p.stalled_ms_by_cause[c] || 0) / 1000)), d.step_s, v => v == null ? "—" : (+v).toFixed(v >= 10 ? 0 : 1) + " s");
    }
    const ttftAll = CAUSES.reduce((s, c) => s + (t.ttft_cause[c] || 0), 0);
    fill($("#ttft-mix"), ttftAll ? [
      h("div", { class: "mixbar" }, CAUSES.filter(c => t.ttft_cause[c]).map(c =>
        h("span", { style: { flex: String(t.ttft_cause[c]), background: causeColor(c) }, title: `${c}: ${t.ttft_cause[c]}` }))),
      h("div", { class: "legend" }, CAUSES.map(c => h("span", { data: { cause: c } },
        dot(causeColor(c)), `${c} ${num(t.ttft_cause[c] || 0)} (${pct((t.ttft_cause[c] || 0) / ttftAll)})`))),
      h("p", { class: "hint" }, `${num(ttftAll)} of ${num(t.streams)} streams had a first token (unknown: no evidence either way). `,
        bold("network"), " is coalesced delivery (behind a buffering proxy the whole answer arrives in one read at the end, and the only symptom is a TTFT as long as the answer)."),
    ] : h("p", { class: "hint" }, "No first-token waits with a cause in this range."));
    $$("#cause-tabs button").forEach(b => b.setAttribute("aria-selected", String(b.dataset.by === state.cby)));
    const rows = d.rows || [];
    fill($("#cause-table thead"), h("tr", null, h("th", { class: "l" }, state.cby), h("th", null, "Streams"), h("th", null, "Stalls"),
      CAUSES.map(c => h("th", null, c)), h("th", { class: "l" }, "Stalled time by cause")));
    fill($("#cause-table tbody"), rows.length ? rows.map(r => {
      const tot = CAUSES.reduce((s, c) => s + (r.stalled_ms_by_cause[c] || 0), 0);
      return h("tr", { data: { key: r.key } }, keyCell(r.key), h("td", null, num(r.streams)), h("td", null, num(r.stalls)),
        CAUSES.map(c => h("td", null, r.stalls_by_cause[c]
          ? [num(r.stalls_by_cause[c]), " ", small(ms(r.stalled_ms_by_cause[c])), c === "network" ? hopSplit(r.network_by_hop) : null] : "—")),
        h("td", { class: "l" }, h("div", { class: "mixbar small" }, tot ? CAUSES.filter(c => r.stalled_ms_by_cause[c]).map(c =>
          h("span", { style: { flex: String(r.stalled_ms_by_cause[c]), background: causeColor(c) } })) : null)));
    }) : noRows(8, "No streams in this range."));
  }

  /** hopSplit shows the network stalls an edge Worker placed on each hop. @param {Record<string, DashHop> | undefined} hops */
  function hopSplit(hops) {
    if (!hops) return null;
    const parts = Object.keys(HOP_NAME).filter(k => hops[k] && hops[k].stalls).map(k => `${HOP_NAME[k]} ${num(hops[k].stalls)}`);
    return parts.length ? frag(h("br"), small(parts.join(" · "))) : null;
  }

  // ---------- re-chunking ----------
  /** @type {Record<string, string>} */
  const PATTERN = { one_read: "one read at the end", steady: "steady full reads", page: "page busy", held: "held by the path", bursty: "bursts", origin: "sent in bursts by the origin" };
  /** withCode shows `quoted` parts of a server's text as code. @param {string} text */
  const withCode = text => text.split(/`([^`]+)`/).map((part, i) => i % 2 ? h("code", null, part) : part);
  /** @param {number} seq */
  async function viewRechunk(seq) {
    /** @type {{ rows?: DashRechunk[] }} */
    const d = await getJSON("/api/rechunk", params({ by: state.rby }));
    if (seq !== state.seq) return;
    $$("#rechunk-tabs button").forEach(b => b.setAttribute("aria-selected", String(b.dataset.by === state.rby)));
    const rows = d.rows || [];
    /** @param {number} v @param {number} lim */
    const hi = (v, lim) => v >= lim ? "bad" : "";
    /** @param {DashRechunk} r */
    const flag = r => !r.flagged ? h("span", { class: "pill SMOOTH" }, "OK") : r.pattern === "page" ? h("span", { class: "pill WARN" }, "PAGE BUSY")
      : h("span", { class: "pill JANKY" }, "RE-CHUNKED");
    fill($("#rechunk-table tbody"), rows.length ? rows.map(r => h("tr", { data: { key: r.key }, class: r.flagged ? "flagged" : "" },
      keyCell(r.key), h("td", null, num(r.streams)),
      h("td", { class: hi(r.events_per_read, 1.5) }, fix(r.events_per_read, 2)), h("td", null, r.bytes_per_read ? num(Math.round(r.bytes_per_read)) + " B" : "—"),
      h("td", { class: hi(r.sub_floor_share, 0.2) }, pct(r.sub_floor_share)), h("td", { class: hi(r.coalesced_ttft_share, 0.2) }, pct(r.coalesced_ttft_share)),
      h("td", null, pct(r.one_read_share)), h("td", null, pct(r.steady_share)), h("td", null, pct(r.bursty_share)),
      h("td", { class: "l" }, flag(r))))
      : noRows(10, "No streams in this range."));
    const flagged = rows.filter(r => r.flagged);
    fill($("#diagnoses"), flagged.length ? flagged.map(r => h("div", { class: "card diag", data: { key: r.key, pattern: r.pattern } },
      h("h2", null, bdi(r.key || "unknown"), " ", h("span", { class: "pill " + (r.pattern === "page" ? "WARN" : "JANKY") }, PATTERN[r.pattern] || "coalesced")),
      h("p", null, withCode(r.diagnosis || "Reads carry several events or many gaps fall below the timer floor, but no single read pattern dominates: look at the worst streams of this segment.")),
      h("p", { class: "hint" }, `${num(r.streams)} stream${r.streams === 1 ? "" : "s"} · ${fix(r.events_per_read, 1)} events per read · ${pct(r.one_read_share)} in one read · ${pct(r.coalesced_ttft_share)} first tokens coalesced · stalls: ${pct(r.page_stall_share)} page, ${pct(r.network_stall_share)} network`)))
      : h("div", { class: "card" }, h("p", { class: "hint" }, "No segment re-chunks the stream in this range: reads carry about one event each.")));
  }

  // ---------- distribution ----------
  /** @param {number} seq */
  async function viewDist(seq) {
    /** @type {[DashHeatmap, DashTimeseries]} */
    const [hm, ts] = await Promise.all([getJSON("/api/heatmap", params()), getJSON("/api/timeseries", params())]);
    if (seq !== state.seq) return;
    const pts = hm.points || [], bins = hm.bins || [];
    const zero = pts.reduce((s, p) => s + p.zero, 0), all = pts.reduce((s, p) => s + p.zero + p.counts.reduce((a, b) => a + b, 0), 0);
    $("#heat-zero").textContent = all ? `${num(zero)} of ${num(all)} gaps (${pct(zero / all)})` : "none";
    if (!pts.length || !bins.length) { empty("heatmap", "No gaps in this range"); return; }
    const step = hm.step_s || 60;
    const q = new Map((ts.points || []).map(p => [tsec(p.t), p]));
    const xs = pts.map(p => tsec(p.t));
    /** @param {"itl_p50_ms" | "itl_p95_ms" | "itl_p99_ms"} k */
    const col = k => xs.map(x => q.get(x)?.[k] || null);
    const heat = new Map(pts.map(p => [tsec(p.t), p]));
    const lo = bins[0].lo_ms, hi = bins[bins.length - 1].hi_ms;
    const base = css("--accent");
    chart("heatmap", {
      time: true,
      scales: { y: { distr: 3, range: () => [lo, hi] } },
      series: [{ label: "time" },
        { label: "p50", stroke: css("--p50"), width: 2, value: msVal },
        { label: "p95", stroke: css("--p95"), width: 2, value: msVal },
        { label: "p99", stroke: css("--p99"), width: 2, value: msVal },
        { label: "gaps", stroke: "transparent", value: /** @param {uPlot} u @param {number | null} v @param {number} s @param {number | null} idx */ (u, v, s, idx) => idx == null ? "—" : num(u.data[4][idx]) }],
      axes: [{}, { values: msAxis, size: 64 }],
      hooks: {
        drawAxes: [/** @param {uPlot} u */ u => {
          const ctx = u.ctx;
          ctx.save();
          ctx.beginPath(); ctx.rect(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height); ctx.clip();
          for (const [x, p] of heat) {
            const tot = p.zero + p.counts.reduce((a, b) => a + b, 0);
            const x0 = u.valToPos(x, "x", true), x1 = u.valToPos(x + step, "x", true);
            p.counts.forEach((c, i) => {
              if (!c) return;
              const y0 = u.valToPos(bins[i].hi_ms, "y", true), y1 = u.valToPos(bins[i].lo_ms, "y", true);
              // Shade by the bin's share of the step's gaps (sqrt, so thin tails show).
              ctx.globalAlpha = Math.min(1, 0.08 + Math.sqrt(c / tot));
              ctx.fillStyle = base;
              ctx.fillRect(x0, y0, Math.max(1, x1 - x0 - 1), Math.max(1, y1 - y0));
            });
          }
          ctx.restore();
        }],
      },
    }, // A column covers its step [t, t + step): the lines' points sit in its
    // middle, and an empty x at each end keeps the outer columns whole.
    [[xs[0]].concat(xs.map(x => x + step / 2), [xs[xs.length - 1] + step]),
      ...[col("itl_p50_ms"), col("itl_p95_ms"), col("itl_p99_ms"), pts.map(p => p.zero + p.counts.reduce((a, b) => a + b, 0))].map(c => [null, ...c, null])]);
  }

  // ---------- worst streams ----------
  /** @param {number} seq */
  async function viewWorst(seq) {
    /** @type {{ streams?: DashStreamBrief[] }} */
    const d = await getJSON("/api/worst", params({ order: state.order, limit: "50" }));
    if (seq !== state.seq) return;
    $$("#worst-tabs button").forEach(b => b.setAttribute("aria-selected", String(b.dataset.order === state.order)));
    const ss = d.streams || [];
    fill($("#worst-table tbody"), ss.length ? ss.map(s => h("tr", { data: { id: s.stream_id } },
      h("td", { class: "l" }, h("a", { href: urlFor({ view: "stream", id: s.stream_id, zoom: null }) }, when(s.received_at))),
      h("td", { class: "l" }, `${s.browser || "?"} · ${s.region || "?"}`),
      h("td", { class: "l key", title: `${s.model || "—"} · ${s.release || "—"}` }, bdi(s.model || "—"), " · ", bdi(s.release || "—")),
      h("td", null, ms(s.ttft_ms)), h("td", null, ms(s.gap_p50_ms)), h("td", null, ms(s.gap_p99_ms)), h("td", null, ms(s.gap_max_ms)),
      h("td", null, num(s.stalls)), h("td", null, ms(s.stalled_ms)), h("td", null, fix(s.jank, 1)),
      h("td", { class: "l" }, s.causes && s.causes.length ? s.causes.flatMap((c, i) => [i ? " " : null, h("span", { class: "cause-tag", style: { "--c": causeColor(c) } }, c)]) : "—")))
      : noRows(11, "No streams in this range."));
  }

  // ---------- one stream ----------
  /** @param {number} seq */
  async function viewStream(seq) {
    $("#stream-id").textContent = state.id;
    if (!state.id) { banner("No stream selected: pick one in Worst streams.", false); return; }
    /** @type {DashStream} */
    const s = await getJSON("/api/stream", new URLSearchParams({ site: state.site, id: state.id }));
    if (seq !== state.seq) return;
    const tl = s.timeline || [], stalls = s.stall_list || [], origin = s.origin;
    const content = tl.filter(p => p.content);
    // Reads: the first stamp of each network read.
    /** @type {number[]} */
    const reads = [];
    let last = -1;
    for (const p of tl) if (p.read !== last) { reads.push(p.at_ms); last = p.read; }
    // One x axis (ms since t0) for events and emits: uPlot wants one sorted x
    // array, so both series are laid on the union of their times.
    const emits = origin ? origin.emit_ms : [];
    const xsAll = Array.from(new Set(content.map(p => p.at_ms).concat(emits))).sort((a, b) => a - b);
    const evAt = new Map(content.map((p, i) => [p.at_ms, i + 1]));
    const emAt = new Map(emits.map((e, i) => [e, i + 1]));
    const data = [xsAll, xsAll.map(x => evAt.get(x) ?? null), xsAll.map(x => emAt.get(x) ?? null)];
    /** @param {uPlot} u @param {number | null} v */
    const nth = (u, v) => v == null ? "—" : "#" + v;
    const series = [{ label: "ms since fetch", value: /** @param {uPlot} u @param {number | null} v */ (u, v) => v == null ? "—" : ms(v) },
      { label: "content events (browser)", stroke: css("--accent"), width: 2, paths: uPlot.paths.stepped({ align: 1 }), spanGaps: true,
        points: { show: true, size: 4, fill: css("--accent") }, value: nth },
      { label: "origin emits", stroke: CAUSE_COLOR.origin, width: 1, dash: [3, 3], spanGaps: true, show: !!origin, paths: uPlot.paths.stepped({ align: 1 }),
        points: { show: true, size: 5, stroke: CAUSE_COLOR.origin, fill: "transparent" }, value: nth }];
    if (!xsAll.length) empty("stream-chart", "No timeline kept for this stream");
    else {
      const xmax = Math.max(xsAll[xsAll.length - 1], ...stalls.map(st => st.end_ms), s.duration_ms || 0) * 1.03;
      chart("stream-chart", {
        scales: { x: { time: false, range: () => [0, xmax] }, y: { range: /** @param {uPlot} u @param {number} mn @param {number} mx */ (u, mn, mx) => [0, Math.max(2, mx * 1.08)] } },
        series,
        axes: [{ values: msAxis }, { label: "content event #", size: 56 }],
        hooks: {
          drawAxes: [/** @param {uPlot} u */ u => {
            const ctx = u.ctx, top = u.bbox.top, hgt = u.bbox.height;
            ctx.save();
            for (const st of stalls) {
              const x0 = u.valToPos(st.start_ms, "x", true), x1 = u.valToPos(st.end_ms, "x", true);
              ctx.fillStyle = causeColor(st.cause) + "38";
              ctx.fillRect(x0, top, Math.max(2, x1 - x0), hgt);
              ctx.fillStyle = causeColor(st.cause);
              ctx.font = `${12 * devicePixelRatio}px system-ui, sans-serif`;
              ctx.fillText(st.cause, x0 + 4 * devicePixelRatio, top + 14 * devicePixelRatio);
            }
            // Network reads: ticks along the bottom.
            ctx.strokeStyle = css("--muted");
            ctx.lineWidth = devicePixelRatio;
            ctx.beginPath();
            for (const r of reads) {
              const x = u.valToPos(r, "x", true);
              ctx.moveTo(x, top + hgt); ctx.lineTo(x, top + hgt - 8 * devicePixelRatio);
            }
            ctx.stroke();
            // TTFT marker.
            if (s.ttft_ms != null) {
              const x = u.valToPos(s.ttft_ms, "x", true);
              ctx.setLineDash([2 * devicePixelRatio, 3 * devicePixelRatio]);
              ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + hgt); ctx.stroke();
            }
            ctx.restore();
          }],
        },
      }, data);
    }
    fill($("#stream-legend"),
      h("span", null, h("i", { class: "tick" }), `network read (${num(s.reads)} in all${tl.length ? ", " + num(reads.length) + " in the sampled timeline" : ""})`),
      stalls.map(st => h("span", { class: "stall", data: { cause: st.cause, start: st.start_ms, end: st.end_ms } },
        dot(causeColor(st.cause)), `stall ${ms(st.end_ms - st.start_ms)} at ${ms(st.start_ms)}: `, bold(st.cause), st.hop ? " " + (HOP_NAME[st.hop] || st.hop) : "")),
      h("span", { class: "origin-note" }, origin ? `origin emits shifted by ${ms(Math.abs(origin.offset_ms))} ${origin.offset_ms >= 0 ? "later" : "earlier"} (client TTFT − origin TTFT)`
        : "no origin timeline for this stream"));
    /** @param {string} k @param {...(Child | Child[])} v */
    const dd = (k, ...v) => [h("dt", null, k), h("dd", null, ...v)];
    fill($("#stream-summary"),
      dd("Received", when(s.received_at)), dd("Browser · region", `${s.browser} · ${s.region} (${s.country})`, s.colo ? [" ", small("via ", s.colo)] : null),
      dd("Model · release", bdi(s.model || "—"), " · ", bdi(s.release || "—")), dd("API", bdi(s.api_origin + s.url_path), " ", small(bdi(s.http_proto))),
      dd("Format · status", `${s.format} · ${s.status}`),
      dd("TTFB · TTFT", `${ms(s.ttfb_ms)} · ${ms(s.ttft_ms)} `, small(s.ttft_cause, s.ttft_hop ? " " + (HOP_NAME[s.ttft_hop] || s.ttft_hop) : "")),
      dd("ITL p50 · p99 · max", `${ms(s.gap_p50_ms)} · ${ms(s.gap_p99_ms)} · ${ms(s.gap_max_ms)}`),
      dd("Stalls", `${num(s.stalls)} · ${ms(s.stalled_ms)}`), dd("Jank · tokens/s", `${fix(s.jank, 1)} · ${fix(s.tokens_per_sec, 1)}`),
      dd("Content events · reads", `${num(s.content_events)} · ${num(s.reads)} `, small(`(${fix(s.events_per_read, 2)} events per read)`)),
      dd("Sub-floor gaps", pct(s.sub_floor_share)), dd("Duration", ms(s.duration_ms)),
      dd("Origin", origin ? [`TTFT ${ms(origin.ttft_ms)} · ${num(origin.stalls)} stalls · `, bdi(origin.route)] : "not reported"),
      dd("Timeline", `${num(tl.length)} stamps kept${s.timeline_dropped ? ", " + num(s.timeline_dropped) + " not kept" : ""}`));
  }

  // ---------- compare ----------
  /** @type {Record<string, [string, (v: number) => string]>} */
  const METRIC = {
    ttft_ms: ["TTFT", ms], itl_p50_ms: ["ITL p50", ms], itl_p99_ms: ["ITL p99", ms],
    stall_share: ["Stall share (gaps > 200 ms)", pct], tokens_per_sec: ["Tokens/s", v => fix(v, 1)],
  };
  /** @param {number} seq */
  async function viewCompare(seq) {
    select("#cmp-dim").value = state.dim;
    /** @type {DashValues} */
    const vals = await getJSON("/api/values", params({ dim: state.dim }));
    if (seq !== state.seq) return;
    const known = vals.values || [];
    const vs = known.map(v => v.value);
    if (!state.a && vs.length) state.a = vs.length > 1 ? vs[1] : vs[0];
    if (!state.b && vs.length) state.b = vs[0];
    /** @param {string} sel */
    const opts = sel => [...new Set(vs.concat(sel ? [sel] : []))].map(v => {
      const k = known.find(x => x.value === v);
      return new Option(`${v || "(empty)"} ${k ? "· " + num(k.streams) : ""}`, v);
    });
    const a = select("#cmp-a"), b = select("#cmp-b");
    a.replaceChildren(...opts(state.a)); a.value = state.a;
    b.replaceChildren(...opts(state.b)); b.value = state.b;
    writeURL();
    if (!vs.length) { $("#cmp-verdict").textContent = "No streams in this range."; $("#cmp-table tbody").replaceChildren(); return; }
    /** @type {DashCompare} */
    const c = await getJSON("/api/compare", params({ dim: state.dim, a: state.a, b: state.b }));
    if (seq !== state.seq) return;
    const worse = c.worse || [];
    const v = $("#cmp-verdict");
    v.className = "verdict " + (worse.length ? "bad" : "good");
    v.dataset.worse = worse.join(",");
    fill(v, state.a === state.b ? "A and B are the same value." : worse.length
      ? [bold(bdi(c.b)), " is worse than ", bold(bdi(c.a)), " beyond noise in: ", worse.map(m => (METRIC[m] || [m])[0]).join(", "), "."]
      : ["No metric of ", bold(bdi(c.b)), " is worse than ", bold(bdi(c.a)), " beyond noise."],
    " ", small(`${num(c.streams_a)} vs ${num(c.streams_b)} streams`));
    fill($("#cmp-table tbody"), (c.metrics || []).map(m => {
      const [name, f] = METRIC[m.name] || [m.name, /** @param {number} x */ x => String(x)];
      const rel = m.rel_diff ? [" ", small(`(${m.rel_diff > 0 ? "+" : ""}${(m.rel_diff * 100).toFixed(1)} %)`)] : null;
      const diff = m.name === "stall_share" ? (m.diff * 100).toFixed(2) + " pt" : m.name === "tokens_per_sec" ? m.diff.toFixed(1) : (m.diff >= 0 ? "+" : "−") + ms(Math.abs(m.diff));
      const cls = m.verdict === "worse" ? "bad" : m.verdict === "better" ? "good" : "";
      return h("tr", { data: { metric: m.name, verdict: m.verdict } }, h("td", { class: "l" }, name), h("td", null, f(m.median_a)), h("td", null, f(m.median_b)),
        h("td", null, f(m.p90_a)), h("td", null, f(m.p90_b)), h("td", null, diff, rel), h("td", null, m.n_a && m.n_b ? m.p_superiority.toFixed(2) : "—"),
        h("td", null, m.n_a && m.n_b ? (m.p < 1e-4 ? m.p.toExponential(1) : m.p.toFixed(4)) : "—"),
        h("td", { class: "l " + cls }, m.verdict === "worse" ? "yes, worse" : m.verdict === "better" ? "yes, better" : m.verdict === "same" ? "no" : "too few streams (" + m.n_a + " / " + m.n_b + ")"));
    }));
    $("#cmp-method").textContent = `Unit: the stream (one value per stream; never the gaps, which are not independent). Test: ${c.test}; ` +
      `a metric is beyond noise when p < ${c.alpha} / ${(c.metrics || []).length} with at least 8 streams on each side. ` +
      `P(B > A) is the chance that a stream of B has the larger value (0.5: no shift).`;
  }

  // ---------- wiring ----------
  /** @type {Record<string, (seq: number) => Promise<void>>} */
  const VIEW_FN = { overview: viewOverview, causes: viewCauses, rechunk: viewRechunk, dist: viewDist, worst: viewWorst, stream: viewStream, compare: viewCompare };
  function renderFilters() {
    fill($("#filters"), Object.entries(state.where).map(([k, v]) => {
      const x = h("button", { title: "Remove filter" }, "×");
      x.setAttribute("type", "button");
      x.onclick = () => { delete state.where[k]; render(); };
      return h("span", { class: "chip", data: { k } }, h("span", null, bdi(k), " = ", bdi(v)), x);
    }));
  }
  async function render() {
    if (typeof uPlot === "undefined") { banner("The chart library did not load.", true); return; }
    for (const sec of $$("section.view")) sec.hidden = sec.dataset.view !== state.view;
    $$("#views a").forEach(a => {
      a.setAttribute("aria-current", String(a.dataset.view === state.view || (state.view === "stream" && a.dataset.view === "worst")));
      a.setAttribute("href", urlFor({ view: a.dataset.view }));
    });
    $("#stream-back").setAttribute("href", urlFor({ view: "worst" }));
    select("#range").value = state.since;
    if (!state.site) {
      banner("No data yet. Add the itlmon loader to a page that streams, or run the demo (make run → /demo/).", false);
      return;
    }
    writeURL();
    renderFilters();
    const seq = ++state.seq;
    try {
      banner("", false);
      await VIEW_FN[state.view](seq);
      if (seq === state.seq) $("#updated").textContent = "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      if (seq === state.seq) banner("Cannot load data: " + errText(e), true);
    }
  }
  function schedule() {
    clearInterval(state.timer);
    state.timer = setInterval(() => { if (!document.hidden && state.view !== "stream" && !state.zoom) render(); }, REFRESH_MS);
  }
  /**
   * closest returns the element matching s around an event's target.
   * @param {Event} ev @param {string} s @returns {HTMLElement | null}
   */
  const closest = (ev, s) => ev.target instanceof Element ? /** @type {HTMLElement | null} */ (ev.target.closest(s)) : null;
  /** @param {string} s @param {(v: string) => Partial<UrlState>} change */
  const onSelect = (s, change) => { const el = select(s); el.onchange = () => go(change(el.value)); };
  /**
   * onTab follows a click on a button of the tab list s (its buttons may be
   * built later: loadDimensions).
   * @param {string} s @param {(b: HTMLElement) => Partial<UrlState>} change
   */
  const onTab = (s, change) => $(s).addEventListener("click", ev => {
    const b = closest(ev, "button");
    if (b) go(change(b));
  });
  function init() {
    readURL();
    select("#range").value = state.since;
    onSelect("#site", v => ({ site: v, where: {}, a: "", b: "", zoom: null }));
    onSelect("#range", v => ({ since: v, zoom: null, a: "", b: "" }));
    $("#refresh").onclick = () => render();
    $("#views").addEventListener("click", ev => {
      const a = closest(ev, "a[data-view]");
      if (!a || ev.metaKey || ev.ctrlKey) return;
      ev.preventDefault();
      go({ view: a.dataset.view });
    });
    $("#stream-back").onclick = ev => { ev.preventDefault(); go({ view: "worst" }); };
    onTab("#tabs", b => ({ by: b.dataset.by }));
    onTab("#cause-tabs", b => ({ cby: b.dataset.by }));
    onTab("#rechunk-tabs", b => ({ rby: b.dataset.by }));
    onTab("#worst-tabs", b => ({ order: b.dataset.order }));
    onSelect("#cmp-dim", v => ({ dim: v, a: "", b: "" }));
    onSelect("#cmp-a", v => ({ a: v }));
    onSelect("#cmp-b", v => ({ b: v }));
    $$("#breakdown th[data-sort]").forEach(th => th.onclick = () => {
      const k = th.dataset.sort || "streams";
      state.sort = { key: k, desc: state.sort.key === k ? !state.sort.desc : k !== "key" };
      renderTable();
    });
    $("#breakdown tbody").addEventListener("click", ev => {
      const tr = closest(ev, "tr[data-key]");
      if (!tr || state.where[state.by] != null) return;
      go({ where: Object.assign({}, state.where, { [state.by]: tr.dataset.key }) });
    });
    $("#cause-table tbody").addEventListener("click", ev => {
      const tr = closest(ev, "tr[data-key]");
      if (!tr || state.where[state.cby] != null) return;
      go({ where: Object.assign({}, state.where, { [state.cby]: tr.dataset.key }) });
    });
    $("#worst-table tbody").addEventListener("click", ev => {
      const tr = closest(ev, "tr[data-id]");
      if (!tr || ev.metaKey || ev.ctrlKey) return;
      ev.preventDefault();
      go({ view: "stream", id: tr.dataset.id, zoom: null });
    });
    addEventListener("popstate", () => { readURL(); render(); });
    let rt = 0;
    addEventListener("resize", () => { clearTimeout(rt); rt = setTimeout(resizeCharts, 150); });
    Promise.all([loadDimensions(), loadSites()]).then(render);
    schedule();
  }
  init();
})();
