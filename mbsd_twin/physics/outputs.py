"""Named outputs: the one list of result columns shared by CSV files, Simulator ports, FMU
variables and MQTT payloads — each with its unit and sign convention.

Conventions
- ``<body>.x, .y`` [m], ``.theta`` [rad]: the body's reference point and angle, world frame, angle
  counter-clockwise from +x; ``.vx, .vy`` [m/s], ``.omega`` [rad/s]; ``.ax, .ay`` [m/s²],
  ``.alpha`` [rad/s²].
- ``<joint>.fx, .fy`` [N]: force the joint exerts on its **second** body, world axes.
- ``<joint>.mz`` [N·m]: reaction moment on the second body about the joint point (the joint's
  second point), counter-clockwise positive (prismatic, fixed; the torque for a gear).
- ``<driver>.effort``: generalised force the actuator applies to the driven body: torque about +z
  [N·m] (angle), force along +x/+y [N] (coordinate), force pushing the points apart [N] (distance).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from .output_spec import OutputSpec
from .system import JointInfo, System

if TYPE_CHECKING:
    from ..solvers.dynamics import Evaluation

F = NDArray[Any]

_BODY_CHANNELS = (
    ("x", "m", "x of the reference point, world frame"),
    ("y", "m", "y of the reference point, world frame"),
    ("theta", "rad", "angle, counter-clockwise from world +x"),
    ("vx", "m/s", "x velocity of the reference point"),
    ("vy", "m/s", "y velocity of the reference point"),
    ("omega", "rad/s", "angular velocity, counter-clockwise positive"),
    ("ax", "m/s2", "x acceleration of the reference point"),
    ("ay", "m/s2", "y acceleration of the reference point"),
    ("alpha", "rad/s2", "angular acceleration, counter-clockwise positive"),
)
_REACTION = {
    "fx": ("N", "x force the joint exerts on its second body ({b}), world axes"),
    "fy": ("N", "y force the joint exerts on its second body ({b}), world axes"),
    "mz": ("N.m", "moment the joint exerts on its second body ({b}) about the joint point, CCW positive"),
}


def kinematic_specs(system: System) -> list[OutputSpec]:
    return [OutputSpec(f"{b}.{ch}", unit, desc) for b in system.body_names
            for ch, unit, desc in _BODY_CHANNELS]


def reaction_specs(system: System) -> list[OutputSpec]:
    out: list[OutputSpec] = []
    joints = {j.name: j for j in system.mechanism.joints}  # by name: one pass, not one search per joint
    for j in system.joints:
        second = joints[j.name].bodies[1]
        for c in j.components:
            unit, desc = _REACTION[c]
            out.append(OutputSpec(f"{j.name}.{c}", unit, desc.format(b=second)))
    for d in system.drivers:
        unit = d.unit.replace("·", ".")
        what = {"N.m": "torque about +z (CCW positive)", "N": "force"}[unit]
        out.append(OutputSpec(f"{d.name}.effort", unit, f"actuator {what} applied by driver {d.name}"))
    return out


def kinematic_columns(system: System, q: F, v: F, a: F) -> dict[str, F]:
    cols: dict[str, F] = {}
    for k, b in enumerate(system.body_names):
        for arr, names in ((q, ("x", "y", "theta")), (v, ("vx", "vy", "omega")), (a, ("ax", "ay", "alpha"))):
            for c, nm in enumerate(names):
                cols[f"{b}.{nm}"] = arr[:, 3 * k + c]
    return cols


def reaction_columns(system: System, q: F, Cq: F, lam: F) -> dict[str, F]:
    """Joint reactions on the second body and driver efforts from the multipliers λ (B, m)."""
    return reaction_columns_from(system, q, [_constraint_force(system, j, Cq, lam) for j in system.joints], lam)


def reaction_columns_from(system: System, q: F, g: Sequence[F], lam: F) -> dict[str, F]:
    """:func:`reaction_columns` from each joint's generalised constraint force ``g`` (B, 3) on the
    columns of its reported body (:func:`_constraint_force`; the sparse sweep forms them without
    a dense Cq)."""
    cols: dict[str, F] = {}
    for j, gj in zip(system.joints, g, strict=True):
        F_, M = _reaction_on_second(system, j, q, gj)
        vals = {"fx": F_[:, 0], "fy": F_[:, 1], "mz": M}
        for c in j.components:
            cols[f"{j.name}.{c}"] = vals[c]
    for d in system.drivers:
        cols[f"{d.name}.effort"] = -lam[:, d.row]
    return cols


def _constraint_force(system: System, j: JointInfo, Cq: F, lam: F) -> F:
    """Generalised constraint force −Cqᵀλ (B, 3) of the joint's rows on the columns of the second
    body (of the first when the second is ground)."""
    rows = list(j.rows)
    col = j.col_j if j.col_j < system.n_coord else j.col_i
    return -np.einsum("brk,br->bk", Cq[:, rows, col:col + 3], lam[:, rows])


def _reaction_on_second(system: System, j: JointInfo, q: F, g: F) -> tuple[F, F]:
    """The joint's generalised constraint force ``g`` reduced to a force and a moment about the
    joint point on the second body (from the first body by action–reaction when the second body
    is ground)."""
    n = system.n_coord
    on_second = j.col_j < n
    col = j.col_j if on_second else j.col_i
    force, m_ref = g[:, :2], g[:, 2]
    th = q[:, col + 2]
    c, s = np.cos(th), np.sin(th)
    if on_second:
        px, py = j.point_j
        arm = np.stack([c * px - s * py, s * px + c * py], axis=1)  # joint point − reference point
    else:
        arm = np.asarray(j.point_j, float) - q[:, col:col + 2]  # ground point − first body's ref.
    moment = m_ref - (arm[:, 0] * force[:, 1] - arm[:, 1] * force[:, 0])
    return (force, moment) if on_second else (-force, -moment)


def evaluated_outputs(s: System, t: float, y: F, ev: Evaluation, inputs: dict[str, float],
                      names: list[str], load_names: list[str], e0: float) -> F:
    """Every Simulator output (port order) at time t [s] and state y = [q, v, E_diss, W_in, W_con]
    from the numpy path's evaluation ``ev`` there: kinematics, then ``names`` (the output names
    after the kinematic ones: reactions and efforts first), the energies with the balance counted
    from ``e0`` [J], the residual and the loads' outputs ``load_names``."""
    n = s.n_coord
    q, v = y[:n], y[n:2 * n]
    a, Ve, C = ev.a, float(ev.loads.elastic[0]), s.constraints(q, t)
    cols = reaction_columns(s, q[None], ev.Cq[None], ev.lam[None])
    forces = np.array([cols[name][0] for name in names[:len(cols)]])
    nb3 = 3 * s.n_body  # body coordinates first; any extra coordinates (cam parameters) follow
    kin = np.concatenate([q[:nb3].reshape(-1, 3), v[:nb3].reshape(-1, 3), a[:nb3].reshape(-1, 3)],
                         axis=1).ravel()
    T = float(s.kinetic_energy_batch(q[None], v[None])[0])
    Vg = float(s.gravitational_energy_batch(q[None])[0])
    e_diss, w_in, w_con = (float(x) for x in y[2 * n:2 * n + 3])
    energy = [T, Vg, Ve, T + Vg + Ve, e_diss, w_in, w_con, T + Vg + Ve + e_diss - w_in - w_con - e0,
              float(np.abs(C).max(initial=0.0))]
    extra = s.loads.outputs(q[None], v[None], np.array([t]), inputs) if load_names else {}
    return np.concatenate([kin, forces, energy, [float(extra[name][0]) for name in load_names]])
