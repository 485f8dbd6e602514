"""A compiled Dormand–Prince 8(5,3) integrator over the compiled right-hand side.

Step-size control follows the standard scheme (Hairer, Nørsett & Wanner): error norm (the max
norm by default, or scipy's root mean square; see ``error_norm.py``) from the 5th- and 3rd-order
embedded estimates, safety factor 0.9, step factor bounded to [0.2, 10], no
increase right after a rejected step. The Butcher tableau is taken from scipy's DOP853 tables, so
both integrators use the same method. The stepping itself (with projection and dense output) is
in ``nb_stepper``.

State y = [q (n), v (n), E_diss, W_in, W_con]; see ``dynamics.py``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from scipy.integrate._ivp import dop853_coefficients as _tab

from .nb_indirect import call_rhs
from .nb_kernels import borrow, unstash
from .nb_solve import accelerate, constraint_power

TAB_A = np.ascontiguousarray(_tab.A[:_tab.N_STAGES, :_tab.N_STAGES])
TAB_B = np.ascontiguousarray(_tab.B)
TAB_C = np.ascontiguousarray(_tab.C[:_tab.N_STAGES])
TAB_E3 = np.ascontiguousarray(_tab.E3)
TAB_E5 = np.ascontiguousarray(_tab.E5)
N_STAGES = _tab.N_STAGES
N_QUAD = 3  # E_diss, W_in, W_con (see _error_norm)

OK, FAIL_STEP, FAIL_SOLVE, FAIL_PROJECT, FAIL_MAX_STEPS = 0, -1, -2, -3, -4


@njit(cache=True, inline="always")
def _rhs(t, y, dy, ctx):  # noqa: ANN001
    """dy/dt into ``dy``; False if the solve failed or the result is not finite. (inputs, model,
    ws) are behind the ``nb_solve.context`` pointer ``ctx``. Inlined into its one caller, the
    right-hand side's table entry (``nb_entries``): a call level fewer on the hot path."""
    inputs, model, ws = unstash(ctx)
    n, Jc = model[0], model[3]
    v = y[n:2 * n]
    _, di, pin, ok = accelerate(t, y[:n], v, ctx)
    Jv, lam, a = ws[4], ws[9], ws[10]
    for i in range(n):
        dy[i], dy[n + i] = v[i], a[i]
    dy[2 * n], dy[2 * n + 1] = di, pin
    dy[2 * n + 2] = constraint_power(Jv, Jc, lam, v)
    finite = ok
    for k in range(dy.shape[0]):
        if not math.isfinite(dy[k]):
            finite = False
    return finite


@njit(cache=True, inline="always")
def rhs_at(t, y, dy, ctx):  # noqa: ANN001
    """:func:`_rhs` into the contiguous vector ``dy``, through the address table that follows the
    context ``ctx`` pinned by ``nb_stepper.bind`` (``nb_indirect``: compiled once, not into
    every caller)."""
    return call_rhs(t, y, dy, ctx) != 0


@njit(cache=True)
def _rms(x, scale):  # noqa: ANN001
    s = 0.0
    for k in range(x.shape[0]):
        s += (x[k] / scale[k]) ** 2
    return math.sqrt(s / x.shape[0])


@njit(cache=True)
def initial_step(t, y, f, ctx, rtol, atol, max_step):  # noqa: ANN001
    """Hairer's initial step size for DOP853 at (t, y) with f = f(t, y); one more evaluation of
    the right-hand side with (inputs, model, ws) behind the ``nb_solve.context`` pointer ``ctx``."""
    ny = y.shape[0]  # loops, not array expressions: no broadcast checks to compile (cold start)
    scale, y1, f1 = np.empty(ny), np.empty(ny), np.empty(ny)
    for i in range(ny):
        scale[i] = atol + abs(y[i]) * rtol
    d0, d1 = _rms(y, scale), _rms(f, scale)
    h0 = 1e-6 if (d0 < 1e-5 or d1 < 1e-5) else 0.01 * d0 / d1
    h0 = min(h0, max_step)
    for i in range(ny):
        y1[i] = y[i] + h0 * f[i]
    rhs_at(t + h0, y1, f1, ctx)
    for i in range(ny):
        f1[i] -= f[i]
    d2 = _rms(f1, scale) / h0
    h1 = max(1e-6, h0 * 1e-3) if (d1 <= 1e-15 and d2 <= 1e-15) else (0.01 / max(d1, d2)) ** (1.0 / 8.0)
    return min(100.0 * h0, h1, max_step)


@njit(cache=True, inline="always")
def combine(w, K, out):  # noqa: ANN001
    """out ← Σ_j w[j]·K[j] over the first len(w) rows of K, added term by term in the order of j:
    the same sums as a loop over components with an inner loop over j, but row by row, so that
    the inner loop runs over contiguous memory and vectorises. Zero weights are skipped."""
    for i in range(out.shape[0]):
        out[i] = 0.0
    for j in range(w.shape[0]):
        c = w[j]
        if c != 0.0:
            for i in range(out.shape[0]):
                out[i] += c * K[j, i]


@njit(cache=True, inline="always")
def advance_by(y, h, out):  # noqa: ANN001
    """out ← y + h·out (``out`` holding a :func:`combine` of stages)."""
    for i in range(out.shape[0]):
        out[i] = y[i] + h * out[i]


@njit(cache=True, inline="always")
def _stages(t, y, f, h, ctx, K, ys, y_new):  # noqa: ANN001
    """Stages into K (K[N_STAGES] = f(t + h, y_new)) and the 8th-order solution into y_new
    (``ctx``: the context pinned by ``nb_stepper.bind``, see :func:`rhs_at`)."""
    for i in range(f.shape[0]):  # K[0] = f without numba's shape check (its message costs compile time)
        K[0, i] = f[i]
    ok = True
    Kb = borrow(K)
    for s in range(1, N_STAGES):
        combine(TAB_A[s, :s], K, ys)
        advance_by(y, h, ys)
        ok = rhs_at(t + TAB_C[s] * h, ys, Kb[s], ctx) and ok
    combine(TAB_B, K, y_new)
    advance_by(y, h, y_new)
    return rhs_at(t + h, y_new, Kb[N_STAGES], ctx) and ok


@njit(cache=True)
def _error_norm(K, h, y, y_new, e5, e3, rtol, atol, n_ctrl, use_max):  # noqa: ANN001
    """DOP853's error norm over the first ``n_ctrl`` components: all of them, or without the last
    N_QUAD (the energy integrals, quadratures of the state) when their error control is off, as
    CVODES allows (the numpy path then gives them an infinite atol: the same norm). With
    ``use_max`` the largest component's h·e5²/√(e5² + 0.01·e3²) (scaled), else scipy's root mean
    square form (see ``error_norm.py``). ``e5``, ``e3``: scratch vectors (len(y)) for the two
    embedded error estimates."""
    combine(TAB_E5, K, e5)  # K may hold extra (dense-output) stages below its first len(TAB_E5)
    combine(TAB_E3, K, e3)
    n5, n3, worst = 0.0, 0.0, 0.0
    for i in range(n_ctrl):
        sc = atol + max(abs(y[i]), abs(y_new[i])) * rtol
        a5, a3 = (e5[i] / sc) ** 2, (e3[i] / sc) ** 2
        n5 += a5
        n3 += a3
        if use_max and a5 > 0.0:
            worst = max(worst, a5 / math.sqrt(a5 + 0.01 * a3))
    if use_max:
        return abs(h) * worst
    if n5 == 0.0 and n3 == 0.0:
        return 0.0
    return abs(h) * n5 / math.sqrt((n5 + 0.01 * n3) * K.shape[1])
