"""Compiled saddle-point solve, drift projection and joint reactions for one configuration.

The saddle-point system [[M, Aᵀ], [A, 0]]·[a; λ] = [Q; γ] is solved through its Schur complement:
with M block diagonal and positive definite (every body has m > 0 and I > 0), a = M⁻¹(Q − Aᵀλ)
and S·λ = A·M⁻¹·Q − γ with S = A·M⁻¹·Aᵀ symmetric positive definite. The active constraint rows
are ordered by reverse Cuthill–McKee at compile time, so S is banded (half-bandwidth ``bw``) and
its L·D·Lᵀ (Cholesky) factorisation (``nb_band``) costs O(m·bw²): linear in the number of bodies
for chains and trees.

``sd`` (solve data): perm (active rows in band order), body_ptr/body_pos/body_slot (for each body,
the band positions of the rows touching it and the Jacobian slots of its x, y, θ), bw.

Scratch arrays come from ``workspace(model)`` (one per integration call). The per-evaluation
helpers are inlined at the numba IR level (``inline="always"``): a call that passes tuples of
arrays otherwise pays an atomic reference-count update per array, which dominated the cost of a
right-hand side. The price is a longer first compilation (cached afterwards).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .compiled_model import WIDTH
from .nb_band import band_factor, band_solve, band_substitute
from .nb_contact import contact_outputs
from .nb_joints import cam_expand, cam_reduce, constraint_rows
from .nb_kernels import body_blocks, borrow, stash, trig, unstash
from .nb_loads import applied_loads


@njit(cache=True, inline="always")
def _schur(Jv, Minv, sd, Sb, X, unit=False):  # noqa: ANN001
    """Banded lower storage of S = A·M⁻¹·Aᵀ (Sb[p, d] = S[p, p − d]) into Sb; with ``unit``,
    S = A·Aᵀ (M⁻¹ not read: the metric of the minimum-norm projections). S is summed body by
    body over the pairs of rows that touch the body; ``X`` (one row per (body, row) entry of
    ``sd``) first gathers each entry's three Jacobian values, zero where the row does not have
    the coordinate, so that the pair loop reads them contiguously and without branches."""
    perm, ptr, pos, slot, bw = sd
    Sb[:] = 0.0
    for e in range(pos.shape[0]):
        r = perm[pos[e]]
        for k in range(3):
            X[e, k] = Jv[r, slot[e, k]] if slot[e, k] >= 0 else 0.0
    for b in range(ptr.shape[0] - 1):
        # the body's M⁻¹ in registers: a store into Sb (the same scratch buffer) would reload it
        mi = (0.0,) * 9 if unit else (Minv[b, 0, 0], Minv[b, 0, 1], Minv[b, 0, 2], Minv[b, 1, 0], Minv[b, 1, 1],
                                      Minv[b, 1, 2], Minv[b, 2, 0], Minv[b, 2, 1], Minv[b, 2, 2])
        for e1 in range(ptr[b], ptr[b + 1]):  # a body's entries are in band order (compiled_model)
            p1, x0, x1, x2 = pos[e1], X[e1, 0], X[e1, 1], X[e1, 2]
            if unit:
                u0, u1, u2 = x0, x1, x2
            else:
                u0 = mi[0] * x0 + mi[1] * x1 + mi[2] * x2
                u1 = mi[3] * x0 + mi[4] * x1 + mi[5] * x2
                u2 = mi[6] * x0 + mi[7] * x1 + mi[8] * x2
            for e2 in range(ptr[b], e1 + 1):
                Sb[p1, p1 - pos[e2]] += X[e2, 0] * u0 + X[e2, 1] * u1 + X[e2, 2] * u2


@njit(cache=True, inline="always")
def _row_times(Jv, Jc, r, x, width):  # noqa: ANN001
    """(Cq·x)[r]: row r's slots in order, ground columns (−1) skipped."""
    acc = 0.0
    for k in range(width):
        if Jc[r, k] >= 0:
            acc += Jv[r, k] * x[Jc[r, k]]
    return acc


@njit(cache=True, inline="always")
def _a_times_w(Jv, Jc, perm, x, out, width):  # noqa: ANN001
    for p in range(perm.shape[0]):
        out[p] = _row_times(Jv, Jc, perm[p], x, width)


@njit(cache=True, inline="always")
def _a_times(Jv, Jc, perm, x, out):  # noqa: ANN001
    """out[p] = (A·x)[p] over the active rows in band order. The Jacobian's usual width (no cam)
    is passed as a constant, so that the compiler unrolls the loop over a row's slots (a third
    faster on a 1,000-link chain; the same sums)."""
    if Jc.shape[1] == WIDTH:
        _a_times_w(Jv, Jc, perm, x, out, WIDTH)
    else:
        _a_times_w(Jv, Jc, perm, x, out, Jc.shape[1])


@njit(cache=True, inline="always")
def _scatter_w(Jv, Jc, perm, lam, tmp, width):  # noqa: ANN001
    for p in range(perm.shape[0]):
        r = perm[p]
        for k in range(width):
            if Jc[r, k] >= 0:
                tmp[Jc[r, k]] += Jv[r, k] * lam[p]


@njit(cache=True, inline="always")
def _sub_at_times(Jv, Jc, perm, lam, x, tmp):  # noqa: ANN001
    """x −= Aᵀ·λ (Aᵀ·λ accumulated in tmp first; the usual width a constant, see :func:`_a_times`)."""
    tmp[:] = 0.0
    if Jc.shape[1] == WIDTH:
        _scatter_w(Jv, Jc, perm, lam, tmp, WIDTH)
    else:
        _scatter_w(Jv, Jc, perm, lam, tmp, Jc.shape[1])
    for i in range(tmp.shape[0]):
        x[i] -= tmp[i]


@njit(cache=True, inline="always")
def _power_w(Jv, Jc, lam, v, width):  # noqa: ANN001
    pc = 0.0
    for r in range(lam.shape[0]):
        pc -= lam[r] * _row_times(Jv, Jc, r, v, width)
    return pc


@njit(cache=True, inline="always")
def constraint_power(Jv, Jc, lam, v):  # noqa: ANN001
    """−λᵀ·Cq·v over every row, row by row (the usual width a constant, see :func:`_a_times`)."""
    if Jc.shape[1] == WIDTH:
        return _power_w(Jv, Jc, lam, v, WIDTH)
    return _power_w(Jv, Jc, lam, v, Jc.shape[1])


@njit(cache=True, inline="always")
def _minv_times(Minv, x, out):  # noqa: ANN001
    for b in range(Minv.shape[0]):
        for i in range(3):
            s = 0.0
            for j in range(3):
                s += Minv[b, i, j] * x[3 * b + j]
            out[3 * b + i] = s


@njit(cache=True)
def workspace(model):  # noqa: ANN001
    """Scratch arrays for one model, in this order: qx, vx, cs (n + 3); C, Jv, Ct, G (rows);
    M⁻¹ blocks (nb, 3, 3); Qx (n + 3); λ (rows); a, z, tmp (n); band vector and banded S (active
    rows); the Schur gather X (entries of sd, 3); the same three for the projection's solve data
    sdp. Reused by every call; ``nb_flat.workspace_in`` carves the same arrays from one buffer."""
    n, m, Jc, sd, sdp = model[0], model[1], model[3], model[6], model[8]
    ma, nb, mp = sd[0].shape[0], model[4][0].shape[0], sdp[0].shape[0]
    return (np.zeros(n + 3), np.zeros(n + 3), np.zeros(n + 3), np.zeros(m), np.zeros((m, Jc.shape[1])),
            np.zeros(m), np.zeros(m), np.zeros((nb, 3, 3)), np.zeros(n + 3), np.zeros(m), np.zeros(n),
            np.zeros(n), np.zeros(n), np.zeros(ma), np.zeros((ma, sd[4] + 1)), np.zeros((sd[2].shape[0], 3)),
            np.zeros(mp), np.zeros((mp, sdp[4] + 1)), np.zeros((sdp[2].shape[0], 3)))


@njit(cache=True, inline="always")
def _load_state(q, v, qx, vx, cs, n):  # noqa: ANN001
    for i in range(n):
        qx[i], vx[i] = q[i], v[i]
    trig(qx, cs)


@njit(cache=True)
def rows_at(t, ctx, gamma):  # noqa: ANN001
    """C, Jv, Ct and, with ``gamma``, γ of every constraint row at the configuration in the
    workspace's qx, cs, vx, with (inputs, model, ws) behind the :func:`context` pointer ``ctx``.
    Not inlined: the constraint rows of every kind are compiled once, for the dynamics and the
    projections alike (a cold start compiles each inlined copy anew). The projections need no γ
    (its velocity products are a third of the rows' cost)."""
    _, model, ws = unstash(ctx)
    constraint_rows(ws[0], ws[2], ws[1], t, model[2], ws[3], ws[4], ws[5], ws[6], gamma)


@njit(cache=True, inline="always")
def accelerate(t, q, v, ctx):  # noqa: ANN001
    """a, λ (all rows; dropped rows 0), C, Jv, Ct into the workspace; returns the energy rates
    (elastic, dissipated, input) and the ok flag, with (inputs, model, ws) behind the
    :func:`context` pointer ``ctx``. q and v must stay alive across the call (views of a live
    array are fine)."""
    return _accelerate(t, borrow(q), borrow(v), ctx)


@njit(cache=True)
def _accelerate(t, q, v, ctx):  # noqa: ANN001
    """:func:`accelerate`, compiled once (the stepper's right-hand side and the output vector both
    call it). A cam's three rows enter the solve as its reduced row (``nb_joints``); λ and the
    parameters' accelerations are expanded afterwards."""
    inputs, model, ws = unstash(ctx)
    n, _, cons, Jc, bodies, loads, sd, baum, _ = model
    qx, vx, cs, C, Jv, Ct, G, Minv, Qx, lam, a, z, tmp, rhs, Sb, X, _, _, _ = ws
    _load_state(q, v, qx, vx, cs, n)
    rows_at(t, ctx, n >= 0)  # True as a runtime bool: a literal would compile a second rows_at
    Qx[:] = 0.0
    body_blocks(qx, cs, vx, bodies, Minv, Qx)
    el, di, pin = applied_loads(qx, cs, vx, t, inputs, loads, bodies, Qx, n)
    perm, bw = sd[0], sd[4]
    lam[:] = 0.0
    _minv_times(Minv, Qx, z)
    if perm.shape[0] == 0:
        for i in range(n):
            a[i] = z[i]
        return el, di, pin, True
    if baum[0] > 0.0:  # Baumgarte: γ − 2α·Ċ − β²·C
        for r in range(G.shape[0]):
            cdot = Ct[r]
            for k in range(Jc.shape[1]):
                if Jc[r, k] >= 0:
                    cdot += Jv[r, k] * v[Jc[r, k]]
            G[r] -= 2.0 * baum[1] * cdot + baum[2] * baum[2] * C[r]
    cm = cons[7]
    cam_reduce(cm, Jv, G)
    _a_times(Jv, Jc, perm, z, rhs)
    for p in range(perm.shape[0]):
        rhs[p] -= G[perm[p]]
    _schur(Jv, Minv, sd, Sb, X)
    ok = band_solve(Sb, rhs, bw)
    for i in range(n):
        z[i] = Qx[i]
    _sub_at_times(Jv, Jc, perm, rhs, z, tmp)
    _minv_times(Minv, z, a)
    for p in range(perm.shape[0]):
        lam[perm[p]] = rhs[p]
    cam_expand(cm, Jv, Jc, G, lam, a)
    return el, di, pin, ok


@njit(cache=True)
def accelerations(t, q, v, inputs, model):  # noqa: ANN001
    """One-off call: a, λ, energy rates (elastic, dissipated, input), C, Jv, Ct (fresh arrays); ok."""
    ws = workspace(model)
    el, di, pin, ok = accelerate(t, q, v, context(inputs, model, ws))
    return ws[10], ws[9], el, di, pin, ws[3], ws[4], ws[5], ok


@njit(cache=True, inline="always")
def context(inputs, model, ws):  # noqa: ANN001
    """A pointer to owner-less views of (inputs, model, ws) in the caller's stack frame, for
    :func:`project_at` and ``nb_dop853.rhs_at``; valid until the caller returns. Making it builds
    and copies some sixty array views (about 0.35 µs for the slider crank): one-off calls make
    one, the stepper pins one per stepper instead (``nb_stepper.bind``)."""
    return stash(borrow((inputs, model, ws)))


@njit(cache=True, inline="always")
def project(t, y, model, tol, ws):  # noqa: ANN001
    """Minimum-norm projection, in place in y = [q, v, …], of q onto C = 0 (Newton) and of v onto
    Cq·v + Ct = 0. False if a solve failed (y is then partly projected). A one-off call; a loop
    makes a :func:`context` once and calls :func:`project_at`."""
    return _project(t, borrow(y), tol, context(y, model, ws))  # y stands in for the unused inputs


@njit(cache=True, inline="always")
def project_at(t, y, tol, ctx):  # noqa: ANN001
    """:func:`project` with (inputs, model, ws) behind the :func:`context` pointer ``ctx``: the work
    is one compiled function that callers neither copy some sixty array structs into per call nor
    compile their own copy of."""
    return _project(t, borrow(y), tol, ctx)


@njit(cache=True)
def _project(t, y, tol, ctx):  # noqa: ANN001
    _, model, ws = unstash(ctx)
    n, Jc, sd = model[0], model[3], model[8]  # the projection's solve data
    perm, bw = sd[0], sd[4]
    if perm.shape[0] == 0:
        return True
    qx, vx, cs, C, Jv, Ct, Minv = ws[0], ws[1], ws[2], ws[3], ws[4], ws[5], ws[7]
    tmp, c, Sb, X = ws[12], ws[16], ws[17], ws[18]
    q, v = y[:n], y[n:2 * n]
    vx[:] = 0.0
    factored, converged = False, False  # Sb holds the factor of A·Aᵀ at the last Newton iterate
    for _ in range(8):
        for i in range(n):  # qx[:n] = q without numba's shape check (cold start)
            qx[i] = q[i]
        trig(qx, cs)
        rows_at(t, ctx, n < 0)  # False (runtime bool, see _accelerate)
        worst = 0.0
        for k in range(perm.shape[0]):
            c[k] = C[perm[k]]
            worst = max(worst, abs(c[k]))
        if worst <= tol:
            converged = True
            break
        _schur(Jv, Minv, sd, Sb, X, True)
        if not band_factor(Sb, bw):
            return False
        band_substitute(Sb, c, bw)
        _sub_at_times(Jv, Jc, perm, c, q, tmp)
        factored = worst < 1e-8  # then A·Aᵀ at the final q is within ~1e-8 of this factor
    if not converged:  # C, Jv, Ct at the final q
        for i in range(n):  # qx[:n] = q without numba's shape check (cold start)
            qx[i] = q[i]
        trig(qx, cs)
        rows_at(t, ctx, n < 0)  # False (runtime bool, see _accelerate)
    _a_times(Jv, Jc, perm, v, c)
    big = 0.0
    for k in range(perm.shape[0]):
        c[k] += Ct[perm[k]]
        big = max(big, abs(c[k]))
    if not factored or big > 1e-6:  # reused factor: velocity residual ≤ ~1e-8 × 1e-6
        _schur(Jv, Minv, sd, Sb, X, True)
        if not band_factor(Sb, bw):
            return False
    band_substitute(Sb, c, bw)
    _sub_at_times(Jv, Jc, perm, c, v, tmp)
    return True


@njit(cache=True)
def reactions(q, lam, Jv, Jc, joints, n):  # noqa: ANN001
    """(n_joints, 3): fx, fy on the second body and mz about its joint point (see outputs.py)."""
    ptr, rows, col_i, col_j, pj = joints
    out = np.zeros((col_i.shape[0], 3))
    for k in range(col_i.shape[0]):
        second = col_j[k] < n
        col = col_j[k] if second else col_i[k]
        g0, g1, g2 = 0.0, 0.0, 0.0  # −Cqᵀ·λ of this joint's rows on the body's x, y, θ
        for e in range(ptr[k], ptr[k + 1]):
            r = rows[e]
            for s in range(Jc.shape[1]):
                c, f = Jc[r, s], Jv[r, s] * lam[r]
                if c == col:
                    g0 -= f
                elif c == col + 1:
                    g1 -= f
                elif c == col + 2:
                    g2 -= f
        if second:
            c, s_ = math.cos(q[col + 2]), math.sin(q[col + 2])
            ax, ay = c * pj[k, 0] - s_ * pj[k, 1], s_ * pj[k, 0] + c * pj[k, 1]
        else:
            ax, ay = pj[k, 0] - q[col], pj[k, 1] - q[col + 1]
        mz = g2 - (ax * g1 - ay * g0)
        sign = 1.0 if second else -1.0
        out[k, 0], out[k, 1], out[k, 2] = sign * g0, sign * g1, sign * mz
    return out


@njit(cache=True)
def energies(q, v, bodies):  # noqa: ANN001
    """Kinetic energy ½·vᵀ·M·v and gravitational energy −Σ m·g·R_G."""
    mass, inertia, cg, g = bodies
    T, Vg = 0.0, 0.0
    for b in range(mass.shape[0]):
        c, s = math.cos(q[3 * b + 2]), math.sin(q[3 * b + 2])
        gx, gy = c * cg[b, 0] - s * cg[b, 1], s * cg[b, 0] + c * cg[b, 1]
        w = v[3 * b + 2]
        vgx, vgy = v[3 * b] - w * gy, v[3 * b + 1] + w * gx  # velocity of the centre of mass
        T += 0.5 * mass[b] * (vgx * vgx + vgy * vgy) + 0.5 * inertia[b] * w * w
        Vg -= mass[b] * (g[0] * (q[3 * b] + gx) + g[1] * (q[3 * b + 1] + gy))
    return T, Vg


@njit(cache=True, inline="always")
def output_vector(t, y, ctx, model, joints, react_idx, effort_rows, e0, ws):  # noqa: ANN001
    """Every Simulator output in port order: per body x, y, θ, vx, vy, ω, ax, ay, α; reactions;
    driver efforts; energy terms; position residual; four per contact load. ``ctx``: the
    :func:`context` of (inputs, model, ws), ``ws`` the scratch from ``workspace`` behind it."""
    n = model[0]
    q, v = y[:n], y[n:2 * n]
    el, _, _, _ = accelerate(t, q, v, ctx)
    a, lam, C, Jv = ws[10], ws[9], ws[3], ws[4]
    react = reactions(q, lam, Jv, model[3], joints, n)
    nb = model[4][0].shape[0]
    contacts = model[5][5]
    out = np.empty(9 * nb + react_idx.shape[0] + effort_rows.shape[0] + 9 + 4 * contacts[0].shape[0])
    for b in range(nb):
        for i in range(3):
            out[9 * b + i], out[9 * b + 3 + i], out[9 * b + 6 + i] = q[3 * b + i], v[3 * b + i], a[3 * b + i]
    k = 9 * nb
    for e in range(react_idx.shape[0]):
        out[k] = react[react_idx[e, 0], react_idx[e, 1]]
        k += 1
    for e in range(effort_rows.shape[0]):
        out[k] = -lam[effort_rows[e]]
        k += 1
    T, Vg = energies(q, v, model[4])
    e_diss, w_in, w_con = y[2 * n], y[2 * n + 1], y[2 * n + 2]
    res = 0.0
    for r in range(C.shape[0]):
        res = max(res, abs(C[r]))
    tot = T + Vg + el
    vals = (T, Vg, el, tot, e_diss, w_in, w_con, tot + e_diss - w_in - w_con - e0, res)
    for x in vals:
        out[k] = x
        k += 1
    contact_outputs(ws[0], ws[2], ws[1], contacts[0], contacts[1], out, k)  # qx, cs, vx of accelerate
    return out
