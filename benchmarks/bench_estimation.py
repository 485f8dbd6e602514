"""The twin's estimator on synthetic rig streams whose truth is known (mbsd_twin.rig.scenarios):
cost per sample, innovation RMS, angle error against the truth, mean NIS and its χ² 95 % band,
re-initialisations, change alarms (statistic, delay after the fault onset, estimated onset, size)
and the torque estimate's error, one JSON line per scenario (its cost: the whole twin core per
sample — filter, output rows, alarms, JSON); then the filter alone per sample on the slider crank
(Jacobians every 10 and 20 samples) and on a two-degree-of-freedom mechanism (double pendulum,
every sample and every 10).

    python benchmarks/bench_estimation.py [--duration 20] [--scenario healthy --scenario mass ...]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import mbsd_twin as mt
from mbsd_twin.estimation.ekf import FilterConfig, StateEstimator
from mbsd_twin.estimation.holds import interval_steps
from mbsd_twin.rig.scenarios import SCENARIOS, run, summary


def filter_cost(seconds: float, jacobian_every: int, pendulum: bool, prediction_step: float | None = None
                ) -> dict[str, float]:
    """Cost per sample of the filter alone (``StateEstimator.sample`` on prepared input steps —
    the input reconstruction is the twin core's, in the scenario figures: prediction, update and,
    every ``jacobian_every`` samples, the finite-difference Jacobians — on the compiled path one
    compiled call each), at 1 kHz: the slider crank with the twin's default state (θ, ω, torque bias,
    piston mass; θ, ω and the bearing forces measured, the torque sampled), or the chaotic double
    pendulum (two degrees of freedom, both angles measured with σ 1 mrad, no inputs). Best of three
    passes (the figure without the machine's other load). ``prediction_step``: the filter's fixed
    prediction step (0: DOP853 under error control; None: the twin's default, ``CoreConfig``'s)."""
    from mbsd_twin.twin.config.sections import CoreConfig
    from mbsd_twin.twin.tracking import EkfTracker

    step = CoreConfig().prediction_step if prediction_step is None else prediction_step

    n = int(seconds * 1000)
    if pendulum:
        mech = mt.load_mechanism("examples/mechanisms/double_pendulum.toml")
        coords = ("upper.theta", "lower.theta")
        est = StateEstimator(mt.Simulator(mech), FilterConfig(coords, {c: 1e-3 for c in coords}, accel_noise=0.05,
                                                              jacobian_every=jacobian_every, prediction_step=step))
        port = None
    else:
        cfg = CoreConfig(jacobian_every=jacobian_every, prediction_step=step)
        mech = mt.load_mechanism("examples/mechanisms/slider_crank.toml")
        est = EkfTracker(cfg, mech).est
        coords = ("crank.theta", "crank.omega", "main_bearing.fx", "main_bearing.fy")
        port = "motor_torque"
    truth = mt.Simulator(mech)
    rng = np.random.default_rng(0)
    tau = 1.5 + np.sin(np.arange(3 * n + 1) * 7e-3)
    rows = []
    for k in range(1, 3 * n + 1):
        if port:
            truth.set_input(port, 0.5 * (tau[k - 1] + tau[k]))
        truth.advance_to(k * 1e-3)
        rows.append({c: truth.get_output(c) + rng.normal(0.0, 1e-3) for c in coords})
    est.initialize(0.0, {}, {}, {port: tau[0]} if port else {})
    inputs = [{port: tau[k]} if port else {} for k in range(3 * n + 1)]  # the estimator's arguments,
    steps = [interval_steps((k - 1) * 1e-3, k * 1e-3, inputs[k - 1], inputs[k]) if port  # made by the
             else [(k * 1e-3, {})] for k in range(1, 3 * n + 1)]  # twin core (input reconstruction)
    best = np.inf
    for p in range(3):
        t0 = time.perf_counter()
        for k in range(p * n + 1, (p + 1) * n + 1):
            est.sample(steps[k - 1], inputs[k], rows[k - 1])
        best = min(best, (time.perf_counter() - t0) / n)
    return {"us_per_sample": round(1e6 * best, 1), "jacobian_every": jacobian_every, "prediction_step": step}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--scenario", action="append", choices=SCENARIOS)
    ap.add_argument("--no-multi-dof", action="store_true", help="skip the double-pendulum cost figure")
    ap.add_argument("--filter-only", action="store_true", help="only the filter-alone cost figures")
    ap.add_argument("--prediction-step", type=float, default=None,
                    help="the filter's fixed prediction step [s] (0: DOP853; default: the twin's)")
    args = ap.parse_args()
    for s in [] if args.filter_only else args.scenario or SCENARIOS:
        print(json.dumps(summary(run(s, args.duration)), default=str), flush=True)
    for every in (10, 20):
        print(json.dumps({"filter alone": "slider crank (theta, omega, torque bias, piston mass)",
                          **filter_cost(2.0, every, False, args.prediction_step)}), flush=True)
    if not args.no_multi_dof:
        for every in (1, 10):
            print(json.dumps({"filter alone": "double pendulum (2 DOF)",
                              **filter_cost(2.0, every, True, args.prediction_step)}), flush=True)


if __name__ == "__main__":
    main()
