"""Vectorised constraint kernels.

Each kernel evaluates one kind of constraint row for *all* its instances and a whole batch of
configurations at once: ``qx`` has shape (B, n + 3) — the coordinates with the ground's three
(zero) coordinates appended — and ``t`` shape (B,). A kernel returns

- ``C``  (B, R): residuals,
- ``J``  (B, R, K): the non-zero Jacobian entries, at extended columns ``self.cols`` (R, K),
- ``Ct`` (B, R): ∂C/∂t,
- ``gamma(qx, vx, t)`` (B, R): γ = −(d(Cq)/dt · v) − Ctt.

Joint types are compositions of these rows (revolute = coincident points; prismatic = relative
angle + point on line; fixed = coincident points + relative angle; gear = gear ratio).
Notation: for body i, ``c_i, s_i`` = cos θ_i, sin θ_i; ``a_i`` = A(θ_i)·s_i, the body-fixed
attachment vector in world axes; ``R90`` rotates by +90°: R90(x, y) = (−y, x).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..model.profiles import Profile

F = NDArray[Any]
Idx = NDArray[np.intp]


@dataclass(frozen=True)
class Row:
    """One row of a kernel: the owning joint/driver and a label for messages."""

    owner: str
    label: str


class Frame:
    """Extended coordinates ``qx`` (B, n + 3) with cos/sin of every body angle, computed once per
    evaluation and shared by all kernels; body b (column 3b) reads slot b, ground (column n) slot
    n // 3.

    ``n_body``: give it when extra (non-body) coordinates sit between the bodies and the ground
    columns; the ground's slot then holds angle 0 explicitly."""

    __slots__ = ("qx", "c", "s")

    def __init__(self, qx: F, n_body: int | None = None) -> None:
        if n_body is None:
            th = qx[:, 2::3]
        else:
            th = np.zeros((qx.shape[0], (qx.shape[1] - 3) // 3 + 1))
            th[:, :n_body] = qx[:, 2:3 * n_body:3]
        self.qx, self.c, self.s = qx, np.cos(th), np.sin(th)


def _pose(fr: Frame, col: Idx) -> tuple[F, F, F, F, F]:
    b = col // 3
    qx = fr.qx
    return qx[:, col], qx[:, col + 1], qx[:, col + 2], fr.c[:, b], fr.s[:, b]


def _rotate(c: F, s: F, p: F) -> tuple[F, F]:
    """A(θ)·p for body-fixed vectors p (K, 2); returns world components, each (B, K)."""
    return c * p[:, 0] - s * p[:, 1], s * p[:, 0] + c * p[:, 1]


def _body_cols(col_i: Idx, col_j: Idx) -> Idx:
    """Columns (K, 6): x, y, θ of body i then of body j."""
    return np.stack([col_i, col_i + 1, col_i + 2, col_j, col_j + 1, col_j + 2], axis=1)


def _separation(fr: Frame, col_i: Idx, col_j: Idx, s_i: F, s_j: F) -> tuple[F, ...]:
    """a_i, a_j (world attachment vectors) and d = P_j − P_i, as components (B, K)."""
    xi, yi, _, ci, si = _pose(fr, col_i)
    xj, yj, _, cj, sj = _pose(fr, col_j)
    aix, aiy = _rotate(ci, si, s_i)
    ajx, ajy = _rotate(cj, sj, s_j)
    return aix, aiy, ajx, ajy, xj + ajx - xi - aix, yj + ajy - yi - aiy


def _separation_rate(vx: F, col_i: Idx, col_j: Idx, a: tuple[F, ...]) -> tuple[F, F]:
    """ḋ = ṙ_j + ω_j·R90·a_j − ṙ_i − ω_i·R90·a_i for a = (a_ix, a_iy, a_jx, a_jy)."""
    aix, aiy, ajx, ajy = a[:4]
    wi, wj = vx[:, col_i + 2], vx[:, col_j + 2]
    return (vx[:, col_j] - wj * ajy - vx[:, col_i] + wi * aiy,
            vx[:, col_j + 1] + wj * ajx - vx[:, col_i + 1] - wi * aix)


class Kernel:
    rows: list[Row]
    cols: Idx

    def evaluate(self, fr: Frame, t: F) -> tuple[F, F, F]:
        raise NotImplementedError

    def gamma(self, fr: Frame, vx: F, t: F) -> F:
        raise NotImplementedError


class CoincidentPoints(Kernel):
    """C = P_i − P_j (2 rows): point s_i on body i and point s_j on body j coincide."""

    def __init__(self, owners: Sequence[str], col_i: Idx, col_j: Idx, s_i: F, s_j: F) -> None:
        self.col_i, self.col_j, self.s_i, self.s_j = col_i, col_j, s_i, s_j
        self.rows = [Row(o, f"{o}[{k}]") for o in owners for k in ("x", "y")]
        cols = _body_cols(col_i, col_j)
        self.cols = np.repeat(cols, 2, axis=0)

    def evaluate(self, fr: Frame, t: F) -> tuple[F, F, F]:
        xi, yi, _, ci, si = _pose(fr, self.col_i)
        xj, yj, _, cj, sj = _pose(fr, self.col_j)
        aix, aiy = _rotate(ci, si, self.s_i)
        ajx, ajy = _rotate(cj, sj, self.s_j)
        B, K = xi.shape
        C = np.empty((B, K, 2))
        C[..., 0] = xi + aix - xj - ajx
        C[..., 1] = yi + aiy - yj - ajy
        J = np.zeros((B, K, 2, 6))
        J[..., 0, 0] = J[..., 1, 1] = 1.0
        J[..., 0, 3] = J[..., 1, 4] = -1.0
        J[..., 0, 2], J[..., 0, 5] = -aiy, ajy
        J[..., 1, 2], J[..., 1, 5] = aix, -ajx
        return C.reshape(B, 2 * K), J.reshape(B, 2 * K, 6), np.zeros((B, 2 * K))

    def gamma(self, fr: Frame, vx: F, t: F) -> F:
        _, _, _, ci, si = _pose(fr, self.col_i)
        _, _, _, cj, sj = _pose(fr, self.col_j)
        wi2, wj2 = vx[:, self.col_i + 2] ** 2, vx[:, self.col_j + 2] ** 2
        aix, aiy = _rotate(ci, si, self.s_i)
        ajx, ajy = _rotate(cj, sj, self.s_j)
        g = np.stack([aix * wi2 - ajx * wj2, aiy * wi2 - ajy * wj2], axis=-1)
        return g.reshape(g.shape[0], -1)


class RelativeAngle(Kernel):
    """C = θ_j − θ_i − φ0 (1 row)."""

    def __init__(self, owners: Sequence[str], col_i: Idx, col_j: Idx, phi0: F) -> None:
        self.col_i, self.col_j, self.phi0 = col_i, col_j, phi0
        self.rows = [Row(o, f"{o}[angle]") for o in owners]
        self.cols = np.stack([col_i + 2, col_j + 2], axis=1)

    def evaluate(self, fr: Frame, t: F) -> tuple[F, F, F]:
        C = fr.qx[:, self.col_j + 2] - fr.qx[:, self.col_i + 2] - self.phi0
        J = np.empty(C.shape + (2,))
        J[..., 0], J[..., 1] = -1.0, 1.0
        return C, J, np.zeros_like(C)

    def gamma(self, fr: Frame, vx: F, t: F) -> F:
        return np.zeros((fr.qx.shape[0], len(self.rows)))


class GearRatio(Kernel):
    """C = (θ_i − θ_c) − τ·(θ_j − θ_c) − c0 (1 row): angles relative to the carrier c (the ground
    column for gears on grounded axes, which makes it θ_i − τ·θ_j − c0)."""

    def __init__(self, owners: Sequence[str], col_i: Idx, col_j: Idx, col_c: Idx, ratio: F, c0: F) -> None:
        self.col_i, self.col_j, self.col_c, self.ratio, self.c0 = col_i, col_j, col_c, ratio, c0
        self.rows = [Row(o, f"{o}[gear]") for o in owners]
        self.cols = np.stack([col_i + 2, col_j + 2, col_c + 2], axis=1)

    def evaluate(self, fr: Frame, t: F) -> tuple[F, F, F]:
        qx = fr.qx
        th_c = qx[:, self.col_c + 2]
        C = qx[:, self.col_i + 2] - th_c - self.ratio * (qx[:, self.col_j + 2] - th_c) - self.c0
        J = np.empty(C.shape + (3,))
        J[..., 0] = 1.0
        J[..., 1] = -self.ratio
        J[..., 2] = self.ratio - 1.0
        return C, J, np.zeros_like(C)

    def gamma(self, fr: Frame, vx: F, t: F) -> F:
        return np.zeros((fr.qx.shape[0], len(self.rows)))


class PointOnLine(Kernel):
    """C = n·(P_j − P_i) (1 row): point s_j of body j on the line through s_i of body i along the
    body-fixed unit direction u_i; n = A(θ_i)·R90(u_i) is the line's world normal."""

    def __init__(self, owners: Sequence[str], col_i: Idx, col_j: Idx, s_i: F, s_j: F, u_i: F) -> None:
        self.col_i, self.col_j, self.s_i, self.s_j = col_i, col_j, s_i, s_j
        u = u_i / np.linalg.norm(u_i, axis=1, keepdims=True)
        self.nhat = np.stack([-u[:, 1], u[:, 0]], axis=1)
        self.rows = [Row(o, f"{o}[line]") for o in owners]
        self.cols = _body_cols(col_i, col_j)

    def _geometry(self, fr: Frame) -> tuple[F, ...]:
        aix, aiy, ajx, ajy, dx, dy = _separation(fr, self.col_i, self.col_j, self.s_i, self.s_j)
        b = self.col_i // 3
        nx, ny = _rotate(fr.c[:, b], fr.s[:, b], self.nhat)
        return aix, aiy, ajx, ajy, nx, ny, dx, dy

    def evaluate(self, fr: Frame, t: F) -> tuple[F, F, F]:
        aix, aiy, ajx, ajy, nx, ny, dx, dy = self._geometry(fr)
        C = nx * dx + ny * dy
        # ∂C/∂θ_i = (R90 n)·d − n·(R90 a_i);  ∂C/∂θ_j = n·(R90 a_j)
        dth_i = (-ny * dx + nx * dy) - (-nx * aiy + ny * aix)
        dth_j = -nx * ajy + ny * ajx
        J = np.stack([-nx, -ny, dth_i, nx, ny, dth_j], axis=-1)
        return C, J, np.zeros_like(C)

    def gamma(self, fr: Frame, vx: F, t: F) -> F:
        g = self._geometry(fr)
        aix, aiy, ajx, ajy, nx, ny, dx, dy = g
        wi, wj = vx[:, self.col_i + 2], vx[:, self.col_j + 2]
        ddx, ddy = _separation_rate(vx, self.col_i, self.col_j, g)
        # C'' (velocity part) = −ω_i² n·d + 2ω_i (R90 n)·ḋ + n·(ω_i² a_i − ω_j² a_j)
        cvv = (-(wi**2) * (nx * dx + ny * dy) + 2.0 * wi * (-ny * ddx + nx * ddy)
               + nx * (wi**2 * aix - wj**2 * ajx) + ny * (wi**2 * aiy - wj**2 * ajy))
        return np.asarray(-cvv)


class _ProfileRows(Kernel):
    """Shared profile evaluation for drivers: f, f', f'' per driver, each (B, K)."""

    profiles: Sequence[Profile]

    def _profiles(self, t: F) -> tuple[F, F, F]:
        vals = [p.evaluate(t) for p in self.profiles]
        return tuple(np.stack([v[k] for v in vals], axis=1) for k in range(3))  # type: ignore[return-value]


class CoordinateDriver(_ProfileRows):
    """C = g(q) − f(t): g = world x or y of point s on body i (axis 0 / 1) or θ_i (axis 2)."""

    def __init__(self, owners: Sequence[str], col_i: Idx, axis: Idx, s_i: F,
                 profiles: Sequence[Profile]) -> None:
        self.col_i, self.axis, self.s_i, self.profiles = col_i, axis, s_i, profiles
        self.rows = [Row(o, f"{o}[drive]") for o in owners]
        self.cols = np.stack([col_i, col_i + 1, col_i + 2], axis=1)

    def evaluate(self, fr: Frame, t: F) -> tuple[F, F, F]:
        x, y, th, c, s = _pose(fr, self.col_i)
        ax, ay = _rotate(c, s, self.s_i)
        g = np.where(self.axis == 0, x + ax, np.where(self.axis == 1, y + ay, th))
        f, fd, _ = self._profiles(t)
        is_x, is_y, is_th = (self.axis == k for k in range(3))
        J = np.stack([np.broadcast_to(is_x, x.shape).astype(float),
                      np.broadcast_to(is_y, x.shape).astype(float),
                      np.where(is_x, -ay, np.where(is_y, ax, 1.0))], axis=-1)
        return g - f, J, -fd

    def gamma(self, fr: Frame, vx: F, t: F) -> F:
        _, _, _, c, s = _pose(fr, self.col_i)
        ax, ay = _rotate(c, s, self.s_i)
        w2 = vx[:, self.col_i + 2] ** 2
        _, _, fdd = self._profiles(t)
        gvv = np.where(self.axis == 0, -ax * w2, np.where(self.axis == 1, -ay * w2, 0.0))
        return np.asarray(fdd - gvv)


class DistanceDriver(_ProfileRows):
    """C = |P_j − P_i| − f(t) (1 row)."""

    def __init__(self, owners: Sequence[str], col_i: Idx, col_j: Idx, s_i: F, s_j: F,
                 profiles: Sequence[Profile]) -> None:
        self.col_i, self.col_j, self.s_i, self.s_j, self.profiles = col_i, col_j, s_i, s_j, profiles
        self.rows = [Row(o, f"{o}[drive]") for o in owners]
        self.cols = _body_cols(col_i, col_j)

    def _geometry(self, fr: Frame) -> tuple[F, ...]:
        g = _separation(fr, self.col_i, self.col_j, self.s_i, self.s_j)
        return (*g, np.hypot(g[4], g[5]))

    def evaluate(self, fr: Frame, t: F) -> tuple[F, F, F]:
        aix, aiy, ajx, ajy, dx, dy, L = self._geometry(fr)
        ux, uy = dx / L, dy / L
        f, fd, _ = self._profiles(t)
        J = np.stack([-ux, -uy, -(-ux * aiy + uy * aix), ux, uy, -ux * ajy + uy * ajx], axis=-1)
        return L - f, J, -fd

    def gamma(self, fr: Frame, vx: F, t: F) -> F:
        g = self._geometry(fr)
        aix, aiy, ajx, ajy, dx, dy, L = g
        wi, wj = vx[:, self.col_i + 2], vx[:, self.col_j + 2]
        ddx, ddy = _separation_rate(vx, self.col_i, self.col_j, g)
        d2x = wi**2 * aix - wj**2 * ajx
        d2y = wi**2 * aiy - wj**2 * ajy
        udd = (dx * ddx + dy * ddy) / L
        lvv = (ddx**2 + ddy**2 + dx * d2x + dy * d2y) / L - udd**2 / L
        _, _, fdd = self._profiles(t)
        return np.asarray(fdd - lvv)
