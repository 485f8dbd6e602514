"""The demo's report folder: plots, CSVs and ``summary.md``."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..twin.config import AlarmConfig
from ..viz.plotting import pyplot, read_csv


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
        a.legend(fontsize=8, loc="upper right")
    fig.suptitle("Measured vs simulated crank angle and speed")
    return _save(fig, folder / "crank_angle.png")


def plot_residuals(t: np.ndarray, tab: Any, folder: Path, alarms: Sequence[AlarmConfig]) -> Path:
    plt = pyplot()
    chans = [c[6:] for c in tab.columns if c.startswith("resid.")]
    fig, axes = plt.subplots(len(chans), 1, figsize=(10, 2.2 * len(chans) + 0.5), sharex=True, squeeze=False)
    for ax, ch in zip(axes[:, 0], chans, strict=True):
        ax.plot(t, tab[f"resid.{ch}"], lw=0.7, label=f"residual {ch} (measured − simulated)")
        for al in alarms:
            if al.source == "residual" and al.channel == ch:
                for sign in (1, -1):
                    ax.axhline(sign * al.high, color="crimson", ls="--", lw=1,
                               label=f"{al.name}: raise at |r| ≥ {al.high:g}" if sign > 0 else None)
                    ax.axhline(sign * al.low, color="orange", ls=":", lw=1,
                               label=f"clear at |r| ≤ {al.low:g}" if sign > 0 else None)
        ax.set_ylabel(ch)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("rig time since start [s]")
    fig.suptitle("Residuals with alarm thresholds")
    return _save(fig, folder / "residuals.png")


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
        a.legend(fontsize=8, loc="upper right", ncol=2)
    fig.suptitle("Virtual bearing reactions (model) and the measured bearing force")
    return _save(fig, folder / "bearing_reactions.png")


def twin_plots(run: TwinRun, folder: Path, angle: str, speed: str) -> tuple[list[Path], dict[str, Any]]:
    """The three twin plots and the numbers of the summary."""
    tab = read_csv(run.csv)
    if len(tab) == 0:
        return [], {"samples": 0}
    t = tab["t"] - tab["t"][0]
    paths = [plot_angle(t, tab, folder, angle, speed), plot_residuals(t, tab, folder, run.alarms),
             plot_reactions(t, tab, folder, run.compare)]
    stats = {"samples": len(tab), "span": float(t[-1]),
             "rms": {c[6:]: float(np.sqrt(np.nanmean(tab[c] ** 2))) for c in tab.columns if c.startswith("resid.")},
             "max": {c[6:]: float(np.nanmax(np.abs(tab[c]))) for c in tab.columns if c.startswith("resid.")}}
    return paths, stats


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
                     files: Sequence[Path], folder: Path) -> str:
    c = run.health.get("counters", {})
    lines = ["# mbsd-twin demo report", "",
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
    path.write_text(json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return path
