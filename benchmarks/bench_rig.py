"""The synthetic rig's cost and accuracy: rig seconds computed per wall second (real-time factor) at
1 and 10 kHz with 4 (default) and 2 sub-intervals per sample, with and without model faults, and
the crank angle's difference from a run with 64 sub-intervals per sample for 1, 2 and 4.

    .venv/bin/python benchmarks/bench_rig.py [--seconds 4]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from mbsd_twin.model.loader import load_mechanism
from mbsd_twin.rig.faults import RigFault
from mbsd_twin.rig.synthetic import RigConfig, Trajectory

MECH = str(Path(__file__).resolve().parents[1] / "examples" / "mechanisms" / "slider_crank.toml")
FAULTS = (RigFault("mass", 1.0, "piston.mass", 1.2, scale=True), RigFault("friction", 1.5, "main_bearing", 0.3),
          RigFault("load_pulses", 2.0, "piston", 20.0), RigFault("encoder_offset", 2.5, "theta", 0.02))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    mech = load_mechanism(MECH)
    Trajectory(mech, RigConfig()).truth(0, 10)  # compile / load the kernels
    runs = ((1000.0, (), 4), (1000.0, FAULTS, 4), (1000.0, (), 2), (10000.0, (), 4), (10000.0, (), 2))
    for rate, faults, sub in runs:
        traj = Trajectory(mech, RigConfig(rate=rate, faults=faults, substeps=sub))
        t = time.perf_counter()
        traj.samples(0, int(args.seconds * rate))
        wall = time.perf_counter() - t
        print(f"rate {rate:6.0f} Hz, {sub} sub-intervals, {len(faults)} faults: {args.seconds:.0f} s of rig in "
              f"{wall:.2f} s wall "
              f"(real-time factor {args.seconds / wall:.1f})")
    n = int(min(args.seconds, 2.0) * 1000) + 1
    ref = Trajectory(mech, RigConfig(mismatch={}, substeps=64)).truth(0, n)["theta"]
    for sub in (1, 2, 4):
        theta = Trajectory(mech, RigConfig(mismatch={}, substeps=sub)).truth(0, n)["theta"]
        print(f"{sub} sub-intervals per sample: max |θ − θ(64 sub-intervals)| over {n - 1} ms "
              f"{np.abs(theta - ref).max():.1e} rad")


if __name__ == "__main__":
    main()
