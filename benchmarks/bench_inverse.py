"""Inverse-dynamics sweep speed: slider crank, 3,600 positions (position, velocity and acceleration
analysis and the multiplier solve at each). Target: >= 100,000 positions/s on a 2-core machine.

Run: python benchmarks/bench_inverse.py [--repeat N]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import mbsd_twin as mt

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--points", type=int, default=3600)
    args = ap.parse_args()
    mech = mt.load_mechanism(ROOT / "examples/mechanisms/slider_crank_driven.toml")
    system = mt.compile_mechanism(mech)
    t = np.linspace(0.0, 1.0, args.points, endpoint=False)
    mt.inverse_dynamics(system, t)  # warm-up
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        res = mt.inverse_dynamics(system, t)
        times.append(time.perf_counter() - t0)
    best, median = min(times), float(np.median(times))
    th = res["crank.theta"]
    x_exact = 0.1 * np.cos(th) + np.sqrt(0.3**2 - (0.1 * np.sin(th)) ** 2)
    print(f"slider-crank inverse dynamics, {args.points} positions, {args.repeat} runs")
    print(f"  best   {best * 1e3:8.2f} ms  -> {args.points / best:12,.0f} positions/s")
    print(f"  median {median * 1e3:8.2f} ms  -> {args.points / median:12,.0f} positions/s")
    print(f"  piston.x max error vs closed form: {np.abs(res['piston.x'] - x_exact).max():.2e} m")
    print("  target: >= 100,000 positions/s")


if __name__ == "__main__":
    main()
