"""Cold and warm start (issue #16): how long until the first Simulator of the bundled slider crank
is ready, and the first FMU instance of it has stepped, in a fresh process — cold with an empty
numba cache (``NUMBA_CACHE_DIR`` set to a new folder: what a fresh install sees), warm with that
cache filled. Also the twin estimator's kernels (``estimation.warm.load_kernels``), cold after the
engine's. Each figure is one fresh process; the compile notice the engine logs is shown.

    .venv/bin/python benchmarks/bench_cold_start.py [--skip-fmu]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIMULATOR = """
import time; t0 = time.perf_counter()
from mbsd_twin import Simulator, load_mechanism
from mbsd_twin.model.loader import bundled_slider_crank
sim = Simulator(load_mechanism(bundled_slider_crank()))
sim.set_input("motor_torque", 1.0); sim.advance_to(0.01); sim.outputs()
print(f"{time.perf_counter() - t0:.2f}")
"""

ESTIMATOR = """
import time
from mbsd_twin.estimation.warm import load_kernels
t0 = time.perf_counter(); load_kernels(); print(f"{time.perf_counter() - t0:.2f}")
"""

FMU = """
import sys, time; t0 = time.perf_counter()
from fmpy import extract, read_model_description
from fmpy.fmi2 import FMU2Slave
path = sys.argv[1]; md = read_model_description(path); d = extract(path)
s = FMU2Slave(guid=md.guid, unzipDirectory=d, modelIdentifier=md.coSimulation.modelIdentifier, instanceName="c")
s.instantiate(); s.setupExperiment(startTime=0.0); s.enterInitializationMode(); s.exitInitializationMode()
s.doStep(0.0, 1e-3)
print(f"{time.perf_counter() - t0:.2f}")
"""


def run(code: str, cache: Path, *args: str) -> tuple[float, str]:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    p = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True)
    notice = " | ".join(line for line in p.stderr.splitlines() if "mbsd-twin:" in line)
    return float(p.stdout.strip().splitlines()[-1]), notice


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip-fmu", action="store_true")
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        rows = [("Simulator, cold", SIMULATOR, tmp / "a", ()), ("Simulator, warm", SIMULATOR, tmp / "a", ()),
                ("estimator kernels, cold", ESTIMATOR, tmp / "a", ()),
                ("estimator kernels, warm", ESTIMATOR, tmp / "a", ())]
        if not args.skip_fmu:
            from mbsd_twin.fmi.build import build_fmu

            fmu = str(build_fmu(None, tmp / "SliderCrank.fmu"))
            rows += [("FMU instantiate + first step, cold", FMU, tmp / "b", (fmu,)),
                     ("FMU instantiate + first step, warm", FMU, tmp / "b", (fmu,))]
        for name, code, cache, extra in rows:
            t0 = time.perf_counter()
            took, notice = run(code, cache, *extra)
            print(f"{name}: {took:.1f} s in the process ({time.perf_counter() - t0:.1f} s with interpreter start)"
                  + (f"; logged: {notice}" if notice else ""), flush=True)


if __name__ == "__main__":
    main()
