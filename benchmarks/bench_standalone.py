"""Speed of the standalone slider-crank FMU (``mbsd-twin fmu build --standalone``) in a C host without
Python (benchmarks/standalone_host.c): the cost of one 1 ms communication step (set the torque,
``fmi2DoStep``, read every output) and the time from ``dlopen`` to the first step's outputs
(instantiate, initialise, one step), next to the native ``Simulator`` stepped the same way from
Python (``set_input``, ``advance_to``, ``output_vector``).

Run: python benchmarks/bench_standalone.py [--stop-time 10] [--step 0.001] [--repeat 5]
     [--cpu host,x86-64]

``--cpu`` builds one FMU per CPU target of the engine's object code (``MBSD_TWIN_STANDALONE_CPU``:
``host`` is this CPU with all its features, as numba's JIT; ``x86-64`` any 64-bit x86). Each figure
is the best of ``--repeat`` runs of the host (a fresh process each: "first" includes loading the
library). The machine's load moves every figure: run it twice and compare.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from mbsd_twin.fmi.native_build import SOURCE_DIR  # noqa: E402


def build(folder: Path, cpu: str) -> Path:
    """The standalone FMU built in a fresh process with the engine for ``cpu``."""
    dest = folder / cpu / "SliderCrank.fmu"
    env = {**os.environ, "MBSD_TWIN_STANDALONE_CPU": cpu}
    cmd = [sys.executable, "-c", "import sys; from mbsd_twin.cli import main; sys.exit(main())", "fmu", "build",
           "--standalone", "-o", str(dest)]
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    return dest


def host_run(host: Path, fmu: Path, folder: Path, stop: float, step: float) -> dict[str, float]:
    root = folder / "unpacked"
    with zipfile.ZipFile(fmu) as zf:
        zf.extractall(root)
    md = ET.parse(root / "modelDescription.xml").getroot()
    mv = md.find("ModelVariables")
    assert mv is not None
    vr = {v.get("name"): v.get("valueReference", "") for v in mv}
    outs = [v.get("valueReference", "") for v in mv if v.get("causality") == "output"]
    outs.insert(0, vr["crank.theta"])
    cmd = [str(host), str(root / "binaries" / "linux64" / "SliderCrank.so"), md.get("guid", ""),
           str(round(stop / step) - 1), repr(step), vr["motor_torque"], *outs]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={}).stdout
    return {k: float(v) for k, v in (line.split() for line in out.splitlines())}


def native(stop: float, step: float) -> tuple[float, float]:
    """(µs per step, θ at the end) of the Simulator stepped as the host steps the FMU."""
    from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism
    from mbsd_twin.simulation.simulator import Simulator

    sim = Simulator(load_mechanism(bundled_slider_crank()))
    n = round(stop / step)
    t, start = 0.0, time.perf_counter()
    for k in range(n):
        sim.set_input("motor_torque", 2.0)
        nxt = (k + 1) * step
        sim.advance_to(t + (nxt - t))
        sim.output_vector()
        t = nxt
    return 1e6 * (time.perf_counter() - start) / n, sim.get_output("crank.theta")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stop-time", type=float, default=10.0)
    ap.add_argument("--step", type=float, default=0.001)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cpu", default="host,x86-64")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_standalone_") as tmpd:
        tmp = Path(tmpd)
        host = tmp / "standalone_host"
        subprocess.run(["gcc", "-O2", f"-I{SOURCE_DIR}", "-o", str(host), str(HERE / "standalone_host.c"), "-ldl"],
                       check=True)
        per_step, theta = min(native(args.stop_time, args.step) for _ in range(args.repeat))
        print(f"native Simulator (Python loop): {per_step:7.2f} µs per step, θ({args.stop_time:g} s) = {theta!r}")
        for cpu in args.cpu.split(","):
            fmu = build(tmp, cpu)
            runs = [host_run(host, fmu, tmp / f"{cpu}-{k}", args.stop_time, args.step) for k in range(args.repeat)]
            step_us = min(r["step"] for r in runs)
            first_us = min(r["first"] for r in runs)
            same = "equal" if all(r["theta"] == theta for r in runs) else f"differs: {runs[0]['theta']!r}"
            print(f"standalone FMU, engine for {cpu:8s}: {step_us:7.2f} µs per step, first step after "
                  f"{first_us / 1000:6.2f} ms (dlopen, instantiate, initialise, step), θ {same}")


if __name__ == "__main__":
    main()
