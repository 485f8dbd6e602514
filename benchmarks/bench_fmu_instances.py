"""Several instances of the host-independent FMU in one host (issue #17 item 4): each instance has
its own worker process, so instances stepped from separate host threads run in parallel. Builds the
slider-crank FMU (FMI 2.0, ``--host-independent``), then for k = 1 … ``--max-instances`` steps k
instances, each from its own thread in this process (fmpy's FMU2Slave; ctypes releases the GIL
during the FMI calls), through ``--steps`` communication steps of 1 ms with a torque input, and
prints the wall time, the aggregate throughput (instance-steps per second) and the speed-up over one
instance. On a 2-core machine the ideal for k = 2 is 2× (host threads and workers share the
cores); more instances than cores can only share them.

    .venv/bin/python benchmarks/bench_fmu_instances.py [--steps 5000] [--max-instances 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def _steps(slave: Any, vr_in: int, vr_out: list[int], n: int) -> None:
    for k in range(n):
        slave.setReal([vr_in], [2.0])
        slave.doStep(k * 1e-3, 1e-3)
        slave.getReal(vr_out)


def run(fmu: Path, k: int, n: int) -> float:
    """Wall time [s] of k instances stepping n steps each, concurrently from k threads."""
    from fmpy import extract, read_model_description
    from fmpy.fmi2 import FMU2Slave

    md = read_model_description(str(fmu))
    vr = {v.name: v.valueReference for v in md.modelVariables}
    unzipped = extract(str(fmu))
    slaves = []
    for i in range(k):
        s = FMU2Slave(guid=md.guid, unzipDirectory=unzipped, modelIdentifier=md.coSimulation.modelIdentifier,
                      instanceName=f"i{i}")
        s.instantiate()
        s.setupExperiment(startTime=0.0)
        s.enterInitializationMode()
        s.exitInitializationMode()
        slaves.append(s)
    outs = [vr["crank.theta"], vr["crank.omega"]]
    threads = [threading.Thread(target=_steps, args=(s, vr["motor_torque"], outs, n)) for s in slaves]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    for s in slaves:
        s.terminate()
        s.freeInstance()
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--max-instances", type=int, default=3)
    args = ap.parse_args()
    from mbsd_twin.fmi.build import build_fmu

    print(f"{os.cpu_count()} CPUs; {args.steps} steps of 1 ms per instance", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        fmu = build_fmu(None, Path(tmp) / "SliderCrank.fmu", host_independent=True)
        one = None
        print(f"{'instances':>9} {'wall s':>8} {'instance-steps/s':>17} {'speed-up':>9}")
        for k in range(1, args.max_instances + 1):
            wall = min(run(fmu, k, args.steps) for _ in range(2))
            rate = k * args.steps / wall
            one = one or rate
            print(f"{k:>9} {wall:>8.3f} {rate:>17.0f} {rate / one:>8.2f}x", flush=True)
    os._exit(0)  # fmpy's libraries stay loaded; skip interpreter teardown


if __name__ == "__main__":
    main()
