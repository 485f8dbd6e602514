"""Compiled re-initialisation of a state from imposed coordinates and velocities
(``Simulator.set_configuration`` on the compiled path): the algorithm of
``dynamics.Dynamics.constrained_state`` over the packed model.

Positions: Newton on C(q, t) = 0 over the active constraint rows, each step the minimum-norm
least-squares correction of the free coordinates (through the normal equations of the rows by
Cholesky while they are well conditioned; otherwise LAPACK gelsd through ``np.linalg.lstsq``, with
numpy's default cut-off eps·max(rows, columns) for small singular values, so that rows that lose
their free columns when coordinates are held do not stop it); velocities: the minimum-norm
least-squares correction of the free velocities onto Cq·v + Ct = 0.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .nb_flat import unflatten
from .nb_joints import constraint_rows
from .nb_kernels import trig
from .nb_solve import workspace

EPS = 2.220446049250313e-16  # float64 machine epsilon
PIVOT = 1e-10  # Cholesky of Af·Afᵀ only while its condition stays below ~1e10 (Af's below ~1e5)


@njit(cache=True)
def _evaluate(t, q, rows, model, ws, A, c, ct):  # noqa: ANN001
    """c = C(q, t), ct = Ct and the dense Jacobian A = Cq over the active ``rows``. Loops rather
    than array expressions throughout this module: numba compiles those into calls of its Python
    extension (a shape-checked slice assignment's error message, ``np.sort``'s lists), which the
    standalone FMU's library, built from these kernels, does not have."""
    n, cons, Jc = model[0], model[2], model[3]
    qx, vx, cs, C, Jv, Ct, G = ws[0], ws[1], ws[2], ws[3], ws[4], ws[5], ws[6]
    for k in range(n):
        qx[k] = q[k]
    trig(qx, cs)
    constraint_rows(qx, cs, vx, t, cons, C, Jv, Ct, G, False)
    for p in range(A.shape[0]):
        for k in range(A.shape[1]):
            A[p, k] = 0.0
    for p in range(rows.shape[0]):
        r = rows[p]
        c[p], ct[p] = C[r], Ct[r]
        for k in range(Jc.shape[1]):
            if Jc[r, k] >= 0:
                A[p, Jc[r, k]] += Jv[r, k]


@njit(cache=True)
def _max_abs(x):  # noqa: ANN001, ANN202
    """max |xᵢ| (0 for none); NaN if any is, as ``np.abs(x).max()``."""
    top = 0.0
    for i in range(x.shape[0]):
        a = abs(x[i])
        if a != a:
            return a
        top = max(top, a)
    return top


@njit(cache=True)
def _cholesky_solve(G, r):  # noqa: ANN001
    """w with G·w = r for a symmetric G by Cholesky, or an empty array when a pivot falls below
    ``PIVOT`` of the largest diagonal (G singular or too ill-conditioned for it)."""
    m = G.shape[0]
    L = np.zeros((m, m))
    top = 0.0
    for j in range(m):
        top = max(top, abs(G[j, j]))
    top = max(top, 1e-300)
    for j in range(m):
        s = G[j, j]
        for k in range(j):
            s -= L[j, k] * L[j, k]
        if s <= PIVOT * top:
            return np.zeros(0)
        L[j, j] = np.sqrt(s)
        for i in range(j + 1, m):
            s = G[i, j]
            for k in range(j):
                s -= L[i, k] * L[j, k]
            L[i, j] = s / L[j, j]
    w = np.empty(m)
    for i in range(m):
        w[i] = r[i]
        for k in range(i):
            w[i] -= L[i, k] * w[k]
        w[i] /= L[i, i]
    for i in range(m - 1, -1, -1):
        for k in range(i + 1, m):
            w[i] -= L[k, i] * w[k]
        w[i] /= L[i, i]
    return w


@njit(cache=True)
def cholesky_step(A, r, free, x):  # noqa: ANN001, ANN201
    """x[free] −= the minimum-norm least-squares solution d of A[:, free]·d = r through the normal
    equations, d = Afᵀ·(Af·Afᵀ)⁻¹·r, by Cholesky (the usual case, a few µs; products as loops:
    BLAS calls cost more than these few); False, x untouched, where that does not hold (more rows
    than free columns, or Af·Afᵀ singular or ill-conditioned)."""
    if free.shape[0] == 0 or A.shape[0] == 0:
        return True
    m, nf = A.shape[0], free.shape[0]
    if m > nf:
        return False
    Af = np.empty((m, nf))
    for i in range(m):
        for k in range(nf):
            Af[i, k] = A[i, free[k]]
    G = np.zeros((m, m))
    for i in range(m):
        for j in range(i + 1):
            s = 0.0
            for k in range(nf):
                s += Af[i, k] * Af[j, k]
            G[i, j] = G[j, i] = s
    w = _cholesky_solve(G, r)
    if not w.shape[0]:
        return False
    for k in range(nf):
        s = 0.0
        for i in range(m):
            s += Af[i, k] * w[i]
        x[free[k]] -= s
    return True


@njit(cache=True)
def _min_norm_step(A, r, free, x):  # noqa: ANN001
    """:func:`cholesky_step`, else the SVD's minimum-norm solution (LAPACK gelsd, numpy's cut-off);
    True (a step always taken)."""
    if not cholesky_step(A, r, free, x):
        m, nf = A.shape[0], free.shape[0]
        d = np.linalg.lstsq(np.ascontiguousarray(A[:, free]), r, EPS * max(m, nf))[0]
        for k in range(nf):
            x[free[k]] -= d[k]
    return True


@njit(cache=True)
def _sorted(x):  # noqa: ANN001, ANN202
    """A sorted copy of the int64 array ``x`` (insertion sort: a few constraint rows)."""
    out = np.empty(x.shape[0], dtype=np.int64)
    for i in range(x.shape[0]):
        j = i
        while j > 0 and out[j - 1] > x[i]:
            out[j] = out[j - 1]
            j -= 1
        out[j] = x[i]
    return out


@njit(cache=True)
def _free(n, fixed):  # noqa: ANN001, ANN202
    """The indices 0…n-1 not in ``fixed``."""
    held = np.zeros(n, dtype=np.bool_)
    for k in fixed:
        held[k] = True
    out = np.empty(n - held.sum(), dtype=np.int64)
    j = 0
    for k in range(n):
        if not held[k]:
            out[j] = k
            j += 1
    return out


@njit(cache=True)
def setup(fixed_q, fixed_v, ib, fb):  # noqa: ANN001, ANN201
    """What the assembly works on: (model, workspace, the active rows in row order, A, c, ct,
    the free coordinates, the free velocities)."""
    model, _ = unflatten(ib, fb)
    n = model[0]
    rows = _sorted(model[8][0])  # the active rows (the projection's solve data), in row order
    m = rows.shape[0]
    return (model, workspace(model), rows, np.zeros((m, n)), np.zeros(m), np.zeros(m), _free(n, fixed_q),
            _free(n, fixed_v))


@njit(cache=True)
def residual(A, c, v, ct):  # noqa: ANN001, ANN201
    """The largest residual left: of the positions (c) and of the velocities (Cq·v + Ct)."""
    if A.shape[0] == 0:
        return 0.0
    return max(_max_abs(c), _max_abs(_velocity_residual(A, v, ct)))


@njit(cache=True, nogil=True)
def constrained_state(t, q, v, fixed_q, fixed_v, tol, ib, fb):  # noqa: ANN001
    """In place: q, v nearest to the given ones that satisfy the position and velocity constraints
    with the coordinates ``fixed_q`` and velocities ``fixed_v`` (int64 indices) held; returns the
    largest residual left (non-zero when the held values contradict the constraints). The
    standalone FMU's ``nb_assembly`` is this iteration with :func:`cholesky_step` alone."""
    model, ws, rows, A, c, ct, free_q, free_v = setup(fixed_q, fixed_v, ib, fb)
    for _ in range(30):
        _evaluate(t, q, rows, model, ws, A, c, ct)
        if rows.shape[0] == 0 or _max_abs(c) <= tol:
            break
        _min_norm_step(A, c, free_q, q)
    _evaluate(t, q, rows, model, ws, A, c, ct)
    _min_norm_step(A, _velocity_residual(A, v, ct), free_v, v)
    return residual(A, c, v, ct)


@njit(cache=True)
def _velocity_residual(A, v, ct):  # noqa: ANN001, ANN202
    """Cq·v + Ct over the active rows (a loop: the matrix is a few rows of a few columns)."""
    out = np.empty(ct.shape[0])
    for i in range(A.shape[0]):
        out[i] = ct[i]
        for k in range(A.shape[1]):
            out[i] += A[i, k] * v[k]
    return out
