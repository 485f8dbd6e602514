"""The ``knife_edge`` joint: rolling without side slip, a nonholonomic (velocity-level) constraint.

A blade at ``points[1]`` of the second body j, rolling along the body-fixed direction ``axis``
(second body's frame), may not move sideways relative to the first body i (usually ``ground``):

    n·(v_P,j − v_P,i) = 0,     n = A(θ_j)·R90·û   (the blade's lateral normal)

with P the blade point, v_P,j = ṙ_j + ω_j·R90·a_j (a_j = A(θ_j)·p_j) and v_P,i the velocity of
body i's material point at P: ṙ_i + ω_i·R90·d (d = P − r_i). The constraint is B(q)·v = 0 with

    B = [−n, −n·R90·d, n, n·R90·a_j]    on (x_i, y_i, θ_i, x_j, y_j, θ_j)

It is not integrable, so it has no position equation: its row of C is 0 and its row of the
"Jacobian" is B (the saddle-point system, the velocity projection and the DOF count use it as
they use Cq). γ = −Ḃ·v = −(ω_j·(R90·n)·v_rel − ω_j²·n·a_j − ω_i·n·R90·ḋ), with
v_rel = v_P,j − v_P,i and ḋ = ṙ_j + ω_j·R90·a_j − ṙ_i.

Its multiplier is reported as the joint's reaction ``<joint>.fx``, ``.fy``: the lateral force the
blade receives (−Bᵀλ is a force −λ·n at P with no moment about P). Position analyses (kinematic
sweeps of DOF-0 mechanisms) do not apply to nonholonomic mechanisms: use forward dynamics.

The compiled path evaluates the same row one configuration at a time (``nb_joints._knife_edge``);
this vectorised version is kept, written independently, as the check the tests compare it with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..model.model import Mechanism
from . import kernels as kn

F = NDArray[Any]
Idx = NDArray[np.intp]


def _r90(x: F, y: F) -> tuple[F, F]:
    return -y, x


class KnifeEdge(kn.Kernel):
    """One velocity-level row per knife-edge joint."""

    def __init__(self, owners: Sequence[str], col_i: Idx, col_j: Idx, p_j: F, u_j: F) -> None:
        self.col_i, self.col_j, self.p_j = col_i, col_j, p_j
        u = u_j / np.linalg.norm(u_j, axis=1, keepdims=True)
        self.nhat = np.stack([-u[:, 1], u[:, 0]], axis=1)
        self.rows = [kn.Row(o, f"{o}[no-slip]") for o in owners]
        self.cols = kn._body_cols(col_i, col_j)

    def _geometry(self, fr: kn.Frame) -> tuple[F, ...]:
        xi, yi, _, _, _ = kn._pose(fr, self.col_i)
        xj, yj, _, cj, sj = kn._pose(fr, self.col_j)
        ajx, ajy = kn._rotate(cj, sj, self.p_j)
        nx, ny = kn._rotate(cj, sj, self.nhat)
        return ajx, ajy, nx, ny, xj + ajx - xi, yj + ajy - yi

    def evaluate(self, fr: kn.Frame, t: F) -> tuple[F, F, F]:
        ajx, ajy, nx, ny, dx, dy = self._geometry(fr)
        rdx, rdy = _r90(dx, dy)
        rax, ray = _r90(ajx, ajy)
        J = np.stack([-nx, -ny, -(nx * rdx + ny * rdy), nx, ny, nx * rax + ny * ray], axis=-1)
        return np.zeros_like(nx), J, np.zeros_like(nx)

    def gamma(self, fr: kn.Frame, vx: F, t: F) -> F:
        ajx, ajy, nx, ny, dx, dy = self._geometry(fr)
        ci, cj = self.col_i, self.col_j
        wi, wj = vx[:, ci + 2], vx[:, cj + 2]
        ddx = vx[:, cj] - wj * ajy - vx[:, ci]          # ḋ = ṙ_j + ω_j R90 a_j − ṙ_i
        ddy = vx[:, cj + 1] + wj * ajx - vx[:, ci + 1]
        vrx, vry = ddx + wi * dy, ddy - wi * dx          # v_rel = ḋ − ω_i R90 d
        rnx, rny = _r90(nx, ny)
        rdx, rdy = _r90(ddx, ddy)
        bdot_v = wj * (rnx * vrx + rny * vry) - wj**2 * (nx * ajx + ny * ajy) - wi * (nx * rdx + ny * rdy)
        return np.asarray(-bdot_v)


def knife_edge_kernel(mech: Mechanism, col: dict[str, int]) -> KnifeEdge | None:
    joints = [j for j in mech.joints if j.type == "knife_edge"]
    if not joints:
        return None
    return KnifeEdge([j.name for j in joints], np.array([col[j.bodies[0]] for j in joints], dtype=np.intp),
                     np.array([col[j.bodies[1]] for j in joints], dtype=np.intp),
                     np.array([j.points[1] for j in joints], float).reshape(-1, 2),
                     np.array([j.axis for j in joints], float).reshape(-1, 2))
