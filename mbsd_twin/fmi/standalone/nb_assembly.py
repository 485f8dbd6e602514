"""The standalone FMU's initial-state assembly: ``nb_config.constrained_state`` (the compiled
``Dynamics.constrained_state``) without its LAPACK branch, which the standalone library does not
have (numba's ``np.linalg.lstsq`` calls LAPACK gelsd through numba's Python extension): the same
Newton iteration with the same minimum-norm step by Cholesky (``nb_config.cholesky_step``), so
the result is bit for bit ``nb_config.constrained_state``'s whenever that function takes its
Cholesky branch. Where it would fall back to LAPACK (the rows restricted to the free coordinates
rank-deficient or ill-conditioned, or more rows than free coordinates) :func:`constrained_state`
returns -1 instead: the FMU then refuses the values with an Error (``c/sa_init.c``).
"""

from __future__ import annotations

from numba import njit

from ...compiled.nb_config import _evaluate, _max_abs, _velocity_residual, cholesky_step, residual, setup


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
