// mbsd-twin dashboard: any stored time range of the history store (/dashboard/api/history), each
// channel downsampled by the server to at most max_points buckets with their min/max envelope; one
// chart per unit (kg and rad never share an axis), times shown in UTC (ISO 8601) where they are
// Unix times, as the range boxes take them.
"use strict";

const hist = { channels: [], units: {}, span: null, data: null, loads: 0, error: null, ms: null, charts: [], drawn: 0 };
window.dashboard.history = hist;   // loads: requests done; charts: [{id, unit, channels}] drawn
const UNIX_MIN = 1e8;              // a rig time beyond this is a Unix time (after 1973)

function histNote(text, bad) {
  const n = document.getElementById("hist-note");
  n.textContent = text; n.style.color = bad ? "#c53030" : "";
}

// A rig time as the range boxes show it: ISO 8601 UTC to the millisecond (rounded down for a
// start, up for an end, so the range keeps every stored sample), or seconds when not a Unix time.
function timeText(t, up) {
  if (!(Math.abs(t) >= UNIX_MIN)) return String(t);
  let ms = up ? Math.ceil(t * 1000) : Math.floor(t * 1000);
  if (up && ms / 1000 < t) ms += 1;          // t * 1000 rounded the other way
  if (!up && ms / 1000 > t) ms -= 1;
  return new Date(ms).toISOString();
}

async function setupHistory() {
  if (!state.cfg.history) return;
  document.getElementById("card-history").hidden = false;
  try {
    const r = await fetch("/dashboard/api/history", { cache: "no-store" });
    const d = await r.json();
    if (!r.ok) throw new Error(d.error || `HTTP ${r.status}`);
    hist.channels = d.channels; hist.span = d.span; hist.units = d.units || {};
    document.getElementById("hist-points").textContent = d.max_points;
    const want = `state.${state.cfg.angle}`;
    document.getElementById("hist-channel").innerHTML = d.channels
      .map((c) => `<option value="${c}"${c === want ? " selected" : ""}>${c}${hist.units[c] ? ` [${hist.units[c]}]` : ""}</option>`).join("");
    if (d.span) {
      document.getElementById("hist-from").value = timeText(d.span[0], false);
      document.getElementById("hist-to").value = timeText(d.span[1], true);
    }
    histNote(d.span ? `stored: ${timeText(d.span[0], false)} to ${timeText(d.span[1], true)}` : "nothing stored yet");
  } catch (e) { hist.error = String(e); histNote(`history: ${e}`, true); }
  document.getElementById("hist-form").addEventListener("submit", (ev) => { ev.preventDefault(); loadHistory(); });
  window.addEventListener("resize", drawHistory);
}

async function loadHistory() {
  const from = document.getElementById("hist-from").value.trim(), to = document.getElementById("hist-to").value.trim();
  const chans = [...document.getElementById("hist-channel").selectedOptions].map((o) => o.value);
  const q = new URLSearchParams({ from, to, channel: chans.join(",") });
  const t = performance.now();
  try {
    const r = await fetch(`/dashboard/api/history?${q}`, { cache: "no-store" });
    const d = await r.json();
    if (!r.ok) throw new Error(d.error || `HTTP ${r.status}`);
    hist.data = d; hist.error = null; hist.ms = performance.now() - t;
    const n = Object.values(d.channels).map((c) => c.n).reduce((a, b) => a + b, 0);
    const pts = Object.values(d.channels).map((c) => c.t.length).reduce((a, b) => a + b, 0);
    histNote(`${n} stored samples as ${pts} points in ${hist.ms.toFixed(0)} ms`);
  } catch (e) { hist.error = String(e); histNote(String(e), true); }
  hist.loads++;
  drawHistory();
}

// The canvas of the k-th unit's chart (the first is in the page; more are added below it).
function historyCanvas(k) {
  const id = k ? `chart-history-${k}` : "chart-history";
  if (!document.getElementById(id)) {
    const cv = document.createElement("canvas");
    cv.id = id; cv.className = "chart tall";
    document.getElementById("card-history").appendChild(cv);
  }
  return id;
}

function drawHistory() {
  const d = hist.data;
  if (!d) return;
  const groups = {};
  const nums = (a) => a.map((v) => (v === null ? NaN : v));
  Object.keys(d.channels).forEach((name) => { const u = hist.units[name] || ""; (groups[u] = groups[u] || []).push(name); });
  const since = Math.abs(d.from) >= UNIX_MIN ? `seconds since ${timeText(d.from, false).replace("T", " ").replace("Z", " UTC")}`
    : `seconds since rig time ${d.from} s`;
  hist.charts = []; hist.drawn = 0;
  Object.entries(groups).forEach(([unit, names], k) => {
    const id = historyCanvas(k), series = [], bands = [];
    names.forEach((name) => {
      const c = d.channels[name], i = Object.keys(d.channels).indexOf(name), color = COLORS[i % COLORS.length];
      const x = c.t.map((t) => t - d.from);
      series.push({ label: `${name} [${unit || "unit unknown"}] (${c.n} samples)`, color, x, y: nums(c.value) });
      if (c.n > c.t.length) bands.push({ x, lo: nums(c.min), hi: nums(c.max), color: color + "40" });
    });
    drawChart(id, series, [], unit, { bands, xrange: [0, d.to - d.from], xlabel: since });
    hist.charts.push({ id, unit, channels: names });
    hist.drawn += state.drawn[id];
  });
  for (let k = hist.charts.length; document.getElementById(`chart-history-${k}`); k++) {
    document.getElementById(`chart-history-${k}`).remove();
  }
}
