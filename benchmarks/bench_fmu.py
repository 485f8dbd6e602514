"""Speed of the slider-crank FMU under fmpy: real-time factor of ``fmpy.simulate_fmu`` at 1 ms
communication steps (real-time factor = simulated time / wall-clock time; > 1 is faster than real
time), next to the native ``Simulator`` stepped through the same points with the same inputs (the
FMU's and fmpy's overhead is the difference).

Run: python benchmarks/bench_fmu.py [--stop-time 10] [--step 0.001] [--repeat 3] [--breakdown]
     [--flavour pythonfmu|host-independent|both]

``--flavour`` picks the FMU: PythonFMU's (the model runs in fmpy's interpreter), the
host-independent one (a C library; the model runs in a worker process, one round trip per step) or
both (default). The summary gives each flavour's per-step overhead over the native Simulator.

Each ``simulate_fmu`` call is timed whole: extracting the FMU, instantiating it (the slave builds
its Simulator), initialising, every step, freeing it. fmpy is imported, and the input table and
output list prepared, before the clock starts.
The first call in the process also pays one-off costs (the engine's compiled functions loaded from
numba's cache on their first use); the later calls show the steady state. ``--breakdown`` times the
engine calls the FMU makes (``Simulator.advance_to``, ``output_vector``, ``set_input``) inside
the best call; the rest is the FMU layer (PythonFMU's library and slave class) and fmpy. The timer
wrappers add a little to every engine call.

The FMUs are built into a temporary folder; fmpy runs in this process, which ends with ``os._exit``
(PythonFMU 0.7.0 can abort a process at interpreter exit, see fmu/README.md).
"""

from __future__ import annotations

import argparse
import os
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
    from mbsd_twin.simulator import Simulator

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
    """fmpy's FMU2Slave driven directly (no simulate_fmu): wall time of instantiate + initialise,
    and of the loop that sets every input, steps and reads every output at each point."""
    from fmpy import extract, read_model_description
    from fmpy.fmi2 import FMU2Slave

    md = read_model_description(str(fmu))
    vr = {v.name: v.valueReference for v in md.modelVariables}
    in_vrs = [vr[name] for name in inputs]
    out_vrs = [v.valueReference for v in md.modelVariables if v.causality == "output"]
    times = [float(t) for t in points]
    table = [[f(t) for f in inputs.values()] for t in times]
    unzipped = extract(str(fmu))
    t0 = time.perf_counter()
    s = FMU2Slave(guid=md.guid, unzipDirectory=unzipped, modelIdentifier=md.coSimulation.modelIdentifier,
                  instanceName="bench")
    s.instantiate()
    s.setupExperiment(startTime=times[0])
    s.enterInitializationMode()
    s.exitInitializationMode()
    t1 = time.perf_counter()
    for t, t_next, values in zip(times[:-1], times[1:], table, strict=False):
        s.setReal(in_vrs, values)
        s.doStep(t, t_next - t)
        s.getReal(out_vrs)
    t2 = time.perf_counter()
    s.terminate()
    s.freeInstance()
    return t1 - t0, t2 - t1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stop-time", type=float, default=10.0, help="simulated time [s] (default 10)")
    p.add_argument("--step", type=float, default=1e-3, help="communication step [s] (default 0.001)")
    p.add_argument("--repeat", type=int, default=3, help="simulate_fmu calls (default 3; the best is reported)")
    p.add_argument("--breakdown", action="store_true", help="time the engine calls inside the FMU")
    p.add_argument("--no-native", action="store_true", help="skip the native reference run")
    p.add_argument("--flavour", choices=("pythonfmu", "host-independent", "both"), default="both",
                   help="which FMU flavour to run (default both)")
    args = p.parse_args()

    import fmpy.fmi2  # noqa: F401  (imports are not part of simulate_fmu's time)
    import fmpy.simulation  # noqa: F401

    from mbsd_twin.fmi.build import build_fmu
    from mbsd_twin.fmi.importers import fmpy_signals, output_names, simulate_fmpy
    from mbsd_twin.fmi.inputs import communication_points, parse_profile
    from mbsd_twin.fmi.validation import fmu_mechanism
    from mbsd_twin.simulator import Simulator

    engine: dict[str, float] = {}
    untimed = _timed(Simulator, ("advance_to", "output_vector", "set_input"), engine) if args.breakdown else None
    inputs = {"motor_torque": parse_profile("pwc:2:1:-1:2:3"), "piston_force": parse_profile("0")}
    flavours = ("pythonfmu", "host-independent") if args.flavour == "both" else (args.flavour,)
    best_by: dict[str, float] = {}
    loop_by: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for flavour in flavours:
            t0 = time.perf_counter()
            fmu = build_fmu(None, Path(tmp) / flavour / "SliderCrank.fmu", host_independent=flavour != "pythonfmu")
            print(f"[{flavour}] build: {time.perf_counter() - t0:.2f} s -> {fmu.name}")
            signals, outputs = fmpy_signals(0.0, args.stop_time, args.step, inputs), output_names(fmu)
            best, n, n_out, best_engine = float("inf"), 0, 0, dict(engine)
            for k in range(max(1, args.repeat)):
                engine.clear()
                t0 = time.perf_counter()
                res = simulate_fmpy(fmu, 0.0, args.stop_time, args.step, signals, outputs=outputs)
                wall = time.perf_counter() - t0
                n, n_out = len(res["time"]) - 1, len(res) - 1
                label = "first call" if k == 0 else f"call {k + 1}"
                print(f"[{flavour}] fmpy.simulate_fmu ({label}): {wall:.3f} s wall, real-time factor "
                      f"{args.stop_time / wall:.3g}, {1e6 * wall / n:.1f} µs per step")
                if wall < best:
                    best, best_engine = wall, dict(engine)
            best_by[flavour] = best
            start, loop = _step_loop(fmu, inputs, communication_points(0.0, args.stop_time, args.step))
            loop_by[flavour] = loop
            print(f"[{flavour}] FMU2Slave step loop (setReal, doStep, getReal per point): {1e6 * loop / n:.1f} µs per "
                  f"step, real-time factor {args.stop_time / loop:.3g}; instantiate + initialise {start:.3f} s")
            print(f"[{flavour}] best: {args.stop_time:g} s simulated at {args.step:g} s steps ({n} steps, {n_out} "
                  f"outputs) in {best:.3f} s wall: real-time factor {args.stop_time / best:.3g} "
                  f"({1e6 * best / n:.1f} µs per step)")
            if args.breakdown and flavour == "pythonfmu":  # the worker's engine calls are in another process
                total = sum(best_engine.values())
                parts = ", ".join(f"{name} {1e6 * sec / n:.1f}" for name, sec in best_engine.items())
                print(f"  engine calls from the FMU: {1e6 * total / n:.1f} µs per step ({parts}); FMU layer + "
                      f"fmpy: {1e6 * (best - total) / n:.1f} µs per step")
        if untimed is not None:
            untimed()
        if not args.no_native:
            native = _native_run(fmu_mechanism(fmu), inputs, communication_points(0.0, args.stop_time, args.step))
            print(f"native Simulator (set_input, advance_to, one output_vector per point): {native:.3f} s wall, "
                  f"real-time factor {args.stop_time / native:.3g}, {1e6 * native / n:.1f} µs per step")
            for flavour, best in best_by.items():
                print(f"  [{flavour}] FMU + fmpy overhead over the native Simulator: "
                      f"{1e6 * (best - native) / n:.1f} µs per step (real-time factor {args.stop_time / best:.3g})")
            for flavour, loop in loop_by.items():
                print(f"  [{flavour}] per-doStep overhead over the native Simulator (FMU2Slave loop): "
                      f"{1e6 * (loop - native) / n:.1f} µs per step (real-time factor {args.stop_time / loop:.3g})")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
