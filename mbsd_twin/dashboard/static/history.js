// mbsd-twin dashboard: any stored time range of the history store (/dashboard/api/history), each
// channel downsampled by the server to at most max_points buckets with their min/max envelope.
"use strict";

const hist = { channels: [], span: null, data: null, loads: 0, error: null, ms: null };  // loads: requests done
window.dashboard.history = hist;

function histNote(text, bad) {
  const n = document.getElementById("hist-note");
  n.textContent = text; n.style.color = bad ? "#c53030" : "";
}

async function setupHistory() {
  if (!state.cfg.history) return;
  document.getElementById("card-history").hidden = false;
  try {
    const r = await fetch("/dashboard/api/history", { cache: "no-store" });
    const d = await r.json();
    if (!r.ok) throw new Error(d.error || `HTTP ${r.status}`);
    hist.channels = d.channels; hist.span = d.span;
    document.getElementById("hist-points").textContent = d.max_points;
    const want = `state.${state.cfg.angle}`;
    document.getElementById("hist-channel").innerHTML = d.channels
      .map((c) => `<option${c === want ? " selected" : ""}>${c}</option>`).join("");
    if (d.span) {
      document.getElementById("hist-from").value = d.span[0];
      document.getElementById("hist-to").value = d.span[1];
    }
    histNote(d.span ? `stored: rig time ${d.span[0]} to ${d.span[1]} s` : "nothing stored yet");
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

function drawHistory() {
  const d = hist.data;
  if (!d) return;
  const series = [], bands = [];
  const nums = (a) => a.map((v) => (v === null ? NaN : v));
  Object.entries(d.channels).forEach(([name, c], i) => {
    const x = c.t.map((t) => t - d.from), color = COLORS[i % COLORS.length];
    series.push({ label: `${name} (${c.n} samples)`, color, x, y: nums(c.value) });
    if (c.n > c.t.length) bands.push({ x, lo: nums(c.min), hi: nums(c.max), color: color + "40" });
  });
  drawChart("chart-history", series, [], "", { bands, xrange: [0, d.to - d.from] });
}
