// mbsd-twin live dashboard, the estimator's part: torque estimate ±σ, NIS against its χ² band (the
// band comes from the server), augmented unknowns ±σ, CUSUMs with their threshold, and the alarm
// events marked on every chart's time axis with their reasons (hover tooltip). Loaded before app.js;
// uses its globals (state, COLORS, column, drawChart, fmt) at call time.
"use strict";

// Why an alarm event fired, in words (the tooltip and the alarm list).
function alarmReason(e) {
  const t = (x) => (state.t0 !== null ? (x - state.t0).toFixed(2) : fmt(x));
  if (e.source === "change") {
    if (e.event !== "raised") return `#${e.seq} ${e.alarm} cleared at t = ${t(e.t)} s (no crossing for 2 s)`;
    const u = unitOf(e.channel);
    return `#${e.seq} ${e.alarm} raised at t = ${t(e.t)} s: change in ${e.kind} ${e.channel}, onset t = ${t(e.onset)} s, ` +
      `size ${fmt(e.size, 4)} ${u} (${e.direction}), CUSUM ${fmt(e.statistic, 2)} σ > threshold ${fmt(e.threshold, 2)} σ`;
  }
  const cfgA = ((state.cfg && state.cfg.alarms) || []).find((a) => a.name === e.alarm);
  const dur = cfgA ? ` for ≥ min_duration ${cfgA.min_duration} s` : "";
  return `#${e.seq} ${e.alarm} ${e.event} at t = ${t(e.t)} s: ${e.source} ${e.channel} = ${fmt(e.value, 4)} ${unitOf(e.channel)}` +
    `, threshold ${e.threshold} (|value| ${e.event === "raised" ? "≥" : "≤"} threshold${dur})`;
}

function unitOf(name) {
  const u = (state.cfg && state.cfg.units) || {}, aug = ((state.cfg && state.cfg.augment) || []).find((a) => a.name === name);
  return aug ? aug.unit : (u[name] || "");
}

// Alarm events on the time axis: raised red, cleared green (dashed); a change alarm shades onset → raise.
function drawAlarmMarks(id, ctx, X, xmin, xmax, top, bottom) {
  const marks = [];
  let lastLabel = -Infinity;
  for (const e of state.alarms) {
    if (state.t0 === null) break;
    const x = e.t - state.t0;
    if (x < xmin || x > xmax) continue;
    const raised = e.event === "raised", color = raised ? "#c53030" : "#2e9e5b";
    if (raised && e.source === "change" && Number.isFinite(e.onset)) {
      const x0 = Math.max(xmin, e.onset - state.t0);
      ctx.fillStyle = "#c5303018"; ctx.fillRect(X(x0), top, X(x) - X(x0), bottom - top);
    }
    ctx.strokeStyle = color; ctx.lineWidth = 1.5; ctx.setLineDash(raised ? [] : [3, 3]);
    ctx.beginPath(); ctx.moveTo(X(x), top); ctx.lineTo(X(x), bottom); ctx.stroke(); ctx.setLineDash([]);
    if (X(x) - lastLabel > 24) { ctx.fillStyle = color; ctx.fillText(`#${e.seq}`, X(x) + 2, bottom - 3); lastLabel = X(x); }
    marks.push({ px: X(x), text: alarmReason(e) });
  }
  state.marks[id] = marks;
}

// What the estimator knows: torque estimate ±σ, NIS against its χ² band, augmented unknowns ±σ, CUSUMs.
function renderFilter() {
  const cfg = state.cfg, t = column("t");
  if (!cfg.nis_dof) return;
  const port = Object.values(cfg.inputs).find((p) => ("virt." + p + ".estimate") in state.cols);
  if (port) {
    const est = column(`virt.${port}.estimate`), sd = column(`virt.${port}.estimate_sd`), u = unitOf(port);
    drawChart("chart-torque", [
      { label: `measured ${port} [${u}] (CCW +)`, color: COLORS[1], x: t, y: column("virt." + port), dash: true },
      { label: `estimate (measured + bias) ±1σ [${u}] (CCW +)`, color: COLORS[0], x: t, y: est }], [], u,
    { bands: [{ x: t, lo: est.map((v, i) => v - sd[i]), hi: est.map((v, i) => v + sd[i]), color: "#1f77b433" }] });
  }
  const nis = state.nis, band = nis && nis.band;
  const mean = band ? [{ y: nis.mean, label: `mean over ${nis.window_s} s = ${fmt(nis.mean, 2)}`, color: "#9467bd" }] : [];
  // axis top: the 99.9 % point of one sample's χ² (or the mean, if higher); rarer values leave the plot
  const cap = band ? Math.max(nis.sample_q999, 1.2 * nis.mean, band[1]) : undefined;
  const clip = band ? `; axis cut at ${fmt(cap, 1)}` : "";
  drawChart("chart-nis", [{ label: `NIS [1] (≥ 0; expect ${cfg.nis_dof}${clip})`,
    color: COLORS[5], x: t, y: column("est.nis") }], mean, "1",
  { hbands: band ? [{ lo: band[0], hi: band[1], color: "#2e9e5b30" }] : [], ycap: cap, yfloor: 0 });
  document.getElementById("nis-note").innerHTML = nisNote(nis);
  cfg.augment.forEach((a, i) => {
    const v = column(`est.${a.name}`), sd = column(`est.${a.name}.sd`);
    drawChart(`chart-aug-${i}`, [{ label: `${a.name} estimate [${a.unit}]${a.name.endsWith(".bias") ? " (acting − measured)" : ""}, band ±1σ`,
      color: COLORS[3], x: t, y: v }], [], a.unit,
    { bands: [{ x: t, lo: v.map((x, k) => x - sd[k]), hi: v.map((x, k) => x + sd[k]), color: "#9467bd33" }] });
  });
  const stats = Object.keys(state.cols).filter((c) => c.startsWith("est.cusum."));
  const h = state.cusumThreshold;
  drawChart("chart-cusum", stats.map((c, i) => ({ label: `${c.slice(10)} [σ] (≥ 0)`, color: COLORS[i % 7], x: t, y: column(c) })),
    h !== null && h !== undefined ? [{ y: h, label: `threshold h = ${fmt(h, 2)} σ`, color: "#c53030" }] : [], "σ",
    { yfloor: 0 });
}

// The verdict on the window's mean NIS: inside its χ² band (consistent), above (the filter is
// over-confident or the model is wrong), below (the noise settings are too pessimistic).
function nisNote(nis) {
  if (!nis || !nis.band) return "waiting for NIS samples…";
  const [lo, hi] = nis.band, m = nis.mean;
  const verdict = m > hi ? `<b class="raised">above the band</b>: innovations larger than the filter expects`
    : m < lo ? `<b class="raised">below the band</b>: innovations smaller than the filter expects`
      : `<b class="cleared">inside the band</b>: consistent`;
  return `mean NIS over the last ${nis.window_s} s = ${fmt(m, 3)} (n = ${nis.n} samples, ${nis.dof} dof each; ` +
    `largest ${fmt(nis.max, 1)}, one sample exceeds ${fmt(nis.sample_q999, 1)} with probability 0.1 %); ` +
    `χ² ${Math.round(100 * nis.level)} % band of that mean: <span class="band">${fmt(lo, 3)} – ${fmt(hi, 3)}</span> → ${verdict}`;
}

function setupFilterCharts() {
  const cfg = state.cfg, show = cfg.nis_dof > 0;
  for (const el of document.querySelectorAll(".filter")) el.hidden = !show;
  if (!show) return;
  const anchor = document.getElementById("card-cusum");
  cfg.augment.forEach((a, i) => {
    const sec = document.createElement("section");
    sec.className = "card filter";
    sec.innerHTML = `<h2>Augmented unknown ${a.name} [${a.unit}]: estimate ±1σ</h2><canvas id="chart-aug-${i}" class="chart"></canvas>`;
    anchor.before(sec);
  });
}

function hookTooltip(cv) {
  if (cv.dataset.tip) return;
  cv.dataset.tip = "1";
  cv.addEventListener("mousemove", (ev) => tooltip(cv, ev));
  cv.addEventListener("mouseleave", () => { document.getElementById("tip").hidden = true; });
}

function tooltip(cv, ev) {
  const tip = document.getElementById("tip"), r = cv.getBoundingClientRect(), px = ev.clientX - r.left;
  const near = (state.marks[cv.id] || []).filter((m) => Math.abs(m.px - px) < 6);
  tip.hidden = !near.length;
  if (!near.length) return;
  tip.textContent = near.map((m) => m.text).join("\n");
  const right = ev.clientX > window.innerWidth / 2;   // open towards the middle of the page
  tip.style.left = right ? "" : `${ev.pageX + 12}px`;
  tip.style.right = right ? `${document.documentElement.clientWidth - ev.pageX + 12}px` : "";
  tip.style.top = `${ev.pageY + 12}px`;
}

