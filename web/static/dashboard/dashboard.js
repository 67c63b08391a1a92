// itlmon dashboard: plain JS, no build step, no external requests.
// Reads /api/sites, /api/summary and /api/timeseries (collector/httpapi).
(function () {
  "use strict";

  const $ = (s, el) => (el || document).querySelector(s);
  const $$ = (s, el) => Array.from((el || document).querySelectorAll(s));
  const GATE_ITL_P99_MS = 250;
  const REFRESH_MS = 30000;

  const state = {
    site: "", since: "1h", by: "region", where: {},
    sort: { key: "streams", desc: true }, rows: [], timer: 0, seq: 0,
  };

  // ---------- URL state (so a view can be shared) ----------
  function readURL() {
    const q = new URLSearchParams(location.search);
    state.site = q.get("site") || "";
    state.since = q.get("since") || "1h";
    state.by = q.get("by") || "region";
    state.where = {};
    q.getAll("where").forEach(w => {
      const i = w.indexOf("=");
      if (i > 0) state.where[w.slice(0, i)] = w.slice(i + 1);
    });
  }
  function writeURL() {
    const q = params(true);
    q.set("by", state.by);
    history.replaceState(null, "", "?" + q.toString());
  }
  function params(withWhere) {
    const q = new URLSearchParams({ site: state.site, since: state.since });
    if (withWhere) for (const [k, v] of Object.entries(state.where)) q.append("where", k + "=" + v);
    return q;
  }

  // ---------- formatting ----------
  function ms(v) {
    if (v == null || !isFinite(v) || v <= 0) return "—";
    if (v >= 10000) return (v / 1000).toFixed(1) + " s";
    if (v >= 1000) return (v / 1000).toFixed(2) + " s";
    if (v >= 100) return Math.round(v) + " ms";
    if (v >= 10) return v.toFixed(1) + " ms";
    return v.toFixed(2) + " ms";
  }
  // pair prints "p50 / p99" sharing the unit when both have the same one.
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

  // ---------- data ----------
  async function getJSON(path, q) {
    const r = await fetch(path + "?" + q.toString(), { headers: { Accept: "application/json" } });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || (r.status + " " + r.statusText));
    return body;
  }

  async function loadSites() {
    const sel = $("#site");
    try {
      const d = await getJSON("/api/sites", new URLSearchParams({ since: "720h" }));
      const sites = d.sites || [];
      if (state.site && !sites.includes(state.site)) sites.unshift(state.site);
      if (!state.site && sites.length) state.site = sites[0];
      sel.innerHTML = sites.length ? sites.map(s => `<option>${esc(s)}</option>`).join("")
        : `<option value="">no sites yet</option>`;
      sel.value = state.site;
    } catch (e) {
      banner("Cannot list sites: " + e.message, true);
    }
  }

  async function refresh() {
    if (!state.site) {
      banner("No data yet. Add the itlmon loader to a page that streams, or run the demo (make run → /demo/).", false);
      return;
    }
    writeURL();
    renderFilters();
    const seq = ++state.seq;
    const q = params(true);
    const qb = params(true); qb.set("by", state.by);
    try {
      const [sum, ts] = await Promise.all([getJSON("/api/summary", qb), getJSON("/api/timeseries", q)]);
      if (seq !== state.seq) return; // a newer refresh is on its way
      banner("", false);
      renderTiles(sum.report || {});
      state.rows = sum.rows || [];
      renderTable();
      renderChart(ts);
      $("#updated").textContent = "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      if (seq === state.seq) banner("Cannot load data: " + e.message, true);
    }
  }

  function banner(msg, isErr) {
    const b = $("#banner");
    b.hidden = !msg;
    b.textContent = msg;
    b.classList.toggle("err", !!isErr);
  }

  // ---------- tiles ----------
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
    // Requests aborted or failed before the response headers: the user gave
    // up (or the network failed) before the first byte.
    tile("before", pct(r.before_headers_share), !r.streams ? "" : r.before_headers_share > 0.02 ? "bad" : r.before_headers_share > 0.005 ? "warn" : "good",
      r.before_headers ? `${num(r.before_headers)} streams · waited ${ms(r.before_headers_wait_ms)} on average` : "aborted or failed before the first byte");
    tile("ttft", pair(ttft.p50_ms, ttft.p95_ms), ttft.p95_ms > 3000 ? "warn" : "");
    tile("itl", pair(itl.p50_ms, itl.p99_ms),
      !itl.count ? "" : itl.p99_ms > GATE_ITL_P99_MS ? "bad" : "good",
      itl.count ? `jank ${fix(r.jank, 1)} · ${num(itl.count)} gaps` : "gap between content events");
    const tps = r.tokens_per_sec_p50;
    tile("tps", fix(tps, 1), !tps ? "" : tps < 6 ? "bad" : tps < 10 ? "warn" : "good");
    tile("stall", pct(r.stall_share), r.stall_share > 0.01 ? "bad" : r.stall_share > 0.002 ? "warn" : (itl.count ? "good" : ""),
      r.stalls ? num(r.stalls) + " stalls" : "");
    tile("smooth", pct(r.smooth_share), !r.streams ? "" : r.smooth_share < 0.8 ? "warn" : "good",
      r.verdict ? "overall " + r.verdict : "");
  }

  // ---------- breakdown table ----------
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

  function renderFilters() {
    const el = $("#filters");
    el.innerHTML = Object.entries(state.where).map(([k, v]) =>
      `<span class="chip">${esc(k)} = ${esc(v)}<button type="button" data-k="${esc(k)}" title="Remove filter">×</button></span>`).join("");
    $$("button", el).forEach(b => b.onclick = () => { delete state.where[b.dataset.k]; refresh(); });
    $$("#tabs button").forEach(b => b.setAttribute("aria-selected", String(b.dataset.by === state.by)));
  }

  // ---------- chart (inline SVG) ----------
  const SVGNS = "http://www.w3.org/2000/svg";
  function svgEl(name, attrs, parent) {
    const e = document.createElementNS(SVGNS, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }
  function niceMax(v) {
    if (!(v > 0)) return 10;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }
  function timeLabel(t, spanMs) {
    const d = new Date(t);
    if (spanMs > 2 * 86400e3) return d.toLocaleDateString([], { month: "short", day: "numeric" });
    return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  }
  function renderChart(ts) {
    const host = $("#chart");
    host.innerHTML = "";
    const W = host.clientWidth || 800, H = host.clientHeight || 260;
    const m = { l: 56, r: 12, t: 10, b: 26 };
    const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none" }, host);
    const pts = (ts && ts.points) || [];
    if (!pts.length) {
      svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, svg).textContent = "No streams in this range";
      return;
    }
    const t0 = new Date(ts.from).getTime(), t1 = new Date(ts.to).getTime();
    const span = Math.max(t1 - t0, 60e3);
    const ymax = niceMax(Math.max(GATE_ITL_P99_MS * 1.1, ...pts.map(p => p.itl_p99_ms || 0)));
    const x = t => m.l + (W - m.l - m.r) * (t - t0) / span;
    const y = v => m.t + (H - m.t - m.b) * (1 - Math.min(v, ymax) / ymax);

    const grid = svgEl("g", { class: "grid" }, svg), axis = svgEl("g", { class: "axis" }, svg);
    for (let i = 0; i <= 4; i++) {
      const v = ymax * i / 4;
      svgEl("line", { x1: m.l, x2: W - m.r, y1: y(v), y2: y(v) }, grid);
      svgEl("text", { x: m.l - 6, y: y(v) + 4, "text-anchor": "end" }, axis).textContent = ms(v) === "—" ? "0" : ms(v);
    }
    const ticks = Math.max(2, Math.floor((W - m.l - m.r) / 110));
    for (let i = 0; i <= ticks; i++) {
      const t = t0 + span * i / ticks;
      svgEl("text", { x: x(t), y: H - 8, "text-anchor": i === 0 ? "start" : i === ticks ? "end" : "middle" }, axis)
        .textContent = timeLabel(t, span);
    }
    svgEl("line", { class: "lim", x1: m.l, x2: W - m.r, y1: y(GATE_ITL_P99_MS), y2: y(GATE_ITL_P99_MS) }, svg);

    // Lines break where a step had no streams.
    const stepMs = (ts.step_s || 60) * 1000;
    function path(key) {
      let d = "", prev = -Infinity;
      for (const p of pts) {
        const t = new Date(p.t).getTime(), v = p[key];
        if (!(v > 0)) { prev = -Infinity; continue; }
        d += (t - prev > stepMs * 1.5 ? "M" : "L") + x(t).toFixed(1) + "," + y(v).toFixed(1);
        prev = t;
      }
      return d;
    }
    const colors = { itl_p50_ms: "var(--p50)", itl_p95_ms: "var(--p95)", itl_p99_ms: "var(--p99)" };
    for (const k of ["itl_p50_ms", "itl_p95_ms", "itl_p99_ms"]) {
      svgEl("path", { d: path(k), fill: "none", stroke: colors[k], "stroke-width": k === "itl_p99_ms" ? 2 : 1.5,
        "stroke-linejoin": "round", "vector-effect": "non-scaling-stroke" }, svg);
      if (pts.length < 4) for (const p of pts) if (p[k] > 0)
        svgEl("circle", { cx: x(new Date(p.t).getTime()), cy: y(p[k]), r: 3, fill: colors[k] }, svg);
    }

    // Hover: nearest point.
    const cursor = svgEl("line", { y1: m.t, y2: H - m.b, stroke: "var(--muted)", "stroke-width": 1, opacity: 0 }, svg);
    const tip = document.createElement("div");
    tip.className = "tip"; tip.hidden = true; host.appendChild(tip);
    svg.addEventListener("mousemove", ev => {
      const r = svg.getBoundingClientRect();
      const px = (ev.clientX - r.left) * W / r.width;
      let best = null, bd = Infinity;
      for (const p of pts) { const d = Math.abs(x(new Date(p.t).getTime()) - px); if (d < bd) { bd = d; best = p; } }
      if (!best) return;
      const bx = x(new Date(best.t).getTime());
      cursor.setAttribute("x1", bx); cursor.setAttribute("x2", bx); cursor.setAttribute("opacity", .5);
      tip.hidden = false;
      tip.innerHTML = `<b>${new Date(best.t).toLocaleString()}</b><br>` +
        `ITL p99 ${ms(best.itl_p99_ms)} · p95 ${ms(best.itl_p95_ms)} · p50 ${ms(best.itl_p50_ms)}<br>` +
        `TTFT p50 ${ms(best.ttft_p50_ms)} · ${num(best.streams)} streams · stalls ${pct(best.stall_share)}`;
      const left = Math.min(bx * r.width / W + 12, r.width - tip.offsetWidth - 4);
      tip.style.left = Math.max(0, left) + "px"; tip.style.top = "8px";
    });
    svg.addEventListener("mouseleave", () => { tip.hidden = true; cursor.setAttribute("opacity", 0); });
  }

  // ---------- wiring ----------
  function schedule() {
    clearInterval(state.timer);
    state.timer = setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
  }
  function init() {
    readURL();
    $("#range").value = state.since;
    $("#site").onchange = e => { state.site = e.target.value; state.where = {}; refresh(); };
    $("#range").onchange = e => { state.since = e.target.value; refresh(); };
    $("#refresh").onclick = () => refresh();
    $$("#tabs button").forEach(b => b.onclick = () => { state.by = b.dataset.by; refresh(); });
    $$("#breakdown th[data-sort]").forEach(th => th.onclick = () => {
      const k = th.dataset.sort;
      state.sort = { key: k, desc: state.sort.key === k ? !state.sort.desc : k !== "key" };
      renderTable();
    });
    $("#breakdown tbody").addEventListener("click", ev => {
      const tr = ev.target.closest("tr[data-key]");
      if (!tr || state.where[state.by] != null) return;
      state.where[state.by] = tr.dataset.key;
      refresh();
    });
    let rt = 0;
    addEventListener("resize", () => { clearTimeout(rt); rt = setTimeout(refresh, 200); });
    loadSites().then(refresh);
    schedule();
  }
  init();
})();
