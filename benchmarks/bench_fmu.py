"""Speed of the slider-crank FMU: real-time factor at 1 ms communication steps (real-time factor =
simulated time / wall-clock time; > 1 is faster than real time) through ``fmpy.simulate_fmu``, an
fmpy step loop and, for the host-independent and standalone FMUs, the C hosts of the tests
(tests/fmi2_host.c, tests/fmi3_host.c, tests/standalone_start_host.c: no Python in the host
process), next to the native ``Simulator`` stepped through the same points with the same inputs
(the FMU's and the host's overhead is the difference).

Run: python benchmarks/bench_fmu.py [--stop-time 10] [--step 0.001] [--repeat 3] [--breakdown]
     [--flavour pythonfmu,host-independent,pythonfmu3,host-independent-3,standalone,standalone-3]
     [--transport shm|socket|both]

``--flavour`` picks the FMUs (comma-separated; default all six): PythonFMU's and pythonfmu3's (the
model runs in fmpy's interpreter), the host-independent FMI 2.0 and 3.0 ones (a C library; the
model runs in a worker process) and the standalone FMI 2.0 and 3.0 ones (one library holding the
compiled engine: no Python, no worker). For the standalone FMUs the C host
(tests/standalone_start_host.c, started with an empty environment) also times the start — dlopen,
instantiate, initialise, the first step and its outputs read — and fmi*FreeInstance, each the best
of ``--repeat`` fresh processes; its step loop holds the torque at 2 N·m (the other C hosts switch
it once). ``--transport``: how the host-independent library hands a step to
its worker — through the shared page (default) or socket messages (``MBSD_TWIN_FMU_NO_SHM=1``), or
both, one after the other. The summary gives each run's per-step overhead over the native Simulator.

Each ``simulate_fmu`` call is timed whole: extracting the FMU, instantiating it (the slave builds
its Simulator), initialising, every step, freeing it. fmpy is imported, and the input table and
output list prepared, before the clock starts.
The first call in the process also pays one-off costs (the engine's compiled functions loaded from
numba's cache on their first use); the later calls show the steady state. The step loops (fmpy's
FMU2Slave / FMU3Slave, and the C hosts; the best of ``--repeat`` runs each) time only the loop that
sets the inputs, steps and reads the outputs at every point; the native run is the best of as many.
``--breakdown`` times the engine calls the PythonFMU FMUs make (``Simulator.advance_to``,
``output_vector``, ``set_input``) over the simulate_fmu calls; the rest is the FMU layer (PythonFMU's
library and slave class) and fmpy. The timer wrappers add a little to every engine call.

The FMUs are built into a temporary folder; fmpy runs in this process, which ends with ``os._exit``
(PythonFMU 0.7.0 can abort a process at interpreter exit, see fmu/README.md). The machine's load
moves every figure: run it twice and compare.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _timed(cls: type, names: tuple[str, ...], acc: dict[str, float]) -> Callable[[], None]:
    """Wrap ``cls``'s methods ``names`` with wall-clock accumulators (seconds, by name); returns
    the function that unwraps them."""
    saved = {name: cls.__dict__[name] for name in names}
    for name in names:
        fn: Callable[..., Any] = getattr(cls, name)

        def timed(*args: Any, _fn: Callable[..., Any] = fn, _name: str = name, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _fn(*args, **kwargs)
            finally:
                acc[_name] = acc.get(_name, 0.0) + (time.perf_counter() - t0)

        setattr(cls, name, timed)

    def untimed() -> None:
        for name, fn in saved.items():
            setattr(cls, name, fn)

    return untimed


def _native_run(mech: Any, inputs: dict[str, Any], points: Any) -> float:
    """Wall time of the native Simulator stepped through ``points`` with ``inputs``."""
    from mbsd_twin.simulation.simulator import Simulator

    sim = Simulator(mech)
    times = [float(t) for t in points]
    t0 = time.perf_counter()
    for t, t_next in zip(times[:-1], times[1:], strict=True):
        for name, f in inputs.items():
            sim.set_input(name, f(t))
        sim.advance_to(t_next)
        sim.output_vector()
    return time.perf_counter() - t0


def _step_loop(fmu: Path, inputs: dict[str, Any], points: Any) -> tuple[float, float]:
    """fmpy's FMU2Slave / FMU3Slave driven directly (no simulate_fmu): wall time of instantiate +
    initialise, and of the loop that sets every input, steps and reads every output at each point."""
    from fmpy import extract, read_model_description
    from fmpy.fmi2 import FMU2Slave
    from fmpy.fmi3 import FMU3Slave

    md = read_model_description(str(fmu))
    vr = {v.name: v.valueReference for v in md.modelVariables}
    in_vrs = [vr[name] for name in inputs]
    out_vrs = [v.valueReference for v in md.modelVariables if v.causality == "output"]
    times = [float(t) for t in points]
    table = [[f(t) for f in inputs.values()] for t in times]
    unzipped = extract(str(fmu))
    fmi3 = md.fmiVersion == "3.0"
    t0 = time.perf_counter()
    s: Any = (FMU3Slave if fmi3 else FMU2Slave)(guid=md.guid, unzipDirectory=unzipped,
                                                modelIdentifier=md.coSimulation.modelIdentifier, instanceName="bench")
    s.instantiate()
    if fmi3:
        s.enterInitializationMode(startTime=times[0])
    else:
        s.setupExperiment(startTime=times[0])
        s.enterInitializationMode()
    s.exitInitializationMode()
    set_values, get_values = (s.setFloat64, s.getFloat64) if fmi3 else (s.setReal, s.getReal)
    t1 = time.perf_counter()
    for t, t_next, values in zip(times[:-1], times[1:], table, strict=False):
        set_values(in_vrs, values)
        s.doStep(t, t_next - t)
        get_values(out_vrs)
    t2 = time.perf_counter()
    s.terminate()
    s.freeInstance()
    shutil.rmtree(unzipped, ignore_errors=True)
    return t1 - t0, t2 - t1


def _c_host_loop(fmu: Path, tmp: Path, stop: float, step: float) -> float:
    """Seconds per step of the C host's step loop (tests/fmi2_host.c or fmi3_host.c, compiled here
    with gcc) on the host-independent ``fmu``: torque 2 then -1 N·m from 0.5005 s, every output read."""
    import xml.etree.ElementTree as ET
    import zipfile

    from mbsd_twin.fmi.native_build import SOURCE_DIR

    with zipfile.ZipFile(fmu) as zf:
        md = ET.fromstring(zf.read("modelDescription.xml"))
        zf.extractall(tmp / "unzipped")
    fmi3 = md.get("fmiVersion") == "3.0"
    source = Path(__file__).resolve().parents[1] / "tests" / ("fmi3_host.c" if fmi3 else "fmi2_host.c")
    exe = tmp / source.stem
    subprocess.run(["gcc", "-O2", f"-I{SOURCE_DIR}", "-o", str(exe), str(source), "-ldl"], check=True)
    variables = md.find("ModelVariables")
    assert variables is not None
    vr = {v.get("name"): v.get("valueReference", "") for v in variables}
    outs = [v.get("valueReference", "") for v in variables if v.get("causality") == "output"]
    res = tmp / "unzipped" / "resources"
    lib = next((tmp / "unzipped" / "binaries").glob("*/*.so"))
    token = md.get("instantiationToken" if fmi3 else "guid", "")
    cmd = [str(exe), str(lib), f"{res}/" if fmi3 else res.as_uri(), token, str(round(stop / step)), repr(step),
           vr["motor_torque"], "0.5005", *outs]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    found = re.search(r"step loop: ([0-9.]+) us per step", proc.stderr)
    assert found, proc.stderr
    return float(found.group(1)) * 1e-6


def _standalone_host(fmu: Path, tmp: Path, stop: float, step: float) -> dict[str, float]:
    """The standalone ``fmu`` in tests/standalone_start_host.c (compiled here with gcc, run with an
    empty environment): µs of the start (dlopen to the first outputs), of the instantiate call, per
    step, and of fmi*FreeInstance."""
    import xml.etree.ElementTree as ET
    import zipfile

    from mbsd_twin.fmi.native_build import SOURCE_DIR

    with zipfile.ZipFile(fmu) as zf:
        md = ET.fromstring(zf.read("modelDescription.xml"))
        zf.extractall(tmp / "unzipped")
    fmi3 = md.get("fmiVersion") == "3.0"
    source = Path(__file__).resolve().parents[1] / "tests" / "standalone_start_host.c"
    exe = tmp / source.stem
    subprocess.run(["gcc", "-O2", f"-I{SOURCE_DIR}", "-o", str(exe), str(source), "-ldl"], check=True)
    variables = md.find("ModelVariables")
    assert variables is not None
    vr = {v.get("name"): v.get("valueReference", "") for v in variables}
    outs = [vr["crank.theta"]] + [v.get("valueReference", "") for v in variables if v.get("causality") == "output"]
    lib = next((tmp / "unzipped" / "binaries").glob("*/*.so"))
    token = md.get("instantiationToken" if fmi3 else "guid", "")
    cmd = [str(exe), "3" if fmi3 else "2", str(lib), token, str(round(stop / step) - 1), repr(step),
           vr["motor_torque"], *outs]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True, env={})
    return {k: float(v) for k, v in (line.split() for line in proc.stdout.strip().splitlines())}


FLAVOURS = ("pythonfmu", "host-independent", "pythonfmu3", "host-independent-3", "standalone", "standalone-3")


def _build(flavour: str, dest: Path) -> Path:
    from mbsd_twin.fmi.build import build_fmu
    from mbsd_twin.fmi.fmi3 import build_fmu3

    if flavour.startswith("standalone"):
        from mbsd_twin.fmi.standalone import build_standalone

        return build_standalone(None, dest, fmi_version="3" if flavour.endswith("3") else "2")
    build = build_fmu3 if flavour.endswith("3") else build_fmu
    return build(None, dest, host_independent=flavour.startswith("host-independent"))


def _simulate(fmu: Path, label: str, args: argparse.Namespace, inputs: dict[str, Any]) -> tuple[float, int, int]:
    """The best of ``--repeat`` fmpy.simulate_fmu calls (s), the number of steps and of outputs."""
    from mbsd_twin.fmi.importers import fmpy_signals, output_names, simulate_fmpy

    signals, outputs = fmpy_signals(0.0, args.stop_time, args.step, inputs), output_names(fmu)
    best, n, n_out = float("inf"), 0, 0
    for k in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        res = simulate_fmpy(fmu, 0.0, args.stop_time, args.step, signals, outputs=outputs)
        wall = time.perf_counter() - t0
        n, n_out = len(res["time"]) - 1, len(res) - 1
        print(f"[{label}] fmpy.simulate_fmu ({'first call' if k == 0 else f'call {k + 1}'}): {wall:.3f} s wall, "
              f"real-time factor {args.stop_time / wall:.3g}, {1e6 * wall / n:.1f} µs per step")
        best = min(best, wall)
    return best, n, n_out


def _runs(flavour: str, fmu: Path, tmp: Path, args: argparse.Namespace, inputs: dict[str, Any],
          engine: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per transport (the PythonFMU flavours: one run): seconds per step of simulate_fmu (best),
    of the fmpy step loop and of the C host's loop (host-independent only)."""
    from mbsd_twin.fmi.inputs import communication_points

    native_fmu = flavour.startswith("host-independent")
    transports = (["shm", "socket"] if args.transport == "both" else [args.transport]) if native_fmu else [""]
    out: dict[str, dict[str, float]] = {}
    for transport in transports:
        label = f"{flavour} {transport}".strip()
        if transport:
            os.environ["MBSD_TWIN_FMU_NO_SHM"] = "1" if transport == "socket" else "0"
        engine.clear()
        best, n, n_out = _simulate(fmu, label, args, inputs)
        points = communication_points(0.0, args.stop_time, args.step)
        start, loop = min((_step_loop(fmu, inputs, points) for _ in range(max(1, args.repeat))), key=lambda r: r[1])
        print(f"[{label}] fmpy step loop (set, doStep, get every output per point; best): {1e6 * loop / n:.1f} µs per "
              f"step, real-time factor {args.stop_time / loop:.3g}; instantiate + initialise {start:.3f} s")
        out[label] = {"simulate": best / n, "loop": loop / n}
        if native_fmu:
            c_loop = min(_c_host_loop(fmu, tmp / f"{label.replace(' ', '_')}_{k}", args.stop_time, args.step)
                         for k in range(max(1, args.repeat)))
            out[label]["c_host"] = c_loop
            print(f"[{label}] C host step loop: {1e6 * c_loop:.1f} µs per step, real-time factor "
                  f"{args.step / c_loop:.3g}")
        if flavour.startswith("standalone"):
            runs = [_standalone_host(fmu, tmp / f"{label}_{k}", args.stop_time, args.step)
                    for k in range(max(1, args.repeat))]
            best_of = {key: min(r[key] for r in runs) for key in ("first", "instantiate", "step", "free")}
            out[label].update(c_host=best_of["step"] * 1e-6, first=best_of["first"] * 1e-6,
                              free=best_of["free"] * 1e-6)
            print(f"[{label}] C host (env -i; best of {len(runs)} processes): {best_of['step']:.2f} µs per step, "
                  f"real-time factor {1e6 * args.step / best_of['step']:.3g}; dlopen → first step's outputs "
                  f"{best_of['first'] / 1e3:.3f} ms (instantiate call {best_of['instantiate']:.1f} µs); "
                  f"FreeInstance {best_of['free']:.2f} µs")
        if args.breakdown and not native_fmu:  # the worker's engine calls are in another process
            total = sum(engine.values())
            parts = ", ".join(f"{name} {1e6 * sec / n:.1f}" for name, sec in engine.items())
            print(f"  engine calls from the FMU (all calls): {1e6 * total / n / args.repeat:.1f} µs per step "
                  f"({parts}, over {args.repeat} calls)")
        print(f"[{label}] {args.stop_time:g} s simulated at {args.step:g} s steps ({n} steps, {n_out} outputs)")
    os.environ.pop("MBSD_TWIN_FMU_NO_SHM", None)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stop-time", type=float, default=10.0, help="simulated time [s] (default 10)")
    p.add_argument("--step", type=float, default=1e-3, help="communication step [s] (default 0.001)")
    p.add_argument("--repeat", type=int, default=3, help="simulate_fmu calls (default 3; the best is reported)")
    p.add_argument("--breakdown", action="store_true", help="time the engine calls inside the PythonFMU FMUs")
    p.add_argument("--flavour", default=",".join(FLAVOURS), help=f"comma-separated, of {', '.join(FLAVOURS)}")
    p.add_argument("--transport", choices=("shm", "socket", "both"), default="shm",
                   help="host-independent FMUs: shared page (default) or socket messages per step, or both")
    args = p.parse_args()
    flavours = [f.strip() for f in args.flavour.split(",") if f.strip()]
    if not set(flavours) <= set(FLAVOURS):
        p.error(f"unknown flavour in {args.flavour!r}")

    import fmpy.fmi2  # noqa: F401  (imports are not part of simulate_fmu's time)
    import fmpy.simulation  # noqa: F401

    from mbsd_twin.fmi.inputs import communication_points, parse_profile
    from mbsd_twin.fmi.validation import fmu_mechanism
    from mbsd_twin.simulation.simulator import Simulator

    engine: dict[str, float] = {}
    untimed = _timed(Simulator, ("advance_to", "output_vector", "set_input"), engine) if args.breakdown else None
    inputs = {"motor_torque": parse_profile("pwc:2:1:-1:2:3"), "piston_force": parse_profile("0")}
    per_step: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        for flavour in flavours:
            t0 = time.perf_counter()
            fmu = _build(flavour, tmp / flavour / "SliderCrank.fmu")
            print(f"[{flavour}] build: {time.perf_counter() - t0:.2f} s -> {fmu.name}")
            per_step.update(_runs(flavour, fmu, tmp / flavour, args, inputs, engine))
        if untimed is not None:
            untimed()
        points = communication_points(0.0, args.stop_time, args.step)
        native = min(_native_run(fmu_mechanism(fmu), inputs, points) for _ in range(max(1, args.repeat)))
        native /= len(points) - 1
    _summary(per_step, native, args.step)
    return 0


def _summary(per_step: dict[str, dict[str, float]], native: float, step: float) -> None:
    print(f"\nnative Simulator (set_input, advance_to, one output_vector per point): {1e6 * native:.1f} µs per step, "
          f"real-time factor {step / native:.3g}")
    print("per step: µs (real-time factor); overhead = µs per step over the native Simulator")
    print(f"{'FMU':<28}{'simulate_fmu':>20}{'fmpy loop':>20}{'C host':>20}{'overhead fmpy/C':>20}"
          f"{'start ms':>10}{'free µs':>10}")
    for label, r in per_step.items():
        cells = [f"{1e6 * r[k]:.1f} ({step / r[k]:.3g})" if k in r else "-" for k in ("simulate", "loop", "c_host")]
        over = f"{1e6 * (r['loop'] - native):.1f}" + (f" / {1e6 * (r['c_host'] - native):.1f}" if "c_host" in r else "")
        start = f"{1e3 * r['first']:.2f}" if "first" in r else "-"
        free = f"{1e6 * r['free']:.2f}" if "free" in r else "-"
        print(f"{label:<28}{cells[0]:>20}{cells[1]:>20}{cells[2]:>20}{over:>20}{start:>10}{free:>10}")
    for label, r in per_step.items():
        if "first" in r:  # the standalone FMUs' targets
            print(f"{label}: C host {1e6 * r['c_host']:.2f} µs per step vs native {1e6 * native:.2f} µs "
                  f"({'≤' if r['c_host'] <= native else '>'} native); start {1e3 * r['first']:.2f} ms "
                  f"(target ≤ 20 ms); FreeInstance {1e6 * r['free']:.2f} µs (target ≤ 1000 µs)")


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
