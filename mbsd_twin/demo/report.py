"""The demo's report folder: plots, CSVs and ``summary.md`` (opening with what the twin found and
the anomalies it reported, :mod:`.findings`; those are marked on ``residuals.png``)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import write_atomic
from ..twin.config.sections import AlarmConfig
from ..viz.plotting import Table, axis_label, legend_outside, pyplot, read_csv
from .anomalies import LABELS, Anomaly, Evidence
from .findings import Findings, anomalies_markdown, find, found_markdown


@dataclass
class TwinRun:
    """What the live phase produced."""

    csv: Path
    health: dict[str, Any]
    manifest: dict[str, Any]
    alarm_counts: dict[str, int]
    alarms: Sequence[AlarmConfig]
    broker: str
    dashboard: str
    seconds: float
    compare: Mapping[str, str] = field(default_factory=dict)
    events: Mapping[str, Any] = field(default_factory=dict)  # the twin's messages (.timeline.Timeline.to_dict)
    augment: Sequence[str] = ()  # the unknowns the twin estimates
    service: Mapping[str, Any] = field(default_factory=dict)  # its service settings (quoted in explanations)


def _wrap(a: np.ndarray) -> np.ndarray:
    return np.arctan2(np.sin(a), np.cos(a))


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot().close(fig)
    return path


def plot_angle(t: np.ndarray, tab: Any, folder: Path, angle: str, speed: str) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(3, 1, figsize=(10, 8))
    ax[0].plot(t, tab[f"meas.{angle}"], label=f"measured {angle}", lw=1)
    ax[0].plot(t, tab[f"sim.{angle}"], "--", label=f"simulated {angle}", lw=1)
    ax[0].set_ylabel("crank angle [rad]")
    zoom = t >= t[-1] - 2.0
    for key, style in (("meas", "-"), ("sim", "--")):
        y = _wrap(tab[f"{key}.{angle}"][zoom])
        y[np.r_[False, np.abs(np.diff(y)) > np.pi]] = np.nan
        ax[1].plot(t[zoom], y, style, label=f"{'measured' if key == 'meas' else 'simulated'} (wrapped)")
    ax[1].set_ylabel("crank angle [rad], last 2 s")
    ax[2].plot(t, tab[f"meas.{speed}"], lw=0.8, label=f"measured {speed}")
    ax[2].plot(t, tab[f"sim.{speed}"], "--", lw=1, label=f"simulated {speed}")
    ax[2].set_ylabel("crank speed [rad/s]")
    ax[2].set_xlabel("rig time since start [s]")
    for a in ax:
        a.grid(True, alpha=0.3)
        legend_outside(a)
    fig.suptitle("Measured vs simulated crank angle and speed")
    return _save(fig, folder / "crank_angle.png")


MARKS = {"coalesced": "tab:red", "queue_full": "tab:purple", "lost": "tab:gray", "rejected": "tab:brown",
         "gap": "black", "hold": "gold"}  # span colours by anomaly kind


def mark_anomalies(ax: Any, found: Sequence[Anomaly], labelled: set[str]) -> None:
    """Shade the spans (output gaps, coarser holds), draw the re-initialisations as vertical lines
    and ring the residual spikes; each kind gets one legend entry (``labelled``: kinds already in
    the legend). Every span's ``gid`` is ``anomaly:<kind>``."""
    for a in found:
        label = a.label if a.kind not in labelled else None
        labelled.add(a.kind)
        if a.kind in MARKS:
            hold = a.kind == "hold"
            span = ax.axvspan(a.t0, a.t1, color=MARKS[a.kind], alpha=0.25 if hold else 0.35, lw=0, label=label,
                              zorder=0)
            span.set_gid(f"anomaly:{a.kind}")
        elif a.kind == "reinit":
            ax.axvline(a.t0, color="tab:green", ls="-.", lw=0.9, label=label, gid="anomaly:reinit")


def residual_figure(t: np.ndarray, tab: Table, alarms: Sequence[AlarmConfig], found: Sequence[Anomaly]) -> Any:
    """The residuals of every compared channel with the alarm thresholds and the anomalies marked
    (the figure, not saved)."""
    plt = pyplot()
    chans = [c[6:] for c in tab.columns if c.startswith("resid.")]
    fig, axes = plt.subplots(len(chans), 1, figsize=(10, 2.2 * len(chans) + 0.5), sharex=True, squeeze=False)
    labelled: set[str] = set()  # anomaly kinds in a legend already (the first axes')
    for ax, ch in zip(axes[:, 0], chans, strict=True):
        unit = tab.unit(f"resid.{ch}")
        ax.plot(t, tab[f"resid.{ch}"], lw=0.7, label=f"residual {ch} (measured − predicted)")
        for al in alarms:
            if al.source == "residual" and al.channel == ch:
                for sign in (1, -1):
                    ax.axhline(sign * al.high, color="crimson", ls="--", lw=1,
                               label=f"{al.name}: raise at |r| ≥ {al.high:g} {unit}" if sign > 0 else None)
                    ax.axhline(sign * al.low, color="orange", ls=":", lw=1,
                               label=f"clear at |r| ≤ {al.low:g} {unit}" if sign > 0 else None)
                peaks = [a for a in found if a.kind == "spike" and a.channel == ch]
                _ring_spikes(ax, t, tab[f"resid.{ch}"], peaks)
        mark_anomalies(ax, [a for a in found if a.kind != "spike"], labelled)
        ax.set_ylabel(axis_label(ch, unit))
        ax.grid(True, alpha=0.3)
        legend_outside(ax, fontsize=7)
    axes[-1, 0].set_xlabel("rig time since the stream's start [s]")
    fig.suptitle("Residuals (measured − predicted) with alarm thresholds and the twin's anomalies")
    return fig


def _ring_spikes(ax: Any, t: np.ndarray, r: np.ndarray, spikes: Sequence[Anomaly]) -> None:
    """A ring around each spike's largest residual."""
    pts = []
    for a in spikes:
        k = np.flatnonzero((t >= a.t0) & (t <= a.t1))
        if len(k):
            j = k[int(np.nanargmax(np.abs(r[k])))]
            pts.append((t[j], r[j]))
    if pts:
        x, y = zip(*pts, strict=True)
        ax.plot(x, y, "o", mfc="none", mec="crimson", ms=9, label=LABELS["spike"], gid="anomaly:spike")


def plot_residuals(t: np.ndarray, tab: Table, folder: Path, alarms: Sequence[AlarmConfig],
                   found: Sequence[Anomaly] = ()) -> Path:
    return _save(residual_figure(t, tab, alarms, found), folder / "residuals.png")


def plot_reactions(t: np.ndarray, tab: Any, folder: Path, compare: Mapping[str, str]) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for ch, port in compare.items():
        if port.endswith((".fx", ".fy")) and f"virt.{port}" in tab:
            ax[0].plot(t, tab[f"meas.{ch}"], lw=0.6, alpha=0.7, label=f"measured {ch}")
            ax[0].plot(t, tab[f"virt.{port}"], lw=1.2, label=f"virtual {port}")
    ax[0].set_ylabel("bearing force [N]")
    joints = sorted({c[5:-3] for c in tab.columns if c.startswith("virt.") and c.endswith(".fx")})
    for j in joints:
        ax[1].plot(t, np.hypot(tab[f"virt.{j}.fx"], tab[f"virt.{j}.fy"]), lw=1, label=f"|{j}|")
    ax[1].set_ylabel("virtual reaction magnitude [N]")
    ax[1].set_xlabel("rig time since start [s]")
    for a in ax:
        a.grid(True, alpha=0.3)
        legend_outside(a)
    fig.suptitle("Virtual bearing reactions (model) and the measured bearing force")
    return _save(fig, folder / "bearing_reactions.png")


def evidence(run: TwinRun, tab: Table) -> Evidence:
    return Evidence(run.events, run.manifest, tab, run.alarms, run.service)


def twin_plots(run: TwinRun, folder: Path, angle: str, speed: str
               ) -> tuple[list[Path], dict[str, Any], Findings | None]:
    """The three twin plots, the numbers of the summary and what the twin found."""
    tab = read_csv(run.csv)
    if len(tab) == 0:
        return [], {"samples": 0}, None
    ev = evidence(run, tab)
    found = find(ev, run.augment)
    t = tab["t"] - ev.epoch
    paths = [plot_angle(t, tab, folder, angle, speed), plot_residuals(t, tab, folder, run.alarms, found.anomalies),
             plot_reactions(t, tab, folder, run.compare)]
    stats = {"samples": len(tab), "span": float(t[-1]),
             "rms": {c[6:]: float(np.sqrt(np.nanmean(tab[c] ** 2))) for c in tab.columns if c.startswith("resid.")},
             "max": {c[6:]: float(np.nanmax(np.abs(tab[c]))) for c in tab.columns if c.startswith("resid.")}}
    return paths, stats, found


def fault_table(manifest: Mapping[str, Any], counters: Mapping[str, Any]) -> list[tuple[str, int, int]]:
    """(counter, injected by the rig, counted by the twin) for every fault kind."""
    exp = manifest.get("expected", {})
    rows = [(k, int(exp.get(k, 0)), int(counters.get(k, 0))) for k in ("gap", "late", "duplicate", "reordered")]
    reasons = sorted(set(exp.get("invalid", {})) | set(counters.get("invalid", {})))
    rows += [(f"invalid.{r}", int(exp.get("invalid", {}).get(r, 0)), int(counters.get("invalid", {}).get(r, 0)))
             for r in reasons]
    return rows


def _fmt(v: float) -> str:
    return "n/a" if not math.isfinite(v) else f"{v:.4g}"


def summary_markdown(run: TwinRun, stats: Mapping[str, Any], fmu: Mapping[str, Any] | None,
                     files: Sequence[Path], folder: Path, found: Findings | None = None) -> str:
    c = run.health.get("counters", {})
    lines = ["# mbsd-twin demo report", ""]
    if found is not None:
        lines += found_markdown(found) + anomalies_markdown(found)
    lines += ["## Run", "",
              f"- broker: {run.broker}", f"- dashboard (while running): {run.dashboard}",
              f"- live phase: {run.seconds:.1f} s wall; {stats.get('samples', 0)} samples over "
              f"{stats.get('span', 0.0):.1f} s of rig time",
              f"- rig: {run.manifest.get('sent', 0)} messages sent, hidden mismatch {run.manifest.get('mismatch')}, "
              f"noise {run.manifest.get('noise')}",
              f"- twin: {c.get('received', 0)} received, {c.get('batches', 0)} batches solved, solver "
              f"{run.health.get('solver_ms_per_batch', {}).get('p50', 0.0):.2f} ms/batch (p50), latency p99 "
              f"{run.health.get('latency_ms', {}).get('p99', 0.0):.1f} ms, dropped (overload) "
              f"{c.get('dropped_overload', 0)}",
              f"- re-syncs: {dict(c.get('resync', {}))}; alarms raised {run.alarm_counts.get('raised', 0)}, "
              f"cleared {run.alarm_counts.get('cleared', 0)}", "",
              "| residual | RMS | max abs |", "|---|---|---|"]
    lines += [f"| {k} | {_fmt(v)} | {_fmt(stats['max'][k])} |" for k, v in stats.get("rms", {}).items()]
    lines += ["", "| fault counter | injected by the rig | counted by the twin |", "|---|---|---|"]
    lines += [f"| {k} | {a} | {b} |" for k, a, b in fault_table(run.manifest, c)]
    lines += ["", "## FMU"]
    if fmu is None:
        lines.append("skipped (--no-fmu)")
    else:
        lines += [f"- built: {fmu['path']} ({fmu['bytes']} bytes) in {fmu['build_s']:.2f} s",
                  f"- checks (fmpy validate, fmutool -check): {'; '.join(fmu['problems']) or 'no problems'}",
                  f"- fmpy vs native over {fmu['stop']:g} s at {fmu['step']:g} s, input {fmu['input']}: "
                  f"{fmu['in_band']}/{fmu['outputs']} outputs in band, largest |FMU − native| "
                  f"{fmu['max_abs']:.3g} ({fmu['worst']}): **{'PASS' if fmu['ok'] else 'FAIL'}**"]
        if fmu.get("message"):
            lines.append(f"- error: {fmu['message']}")
    lines += ["", "## Files", ""] + [f"- {p.relative_to(folder)}" for p in files]
    return "\n".join(lines) + "\n"


def write_json(path: Path, obj: Any) -> Path:
    write_atomic(str(path), json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n")
    return path
