"""Compiled saddle-point solve, drift projection and joint reactions for one configuration.

The saddle-point system [[M, Aᵀ], [A, 0]]·[a; λ] = [Q; γ] is solved through its Schur complement:
with M block diagonal and positive definite (every body has m > 0 and I > 0), a = M⁻¹(Q − Aᵀλ)
and S·λ = A·M⁻¹·Q − γ with S = A·M⁻¹·Aᵀ symmetric positive definite. The active constraint rows
are ordered by reverse Cuthill–McKee at compile time, so S is banded (half-bandwidth ``bw``) and
its Cholesky factorisation costs O(m·bw²): linear in the number of bodies for chains and trees.

``sd`` (solve data): perm (active rows in band order), body_ptr/body_pos/body_slot (for each body,
the band positions of the rows touching it and the Jacobian slots of its x, y, θ), bw.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .nb_kernels import applied_loads, body_blocks, constraint_rows


@njit(cache=True)
def _inv3(Mb: np.ndarray, out: np.ndarray) -> None:
    for b in range(Mb.shape[0]):
        a, bb, c = Mb[b, 0, 0], Mb[b, 0, 1], Mb[b, 0, 2]
        d, e, f = Mb[b, 1, 0], Mb[b, 1, 1], Mb[b, 1, 2]
        g, h, k = Mb[b, 2, 0], Mb[b, 2, 1], Mb[b, 2, 2]
        A, B, C = e * k - f * h, -(d * k - f * g), d * h - e * g
        det = a * A + bb * B + c * C
        out[b, 0, 0], out[b, 1, 0], out[b, 2, 0] = A / det, B / det, C / det
        out[b, 0, 1] = -(bb * k - c * h) / det
        out[b, 1, 1] = (a * k - c * g) / det
        out[b, 2, 1] = -(a * h - bb * g) / det
        out[b, 0, 2] = (bb * f - c * e) / det
        out[b, 1, 2] = -(a * f - c * d) / det
        out[b, 2, 2] = (a * e - bb * d) / det


@njit(cache=True)
def _schur(Jv, Minv, sd, m_act):  # noqa: ANN001
    """Banded lower storage of S = A·M⁻¹·Aᵀ (Sb[p, d] = S[p, p − d])."""
    perm, ptr, pos, slot, bw = sd
    Sb = np.zeros((m_act, bw + 1))
    for b in range(ptr.shape[0] - 1):
        for e1 in range(ptr[b], ptr[b + 1]):
            p1, r1 = pos[e1], perm[pos[e1]]
            x = np.empty(3)  # A[p1, b-columns]
            for al in range(3):
                x[al] = Jv[r1, slot[e1, al]] if slot[e1, al] >= 0 else 0.0
            u0 = Minv[b, 0, 0] * x[0] + Minv[b, 0, 1] * x[1] + Minv[b, 0, 2] * x[2]
            u1 = Minv[b, 1, 0] * x[0] + Minv[b, 1, 1] * x[1] + Minv[b, 1, 2] * x[2]
            u2 = Minv[b, 2, 0] * x[0] + Minv[b, 2, 1] * x[1] + Minv[b, 2, 2] * x[2]
            for e2 in range(ptr[b], ptr[b + 1]):
                p2, r2 = pos[e2], perm[pos[e2]]
                if p2 > p1:
                    continue
                acc = 0.0
                if slot[e2, 0] >= 0:
                    acc += Jv[r2, slot[e2, 0]] * u0
                if slot[e2, 1] >= 0:
                    acc += Jv[r2, slot[e2, 1]] * u1
                if slot[e2, 2] >= 0:
                    acc += Jv[r2, slot[e2, 2]] * u2
                Sb[p1, p1 - p2] += acc
    return Sb


@njit(cache=True)
def band_solve(Sb: np.ndarray, rhs: np.ndarray, bw: int) -> bool:
    """In-place banded Cholesky of Sb and solve; ``rhs`` becomes the solution. False if S is not
    positive definite (singular configuration or redundant rows)."""
    m = Sb.shape[0]
    for i in range(m):
        for j in range(max(0, i - bw), i + 1):
            s = Sb[i, i - j]
            for k in range(max(0, i - bw), j):
                s -= Sb[i, i - k] * Sb[j, j - k]
            if i == j:
                if not s > 1e-300:
                    return False
                Sb[i, 0] = math.sqrt(s)
            else:
                Sb[i, i - j] = s / Sb[j, 0]
    for i in range(m):
        s = rhs[i]
        for k in range(max(0, i - bw), i):
            s -= Sb[i, i - k] * rhs[k]
        rhs[i] = s / Sb[i, 0]
    for i in range(m - 1, -1, -1):
        s = rhs[i]
        for k in range(i + 1, min(m, i + bw + 1)):
            s -= Sb[k, k - i] * rhs[k]
        rhs[i] = s / Sb[i, 0]
    return True


@njit(cache=True)
def _a_times(Jv, Jc, perm, x):  # noqa: ANN001
    """(A·x)[p] over the active rows in band order (ground columns are −1)."""
    out = np.zeros(perm.shape[0])
    for p in range(perm.shape[0]):
        r = perm[p]
        for k in range(Jc.shape[1]):
            if Jc[r, k] >= 0:
                out[p] += Jv[r, k] * x[Jc[r, k]]
    return out


@njit(cache=True)
def _at_times(Jv, Jc, perm, lam, n):  # noqa: ANN001
    out = np.zeros(n)
    for p in range(perm.shape[0]):
        r = perm[p]
        for k in range(Jc.shape[1]):
            if Jc[r, k] >= 0:
                out[Jc[r, k]] += Jv[r, k] * lam[p]
    return out


@njit(cache=True)
def _minv_times(Minv, x):  # noqa: ANN001
    out = np.zeros(x.shape[0])
    for b in range(Minv.shape[0]):
        for i in range(3):
            s = 0.0
            for j in range(3):
                s += Minv[b, i, j] * x[3 * b + j]
            out[3 * b + i] = s
    return out


@njit(cache=True)
def accelerations(t, q, v, inputs, model):  # noqa: ANN001
    """a, λ (all rows; dropped rows 0), energy rates (dissipated, input) and C, Jv, Ct; ok flag."""
    n, m, cons, Jc, bodies, loads, sd, baum = model
    qx, vx = np.zeros(n + 3), np.zeros(n + 3)
    qx[:n], vx[:n] = q, v
    C, Ct, G = np.empty(m), np.empty(m), np.empty(m)
    Jv = np.zeros((m, Jc.shape[1]))
    constraint_rows(qx, vx, t, cons, C, Jv, Ct, G, True)
    nb = n // 3
    Mb, Minv = np.empty((nb, 3, 3)), np.empty((nb, 3, 3))
    Qx = np.zeros(n + 3)
    body_blocks(qx, vx, bodies, Mb, Qx)
    el, di, pin = applied_loads(qx, vx, t, inputs, loads, Qx, n)
    Q = Qx[:n]
    _inv3(Mb, Minv)
    perm, bw = sd[0], sd[4]
    lam = np.zeros(m)
    z = _minv_times(Minv, Q)
    if perm.shape[0] == 0:
        return z, lam, el, di, pin, C, Jv, Ct, True
    rhs = _a_times(Jv, Jc, perm, z)
    for p in range(perm.shape[0]):
        r = perm[p]
        g = G[r]
        if baum[0] > 0.0:  # Baumgarte: γ − 2α·Ċ − β²·C
            cdot = Ct[r]
            for k in range(Jc.shape[1]):
                if Jc[r, k] >= 0:
                    cdot += Jv[r, k] * v[Jc[r, k]]
            g -= 2.0 * baum[1] * cdot + baum[2] * baum[2] * C[r]
        rhs[p] -= g
    Sb = _schur(Jv, Minv, sd, perm.shape[0])
    ok = band_solve(Sb, rhs, bw)
    a = _minv_times(Minv, Q - _at_times(Jv, Jc, perm, rhs, n))
    for p in range(perm.shape[0]):
        lam[perm[p]] = rhs[p]
    return a, lam, el, di, pin, C, Jv, Ct, ok


@njit(cache=True)
def _identity_schur(Jv, Jc, perm, bw):  # noqa: ANN001
    """Banded A·Aᵀ over the active rows (for the minimum-norm projections)."""
    m = perm.shape[0]
    Sb = np.zeros((m, bw + 1))
    for p1 in range(m):
        r1 = perm[p1]
        for p2 in range(max(0, p1 - bw), p1 + 1):
            r2 = perm[p2]
            acc = 0.0
            for k1 in range(Jc.shape[1]):
                c1 = Jc[r1, k1]
                if c1 < 0:
                    continue
                for k2 in range(Jc.shape[1]):
                    if Jc[r2, k2] == c1:
                        acc += Jv[r1, k1] * Jv[r2, k2]
            Sb[p1, p1 - p2] = acc
    return Sb


@njit(cache=True)
def project(t, q, v, model, tol):  # noqa: ANN001
    """Minimum-norm projection of q onto C = 0 (Newton) and of v onto Cq·v + Ct = 0."""
    n, m, cons, Jc, bodies, loads, sd, baum = model
    perm, bw = sd[0], sd[4]
    if perm.shape[0] == 0:
        return q, v, True
    qx, vx = np.zeros(n + 3), np.zeros(n + 3)
    C, Ct, G = np.empty(m), np.empty(m), np.empty(m)
    Jv = np.zeros((m, Jc.shape[1]))
    q = q.copy()
    for _ in range(8):
        qx[:n] = q
        constraint_rows(qx, vx, t, cons, C, Jv, Ct, G, False)
        c = np.empty(perm.shape[0])
        worst = 0.0
        for p in range(perm.shape[0]):
            c[p] = C[perm[p]]
            worst = max(worst, abs(c[p]))
        if worst <= tol:
            break
        Sb = _identity_schur(Jv, Jc, perm, bw)
        if not band_solve(Sb, c, bw):
            return q, v, False
        q -= _at_times(Jv, Jc, perm, c, n)
    qx[:n] = q
    constraint_rows(qx, vx, t, cons, C, Jv, Ct, G, False)
    r = _a_times(Jv, Jc, perm, v)
    for p in range(perm.shape[0]):
        r[p] += Ct[perm[p]]
    Sb = _identity_schur(Jv, Jc, perm, bw)
    ok = band_solve(Sb, r, bw)
    return q, v - _at_times(Jv, Jc, perm, r, n), ok


@njit(cache=True)
def reactions(q, lam, Jv, Jc, joints, n):  # noqa: ANN001
    """(n_joints, 3): fx, fy on the second body and mz about its joint point (see outputs.py)."""
    ptr, rows, col_i, col_j, pj = joints
    out = np.zeros((col_i.shape[0], 3))
    for k in range(col_i.shape[0]):
        second = col_j[k] < n
        col = col_j[k] if second else col_i[k]
        g = np.zeros(3)
        for e in range(ptr[k], ptr[k + 1]):
            r = rows[e]
            for s in range(Jc.shape[1]):
                c = Jc[r, s]
                if c >= col and c < col + 3:
                    g[c - col] -= Jv[r, s] * lam[r]
        if second:
            c, s_ = math.cos(q[col + 2]), math.sin(q[col + 2])
            ax, ay = c * pj[k, 0] - s_ * pj[k, 1], s_ * pj[k, 0] + c * pj[k, 1]
        else:
            ax, ay = pj[k, 0] - q[col], pj[k, 1] - q[col + 1]
        mz = g[2] - (ax * g[1] - ay * g[0])
        sign = 1.0 if second else -1.0
        out[k, 0], out[k, 1], out[k, 2] = sign * g[0], sign * g[1], sign * mz
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


@njit(cache=True)
def output_vector(t, y, inputs, model, joints, react_idx, effort_rows, e0):  # noqa: ANN001
    """Every Simulator output in port order: per body x, y, θ, vx, vy, ω, ax, ay, α; reactions;
    driver efforts; energy terms; position residual."""
    n = model[0]
    q, v = y[:n], y[n:2 * n]
    a, lam, el, _, _, C, Jv, _, _ = accelerations(t, q, v, inputs, model)
    react = reactions(q, lam, Jv, model[3], joints, n)
    nb = n // 3
    out = np.empty(9 * nb + react_idx.shape[0] + effort_rows.shape[0] + 9)
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
    return out
