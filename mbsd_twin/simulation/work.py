"""A bound on the solver work of a block of calls (one sensor batch of the twin).

Inside :func:`work_limit`, every integration of any :class:`~mbsd_twin.Simulator` (``advance_to``,
``advance_held`` and the compiled calls of the state estimator through ``buffers``) adds its accepted
internal steps to the block's :class:`WorkMeter`; once they exceed the limit the call that went over
raises :class:`WorkLimitExceeded`, and so does every later one in the block. The count is
deterministic (the same calls take the same steps), unlike a wall-clock limit. A compiled call may
take at most the steps the block has left (its per-call ``SolverOptions.max_steps`` is lowered for
the call); a numpy-path call at most its own ``max_steps``. The compiled stepper's count runs on
across re-initialisations; a call that returns the integrator to an earlier snapshot (the
estimator's finite-difference runs) shows only the steps after the last return, so the count is a
lower bound there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


class WorkLimitExceeded(RuntimeError):
    """The solver work of a block exceeded its limit (not a :class:`SolverFailure`: the model did
    not fail, the block was too expensive to finish)."""


@dataclass
class WorkMeter:
    """Internal steps taken in the block (``used``) against ``limit``; ``exceeded`` stays set once
    the limit was passed, also when a caller swallowed the exception."""

    limit: float
    used: int = 0
    exceeded: bool = False
    capped: list[Any] = field(default_factory=list)  # compiled steppers whose per-call limit was lowered

    def check(self) -> None:
        if self.exceeded:
            raise WorkLimitExceeded(f"solver work limit reached: {self.used} internal steps, limit {self.limit:g}")

    def charge(self, before: int, after: int) -> None:
        """Charge the steps of a call from a stepper's counts before and after it (a count that went
        down was returned to an earlier snapshot in the call: nothing known, nothing charged)."""
        self.used += max(0, after - before)
        if self.used > self.limit:
            self.exceeded = True
            self.check()


_METER: ContextVar[WorkMeter | None] = ContextVar("mbsd_twin_work_meter", default=None)


def meter() -> WorkMeter | None:
    """The meter of the enclosing :func:`work_limit` block (None outside one)."""
    return _METER.get()


@contextmanager
def work_limit(steps: float) -> Iterator[WorkMeter]:
    """Integrations inside the block may take at most ``steps`` internal steps together (inf: no
    limit, only counted); the meter tells how many they took."""
    m = WorkMeter(float(steps))
    token = _METER.set(m)
    try:
        yield m
    finally:
        _METER.reset(token)
        for stepper in m.capped:  # also after a call that raised between open and close
            stepper._ob[5] = stepper._own_max_steps


def metered(stepper: Any, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, its internal steps (``stepper.steps`` after − before) charged to the
    enclosing meter, if any; refused at once when the meter is already exceeded. A compiled
    stepper's steps per call are capped at what the meter has left (:func:`open_call`)."""
    m = _METER.get()
    if m is None:
        return call(*args)
    mark = open_call(m, stepper)
    try:
        return call(*args)
    finally:
        close_call(m, stepper, mark)


def open_call(m: WorkMeter, stepper: Any) -> tuple[int, float, float]:
    """Before a metered call: refuse when exceeded; cap a compiled stepper's steps per call
    (``SolverOptions.max_steps``, its option array's slot 5) at what is left. The mark for
    :func:`close_call`: steps before, the cap, the stepper's own limit."""
    m.check()
    ob = getattr(stepper, "_ob", None)
    if ob is None:
        return stepper.steps, math.inf, math.inf
    own = getattr(stepper, "_own_max_steps", None)
    if own is None:
        own = stepper._own_max_steps = float(ob[5])
    cap = float(max(1.0, min(own, m.limit - m.used)))
    if cap < own:
        ob[5] = cap
        m.capped.append(stepper)
    return stepper.steps, cap, own


def close_call(m: WorkMeter, stepper: Any, mark: tuple[int, float, float]) -> None:
    """After a metered call: the stepper's own limit back; its steps charged, and all that was
    left when it ran into the cap."""
    before, cap, own = mark
    ob = getattr(stepper, "_ob", None)
    if ob is not None:
        ob[5] = own
    after = stepper.steps
    if after - before >= cap and cap < own:
        m.charge(0, int(cap) + (1 if m.used + cap <= m.limit else 0))
    m.charge(before, after)
