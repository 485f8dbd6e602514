"""Compiled generalised forces of every load kind, one configuration at a time: applied forces and
torques (constant, input or profile magnitudes), translational and rotational spring-dampers,
prismatic viscous friction, rotating-frame pseudo-forces and penalty contact (``nb_contact``),
each kind one inlined helper, all called from :func:`applied_loads`. The same physics as
``physics/loads.py``, ``physics/frames.py`` and ``physics/contact.py``, which the tests compare
against; data layout as in ``nb_kernels``.
"""

from __future__ import annotations

import math

from numba import njit

from .nb_contact import probe
from .nb_curves import profile
from .nb_kernels import att, relative


@njit(cache=True)
def _apply(Q, col, n, fx, fy, mz):  # noqa: ANN001
    if col < n:
        Q[col] += fx
        Q[col + 1] += fy
        Q[col + 2] += mz


@njit(cache=True, inline="always")
def _magnitude(gi, gf, k, o, inputs, t):  # noqa: ANN001
    """Magnitude of load k: gf[k, o] (constant), an input or a profile (parameters gf[k, o + 1:])."""
    kind = gi[k, 2]
    if kind == 1:
        return inputs[gi[k, 3]]
    if kind == 2:
        return profile(gi[k, 4], gf[k, o + 1:], t)[0]
    return gf[k, o]


@njit(cache=True, inline="always")
def applied_loads(qx, cs, vx, t, inputs, loads, bodies, Q, n):  # noqa: ANN001
    """Add every applied load into Q; return (elastic energy, dissipated power, input power)."""
    fo, to, sd, rs, pf, ct, rf = loads
    pin = _forces(cs, vx, t, inputs, fo, Q, n) + _torques(vx, t, inputs, to, Q, n)
    pin += _frames(qx, cs, vx, rf, bodies, Q, n)
    el, di = _springs(qx, cs, vx, sd, Q, n)
    e, d = _rotational_springs(qx, vx, rs, Q, n)
    el, di = el + e, di + d + _friction(qx, cs, vx, pf, Q, n)
    e, d = _contacts(qx, cs, vx, ct, Q, n)
    return el + e, di + d, pin


@njit(cache=True, inline="always")
def _forces(cs, vx, t, inputs, fo, Q, n):  # noqa: ANN001
    """Point forces into Q; their input power."""
    pin = 0.0
    gi, gf = fo  # I[ci, body_frame, kind, idx, profile] F[p, d, value, profile params]
    for k in range(gi.shape[0]):
        i = gi[k, 0]
        m = _magnitude(gi, gf, k, 4, inputs, t)
        dx, dy = gf[k, 2], gf[k, 3]
        if gi[k, 1]:
            dx, dy = att(cs, i, dx, dy)
        fx, fy = dx * m, dy * m
        ax, ay = att(cs, i, gf[k, 0], gf[k, 1])
        _apply(Q, i, n, fx, fy, ax * fy - ay * fx)
        w = vx[i + 2]
        pin += fx * (vx[i] - w * ay) + fy * (vx[i + 1] + w * ax)
    return pin


@njit(cache=True, inline="always")
def _torques(vx, t, inputs, to, Q, n):  # noqa: ANN001
    """Torques (and their reactions) into Q; their input power."""
    pin = 0.0
    gi, gf = to  # I[ci, cj, kind, idx, profile] F[value, profile params]
    for k in range(gi.shape[0]):
        m = _magnitude(gi, gf, k, 0, inputs, t)
        _apply(Q, gi[k, 0], n, 0.0, 0.0, m)
        _apply(Q, gi[k, 1], n, 0.0, 0.0, -m)
        pin += m * (vx[gi[k, 0] + 2] - vx[gi[k, 1] + 2])
    return pin


@njit(cache=True, inline="always")
def _springs(qx, cs, vx, sd, Q, n):  # noqa: ANN001
    """Translational spring-dampers into Q; (elastic energy, dissipated power)."""
    el, di = 0.0, 0.0
    gi, gf = sd  # I[ci, cj] F[p_i, p_j, k, c, L0]
    for k in range(gi.shape[0]):
        i, j, kk, cc, L0 = gi[k, 0], gi[k, 1], gf[k, 4], gf[k, 5], gf[k, 6]
        aix, aiy, ajx, ajy, dx, dy, ddx, ddy, wi, wj = relative(qx, cs, vx, i, j,
                                                                gf[k, 0], gf[k, 1], gf[k, 2], gf[k, 3])
        L = max(math.hypot(dx, dy), 1e-12)
        ux, uy = dx / L, dy / L
        Ld = ux * ddx + uy * ddy
        T = kk * (L - L0) + cc * Ld
        fx, fy = T * ux, T * uy
        _apply(Q, i, n, fx, fy, aix * fy - aiy * fx)
        _apply(Q, j, n, -fx, -fy, -(ajx * fy - ajy * fx))
        el += 0.5 * kk * (L - L0) ** 2
        di += cc * Ld * Ld
    return el, di


@njit(cache=True, inline="always")
def _rotational_springs(qx, vx, rs, Q, n):  # noqa: ANN001
    """Rotational spring-dampers (and revolute viscous friction) into Q; (elastic energy,
    dissipated power)."""
    el, di = 0.0, 0.0
    gi, gf = rs  # I[ci, cj] F[k, c, phi0]
    for k in range(gi.shape[0]):
        i, j, kk, cc = gi[k, 0], gi[k, 1], gf[k, 0], gf[k, 1]
        dphi = qx[j + 2] - qx[i + 2] - gf[k, 2]
        dw = vx[j + 2] - vx[i + 2]
        tau = -kk * dphi - cc * dw
        _apply(Q, j, n, 0.0, 0.0, tau)
        _apply(Q, i, n, 0.0, 0.0, -tau)
        el += 0.5 * kk * dphi * dphi
        di += cc * dw * dw
    return el, di


@njit(cache=True, inline="always")
def _friction(qx, cs, vx, pf, Q, n):  # noqa: ANN001
    """Prismatic viscous friction into Q; its dissipated power."""
    di = 0.0
    gi, gf = pf  # I[ci, cj] F[p_i, p_j, u, c]
    for k in range(gi.shape[0]):
        i, j, cc = gi[k, 0], gi[k, 1], gf[k, 6]
        aix, aiy, ajx, ajy, dx, dy, ddx, ddy, wi, wj = relative(qx, cs, vx, i, j,
                                                                gf[k, 0], gf[k, 1], gf[k, 2], gf[k, 3])
        ux, uy = att(cs, i, gf[k, 4], gf[k, 5])
        sdot = wi * (-uy * dx + ux * dy) + ux * ddx + uy * ddy
        f = -cc * sdot
        _apply(Q, i, n, -f * ux, -f * uy, f * ((-uy * dx + ux * dy) - (-ux * aiy + uy * aix)))
        _apply(Q, j, n, f * ux, f * uy, f * (-ux * ajy + uy * ajx))
        di += cc * sdot * sdot
    return di


@njit(cache=True, inline="always")
def _frames(qx, cs, vx, rf, bodies, Q, n):  # noqa: ANN001
    """Rotating frames (``frames.py``), one row per frame and body: centrifugal m·Ω²·(R_G − c) and
    Coriolis −2·m·Ω·R90·v_G at the body's centre of mass (mass and cg from ``bodies``, so a live
    change reaches them) into Q; the centrifugal power, reported as input power."""
    mass, _, cg, _ = bodies
    pin = 0.0
    gi, gf = rf  # I[ci] F[Ω, c]
    for k in range(gi.shape[0]):
        i = gi[k, 0]
        b = i // 3
        gx, gy = att(cs, i, cg[b, 0], cg[b, 1])
        w = vx[i + 2]
        vgx, vgy = vx[i] - w * gy, vx[i + 1] + w * gx
        mw2, mw = mass[b] * gf[k, 0] ** 2, 2.0 * mass[b] * gf[k, 0]
        fx = mw2 * (qx[i] + gx - gf[k, 1]) + mw * vgy
        fy = mw2 * (qx[i + 1] + gy - gf[k, 2]) - mw * vgx
        _apply(Q, i, n, fx, fy, gx * fy - gy * fx)
        pin += fx * vgx + fy * vgy
    return pin


@njit(cache=True, inline="always")
def _contacts(qx, cs, vx, ct, Q, n):  # noqa: ANN001
    """Penalty contact, probe by probe (``nb_contact``: records and physics): forces into Q at the
    contact point P, (elastic energy, dissipated power)."""
    el, di = 0.0, 0.0
    gi, gf = ct
    for k in range(gi.shape[0]):
        i, j = gi[k, 0], gi[k, 1]
        for p in range(gi[k, 3]):
            px, py, fx, fy, _, _, _, _, e, d = probe(qx, cs, vx, gi[k], gf[k], p)
            _apply(Q, j, n, fx, fy, (px - qx[j]) * fy - (py - qx[j + 1]) * fx)
            _apply(Q, i, n, -fx, -fy, (py - qx[i + 1]) * fx - (px - qx[i]) * fy)
            el += e
            di += d
    return el, di
