"""Start values of a mechanism's free coordinates: the parameters ``<body>.<coordinate>_start``.

A mechanism with f degrees of freedom has f *free* coordinates: body coordinates that, held at
given values, fix all the others through the constraints. They are chosen once, at the assembled
initial configuration of the mechanism as written: the body angles first, then the x, then the y
coordinates (bodies in file order), each kept when holding it together with those already kept
still leaves the constraints solvable (it raises the rank of the constraint Jacobian stacked with
the held coordinates' unit rows). Positions are chosen over the position-level rows; speeds over
every velocity row (a knife edge's no-slip row constrains speeds only), so a nonholonomic
mechanism has more free positions than free speeds.

Each free coordinate is a ``fixed`` parameter ``<body>.theta_start`` [rad] (``x_start``,
``y_start`` [m]) and each free speed ``<body>.omega_start`` [rad/s] (``vx_start``, ``vy_start``
[m/s]); their default values are the Simulator's initial state (assembled from the mechanism's
guess, velocities made consistent). Setting one imposes it exactly at the start time, with every
other free coordinate and speed held at its current start value; the remaining coordinates move
onto the constraints as little as possible from the default initial state (least squares,
``Dynamics.constrained_state``), the remaining velocities follow uniquely.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import AssemblyError, PortError
from ..physics.system import System
from ..solvers.dynamics import Dynamics
from ..solvers.sparse_rank import pivot_columns
from .ports import Parameter

F = NDArray[Any]
SUFFIX = "_start"
NO_SLIP = "[no-slip]"  # the label suffix of a knife edge's velocity-only row (physics/nonholonomic)
_SPEED = {"x": "vx", "y": "vy", "theta": "omega"}
_UNITS = {"x": ("m", "m/s"), "y": ("m", "m/s"), "theta": ("rad", "rad/s")}
_WHAT = {"x": "x of the reference point, world frame", "y": "y of the reference point, world frame",
         "theta": "angle, counter-clockwise from world +x"}
_RANK_TOL = 1e-9


def _independent(jac: Any, candidates: list[int]) -> list[int]:
    """The candidate columns that, held one after the other, each raise the rank of ``jac``
    stacked with the held coordinates' unit rows, until the coordinates are all determined.

    Holding a set S of coordinates raises the rank by |S| exactly when the other columns still
    span the columns of ``jac`` (rank [jac; E_S] = |S| + rank jac[:, not S]): the held sets are
    the independent sets of the dual of the column matroid, and the greedy choice in candidate
    order is the complement of the greedy column basis taken in the reverse order, after the
    columns that are never held. One sparse elimination in that order finds it
    (:func:`pivot_columns`) instead of one dense SVD per candidate."""
    chosen = set(candidates)
    others = [k for k in range(jac.shape[1]) if k not in chosen]
    basis = set(pivot_columns(jac, [*others, *reversed(candidates)], _RANK_TOL))
    return [k for k in candidates if k not in basis]


def free_coordinates(system: System, q: F, t: float, rows: F) -> tuple[list[int], list[int]]:
    """(free positions, free speeds): state indices of the body coordinates chosen at the
    configuration ``q``, time ``t`` [s], over the independent constraint ``rows``."""
    nb = system.n_body
    candidates = [3 * b + 2 for b in range(nb)] + [3 * b for b in range(nb)] + [3 * b + 1 for b in range(nb)]
    jac = system.evaluate_sparse(q, t)[1][np.asarray(rows, dtype=np.intp)]  # CSR: only its entries
    holonomic = [k for k, r in enumerate(rows) if not system.constraint_names[int(r)].endswith(NO_SLIP)]
    speeds = _independent(jac, candidates)
    return (speeds if len(holonomic) == len(rows) else _independent(jac[holonomic], candidates)), speeds


def _name(system: System, index: int, speed: bool) -> tuple[str, str, str]:
    """(parameter name, unit, description) of the start value of state coordinate ``index``."""
    body, _, axis = system.coordinate_names[index].rpartition(".")
    unit = _UNITS[axis][1 if speed else 0]
    if speed:
        return (f"{body}.{_SPEED[axis]}{SUFFIX}", unit,
                f"start value of {body}.{_SPEED[axis]} (time derivative of {body}.{axis}); the other "
                "speeds follow from the constraints")
    return (f"{body}.{axis}{SUFFIX}", unit,
            f"start value of {body}.{axis} ({_WHAT[axis]}); the other coordinates follow from the constraints")


class StartValues:
    """The start-value parameters of one model: ``free`` = (position indices, speed indices), as
    chosen by :func:`free_coordinates` on the unmodified mechanism; ``y0`` the model's default
    initial state (positions, velocities, energy integrals)."""

    def __init__(self, system: System, free: tuple[list[int], list[int]], y0: F) -> None:
        self.system, self.y0 = system, y0
        n = system.n_coord
        self.index: dict[str, int] = {}  # parameter name -> index in the state vector y
        self.params: dict[str, Parameter] = {}
        for offset, indices in ((0, free[0]), (n, free[1])):
            for k in indices:
                name, unit, what = _name(system, k, speed=offset > 0)
                self.index[name] = offset + k
                self.params[name] = Parameter(name, unit, what, float(y0[offset + k]), "fixed")

    def parameters(self, overrides: Mapping[str, float]) -> list[Parameter]:
        """The start parameters with their current values (``overrides`` or the default)."""
        return [Parameter(p.name, p.unit, p.description, float(overrides.get(p.name, p.value)), p.variability)
                for p in self.params.values()]

    def check(self, name: str, value: float) -> float:
        v = float(value)
        if not math.isfinite(v):
            raise PortError(f"parameter {name} must be finite, got {value!r}", name=name)
        return v

    def impose(self, dyn: Dynamics, t0: float, overrides: Mapping[str, float]) -> F:
        """The initial state with the start values in ``overrides`` imposed (the default initial
        state when none is given); :class:`AssemblyError` naming them when the constraints
        cannot satisfy them."""
        given = {k: float(v) for k, v in overrides.items() if k in self.index}
        if not given:
            return self.y0
        n = self.system.n_coord
        y = self.y0.copy()
        for name, value in given.items():
            y[self.index[name]] = value
        held = [self.index[name] for name in self.params]
        fixed_q = np.array([k for k in held if k < n], dtype=np.intp)
        fixed_v = np.array([k - n for k in held if k >= n], dtype=np.intp)
        q, v, left = dyn.constrained_state(t0, y[:n], y[n:2 * n], fixed_q, fixed_v)
        if left > 1e-8:
            values = ", ".join(f"{name} = {value!r}" for name, value in given.items())
            raise AssemblyError(f"{self.system.mechanism.source}: the start values {values} cannot be "
                                "reached: the constraints cannot be satisfied with them", residual=left,
                                iterations=30, time=t0, worst=[])
        return np.concatenate([q, v, y[2 * n:]])
