"""Compiled integration that continues across communication points, with DOP853 dense output.

A co-simulation step is usually shorter than the step the error control allows (1 ms against
several ms for the slider crank at rtol 1e-8). Clipping every internal step to the communication
point would multiply the work; instead, while the inputs stay the same, the integrator keeps its
own steps and a communication point inside the last step is served by the method's 7th-order dense
output (scipy's DOP853 interpolant: three extra stages per step that needs it), projected onto the
position and velocity constraints. The projected output state is never fed back, so with unchanged
inputs the internal steps — and the trajectory — do not depend on the communication grid at all.
When an input changes, the step beyond the current time is dropped and integration restarts from
the output state, with steps clipped to the next communication point (``clip``) until the inputs
hold still again.

All of it lives in one float64 array ``S`` (``state_size``), so ``S`` is the complete state:

    S[0] t       output time (the last communication point reached)
    S[1] t_old   start of the last accepted internal step
    S[2] t_new   its end, where integration continues
    S[3] h_abs   next internal step size
    S[4]         accepted internal steps so far
    S[5]         1 when F holds the dense output of [t_old, t_new]
    then y_new, f_new (state and derivative at t_new, projected), y_old (at t_old), y_out (at t),
    F (7 × ny dense-output coefficients).

The model comes as flat buffers (``nb_flat``); ``wb`` is scratch, ``ob`` the options
(rtol, atol, max_step, projection 0/1, projection tolerance, max steps per call, energy integrals
under error control 0/1/3, max error norm 0/1: ``error_norm.py``, and the offset of the stepper's
scratch in ``wb``: ``workspace_words``), ``cb`` the address table and context that the
right-hand side and the projection read (views of the inputs, the model and the scratch), pinned
once by :func:`bind`.
Each entry point works on owner-less views of its arguments (``nb_kernels.borrow``: no reference
counting on the ~60 views it builds); the caller, Python, holds the arrays meanwhile, and nothing
borrowed is returned. The entry points release the GIL (``nogil``): a twin's network thread
validates messages while its worker integrates.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray
from scipy.integrate._ivp import dop853_coefficients as _tab

from . import nb_dop853 as nd
from .nb_flat import unflatten, workspace_in, workspace_size
from .nb_indirect import N_FN, call_project, pin_context, pinned_context, table
from .nb_kernels import borrow, byte_size, shaped
from .nb_solve import output_vector

HS = 8
N_EXT = _tab.N_STAGES_EXTENDED
A_EXT = np.ascontiguousarray(_tab.A)
C_EXT = np.ascontiguousarray(_tab.C)
D = np.ascontiguousarray(_tab.D)
OK, FAIL_STEP, FAIL_SOLVE, FAIL_PROJECT, FAIL_MAX_STEPS = nd.OK, nd.FAIL_STEP, nd.FAIL_SOLVE, nd.FAIL_PROJECT, \
    nd.FAIL_MAX_STEPS


def state_size(ny: int) -> int:
    return HS + 11 * ny


def output_state(S: NDArray[np.float64]) -> NDArray[np.float64]:
    """The view of y_out, the state at the output time S[0], in S (the layout above)."""
    ny = (S.shape[0] - HS) // 11
    return S[HS + 3 * ny:HS + 4 * ny]


@njit(cache=True, inline="always")
def _workspace_size(model):  # noqa: ANN001
    n, m, Jc, sd, sdp = model[0], model[1], model[3], model[6], model[8]
    return workspace_size(n, model[4][0].shape[0], m, Jc.shape[1], sd[0].shape[0], sd[4], sd[2].shape[0],
                          sdp[0].shape[0], sdp[4], sdp[2].shape[0])


def workspace_words(model: tuple[Any, ...]) -> int:
    """The length of the model's workspace at the head of the scratch ``wb``; the stepper's own
    scratch follows (the options ``ob`` carry this offset, so that the entry points need not
    unpack the model to find it)."""
    return int(_workspace_size.py_func(model))


def scratch_size(model: tuple[Any, ...], ny: int) -> int:
    return workspace_words(model) + (N_EXT + 3) * ny


@njit(cache=True, inline="always")
def _copy(dst, src):  # noqa: ANN001
    """dst[:] = src for vectors of equal length, without the shape check whose error message
    numba would compile into every entry point (seconds of a cold start)."""
    for i in range(dst.shape[0]):
        dst[i] = src[i]


@njit(cache=True, inline="always")
def _views(S):  # noqa: ANN001
    ny = (S.shape[0] - HS) // 11
    o = HS
    return (S[o:o + ny], S[o + ny:o + 2 * ny], S[o + 2 * ny:o + 3 * ny], S[o + 3 * ny:o + 4 * ny],
            shaped(S, o + 4 * ny, (7, ny)))


@njit(cache=True, inline="always")
def _scratch(wb, o, ny):  # noqa: ANN001
    """The stepper's scratch in ``wb`` after the model's workspace (``o`` words long)."""
    K = shaped(wb, o, (N_EXT, ny))
    o += N_EXT * ny
    return K, wb[o:o + ny], wb[o + ny:o + 2 * ny], wb[o + 2 * ny:o + 3 * ny]


@njit(cache=True, inline="always")
def _context_value(u, ib, fb, wb):  # noqa: ANN001
    """(inputs, model, ws) as owner-less views of the arrays: what :func:`bind` pins."""
    u, ib, fb, wb = borrow((u, ib, fb, wb))
    model, _ = unflatten(ib, fb)
    return u, model, workspace_in(wb, model)


@njit(cache=True)
def bind(cb, u, ib, fb, wb):  # noqa: ANN001
    """Pin the views (inputs, model, ws) of these arrays into the buffer ``cb`` (an int64 array)
    when it is large enough, and return the bytes it needs (a call with an empty buffer asks; one
    entry point for both keeps a cold start short). The pinned value is the ``nb_solve.context``
    of every later :func:`start`, :func:`advance` and :func:`restart` with them. Building that
    context costs about 0.35 µs (some sixty array views), which an entry call that only
    interpolates would otherwise pay every time. The caller keeps the arrays, changes the inputs
    ``u`` in place only, and binds once."""
    value = _context_value(u, ib, fb, wb)
    need = 8 * N_FN + byte_size(value)
    if cb.shape[0] * 8 >= need:
        pin_context(cb, value)
    return need


@njit(cache=True, nogil=True)
def start(S, t0, y0, u, ib, fb, wb, ob, cb, keep):  # noqa: ANN001
    """Fill S from (t0, y0) with a fresh initial step size — or, with ``keep``, the step size the
    error control last proposed, when there is one: a re-initialisation amid a run (a filter's
    correction, a re-synchronisation) moves the state by little, and the first step's error control
    rejects a size that no longer fits. Hairer's initial step is a cautious guess (a twentieth of
    the step the slider crank goes on to take): after each correction of a 1 kHz filter it cost the
    next millisecond 3–6 steps where one suffices. False if f(t0, y0) failed. ``cb``: the buffer of
    :func:`bind`."""
    S, y0, ob = borrow((S, y0, ob))
    h = S[3]
    y_new, f_new, y_old, y_out, _F = _views(S)
    ctx = table(cb)
    _copy(y_new, y0)
    _copy(y_old, y0)
    _copy(y_out, y0)
    S[0] = S[1] = S[2] = t0
    S[5] = 0.0  # S[4], the steps, counts on across restarts (a bound on a batch's work reads it)
    ok = nd.rhs_at(t0, y_new, f_new, ctx)
    if keep and h > 0.0 and h <= ob[2]:  # a step size of this run (not NaN, within max_step)
        S[3] = h
    else:
        S[3] = nd.initial_step(t0, y_new, f_new, ctx, ob[0], ob[1], ob[2])
    return ok


@njit(cache=True, nogil=True)
def restart(S, u, ib, fb, wb, cb):  # noqa: ANN001
    """Continue from (t, y_out) with new inputs: the rest of the last step is dropped. ``cb``: the
    buffer of :func:`bind`."""
    S = borrow(S)
    y_new, f_new, _y_old, y_out, _F = _views(S)
    ctx = table(cb)
    _copy(y_new, y_out)
    S[1] = S[2] = S[0]
    S[5] = 0.0
    return nd.rhs_at(S[0], y_new, f_new, ctx)


@njit(cache=True, inline="always")
def _finite(y):  # noqa: ANN001
    ok = True
    for i in range(y.shape[0]):
        ok = ok and math.isfinite(y[i])
    return ok


@njit(cache=True, inline="always")
def _step(S, ctx, K, ys, yr, ye, t_limit, ob):  # noqa: ANN001
    """One accepted step from t_new (retrying with smaller steps); y_old ← y_new, y_new ← the
    projected result. Returns a status. ``ctx``: (inputs, model, ws), ``nb_solve.context``."""
    y_new, f_new, y_old, _y_out, _F = _views(S)
    rtol, atol, max_step, ptol = ob[0], ob[1], ob[2], ob[4]
    n_ctrl = y_new.shape[0] - nd.N_QUAD + int(ob[6])  # ob[6]: energy integrals under control
    t = S[2]
    min_step = 10.0 * (np.nextafter(t, np.inf) - t)
    if S[3] != S[3]:  # a NaN step size (non-finite state or inputs) would never end the loop below
        return FAIL_STEP
    h_abs = min(max(S[3], min_step), max_step)
    rejected = False
    while True:
        if not h_abs >= min_step:  # also NaN
            return FAIL_STEP
        if h_abs == np.inf:  # no step limit and no finite size: halving would never shrink it
            h_abs = 1.0
        t_next = min(t + h_abs, t_limit)
        h = t_next - t
        fine = nd._stages(t, y_new, f_new, h, ctx, K, ys, yr)
        err = nd._error_norm(K, h, y_new, yr, ys, ye, rtol, atol, n_ctrl, ob[7] > 0.0) if fine else np.inf
        if err < 1.0 and not _finite(yr):  # e.g. energy integrals overflowing (no error control on them)
            err = np.inf
        if err < 1.0:
            factor = 10.0 if err == 0.0 else min(10.0, 0.9 * err ** (-1.0 / 8.0))
            S[3] = h * (min(1.0, factor) if rejected else factor)
            break
        h_abs = h * max(0.2, 0.9 * err ** (-1.0 / 8.0)) if math.isfinite(err) else 0.5 * h
        rejected = True
    _copy(y_old, y_new)
    _copy(y_new, yr)
    S[1], S[2], S[5] = t, t_next, 0.0
    S[4] += 1.0
    if ob[3] > 0.0:
        if call_project(t_next, y_new, ptol, ctx) == 0:
            return FAIL_PROJECT
        if not nd.rhs_at(t_next, y_new, f_new, ctx):
            return FAIL_SOLVE
    else:
        _copy(f_new, K[nd.N_STAGES])
    return OK


@njit(cache=True, inline="always")
def _dense(S, ctx, K, ys, yr):  # noqa: ANN001
    """F from the stages of the last step (K, unprojected end yr): three extra stages."""
    _y_new, _f_new, y_old, _y_out, F = _views(S)
    t_old, h = S[1], S[2] - S[1]
    ny = y_old.shape[0]
    ok = True
    for s in range(nd.N_STAGES + 1, N_EXT):
        nd.combine(A_EXT[s, :s], K, ys)
        nd.advance_by(y_old, h, ys)
        ok = nd.rhs_at(t_old + C_EXT[s] * h, ys, borrow(K)[s], ctx) and ok
    for i in range(ny):
        dy = yr[i] - y_old[i]
        F[0, i] = dy
        F[1, i] = h * K[0, i] - dy
        F[2, i] = 2.0 * dy - h * (K[nd.N_STAGES, i] + K[0, i])
    for r in range(D.shape[0]):
        nd.combine(D[r], K, F[3 + r])
        for i in range(ny):
            F[3 + r, i] *= h
    S[5] = 1.0
    return ok


@njit(cache=True, inline="always")
def _interpolate(S, t, ctx, ob):  # noqa: ANN001
    """y_out ← the dense output at t, projected onto the constraints when asked."""
    _y_new, _f_new, y_old, y_out, F = _views(S)
    x = (t - S[1]) / (S[2] - S[1])
    for i in range(y_old.shape[0]):
        acc = 0.0
        for r in range(6, -1, -1):
            acc += F[r, i]
            acc *= x if (6 - r) % 2 == 0 else 1.0 - x
        y_out[i] = y_old[i] + acc
    S[0] = t
    if ob[3] > 0.0 and call_project(t, y_out, ob[4], ctx) == 0:
        return FAIL_PROJECT
    return OK


@njit(cache=True, nogil=True)
def advance(S, t_end, clip, wb, ob, cb):  # noqa: ANN001
    """Bring the output state to t_end (the inputs that :func:`bind` pinned held). With ``clip`` the
    internal steps end at t_end; otherwise they run on and t_end is interpolated. On failure the
    output state is the last accepted step's. Returns a status (nb_dop853.OK or a FAIL_* code).
    ``cb``: the buffer of :func:`bind`, through which the physics reads the inputs and the model
    (so they are no arguments here: each array argument costs a call from Python about 40 ns)."""
    if t_end <= S[0]:
        return OK
    S, wb, ob = borrow((S, wb, ob))
    ctx = table(cb)  # the physics behind it reads the context bind pinned: no model unpacked here
    y_new, _f_new, _y_old, y_out, _F = _views(S)
    K, ys, yr, ye = _scratch(wb, int(ob[8]), y_new.shape[0])
    if S[5] > 0.0 and t_end <= S[2]:
        return _interpolate(S, t_end, ctx, ob)
    limit = t_end if clip else np.inf
    status, steps = OK, 0
    while S[2] < t_end:
        if steps >= ob[5]:
            status = FAIL_MAX_STEPS
            break
        status = _step(S, ctx, K, ys, yr, ye, limit, ob)
        steps += 1
        if status != OK:
            break
    if status != OK or S[2] == t_end:
        _copy(y_out, y_new)
        S[0], S[5] = S[2], 0.0
        return status
    if not _dense(S, ctx, K, ys, yr):
        _copy(y_out, y_new)
        S[0], S[5] = S[2], 0.0
        return FAIL_SOLVE
    return _interpolate(S, t_end, ctx, ob)


@njit(cache=True, nogil=True)
def outputs(S, u, ib, fb, wb, cb, react_idx, effort_rows, e0):  # noqa: ANN001
    """Every Simulator output at the output state (nb_solve.output_vector); ``cb``: the buffer of
    :func:`bind` (its pinned context saves building one per call)."""
    S, u, ib, fb, wb, react_idx, effort_rows = borrow((S, u, ib, fb, wb, react_idx, effort_rows))
    model, joints = unflatten(ib, fb)
    _y_new, _f_new, _y_old, y_out, _F = _views(S)
    ws = workspace_in(wb, model)
    return output_vector(S[0], y_out, pinned_context(cb, (u, model, ws)), model, joints, react_idx, effort_rows, e0,
                         ws)


@njit(cache=True, nogil=True)
def advance_held(S, times, U, u, ib, fb, wb, ob, cb, flags):  # noqa: ANN001
    """Advance through ``times`` with the inputs of row k of ``U`` held until ``times[k]``: for each
    row exactly what setting the inputs (a changed row restarts the integrator, see
    :func:`restart`) and calling :func:`advance` does, in one call. ``u`` is the inputs array the
    context ``cb`` was bound to (written in place); ``flags`` (int64: inputs changed for this call,
    for the previous one) are read and updated as the caller's own bookkeeping would be. Returns
    (status, rows done)."""
    for k in range(times.shape[0]):
        if not np.array_equal(U[k], u):
            _copy(u, U[k])
            flags[0] = 1
            restart(S, u, ib, fb, wb, cb)
        status = advance(S, times[k], flags[0] == 1 and flags[1] == 1, wb, ob, cb)
        flags[1], flags[0] = flags[0], 0
        if status != OK:
            return status, k
    return OK, times.shape[0]
