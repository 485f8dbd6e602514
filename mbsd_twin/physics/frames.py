"""Pseudo-forces of a rotating reference frame (the ``rotating_frame`` load).

When a mechanism is described in a frame turning at the constant rate Ω [rad/s] about the point
``center`` (the load's ``points[0]``, world = the rotating frame), every listed body (all bodies
when ``bodies`` is empty) receives, at its centre of mass R_G with velocity v_G (both measured in
the rotating frame):

    centrifugal   F_cf  = m·Ω²·(R_G − c)
    Coriolis      F_cor = −2·m·Ω·ẑ×v_G = −2·m·Ω·R90·v_G

For a rigid body in the plane these resultants act at the centre of mass with no couple (the
Coriolis and centrifugal forces of the mass elements have zero moment about G), so the
generalised force is (F, (A·cg)×F). The Coriolis force does no work; the centrifugal one is
reported as input power (energy.input_work), so T + V − W_cf is the Jacobi integral and
``energy.balance_error`` stays zero. A time-varying Ω (Euler force) is not supported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..model.model import Load
from .load_base import Group, LoadContext

F = NDArray[Any]


class RotatingFrames(Group):
    """All ``rotating_frame`` loads; one row per (load, body) pair. ``mass`` and ``cg`` are the
    System's arrays (bodies in ``body_names`` order), shared so that a live change of a body's mass
    or centre of mass reaches the pseudo-forces, as on the compiled path."""

    def __init__(self, col: dict[str, int], loads: Sequence[Load], body_names: Sequence[str], mass: F,
                 cg: F) -> None:
        self.loads = list(loads)
        names = list(body_names)
        pairs = [(ld, name) for ld in loads for name in (ld.bodies or tuple(names))]
        self.c = np.array([col[name] for _, name in pairs], dtype=np.intp)
        self.b = np.array([names.index(name) for _, name in pairs], dtype=np.intp)
        self.mass, self.body_cg = mass, cg
        self.rate = np.array([ld.value for ld, _ in pairs], float)
        self.center = np.array([ld.points[0] for ld, _ in pairs], float).reshape(-1, 2)

    def apply(self, Q: F, ctx: LoadContext) -> tuple[F, F, F]:
        q, v, c = ctx.qx, ctx.vx, self.c
        th, w = q[:, c + 2], v[:, c + 2]
        cs, sn = np.cos(th), np.sin(th)
        m, cg = self.mass[self.b], self.body_cg[self.b]
        gx = cs * cg[:, 0] - sn * cg[:, 1]
        gy = sn * cg[:, 0] + cs * cg[:, 1]
        vgx, vgy = v[:, c] - w * gy, v[:, c + 1] + w * gx
        mw2, mw = m * self.rate**2, 2.0 * m * self.rate
        fx = mw2 * (q[:, c] + gx - self.center[:, 0]) + mw * vgy
        fy = mw2 * (q[:, c + 1] + gy - self.center[:, 1]) - mw * vgx
        for off, val in ((0, fx), (1, fy), (2, gx * fy - gy * fx)):
            np.add.at(Q, (slice(None), c + off), val)  # type: ignore[arg-type]
        zero = np.zeros(len(ctx.t))
        return zero, zero, (fx * vgx + fy * vgy).sum(axis=1)
