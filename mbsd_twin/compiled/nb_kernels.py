"""Compiled (numba) evaluation of one configuration: constraint rows, γ, mass matrix blocks and
generalised forces. The same physics as ``kernels.py`` / ``system.py`` / ``loads.py`` (which the
tests compare against), written as scalar loops so that a right-hand side costs microseconds.

Data layout (see ``compiled_model.py``): ``qx``/``vx`` are q/v with the ground's three zeros
appended; the Jacobian is row-structured: row r has up to six entries ``Jv[r, k]`` at columns
``Jc[r, k]`` (−1: unused or a ground column). Each constraint kind is (row offset, int64 records,
float64 records) and each load kind (int64 records, float64 records), one row per element (few arrays:
every array a kernel unpacks costs reference-count updates on each call). The load kinds'
generalised forces are in ``nb_loads``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from numba.core import cgutils, types
from numba.extending import intrinsic

from .nb_cache import guard as guard_cache
from .nb_curves import profile


def borrowed_value(context, builder, ty, val):  # noqa: ANN001, ANN202
    """LLVM: ``val`` of type ``ty`` (an array or nested tuples of them) with null owners."""
    if isinstance(ty, types.Array):
        ary = context.make_array(ty)(context, builder, value=val)
        ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
        ary.parent = cgutils.get_null_value(ary.parent.type)
        return ary._getvalue()
    if isinstance(ty, types.BaseTuple):
        items = [borrowed_value(context, builder, t, builder.extract_value(val, i)) for i, t in enumerate(ty)]
        return context.make_tuple(builder, ty, items)
    return val


@intrinsic
def borrow(typingctx, x):  # noqa: ANN001, ANN201
    """``x`` (an array, or nested tuples of arrays and scalars) as views without an owner: the same
    data, shapes and strides with a null meminfo, so that numba's reference counting of the views
    (an atomic update per array and an opaque call that clobbers every cached load) costs nothing.
    Only for scratch use while the caller holds the originals; never return or store the result."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        return borrowed_value(context, builder, signature.args[0], args[0])

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
        builder.store(borrowed_value(context, builder, signature.args[1], args[1]), ptr)
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
        return borrowed_value(context, builder, signature.return_type, builder.load(args[0]))

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
        tc = qx[gi[k, 2] + 2]  # the carrier's angle (0 for the ground)
        C[r] = qx[gi[k, 0] + 2] - tc - gf[k, 0] * (qx[gi[k, 1] + 2] - tc) - gf[k, 1]
        Jv[r, 0], Jv[r, 1], Jv[r, 2] = 1.0, -gf[k, 0], gf[k, 0] - 1.0
        Ct[r] = G[r] = 0.0


@njit(cache=True)
def relative(qx, cs, vx, i, j, sx_i, sy_i, sx_j, sy_j):  # noqa: ANN001
    """Points s_i on body i and s_j on body j (body frames): their attachment vectors A·s in the
    world, the separation d = r_j + A_j·s_j − r_i − A_i·s_i, its rate ḋ and the angular rates."""
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
        aix, aiy, ajx, ajy, dx, dy, ddx, ddy, wi, wj = relative(qx, cs, vx, i, j,
                                                                gf[k, 0], gf[k, 1], gf[k, 2], gf[k, 3])
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
        aix, aiy, ajx, ajy, dx, dy, ddx, ddy, wi, wj = relative(qx, cs, vx, i, j,
                                                                gf[k, 0], gf[k, 1], gf[k, 2], gf[k, 3])
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


# nb_kernels is imported first by every compiled module: drop cached code from older sources now
guard_cache(profile)
