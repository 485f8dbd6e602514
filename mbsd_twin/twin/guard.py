"""Plausibility limits and recovery: hostile but schema-valid data never poisons the twin's model.

* Sensor values: every channel the core reads must satisfy |value| <= its limit
  (``[core] channel_limits``, else ``input_limit`` when > 0, else the limit derived from the
  mechanism by :mod:`.plausible`); a batch with one value outside is rejected whole and counted as
  ``invalid.range`` (like a NaN, which the parser rejects as ``non_finite``).
* Solver work: a batch whose integrations take more than :func:`batch_step_limit` internal steps
  is stopped, rejected and counted as ``recovered.work`` (:mod:`..simulation.work`).
* ``set_param`` values: finite, within ``[core] param_limits`` ([low, high]) when given, else within
  a factor ``param_factor`` of the mechanism file's value (so a positive parameter stays positive; a
  parameter that is 0 in the file may move by ±``input_limit``, 1e6 when it is 0). Solver settings: ``solver.rtol``
  in [1e-12, 0.1], ``solver.max_step`` 0 (no limit) or >= 1e-6 s (:data:`SOLVER_LIMITS`).
* Recovery (:meth:`TwinCore._recover`): any exception in a step, a re-initialisation or a command
  returns the tracker to its checkpoint after the last good batch or command (Simulator snapshot,
  filter x, P); without one, or when the failure repeats, the tracker is rebuilt from the mechanism
  file with the parameters last applied successfully and re-initialises from the next batch
  (counted as ``recovered``; ``resync.recovery``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ..model.model import Mechanism
from ..simulation.ports import TUNABLE, model_parameters
from .protocol import SensorBatch

if TYPE_CHECKING:  # annotations only: config's checks import this module
    from .config.sections import CoreConfig

MAX_DETAIL = 2000  # characters of a problem text kept in a command reply
# plausible solver settings: a tiny step limit or tolerance would make every batch take minutes
SOLVER_LIMITS = {"solver.rtol": (1e-12, 0.1), "solver.max_step": (1e-6, math.inf)}


class Limits(dict[str, float]):
    """Channel → plausible |value| limit (inf: unbounded); ``units`` per channel, ``unbounded``:
    the channels left without a limit, ``how``: where each limit came from."""

    def __init__(self) -> None:
        super().__init__()
        self.units: dict[str, str] = {}
        self.how: dict[str, str] = {}
        self.unbounded: list[str] = []

    def warning(self) -> str:
        """The warning naming the unbounded channels ("" when every channel is bounded)."""
        if not self.unbounded:
            return ""
        names = ", ".join(f"{ch} ({self.how.get(ch, 'no limit')})" for ch in self.unbounded)
        return (f"channels without a plausibility limit: {names}; any finite value of them reaches the model. "
                "Set [core] channel_limits for them")

    def describe(self, ch: str) -> str:
        return f"{self[ch]:.6g} {self.units.get(ch, '')}".rstrip() + f" ({self.how.get(ch, '')})"



def limit_problems(c: CoreConfig) -> list[str]:
    """Configuration problems of the plausibility limits."""
    out = []
    limits = {f"channel_limits.{k}": v for k, v in c.channel_limits.items()}
    for key, v in limits.items():
        if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
            out.append(f"[core] {key} must be a finite number > 0, got {v!r}")
    if not (isinstance(c.input_limit, int | float) and c.input_limit >= 0):
        out.append(f"[core] input_limit must be 0 (limits derived from the mechanism) or a number > 0 (inf: no "
                   f"limit), got {c.input_limit!r}")
    for key in ("max_speed", "limit_factor"):
        v = getattr(c, key)
        if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
            out.append(f"[core] {key} must be a finite number > 0, got {v!r}")
    if not (isinstance(c.max_solver_steps, int) and c.max_solver_steps >= 1):
        out.append(f"[core] max_solver_steps must be an integer >= 1 (internal steps per batch), got "
                   f"{c.max_solver_steps!r}")
    if not (isinstance(c.param_factor, int | float) and math.isfinite(c.param_factor) and c.param_factor > 1):
        out.append(f"[core] param_factor must be a finite number > 1, got {c.param_factor!r}")
    for name, pair in c.param_limits.items():
        ok = isinstance(pair, list | tuple) and len(pair) == 2 and all(
            isinstance(v, int | float) and math.isfinite(v) for v in pair)
        if not ok or not pair[0] < pair[1]:
            out.append(f"[core] param_limits.{name} must be [low, high] with finite low < high, got {pair!r}")
    return out


def channels_read(c: CoreConfig) -> tuple[str, ...]:
    """The sensor channels the core reads (inputs, compared channels)."""
    return tuple(dict.fromkeys([*c.inputs, *c.compare]))


def out_of_range(c: CoreConfig, batch: SensorBatch, channels: Mapping[str, float] | Iterable[str]) -> str | None:
    """The first implausible value of the batch, described (channel, sample, value, limit with its
    unit and where it came from); None when every value is plausible. ``channels``: the
    :class:`Limits` (from :mod:`.plausible`), or channel names checked against ``channel_limits`` / ``input_limit``."""
    for ch in channels:
        values = batch.ch.get(ch)
        if values is None:
            continue
        if isinstance(channels, Mapping):
            limit = channels[ch]
        else:
            limit = c.channel_limits.get(ch, c.input_limit if c.input_limit > 0 else math.inf)
        for k, v in enumerate(values):
            if not abs(v) <= limit:
                said = channels.describe(ch) if isinstance(channels, Limits) else repr(limit)
                return f"channel {ch!r} sample {k} = {v!r}: |value| > {said}"
    return None


ISOLATION_STEPS = 300_000  # per s of isolation_window: ~4x what a diagnosis takes on the slider crank


def batch_step_limit(c: CoreConfig, batch: SensorBatch) -> int:
    """Internal solver steps the batch may take: ``max_solver_steps`` + 100 per sample + 300,000
    per s of ``isolation_window`` (a diagnosis replays that window a few dozen times; on the
    slider crank a 0.1 s window took up to 6,800 steps)."""
    return c.max_solver_steps + 100 * batch.n + round(ISOLATION_STEPS * c.isolation_window)


def check_param(c: CoreConfig, mech: Mechanism, name: str, value: float) -> None:
    """Raise ``ValueError`` (naming the parameter, its value and the allowed range) for an
    implausible ``set_param`` value."""
    if not math.isfinite(value):
        raise ValueError(f"set_param {name}: value {value!r} is not a finite number")
    if name in c.param_limits:
        low, high = (float(v) for v in c.param_limits[name])
        how = "[core] param_limits"
    elif name in TUNABLE:
        low, high = SOLVER_LIMITS[name]
        if name == "solver.max_step" and value == 0.0:
            return  # 0: no limit
        how = "the twin's plausible solver settings"
    else:
        table = model_parameters(mech)
        if name not in table:
            return  # the model names it as unknown, with the list of parameters
        base = float(table[name][0].value)
        f = c.param_factor
        low, high = (base / f, base * f) if base > 0 else (base * f, base / f) if base < 0 else \
            (-(c.input_limit or 1e6), c.input_limit or 1e6)
        how = f"within a factor {f!r} of the mechanism file's {base!r} ([core] param_factor)"
    if not low <= value <= high:
        raise ValueError(f"set_param {name} = {value!r} is outside its plausible range "
                         f"[{low!r}, {high!r}] ({how})")


def problem_text(exc: BaseException) -> str:
    """The whole problem text of an exception (every line), bounded to ``MAX_DETAIL`` characters."""
    text = str(exc) or type(exc).__name__
    if not isinstance(exc, ValueError | TypeError | KeyError):
        text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= MAX_DETAIL else text[:MAX_DETAIL - 14] + " … (truncated)"
