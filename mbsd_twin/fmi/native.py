"""The engine side of the FMU, without PythonFMU: how the slave builds its Simulator, and the native
reference run the validation harness compares an FMU against (same construction, same
communication points, same inputs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from ..errors import MbsdError, PortError
from ..model.model import Mechanism
from ..simulation.simulator import Simulator
from ..solvers.dynamics import SolverOptions
from .variables import NO_LIMIT

TUNABLE_DEFAULTS = {"solver.rtol": SolverOptions().rtol, "solver.max_step": NO_LIMIT}


class FmuInitError(MbsdError, RuntimeError):
    """The FMU could not be initialised (invalid parameter, unassemblable mechanism…)."""


def solver_options(tunable: Mapping[str, float]) -> SolverOptions:
    """Engine options from the FMU's tunable parameters (``solver.max_step`` 0 → no limit)."""
    values = {**TUNABLE_DEFAULTS, **tunable}
    max_step = float(values["solver.max_step"])
    opts = SolverOptions(rtol=float(values["solver.rtol"]), max_step=math.inf if max_step <= 0 else max_step)
    bad = opts.problems()
    if bad:
        raise FmuInitError(f"solver parameters (solver.rtol, solver.max_step) rejected: {'; '.join(bad)}")
    return opts


def build_simulator(mech: Mechanism, fixed: Mapping[str, float], tunable: Mapping[str, float],
                    start_time: float = 0.0, inputs: Mapping[str, float] | None = None,
                    base: Simulator | None = None) -> Simulator:
    """The Simulator the FMU runs: ``fixed`` parameters set one by one (an error names the
    parameter), solver options from ``tunable``, the clock at ``start_time``. ``base`` (a default
    Simulator of ``mech``) is reused when nothing differs from it."""
    opts = solver_options(tunable)
    if base is not None and not fixed and start_time == 0.0 and opts == base.options:
        sim = base
    else:
        try:
            sim = Simulator(mech, opts, t0=start_time)
        except MbsdError as exc:
            raise FmuInitError(f"mechanism {mech.name!r} at t={start_time!r} s: {exc}") from exc
    for name, value in fixed.items():
        try:
            sim.set_parameter(name, value)
        except MbsdError as exc:
            raise FmuInitError(f"parameter {name} = {value!r} rejected: {exc}") from exc
    for name, value in (inputs or {}).items():
        try:
            sim.set_input(name, value)
        except PortError as exc:
            raise FmuInitError(f"input {name} = {value!r} rejected: {exc}") from exc
    return sim


def split_parameters(sim: Simulator, values: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """(fixed, tunable) parameter values; raises :class:`PortError` for an unknown name."""
    kinds = {p.name: p.variability for p in sim.parameters}
    for name in values:
        if name not in kinds:
            raise PortError(f"unknown parameter {name!r}; parameters are: {', '.join(kinds)}", name=name)
    fixed = {n: float(v) for n, v in values.items() if kinds[n] == "fixed"}
    tunable = {n: float(v) for n, v in values.items() if kinds[n] == "tunable"}
    return fixed, tunable


def run_native(mech: Mechanism, times: Sequence[float] | NDArray[np.float64],
               inputs: Mapping[str, Callable[[float], float]], outputs: Sequence[str],
               parameters: Mapping[str, float] | None = None) -> dict[str, NDArray[np.float64]]:
    """The mechanism stepped natively through the communication points ``times`` exactly as an FMI
    master drives the FMU: inputs sampled at the start of each step and held, the step ending at
    ``t + (t_next − t)``, outputs read after each step (and at ``times[0]``).

    Returns ``{"time": …, name: …}``; raises :class:`~mbsd_twin.SolverFailure` if a step fails."""
    fixed, tunable = split_parameters(Simulator(mech), parameters or {})
    t0 = float(times[0])
    sim = build_simulator(mech, fixed, tunable, t0, {n: f(t0) for n, f in inputs.items()})
    rows = [[t0, *(sim.get_output(n) for n in outputs)]]
    for t, t_next in zip(times[:-1], times[1:], strict=True):
        for name, f in inputs.items():
            sim.set_input(name, f(float(t)))
        sim.advance_to(float(t) + (float(t_next) - float(t)))
        rows.append([float(t_next), *(sim.get_output(n) for n in outputs)])
    data = np.array(rows, dtype=float)
    return {"time": data[:, 0], **{n: data[:, k + 1] for k, n in enumerate(outputs)}}
