"""Compiled constraint rows of every kind (``constraint_rows``), with the two joints whose rows need
more than body coordinates: the knife edge (a velocity-level row) and the cam (two curves in
tangent contact, whose parameters are extra coordinates without mass).

The same physics as ``nonholonomic.KnifeEdge`` and ``cam.CamContact`` (the curves: ``nb_curves``).
The numpy kernels are kept, vectorised over batches, as the
independent check the tests compare these scalar versions with (tests/test_compiled_elements.py).

The cam's parameters carry no mass, so the Schur complement A·M⁻¹·Aᵀ of ``nb_solve`` does not
exist with its rows as they are. Its three rows (x, y, tangent) with the columns A_b (bodies) and
A_s (s1, s2) are reduced instead: the parameters' own equations A_sᵀ·λ = 0 (no force acts on them)
leave λ = N·μ with N = A_s[:, 0] × A_s[:, 1] (the 3-vector orthogonal to both columns), and the
rows' projection onto N, Nᵀ·A_b·a = Nᵀ·γ, is one row on the bodies alone (the contact's normal
equation). The packed model holds it as an extra row after the constraint rows
(``compiled_model``): the dynamics solve uses it instead of the three, then
:func:`cam_expand` sets λ = N·μ on the three rows and the parameters' accelerations from the
three rows, A_s·s̈ = γ − A_b·a_b (consistent: least squares through the 2 × 2 normal equations).
The position and velocity projections use the three rows themselves, as the numpy path does.
"""

from __future__ import annotations

from numba import njit

from .nb_curves import curve
from .nb_kernels import angles, att, coincident, drivers, point_on_line


@njit(cache=True)
def _world(cs, col, code, p, s):  # noqa: ANN001
    """a, T, K, L: the curve's point and derivatives turned into world axes by the body's angle."""
    c = curve(code, p, s)
    ax, ay = att(cs, col, c[0], c[1])
    tx, ty = att(cs, col, c[2], c[3])
    kx, ky = att(cs, col, c[4], c[5])
    lx, ly = att(cs, col, c[6], c[7])
    return ax, ay, tx, ty, kx, ky, lx, ly


@njit(cache=True, inline="always")
def _knife_edge(qx, cs, vx, ke, C, Jv, Ct, G, gam):  # noqa: ANN001
    """The velocity-level rows of ``nonholonomic.KnifeEdge`` (records I[ci, cj] F[p_j, n̂]): C = 0,
    Ct = 0, Jv = B (the blade's lateral normal n = A(θ_j)·n̂ against the relative velocity of the
    blade point P), γ = −Ḃ·v."""
    off, gi, gf = ke
    for k in range(gi.shape[0]):
        i, j, r = gi[k, 0], gi[k, 1], off + k
        ajx, ajy = att(cs, j, gf[k, 0], gf[k, 1])
        nx, ny = att(cs, j, gf[k, 2], gf[k, 3])
        dx, dy = qx[j] + ajx - qx[i], qx[j + 1] + ajy - qx[i + 1]  # d = P − r_i
        C[r] = Ct[r] = 0.0
        Jv[r, 0], Jv[r, 1], Jv[r, 2] = -nx, -ny, nx * dy - ny * dx
        Jv[r, 3], Jv[r, 4], Jv[r, 5] = nx, ny, ny * ajx - nx * ajy
        if gam:
            wi, wj = vx[i + 2], vx[j + 2]
            ddx, ddy = vx[j] - wj * ajy - vx[i], vx[j + 1] + wj * ajx - vx[i + 1]  # ḋ
            vrx, vry = ddx + wi * dy, ddy - wi * dx  # v_P,j − v_P,i
            G[r] = -(wj * (nx * vry - ny * vrx) - wj * wj * (nx * ajx + ny * ajy) - wi * (ny * ddx - nx * ddy))


@njit(cache=True)
def _rates(w, sd, c):  # noqa: ANN001
    """For a curve point moving with its body (ω = w) and along the curve (ṡ = sd), c = (a, T, K, L)
    in world axes: the velocity-quadratic part of P̈, −ω²·a + 2ω·ṡ·R90·T + ṡ²·K, and Ṫ = ω·R90·T + ṡ·K
    and the velocity-quadratic T̈ = −ω²·T + 2ω·ṡ·R90·K + ṡ²·L."""
    ax, ay, tx, ty, kx, ky, lx, ly = c
    w2, ws, s2 = w * w, 2.0 * w * sd, sd * sd
    return (-w2 * ax - ws * ty + s2 * kx, -w2 * ay + ws * tx + s2 * ky, -w * ty + sd * kx, w * tx + sd * ky,
            -w2 * tx - ws * ky + s2 * lx, -w2 * ty + ws * kx + s2 * ly)


@njit(cache=True)
def _cam_gamma(i, j, col_s, vx, wa, wb, G, r):  # noqa: ANN001
    """γ of one cam's three rows (see ``cam.py``): −(velocity-quadratic part of C̈)."""
    pix, piy, dtix, dtiy, ddtix, ddtiy = _rates(vx[i + 2], vx[col_s], wa)
    pjx, pjy, dtjx, dtjy, ddtjx, ddtjy = _rates(vx[j + 2], vx[col_s + 1], wb)
    tix, tiy, tjx, tjy = wa[2], wa[3], wb[2], wb[3]
    G[r], G[r + 1] = -(pix - pjx), -(piy - pjy)
    G[r + 2] = -((ddtix * tjy - ddtiy * tjx) + 2.0 * (dtix * dtjy - dtiy * dtjx) + (tix * ddtjy - tiy * ddtjx))


@njit(cache=True, inline="always")
def _row(Jv, r, j0, j1, j2, j3, j4, j5, j6, j7):  # noqa: ANN001
    Jv[r, 0], Jv[r, 1], Jv[r, 2], Jv[r, 3], Jv[r, 4], Jv[r, 5], Jv[r, 6], Jv[r, 7] = j0, j1, j2, j3, j4, j5, j6, j7


@njit(cache=True, inline="always")
def _cam(qx, cs, vx, cm, C, Jv, Ct, G, gam):  # noqa: ANN001
    """The three rows of ``cam.CamContact`` per cam (records I[ci, cj, column of s1, code_i, code_j,
    reduced row] F[parameters of curve i, of curve j]); Jv columns x_i, y_i, θ_i, x_j, y_j, θ_j,
    s1, s2. The reduced row gets C = Ct = 0 here and its Jacobian and γ from :func:`cam_reduce`."""
    off, gi, gf = cm
    w = gf.shape[1] // 2
    for k in range(gi.shape[0]):
        i, j, c, r = gi[k, 0], gi[k, 1], gi[k, 2], off + 3 * k
        wa = _world(cs, i, gi[k, 3], gf[k, :w], qx[c])
        wb = _world(cs, j, gi[k, 4], gf[k, w:], qx[c + 1])
        aix, aiy, tix, tiy, kix, kiy = wa[0], wa[1], wa[2], wa[3], wa[4], wa[5]
        ajx, ajy, tjx, tjy, kjx, kjy = wb[0], wb[1], wb[2], wb[3], wb[4], wb[5]
        C[r] = qx[i] + aix - qx[j] - ajx
        C[r + 1] = qx[i + 1] + aiy - qx[j + 1] - ajy
        C[r + 2] = tix * tjy - tiy * tjx
        tt = tix * tjx + tiy * tjy
        _row(Jv, r, 1.0, 0.0, -aiy, -1.0, 0.0, ajy, tix, -tjx)
        _row(Jv, r + 1, 0.0, 1.0, aix, 0.0, -1.0, -ajx, tiy, -tjy)
        _row(Jv, r + 2, 0.0, 0.0, -tt, 0.0, 0.0, tt, kix * tjy - kiy * tjx, tix * kjy - tiy * kjx)
        Ct[r] = Ct[r + 1] = Ct[r + 2] = C[gi[k, 5]] = Ct[gi[k, 5]] = 0.0
        if gam:
            _cam_gamma(i, j, c, vx, wa, wb, G, r)


@njit(cache=True)
def _normal(Jv, r):  # noqa: ANN001
    """N = A_s[:, 0] × A_s[:, 1] of the cam rows r, r + 1, r + 2 (columns s1, s2 in slots 6, 7)."""
    a0, a1, a2 = Jv[r, 6], Jv[r + 1, 6], Jv[r + 2, 6]
    b0, b1, b2 = Jv[r, 7], Jv[r + 1, 7], Jv[r + 2, 7]
    return a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0


@njit(cache=True, inline="always")
def cam_reduce(cm, Jv, G):  # noqa: ANN001
    """Each cam's reduced row Nᵀ·A_b (parameter slots zero) with γ = Nᵀ·γ of its three rows (after
    any Baumgarte terms), in the row the packed model reserves for it."""
    off, gi, _ = cm
    for k in range(gi.shape[0]):
        r, e = off + 3 * k, gi[k, 5]
        n0, n1, n2 = _normal(Jv, r)
        for s in range(6):
            Jv[e, s] = n0 * Jv[r, s] + n1 * Jv[r + 1, s] + n2 * Jv[r + 2, s]
        Jv[e, 6] = Jv[e, 7] = 0.0
        G[e] = n0 * G[r] + n1 * G[r + 1] + n2 * G[r + 2]


@njit(cache=True, inline="always")
def cam_expand(cm, Jv, Jc, G, lam, a):  # noqa: ANN001
    """After the solve with the reduced rows: λ = N·μ on each cam's three rows (μ, the reduced row's
    multiplier, set back to 0) and the parameters' accelerations from A_s·s̈ = γ − A_b·a_b."""
    off, gi, _ = cm
    for k in range(gi.shape[0]):
        r, e, c = off + 3 * k, gi[k, 5], gi[k, 2]
        n0, n1, n2 = _normal(Jv, r)
        mu = lam[e]
        lam[r], lam[r + 1], lam[r + 2], lam[e] = n0 * mu, n1 * mu, n2 * mu, 0.0
        m00, m01, m11, b0, b1 = 0.0, 0.0, 0.0, 0.0, 0.0
        for row in range(r, r + 3):
            rest = G[row]
            for s in range(6):
                if Jc[row, s] >= 0:
                    rest -= Jv[row, s] * a[Jc[row, s]]
            u, v = Jv[row, 6], Jv[row, 7]
            m00 += u * u
            m01 += u * v
            m11 += v * v
            b0 += u * rest
            b1 += v * rest
        det = m00 * m11 - m01 * m01
        a[c], a[c + 1] = (m11 * b0 - m01 * b1) / det, (m00 * b1 - m01 * b0) / det


@njit(cache=True, inline="always")
def constraint_rows(qx, cs, vx, t, cons, C, Jv, Ct, G, gam):  # noqa: ANN001
    """Fill C, Jv, Ct (and γ when ``gam``) for every constraint row (a cam's reduced row: see
    :func:`cam_reduce`)."""
    co, ra, pl, gr, cd, dd, ke, cm = cons
    coincident(qx, cs, vx, co, C, Jv, Ct, G, gam)
    angles(qx, ra, gr, C, Jv, Ct, G)
    point_on_line(qx, cs, vx, pl, C, Jv, Ct, G, gam)
    drivers(qx, cs, vx, t, cd, dd, C, Jv, Ct, G, gam)
    _knife_edge(qx, cs, vx, ke, C, Jv, Ct, G, gam)
    _cam(qx, cs, vx, cm, C, Jv, Ct, G, gam)
