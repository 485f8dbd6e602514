"""Consistent initial velocities, and a report of what had to change.

The velocities a mechanism gives (each body's ``velocity`` and ``omega``, zero where absent; a cam
joint's parameter rates start at zero) must satisfy the velocity constraints Cq·v + Ct = 0: the
joints' and, for a driven mechanism, the drivers' (a driver prescribes a speed the bodies at rest
do not have). ``SolverOptions(initial_velocity=...)`` decides what happens when they do not:

* ``"project"`` (the default): v0 is replaced by the consistent velocity nearest to it — the
  least-squares (minimum Euclidean norm) change, velocities in m/s and rad/s taken as numbers —
  and :class:`InitialVelocityReport` lists every velocity that changed (:class:`VelocityChange`)
  and every constraint row the given velocities violated (:class:`Violation`);
* ``"check"``: :class:`~mbsd_twin.errors.ConsistencyError` names the violated rows, their joints
  or drivers and residuals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import ConsistencyError
from ..physics.system import System

F = NDArray[Any]
CHANGE_TOL = 1e-12  # a velocity that moved by less (relative to 1 + |value|) is reported unchanged
_ANGLE_PARAMETER = ("circle", "polar")  # curve kinds whose parameter is an angle (see docs/mechanism-file.md)
_ROW_UNITS = {"x": "m/s", "y": "m/s", "line": "m/s", "no-slip": "m/s", "angle": "rad/s", "gear": "rad/s"}


@dataclass(frozen=True)
class VelocityChange:
    """One initial velocity moved onto the constraints: ``name`` as the output that shows it
    (``crank.omega``, ``piston.vx``; ``<cam joint>.s1_rate`` for a cam parameter), ``given`` (the
    mechanism's value) and ``value`` (the one used), in ``unit``."""

    name: str
    unit: str
    given: float
    value: float

    @property
    def change(self) -> float:
        return self.value - self.given

    def __str__(self) -> str:
        return f"{self.name} {self.given:.6g} -> {self.value:.6g} {self.unit}"


@dataclass(frozen=True)
class Violation:
    """One velocity-constraint row the given velocities violate: its label (``crank_pin[x]``), the
    joint or driver that owns it, and the residual (Cq·v0 + Ct) of the row in ``unit``."""

    constraint: str
    owner: str
    residual: float
    unit: str

    def __str__(self) -> str:
        return f"{self.constraint} {self.residual:.3g} {self.unit}"


@dataclass(frozen=True)
class InitialVelocityReport:
    """What ``initial_velocity="project"`` changed; both lists are empty when v0 was consistent."""

    changes: tuple[VelocityChange, ...] = ()
    violations: tuple[Violation, ...] = ()

    def summary(self) -> str:
        """One line: the violated joints/drivers and each velocity changed, in units ("" if none)."""
        if not self.changes:
            return ""
        owners = ", ".join(dict.fromkeys(v.owner for v in self.violations))
        return (f"initial velocities made consistent with the constraints of {owners} (least change, "
                f"initial_velocity='project'): {'; '.join(str(c) for c in self.changes)}")


def _parameter_unit(system: System, coordinate: str) -> str:
    """'rad' or 'm': the unit of a cam joint's extra coordinate ``<joint>.s1`` / ``.s2``."""
    joint, _, which = coordinate.rpartition(".")
    surface = system.mechanism.joint(joint).surfaces[int(which[1:]) - 1]
    return "rad" if surface.kind in _ANGLE_PARAMETER else "m"


def velocity_names(system: System) -> list[tuple[str, str]]:
    """(name, unit) of every velocity coordinate, in state order."""
    out = []
    body = {"x": ("vx", "m/s"), "y": ("vy", "m/s"), "theta": ("omega", "rad/s")}
    for k, coordinate in enumerate(system.coordinate_names):
        stem, _, axis = coordinate.rpartition(".")
        if k < 3 * system.n_body:
            out.append((f"{stem}.{body[axis][0]}", body[axis][1]))
        else:
            out.append((f"{coordinate}_rate", f"{_parameter_unit(system, coordinate)}/s"))
    return out


def _row_unit(system: System, label: str, owner: str) -> str:
    """The unit of one row of Cq·v + Ct, from its kind (the suffix of its label)."""
    kind = label.rpartition("[")[2].rstrip("]")
    if kind in _ROW_UNITS:
        return _ROW_UNITS[kind]
    if kind == "drive":
        driver = next(d for d in system.drivers if d.name == owner)
        return "rad/s" if driver.unit == "N·m" else "m/s"
    if kind == "tangent":  # T1 × T2: a curve's tangent is in m per unit of its parameter
        angles = sum(s.kind in _ANGLE_PARAMETER for s in system.mechanism.joint(owner).surfaces)
        return ("1/s", "m/s", "m2/s")[angles]
    return "?"


def violations(system: System, q: F, v: F, t: float, tol: float) -> list[Violation]:
    """The rows of Cq·v + Ct = 0 that (q, v) at time t violates by more than ``tol``, in row order."""
    _, Cq, Ct = system.evaluate_batch(q[None, :], np.array([t]))
    assert Cq is not None
    r = Cq[0] @ v + Ct[0]
    return [Violation(label, owner, float(r[k]), _row_unit(system, label, owner))
            for k, (label, owner) in enumerate(zip(system.constraint_names, system.constraint_owners, strict=True))
            if abs(r[k]) > tol]


def changes(system: System, given: F, used: F) -> list[VelocityChange]:
    """Every velocity that differs between ``given`` and ``used``, in state order."""
    return [VelocityChange(name, unit, float(g), float(u))
            for (name, unit), g, u in zip(velocity_names(system), given, used, strict=True)
            if abs(u - g) > CHANGE_TOL * (1.0 + abs(u))]


def inconsistent(system: System, found: list[Violation], projected: bool = False) -> ConsistencyError:
    """The error for violated velocity constraints, naming the worst rows and their owners."""
    worst = sorted(found, key=lambda v: -abs(v.residual))
    owners = list(dict.fromkeys(v.owner for v in worst))
    residual = abs(worst[0].residual)
    names = ", ".join(owners)
    head = (f"no velocity satisfies every velocity constraint: those of {names} are still violated after the "
            "least-squares projection (they contradict the others)"
            if projected else f"the initial velocities violate the velocity constraints of {names}")
    advice = ("" if projected else "; give consistent body 'velocity'/'omega' values or use "
              "initial_velocity='project' (the default; --initial-velocity project on the command line) "
              "for the nearest consistent velocities")
    return ConsistencyError(
        f"{system.mechanism.source}: {head} (max |Cq·v0 + Ct| = {residual:.3g}; "
        f"largest: {', '.join(str(v) for v in worst[:5])}){advice}",
        residual=residual, worst=[(v.constraint, v.residual) for v in worst], joints=owners)
