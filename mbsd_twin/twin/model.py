"""The model side of the twin: a :class:`~mbsd_twin.Simulator` re-initialised from measurements.

A re-synchronisation imposes the measured angle and speed of the synchronised body with
:meth:`Simulator.set_configuration`: every other coordinate and velocity follows from the
constraints, moved as little as possible from the current simulated state (so the solution stays
on the same assembly branch). A new Simulator is built only at the first sync and after a
parameter change.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..model.model import Mechanism
from ..simulation.ports import TUNABLE, apply_parameters
from ..simulation.simulator import Simulator
from ..solvers.dynamics import SolverOptions


def wrap_angle(x: float) -> float:
    """x wrapped to (−π, π]."""
    y = math.remainder(x, 2.0 * math.pi)
    return math.pi if y == -math.pi else y


def tuned(options: SolverOptions, name: str, value: float) -> SolverOptions:
    """``options`` with the tunable solver setting ``name`` (``solver.rtol``, ``solver.max_step``)
    changed; ValueError naming the problem."""
    key = name.split(".")[1]
    change: dict[str, Any] = {key: math.inf if key == "max_step" and value <= 0 else float(value)}
    opts = dataclasses.replace(options, **change)
    if opts.problems():
        raise ValueError("; ".join(opts.problems()))
    return opts


class ModelRunner:
    """A Simulator plus what the twin needs around it: parameters, re-sync and block stepping."""

    def __init__(self, mech: Mechanism, body: str, options: SolverOptions) -> None:
        self.base, self.body = mech, body
        self.options = dataclasses.replace(options, initial_velocity="project")
        self.params: dict[str, float] = {}
        self.sim: Simulator | None = None
        self.t_offset = 0.0  # rig time of simulator time 0
        self._stale = True  # parameters or options changed since the Simulator was built

    # ------------------------------------------------------------ parameters
    def set_param(self, name: str, value: float) -> None:
        """Change a model parameter (kept across re-syncs) or a tunable solver setting."""
        if name in TUNABLE:
            self.options = tuned(self.options, name, value)
        else:
            apply_parameters(self.base, {**self.params, name: float(value)})  # validates
            self.params[name] = float(value)
        self._stale = True

    def mechanism(self) -> Mechanism:
        """The base mechanism with the parameters changed so far."""
        return apply_parameters(self.base, self.params) if self.params else self.base

    # ---------------------------------------------------------------- resync
    def resync(self, t_rig: float, angle: float, speed: float) -> None:
        """Continue from rig time ``t_rig`` with the synchronised body at ``angle`` [rad] turning at
        ``speed`` [rad/s]; everything else follows from the constraints."""
        if self.sim is None or self._stale:
            self.sim = Simulator(self.mechanism(), self.options, t0=0.0)
            self.t_offset, self._stale = float(t_rig), False
        self.sim.set_configuration({f"{self.body}.theta": float(angle)}, {f"{self.body}.omega": float(speed)},
                                   time=float(t_rig) - self.t_offset)

    # -------------------------------------------------------------- stepping
    def advance(self, t_rig: float, inputs: dict[str, float]) -> dict[str, float]:
        """Hold ``inputs`` from the current time to rig time ``t_rig``; the outputs there."""
        self.set_inputs(inputs)
        assert self.sim is not None
        self.sim.advance_to(t_rig - self.t_offset)
        return self.sim.outputs()

    def set_inputs(self, inputs: dict[str, float]) -> None:
        """Input values at the current instant (reactions and accelerations feel them at once)."""
        assert self.sim is not None, "resync first"
        for name, value in inputs.items():
            self.sim.set_input(name, value)

    def outputs(self) -> dict[str, float]:
        assert self.sim is not None
        return self.sim.outputs()
