"""Run an FMU in an importer — fmpy or OSP libcosim (libcosimpy) — on a regular communication grid
with input profiles, and return every output as arrays.

Each importer loads the FMU into the current process (PythonFMU FMUs run in the importer's own
Python interpreter). To keep a crash in an importer away from the caller, run it in a subprocess:

    python -m mbsd_twin.fmi.importers fmpy FMU --stop 1 --step 0.001 --input motor_torque=2 --out r.npz

PythonFMU 0.7.0 can abort the process at interpreter exit once its library was loaded
("corrupted double-linked list", NTNU-IHB/PythonFMU#228), after all FMU calls returned; the
command line therefore ends with ``os._exit`` once the results are written and flushed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .inputs import InputProfile, communication_points, parse_assignment

Arrays = dict[str, NDArray[np.float64]]
IMPORTERS = ("fmpy", "libcosim")


def output_names(fmu: str | Path) -> list[str]:
    from fmpy import read_model_description

    md = read_model_description(str(fmu))
    return [v.name for v in md.modelVariables if v.causality == "output"]


def fmpy_signals(start: float, stop: float, step: float,
                 inputs: Mapping[str, InputProfile] | None) -> NDArray[Any] | None:
    """fmpy's input table: every profile tabulated at every communication point (None: no inputs)."""
    if not inputs:
        return None
    times = communication_points(start, stop, step)
    dtype = [("time", np.float64)] + [(n, np.float64) for n in inputs]
    return np.array([(t, *(f(float(t)) for f in inputs.values())) for t in times], dtype=dtype)


def simulate_fmpy(fmu: str | Path, start: float, stop: float, step: float, signals: NDArray[Any] | None = None,
                  parameters: Mapping[str, float] | None = None, outputs: Sequence[str] | None = None) -> Arrays:
    """``fmpy.simulate_fmu`` with ``output_interval = step`` (fmpy would pick a coarser
    communication step otherwise), the input table ``signals`` (:func:`fmpy_signals`) and every
    output (or ``outputs``) recorded."""
    from fmpy import simulate_fmu

    res = simulate_fmu(str(fmu), start_time=start, stop_time=stop, step_size=step, output_interval=step,
                       input=signals, start_values=dict(parameters or {}),
                       output=list(outputs) if outputs is not None else output_names(fmu), validate=False)
    return {name: np.asarray(res[name], dtype=float) for name in res.dtype.names}


def run_fmpy(fmu: str | Path, start: float, stop: float, step: float,
             inputs: Mapping[str, InputProfile] | None = None,
             parameters: Mapping[str, float] | None = None) -> Arrays:
    """:func:`simulate_fmpy` with the inputs tabulated at every communication point, so that fmpy
    hands the FMU exactly ``profile(t)`` at each point."""
    return simulate_fmpy(fmu, start, stop, step, fmpy_signals(start, stop, step, inputs), parameters)


def run_libcosim(fmu: str | Path, stop: float, step: float, inputs: Mapping[str, InputProfile] | None = None,
                 parameters: Mapping[str, float] | None = None) -> Arrays:
    """OSP libcosim: one local slave, an override manipulator for the inputs (sampled at the
    start of each step), a last-value observer read after each step. Starts at t = 0; the step must
    be a whole number of nanoseconds. The rows are t = step, 2·step … (no t = 0 row)."""
    from fmpy import read_model_description
    from libcosimpy.CosimExecution import CosimExecution
    from libcosimpy.CosimLogging import CosimLogLevel, log_output_level
    from libcosimpy.CosimManipulator import CosimManipulator
    from libcosimpy.CosimObserver import CosimObserver
    from libcosimpy.CosimSlave import CosimLocalSlave

    version = read_model_description(str(fmu)).fmiVersion
    if not version.startswith(("1.", "2.")):  # libcosimpy 0.0.6 segfaults on an FMI 3.0 FMU
        raise ValueError(f"{fmu}: libcosim (libcosimpy 0.0.6) loads FMI 1.0 and 2.0 FMUs only, this one is FMI "
                         f"{version}; build it with --fmi-version 2 to run it in libcosim")
    step_ns = round(step * 1e9)
    if step_ns <= 0 or abs(step_ns * 1e-9 - step) > 1e-15:
        raise ValueError(f"libcosim needs a step of whole nanoseconds, got {step!r} s")
    n_steps = round(stop / step)
    log_output_level(CosimLogLevel.WARNING)
    ex = CosimExecution.from_step_size(step_size=step_ns)
    slave = CosimLocalSlave(fmu_path=str(Path(fmu).resolve()), instance_name="mbsd")
    idx = ex.add_local_slave(local_slave=slave)
    vr = {v.name.decode(): v.reference for v in ex.slave_variables(idx)}
    for name, value in (parameters or {}).items():
        ex.real_initial_value(idx, vr[name], float(value))
    manipulator = CosimManipulator.create_override()
    ex.add_manipulator(manipulator=manipulator)
    observer = CosimObserver.create_last_value()
    ex.add_observer(observer=observer)
    outs = output_names(fmu)
    out_refs = [vr[n] for n in outs]
    in_refs = [vr[n] for n in (inputs or {})]
    rows = []
    for k in range(n_steps):
        if inputs:
            manipulator.slave_real_values(idx, in_refs, [f(k * step) for f in inputs.values()])
        if not ex.step(1):
            raise RuntimeError(f"libcosim step {k} (t={k * step!r} s) failed")
        rows.append([ex.status().current_time * 1e-9, *observer.last_real_values(idx, out_refs)])
    data = np.array(rows, dtype=float)
    return {"time": data[:, 0], **{n: data[:, k + 1] for k, n in enumerate(outs)}}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mbsd_twin.fmi.importers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("importer", choices=IMPORTERS)
    p.add_argument("fmu")
    p.add_argument("--start", type=float, default=0.0, help="start time [s] (fmpy only; libcosim starts at 0)")
    p.add_argument("--stop", type=float, required=True, help="stop time [s]")
    p.add_argument("--step", type=float, required=True, help="communication step [s]")
    p.add_argument("--input", action="append", default=[], metavar="NAME=PROFILE")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--out", required=True, help=".npz file for the arrays")
    args = p.parse_args(argv)
    inputs = dict(parse_assignment(i) for i in args.input)
    params = {k.strip(): float(v) for k, _, v in (s.partition("=") for s in args.param)}
    if args.importer == "fmpy":
        res = run_fmpy(args.fmu, args.start, args.stop, args.step, inputs, params)
    else:
        res = run_libcosim(args.fmu, args.stop, args.step, inputs, params)
    np.savez(args.out, **res)  # type: ignore[arg-type]
    print(f"{args.importer}: {len(res['time'])} rows -> {args.out}")
    return 0


def run_isolated(importer: str, fmu: str | Path, stop: float, step: float, start: float = 0.0,
                 inputs: Mapping[str, InputProfile] | None = None, parameters: Mapping[str, float] | None = None,
                 timeout: float | None = None) -> Arrays:
    """:func:`run_fmpy` or :func:`run_libcosim` in a fresh ``python -m mbsd_twin.fmi.importers``
    process; raises RuntimeError with the child's output when it wrote no result."""
    with tempfile.TemporaryDirectory(prefix="mbsd_importer_") as tmp:
        out = Path(tmp) / "result.npz"
        cmd = [sys.executable, "-m", "mbsd_twin.fmi.importers", importer, str(fmu), "--start", repr(start),
               "--stop", repr(stop), "--step", repr(step), "--out", str(out)]
        cmd += [f"--input={n}={p.spec}" for n, p in (inputs or {}).items()]
        cmd += [f"--param={n}={v!r}" for n, v in (parameters or {}).items()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"{importer} run failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
        with np.load(out) as data:
            return {k: np.array(data[k]) for k in data.files}


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
