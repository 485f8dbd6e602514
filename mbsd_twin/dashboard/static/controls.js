// mbsd-twin live dashboard: every virtual sensor, re-initialisation marks, the alarm thresholds'
// minimum duration explained, the mechanism panel's size, and the operator controls (reset,
// set_param) — shown only when the twin's [commands] enabled offers them; a command goes to the twin
// over MQTT as the user typed in (the server relays it: mbsd_twin/dashboard/commands.py). Loaded
// after estimator.js, before app.js; uses app.js's globals (state, COLORS, column, drawChart, fmt).
"use strict";

// Virtual sensors grouped per element and unit: "crank_pin [N]" holds crank_pin.fx and crank_pin.fy.
function virtualGroups() {
  const groups = {}, u = state.cfg.units || {};
  for (const c of Object.keys(state.cols)) {
    if (!c.startsWith("virt.")) continue;
    const name = c.slice(5), stem = name.includes(".") ? name.slice(0, name.lastIndexOf(".")) : name;
    const unit = u[name] || u[stem] || "";
    (groups[`${stem} [${unit}]`] = groups[`${stem} [${unit}]`] || { unit, names: [] }).names.push(name);
  }
  return groups;
}

function renderVirtual() {
  const box = document.getElementById("virtual-cards"), t = column("t"), groups = virtualGroups();
  state.virtualPlotted = [];
  Object.entries(groups).forEach(([key, g], i) => {
    const id = "chart-virt-" + key.replace(/[^A-Za-z0-9_]/g, "_");
    if (!document.getElementById(id)) {
      const sec = document.createElement("section");
      sec.className = "card virtual";
      sec.innerHTML = `<h2>Virtual sensor ${key}</h2><canvas id="${id}" class="chart"></canvas>`;
      box.appendChild(sec);
      hookTooltip(sec.querySelector("canvas"));
    }
    drawChart(id, g.names.map((n, k) => ({ label: `${n} [${g.unit}]`, color: COLORS[(i + k) % 7], x: t, y: column("virt." + n) })), [], g.unit);
    state.virtualPlotted.push(...g.names);
  });
}

// Re-initialisations of the filter (or re-syncs of the open-loop model) on a time axis, with their reason.
function drawResyncMarks(id, ctx, X, xmin, xmax, top, bottom) {
  for (const e of state.resyncs || []) {
    if (state.t0 === null) break;
    const x = e.t - state.t0, px = X(Math.max(x, xmin));  // (the start precedes the first row drawn)
    if (x < xmax - WINDOW_S || x > xmax) continue;
    ctx.strokeStyle = "#6b21a8"; ctx.lineWidth = 1.5; ctx.setLineDash([8, 3, 2, 3]);
    ctx.beginPath(); ctx.moveTo(px, top); ctx.lineTo(px, bottom); ctx.stroke(); ctx.setLineDash([]);
    ctx.fillStyle = "#6b21a8"; ctx.fillText(`R ${e.reason}`, px + 2, top + 10);
    state.marks[id].push({ px, text: `re-initialised at t = ${x.toFixed(3)} s: ${resyncWhy(e.reason)}` });
  }
}

function resyncWhy(reason) {
  const why = { start: "start (first batch)", divergence: "divergence (mean NIS over the window above its χ² bound)",
    gap: "gap longer than max_gap", rig_restart: "new rig session", solver_failure: "solver failure",
    bounds: "residual beyond resync_bounds" };
  return why[reason] || reason;
}

// Why a residual above its drawn threshold raised no alarm: its runs at or above `high` (found by the
// server in every output sample, mbsd_twin/dashboard/crossings.py) shorter than min_duration.
function thresholdNote(ch) {
  const al = state.cfg.alarms.filter((a) => a.source === "residual" && a.channel === ch);
  if (!al.length) return "no threshold alarm on this channel";
  return al.map((a) => {
    const runs = (state.crossings || []).filter((r) => r.alarm === a.name);
    const raised = state.alarms.filter((e) => e.alarm === a.name && e.event === "raised").length;
    const longest = runs.length ? Math.max(...runs.map((r) => r.duration)) : 0;
    const short = runs.filter((r) => !r.long_enough).length;
    return `${a.name}: raised when |${ch}| ≥ ${a.high} for at least min_duration = ${a.min_duration} s, cleared when ≤ ${a.low} as long; ` +
      `in the window ${runs.length} crossing(s) of ${a.high}, the longest ${fmt(longest, 3)} s; ` +
      `${short} shorter than ${a.min_duration} s → no alarm for those; ${raised} raised`;
  }).join("<br>");
}

// The mechanism panel: the bounding box of the motion (full-turn sweep ∪ every pose drawn), its aspect kept.
function mechanismBounds(cv) {
  const a = state.cfg.bounds, b = state.motionBounds;
  const box = b ? [Math.min(a[0], b[0]), Math.max(a[1], b[1]), Math.min(a[2], b[2]), Math.max(a[3], b[3])] : a;
  const want = Math.round(Math.min(600, Math.max(140, cv.clientWidth * (box[3] - box[2]) / (box[1] - box[0]))));
  if (Math.abs(cv.clientHeight - want) > 1) cv.style.height = `${want}px`;
  state.mechanismBox = box;
  return box;
}

function setupControls() {
  const cfg = state.cfg, card = document.getElementById("controls");
  card.hidden = !cfg.controls.length;
  if (!cfg.controls.length) return;
  document.getElementById("ctl-reset").hidden = !cfg.controls.includes("reset");
  const sp = document.getElementById("ctl-set-param");
  sp.hidden = !cfg.controls.includes("set_param");
  const sel = document.getElementById("ctl-param");
  sel.innerHTML = cfg.parameters.map((p) => `<option value="${p.name}">${p.name} [${p.unit}]${p.value === null ? "" : ` = ${fmt(p.value, 4)}`}</option>`).join("");
  document.getElementById("ctl-reset-btn").addEventListener("click", () => sendCommand("reset", {}));
  document.getElementById("ctl-set-btn").addEventListener("click", () =>
    sendCommand("set_param", { name: sel.value, value: Number(document.getElementById("ctl-value").value) }));
}

async function sendCommand(name, args) {
  const out = document.getElementById("ctl-reply");
  out.textContent = `${name}: sent…`;
  const body = { username: document.getElementById("ctl-user").value, password: document.getElementById("ctl-pass").value, args };
  try {
    const r = await fetch(`/dashboard/api/cmd/${name}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    const rep = await r.json();
    state.lastReply = rep;
    out.className = rep.ok ? "cleared" : "raised";
    out.textContent = `${rep.cmd}: ${rep.ok ? "done" : "refused"} — ${rep.detail}`;
  } catch (e) { out.className = "raised"; out.textContent = `${name}: ${e}`; }
}
