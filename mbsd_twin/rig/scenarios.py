"""Rig scenarios with known truth for the twin's estimator (no broker: TwinCore directly); used by
benchmarks/bench_estimation.py, the tests and the figures of docs/twin-estimation.md.

Scenarios: ``healthy`` (the model's own parameters, sensor noise only), ``lossy`` (the same with 7 %
of the batches lost), and one per injected fault (``mass``: +20 % piston mass, ``friction``: +0.3 N·m
bearing friction torque, ``offset``: a 0.02 rad encoder step, ``pulses``: unmeasured 20 N piston load
pulses, ``stuck``: the speed sensor frozen) and one slow fault (``wear``: a bearing friction torque
growing linearly from 0 to 0.3 N·m over 10 s from the onset, for the drift test). Prints, per
scenario: cost per sample, crank-angle innovation RMS after 1 s, angle-estimate error against the
truth (RMS, max), mean NIS and its χ² 95 % band, re-initialisations after the start, the change
and drift alarms (statistic, onset, delay after the fault) and the torque
estimate's error against the applied torque."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import chi2

from ..model.loader import bundled_slider_crank, load_mechanism
from ..twin.config.sections import CoreConfig
from ..twin.core import TwinCore
from ..twin.protocol import SensorBatch, encode, parse_sensor
from .faults import RigFault, fault_input
from .synthetic import RigConfig, Trajectory, stream

ONSET = 5.0  # s: fault onset in the fault scenarios
FAULTS = {
    "mass": RigFault("mass", ONSET, "piston.mass", 1.2, scale=True),
    "friction": RigFault("friction", ONSET, "main_bearing", 0.3),
    "offset": RigFault("encoder_offset", ONSET, "theta", 0.02),
    "pulses": RigFault("load_pulses", ONSET, "piston", 20.0, width=0.03, period=0.5),
    "stuck": RigFault("stuck", ONSET, "omega"),
}
SLOW_FAULTS = {"wear": RigFault("friction", ONSET, "main_bearing", 0.3, ramp=10.0)}  # drift alarms
ALL_FAULTS = FAULTS | SLOW_FAULTS
SCENARIOS = ("healthy", "lossy", *ALL_FAULTS)


@dataclass
class Result:
    scenario: str
    us_per_sample: float
    dof: int = 0  # measured channels per sample
    faults: tuple[RigFault, ...] = ()
    rows: dict[str, list[float]] = field(default_factory=dict)  # t, theta (twin), innovation, nis, torque est
    alarms: list[dict[str, Any]] = field(default_factory=list)
    resyncs: dict[str, int] = field(default_factory=dict)
    truth: dict[str, np.ndarray] = field(default_factory=dict)


def run(scenario: str, duration: float, cfg: CoreConfig | None = None, seed: int = 0, hold: int = 1) -> Result:
    """Stream ``duration`` s of the scenario through a TwinCore at solver ``hold`` (samples per
    correction, as the service's coarser levels); the published rows, alarms and the truth."""
    mech = load_mechanism(bundled_slider_crank())
    faults = (ALL_FAULTS[scenario],) if scenario in ALL_FAULTS else ()
    traj = Trajectory(mech, RigConfig(mismatch={}, faults=faults, seed=seed))
    msgs = stream(traj, duration=duration)
    keep = np.random.default_rng(seed + 1).random(len(msgs)) >= (0.07 if scenario == "lossy" else 0.0)
    keep[:2] = True
    batches = [parse_sensor(encode(m).encode(), "sc-01", 1 << 22) for m, k in zip(msgs, keep, strict=True) if k]
    core = TwinCore(cfg or CoreConfig(), mech)
    res = Result(scenario, 0.0, faults=faults)
    cols: dict[str, list[float]] = {k: [] for k in ("t", "theta", "innov", "nis", "tau_est", "tau")}
    res.dof = sum(1 for c in (cfg or CoreConfig()).compare if c in (cfg or CoreConfig()).noise)
    t0 = time.perf_counter()
    for b in batches:
        assert isinstance(b, SensorBatch)
        for o in core.step(b, hold):
            p = json.loads(o.payload)
            leaf = o.topic.rsplit("/", 1)[1]
            if leaf == "alarms":
                res.alarms.append(p)
            elif leaf == "state":
                cols["t"] += [p["t0"] + i * p["dt"] for i in range(p["n"])]
                cols["theta"] += p["ch"]["theta"]
            elif leaf == "residuals":
                cols["innov"] += [np.nan if x is None else x for x in p["ch"].get("theta", [None] * p["n"])]
            elif leaf == "estimates":
                for key, vals in p["ch"].items():
                    cols.setdefault(key, []).extend(np.nan if x is None else x for x in vals)
            elif leaf == "virtual":
                cols["tau_est"] += p["ch"].get("motor_torque.estimate", [np.nan] * p["n"])
                cols["tau"] += p["ch"].get("motor_torque", [np.nan] * p["n"])
    res.us_per_sample = 1e6 * (time.perf_counter() - t0) / sum(b.n for b in batches if isinstance(b, SensorBatch))
    res.rows = cols
    res.resyncs = dict(core.stats["resync"])
    n = int(duration * traj.cfg.rate)
    res.truth = traj.truth(0, n)
    return res


def summary(res: Result) -> dict[str, Any]:
    r = {k: np.asarray(v, dtype=float) for k, v in res.rows.items()}
    k = np.rint(r["t"] * 1000).astype(int)
    after = (r["t"] >= 1.0) & ((r["t"] < ONSET) if res.scenario in ALL_FAULTS else True)
    err = r["theta"][after] - res.truth["theta"][k[after]]
    nis = r["nis"][after & np.isfinite(r["nis"])]
    lo, hi, lo3, hi3 = chi2.ppf([0.025, 0.975, 0.0005, 0.9995], res.dof * len(nis)) / max(len(nis), 1)
    torques = [fault_input(i) for i, f in enumerate(res.faults) if f.kind == "friction"]  # N·m on the crank
    applied = res.truth["motor_torque"][k] + sum(res.truth[c][k] for c in torques)
    tau_err = (r["tau_est"] - applied)[after]
    return {"scenario": res.scenario, "us_per_sample": round(res.us_per_sample, 1),
            "innov_rms": float(np.sqrt(np.nanmean(r["innov"][after] ** 2))),
            "err_rms": float(np.sqrt(np.mean(err ** 2))), "err_max": float(np.abs(err).max()),
            "nis_mean": float(nis.mean()), "nis_band": (float(lo), float(hi)),
            "nis_band_999": (float(lo3), float(hi3)),
            "resyncs_after_start": {k: v for k, v in res.resyncs.items() if k != "start"},
            "tau_est_rms": float(np.sqrt(np.nanmean(tau_err ** 2))),
            "alarms": [(a["channel"], round(a["t"] - ONSET, 3), round(a.get("onset", np.nan) - ONSET, 3),
                        a.get("size")) for a in res.alarms if a["event"] == "raised"]}
