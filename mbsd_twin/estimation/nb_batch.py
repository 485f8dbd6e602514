"""A run of ordinary filter samples in one compiled call (issue 31, item 1): for each sample of a
sensor batch from the first one given, the held input rows of :func:`.holds.interval_steps` (as
``StateEstimator._held`` and ``fused._held`` build them), the due-check of
:func:`.linearisation.stale` and :func:`.nb_filter.sample` — into preallocated arrays, the
Simulator's outputs after each sample included (what the twin's row reads).

The run stops *before* a sample the per-sample path must take: new Jacobians due (or a travel too
close to its threshold to decide in floats), the work limit's per-call cap below one step, and —
the arrays then put back as they were before the sample — a failed prediction or correction, a
parameter estimate written into the model (the Simulator's Python side takes it up and checks it)
or the run's solver steps reaching the call's cap.
It stops *after* a sample whose change test of an augmented unknown, or whose divergence test, may
fire (mirrored here from the running sums with a margin, so a sample is never wrongly counted as
quiet): the twin then changes the filter before the next sample. The caller
(:mod:`.batch`) resumes the per-sample path at the returned count, so the results are those of the
per-sample path by construction.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..compiled import nb_stepper as ns
from ..compiled.nb_cache import guard as guard_cache
from . import nb_filter
from .linearisation import H_CHANGE

MARGIN = 1e-9  # relative: a statistic or a travel this close to its threshold is left to the per-sample path


@njit(cache=True)
def _held(u, x, A, ts, k, t_last, a_last, off, mcols, zoh, bias_cols, bias_idx, is_meas):  # noqa: ANN001, ANN202
    """(times, U, u_base) of the interval ending at sample ``k`` (``fused._held`` of the core's
    ``_steps``; before sample 0 the previous batch's last, at ``t_last`` with the inputs
    ``a_last``): one step when every input is held or unchanged, else the two half steps of the
    first-order hold."""
    nc = u.shape[0]
    prev = a_last if k == 0 else A[k - 1]
    t_prev, t_k = (t_last if k == 0 else ts[k - 1]), ts[k]
    one = True
    for j in range(mcols.shape[0]):
        c = mcols[j]
        if not zoh[j] and prev[c] != A[k, c]:
            one = False
    ns = 1 if one else 2
    times = np.empty(ns)
    U = np.empty((ns, nc))
    row = u.copy()
    for s in range(ns):
        for j in range(mcols.shape[0]):
            c = mcols[j]
            a, b = prev[c], A[k, c]
            if zoh[j]:
                row[c] = a
            elif one:
                row[c] = b
            else:
                mean, d = 0.5 * (a + b), (b - a) / 3.0
                row[c] = mean - d if s == 0 else mean + d
        for i in range(bias_cols.shape[0]):
            c = bias_cols[i]
            row[c] = (row[c] if is_meas[c] else 0.0) + x[bias_idx[i]]
        U[s] = row
    if ns == 2:
        times[0] = 0.5 * (t_prev + t_k) - off
    times[ns - 1] = t_k - off
    u_base = row.copy()
    for j in range(mcols.shape[0]):
        u_base[mcols[j]] = A[k, mcols[j]]
    for i in range(bias_cols.shape[0]):
        c = bias_cols[i]
        u_base[c] = A[k, c] if is_meas[c] else 0.0
    return times, U, u_base


@njit(cache=True)
def _stale(age, every, lin_h, lin_n, z, next_travel, h, ns, x, d):  # noqa: ANN001, ANN202
    """:func:`.linearisation.stale`, or True where the travel is within ``MARGIN`` of its threshold
    (``math.dist`` rounds its own way)."""
    if age + 1 >= every or abs(lin_h - h) > H_CHANGE * h or lin_n != ns:
        return True
    if z.shape[0] == 0:
        return False
    acc = 0.0
    for i in range(d):
        e = x[i] + h * x[d + i] - z[i]
        acc += e * e
    travel = math.sqrt(acc)
    return travel >= next_travel or (math.isfinite(next_travel) and abs(travel - next_travel) <= MARGIN * next_travel)


@njit(cache=True)
def _cusum_near(g, e, k, h):  # noqa: ANN001, ANN202
    """One side's sum after ``e`` (:class:`.change.Cusum`) and whether it may cross ``h``."""
    g = g + e - k
    if g <= 0.0:
        return 0.0, False
    return g, g > h - MARGIN * (1.0 + abs(h))


@njit(cache=True)
def _changes_near(G, out, t, armed, settle, cus_k, cus_h, aug_dx, m, n):  # noqa: ANN001, ANN202
    """The augmented unknowns' change tests (two sides each in ``G``, −1: no test) after the
    sample's ``out``; whether one may cross (also: a σ of 0, left to the per-sample path)."""
    if math.isnan(armed[0]):
        armed[0] = t + settle
    if t < armed[0]:
        return False
    k0 = out.shape[0] - 3 - 2 * n - 2 * m  # the predicted measurements' count
    for i in range(m):
        if out[k0 + m + i] == 0.0:
            return True
    near = False
    for j in range(aug_dx.shape[0]):
        if G[j, 0] < 0.0:
            continue
        dx, sd = out[k0 + 2 * m + aug_dx[j]], out[k0 + 2 * m + n + aug_dx[j]]
        e = dx / sd if sd > 0 else 0.0
        if not math.isfinite(e):
            continue
        G[j, 0], up = _cusum_near(G[j, 0], e, cus_k, cus_h)
        if up:
            return True
        G[j, 1], down = _cusum_near(G[j, 1], -e, cus_k, cus_h)
        near = near or down
    return near


@njit(cache=True)
def _diverge_near(W, win, nis, m, n_win, bound):  # noqa: ANN001, ANN202
    """``TwinCore._diverged``'s running sums with the sample's NIS; whether the test may fire
    (also: a window of mixed degrees of freedom, whose bound is not ``bound``, or one whose next
    entry to drop was not passed). ``W``: the window's oldest entries (NIS, dof) passed, then room
    for the new; ``win``: [next to drop, next free row, NIS sum, dof sum, length, rows passed,
    entries of the window after them not passed]."""
    end = int(win[1])
    W[end, 0], W[end, 1] = nis, m
    win[1] = end + 1
    win[2] += nis
    win[3] += m
    win[4] += 1
    while win[4] > n_win:
        j = int(win[0])
        if j == win[5] and win[6] > 0:
            return True
        win[2] -= W[j, 0]
        win[3] -= W[j, 1]
        win[0], win[4] = j + 1, win[4] - 1
    if win[4] < n_win:
        return False
    return win[3] != m * n_win or win[2] > bound - MARGIN * abs(bound)


@njit(cache=True, nogil=True)
def run(S, u, ib, fb, wb, ob, cb, flags, react_idx, effort_rows, i_energy, e0,  # noqa: ANN001, ANN201
        A, Y, ts, k0, t_last, a_last, off, mcols, zoh, is_meas,
        bias_cols, bias_idx, i_run, qi, vi, x, P, F, Q_in, Q_acc, H, r, rows, angular, low, high,
        param_idx, param_fb, applied, write_frac, h_fixed,
        age, every, lin_h, lin_n, z, next_travel, left,
        G, armed, settle, cus_k, cus_h, aug_dx, W, win, n_win, bound,
        OUT, X, SD, VEC):
    """The samples ``k0``, ``k0`` + 1, … of the batch (rig times ``ts``, measured inputs ``A`` in the
    input ports' columns, measurements ``Y`` of the rows ``rows``) while ordinary; sample
    ``k0`` + i's :func:`.nb_filter.sample` record in ``OUT[i]``, the state and its σ after it in
    ``X[i]``, ``SD[i]``, the outputs in ``VEC[i]``. ``left``: the solver steps the work limit has
    left (``Simulator.buffers`` capped ``SolverOptions.max_steps`` at it): each sample's cap is
    lowered by the steps taken before it, as the per-sample path's calls are
    (:func:`~mbsd_twin.simulation.work.open_call`). Returns the number of samples run and whether
    the run stopped before the next sample (the per-sample path must take it)."""
    d, n, m = qi.shape[0], x.shape[0], rows.shape[0]
    steps0, cap0 = S[4], ob[5]
    for i in range(ts.shape[0] - k0):
        k = k0 + i
        if left - (S[4] - steps0) < 1.0:
            return i, True
        ob[5] = min(cap0, left - (S[4] - steps0))
        times, U, u_base = _held(u, x, A, ts, k, t_last, a_last, off, mcols, zoh, bias_cols, bias_idx, is_meas)
        if _stale(age + i, every, lin_h, lin_n, z, next_travel, times[-1] - S[0], times.shape[0], x, d):
            return i, True
        keep = (S.copy(), u.copy(), flags.copy(), fb.copy(), wb.copy(), x.copy(), P.copy(), applied.copy())
        status = nb_filter.sample(S, u, ib, fb, wb, ob, cb, flags, react_idx, effort_rows, i_energy, e0,
                                  times, U, u_base, bias_cols, bias_idx, i_run, qi, vi, x, P, F, Q_in, Q_acc, H, r,
                                  Y[k], rows, angular, low, high, param_idx, param_fb, applied, write_frac, OUT[i],
                                  h_fixed)
        # failed, a parameter written, or the run's steps at the call's cap (the work limit's closing
        # charge for a call that reached it would differ from the per-sample calls')
        if status != nb_filter.OK or not np.array_equal(applied, keep[7]) or S[4] - steps0 >= cap0:
            S[:], u[:], flags[:], fb[:], wb[:], x[:], P[:, :], applied[:] = keep
            return i, True
        e0 = OUT[i, -2]
        X[i] = x
        for j in range(n):
            v = P[j, j]
            SD[i, j] = math.sqrt(0.0 if v < 0.0 else v)
        VEC[i] = ns.outputs(S, u, ib, fb, wb, cb, react_idx, effort_rows, e0)
        near = _changes_near(G, OUT[i], ts[k], armed, settle, cus_k, cus_h, aug_dx, m, n)
        if _diverge_near(W, win, OUT[i, -3], m, n_win, bound) or near:
            return i + 1, False
    return ts.shape[0] - k0, False


# embeds the engine's and nb_filter's compiled kernels: dropped with theirs (as nb_filter's)
guard_cache(run)
