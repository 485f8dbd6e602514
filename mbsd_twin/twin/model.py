"""The model side of the twin: a :class:`~mbsd_twin.Simulator` re-initialised from measurements.

The engine has no "set pose" API, so a re-synchronisation builds a new Simulator (public API
only): the measured angle and speed of the synchronised body become an ``angle`` driver with a
:class:`~mbsd_twin.ConstantSpeed` profile on a copy of the mechanism; the kinematic analysis of that
DOF-0 copy gives a consistent pose and velocity of every body, which are written into the free
mechanism's initial guesses (``dataclasses.replace``) and the Simulator starts there (with
``initial_velocity="project"`` as a guard). The assembly guess is the current simulated pose, so
the solution stays on the same assembly branch.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..analysis import kinematics
from ..dynamics import SolverOptions
from ..model import Driver, Mechanism
from ..ports import TUNABLE, apply_parameters
from ..profiles import ConstantSpeed
from ..simulator import Simulator

_RESYNC_DRIVER = "__twin_resync__"


def wrap_angle(x: float) -> float:
    """x wrapped to (−π, π]."""
    y = math.remainder(x, 2.0 * math.pi)
    return math.pi if y == -math.pi else y


def _with_pose(mech: Mechanism, pose: dict[str, float]) -> Mechanism:
    bodies = tuple(dataclasses.replace(
        b, position=(pose[f"{b.name}.x"], pose[f"{b.name}.y"]), angle=pose[f"{b.name}.theta"],
        velocity=(pose.get(f"{b.name}.vx", 0.0), pose.get(f"{b.name}.vy", 0.0)),
        omega=pose.get(f"{b.name}.omega", 0.0)) for b in mech.bodies)
    return dataclasses.replace(mech, bodies=bodies)


class ModelRunner:
    """A Simulator plus what the twin needs around it: parameters, re-sync and block stepping."""

    def __init__(self, mech: Mechanism, body: str, options: SolverOptions) -> None:
        self.base, self.body = mech, body
        self.options = dataclasses.replace(options, initial_velocity="project")
        self.params: dict[str, float] = {}
        self.sim: Simulator | None = None
        self.t_offset = 0.0  # rig time of simulator time 0

    # ------------------------------------------------------------ parameters
    def set_param(self, name: str, value: float) -> None:
        """Change a model parameter (kept across re-syncs) or a tunable solver setting."""
        if name in TUNABLE:
            key = name.split(".")[1]
            v = math.inf if key == "max_step" and value <= 0 else float(value)
            opts = dataclasses.replace(self.options, **{key: v})
            if opts.problems():
                raise ValueError("; ".join(opts.problems()))
            self.options = opts
        else:
            apply_parameters(self.base, {**self.params, name: float(value)})  # validates
            self.params[name] = float(value)

    # ---------------------------------------------------------------- resync
    def _current_pose(self) -> dict[str, float]:
        if self.sim is None:
            return {f"{b.name}.{k}": v for b in self.base.bodies
                    for k, v in (("x", b.position[0]), ("y", b.position[1]), ("theta", b.angle))}
        return self.sim.outputs()

    def resync(self, t_rig: float, angle: float, speed: float) -> None:
        """Start a new Simulator at rig time ``t_rig`` with the synchronised body at ``angle`` [rad]
        turning at ``speed`` [rad/s]; everything else follows from the constraints."""
        mech = apply_parameters(self.base, self.params) if self.params else self.base
        guess = dict(self._current_pose())
        guess[f"{self.body}.theta"] = angle
        guessed = _with_pose(mech, guess)
        driven = dataclasses.replace(guessed, drivers=(*guessed.drivers, Driver(
            _RESYNC_DRIVER, "angle", (self.body,), ConstantSpeed(speed=float(speed), start=float(angle)))))
        res = kinematics(driven, np.array([0.0]))
        pose = {name: float(res[name][0]) for name in res.columns if name != "time"}
        self.t_offset = float(t_rig)
        self.sim = Simulator(_with_pose(mech, pose), self.options, t0=0.0)

    # -------------------------------------------------------------- stepping
    def advance(self, t_rig: float, inputs: dict[str, float]) -> dict[str, float]:
        """Hold ``inputs`` from the current time to rig time ``t_rig``; the outputs there."""
        assert self.sim is not None, "resync first"
        for name, value in inputs.items():
            self.sim.set_input(name, value)
        self.sim.advance_to(t_rig - self.t_offset)
        return self.sim.outputs()

    def outputs(self) -> dict[str, float]:
        assert self.sim is not None
        return self.sim.outputs()
