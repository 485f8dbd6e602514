"""The ``cam`` joint: two parameterised curves in tangent contact (3 equations, 2 extra coordinates).

Body i carries the curve p_i(s1), body j the curve p_j(s2), both in their body frames (see
``surfaces``). The surface parameters s1, s2 are extra coordinates appended after the body
coordinates (``<joint>.s1``, ``<joint>.s2``); they carry no mass. With a_k = A(θ_k)·p_k,
T_k = A(θ_k)·p_k', K_k = A(θ_k)·p_k'', L_k = A(θ_k)·p_k''' (world vectors):

    C[0:2] = r_i + a_i − r_j − a_j          (the contact points coincide)
    C[2]   = T_i × T_j                       (the tangents are parallel)

Jacobian columns (x_i, y_i, θ_i, x_j, y_j, θ_j, s1, s2):

    rows x, y: [I, R90·a_i, −I, −R90·a_j, T_i, −T_j]
    row  t:    [0, 0, −T_i·T_j, 0, 0, T_i·T_j, K_i × T_j, T_i × K_j]

γ = −(velocity-quadratic part of C̈):  for the point rows the part of P̈_k is
−ω_k²·a_k + 2ω_k·ṡ_k·R90·T_k + ṡ_k²·K_k; for the tangency row it is
T̈_i×T_j + 2·Ṫ_i×Ṫ_j + T_i×T̈_j with Ṫ_k = ω_k·R90·T_k + ṡ_k·K_k and
T̈_k = −ω_k²·T_k + 2ω_k·ṡ_k·R90·K_k + ṡ_k²·L_k.

The saddle-point matrix stays non-singular: with the bodies held still the constraints allow
ṡ1 = ṡ2 = 0 only, unless the curvatures are equal and opposite (conformal contact, e.g. a line on
a line), which is not a valid cam pair. The contact force −Cqᵀλ is then along the common normal.

The compiled path has its own scalar version of these rows and of the curves (``nb_joints``; it
solves the massless parameters by reducing the three rows to the contact's normal equation); this
vectorised version is kept, written independently, as the check the tests compare it with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..model.model import GROUND, Joint, Mechanism
from ..model.surfaces import Surface, closest_pair
from . import kernels as kn

F = NDArray[Any]
Idx = NDArray[np.intp]


def _cross(a: F, b: F) -> F:
    return np.asarray(a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0])


def _r90(a: F) -> F:
    return np.stack([-a[..., 1], a[..., 0]], axis=-1)


def _dot(a: F, b: F) -> F:
    return np.asarray((a * b).sum(axis=-1))


class CamContact(kn.Kernel):
    """Three rows per cam joint; see the module docstring."""

    def __init__(self, owners: Sequence[str], col_i: Idx, col_j: Idx, col_s: Idx,
                 surfaces: Sequence[tuple[Surface, Surface]]) -> None:
        self.col_i, self.col_j, self.col_s, self.surfaces = col_i, col_j, col_s, list(surfaces)
        self.rows = [kn.Row(o, f"{o}[{k}]") for o in owners for k in ("x", "y", "tangent")]
        cols = np.concatenate([kn._body_cols(col_i, col_j), col_s], axis=1)
        self.cols = np.repeat(cols, 3, axis=0)

    def _curves(self, fr: kn.Frame) -> tuple[tuple[F, F, F, F], tuple[F, F, F, F], F, F]:
        """World (a, T, K, L) of both curves, each (B, K, 2), and the body positions (B, K, 2)."""
        B, K = fr.qx.shape[0], len(self.surfaces)
        local = np.empty((2, 4, B, K, 2))
        for k, (si, sj) in enumerate(self.surfaces):
            local[0, :, :, k] = np.stack(si.curve(fr.qx[:, self.col_s[k, 0]]))
            local[1, :, :, k] = np.stack(sj.curve(fr.qx[:, self.col_s[k, 1]]))
        world = []
        for side, col in ((0, self.col_i), (1, self.col_j)):
            x, y, _, c, s = kn._pose(fr, col)
            v = local[side]
            w = np.stack([c * v[..., 0] - s * v[..., 1], s * v[..., 0] + c * v[..., 1]], axis=-1)
            world.append(((w[0], w[1], w[2], w[3]), np.stack([x, y], axis=-1)))
        (wi, ri), (wj, rj) = world
        return wi, wj, ri, rj

    def evaluate(self, fr: kn.Frame, t: F) -> tuple[F, F, F]:
        (ai, Ti, Ki, _), (aj, Tj, Kj, _), ri, rj = self._curves(fr)
        B, K = ri.shape[:2]
        C = np.empty((B, K, 3))
        C[..., :2] = ri + ai - rj - aj
        C[..., 2] = _cross(Ti, Tj)
        J = np.zeros((B, K, 3, 8))
        for r in range(2):
            J[..., r, r], J[..., r, 3 + r] = 1.0, -1.0
            J[..., r, 2] = _r90(ai)[..., r]
            J[..., r, 5] = -_r90(aj)[..., r]
            J[..., r, 6], J[..., r, 7] = Ti[..., r], -Tj[..., r]
        tt = _dot(Ti, Tj)
        J[..., 2, 2], J[..., 2, 5] = -tt, tt
        J[..., 2, 6], J[..., 2, 7] = _cross(Ki, Tj), _cross(Ti, Kj)
        return C.reshape(B, 3 * K), J.reshape(B, 3 * K, 8), np.zeros((B, 3 * K))

    def gamma(self, fr: kn.Frame, vx: F, t: F) -> F:
        (ai, Ti, Ki, Li), (aj, Tj, Kj, Lj), _, _ = self._curves(fr)
        wi, wj = vx[:, self.col_i + 2][..., None], vx[:, self.col_j + 2][..., None]
        si, sj = vx[:, self.col_s[:, 0]][..., None], vx[:, self.col_s[:, 1]][..., None]

        def point_vv(a: F, T: F, K: F, w: F, sd: F) -> F:
            return np.asarray(-(w**2) * a + 2 * w * sd * _r90(T) + sd**2 * K)

        def tangent_rates(T: F, K: F, L: F, w: F, sd: F) -> tuple[F, F]:
            return w * _r90(T) + sd * K, -(w**2) * T + 2 * w * sd * _r90(K) + sd**2 * L

        g = np.empty((ai.shape[0], ai.shape[1], 3))
        g[..., :2] = -(point_vv(ai, Ti, Ki, wi, si) - point_vv(aj, Tj, Kj, wj, sj))
        dTi, ddTi = tangent_rates(Ti, Ki, Li, wi, si)
        dTj, ddTj = tangent_rates(Tj, Kj, Lj, wj, sj)
        g[..., 2] = -(_cross(ddTi, Tj) + 2 * _cross(dTi, dTj) + _cross(Ti, ddTj))
        return g.reshape(g.shape[0], -1)


def cam_joints(mech: Mechanism) -> list[Joint]:
    return [j for j in mech.joints if j.type == "cam"]


def _pose(mech: Mechanism, name: str) -> tuple[float, float, float]:
    if name == GROUND:
        return 0.0, 0.0, 0.0
    b = mech.body(name)
    return b.position[0], b.position[1], b.angle


def extra_coordinates(mech: Mechanism) -> tuple[list[str], list[float]]:
    """Names (``<joint>.s1``, ``<joint>.s2``) and initial guesses of the cam joints' parameters:
    ``parameters`` when given, else the closest pair of points at the bodies' initial poses."""
    names: list[str] = []
    guesses: list[float] = []
    for j in cam_joints(mech):
        names += [f"{j.name}.s1", f"{j.name}.s2"]
        if j.parameters is not None:
            guesses += [float(j.parameters[0]), float(j.parameters[1])]
        else:
            guesses += list(closest_pair(j.surfaces[0], j.surfaces[1], _pose(mech, j.bodies[0]),
                                         _pose(mech, j.bodies[1])))
    return names, guesses


def cam_kernel(mech: Mechanism, col: dict[str, int], first_extra: int) -> CamContact | None:
    """The kernel of every cam joint; their parameters sit at columns first_extra, first_extra + 1, …"""
    cams = cam_joints(mech)
    if not cams:
        return None
    col_i = np.array([col[j.bodies[0]] for j in cams], dtype=np.intp)
    col_j = np.array([col[j.bodies[1]] for j in cams], dtype=np.intp)
    col_s = first_extra + np.arange(2 * len(cams), dtype=np.intp).reshape(-1, 2)
    return CamContact([j.name for j in cams], col_i, col_j, col_s,
                      [(j.surfaces[0], j.surfaces[1]) for j in cams])
