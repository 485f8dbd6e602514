"""Compiled (numba) evaluation of one configuration: constraint rows, γ, mass matrix blocks and
generalised forces. The same physics as ``kernels.py`` / ``system.py`` / ``loads.py`` (which the
tests compare against), written as scalar loops so that a right-hand side costs microseconds.

Data layout (see ``compiled_model.py``): ``qx``/``vx`` are q/v with the ground's three zeros
appended; the Jacobian is row-structured: row r has up to six entries ``Jv[r, k]`` at columns
``Jc[r, k]`` (−1: unused or a ground column). Each constraint kind is (row offset, int64 records,
float64 records) and each load kind (int64 records, float64 records), one row per element (few arrays:
every array a kernel unpacks costs reference-count updates on each call).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from numba.core import cgutils, types
from numba.extending import intrinsic

from .nb_cache import guard as guard_cache
from .nb_contact import probe
from .nb_curves import profile


def _borrowed(context, builder, ty, val):  # noqa: ANN001, ANN202
    if isinstance(ty, types.Array):
        ary = context.make_array(ty)(context, builder, value=val)
        ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
        ary.parent = cgutils.get_null_value(ary.parent.type)
        return ary._getvalue()
    if isinstance(ty, types.BaseTuple):
        items = [_borrowed(context, builder, t, builder.extract_value(val, i)) for i, t in enumerate(ty)]
        return context.make_tuple(builder, ty, items)
    return val


@intrinsic
def borrow(typingctx, x):  # noqa: ANN001, ANN201
    """``x`` (an array, or nested tuples of arrays and scalars) as views without an owner: the same
    data, shapes and strides with a null meminfo, so that numba's reference counting of the views
    (an atomic update per array and an opaque call that clobbers every cached load) costs nothing.
    Only for scratch use while the caller holds the originals; never return or store the result."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return _borrowed(context, builder, signature.args[0], args[0])

    return x(x), codegen


@intrinsic
def shaped(typingctx, a, start, shape):  # noqa: ANN001, ANN201
    """The C-contiguous view of shape ``shape`` (a tuple of ints) of the 1-D C-contiguous array
    ``a`` from element ``start`` on, owner-less like :func:`borrow`. No bounds check: the caller
    guarantees ``start + prod(shape) <= len(a)``. It replaces ``a[start:...].reshape(shape)``,
    whose call into numba's C helper per view dominated rebuilding the flat model (``nb_flat``)."""
    if not (isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and isinstance(shape, types.UniTuple)):
        return None
    ret = types.Array(a.dtype, shape.count, "C")

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        src = context.make_array(signature.args[0])(context, builder, value=args[0])
        out = context.make_array(ret)(context, builder)
        dims = [context.cast(builder, d, shape.dtype, types.intp) for d in cgutils.unpack_tuple(builder, args[2])]
        first = context.cast(builder, args[1], signature.args[1], types.intp)
        item = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(a.dtype)))
        strides, acc = [], item
        for d in reversed(dims):
            strides.insert(0, acc)
            acc = builder.mul(acc, d)
        data = cgutils.pointer_add(builder, src.data, builder.mul(first, item))
        context.populate_array(out, data=builder.bitcast(data, src.data.type), shape=cgutils.pack_array(builder, dims),
                               strides=cgutils.pack_array(builder, strides), itemsize=item, meminfo=None)
        return out._getvalue()

    return ret(a, start, shape), codegen


@intrinsic
def stash(typingctx, x):  # noqa: ANN001, ANN201
    """A pointer to a copy of ``x`` in the caller's stack frame (valid until the caller returns):
    passing it instead of ``x`` spares a call with a tuple of many arrays from copying all their
    fields as arguments. Read it back with :func:`unstash`."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return cgutils.alloca_once_value(builder, args[0])

    return types.CPointer(x)(x), codegen


def _typed_pointer(context, builder, buf_type, buf, x_type):  # noqa: ANN001, ANN202
    ary = context.make_array(buf_type)(context, builder, value=buf)
    return builder.bitcast(ary.data, context.get_value_type(x_type).as_pointer())


@intrinsic
def byte_size(typingctx, x):  # noqa: ANN001, ANN201
    """The number of bytes :func:`pin` writes for a value of ``x``'s type."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return context.get_constant(types.intp, context.get_abi_sizeof(context.get_value_type(signature.args[0])))

    return types.intp(x), codegen


@intrinsic
def pin(typingctx, buf, x):  # noqa: ANN001, ANN201
    """Store owner-less views of ``x`` (arrays, nested tuples) in the bytes of the 1-D array ``buf``
    (at least :func:`byte_size` long, 8-byte aligned), where :func:`pinned` finds them on later
    calls. The views point at the arrays of ``x``: their owner must keep those arrays (and update
    them in place) for as long as ``buf`` is used."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        ptr = _typed_pointer(context, builder, signature.args[0], args[0], signature.args[1])
        builder.store(_borrowed(context, builder, signature.args[1], args[1]), ptr)
        return context.get_dummy_value()

    return types.none(buf, x), codegen


@intrinsic
def pinned(typingctx, buf, like):  # noqa: ANN001, ANN201
    """The :func:`stash`-style pointer to the value that :func:`pin` stored in ``buf``. ``like`` only
    gives its type (an expression of the same type; its value is not read, so the compiler drops
    what only it uses)."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return _typed_pointer(context, builder, signature.args[0], args[0], signature.args[1])

    return types.CPointer(like)(buf, like), codegen


@intrinsic
def unstash(typingctx, p):  # noqa: ANN001, ANN201
    """The value behind a :func:`stash` pointer."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return _borrowed(context, builder, signature.return_type, builder.load(args[0]))

    return p.dtype(p), codegen


@njit(cache=True, inline="always")
def trig(qx: np.ndarray, cs: np.ndarray) -> None:
    """cs[col], cs[col + 1] = cos, sin of the angle qx[col + 2] of every body, and 1, 0 at the
    ground's column n (qx has n + 3 entries). Extra coordinates (a cam's s1, s2) follow the bodies:
    the entries the loop writes over them are never read."""
    n = qx.shape[0] - 3
    for col in range(0, n, 3):
        cs[col], cs[col + 1] = math.cos(qx[col + 2]), math.sin(qx[col + 2])
    cs[n], cs[n + 1] = 1.0, 0.0


@njit(cache=True)
def att(cs: np.ndarray, col: int, sx: float, sy: float) -> tuple[float, float]:
    """World attachment vector A(θ)·s of a body-fixed point (cs from ``trig``)."""
    c, s = cs[col], cs[col + 1]
    return c * sx - s * sy, s * sx + c * sy


@njit(cache=True, inline="always")
def coincident(qx, cs, vx, co, C, Jv, Ct, G, gam):  # noqa: ANN001
    off, gi, gf = co
    for k in range(gi.shape[0]):
        i, j, r = gi[k, 0], gi[k, 1], off + 2 * k
        aix, aiy = att(cs, i, gf[k, 0], gf[k, 1])
        ajx, ajy = att(cs, j, gf[k, 2], gf[k, 3])
        C[r] = qx[i] + aix - qx[j] - ajx
        C[r + 1] = qx[i + 1] + aiy - qx[j + 1] - ajy
        Jv[r, 0], Jv[r, 1], Jv[r, 2], Jv[r, 3], Jv[r, 4], Jv[r, 5] = 1.0, 0.0, -aiy, -1.0, 0.0, ajy
        Jv[r + 1, 0], Jv[r + 1, 1], Jv[r + 1, 2] = 0.0, 1.0, aix
        Jv[r + 1, 3], Jv[r + 1, 4], Jv[r + 1, 5] = 0.0, -1.0, -ajx
        Ct[r] = Ct[r + 1] = 0.0
        if gam:
            wi2, wj2 = vx[i + 2] ** 2, vx[j + 2] ** 2
            G[r] = aix * wi2 - ajx * wj2
            G[r + 1] = aiy * wi2 - ajy * wj2


@njit(cache=True, inline="always")
def angles(qx, ra, gr, C, Jv, Ct, G):  # noqa: ANN001
    off, gi, gf = ra
    for k in range(gi.shape[0]):
        r = off + k
        C[r] = qx[gi[k, 1] + 2] - qx[gi[k, 0] + 2] - gf[k, 0]
        Jv[r, 0], Jv[r, 1] = -1.0, 1.0
        Ct[r] = G[r] = 0.0
    off, gi, gf = gr
    for k in range(gi.shape[0]):
        r = off + k
        C[r] = qx[gi[k, 0] + 2] - gf[k, 0] * qx[gi[k, 1] + 2] - gf[k, 1]
        Jv[r, 0], Jv[r, 1] = 1.0, -gf[k, 0]
        Ct[r] = G[r] = 0.0


@njit(cache=True)
def _sep(qx, cs, vx, i, j, sx_i, sy_i, sx_j, sy_j):  # noqa: ANN001
    aix, aiy = att(cs, i, sx_i, sy_i)
    ajx, ajy = att(cs, j, sx_j, sy_j)
    dx, dy = qx[j] + ajx - qx[i] - aix, qx[j + 1] + ajy - qx[i + 1] - aiy
    wi, wj = vx[i + 2], vx[j + 2]
    ddx = vx[j] - wj * ajy - vx[i] + wi * aiy
    ddy = vx[j + 1] + wj * ajx - vx[i + 1] - wi * aix
    return aix, aiy, ajx, ajy, dx, dy, ddx, ddy, wi, wj


@njit(cache=True, inline="always")
def point_on_line(qx, cs, vx, pl, C, Jv, Ct, G, gam):  # noqa: ANN001
    off, gi, gf = pl
    for k in range(gi.shape[0]):
        i, j, r = gi[k, 0], gi[k, 1], off + k
        aix, aiy, ajx, ajy, dx, dy, ddx, ddy, wi, wj = _sep(qx, cs, vx, i, j, gf[k, 0], gf[k, 1], gf[k, 2], gf[k, 3])
        nx, ny = att(cs, i, gf[k, 4], gf[k, 5])
        C[r] = nx * dx + ny * dy
        Jv[r, 0], Jv[r, 1] = -nx, -ny
        Jv[r, 2] = (-ny * dx + nx * dy) - (-nx * aiy + ny * aix)
        Jv[r, 3], Jv[r, 4], Jv[r, 5] = nx, ny, -nx * ajy + ny * ajx
        Ct[r] = 0.0
        if gam:
            G[r] = -(-(wi * wi) * (nx * dx + ny * dy) + 2.0 * wi * (-ny * ddx + nx * ddy)
                     + nx * (wi * wi * aix - wj * wj * ajx) + ny * (wi * wi * aiy - wj * wj * ajy))


@njit(cache=True, inline="always")
def drivers(qx, cs, vx, t, cd, dd, C, Jv, Ct, G, gam):  # noqa: ANN001
    off, gi, gf = cd
    for k in range(gi.shape[0]):
        i, r, axis = gi[k, 0], off + k, gi[k, 1]
        ax, ay = att(cs, i, gf[k, 0], gf[k, 1])
        f, fd, fdd = profile(gi[k, 2], gf[k, 2:], t)
        w2 = vx[i + 2] ** 2
        if axis == 0:
            C[r], Jv[r, 0], Jv[r, 1], Jv[r, 2], gvv = qx[i] + ax - f, 1.0, 0.0, -ay, -ax * w2
        elif axis == 1:
            C[r], Jv[r, 0], Jv[r, 1], Jv[r, 2], gvv = qx[i + 1] + ay - f, 0.0, 1.0, ax, -ay * w2
        else:
            C[r], Jv[r, 0], Jv[r, 1], Jv[r, 2], gvv = qx[i + 2] - f, 0.0, 0.0, 1.0, 0.0
        Ct[r] = -fd
        if gam:
            G[r] = fdd - gvv
    off, gi, gf = dd
    for k in range(gi.shape[0]):
        i, j, r = gi[k, 0], gi[k, 1], off + k
        aix, aiy, ajx, ajy, dx, dy, ddx, ddy, wi, wj = _sep(qx, cs, vx, i, j, gf[k, 0], gf[k, 1], gf[k, 2], gf[k, 3])
        L = math.hypot(dx, dy)
        ux, uy = dx / L, dy / L
        f, fd, fdd = profile(gi[k, 2], gf[k, 4:], t)
        C[r] = L - f
        Jv[r, 0], Jv[r, 1], Jv[r, 2] = -ux, -uy, -(-ux * aiy + uy * aix)
        Jv[r, 3], Jv[r, 4], Jv[r, 5] = ux, uy, -ux * ajy + uy * ajx
        Ct[r] = -fd
        if gam:
            udd = (dx * ddx + dy * ddy) / L
            d2x, d2y = wi * wi * aix - wj * wj * ajx, wi * wi * aiy - wj * wj * ajy
            lvv = (ddx * ddx + ddy * ddy + dx * d2x + dy * d2y) / L - udd * udd / L
            G[r] = fdd - lvv


@njit(cache=True, inline="always")
def body_blocks(qx, cs, vx, bodies, Minv, Q):  # noqa: ANN001
    """Per-body inverse mass blocks Minv (nb, 3, 3) and gravity + velocity-product forces into Q.

    With r = (gx, gy) the centre of mass relative to the reference point (world axes), the
    centre-of-mass velocity is T·v with T = [[1, 0, −gy], [0, 1, gx], [0, 0, 1]], so the body's
    mass block is M = Tᵀ·diag(m, m, I_G)·T and M⁻¹ = T⁻¹·diag(1/m, 1/m, 1/I_G)·T⁻ᵀ with
    T⁻¹ = [[1, 0, gy], [0, 1, −gx], [0, 0, 1]]: written out below (m > 0 and I_G > 0, which the
    mechanism validation requires)."""
    mass, inertia, cg, g = bodies
    for b in range(mass.shape[0]):
        col = 3 * b
        gx, gy = att(cs, col, cg[b, 0], cg[b, 1])
        bx, by = -gy, gx
        m = mass[b]
        im, ii = 1.0 / m, 1.0 / inertia[b]
        Minv[b, 0, 0] = im + gy * gy * ii
        Minv[b, 1, 1] = im + gx * gx * ii
        Minv[b, 0, 1] = Minv[b, 1, 0] = -gx * gy * ii
        Minv[b, 0, 2] = Minv[b, 2, 0] = gy * ii
        Minv[b, 1, 2] = Minv[b, 2, 1] = -gx * ii
        Minv[b, 2, 2] = ii
        w2 = vx[col + 2] ** 2
        Q[col] += m * g[0] + m * gx * w2
        Q[col + 1] += m * g[1] + m * gy * w2
        Q[col + 2] += m * (bx * g[0] + by * g[1])


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
        aix, aiy, ajx, ajy, dx, dy, ddx, ddy, wi, wj = _sep(qx, cs, vx, i, j, gf[k, 0], gf[k, 1], gf[k, 2], gf[k, 3])
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
        aix, aiy, ajx, ajy, dx, dy, ddx, ddy, wi, wj = _sep(qx, cs, vx, i, j, gf[k, 0], gf[k, 1], gf[k, 2], gf[k, 3])
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


# nb_kernels is imported first by every compiled module: drop cached code from older sources now
guard_cache(profile)
