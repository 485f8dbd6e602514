"""Speed of the slider-crank FMU under fmpy: real-time factor of ``fmpy.simulate_fmu`` at 1 ms
communication steps (real-time factor = simulated time / wall-clock time; > 1 is faster than real
time), next to the native ``Simulator`` stepped through the same points (the FMU's overhead is the
difference).

Run: python benchmarks/bench_fmu.py [--stop-time 10] [--step 0.001]

The FMU is built into a temporary folder; fmpy runs in this process, which ends with ``os._exit``
(PythonFMU 0.7.0 can abort a process at interpreter exit, see fmu/README.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stop-time", type=float, default=10.0, help="simulated time [s] (default 10)")
    p.add_argument("--step", type=float, default=1e-3, help="communication step [s] (default 0.001)")
    p.add_argument("--no-native", action="store_true", help="skip the native reference run")
    args = p.parse_args()

    from mbsd_twin.fmi.build import build_fmu
    from mbsd_twin.fmi.importers import output_names, run_fmpy
    from mbsd_twin.fmi.inputs import communication_points, parse_profile
    from mbsd_twin.fmi.native import run_native
    from mbsd_twin.fmi.validation import fmu_mechanism

    inputs = {"motor_torque": parse_profile("pwc:2:1:-1:2:3"), "piston_force": parse_profile("0")}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        fmu = build_fmu(None, Path(tmp) / "SliderCrank.fmu")
        print(f"build: {time.perf_counter() - t0:.2f} s -> {fmu.name}")
        t0 = time.perf_counter()
        res = run_fmpy(fmu, 0.0, args.stop_time, args.step, inputs)
        wall = time.perf_counter() - t0
        n = len(res["time"]) - 1
        print(f"fmpy.simulate_fmu: {args.stop_time:g} s simulated at {args.step:g} s steps ({n} steps, "
              f"{len(res) - 1} outputs) in {wall:.2f} s wall: real-time factor {args.stop_time / wall:.3g} "
              f"({1e3 * wall / n:.2f} ms per step)")
        if not args.no_native:
            t0 = time.perf_counter()
            run_native(fmu_mechanism(fmu), communication_points(0.0, args.stop_time, args.step), inputs,
                       output_names(fmu))
            native = time.perf_counter() - t0
            print(f"native Simulator, same points and outputs: {native:.2f} s wall: real-time factor "
                  f"{args.stop_time / native:.3g}; FMU overhead {1e3 * (wall - native) / n:.3f} ms per step")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
