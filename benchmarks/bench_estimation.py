"""The twin's estimator on synthetic rig streams whose truth is known (mbsd_twin.twin.scenarios):
cost per sample, innovation RMS, angle error against the truth, mean NIS and its χ² 95 % band,
re-initialisations, change alarms (statistic, delay after the fault onset, estimated onset, size)
and the torque estimate's error, one JSON line per scenario; then the filter's cost per sample on a
two-degree-of-freedom mechanism (double pendulum) with Jacobians every sample and every 10.

    python benchmarks/bench_estimation.py [--duration 20] [--scenario healthy --scenario mass ...]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import mbsd_twin as mt
from mbsd_twin.estimation.ekf import FilterConfig, StateEstimator
from mbsd_twin.twin.scenarios import SCENARIOS, run, summary


def double_pendulum(seconds: float, jacobian_every: int) -> dict[str, float]:
    """Cost per sample of the filter alone on a two-degree-of-freedom mechanism (the chaotic
    double pendulum, both angles measured with σ 1 mrad at 1 kHz)."""
    mech = mt.load_mechanism("examples/mechanisms/double_pendulum.toml")
    truth, n, coords = mt.Simulator(mech), int(seconds * 1000), ("upper.theta", "lower.theta")
    ys = []
    for k in range(1, n + 1):
        truth.advance_to(k * 1e-3)
        ys.append({c: truth.get_output(c) for c in coords})
    rng = np.random.default_rng(0)
    est = StateEstimator(mt.Simulator(mech), FilterConfig(coords, {c: 1e-3 for c in coords}, accel_noise=0.05,
                                                          jacobian_every=jacobian_every))
    est.initialize(0.0, {}, {}, {})
    t0 = time.perf_counter()
    for k, y in enumerate(ys, start=1):
        est.predict([(k * 1e-3, {})], {})
        est.update({c: v + rng.normal(0.0, 1e-3) for c, v in y.items()})
    return {"us_per_sample": 1e6 * (time.perf_counter() - t0) / n, "jacobian_every": jacobian_every}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--scenario", action="append", choices=SCENARIOS)
    ap.add_argument("--no-multi-dof", action="store_true", help="skip the double-pendulum cost figure")
    args = ap.parse_args()
    for s in args.scenario or SCENARIOS:
        print(json.dumps(summary(run(s, args.duration)), default=str), flush=True)
    if not args.no_multi_dof:
        for every in (1, 10):
            print(json.dumps({"scenario": "double_pendulum (2 DOF)", **double_pendulum(5.0, every)}), flush=True)


if __name__ == "__main__":
    main()
