"""One filter sample — prediction through the held inputs, correction, re-initialisation of the
Simulator at the corrected state — in one compiled call on a compiled Simulator's arrays
(:meth:`~mbsd_twin.Simulator.buffers`).

It performs what :meth:`StateEstimator.predict` followed by
:meth:`StateEstimator.update` does through the Simulator's Python API (``advance_held``, the
inputs at the sample, ``output_vector``, the covariance propagation, the Kalman update of
:mod:`.nb_kalman`, ``set_configuration`` of the independent coordinates and speeds, the inputs with
the new biases); only the glue between those steps — some twenty Python calls, most of a sample's
cost — is gone, and the integrator restart for the sample's inputs, whose every effect the
re-initialisation overwrites. The results are the same bit for bit (tests/test_filter_kernels.py).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..compiled import nb_config as nc
from ..compiled import nb_dop853 as nd
from ..compiled import nb_stepper as ns
from ..compiled.nb_cache import guard as guard_cache
from ..compiled.nb_indirect import call_project, table
from . import nb_kalman

OK, FAIL_ASSEMBLY = 0, 2  # otherwise a nb_dop853 FAIL_* status (< 0) of the prediction
TOL, LEFT = 1e-12, 1e-8  # constrained_state's tolerance; the largest residual accepted (set_configuration's)


@njit(cache=True)
def _inputs(S, u, ib, fb, wb, cb, flags, row):  # noqa: ANN001
    """The Simulator's input change: a different row restarts the integrator."""
    if not np.array_equal(row, u):
        u[:] = row
        flags[0] = 1
        ns.restart(S, u, ib, fb, wb, cb)


@njit(cache=True)
def _wrapped(nu, angular):  # noqa: ANN001
    for i in range(nu.shape[0]):
        if angular[i]:
            nu[i] = np.remainder(nu[i] + math.pi, 2.0 * math.pi) - math.pi


@njit(cache=True)
def _run(S, u, ib, fb, wb, ob, cb, flags, react_idx, effort_rows, e0, times, U, row, i_run, h_fixed):  # noqa: ANN001
    """Through the held rows ``U`` to ``times[-1]``, then the inputs ``row``: (status, the outputs
    ``i_run``) — ``StateEstimator._run``. The integrator is not restarted for ``row`` (``flags``
    record the change): the outputs need only the state and the inputs, and every caller either
    re-initialises the state next (``_reinit`` overwrites all that a restart sets) or puts the
    arrays back; the third value says whether a restart is owed where neither happens. With
    ``h_fixed`` > 0 the rows are marched in classic Runge–Kutta steps of at most that length
    (:func:`_predict_fixed`; a restart is then always owed: the integrator's record is stale)."""
    if h_fixed > 0.0:
        status = _predict_fixed(S, u, ob, cb, flags, times, U, h_fixed)
    else:
        status, _ = ns.advance_held(S, times, U, u, ib, fb, wb, ob, cb, flags)
    if status != ns.OK:
        return status, np.zeros(i_run.shape[0]), False
    changed = not np.array_equal(row, u)
    if changed:
        u[:] = row
        flags[0] = 1
    owed = changed or h_fixed > 0.0  # the restart left out
    return ns.OK, ns.outputs(S, u, ib, fb, wb, cb, react_idx, effort_rows, e0)[i_run], owed


@njit(cache=True)
def _predict_fixed(S, u, ob, cb, flags, times, U, h_max):  # noqa: ANN001
    """The prediction through the held rows in :func:`_march`'s fixed steps (at most ``h_max`` in
    each row, at most ``SolverOptions.max_steps``) instead of DOP853 under error control: 4
    evaluations of the right-hand side per step and one projection at the end, where the
    error-controlled integration restarts and takes a 12-stage step in each half-sample row of a
    first-order hold (about 30 evaluations and two projections per 1 ms sample). The output state,
    its time and the step count (``S[4]``) advance, the dense output is marked stale, ``flags``
    are left as :func:`nb_stepper.advance_held` leaves them; on failure ``S`` is put back (the
    inputs stay those of the failing row, the steps taken counted)."""
    changed = flags[0] == 1
    for k in range(times.shape[0]):  # advance_held's bookkeeping: did the row change the inputs
        prev = U[k - 1] if k > 0 else u
        changed = (k == 0 and changed) or not np.array_equal(U[k], prev)
    S0 = S.copy()
    status, used = _march(S, u, ob, cb, times, U, h_max, ob[5])
    if status != ns.OK:
        S[:] = S0
        S[4] += used  # the steps taken count against a work limit also when the run failed
        return status
    S[4] += used
    S[5] = 0.0  # no dense output of the stale record (every caller restarts or re-initialises)
    flags[1], flags[0] = 1 if changed else 0, 0
    return ns.OK


@njit(cache=True)
def _output_state(S):  # noqa: ANN001
    ny = (S.shape[0] - ns.HS) // 11
    return S[ns.HS + 3 * ny:ns.HS + 4 * ny]  # the state at the output time (nb_stepper's layout)


@njit(cache=True)
def _reinit(S, u, ib, fb, wb, ob, cb, flags, react_idx, effort_rows, i_energy, q, v):  # noqa: ANN001
    """Restart at (q, v) with the energy integrals at zero (``Simulator._restart_at``: the record of
    streamed inputs and the step size kept); the new energy baseline [J]."""
    y_out = _output_state(S)
    nq = q.shape[0]
    y0 = np.zeros(y_out.shape[0])
    y0[:nq], y0[nq:2 * nq] = q, v
    ns.start(S, S[0], y0, u, ib, fb, wb, ob, cb, True)
    flags[1] = 1 if flags[0] == 1 or flags[1] == 1 else 0  # CompiledStepper.reset_state(streaming=True)
    flags[0] = 0
    return ns.outputs(S, u, ib, fb, wb, cb, react_idx, effort_rows, 0.0)[i_energy]


@njit(cache=True)
def _imposed(S, ib, fb, x, qi, vi):  # noqa: ANN001
    """(q, v, largest residual): the state with the coordinates ``qi`` and speeds ``vi`` set to
    ``x`` = [z, ż] and the rest moved onto the constraints (``set_configuration``)."""
    y_out = _output_state(S)
    d, nq = qi.shape[0], (y_out.shape[0] - 3) // 2
    q, v = y_out[:nq].copy(), y_out[nq:2 * nq].copy()
    for i in range(d):
        q[qi[i]], v[vi[i]] = x[i], x[d + i]
    left = nc.constrained_state(S[0], q, v, qi, vi, TOL, ib, fb)
    return q, v, left


@njit(cache=True)
def _march(S, u, ob, cb, times, U, h_max, budget):  # noqa: ANN001
    """The output state (``S[0]``, y_out) through the held rows ``U`` to ``times[-1]`` in classic
    Runge–Kutta steps of equal length, at most ``h_max`` in each row, then projected onto the
    constraints; S's integrator record is left stale (the caller puts S back). For finite
    differences: every run of a linearisation takes the same steps, so their differences are those
    of one smooth map, at 4 evaluations of the right-hand side per step where the error-controlled
    integration took 13 to 16 (restarts, stages, projection): half the linearisation's cost, its
    differences within 3e-7 of the error-controlled runs' (slider crank at 38 rad/s). At most
    ``budget`` steps: a row that would take more is not begun (FAIL_MAX_STEPS; after a violent input
    the last proposed step can be a millionth of the interval). Returns (status, steps taken)."""
    y = _output_state(S)
    ny = y.shape[0]
    ctx = table(cb)
    K = np.empty((4, ny))
    ys = np.empty(ny)
    t = S[0]
    used = 0
    for k in range(times.shape[0]):
        u[:] = U[k]
        if times[k] <= t:  # nothing to integrate (as ``nb_stepper.advance``)
            continue
        m = max(1, int(math.ceil(min((times[k] - t) / h_max, 1e15))))
        if used + m > budget:
            return ns.FAIL_MAX_STEPS, used
        used += m
        h = (times[k] - t) / m
        for _ in range(m):
            ok = nd.rhs_at(t, y, K[0], ctx)
            for i in range(ny):
                ys[i] = y[i] + 0.5 * h * K[0, i]
            ok = nd.rhs_at(t + 0.5 * h, ys, K[1], ctx) and ok
            for i in range(ny):
                ys[i] = y[i] + 0.5 * h * K[1, i]
            ok = nd.rhs_at(t + 0.5 * h, ys, K[2], ctx) and ok
            for i in range(ny):
                ys[i] = y[i] + h * K[2, i]
            ok = nd.rhs_at(t + h, ys, K[3], ctx) and ok
            if not ok:
                return ns.FAIL_SOLVE, used
            for i in range(ny):
                y[i] += h / 6.0 * (K[0, i] + 2.0 * K[1, i] + 2.0 * K[2, i] + K[3, i])
            t += h
        t = times[k]
    S[0] = t
    if ob[3] > 0.0 and call_project(t, y, ob[4], ctx) == 0:
        return ns.FAIL_PROJECT, used
    return ns.OK, used


@njit(cache=True)
def _fd_run(S, u, ib, fb, wb, ob, cb, react_idx, effort_rows, e0, times, U, row, i_run, h_max, budget):  # noqa: ANN001
    """(status, the outputs ``i_run`` after :func:`_march` of at most ``budget`` steps, with the inputs
    ``row`` at its end, the steps taken)."""
    status, used = _march(S, u, ob, cb, times, U, h_max, budget)
    if status != ns.OK:
        return status, np.zeros(i_run.shape[0]), used
    u[:] = row
    return ns.OK, ns.outputs(S, u, ib, fb, wb, cb, react_idx, effort_rows, e0)[i_run], used


@njit(cache=True)
def _placed(S, u, ib, fb, wb, cb, react_idx, effort_rows, i_energy, q, v):  # noqa: ANN001
    """The output state set to (q, v) with the energy integrals at zero, as :func:`_reinit` leaves
    it but without the integrator's restart (a finite-difference run marches from y_out); the
    energy there [J] (the run's baseline)."""
    y = _output_state(S)
    nq = q.shape[0]
    y[:nq], y[nq:2 * nq] = q, v
    y[2 * nq:] = 0.0
    return ns.outputs(S, u, ib, fb, wb, cb, react_idx, effort_rows, 0.0)[i_energy]


@njit(cache=True, nogil=True)
def linearise(S, u, ib, fb, wb, ob, cb, flags, react_idx, effort_rows, i_energy, e0,  # noqa: ANN001, ANN201
              times, U, row, i_run, qi, vi, x, kind, where, value, delta, D, h_fixed):
    """Finite differences of the prediction: the nominal run, then one run per perturbation p from
    the same start — ``kind`` 0: component ``where[p]`` of x = [z, ż] moved by ``delta[p]`` (the
    rest of the state onto the constraints); 1: the live parameter at ``fb[where[p]]`` (value
    ``value[p]``) moved; 2: input column ``where[p]`` moved over the whole interval. Each run
    marches in fixed steps (:func:`_march`) no longer than the step the integrator's error control
    last proposed (``S[3]``), each run at most ``SolverOptions.max_steps`` steps (``ob[5]``, which a
    work limit lowers to what its block has left; FAIL_MAX_STEPS beyond: a run takes about the
    prediction's own steps, unless the last proposed step is a stray tiny one); with ``h_fixed`` > 0
    (the prediction in fixed steps, :func:`_predict_fixed`) no longer than that. ``D[p]`` ←
    perturbed − nominal outputs ``i_run``. The Simulator is left as it was. Returns OK,
    FAIL_ASSEMBLY or a solver status."""
    S0, u0, f0 = S.copy(), u.copy(), flags.copy()
    span = times[-1] - S[0]
    h_max = min(h_fixed, max(span, 1e-9)) if h_fixed > 0.0 else S[3] if 0.0 < S[3] < span else max(span, 1e-9)
    status, base, _ = _fd_run(S, u, ib, fb, wb, ob, cb, react_idx, effort_rows, e0, times, U, row, i_run, h_max,
                              ob[5])
    y_out = _output_state(S0)
    nq = (y_out.shape[0] - 3) // 2
    for p in range(kind.shape[0] if status == ns.OK else 0):
        S[:], u[:] = S0, u0
        e, Up, rp = e0, U, row
        if kind[p] == 0:
            xp = x.copy()
            xp[where[p]] += delta[p]
            q, v, left = _imposed(S, ib, fb, xp, qi, vi)
            if left > LEFT:
                status = FAIL_ASSEMBLY
                break
            e = _placed(S, u, ib, fb, wb, cb, react_idx, effort_rows, i_energy, q, v)
        elif kind[p] == 1:
            fb[where[p]] = value[p] + delta[p]
            e = _placed(S, u, ib, fb, wb, cb, react_idx, effort_rows, i_energy, y_out[:nq].copy(),
                        y_out[nq:2 * nq].copy())
        else:
            Up, rp = U.copy(), row.copy()
            for k in range(U.shape[0]):
                Up[k, where[p]] += delta[p]
            rp[where[p]] += delta[p]
        status, col, _ = _fd_run(S, u, ib, fb, wb, ob, cb, react_idx, effort_rows, e, times, Up, rp, i_run,
                                 h_max, ob[5])
        if kind[p] == 1:
            fb[where[p]] = value[p]
        if status != ns.OK:
            break
        D[p] = col - base
    S[:], u[:], flags[:] = S0, u0, f0
    return status


@njit(cache=True, nogil=True)
def sample(S, u, ib, fb, wb, ob, cb, flags, react_idx, effort_rows, i_energy, e0,  # noqa: ANN001, ANN201
           times, U, u_base, bias_cols, bias_idx, i_run, qi, vi,
           x, P, F, Q_in, Q_acc, H, r, y, rows, angular, low, high, param_idx, param_fb, applied, write_frac, out,
           h_fixed):
    """Predict through ``times``/``U`` (the held input rows, biases added), then the inputs
    ``u_base`` + biases at the sample; correct with the measured ``y`` of the measurement rows
    ``rows`` (σ ``r``, Jacobian ``H``, ``angular`` rows wrapped); re-initialise at the corrected
    coordinates ``qi`` and speeds ``vi`` (indices into q and v). ``x``, ``P`` are updated in place;
    ``out`` receives [predicted measurements (all rows), ν, √diag S, dx, √diag KSKᵀ, NIS, e0,
    clamped]. A parameter estimate (state ``param_idx[j]``) that moved more than ``write_frac`` of
    its σ from ``applied[j]`` is written into the model (``fb[param_fb[j]]``) and ``applied``.
    ``h_fixed`` > 0: the prediction in fixed Runge–Kutta steps of at most that length
    (:func:`_predict_fixed`), else DOP853 under error control. Returns OK, FAIL_ASSEMBLY or the
    prediction's solver status."""
    row = u_base.copy()
    for k in range(bias_cols.shape[0]):
        row[bias_cols[k]] += x[bias_idx[k]]
    status, base, owed = _run(S, u, ib, fb, wb, ob, cb, flags, react_idx, effort_rows, e0, times, U, row, i_run,
                              h_fixed)
    if status != ns.OK:
        return status
    d, m, n = qi.shape[0], rows.shape[0], P.shape[0]
    x[:2 * d] = base[:2 * d]
    P[:, :] = nb_kalman.propagate(F, P, Q_in, Q_acc)
    pred = base[2 * d:]
    nu = y - pred[rows]
    _wrapped(nu, angular[rows])
    Pn, dx, nis, sd, dx_sd = nb_kalman.update(P, np.ascontiguousarray(H[rows]), r[rows], nu)
    P[:, :] = Pn
    x += dx
    clamped = 0.0
    for i in range(2 * d, n):
        a = x[i]
        if a < low[i - 2 * d] or a > high[i - 2 * d]:
            clamped = 1.0
            x[i] = min(max(a, low[i - 2 * d]), high[i - 2 * d])
    k = pred.shape[0]
    out[:k] = pred
    out[k:k + m], out[k + m:k + 2 * m] = nu, sd
    out[k + 2 * m:k + 2 * m + n], out[k + 2 * m + n:k + 2 * m + 2 * n] = dx, dx_sd
    out[-3], out[-1] = nis, clamped
    for j in range(param_idx.shape[0]):  # ``StateEstimator._write``: live parameters in place
        if abs(x[param_idx[j]] - applied[j]) > write_frac * math.sqrt(P[param_idx[j], param_idx[j]]):
            applied[j] = x[param_idx[j]]
            fb[param_fb[j]] = applied[j]
    q, v, left = _imposed(S, ib, fb, x, qi, vi)
    if left > LEFT:
        if owed:  # the state stays as predicted: the restart for the sample's inputs
            ns.restart(S, u, ib, fb, wb, cb)
        return FAIL_ASSEMBLY
    for k in range(bias_cols.shape[0]):  # the corrected biases take effect with the restart
        row[bias_cols[k]] = u_base[bias_cols[k]] + x[bias_idx[k]]
    u[:] = row
    out[-2] = _reinit(S, u, ib, fb, wb, ob, cb, flags, react_idx, effort_rows, i_energy, q, v)
    for i in range(d):
        x[i], x[d + i] = q[qi[i]], v[vi[i]]
    return OK


# this module's cached code embeds the engine's compiled kernels (nb_stepper, nb_config, …), which
# numba does not check: drop it when their sources change, as nb_cache does for theirs
guard_cache(_run)
