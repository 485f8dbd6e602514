"""The standalone FMU's initial-state assembly: ``nb_config.constrained_state`` (the compiled
``Dynamics.constrained_state``) without its LAPACK branch, which the standalone library does not
have (numba's ``np.linalg.lstsq`` calls LAPACK gelsd through numba's Python extension): the same
Newton iteration with the same minimum-norm step by Cholesky (``nb_config.cholesky_step``), so
the result is bit for bit ``nb_config.constrained_state``'s whenever that function takes its
Cholesky branch. Where it would fall back to LAPACK (the rows restricted to the free coordinates
rank-deficient or ill-conditioned, or more rows than free coordinates) :func:`constrained_state`
returns -1 instead: the FMU then refuses the values with an Error (``c/sa_init.c``).

:func:`reference_pose` then takes the springs' unset free lengths and angles from the assembled
pose, as ``System.set_reference_pose`` does after the Simulator's first assembly.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ...compiled.nb_config import _evaluate, _max_abs, _velocity_residual, cholesky_step, residual, setup
from ...compiled.nb_flat import unflatten
from ...compiled.nb_kernels import relative, trig


@njit(cache=True)
def constrained_state(t, q, v, fixed_q, fixed_v, tol, ib, fb):  # noqa: ANN001, ANN201
    """``nb_config.constrained_state`` (in place on q, v; the largest residual left), or -1 where
    that function would need LAPACK."""
    model, ws, rows, A, c, ct, free_q, free_v = setup(fixed_q, fixed_v, ib, fb)
    for _ in range(30):
        _evaluate(t, q, rows, model, ws, A, c, ct)
        if rows.shape[0] == 0 or _max_abs(c) <= tol:
            break
        if not cholesky_step(A, c, free_q, q):
            return -1.0
    _evaluate(t, q, rows, model, ws, A, c, ct)
    if not cholesky_step(A, _velocity_residual(A, v, ct), free_v, v):
        return -1.0
    return residual(A, c, v, ct)


@njit(cache=True)
def reference_pose(q, ib, fb, sd_rows, rs_rows):  # noqa: ANN001, ANN201
    """``LoadSet.set_reference`` on the packed model (in place on fb): the free length L0 of the
    spring-dampers ``sd_rows`` and the free angle φ0 of the rotational ones ``rs_rows`` (those the
    mechanism leaves unset) from the assembled pose q, with the kernels' own geometry
    (``nb_kernels.relative``). Returns the number of values written."""
    model, _ = unflatten(ib, fb)
    n = model[0]
    qx = np.zeros(n + 3)
    for c in range(n):  # no slice assignment: its shape check raises with a formatted message (Python API)
        qx[c] = q[c]
    cs = np.zeros(n + 3)
    trig(qx, cs)
    vx = np.zeros(n + 3)
    gi, gf = model[5][2]  # sd: I[ci, cj] F[p_i, p_j, k, c, L0]
    for k in sd_rows:
        out = relative(qx, cs, vx, gi[k, 0], gi[k, 1], gf[k, 0], gf[k, 1], gf[k, 2], gf[k, 3])
        gf[k, 6] = math.hypot(out[4], out[5])
    ri, rf = model[5][3]  # rs: I[ci, cj] F[k, c, phi0]
    for k in rs_rows:
        rf[k, 2] = qx[ri[k, 1] + 2] - qx[ri[k, 0] + 2]
    return sd_rows.shape[0] + rs_rows.shape[0]
