"""The iterated update (Gauss–Newton on the measurement model) of a correction whose prior is wide:
the first after a gap in the measurements.

After a gap the predicted state can be off by a tenth of a radian and several rad/s (the inputs in
between were unknown, :class:`.records.GapNoise`), and over that distance the measurement model is
not linear: a slider crank's bearing forces, some hundreds of newtons at production speeds, bend
by several newtons — ten times their sensor noise — over 0.1 rad. One linear update then leaves
the estimate where the innovations of the next samples are far beyond their σ. The iterated
update re-linearises the measurements at each new estimate xᵢ (finite differences of the model's
outputs at that state, no integration) and solves

    xᵢ₊₁ = x̂ + Kᵢ·(y − h(xᵢ) − Hᵢ·(x̂ − xᵢ)),   Kᵢ = P·Hᵢᵀ·(Hᵢ·P·Hᵢᵀ + R)⁻¹

until the step is below ``TOL`` σ of each component (at most ``MAX_ITER`` times); the covariance
is that of the last linearisation. A parameter's column of H stays the prediction's (its effect on
the outputs at one state is smooth; moving it would rebuild the model).

What it returns to judge the correction by is the fit, not the prior: the residuals of the
measurements at the corrected state, y − h(x), in σ of each channel, and their sum of squares as
``nis``. Whether the gap's prior was a little too confident does not matter once the measurements
have placed the state (the correction is no statistic of the change tests); a correction that
found no state explaining the measurements (a wrong branch of the motion) leaves residuals far
beyond their noise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from . import nb_kalman
from .records import Innovation, wrap

StateEstimator = Any  # an .ekf.StateEstimator (which imports this module: no import back)
F64 = np.ndarray
MAX_ITER = 8
TOL = 1e-3  # σ: the Gauss–Newton step at which the iteration stops


def update(est: StateEstimator, measured: Mapping[str, float]) -> Innovation | None:
    """:meth:`~.ekf.StateEstimator.update`, iterated; the fit at the corrected state x: ``nu``
    = y − h(x), ``sd`` the channels' σ, ``nis`` = Σ (nu/sd)² (see the module's docstring)."""
    got = est._measured(measured)
    if got is None:
        return None
    rows, y = got
    ang, r = est.angular[rows], est.r[rows]
    x_hat, P = est.x.copy(), est.P
    x, h, H = x_hat, est.step.y[rows], np.ascontiguousarray(est.step.H[rows])
    for _ in range(MAX_ITER):
        nu = wrap(y - h, ang) - H @ (x_hat - x)
        Pn, dx, _, _, dx_sd = nb_kalman.update(P, H, r, nu)
        x_new = est._bounded(x_hat + dx)
        done = bool(np.all(np.abs(x_new - x) <= TOL * np.sqrt(np.maximum(np.diag(Pn), 1e-300))))
        fit = wrap(y - h, ang) - H @ (x_new - x)  # y − h(x_new) to first order about x
        x = x_new
        if done:
            break
        h, H = _observed(est, x, rows, H)
    est.P, est.x = Pn, x
    est._corrected()
    return Innovation([est.meas[i] for i in rows], fit, r.copy(), float(np.sum((fit / r) ** 2)), x - x_hat, dx_sd)


def _outputs(est: StateEstimator, x: F64) -> F64:
    """The measured outputs (all configured) at the state ``x``: its coordinates, speeds and input
    biases; the parameters as written."""
    kept, est.x = est.x, x
    try:
        est._set_inputs(est.inputs)
        est._write(x, params=False)
        return est.sim.output_vector()[est.i_run][2 * est.d:]
    finally:
        est.x = kept


def _observed(est: StateEstimator, x: F64, rows: list[int], H_prev: F64) -> tuple[F64, F64]:
    """h(x) and H at ``x`` by forward differences in the coordinates, speeds and input biases
    (steps of ``fd_scale`` of each σ); a parameter's column from ``H_prev``."""
    d, ang = est.d, est.angular[rows]
    h = _outputs(est, x)[rows]
    H = H_prev.copy()
    steps = est._deltas()
    for j in [*range(2 * d), *est.bias.values()]:
        xp = x.copy()
        xp[j] += steps[j]
        H[:, j] = wrap(_outputs(est, xp)[rows] - h, ang) / steps[j]
    return h, np.ascontiguousarray(H)
