"""An in-memory copy of a :class:`~mbsd_twin.simulation.simulator.Simulator`'s state (``Simulator.snapshot``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..solvers.dynamics import SolverOptions


@dataclass(frozen=True, eq=False)
class Snapshot:
    """Everything :meth:`Simulator.get_state` holds, kept in memory for :meth:`Simulator.restore`:
    the time ``time`` [s], the integrator state (backend-specific, copied), the inputs, the energy
    baseline ``e0`` [J] (the total energy ``energy.balance_error`` is measured from), the solver
    options and the fixed-parameter overrides. It belongs to one mechanism (``model``, the
    Simulator's fingerprint); restoring it elsewhere is refused."""

    model: str
    time: float
    options: SolverOptions
    overrides: tuple[tuple[str, float], ...]
    inputs: tuple[tuple[str, float], ...]
    e0: float
    stepper: Any
