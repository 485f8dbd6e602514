"""Validation harness: check an FMU and compare it, output by output, with the native Simulator.

    from mbsd_twin.fmi.validation import validate
    rep = validate("dist/SliderCrank.fmu", stop_time=5.0, step=1e-3,
                   inputs={"motor_torque": "pwc:2:1:-1:2.5:0.5"})
    print(rep.table()); assert rep.ok

Steps: ``fmpy validate`` and ``fmutool -check`` (when fmu-manipulation-toolbox is installed), the
FMU simulated with ``fmpy.simulate_fmu`` (``output_interval`` = the step), the same mechanism (by
default the one inside the FMU) stepped natively through the same communication points with the
same inputs and parameters, and every FMU output compared.

Tolerance band of an output y: ``max_t |y_fmu − y_native| ≤ rtol · max_t |y_native| + atol``
(atol in the output's unit). With the same solver settings the two runs are the same computation,
so the defaults are tight: rtol 1e-9, atol 1e-12.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..model.loader import load_mechanism, loads_mechanism
from ..model.model import Mechanism
from ..solvers.dynamics import SolverFailure
from .importers import Arrays, run_fmpy, run_isolated
from .inputs import InputProfile, communication_points, parse_profile
from .native import run_native


@dataclass(frozen=True)
class OutputError:
    """Largest difference of one output over the run and the band it must stay within."""

    name: str
    unit: str
    max_abs: float
    scale: float
    band: float

    @property
    def ok(self) -> bool:
        return bool(self.max_abs <= self.band)

    @property
    def relative(self) -> float:
        return self.max_abs / self.scale if self.scale > 0 else (0.0 if self.max_abs == 0 else np.inf)


@dataclass
class ValidationReport:
    """Everything :func:`validate` found; ``ok`` when no check problem, no error, every output in band."""

    fmu: str
    problems: list[str] = field(default_factory=list)
    errors: list[OutputError] = field(default_factory=list)
    fmu_result: Arrays = field(default_factory=dict)
    native_result: Arrays = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems and not self.message and bool(self.errors) and all(e.ok for e in self.errors)

    def table(self) -> str:
        lines = [f"{'output':<32} {'unit':>6} {'max |FMU-native|':>17} {'max |native|':>13} {'relative':>10}  ok"]
        for e in self.errors:
            lines.append(f"{e.name:<32} {e.unit:>6} {e.max_abs:17.3e} {e.scale:13.4g} {e.relative:10.2e}  "
                         f"{'yes' if e.ok else 'NO'}")
        lines += [f"check problem: {p}" for p in self.problems]
        if self.message:
            lines.append(f"error: {self.message}")
        timing = ", ".join(f"{k} {v:.2f} s" for k, v in self.seconds.items())
        lines.append(f"{'PASS' if self.ok else 'FAIL'}: {sum(e.ok for e in self.errors)}/{len(self.errors)} "
                     f"outputs in band; {timing}")
        return "\n".join(lines)

    def write_csv(self, folder: str | Path) -> list[Path]:
        """``fmu.csv``, ``native.csv`` and ``errors.csv`` in ``folder``."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, data in (("fmu", self.fmu_result), ("native", self.native_result)):
            if data:
                path = out / f"{name}.csv"
                np.savetxt(path, np.column_stack(list(data.values())), delimiter=",", header=",".join(data),
                           comments="", fmt="%.17g")
                paths.append(path)
        path = out / "errors.csv"
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["output", "unit", "max_abs", "max_native", "band", "ok"])
            w.writerows([e.name, e.unit, repr(e.max_abs), repr(e.scale), repr(e.band), e.ok] for e in self.errors)
        return [*paths, path]

    def plot(self, path: str | Path, names: list[str] | None = None) -> Path:
        """FMU and native curves of ``names`` (default: every output), one small panel each, titled
        with the largest difference (:mod:`mbsd_twin.viz.compare`); needs matplotlib."""
        from ..viz.compare import plot_comparison

        return plot_comparison(self, path, names)


def fmutool_check(fmu: str | Path) -> list[str] | None:
    """Problems reported by ``fmutool -check`` (None when fmu-manipulation-toolbox is missing)."""
    exe = Path(sys.executable).with_name("fmutool")
    cmd = [str(exe)] if exe.exists() else None
    if cmd is None:
        try:
            import fmu_manipulation_toolbox  # noqa: F401
        except ImportError:
            return None
        cmd = [sys.executable, "-c", "from fmu_manipulation_toolbox.cli.fmutool import fmutool; fmutool()"]
    proc = subprocess.run([*cmd, "-input", str(fmu), "-check"], capture_output=True, text=True, timeout=300)
    if proc.returncode == 0:
        return []
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "ERROR" in ln]
    return [f"fmutool -check exit {proc.returncode}: {ln.strip()}" for ln in lines] or \
        [f"fmutool -check exit {proc.returncode}"]


def check_fmu(fmu: str | Path, fmutool: bool = True) -> list[str]:
    """``fmpy validate`` problems, then ``fmutool -check`` problems (empty: none)."""
    from fmpy.validation import validate_fmu

    problems = [f"fmpy validate: {p}" for p in validate_fmu(str(fmu))]
    if fmutool:
        problems += fmutool_check(fmu) or []
    return problems


def fmu_mechanism(fmu: str | Path) -> Mechanism:
    """The mechanism bundled in the FMU's resources."""
    with zipfile.ZipFile(fmu) as zf:
        text = zf.read("resources/mechanism.toml").decode("utf-8")
    return loads_mechanism(text, source=f"{fmu}!resources/mechanism.toml")


def _default_experiment(fmu: str | Path) -> tuple[float, float, float]:
    from fmpy import read_model_description

    de = read_model_description(str(fmu)).defaultExperiment
    start = float(de.startTime) if de and de.startTime is not None else 0.0
    stop = float(de.stopTime) if de and de.stopTime is not None else start + 1.0
    step = float(de.stepSize) if de and de.stepSize is not None else 1e-3
    return start, stop, step


def compare(fmu_res: Arrays, native: Arrays, units: Mapping[str, str], rtol: float = 1e-9,
            atol: float = 1e-12) -> list[OutputError]:
    """One :class:`OutputError` per output in ``units`` (rows must be at the same times)."""
    if len(fmu_res["time"]) != len(native["time"]) or not np.allclose(fmu_res["time"], native["time"],
                                                                        rtol=1e-12, atol=1e-15):
        raise ValueError(f"the runs have different communication points ({len(fmu_res['time'])} "
                         f"and {len(native['time'])} rows)")
    out = []
    for name, unit in units.items():
        a, b = fmu_res[name], native[name]
        scale = float(np.max(np.abs(b))) if len(b) else 0.0
        diff = float(np.max(np.abs(a - b))) if len(a) else 0.0
        if np.isnan(a).any() or np.isnan(b).any():
            diff = np.inf
        out.append(OutputError(name, unit, diff, scale, rtol * scale + atol))
    return out


def validate(fmu: str | Path, mechanism: str | Path | None = None, stop_time: float | None = None,
             step: float | None = None, inputs: Mapping[str, str | InputProfile] | None = None,
             parameters: Mapping[str, float] | None = None, rtol: float = 1e-9, atol: float = 1e-12,
             checks: bool = True, isolate: bool = True) -> ValidationReport:
    """Check ``fmu`` and compare it with the native Simulator (see the module docstring).

    ``isolate``: run fmpy in a subprocess (see :mod:`mbsd_twin.fmi.importers`), so that the FMU's
    library is never loaded into this process."""
    from fmpy import read_model_description

    rep = ValidationReport(str(fmu))
    if checks:
        rep.problems = check_fmu(fmu)
    start, stop, h = _default_experiment(fmu)
    stop, h = stop_time or stop, step or h
    profiles = {n: p if isinstance(p, InputProfile) else parse_profile(p) for n, p in (inputs or {}).items()}
    mech = load_mechanism(mechanism) if mechanism is not None else fmu_mechanism(fmu)
    md = read_model_description(str(fmu))
    units = {v.name: v.unit or "" for v in md.modelVariables if v.causality == "output"}
    t0 = time.perf_counter()
    try:
        if isolate:
            rep.fmu_result = run_isolated("fmpy", fmu, stop, h, start, profiles, parameters)
        else:
            rep.fmu_result = run_fmpy(fmu, start, stop, h, profiles, parameters)
    except Exception as exc:  # the importers report FMU failures as plain exceptions
        rep.message = f"fmpy simulation failed: {exc}"
        return rep
    t1 = time.perf_counter()
    try:
        rep.native_result = run_native(mech, communication_points(start, stop, h), profiles, list(units),
                                       parameters)
    except SolverFailure as exc:
        rep.message = f"native simulation failed: {exc}"
        return rep
    rep.seconds = {"fmpy": t1 - t0, "native": time.perf_counter() - t1}
    try:
        rep.errors = compare(rep.fmu_result, rep.native_result, units, rtol, atol)
    except ValueError as exc:
        rep.message = str(exc)
    return rep

