"""Compiled penalty contact: one probe's Hertz normal force with damping, tanh-regularised Coulomb
friction and energy terms (:func:`probe`), the contact outputs (:func:`contact_outputs`), and the
nearest-point search on the profile (:func:`nearest`). The same physics as ``contact.py``, whose
vectorised numpy version the tests compare these with; ``nb_loads.applied_loads`` adds the forces.

Records (``compiled_model``): ints [ci, cj, profile code, probes, curve parameters, segments, block
size], floats [K, C, R, μ, v_lim, the probes' body points (x, y each), the curve's parameters
(``nb_curves.curve``), the segment table and the block circles of ``contact_search``]; the tables
are read flat (``SEG`` floats a segment, ``BLK`` a block).

The search (``contact_search`` explains the tables and bounds) returns the global nearest point of
the profile; as on the numpy path, Newton (``NEWTON_STEPS``, unclamped) then polishes it, and a
line or a polynomial graph starts Newton from the projection.

These functions are not inlined: numba compiles each once (cached in this module's files) and links
it into every entry point that reaches ``nb_loads.applied_loads`` or ``nb_solve.output_vector``
— for every mechanism, since the loop over the contact records is in those functions; a mechanism
without contact only runs the empty loop. Cold compilation of ``warmup.warm`` took 2–5 s longer
with them (87.5 against 85.2 s for the engine's kernels, 154.8 against 149.3 s in all, one run each
on a shared 2-core machine).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..physics.contact import NEWTON_STEPS
from .contact_search import BLK, POLYLINE, SEG
from .nb_curves import curve

LOCAL_STEPS = 12  # clamped Newton iterations within a segment


@njit(cache=True, inline="always")
def _norm(x, y):  # noqa: ANN001
    """|(x, y)| without math.hypot's care for overflow (lengths here are far from 1e±150)."""
    return math.sqrt(x * x + y * y)


@njit(cache=True)
def _chord(seg, k, x, y):  # noqa: ANN001
    """Distance from (x, y) to the chord of segment k and the foot's fraction t along it."""
    o = SEG * k
    ax, ay, ux, uy = seg[o + 2], seg[o + 3], seg[o + 4] - seg[o + 2], seg[o + 5] - seg[o + 3]
    t = min(max(((x - ax) * ux + (y - ay) * uy) * seg[o + 7], 0.0), 1.0)
    return _norm(x - ax - t * ux, y - ay - t * uy), t


@njit(cache=True, inline="always")
def _box2(a, o, x, y):  # noqa: ANN001
    """Squared distance from (x, y) to the box a[o:o + 4] (x_min, y_min, x_max, y_max)."""
    dx, dy = max(a[o] - x, 0.0, x - a[o + 2]), max(a[o + 1] - y, 0.0, y - a[o + 3])
    return dx * dx + dy * dy


@njit(cache=True)
def _local(code, par, seg, k, x, y, t):  # noqa: ANN001
    """(distance, s) of the point of segment k's arc nearest to (x, y): clamped Newton on
    g(s) = (p − x)·p' from the chord foot's parameter (towards the end downhill where g is not
    convex), then the arc's end points if nearer."""
    o = SEG * k
    sa, sb = seg[o], seg[o + 1]
    s = sa + t * (sb - sa)
    d, s_d = np.inf, s
    for _ in range(LOCAL_STEPS):
        c = curve(code, par, s)
        px, py = c[0] - x, c[1] - y
        d, s_d = _norm(px, py), s
        g = px * c[2] + py * c[3]
        dg = c[2] * c[2] + c[3] * c[3] + px * c[4] + py * c[5]
        s_new = min(max(s - g / dg if dg > 1e-12 else (sa if g > 0.0 else sb), sa), sb)
        if abs(s_new - s) < 1e-13:
            break
        s = s_new
    da, db = _norm(seg[o + 2] - x, seg[o + 3] - y), _norm(seg[o + 4] - x, seg[o + 5] - y)
    if da < d:
        d, s_d = da, sa
    if db < d:
        d, s_d = db, sb
    return d, s_d


@njit(cache=True)
def _scan(code, par, seg, lo, hi, x, y, best, s_best, k_best):  # noqa: ANN001
    """Segments lo … hi − 1: the one nearest by its box first, then every one whose lower bounds
    (box, capsule) do not exceed the best distance so far; ties go to the lower segment (as the
    numpy path's argmin). Returns the updated (best distance, its s — a polyline's t —, its
    segment)."""
    first, low = lo, np.inf
    for k in range(lo, hi):
        lb2 = _box2(seg, SEG * k + 8, x, y)
        if lb2 < low:
            first, low = k, lb2
    for j in range(lo - 1, hi):
        k = first if j < lo else j
        if j >= lo and (k == first or _box2(seg, SEG * k + 8, x, y) > best * best):
            continue
        dc, t = _chord(seg, k, x, y)
        lb = dc - seg[SEG * k + 6]
        if lb > best or (lb == best and k > k_best):
            continue
        d, s = (dc, t) if code == POLYLINE else _local(code, par, seg, k, x, y, t)
        if d < best or (d == best and k < k_best):
            best, s_best, k_best = d, s, k
    return best, s_best, k_best


@njit(cache=True)
def _search(code, par, seg, blk, size, x, y):  # noqa: ANN001
    """(s, segment) of the profile point nearest to (x, y): the block nearest by its box first,
    then the blocks whose box is not farther than the best distance found."""
    n_seg, n_blk = seg.shape[0] // SEG, blk.shape[0] // BLK
    first, low = 0, np.inf
    for b in range(n_blk):
        lb2 = _box2(blk, BLK * b, x, y)
        if lb2 < low:
            first, low = b, lb2
    best, s, k = np.inf, 0.0, -1
    for j in range(-1, n_blk):
        b = first if j < 0 else j
        if j >= 0 and (b == first or _box2(blk, BLK * b, x, y) > best * best):
            continue
        best, s, k = _scan(code, par, seg, b * size, min((b + 1) * size, n_seg), x, y, best, s, k)
    return s, k


@njit(cache=True)
def _newton(code, par, s, x, y):  # noqa: ANN001
    """``contact.nearest_on_curve``'s Newton iterations on g(s) = (p − x)·p' from s; returns the
    curve (``nb_curves.curve``) at the last iterate: once a step falls below 1e-13, at the point
    before it (the numpy path takes that step: a difference below 1e-13 in s)."""
    for _ in range(NEWTON_STEPS):
        c = curve(code, par, s)
        px, py = c[0] - x, c[1] - y
        t2 = c[2] * c[2] + c[3] * c[3]
        dg = t2 + px * c[4] + py * c[5]
        step = (px * c[2] + py * c[3]) / (dg if dg > 1e-12 else t2)
        if abs(step) < 1e-13:
            return c
        s -= step
    return curve(code, par, s)


@njit(cache=True)
def nearest(code, par, seg, blk, size, x, y):  # noqa: ANN001
    """The profile point (fx, fy) nearest to (x, y) and the unit normal (nx, ny) there, profile
    frame, as ``contact.nearest``: for a curve R90·p'/|p'|; for a polyline the direction to the
    point, turned to the point's side of the nearest edge (the edge's normal at zero distance)."""
    if code == POLYLINE:
        t, k = _search(code, par, seg, blk, size, x, y)
        o = SEG * k
        ax, ay, ux, uy = seg[o + 2], seg[o + 3], seg[o + 4] - seg[o + 2], seg[o + 5] - seg[o + 3]
        fx, fy = ax + t * ux, ay + t * uy
        L = _norm(ux, uy)
        snx, sny = -uy / L, ux / L
        dx, dy = x - fx, y - fy
        dn = _norm(dx, dy)
        if dn > 1e-12:
            sign = -1.0 if dx * snx + dy * sny < 0.0 else 1.0
            return fx, fy, sign * dx / dn, sign * dy / dn
        return fx, fy, snx, sny
    if seg.shape[0] > 0:
        s = _search(code, par, seg, blk, size, x, y)[0]
    elif code == 1:  # a line: the foot
        s = (x - par[0]) * par[2] + (y - par[1]) * par[3]
    else:  # a graph: its x
        s = x
    c = _newton(code, par, s, x, y)
    L = _norm(c[2], c[3])
    return c[0], c[1], -c[3] / L, c[2] / L


@njit(cache=True)
def probe(qx, cs, vx, gi, gf, p):  # noqa: ANN001
    """Probe p of one contact (its records ``gi``, ``gf``; qx, vx with the ground's zeros, cs from
    ``nb_kernels.trig``): the contact point P, the force (fx, fy) on the second body at P, Fn, Ft,
    the penetration max(δ, 0), v_slip, the elastic energy and the dissipated power."""
    ci, cj, code, n_probe, n_par, n_seg, size = gi[0], gi[1], gi[2], gi[3], gi[4], gi[5], gi[6]
    K, C, R, mu, v_lim = gf[0], gf[1], gf[2], gf[3], gf[4]
    o = 5 + 2 * n_probe
    o_seg = o + n_par
    o_blk = o_seg + SEG * n_seg
    lx, ly = gf[5 + 2 * p], gf[6 + 2 * p]
    Xx = qx[cj] + cs[cj] * lx - cs[cj + 1] * ly  # the probe's centre, world
    Xy = qx[cj + 1] + cs[cj + 1] * lx + cs[cj] * ly
    c, s = cs[ci], cs[ci + 1]
    rx, ry = Xx - qx[ci], Xy - qx[ci + 1]
    ux, uy = c * rx + s * ry, -s * rx + c * ry  # in the profile's frame
    fx, fy, mx, my = nearest(code, gf[o:o_seg], gf[o_seg:o_blk], gf[o_blk:o_blk + BLK * (-(-n_seg // size))], size,
                             ux, uy)
    delta = R - ((ux - fx) * mx + (uy - fy) * my)
    nx, ny = c * mx - s * my, s * mx + c * my
    Px, Py = Xx - R * nx, Xy - R * ny
    wi, wj = vx[ci + 2], vx[cj + 2]
    rvx = vx[cj] - wj * (Py - qx[cj + 1]) - vx[ci] + wi * (Py - qx[ci + 1])  # v_P on j − v_P on i
    rvy = vx[cj + 1] + wj * (Px - qx[cj]) - vx[ci + 1] - wi * (Px - qx[ci])
    rate, v_slip = -(nx * rvx + ny * rvy), ny * rvx - nx * rvy  # δ̇, and t·v_rel with t = −R90·n
    pen = max(delta, 0.0)
    fe = K * pen * math.sqrt(pen)
    fn = max(0.0, fe + C * rate * pen) if delta > 0.0 else 0.0
    th = math.tanh(v_slip / v_lim)
    ft = -mu * fn * th
    return (Px, Py, fn * nx + ft * ny, fn * ny - ft * nx, fn, ft, pen, v_slip, 0.4 * K * pen * pen * math.sqrt(pen),
            (fn - fe) * rate + mu * fn * th * v_slip)


@njit(cache=True)
def contact_outputs(qx, cs, vx, gi, gf, out, o):  # noqa: ANN001
    """out[o + 4k …] ← contact k's normal force (sum), friction force (sum), penetration (largest)
    and slip velocity (Fn-weighted mean; the plain mean without contact), as ``contact.py``."""
    for k in range(gi.shape[0]):
        fn_sum, ft_sum, pen_max, weighted, plain = 0.0, 0.0, 0.0, 0.0, 0.0
        for p in range(gi[k, 3]):
            r = probe(qx, cs, vx, gi[k], gf[k], p)
            fn_sum += r[4]
            ft_sum += r[5]
            pen_max = max(pen_max, r[6])
            weighted += r[4] * r[7]
            plain += r[7]
        out[o + 4 * k], out[o + 4 * k + 1], out[o + 4 * k + 2] = fn_sum, ft_sum, pen_max
        out[o + 4 * k + 3] = weighted / fn_sum if fn_sum > 0.0 else plain / gi[k, 3]
