"""Speed of the standalone slider-crank FMU (``mbsd-twin fmu build --standalone``, FMI 2.0 and 3.0) in
a C host without Python (tests/standalone_start_host.c, run with an empty environment): the cost
of one 1 ms communication step (set the torque, ``fmi2DoStep``/``fmi3DoStep``, read every output)
and the time from ``dlopen`` to the first step's outputs (instantiate, initialise, one step), next
to the native ``Simulator`` stepped the same way from Python (``set_input``, ``advance_to``,
``output_vector``).

Run: python benchmarks/bench_standalone.py [--stop-time 10] [--step 0.001] [--repeat 5]
     [--cpu host,x86-64] [--fmi 2,3]

``--cpu`` builds one FMU per CPU target of the engine's object code (``MBSD_TWIN_STANDALONE_CPU``:
``host`` is this CPU with all its features, as numba's JIT; ``x86-64`` any 64-bit x86). Each figure
is the median (and the best) of ``--repeat`` runs of the host (a fresh process each: "first"
includes loading the library), the native loop's and the hosts' runs interleaved, so that a change
of the machine's load moves both, in wall time and in the process's CPU time (which leaves out the
time other processes of a loaded machine held the core; caches and the hypervisor still count).
The load moves every figure: print ``uptime`` beside them.
"""

from __future__ import annotations

import argparse
import os
import statistics
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


def build(folder: Path, cpu: str, fmi: str) -> Path:
    """The standalone FMU (FMI ``fmi`` "2" or "3") built in a fresh process with the engine for ``cpu``."""
    dest = folder / f"{cpu}-fmi{fmi}" / "SliderCrank.fmu"
    env = {**os.environ, "MBSD_TWIN_STANDALONE_CPU": cpu}
    cmd = [sys.executable, "-c", "import sys; from mbsd_twin.cli import main; sys.exit(main())", "fmu", "build",
           "--standalone", "--fmi-version", fmi, "-o", str(dest)]
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    return dest


def host_command(host: Path, fmu: Path, folder: Path, stop: float, step: float) -> list[str]:
    """The host's command line for the unpacked ``fmu`` (torque, then every output after crank.theta)."""
    root = folder / "unpacked"
    with zipfile.ZipFile(fmu) as zf:
        zf.extractall(root)
    md = ET.parse(root / "modelDescription.xml").getroot()
    mv = md.find("ModelVariables")
    assert mv is not None
    vr = {v.get("name"): v.get("valueReference", "") for v in mv}
    outs = [vr["crank.theta"]] + [v.get("valueReference", "") for v in mv if v.get("causality") == "output"]
    fmi3 = md.get("fmiVersion") == "3.0"
    token = md.get("instantiationToken" if fmi3 else "guid", "")
    lib = next((root / "binaries").glob("*/SliderCrank.so"))
    return [str(host), "3" if fmi3 else "2", str(lib), token, str(round(stop / step) - 1), repr(step),
            vr["motor_torque"], *outs]


def host_run(cmd: list[str]) -> dict[str, float]:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={}).stdout
    return {k: float(v) for k, v in (line.split() for line in out.splitlines())}


def native(stop: float, step: float) -> tuple[float, float, float]:
    """(µs per step, the same in this process's CPU time, θ at the end) of the Simulator stepped as
    the host steps the FMU."""
    from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism
    from mbsd_twin.simulation.simulator import Simulator

    sim = Simulator(load_mechanism(bundled_slider_crank()))
    n = round(stop / step)
    t, start, cpu = 0.0, time.perf_counter(), time.process_time()
    for k in range(n):
        sim.set_input("motor_torque", 2.0)
        nxt = (k + 1) * step
        sim.advance_to(t + (nxt - t))
        sim.output_vector()
        t = nxt
    return (1e6 * (time.perf_counter() - start) / n, 1e6 * (time.process_time() - cpu) / n,
            sim.get_output("crank.theta"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stop-time", type=float, default=10.0)
    ap.add_argument("--step", type=float, default=0.001)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cpu", default="host,x86-64")
    ap.add_argument("--fmi", default="2,3")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_standalone_") as tmpd:
        tmp = Path(tmpd)
        host = tmp / "standalone_start_host"
        source = HERE.parent / "tests" / "standalone_start_host.c"
        subprocess.run(["gcc", "-O2", f"-I{SOURCE_DIR}", "-o", str(host), str(source), "-ldl"], check=True)
        labels = [(cpu, fmi) for cpu in args.cpu.split(",") for fmi in args.fmi.split(",")]
        cmds = {(cpu, fmi): host_command(host, build(tmp, cpu, fmi), tmp / f"{cpu}-{fmi}", args.stop_time, args.step)
                for cpu, fmi in labels}
        natives: list[tuple[float, float, float]] = []
        runs: dict[tuple[str, str], list[dict[str, float]]] = {k: [] for k in labels}
        for _ in range(args.repeat):  # interleaved: a change of load moves every figure alike
            natives.append(native(args.stop_time, args.step))
            for key in labels:
                runs[key].append(host_run(cmds[key]))
        steps = [n[0] for n in natives]
        theta = natives[0][2]
        print(f"native Simulator (Python loop): median {statistics.median(steps):7.2f} µs per step (best "
              f"{min(steps):.2f}; CPU time median {statistics.median(n[1] for n in natives):.2f}), "
              f"θ({args.stop_time:g} s) = {theta!r}")
        for (cpu, fmi), rs in runs.items():
            step_us = [r["step"] for r in rs]
            cpu_us = statistics.median(r["step_cpu"] for r in rs)
            first_us = [r["first"] for r in rs]
            same = "equal" if all(r["theta"] == theta for r in rs) else f"differs: {rs[0]['theta']!r}"
            print(f"standalone FMU, FMI {fmi}.0, engine for {cpu:8s}: median {statistics.median(step_us):7.2f} µs per "
                  f"step (best {min(step_us):.2f}; CPU time median {cpu_us:.2f}), "
                  f"first step after {statistics.median(first_us) / 1000:6.2f} ms "
                  f"(dlopen, instantiate, initialise, step), free {statistics.median(r['free'] for r in rs):.2f} µs, "
                  f"θ {same}")


if __name__ == "__main__":
    main()
