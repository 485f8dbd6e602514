"""Every shipped mechanism at 1 ms communication steps with default options (issue #16): backend,
wall time per simulated second, real-time factor, final constraint residual and — with
``--reference`` — the largest position error against a tight-tolerance run of the same mechanism
(rtol 1e-12, atol 1e-14, relative to the position's range of motion over the run).

Inputs stay at their start values (the drivers and loads of each file move it). Each mechanism runs
``--seconds`` of simulated time (default 2) or until ``--max-wall`` seconds of wall time have
passed (default 30; the figures then cover the part that ran, marked "partial").

    .venv/bin/python benchmarks/bench_mechanisms.py [--seconds 2] [--max-wall 30] [--reference] [--only NAME]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import mbsd_twin as mt

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "examples" / "mechanisms").glob("*.toml"))
STEP = 1e-3


def positions(sim: mt.Simulator, names: list[str]) -> np.ndarray:
    out = sim.outputs()
    return np.array([out[k] for k in names])


def run(mech: mt.Mechanism, seconds: float, max_wall: float, opts: mt.SolverOptions
        ) -> tuple[mt.Simulator, np.ndarray, float, float]:
    """(simulator, body positions x, y, θ at every step, simulated s, wall s of the stepping alone)."""
    sim = mt.Simulator(mech, options=opts)
    names = [k for k in sim.output_names() if k.rsplit(".", 1)[-1] in ("x", "y", "theta")
             and k.split(".", 1)[0] in sim.system.body_names]
    q, wall, k = [positions(sim, names)], 0.0, 0
    while k * STEP < seconds - 1e-12 and wall < max_wall:
        k += 1
        t0 = time.perf_counter()
        sim.advance_to(k * STEP)
        wall += time.perf_counter() - t0
        q.append(positions(sim, names))
    return sim, np.array(q), k * STEP, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--max-wall", type=float, default=30.0)
    ap.add_argument("--reference", action="store_true", help="also the error against a tight-tolerance run")
    ap.add_argument("--only", default=None, help="one mechanism (file stem)")
    args = ap.parse_args()
    print(f"{'mechanism':26s} {'backend':8s} {'sim s':>6s} {'wall s/sim s':>13s} {'RTF':>9s} {'residual':>9s}"
          + (f" {'pos. error':>10s}" if args.reference else ""), flush=True)
    for path in SHIPPED:
        if args.only and path.stem != args.only:
            continue
        mech = mt.load_mechanism(path)
        sim, q, sim_s, wall = run(mech, args.seconds, args.max_wall, mt.SolverOptions())
        residual = sim.outputs()["constraints.position_residual"]
        line = (f"{path.stem:26s} {sim.backend:8s} {sim_s:6.2f} {wall / sim_s:13.4g} {sim_s / wall:9.1f} "
                f"{residual:9.1e}")
        if args.reference:
            tight = mt.SolverOptions(rtol=1e-12, atol=1e-14)
            _, q_ref, ref_s, _ = run(mech, sim_s, 20 * args.max_wall, tight)
            span = np.maximum(np.ptp(q_ref, axis=0), 1e-3)  # range of motion (1 mm / 1 mrad at least)
            m = min(len(q), len(q_ref))
            line += f" {np.max(np.abs(q[:m] - q_ref[:m]) / span):10.1e}"
        print(line + ("  partial" if sim_s < args.seconds - 1e-9 else ""), flush=True)


if __name__ == "__main__":
    main()
