"""The twin's Kalman filter on the synthetic slider-crank rig (mbsd_twin.rig.scenarios: the model's
own parameters, 1 kHz, 1 mrad encoder noise, default settings), healthy and with each injected fault
at 5 s. The figures of docs/twin-estimation.md.

Writes twin_estimation_healthy.png (crank-angle error of the measurement and of the estimate against
the truth with the estimate's ±σ band; the crank-angle innovation; the running mean of NIS with its
χ² 95 % band) and twin_estimation_<fault>.png for mass, friction, offset, pulses and stuck (the CUSUM
statistics the fault acts on against the threshold h, the fault onset and the first alarm; the
estimated motor-torque bias against the crank torque the fault is equivalent to).

Independent checks (tests/test_examples_scripts.py): h solves Siegmund's ARL for one week at 1 kHz;
the innovation cannot be smaller than the 1 mrad sensor noise; NIS has a χ² band.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from _common import figure, output_folder, report, save
from scipy.stats import chi2

import mbsd_twin as mt
from mbsd_twin.model.loader import bundled_slider_crank
from mbsd_twin.rig.scenarios import FAULTS, ONSET, run, summary
from mbsd_twin.rig.synthetic import RigConfig, Trajectory, stream
from mbsd_twin.twin.config.sections import CoreConfig

DURATION = 8.0  # s per run: the fault at 5 s, then time to detect and settle
WINDOW = 0.5  # s: running mean of NIS (the default divergence_window)
ZOOM = 1.0  # s: the angle and innovation panels show the first second (the start included)
STATS = {"mass": ("f_x", "f_y", "omega"), "friction": ("motor_torque.bias", "omega", "f_x"),
         "offset": ("theta",), "pulses": ("f_x", "f_y", "omega"), "stuck": ("omega",)}
MRAD = 1e3


def _cols(res: Any) -> dict[str, np.ndarray]:
    r = {k: np.asarray(v, dtype=float) for k, v in res.rows.items()}
    assert all(len(v) == len(r["t"]) for k, v in r.items() if k not in ("tau", "tau_est")), "ragged rows"
    r["k"] = np.rint(r["t"] * 1000).astype(int)
    return r


def healthy_figure(out: Path, res: Any, measured: np.ndarray) -> None:
    r, truth = _cols(res), res.truth
    t, k = r["t"], r["k"]
    fig, ax = figure(3, 1, (9, 7.5))
    near = t <= ZOOM
    t, k = t[near], k[near]
    a = ax[0][0]
    a.plot(t, MRAD * (measured[k] - truth["theta"][k]), ".", ms=1, color="0.7", label="measured − true")
    a.plot(t, MRAD * (r["theta"][near] - truth["theta"][k]), lw=0.8, label="estimate − true")
    sd = MRAD * r["crank.theta.sd"][near]
    a.fill_between(t, -sd, sd, alpha=0.3, label="±σ of the estimate")
    a.set(ylim=(-4, 4), ylabel="crank angle error [mrad]", title="healthy rig: crank angle against the truth")
    a.legend(loc="upper right", ncol=3, fontsize=8)
    a = ax[1][0]
    a.plot(t, MRAD * r["innov"][near], lw=0.5)
    a.axhline(1.0, ls="--", color="k", lw=0.8, label="±1 mrad encoder σ")
    a.axhline(-1.0, ls="--", color="k", lw=0.8)
    a.set(xlabel="rig time [s]", ylabel="θ innovation [mrad]\n(measured − predicted)")
    a.legend(loc="upper right", fontsize=8)
    a = ax[2][0]
    t = r["t"]
    n = int(round(WINDOW * 1000))
    nis = np.nan_to_num(r["nis"], nan=0.0)
    run_mean = np.convolve(nis, np.ones(n) / n, mode="valid")
    lo, hi = chi2.ppf([0.025, 0.975], res.dof * n) / n
    a.plot(t[n - 1::10], run_mean[::10], lw=0.8, label=f"mean NIS over {WINDOW} s (every 10th sample)")
    a.axhspan(lo, hi, alpha=0.2, color="g", label=f"χ² 95 % band ({res.dof} channels × {n} samples)")
    a.axhline(res.dof, ls=":", color="k", lw=0.8)
    a.set(xlabel="rig time [s]", ylabel="mean NIS [-]")
    a.legend(loc="upper right", fontsize=8)
    save(fig, out, "twin_estimation_healthy.png")


def equivalent_torque(fault: str, truth: dict[str, np.ndarray], mech: mt.Mechanism) -> np.ndarray:
    """The crank torque [N·m, CCW positive] that does the fault's work on the model: its bias truth.
    Virtual work: a piston force F along x acts on the crank as F·dx/dθ = F·vx/ω."""
    w = truth["crank.omega"]
    lever = np.divide(truth["piston.vx"], w, out=np.zeros_like(w), where=w != 0.0)
    if fault == "friction":
        return truth["_rig_fault_0"]
    if fault == "pulses":
        return truth["_rig_fault_0"] * lever
    if fault == "mass":  # the extra 20 % piston mass needs −Δm·ax more force than the model
        return -0.2 * mech.body("piston").mass * truth["piston.ax"] * lever * (truth["t"] >= ONSET)
    return np.zeros_like(truth["t"])  # sensor faults: no torque


def _reinit(res: Any) -> int:
    return sum(v for k, v in res.resyncs.items() if k != "start")


def _estimate_panel(a: Any, est: tuple[np.ndarray, np.ndarray, np.ndarray], truth: tuple[np.ndarray, np.ndarray],
                    labels: tuple[str, str, str, str]) -> None:
    """An estimate with its ±σ band against the truth: ``est`` (t, value, σ), ``truth`` (t, value),
    ``labels`` (truth, estimate, y axis, title)."""
    (t, v, sd), (tt, tv) = est, truth
    a.plot(tt, tv, color="k", lw=0.8, label=labels[0])
    a.plot(t, v, lw=0.8, label=labels[1])
    a.fill_between(t, v - sd, v + sd, alpha=0.3, label="±σ")
    a.axvline(ONSET, color="k", ls=":")
    a.set(xlim=(ONSET - 1.0, DURATION), xlabel="rig time [s]", ylabel=labels[2], title=labels[3])
    a.legend(loc="upper left", fontsize=8)


def _bias_panel(a: Any, fault: str, r: dict[str, np.ndarray], truth: dict[str, np.ndarray],
                mech: mt.Mechanism) -> None:
    _estimate_panel(a, (r["t"], r["motor_torque.bias"], r["motor_torque.bias.sd"]),
                    (truth["t"], equivalent_torque(fault, truth, mech)),
                    ("true equivalent torque", "estimated motor_torque.bias", "torque on the crank [N·m, CCW +]",
                     "torque bias estimate vs the fault"))


def _mass_panel(a: Any, r: dict[str, np.ndarray], truth: dict[str, np.ndarray]) -> None:
    """The piston-mass estimate (augmented by default) against the rig's true mass."""
    _estimate_panel(a, (r["t"], r["piston.mass"], r["piston.mass.sd"]), (truth["t"], truth["param:piston.mass"]),
                    ("true piston mass", "estimated piston.mass", "piston mass [kg]",
                     "piston-mass estimate vs the fault (+20 %)"))


def fault_figure(out: Path, fault: str, res: Any, mech: mt.Mechanism, h: float) -> float:
    r, truth = _cols(res), res.truth
    t = r["t"]
    raised = [a for a in res.alarms if a["event"] == "raised"]
    first = raised[0] if raised else None
    fig, ax = figure(1, 2, (11, 4))
    a = ax[0][0]
    for name in dict.fromkeys([*STATS[fault], *(x["channel"] for x in raised)]):
        if f"cusum.{name}" in r:
            a.plot(t, r[f"cusum.{name}"], lw=1, label=f"cusum.{name}")
    a.axhline(h, color="r", ls="--", lw=1, label=f"threshold h = {h:.2f}")
    a.axvline(ONSET, color="k", ls=":", label=f"fault onset {ONSET:g} s")
    if first:
        a.plot(first["t"], first["statistic"], "rv", ms=9,
               label=f"alarm {first['channel']} at +{first['t'] - ONSET:.3f} s")
    a.set(xlim=(ONSET - 0.5, ONSET + 1.0), ylim=(0, 2.0 * h), xlabel="rig time [s]",
          ylabel="CUSUM statistic [σ units]",
          title=f"{fault}: change statistics\n(filter re-initialised {_reinit(res)}× after the onset)")
    a.legend(loc="upper right", fontsize=8)
    if fault == "mass":
        _mass_panel(ax[0][1], r, truth)
    else:
        _bias_panel(ax[0][1], fault, r, truth, mech)
    save(fig, out, f"twin_estimation_{fault}.png")
    return float(first["t"] - ONSET) if first else float("inf")


def main(out: Path) -> dict[str, float]:
    from mbsd_twin.estimation.change import threshold

    mech = mt.load_mechanism(bundled_slider_crank())
    cfg = CoreConfig()
    h = threshold(cfg.change_mtbfa, 1000.0, cfg.change_shift)
    res = run("healthy", DURATION, cfg)
    msgs = stream(Trajectory(mech, RigConfig(mismatch={}, seed=0)), duration=DURATION)
    measured = np.concatenate([m["ch"]["theta"] for m in msgs])
    healthy_figure(out, res, measured)
    s = summary(res)
    numbers = {"threshold_h": h, "k": 0.5 * cfg.change_shift, "innov_rms": s["innov_rms"], "err_rms": s["err_rms"],
               "err_max": s["err_max"], "nis_mean": s["nis_mean"], "nis_samples": float(np.isfinite(
                   np.asarray(res.rows["nis"], dtype=float)[np.asarray(res.rows["t"]) >= 1.0]).sum()),
               "healthy_alarms": float(len(s["alarms"]))}
    for fault in FAULTS:
        fres = run(fault, DURATION, cfg)
        numbers[f"{fault}_delay"] = fault_figure(out, fault, fres, mech, h)
        early = [a for a in fres.alarms if a["event"] == "raised" and a["t"] < ONSET]
        numbers[f"{fault}_early_alarms"] = float(len(early))
        numbers[f"{fault}_reinit"] = float(_reinit(fres))
    return report(numbers)


if __name__ == "__main__":
    main(output_folder())
