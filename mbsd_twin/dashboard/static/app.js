// mbsd-twin live dashboard: polls /dashboard/api/data and draws canvas charts (no libraries).
"use strict";

let WINDOW_S = 20;            // seconds of rig time shown (the server's window_s once the config is in)
const POLL_MS = 300;
const COLORS = ["#1f77b4", "#e4572e", "#2e9e5b", "#9467bd", "#8c564b", "#17becf", "#bcbd22"];
const state = { cfg: null, cursor: 0, t0: null, cols: {}, buf: {}, health: null, alarms: [], alarmCounts: {},
  pose: null, lastRows: 0, lastData: 0, polls: 0, errors: 0, rows: 0, rate: null, prevRecv: null,
  nis: null, cusumThreshold: null, marks: {}, drawn: {}, axes: {}, resyncs: [], motionBounds: null, virtualPlotted: [] };
window.dashboard = state;      // read by tests and curious users

function wrap(a) { return Math.atan2(Math.sin(a), Math.cos(a)); }
function fmt(v, d = 3) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (typeof v !== "number") return String(v);
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(2) : v.toFixed(d);
}

function setupCanvas(cv) {
  const dpr = window.devicePixelRatio || 1;
  const w = cv.clientWidth, h = cv.clientHeight;
  if (cv.width !== Math.round(w * dpr) || cv.height !== Math.round(h * dpr)) {
    cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr);
  }
  const ctx = cv.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  return { ctx, w, h };
}

// The y range of everything drawn ([ymin, ymax], padded; null without data) and the newest time;
// ycap: the top at most (larger values leave the plot), yfloor: the bottom at least (NIS, CUSUM ≥ 0).
function extent(series, lines, bands, hbands, ycap, yfloor) {
  let xmax = -Infinity, ymin = Infinity, ymax = -Infinity;
  const take = (y) => { if (Number.isFinite(y)) { if (y < ymin) ymin = y; if (y > ymax) ymax = y; } };
  for (const s of series) for (let i = 0; i < s.x.length; i++) { if (s.x[i] > xmax) xmax = s.x[i]; take(s.y[i]); }
  for (const b of bands) for (let i = 0; i < b.x.length; i++) {
    if (Number.isFinite(b.lo[i]) && Number.isFinite(b.hi[i])) { take(b.lo[i]); take(b.hi[i]); }
  }
  for (const l of lines) take(l.y);
  for (const b of hbands) { take(b.lo); take(b.hi); }
  if (!Number.isFinite(xmax) || !Number.isFinite(ymin)) return null;
  const capped = Number.isFinite(ycap) && ymax > ycap;   // larger values leave the plot at the top
  if (capped) ymax = ycap;
  if (ymax - ymin < 1e-12) { ymax += 1; ymin -= 1; }
  const pad = 0.08 * (ymax - ymin);
  const floor = Number.isFinite(yfloor) && ymin - pad < yfloor ? yfloor : ymin - pad;
  return { xmax, ymin: floor, ymax: capped ? ymax : ymax + pad };
}

// The legend (one entry per series, wrapped onto as many rows as needed); the height it takes.
function legend(ctx, series, L, w) {
  let lx = L + 4, ly = 12;
  for (const s of series) {
    const width = ctx.measureText(s.label).width;
    if (lx > L + 4 && lx + width > w - 4) { lx = L + 4; ly += 13; }
    ctx.fillStyle = s.color; ctx.fillText(s.label, lx, ly); lx += width + 14;
  }
  return ly + 6;
}

function drawSeries(ctx, s, xmin, X, Y) {
  ctx.strokeStyle = s.color; ctx.lineWidth = 1.6; ctx.setLineDash(s.dash ? [5, 3] : []);
  ctx.beginPath();
  let pen = false, prev = null, drawn = 0;
  for (let i = 0; i < s.x.length; i++) {
    const x = s.x[i], y = s.y[i];
    if (x < xmin || !Number.isFinite(y)) { pen = false; continue; }
    const jump = s.wrap && prev !== null && Math.abs(y - prev) > Math.PI;
    if (!pen || jump) ctx.moveTo(X(x), Y(y)); else ctx.lineTo(X(x), Y(y));
    pen = true; prev = y; drawn++;
  }
  ctx.stroke(); ctx.setLineDash([]);
  return drawn;
}

// Grid lines and labels at round values (1, 2 or 5 × 10^k) of both axes; the unit above the y
// labels, opts.xlabel under the time labels. What was drawn is kept in state.axes[id] (for tests).
function drawAxes(ctx, r, X, Y, L, R, w, h, unit, xlabel) {
  ctx.strokeStyle = "#e5e7eb"; ctx.fillStyle = "#6b7280"; ctx.lineWidth = 1;
  const ys = roundTicks(r.ymin, r.ymax, 4), xs = roundTicks(r.xmin, r.xmax, 5);
  for (const y of ys.ticks) {
    ctx.beginPath(); ctx.moveTo(L, Y(y)); ctx.lineTo(w - R, Y(y)); ctx.stroke();
    ctx.fillText(tickText(y, ys.step), 2, Y(y) + 4);
  }
  const base = xlabel ? h - 18 : h - 6;
  for (const x of xs.ticks) ctx.fillText(`${tickText(x, xs.step)} s`, X(x) - 10, base);
  if (xlabel) { const tw = ctx.measureText(xlabel).width; ctx.fillText(xlabel, Math.max(L, (L + w - R - tw) / 2), h - 4); }
  if (unit) ctx.fillText(`[${unit}]`, 2, 11);
  return { yticks: ys.ticks, ystep: ys.step, xticks: xs.ticks, xstep: xs.step, ymin: r.ymin, ymax: r.ymax, unit, xlabel };
}

// The round step (1, 2 or 5 × 10^k, an exact decimal) nearest ``raw`` on a log scale.
function niceStep(raw) {
  const e = Math.floor(Math.log10(raw > 0 ? raw : 1));
  const steps = [1, 2, 5, 10].map((m) => Number(`${m}e${e}`));
  return steps.reduce((best, s) => (Math.abs(Math.log(s / raw)) < Math.abs(Math.log(best / raw)) ? s : best));
}

// The multiples of a round step inside [lo, hi], about ``n`` of them (each k·step, computed as such).
function roundTicks(lo, hi, n) {
  const step = niceStep((hi - lo) / n), ticks = [];
  for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + 1e-9 * step; k++) ticks.push(k * step);
  return { step, ticks };
}

// A tick value with the decimals its step needs (0.25 → "0.25" at step 0.05; 40 → "40" at step 10).
function tickText(v, step) {
  if (Math.abs(v) < step * 1e-9) return "0";
  const a = Math.abs(v), se = Math.floor(Math.log10(step) + 1e-9);
  if (a >= 1e6 || step < 1e-4) return v.toExponential(Math.max(0, Math.floor(Math.log10(a) + 1e-9) - se));
  return v.toFixed(Math.max(0, -se));
}

// series: [{label, color, x: [], y: [], dash, wrap}]; lines: [{y, label, color}];
// opts.bands: [{x: [], lo: [], hi: [], color}] (a filled band along x); opts.hbands: [{lo, hi, color}];
// opts.ycap: the top of the y axis at most (series clipped there); opts.yfloor: its bottom at least
// (quantities ≥ 0 start at 0); opts.xrange: [xmin, xmax] shown (default: the last WINDOW_S s of the
// data) with no live alarm or re-initialisation marks; opts.xlabel: a caption under the time axis
function drawChart(id, series, lines, unit, opts = {}) {
  const cv = document.getElementById(id);
  if (!cv) return;
  const { ctx, w, h } = setupCanvas(cv);
  const L = 56, R = 8, B = opts.xlabel ? 34 : 22, bands = opts.bands || [], hbands = opts.hbands || [];
  lines = lines.filter((l) => Number.isFinite(l.y));
  ctx.font = "11px system-ui, sans-serif";
  const r = extent(series, lines, bands, hbands, opts.ycap, opts.yfloor);
  state.drawn[id] = 0;
  if (!r) { ctx.fillStyle = "#6b7280"; ctx.fillText("waiting for data…", L, h / 2); return; }
  // the legend above the plot area, never over the data: the series, then the labelled lines (dashed)
  const T = legend(ctx, series.concat(lines.filter((l) => l.label).map((l) => ({ label: `╌ ${l.label}`, color: l.color }))), L, w);
  let xfirst = Infinity;
  for (const s of series) if (s.x.length) xfirst = Math.min(xfirst, s.x[0]);
  r.xmin = Math.max(r.xmax - WINDOW_S, Math.min(xfirst, r.xmax - 1));
  if (opts.xrange) [r.xmin, r.xmax] = opts.xrange;
  const X = (x) => L + (x - r.xmin) / (r.xmax - r.xmin) * (w - L - R);
  const Y = (y) => T + (r.ymax - y) / (r.ymax - r.ymin) * (h - T - B);
  state.axes[id] = drawAxes(ctx, r, X, Y, L, R, w, h, unit, opts.xlabel);
  for (const b of hbands) { ctx.fillStyle = b.color; ctx.fillRect(L, Y(b.hi), w - L - R, Y(b.lo) - Y(b.hi)); }
  for (const b of bands) fillBand(ctx, b, r.xmin, X, Y);
  if (opts.xrange) state.marks[id] = [];   // a stored range: no live alarm or re-initialisation marks
  else {
    drawAlarmMarks(id, ctx, X, r.xmin, r.xmax, T, h - B);
    drawResyncMarks(id, ctx, X, r.xmin, r.xmax, T, h - B);
  }
  for (const l of lines) {
    ctx.strokeStyle = l.color; ctx.setLineDash([6, 4]);
    ctx.beginPath(); ctx.moveTo(L, Y(l.y)); ctx.lineTo(w - R, Y(l.y)); ctx.stroke();
    ctx.setLineDash([]);
  }
  ctx.save(); ctx.beginPath(); ctx.rect(L, T, w - L - R, h - T - B); ctx.clip();
  for (const s of series) state.drawn[id] += drawSeries(ctx, s, r.xmin, X, Y);
  ctx.restore();
}

function fillBand(ctx, b, xmin, X, Y) {
  // one polygon per run of finite samples: upper edge forward, lower edge back
  ctx.fillStyle = b.color;
  let run = [];
  const flush = () => {
    if (run.length > 1) {
      ctx.beginPath();
      run.forEach((i, k) => (k ? ctx.lineTo(X(b.x[i]), Y(b.hi[i])) : ctx.moveTo(X(b.x[i]), Y(b.hi[i]))));
      for (let k = run.length - 1; k >= 0; k--) ctx.lineTo(X(b.x[run[k]]), Y(b.lo[run[k]]));
      ctx.closePath(); ctx.fill();
    }
    run = [];
  };
  for (let i = 0; i < b.x.length; i++) {
    if (b.x[i] >= xmin && Number.isFinite(b.lo[i]) && Number.isFinite(b.hi[i])) run.push(i); else flush();
  }
  flush();
}

function drawMechanism() {
  const cv = document.getElementById("mechanism");
  const p = state.pose, sk = state.cfg && state.cfg.sketch;
  if (!sk) return;
  const [x0, x1, y0, y1] = mechanismBounds(cv);   // the motion's bounding box; sets the panel's height
  const { ctx, w, h } = setupCanvas(cv);
  const views = [];
  if (p && p.sim) views.push({ v: p.sim, color: "#1f77b4", dash: false, fill: true });
  if (p && p.meas) views.push({ v: p.meas, color: "#e4572e", dash: true, fill: false });
  if (!views.length) views.push({ v: sk, color: "#9ca3af", dash: false, fill: true });
  const k = Math.min((w - 20) / (x1 - x0), (h - 20) / (y1 - y0));
  const ox = (w - k * (x1 + x0)) / 2, oy = (h + k * (y1 + y0)) / 2;
  const P = (q) => [ox + k * q[0], oy - k * q[1]];
  ctx.lineCap = "round"; ctx.lineJoin = "round";
  ctx.strokeStyle = "#9ca3af"; ctx.lineWidth = 4;
  for (const g of sk.guides) { ctx.beginPath(); ctx.moveTo(...P(g[0])); ctx.lineTo(...P(g[1])); ctx.stroke(); }
  ctx.fillStyle = "#374151";
  for (const q of sk.pivots) {
    const [x, y] = P(q); ctx.beginPath(); ctx.moveTo(x, y); ctx.lineTo(x - 8, y + 13); ctx.lineTo(x + 8, y + 13); ctx.fill();
  }
  for (const { v, color, dash, fill } of views) {
    ctx.setLineDash(dash ? [7, 5] : []); ctx.strokeStyle = color; ctx.lineWidth = dash ? 2 : 5;
    for (const b of v.bodies) {
      ctx.beginPath(); b.pts.forEach((q, i) => (i ? ctx.lineTo(...P(q)) : ctx.moveTo(...P(q))));
      if (b.pts.length > 2) ctx.closePath();
      if (fill && b.pts.length > 2) { ctx.fillStyle = color + "40"; ctx.fill(); }
      ctx.stroke();
    }
    ctx.lineWidth = dash ? 1 : 1.4;
    for (const sp of v.springs || []) {   // springs and dampers: polylines from the server's sketch
      for (const ln of sp.lines) { ctx.beginPath(); ln.forEach((q, i) => (i ? ctx.lineTo(...P(q)) : ctx.moveTo(...P(q)))); ctx.stroke(); }
    }
    ctx.setLineDash([]);
    for (const j of v.joints) {
      const [x, y] = P([j[1], j[2]]);
      ctx.beginPath(); ctx.arc(x, y, dash ? 3 : 4.5, 0, 2 * Math.PI);
      ctx.fillStyle = "#fff"; ctx.fill(); ctx.strokeStyle = color; ctx.lineWidth = 1.5; ctx.stroke();
    }
  }
  ctx.fillStyle = "#111827"; ctx.font = "11px system-ui, sans-serif";
  state.mechanismText = [];
  const named = views[0].v.bodies.concat((views[0].v.springs || []).map((sp) => ({ body: sp.name, label: sp.label })));
  for (const b of named) {
    if (!b.label) continue;
    const [x, y] = P(b.label);
    ctx.fillText(b.body, x + 6, y - 6); state.mechanismText.push(b.body);
  }
  ctx.fillStyle = "#374151"; ctx.font = "12px system-ui, sans-serif";
  const t = p && p.t !== undefined && state.t0 !== null ? `t = ${(p.t - state.t0).toFixed(2)} s` : "initial guess";
  ctx.fillText(t, 8, 16);
}

function column(name) { return state.buf[name] || []; }
function healthRows() {
  const hh = state.health, c = (hh && hh.counters) || {};
  const inv = c.invalid || {}, rs = c.resync || {};
  const invTotal = Object.values(inv).reduce((a, b) => a + b, 0);
  const lastR = state.buf["resid." + (state.cfg ? state.cfg.angle : "")] || [];
  const n = Math.min(lastR.length, 250);
  const rms = n ? Math.sqrt(lastR.slice(-n).reduce((a, b) => a + b * b, 0) / n) : null;
  return [
    ["connected to broker", hh ? (hh.connected ? "yes" : "no") : "–"],
    ["sensor messages / s", fmt(state.rate, 1)],
    ["messages received", c.received], ["batches solved", c.batches],
    ["lag [s]", fmt(hh && hh.lag_s)], ["queue depth", hh && hh.queue_depth], ["solver hold [samples]", hh && hh.hold],
    ["solver ms / batch p50", fmt(hh && hh.solver_ms_per_batch && hh.solver_ms_per_batch.p50, 2)],
    [`angle residual RMS (last ${n})`, fmt(rms, 5)],
    ["invalid messages", invTotal + (invTotal ? " (" + Object.entries(inv).map(([k, v]) => `${k} ${v}`).join(", ") + ")" : "")],
    ["gap / late / duplicate / reordered", [c.gap, c.late, c.duplicate, c.reordered].map((v) => v || 0).join(" / ")],
    ["re-syncs", Object.entries(rs).map(([k, v]) => `${k} ${v}`).join(", ") || "0"],
    ["dropped (overload)", c.dropped_overload], ["solver failures", c.solver_failure],
    ["alarms raised / active", `${state.alarmCounts.raised || 0} / ${state.active ? state.active.length : 0}`],
  ];
}

function render() {
  const cfg = state.cfg;
  if (!cfg) return;
  const t = column("t"), a = cfg.angle, s = cfg.speed, u = cfg.units || {};
  drawChart("chart-angle", [
    { label: `simulated ${a}`, color: COLORS[0], x: t, y: column("sim." + a).map(wrap), wrap: true },
    { label: `measured ${a}`, color: COLORS[1], x: t, y: column("meas." + a).map(wrap), wrap: true, dash: true }], [], u[a]);
  drawChart("chart-speed", [
    { label: `simulated ${s}`, color: COLORS[0], x: t, y: column("sim." + s) },
    { label: `measured ${s}`, color: COLORS[1], x: t, y: column("meas." + s), dash: true }], [], u[s]);
  for (const [id, ch] of [["chart-resid-angle", a], ["chart-resid-speed", s]]) {
    const lines = [];
    for (const al of cfg.alarms.filter((x) => x.source === "residual" && x.channel === ch)) {
      lines.push({ y: al.high, label: `${al.name} high ${al.high}: alarm after ≥ ${al.min_duration} s above`, color: "#c53030" },
        { y: -al.high, label: "", color: "#c53030" });
      lines.push({ y: al.low, label: `low ${al.low}: clears after ${al.min_duration} s below`, color: "#b7791f" },
        { y: -al.low, label: "", color: "#b7791f" });
    }
    drawChart(id, [{ label: `innovation ${ch} [${u[ch] || ""}] (measured − predicted)`, color: COLORS[2], x: t, y: column("resid." + ch) }], lines, u[ch]);
    document.getElementById(id.replace("chart-", "note-")).innerHTML = thresholdNote(ch);
  }
  const fch = Object.keys(cfg.compare).filter((c) => /\.f[xy]$/.test(cfg.compare[c]));
  const bearing = fch.flatMap((c, i) => [
    { label: `virtual ${cfg.compare[c]}`, color: COLORS[(2 * i) % 7], x: t, y: column("virt." + cfg.compare[c]) },
    { label: `measured ${c}`, color: COLORS[(2 * i + 1) % 7], x: t, y: column("meas." + c), dash: true }]);
  drawChart("chart-bearing", bearing, [], "N");
  const joints = [...new Set(Object.keys(state.cols).filter((c) => /^virt\..*\.fx$/.test(c)).map((c) => c.slice(5, -3)))];
  drawChart("chart-virtual", joints.map((j, i) => {
    const fx = column(`virt.${j}.fx`), fy = column(`virt.${j}.fy`);
    return { label: j, color: COLORS[i % 7], x: t, y: fx.map((v, k) => Math.hypot(v, fy[k])) };
  }), [], "N");
  renderFilter();
  renderVirtual();
  drawMechanism();
  document.querySelector("#health tbody").innerHTML = healthRows()
    .map(([k, v]) => `<tr><td>${k}</td><td>${v === undefined || v === null ? "–" : v}</td></tr>`).join("");
}

function renderAlarms() {
  const ul = document.getElementById("alarms");
  if (!state.alarms.length) { ul.innerHTML = `<li class="muted">none in the last ${WINDOW_S} s</li>`; return; }
  ul.innerHTML = state.alarms.slice().reverse().map((e) => {
    return `<li class="${e.event}">${alarmReason(e)}</li>`;
  }).join("");
}

function ingest(d) {
  // columns only grow (a key first published later): earlier rows read NaN
  const held = (state.buf.t || []).length;
  d.columns.forEach((c, i) => { if (!(c in state.cols)) { state.cols[c] = i; state.buf[c] = new Array(held).fill(NaN); } });
  if (d.t0 !== null) state.t0 = d.t0;
  for (const r of d.rows) for (const c in state.cols) {
    const v = r[state.cols[c]];
    state.buf[c].push(v === null || v === undefined ? NaN : c === "t" ? v - state.t0 : v);
  }
  const t = state.buf.t || [];
  let cut = 0;
  while (cut < t.length && t[cut] < t[t.length - 1] - WINDOW_S - 1) cut++;
  if (cut) for (const c in state.buf) state.buf[c].splice(0, cut);
  state.rows += d.rows.length; state.cursor = d.cursor;
  if (d.rows.length) state.lastData = Date.now();
  if (d.health) {
    const recv = d.health.counters && d.health.counters.received, now = Date.now();
    if (state.prevRecv && recv !== undefined && now > state.prevRecv[1] + 900) {
      state.rate = (recv - state.prevRecv[0]) / ((now - state.prevRecv[1]) / 1000);
      state.prevRecv = [recv, now];
    } else if (!state.prevRecv && recv !== undefined) state.prevRecv = [recv, now];
  }
  state.health = d.health; state.alarms = d.alarms; state.alarmCounts = d.alarm_counts;
  state.active = d.latest ? d.latest.alarms_active : [];
  if (d.pose) state.pose = d.pose;
  state.resyncs = d.resyncs || []; state.motionBounds = d.bounds; state.crossings = d.crossings || [];
  state.nis = d.nis; state.cusumThreshold = d.cusum_threshold;
}

async function poll() {
  try {
    const r = await fetch(`/dashboard/api/data?since=${state.cursor}`, { cache: "no-store" });
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    ingest(await r.json());
    state.polls++;
    const fresh = Date.now() - state.lastData < 3000;
    setStatus(fresh ? "ok" : "wait", fresh ? "live" : "no new data");
    render();
    renderAlarms();
  } catch (e) {
    state.errors++; state.lastError = String(e);
    setStatus("bad", "service unreachable");
  }
  document.getElementById("age").textContent = state.lastData ? `${state.rows} samples` : "";
  setTimeout(poll, POLL_MS);
}

function setStatus(cls, text) { const s = document.getElementById("status"); s.className = `pill ${cls}`; s.textContent = text; }

async function start() {
  for (;;) {
    try {
      const r = await fetch("/dashboard/api/config", { cache: "no-store" });
      state.cfg = await r.json();
      break;
    } catch (e) { setStatus("bad", "service unreachable"); await new Promise((ok) => setTimeout(ok, 1000)); }
  }
  const cfg = state.cfg;
  WINDOW_S = cfg.window_s;
  document.getElementById("window").textContent = WINDOW_S;
  setupFilterCharts();
  setupControls();
  setupHistory();
  for (const cv of document.querySelectorAll("canvas.chart")) hookTooltip(cv);
  document.getElementById("asset").textContent = cfg.base;
  document.getElementById("model").textContent = `model: ${cfg.model}`;
  document.getElementById("title-angle").textContent = `Angle ${cfg.angle} (${cfg.compare[cfg.angle]}): measured vs simulated`;
  document.getElementById("title-speed").textContent = `Speed ${cfg.speed} (${cfg.compare[cfg.speed]}): measured vs simulated`;
  document.getElementById("title-resid-angle").textContent = `Residual ${cfg.angle} with alarm thresholds`;
  document.getElementById("title-resid-speed").textContent = `Residual ${cfg.speed} with alarm thresholds`;
  window.addEventListener("resize", render);
  render();
  poll();
}

start();
