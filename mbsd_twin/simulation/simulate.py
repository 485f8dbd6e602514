"""``simulate``: a thin facade over :class:`Simulator` that returns a :class:`Result`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ..model.model import Mechanism
from ..model.profiles import Profile
from ..solvers.dynamics import WALL_CLOCK, SolverFailure, SolverOptions, wall_clock_limit
from ..solvers.results import TIME_SPEC, Result
from .simulator import Simulator

InputSource = float | Profile | Callable[[float], float]


@dataclass(frozen=True)
class Event:
    """Stop condition: ``function(t, outputs) -> float``; the run stops at the first output point
    where its sign differs from the start (resolution: the output interval)."""

    name: str
    function: Callable[[float, Mapping[str, float]], float]


def _input_value(src: InputSource, t: float) -> float:
    if isinstance(src, int | float):
        return float(src)
    if isinstance(src, Profile):
        return float(src.evaluate(np.array([t]))[0][0])
    return float(src(t))


def _over_time(limit: float, t: float, t_end: float) -> str:
    return (f"wall-clock limit of {limit:g} s reached at t={t:.9g} s of {t_end:g} s: the motion needs very "
            "small steps (check the mechanism's warnings for implausible values) or the limit is too short")


def simulate(mech: Mechanism, t_end: float, output_interval: float,
             inputs: Mapping[str, InputSource] | None = None, options: SolverOptions | None = None,
             events: list[Event] | None = None,
             progress: Callable[[float], None] | None = None, time_limit: float | None = None) -> Result:
    """Forward dynamics from t = 0 to ``t_end`` [s], recording every output each
    ``output_interval`` [s].

    ``inputs`` maps input ports to a constant, a profile or a callable of time; each is sampled at
    the start of every output interval and held over it. On numerical failure the result holds the
    points reached, with ``status`` −1 and the reason in ``message``; an event sets ``status`` 1.
    ``time_limit`` [s of wall-clock time] ends the run the same way (status −1): on the numpy path
    within one right-hand-side evaluation, on the compiled path at the first output point past it
    (one output interval is itself bounded by ``options.max_steps`` internal steps).
    """
    if not (output_interval > 0 and t_end > 0):
        raise ValueError(f"t_end and output_interval must be positive, got {t_end!r} and {output_interval!r}")
    if time_limit is not None and not time_limit > 0:
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    started = time.perf_counter()
    sim = Simulator(mech, options)
    n_int = int(np.ceil(t_end / output_interval - 1e-9))
    times = np.minimum(np.arange(n_int + 1) * output_interval, t_end)
    specs = [TIME_SPEC, *sim.output_specs]
    rows: list[list[float]] = []
    status, message = 0, "ok"
    signs: dict[str, float] = {}

    names = [s.name for s in specs[1:]]

    def record() -> str | None:
        """Append the current outputs (the output vector is in ``output_specs`` order); the name of
        an event whose sign changed, if any."""
        vec = sim.output_vector().tolist()
        rows.append([sim.time, *vec])
        out = dict(zip(names, vec, strict=True)) if events else {}
        for ev in events or []:
            g = float(np.sign(ev.function(sim.time, out)))
            if signs.setdefault(ev.name, g) != g:
                return ev.name
        return None

    for src_name, src in (inputs or {}).items():
        sim.set_input(src_name, _input_value(src, 0.0))
    record()
    for k, t_next in enumerate(times[1:]):
        for name, src in (inputs or {}).items():
            sim.set_input(name, _input_value(src, float(times[k])))
        try:
            with wall_clock_limit(None if time_limit is None else time_limit - (time.perf_counter() - started)):
                sim.advance_to(float(t_next))
        except SolverFailure as exc:
            over = time_limit is not None and WALL_CLOCK in str(exc)
            status, message = -1, _over_time(time_limit or 0.0, sim.time, t_end) if over else str(exc)
            break
        hit = record()
        if hit is not None:
            status, message = 1, f"stopped by event {hit!r} at t={sim.time:.9g} s"
            break
        if progress is not None:
            progress(float(t_next) / t_end)
        if time_limit is not None and time.perf_counter() - started > time_limit and t_next < t_end:
            status, message = -1, _over_time(time_limit, sim.time, t_end)
            break
    warns = [note for note in (sim.initial_velocity_report.summary(),) if note]
    if sim.redundant_constraints:
        warns.append(f"redundant constraints dropped for the dynamics: {', '.join(sim.redundant_constraints)}")
    return Result(specs, np.array(rows), "simulation", mech.source, warns, status, message)
