// itlmon dashboard: plain JS, no build step, no external requests. Charts are
// drawn by uPlot (vendor/uplot, embedded with the page). Every view's state is
// in the URL (?view=...&site=...), so any view can be shared.
// Reads the collector's dashboard API (collector/httpapi/dashboard.go).
(function () {
  "use strict";

  const $ = (s, el) => (el || document).querySelector(s);
  const $$ = (s, el) => Array.from((el || document).querySelectorAll(s));
  const GATE_ITL_P99_MS = 250;
  const REFRESH_MS = 30000;
  const VIEWS = ["overview", "causes", "rechunk", "dist", "worst", "stream", "compare"];
  const CAUSES = ["origin", "network", "page", "unknown"];
  const CAUSE_COLOR = { origin: "#9b3fc9", network: "#e48a2e", page: "#3358d4", unknown: "#98a2b3" };
  // The hops of a network delay, when the edge Worker reported the stream (collector/join).
  const HOP_NAME = { origin_edge: "origin→edge", edge_browser: "edge→browser" };
  const css = name => getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";

  // ---------- state, in the URL ----------
  const DEFAULTS = { view: "overview", since: "1h", by: "region", cby: "region", rby: "api_origin", order: "stalled", dim: "release" };
  const state = {
    view: "overview", site: "", since: "1h", where: /** @type {Record<string,string>} */ ({}),
    by: "region", cby: "region", rby: "api_origin", order: "stalled", id: "", dim: "release", a: "", b: "",
    zoom: /** @type {null|number[]} */ (null),
    sort: { key: "streams", desc: true }, rows: /** @type {any[]} */ ([]), timer: 0, seq: 0,
  };
  function readURL() {
    const q = new URLSearchParams(location.search);
    state.view = VIEWS.includes(q.get("view") || "") ? /** @type {string} */ (q.get("view")) : DEFAULTS.view;
    state.site = q.get("site") || state.site || "";
    state.since = q.get("since") || DEFAULTS.since;
    for (const k of ["by", "cby", "rby", "order", "dim"]) state[k] = q.get(k) || DEFAULTS[k];
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
  // urlFor returns the query string of the current state with changes.
  function urlFor(changes) {
    const s = Object.assign({}, state, changes || {});
    const q = new URLSearchParams();
    if (s.view !== DEFAULTS.view) q.set("view", s.view);
    if (s.site) q.set("site", s.site);
    q.set("since", s.since);
    for (const [k, v] of Object.entries(s.where)) q.append("where", k + "=" + v);
    const keep = { overview: ["by"], causes: ["cby"], rechunk: ["rby"], worst: ["order"], stream: ["id"], compare: ["dim", "a", "b"], dist: [] }[s.view] || [];
    for (const k of keep) if (s[k] && s[k] !== DEFAULTS[k]) q.set(k, s[k]);
    if (s.zoom && ["overview", "causes", "dist"].includes(s.view)) q.set("zoom", s.zoom.map(v => Math.round(v)).join("-"));
    return "?" + q.toString();
  }
  function writeURL() {
    const u = urlFor();
    if (u !== location.search) history.replaceState(null, "", u);
  }
  function go(changes) {
    Object.assign(state, changes);
    history.pushState(null, "", urlFor());
    render();
  }
  function params(extra) {
    const q = new URLSearchParams({ site: state.site, since: state.since });
    for (const [k, v] of Object.entries(state.where)) q.append("where", k + "=" + v);
    for (const [k, v] of Object.entries(extra || {})) q.set(k, v);
    return q;
  }

  // ---------- formatting ----------
  function ms(v) {
    if (v == null || !isFinite(v) || v <= 0) return "—";
    if (v >= 10000) return (v / 1000).toFixed(1) + " s";
    if (v >= 1000) return (v / 1000).toFixed(2) + " s";
    if (v >= 100) return Math.round(v) + " ms";
    if (v >= 10) return v.toFixed(1) + " ms";
    if (v >= 0.01) return v.toFixed(2) + " ms";
    return (v * 1000).toFixed(1) + " µs";
  }
  function pair(a, b) {
    const x = ms(a), y = ms(b);
    const ux = x.split(" ")[1], uy = y.split(" ")[1];
    const first = (ux && ux === uy) ? x.split(" ")[0] : x;
    return `${first} <small>/ ${y}</small>`;
  }
  const pct = v => (v == null || !isFinite(v)) ? "—" : (v * 100 < 10 ? (v * 100).toFixed(2) : (v * 100).toFixed(1)) + " %";
  const num = v => (v == null) ? "—" : Number(v).toLocaleString("en-US");
  const fix = (v, d) => (v == null || !isFinite(v) || v === 0) ? "—" : v.toFixed(d);
  function esc(s) {
    return String(s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }
  const when = t => new Date(t).toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });

  // ---------- data ----------
  async function getJSON(path, q) {
    const r = await fetch(path + "?" + q.toString(), { headers: { Accept: "application/json" } });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || (r.status + " " + r.statusText));
    return body;
  }
  function banner(msg, isErr) {
    const b = $("#banner");
    b.hidden = !msg;
    b.textContent = msg;
    b.classList.toggle("err", !!isErr);
  }
  async function loadSites() {
    const sel = $("#site");
    try {
      const d = await getJSON("/api/sites", new URLSearchParams({ since: "720h" }));
      const sites = d.sites || [];
      if (state.site && !sites.includes(state.site)) sites.unshift(state.site);
      if (!state.site && sites.length) state.site = sites[0];
      sel.innerHTML = sites.length ? sites.map(s => `<option>${esc(s)}</option>`).join("") : `<option value="">no sites yet</option>`;
      sel.value = state.site;
    } catch (e) {
      banner("Cannot list sites: " + e.message, true);
    }
  }

  // ---------- charts (uPlot) ----------
  /** @type {Map<string, any>} */
  const charts = new Map();
  let syncing = false;
  function dropChart(id) {
    const u = charts.get(id);
    if (u) { u.destroy(); charts.delete(id); }
  }
  function empty(host, text) {
    host.innerHTML = `<div class="empty">${esc(text)}</div>`;
  }
  // chart (re)creates a uPlot in #id. Time charts (opts.time) share the zoom,
  // which is part of the URL.
  function chart(id, opts, data) {
    dropChart(id);
    const host = document.getElementById(id);
    host.innerHTML = "";
    const w = Math.max(280, host.clientWidth), h = plotHeight(host);
    const axisStroke = css("--muted"), grid = { stroke: css("--line"), width: 1 };
    const o = Object.assign({
      width: w, height: h,
      cursor: { drag: { x: true, y: false, setScale: true } },
      legend: { live: true },
    }, opts);
    o.axes = (o.axes || [{}, {}]).map(a => Object.assign({ stroke: axisStroke, grid, ticks: grid }, a));
    o.hooks = Object.assign({}, o.hooks);
    if (opts.time) {
      o.hooks.setScale = (o.hooks.setScale || []).concat([(u, key) => {
        if (key !== "x" || syncing || !u._ready) return;
        const xs = u.data[0];
        const full = !xs.length || (u.scales.x.min <= xs[0] && u.scales.x.max >= xs[xs.length - 1]);
        state.zoom = full ? null : [u.scales.x.min, u.scales.x.max];
        writeURL();
        syncing = true;
        for (const [k, other] of charts) if (k !== id && other._time) other.setScale("x", state.zoom ? { min: state.zoom[0], max: state.zoom[1] } : { min: other.data[0][0], max: other.data[0][other.data[0].length - 1] });
        syncing = false;
      }]);
    }
    const u = new uPlot(o, data, host);
    u._time = !!opts.time;
    if (opts.time && state.zoom && data[0].length) {
      syncing = true;
      u.setScale("x", { min: state.zoom[0], max: state.zoom[1] });
      syncing = false;
    }
    u._ready = true;
    charts.set(id, u);
    /** @type {any} */ (host)._u = u;
    return u;
  }
  // plotHeight is the plot's height in #host (the legend goes below it).
  function plotHeight(host) {
    const phone = innerWidth < 720;
    return host.classList.contains("tall") ? (phone ? 280 : 340) : (phone ? 200 : 240);
  }
  function resizeCharts() {
    for (const [id, u] of charts) {
      const host = document.getElementById(id);
      if (host && host.clientWidth) u.setSize({ width: Math.max(280, host.clientWidth), height: plotHeight(host) });
    }
  }
  // gapped inserts a null row where consecutive points are more than 1.5
  // steps apart, so lines break where a step had no streams.
  function gapped(xs, cols, stepS) {
    const X = [], C = cols.map(() => []);
    xs.forEach((x, i) => {
      if (i > 0 && x - xs[i - 1] > stepS * 1.5) { X.push(xs[i - 1] + stepS); C.forEach(c => c.push(null)); }
      X.push(x); C.forEach((c, k) => c.push(cols[k][i]));
    });
    return [X, ...C];
  }
  const tsec = t => new Date(t).getTime() / 1000;
  const COUNT_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6];
  // lonely marks the values with no neighbour (a step between gaps), which a
  // line cannot show: drawn as points.
  const lonely = { show: true, size: 6, filter: (u, si) => {
    const d = u.data[si], out = [];
    for (let i = 0; i < d.length; i++) if (d[i] != null && d[i - 1] == null && d[i + 1] == null) out.push(i);
    return out;
  } };
  const msVal = (u, v) => v == null ? "—" : ms(v);
  const msAxis = (u, vals) => vals.map(v => v == null ? "" : v === 0 ? "0" : ms(v));

  // ---------- overview ----------
  function tile(k, html, cls, detail) {
    const t = $(`.tile[data-k="${k}"]`);
    $(".v", t).innerHTML = html;
    t.classList.remove("good", "warn", "bad");
    if (cls) t.classList.add(cls);
    if (detail != null) $(".d", t).textContent = detail;
  }
  function renderTiles(r) {
    const ttft = r.ttft || {}, itl = r.itl || {};
    tile("streams", num(r.streams), "", r.errors ? `${num(r.errors)} not completed: ${num(r.aborted)} aborted, ${num(r.failed)} failed`
      : (r.tokens ? num(r.tokens) + " tokens" : ""));
    tile("before", pct(r.before_headers_share), !r.streams ? "" : r.before_headers_share > 0.02 ? "bad" : r.before_headers_share > 0.005 ? "warn" : "good",
      r.before_headers ? `${num(r.before_headers)} streams · waited ${ms(r.before_headers_wait_ms)} on average` : "aborted or failed before the first byte");
    tile("ttft", pair(ttft.p50_ms, ttft.p95_ms), ttft.p95_ms > 3000 ? "warn" : "");
    tile("itl", pair(itl.p50_ms, itl.p99_ms), !itl.count ? "" : itl.p99_ms > GATE_ITL_P99_MS ? "bad" : "good",
      itl.count ? `jank ${fix(r.jank, 1)} · ${num(itl.count)} gaps` : "gap between content events");
    const tps = r.tokens_per_sec_p50;
    tile("tps", fix(tps, 1), !tps ? "" : tps < 6 ? "bad" : tps < 10 ? "warn" : "good");
    tile("stall", pct(r.stall_share), r.stall_share > 0.01 ? "bad" : r.stall_share > 0.002 ? "warn" : (itl.count ? "good" : ""),
      r.stalls ? num(r.stalls) + " stalls" : "");
    tile("smooth", pct(r.smooth_share), !r.streams ? "" : r.smooth_share < 0.8 ? "warn" : "good", r.verdict ? "overall " + r.verdict : "");
  }
  const sortVal = {
    key: r => r.key, streams: r => r.report.streams,
    ttft_p50: r => r.report.ttft.p50_ms, ttft_p95: r => r.report.ttft.p95_ms,
    itl_p50: r => r.report.itl.p50_ms, itl_p95: r => r.report.itl.p95_ms, itl_p99: r => r.report.itl.p99_ms,
    tps: r => r.report.tokens_per_sec_p50, stall: r => r.report.stall_share, jank: r => r.report.jank,
  };
  function renderTable() {
    const tb = $("#breakdown tbody");
    const f = sortVal[state.sort.key] || sortVal.streams;
    const rows = state.rows.slice().sort((a, b) => {
      const x = f(a), y = f(b);
      const c = typeof x === "string" ? x.localeCompare(y) : (x || 0) - (y || 0);
      return state.sort.desc ? -c : c;
    });
    $$("#breakdown th").forEach(th => {
      th.classList.toggle("sorted", th.dataset.sort === state.sort.key);
      th.classList.toggle("asc", th.dataset.sort === state.sort.key && !state.sort.desc);
    });
    if (!rows.length) {
      tb.innerHTML = `<tr><td class="l" colspan="11">No streams in this range.</td></tr>`;
      return;
    }
    const maxN = Math.max(...rows.map(r => r.report.streams));
    tb.innerHTML = rows.map(row => {
      const r = row.report, it = r.itl, tt = r.ttft;
      const p99cls = it.p99_ms > GATE_ITL_P99_MS ? "bad" : "";
      const tpscls = r.tokens_per_sec_p50 && r.tokens_per_sec_p50 < 6 ? "bad" : r.tokens_per_sec_p50 < 10 ? "warn" : "";
      const stallcls = r.stall_share > 0.01 ? "bad" : r.stall_share > 0.002 ? "warn" : "";
      const w = Math.max(2, Math.round(60 * r.streams / maxN));
      const v = (r.verdict || "NO DATA").replace(" ", "");
      return `<tr data-key="${esc(row.key)}">
        <td class="l">${esc(row.key || "unknown")}</td>
        <td>${num(r.streams)}<span class="bar" style="width:${w}px"></span></td>
        <td>${ms(tt.p50_ms)}</td><td>${ms(tt.p95_ms)}</td>
        <td>${ms(it.p50_ms)}</td><td>${ms(it.p95_ms)}</td><td class="${p99cls}">${ms(it.p99_ms)}</td>
        <td class="${tpscls}">${fix(r.tokens_per_sec_p50, 1)}</td>
        <td class="${stallcls}">${pct(r.stall_share)}</td>
        <td>${fix(r.jank, 1)}</td>
        <td class="l"><span class="pill ${v}">${esc(r.verdict || "NO DATA")}</span></td></tr>`;
    }).join("");
  }
  async function viewOverview(seq) {
    const [sum, ts] = await Promise.all([getJSON("/api/summary", params({ by: state.by })), getJSON("/api/timeseries", params())]);
    if (seq !== state.seq) return;
    renderTiles(sum.report || {});
    state.rows = sum.rows || [];
    renderTable();
    $$("#tabs button").forEach(b => b.setAttribute("aria-selected", String(b.dataset.by === state.by)));
    const pts = ts.points || [];
    if (!pts.length) { dropChart("chart"); empty($("#chart"), "No streams in this range"); return; }
    const data = gapped(pts.map(p => tsec(p.t)), [
      pts.map(p => p.itl_p50_ms || null), pts.map(p => p.itl_p95_ms || null), pts.map(p => p.itl_p99_ms || null),
      pts.map(() => GATE_ITL_P99_MS), pts.map(p => p.streams)], ts.step_s || 60);
    chart("chart", {
      time: true,
      scales: { y: { range: (u, mn, mx) => [0, Math.max(GATE_ITL_P99_MS * 1.1, mx * 1.05)] }, n: { auto: true } },
      series: [{ label: "time" },
        { label: "p50", stroke: css("--p50"), width: 1.5, value: msVal, points: lonely },
        { label: "p95", stroke: css("--p95"), width: 1.5, value: msVal, points: lonely },
        { label: "p99", stroke: css("--p99"), width: 2, value: msVal, points: lonely },
        { label: "250 ms gate", stroke: css("--muted"), dash: [4, 4], width: 1, value: msVal, points: { show: false } },
        { label: "streams", scale: "n", show: false, stroke: css("--muted"), value: (u, v) => v == null ? "—" : num(v) }],
      axes: [{}, { values: msAxis, size: 64 }],
    }, data);
  }

  // ---------- causes ----------
  // stack turns per-cause columns into cumulative ones (drawn largest
  // first, so each fill shows its own band); the legend shows the own value.
  // Steps without streams had no stalls: they are filled with zeros.
  function stacked(id, xs0, cols0, stepS, fmt, counts) {
    const xs = [], cols = cols0.map(() => []);
    xs0.forEach((x, i) => {
      for (let t = xs.length ? xs[xs.length - 1] + stepS : x; t < x; t += stepS) { xs.push(t); cols.forEach(c => c.push(0)); }
      xs.push(x); cols.forEach((c, k) => c.push(cols0[k][i]));
    });
    const cum = [];
    let run = xs.map(() => 0);
    for (const c of cols) { run = run.map((v, i) => v + (c[i] || 0)); cum.push(run); }
    const own = [xs, ...cols], tops = [xs, ...cum];
    const order = CAUSES.map((c, i) => i).reverse();
    const series = [{ label: "time" }].concat(order.map(i => ({
      label: CAUSES[i], stroke: CAUSE_COLOR[CAUSES[i]], fill: CAUSE_COLOR[CAUSES[i]] + "b0", width: 1, points: { show: false },
      value: (u, v, s, idx) => idx == null ? "—" : fmt(own[i + 1][idx]),
    })));
    chart(id, { time: true, series, axes: [{}, Object.assign({ values: (u, vals) => vals.map(v => fmt(v)), size: 60 }, counts ? { incrs: COUNT_INCRS } : {})],
      scales: { y: { range: (u, mn, mx) => [0, Math.max(1, mx * 1.08)] } } },
    [tops[0]].concat(order.map(i => tops[i + 1])));
  }
  async function viewCauses(seq) {
    const d = await getJSON("/api/causes", params({ by: state.cby }));
    if (seq !== state.seq) return;
    const t = d.total || {}, pts = d.points || [];
    const allStalled = CAUSES.reduce((s, c) => s + (t.stalled_ms_by_cause[c] || 0), 0);
    $("#cause-tiles").innerHTML = CAUSES.map(c => `<div class="tile cause" data-cause="${c}"><div class="k"><i class="dot" style="background:${CAUSE_COLOR[c]}"></i>${c}</div>
      <div class="v">${num(t.stalls_by_cause[c] || 0)} <small>stalls</small></div>
      <div class="d">${ms(t.stalled_ms_by_cause[c])} stalled${allStalled ? " · " + pct((t.stalled_ms_by_cause[c] || 0) / allStalled) + " of all" : ""}</div></div>`).join("");
    if (!pts.length) {
      dropChart("cause-stalls"); dropChart("cause-time");
      empty($("#cause-stalls"), "No streams in this range"); empty($("#cause-time"), "No streams in this range");
    } else {
      const xs = pts.map(p => tsec(p.t));
      stacked("cause-stalls", xs, CAUSES.map(c => pts.map(p => p.stalls_by_cause[c] || 0)), d.step_s, v => v == null ? "—" : num(v), true);
      stacked("cause-time", xs, CAUSES.map(c => pts.map(p => (p.stalled_ms_by_cause[c] || 0) / 1000)), d.step_s, v => v == null ? "—" : (+v).toFixed(v >= 10 ? 0 : 1) + " s");
    }
    const ttftAll = CAUSES.reduce((s, c) => s + (t.ttft_cause[c] || 0), 0);
    $("#ttft-mix").innerHTML = ttftAll ? `<div class="mixbar">${CAUSES.filter(c => t.ttft_cause[c]).map(c =>
      `<span style="flex:${t.ttft_cause[c]};background:${CAUSE_COLOR[c]}" title="${c}: ${t.ttft_cause[c]}"></span>`).join("")}</div>
      <div class="legend">${CAUSES.map(c => `<span data-cause="${c}"><i class="dot" style="background:${CAUSE_COLOR[c]}"></i>${c} ${num(t.ttft_cause[c] || 0)} (${pct((t.ttft_cause[c] || 0) / ttftAll)})</span>`).join("")}</div>
      <p class="hint">${num(ttftAll)} of ${num(t.streams)} streams had a first token (unknown: no evidence either way). <b>network</b> is coalesced delivery (behind a buffering proxy the whole answer arrives in one read at the end, and the only symptom is a TTFT as long as the answer).</p>`
      : `<p class="hint">No first-token waits with a cause in this range.</p>`;
    $$("#cause-tabs button").forEach(b => b.setAttribute("aria-selected", String(b.dataset.by === state.cby)));
    const rows = d.rows || [];
    $("#cause-table thead").innerHTML = `<tr><th class="l">${esc(state.cby)}</th><th>Streams</th><th>Stalls</th>${CAUSES.map(c => `<th>${c}</th>`).join("")}<th class="l">Stalled time by cause</th></tr>`;
    $("#cause-table tbody").innerHTML = rows.length ? rows.map(r => {
      const tot = CAUSES.reduce((s, c) => s + (r.stalled_ms_by_cause[c] || 0), 0);
      return `<tr data-key="${esc(r.key)}"><td class="l">${esc(r.key || "unknown")}</td><td>${num(r.streams)}</td><td>${num(r.stalls)}</td>
        ${CAUSES.map(c => `<td>${r.stalls_by_cause[c] ? num(r.stalls_by_cause[c]) + " <small>" + ms(r.stalled_ms_by_cause[c]) + "</small>" + (c === "network" ? hopSplit(r.network_by_hop) : "") : "—"}</td>`).join("")}
        <td class="l"><div class="mixbar small">${tot ? CAUSES.filter(c => r.stalled_ms_by_cause[c]).map(c => `<span style="flex:${r.stalled_ms_by_cause[c]};background:${CAUSE_COLOR[c]}"></span>`).join("") : ""}</div></td></tr>`;
    }).join("") : `<tr><td class="l" colspan="8">No streams in this range.</td></tr>`;
  }

  // hopSplit shows the network stalls an edge Worker placed on each hop.
  function hopSplit(h) {
    if (!h) return "";
    const parts = Object.keys(HOP_NAME).filter(k => h[k] && h[k].stalls).map(k => `${HOP_NAME[k]} ${num(h[k].stalls)}`);
    return parts.length ? `<br><small>${parts.join(" · ")}</small>` : "";
  }

  // ---------- re-chunking ----------
  const PATTERN = { one_read: "one read at the end", steady: "steady full reads", page: "page busy", held: "held by the path", bursty: "bursts", origin: "sent in bursts by the origin" };
  async function viewRechunk(seq) {
    const d = await getJSON("/api/rechunk", params({ by: state.rby }));
    if (seq !== state.seq) return;
    $$("#rechunk-tabs button").forEach(b => b.setAttribute("aria-selected", String(b.dataset.by === state.rby)));
    const rows = d.rows || [];
    const hi = (v, lim) => v >= lim ? "bad" : "";
    $("#rechunk-table tbody").innerHTML = rows.length ? rows.map(r => `<tr data-key="${esc(r.key)}" class="${r.flagged ? "flagged" : ""}">
      <td class="l">${esc(r.key || "unknown")}</td><td>${num(r.streams)}</td>
      <td class="${hi(r.events_per_read, 1.5)}">${fix(r.events_per_read, 2)}</td><td>${r.bytes_per_read ? num(Math.round(r.bytes_per_read)) + " B" : "—"}</td>
      <td class="${hi(r.sub_floor_share, 0.2)}">${pct(r.sub_floor_share)}</td><td class="${hi(r.coalesced_ttft_share, 0.2)}">${pct(r.coalesced_ttft_share)}</td>
      <td>${pct(r.one_read_share)}</td><td>${pct(r.steady_share)}</td><td>${pct(r.bursty_share)}</td>
      <td class="l">${!r.flagged ? `<span class="pill SMOOTH">OK</span>` : r.pattern === "page" ? `<span class="pill WARN">PAGE BUSY</span>` : `<span class="pill JANKY">RE-CHUNKED</span>`}</td></tr>`).join("")
      : `<tr><td class="l" colspan="10">No streams in this range.</td></tr>`;
    const flagged = rows.filter(r => r.flagged);
    $("#diagnoses").innerHTML = flagged.length ? flagged.map(r => `<div class="card diag" data-key="${esc(r.key)}" data-pattern="${esc(r.pattern)}">
      <h2>${esc(r.key || "unknown")} <span class="pill ${r.pattern === "page" ? "WARN" : "JANKY"}">${esc(PATTERN[r.pattern] || "coalesced")}</span></h2>
      <p>${esc(r.diagnosis || "Reads carry several events or many gaps fall below the timer floor, but no single read pattern dominates: look at the worst streams of this segment.").replace(/`([^`]+)`/g, "<code>$1</code>")}</p>
      <p class="hint">${num(r.streams)} stream${r.streams === 1 ? "" : "s"} · ${fix(r.events_per_read, 1)} events per read · ${pct(r.one_read_share)} in one read · ${pct(r.coalesced_ttft_share)} first tokens coalesced · stalls: ${pct(r.page_stall_share)} page, ${pct(r.network_stall_share)} network</p></div>`).join("")
      : `<div class="card"><p class="hint">No segment re-chunks the stream in this range: reads carry about one event each.</p></div>`;
  }

  // ---------- distribution ----------
  async function viewDist(seq) {
    const [h, ts] = await Promise.all([getJSON("/api/heatmap", params()), getJSON("/api/timeseries", params())]);
    if (seq !== state.seq) return;
    const pts = h.points || [], bins = h.bins || [];
    const zero = pts.reduce((s, p) => s + p.zero, 0), all = pts.reduce((s, p) => s + p.zero + p.counts.reduce((a, b) => a + b, 0), 0);
    $("#heat-zero").textContent = all ? `${num(zero)} of ${num(all)} gaps (${pct(zero / all)})` : "none";
    if (!pts.length || !bins.length) { dropChart("heatmap"); empty($("#heatmap"), "No gaps in this range"); return; }
    const step = h.step_s || 60;
    const q = new Map((ts.points || []).map(p => [tsec(p.t), p]));
    const xs = pts.map(p => tsec(p.t));
    const col = k => xs.map(x => (q.get(x) || {})[k] || null);
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
        { label: "gaps", stroke: "transparent", value: (u, v, s, idx) => idx == null ? "—" : num(u.data[4][idx]) }],
      axes: [{}, { values: msAxis, size: 64 }],
      hooks: {
        drawAxes: [u => {
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
      ...[col("itl_p50_ms"), col("itl_p95_ms"), col("itl_p99_ms"), pts.map(p => p.zero + p.counts.reduce((a, b) => a + b, 0))].map(c => [null].concat(c, [null]))]);
  }

  // ---------- worst streams ----------
  async function viewWorst(seq) {
    const d = await getJSON("/api/worst", params({ order: state.order, limit: "50" }));
    if (seq !== state.seq) return;
    $$("#worst-tabs button").forEach(b => b.setAttribute("aria-selected", String(b.dataset.order === state.order)));
    const ss = d.streams || [];
    $("#worst-table tbody").innerHTML = ss.length ? ss.map(s => `<tr data-id="${esc(s.stream_id)}">
      <td class="l"><a href="${esc(urlFor({ view: "stream", id: s.stream_id, zoom: null }))}">${esc(when(s.received_at))}</a></td>
      <td class="l">${esc(s.browser || "?")} · ${esc(s.region || "?")}</td><td class="l">${esc(s.model || "—")} · ${esc(s.release || "—")}</td>
      <td>${ms(s.ttft_ms)}</td><td>${ms(s.gap_p50_ms)}</td><td>${ms(s.gap_p99_ms)}</td><td>${ms(s.gap_max_ms)}</td>
      <td>${num(s.stalls)}</td><td>${ms(s.stalled_ms)}</td><td>${fix(s.jank, 1)}</td>
      <td class="l">${s.causes.map(c => `<span class="cause-tag" style="--c:${CAUSE_COLOR[c] || "#888"}">${esc(c)}</span>`).join(" ") || "—"}</td></tr>`).join("")
      : `<tr><td class="l" colspan="11">No streams in this range.</td></tr>`;
  }

  // ---------- one stream ----------
  async function viewStream(seq) {
    $("#stream-id").textContent = state.id;
    if (!state.id) { banner("No stream selected: pick one in Worst streams.", false); return; }
    const s = await getJSON("/api/stream", new URLSearchParams({ site: state.site, id: state.id }));
    if (seq !== state.seq) return;
    const tl = s.timeline || [], stalls = s.stall_list || [], origin = s.origin;
    const content = tl.filter(p => p.content);
    // Reads: the first stamp of each network read.
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
    const series = [{ label: "ms since fetch", value: (u, v) => v == null ? "—" : ms(v) },
      { label: "content events (browser)", stroke: css("--accent"), width: 2, paths: uPlot.paths.stepped({ align: 1 }), spanGaps: true,
        points: { show: true, size: 4, fill: css("--accent") }, value: (u, v) => v == null ? "—" : "#" + v },
      { label: "origin emits", stroke: CAUSE_COLOR.origin, width: 1, dash: [3, 3], spanGaps: true, show: !!origin, paths: uPlot.paths.stepped({ align: 1 }),
        points: { show: true, size: 5, stroke: CAUSE_COLOR.origin, fill: "transparent" }, value: (u, v) => v == null ? "—" : "#" + v }];
    if (!xsAll.length) { dropChart("stream-chart"); empty($("#stream-chart"), "No timeline kept for this stream"); }
    else {
      const xmax = Math.max(xsAll[xsAll.length - 1], ...stalls.map(st => st.end_ms), s.duration_ms || 0) * 1.03;
      chart("stream-chart", {
        scales: { x: { time: false, range: () => [0, xmax] }, y: { range: (u, mn, mx) => [0, Math.max(2, mx * 1.08)] } },
        series,
        axes: [{ values: msAxis }, { label: "content event #", size: 56 }],
        hooks: {
          drawAxes: [u => {
            const ctx = u.ctx, top = u.bbox.top, hgt = u.bbox.height;
            ctx.save();
            for (const st of stalls) {
              const x0 = u.valToPos(st.start_ms, "x", true), x1 = u.valToPos(st.end_ms, "x", true);
              ctx.fillStyle = (CAUSE_COLOR[st.cause] || "#888") + "38";
              ctx.fillRect(x0, top, Math.max(2, x1 - x0), hgt);
              ctx.fillStyle = CAUSE_COLOR[st.cause] || "#888";
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
    $("#stream-legend").innerHTML = `<span><i class="tick"></i>network read (${num(s.reads)} in all${tl.length ? ", " + num(reads.length) + " in the sampled timeline" : ""})</span>` +
      stalls.map(st => `<span class="stall" data-cause="${esc(st.cause)}" data-start="${st.start_ms}" data-end="${st.end_ms}"><i class="dot" style="background:${CAUSE_COLOR[st.cause] || "#888"}"></i>stall ${ms(st.end_ms - st.start_ms)} at ${ms(st.start_ms)}: <b>${esc(st.cause)}</b>${st.hop ? " " + esc(HOP_NAME[st.hop] || st.hop) : ""}</span>`).join("") +
      (origin ? `<span class="origin-note">origin emits shifted by ${ms(Math.abs(origin.offset_ms))} ${origin.offset_ms >= 0 ? "later" : "earlier"} (client TTFT − origin TTFT)</span>` : `<span class="origin-note">no origin timeline for this stream</span>`);
    const dd = (k, v) => `<dt>${k}</dt><dd>${v}</dd>`;
    $("#stream-summary").innerHTML = [
      dd("Received", esc(when(s.received_at))), dd("Browser · region", `${esc(s.browser)} · ${esc(s.region)} (${esc(s.country)})${s.colo ? " <small>via " + esc(s.colo) + "</small>" : ""}`),
      dd("Model · release", `${esc(s.model || "—")} · ${esc(s.release || "—")}`), dd("API", `${esc(s.api_origin)}${esc(s.url_path)} <small>${esc(s.http_proto)}</small>`),
      dd("Format · status", `${esc(s.format)} · ${esc(s.status)}`),
      dd("TTFB · TTFT", `${ms(s.ttfb_ms)} · ${ms(s.ttft_ms)} <small>${esc(s.ttft_cause)}${s.ttft_hop ? " " + esc(HOP_NAME[s.ttft_hop] || s.ttft_hop) : ""}</small>`),
      dd("ITL p50 · p99 · max", `${ms(s.gap_p50_ms)} · ${ms(s.gap_p99_ms)} · ${ms(s.gap_max_ms)}`),
      dd("Stalls", `${num(s.stalls)} · ${ms(s.stalled_ms)}`), dd("Jank · tokens/s", `${fix(s.jank, 1)} · ${fix(s.tokens_per_sec, 1)}`),
      dd("Content events · reads", `${num(s.content_events)} · ${num(s.reads)} <small>(${fix(s.events_per_read, 2)} events per read)</small>`),
      dd("Sub-floor gaps", pct(s.sub_floor_share)), dd("Duration", ms(s.duration_ms)),
      dd("Origin", origin ? `TTFT ${ms(origin.ttft_ms)} · ${num(origin.stalls)} stalls · ${esc(origin.route)}` : "not reported"),
      dd("Timeline", `${num(tl.length)} stamps kept${s.timeline_dropped ? ", " + num(s.timeline_dropped) + " not kept" : ""}`),
    ].join("");
  }

  // ---------- compare ----------
  const METRIC = {
    ttft_ms: ["TTFT", ms], itl_p50_ms: ["ITL p50", ms], itl_p99_ms: ["ITL p99", ms],
    stall_share: ["Stall share (gaps > 200 ms)", pct], tokens_per_sec: ["Tokens/s", v => fix(v, 1)],
  };
  async function viewCompare(seq) {
    $("#cmp-dim").value = state.dim;
    const vals = await getJSON("/api/values", params({ dim: state.dim }));
    if (seq !== state.seq) return;
    const vs = (vals.values || []).map(v => v.value);
    if (!state.a && vs.length) state.a = vs.length > 1 ? vs[1] : vs[0];
    if (!state.b && vs.length) state.b = vs[0];
    const opts = sel => [...new Set(vs.concat(sel ? [sel] : []))].map(v => `<option value="${esc(v)}">${esc(v || "(empty)")} ${vals.values.find(x => x.value === v) ? "· " + num(vals.values.find(x => x.value === v).streams) : ""}</option>`).join("");
    $("#cmp-a").innerHTML = opts(state.a); $("#cmp-a").value = state.a;
    $("#cmp-b").innerHTML = opts(state.b); $("#cmp-b").value = state.b;
    writeURL();
    if (!vs.length) { $("#cmp-verdict").textContent = "No streams in this range."; $("#cmp-table tbody").innerHTML = ""; return; }
    const c = await getJSON("/api/compare", params({ dim: state.dim, a: state.a, b: state.b }));
    if (seq !== state.seq) return;
    const worse = c.worse || [];
    const v = $("#cmp-verdict");
    v.className = "verdict " + (worse.length ? "bad" : "good");
    v.dataset.worse = worse.join(",");
    v.innerHTML = state.a === state.b ? "A and B are the same value." : worse.length
      ? `<b>${esc(c.b)}</b> is worse than <b>${esc(c.a)}</b> beyond noise in: ${worse.map(m => esc(METRIC[m][0])).join(", ")}.`
      : `No metric of <b>${esc(c.b)}</b> is worse than <b>${esc(c.a)}</b> beyond noise.`;
    v.innerHTML += ` <small>${num(c.streams_a)} vs ${num(c.streams_b)} streams</small>`;
    $("#cmp-table tbody").innerHTML = (c.metrics || []).map(m => {
      const [name, f] = METRIC[m.name] || [m.name, x => String(x)];
      const rel = m.rel_diff ? ` <small>(${m.rel_diff > 0 ? "+" : ""}${(m.rel_diff * 100).toFixed(1)} %)</small>` : "";
      const diff = m.name === "stall_share" ? (m.diff * 100).toFixed(2) + " pt" : m.name === "tokens_per_sec" ? m.diff.toFixed(1) : (m.diff >= 0 ? "+" : "−") + ms(Math.abs(m.diff));
      const cls = m.verdict === "worse" ? "bad" : m.verdict === "better" ? "good" : "";
      return `<tr data-metric="${esc(m.name)}" data-verdict="${esc(m.verdict)}"><td class="l">${esc(name)}</td><td>${f(m.median_a)}</td><td>${f(m.median_b)}</td>
        <td>${f(m.p90_a)}</td><td>${f(m.p90_b)}</td><td>${diff}${rel}</td><td>${m.n_a && m.n_b ? m.p_superiority.toFixed(2) : "—"}</td>
        <td>${m.n_a && m.n_b ? (m.p < 1e-4 ? m.p.toExponential(1) : m.p.toFixed(4)) : "—"}</td>
        <td class="l ${cls}">${m.verdict === "worse" ? "yes, worse" : m.verdict === "better" ? "yes, better" : m.verdict === "same" ? "no" : "too few streams (" + m.n_a + " / " + m.n_b + ")"}</td></tr>`;
    }).join("");
    $("#cmp-method").textContent = `Unit: the stream (one value per stream; never the gaps, which are not independent). Test: ${c.test}; ` +
      `a metric is beyond noise when p < ${c.alpha} / ${(c.metrics || []).length} with at least 8 streams on each side. ` +
      `P(B > A) is the chance that a stream of B has the larger value (0.5: no shift).`;
  }

  // ---------- wiring ----------
  const VIEW_FN = { overview: viewOverview, causes: viewCauses, rechunk: viewRechunk, dist: viewDist, worst: viewWorst, stream: viewStream, compare: viewCompare };
  function renderFilters() {
    const el = $("#filters");
    el.innerHTML = Object.entries(state.where).map(([k, v]) =>
      `<span class="chip">${esc(k)} = ${esc(v)}<button type="button" data-k="${esc(k)}" title="Remove filter">×</button></span>`).join("");
    $$("button", el).forEach(b => b.onclick = () => { delete state.where[b.dataset.k]; render(); });
  }
  async function render() {
    if (typeof uPlot === "undefined") { banner("The chart library did not load.", true); return; }
    for (const sec of $$("section.view")) sec.hidden = sec.dataset.view !== state.view;
    $$("#views a").forEach(a => {
      a.setAttribute("aria-current", String(a.dataset.view === state.view || (state.view === "stream" && a.dataset.view === "worst")));
      a.href = urlFor({ view: a.dataset.view });
    });
    $("#stream-back").href = urlFor({ view: "worst" });
    $("#range").value = state.since;
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
      if (seq === state.seq) banner("Cannot load data: " + (e && e.message || e), true);
    }
  }
  function schedule() {
    clearInterval(state.timer);
    state.timer = setInterval(() => { if (!document.hidden && state.view !== "stream" && !state.zoom) render(); }, REFRESH_MS);
  }
  function init() {
    readURL();
    $("#range").value = state.since;
    $("#site").onchange = e => go({ site: e.target.value, where: {}, a: "", b: "", zoom: null });
    $("#range").onchange = e => go({ since: e.target.value, zoom: null, a: "", b: "" });
    $("#refresh").onclick = () => render();
    $("#views").addEventListener("click", ev => {
      const a = ev.target.closest("a[data-view]");
      if (!a || ev.metaKey || ev.ctrlKey) return;
      ev.preventDefault();
      go({ view: a.dataset.view });
    });
    $("#stream-back").onclick = ev => { ev.preventDefault(); go({ view: "worst" }); };
    $$("#tabs button").forEach(b => b.onclick = () => go({ by: b.dataset.by }));
    $$("#cause-tabs button").forEach(b => b.onclick = () => go({ cby: b.dataset.by }));
    $$("#rechunk-tabs button").forEach(b => b.onclick = () => go({ rby: b.dataset.by }));
    $$("#worst-tabs button").forEach(b => b.onclick = () => go({ order: b.dataset.order }));
    $("#cmp-dim").onchange = e => go({ dim: e.target.value, a: "", b: "" });
    $("#cmp-a").onchange = e => go({ a: e.target.value });
    $("#cmp-b").onchange = e => go({ b: e.target.value });
    $$("#breakdown th[data-sort]").forEach(th => th.onclick = () => {
      const k = th.dataset.sort;
      state.sort = { key: k, desc: state.sort.key === k ? !state.sort.desc : k !== "key" };
      renderTable();
    });
    $("#breakdown tbody").addEventListener("click", ev => {
      const tr = ev.target.closest("tr[data-key]");
      if (!tr || state.where[state.by] != null) return;
      go({ where: Object.assign({}, state.where, { [state.by]: tr.dataset.key }) });
    });
    $("#cause-table tbody").addEventListener("click", ev => {
      const tr = ev.target.closest("tr[data-key]");
      if (!tr || state.where[state.cby] != null) return;
      go({ where: Object.assign({}, state.where, { [state.cby]: tr.dataset.key }) });
    });
    $("#worst-table tbody").addEventListener("click", ev => {
      const tr = ev.target.closest("tr[data-id]");
      if (!tr || ev.metaKey || ev.ctrlKey) return;
      ev.preventDefault();
      go({ view: "stream", id: tr.dataset.id, zoom: null });
    });
    addEventListener("popstate", () => { readURL(); render(); });
    let rt = 0;
    addEventListener("resize", () => { clearTimeout(rt); rt = setTimeout(resizeCharts, 150); });
    loadSites().then(render);
    schedule();
  }
  init();
})();
