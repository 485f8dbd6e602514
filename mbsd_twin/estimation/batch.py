"""The Python side of :mod:`.nb_batch`: a run of a batch's ordinary filter samples in one compiled
call, and the estimator's bookkeeping after it as :func:`.fused.sample` leaves it after each."""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ..simulation.work import meter
from . import fused, nb_batch
from .records import PARAM_WRITE, Innovation, Prediction

F64 = NDArray[np.float64]


class Inputs(NamedTuple):
    """A batch's measured inputs as the kernel takes them: ``A`` (samples × the Simulator's input
    ports; the measured ports' columns ``mcols`` filled, zero-order held where ``zoh``), ``is_meas``
    per column, the previous batch's last sample (``t_last``, ``a_last``), the samples' rig
    times ``ts`` and the time offset ``off`` of the model's clock."""

    A: F64
    mcols: NDArray[np.int64]
    zoh: NDArray[np.bool_]
    is_meas: NDArray[np.bool_]
    t_last: float
    a_last: F64
    ts: F64
    off: float


class Run(NamedTuple):
    """The samples run: their innovations and, per sample, the outputs, the state and its σ after
    it (Python lists: what the twin's row reads); whether the per-sample path must take the next."""

    innovations: list[Innovation]
    vec: list[list[float]]
    x: list[list[float]]
    sd: list[list[float]]
    handed_back: bool


def mirror(sums: Sequence[tuple[float, float] | None], armed_at: float | None, settle: float,
           cusum: tuple[float, float], offset: int, window: Collection[tuple[float, int]],
           window_sums: Sequence[float], n_win: int, bound: float, nb: int) -> tuple[Any, ...]:
    """What :func:`.nb_batch.run` mirrors of the twin's tests, for a run of up to ``nb`` samples:
    the two sides' sums of each augmented unknown's change test (None: no test; the unknowns'
    corrections at ``offset`` in the state), the rig time they are armed at (None: ``settle`` s
    after the next sample), the tests' (reference, threshold); the divergence test's window
    of (NIS, degrees of freedom), oldest first, its sums, length ``n_win`` and bound."""
    G = np.array([s if s is not None else (-1.0, -1.0) for s in sums], dtype=float).reshape(-1, 2)
    p = min(len(window), nb)
    W = np.zeros((p + nb, 2))
    if p:
        W[:p] = list(itertools.islice(window, p))
    win = np.array([0.0, p, window_sums[0], window_sums[1], len(window), p, len(window) - p])
    return (G, np.array([armed_at if armed_at is not None else math.nan]), float(settle), float(cusum[0]),
            float(cusum[1]), np.arange(offset, offset + len(sums), dtype=np.int64), W, win, int(n_win), float(bound))


def _arrays(est: Any, p: Any, size: int) -> tuple[F64, F64, F64, F64]:
    """The kernel's output arrays for batches of up to ``size`` samples (kept per estimator)."""
    got = est.__dict__.get("_batch_arrays")
    if got is None or got[0].shape[0] < size:
        got = (np.empty((size, p.out.shape[0])), np.empty((size, est.n)), np.empty((size, est.n)),
               np.empty((size, len(est.sim.output_names()))))
        est.__dict__["_batch_arrays"] = got
    return got


def run(est: Any, inp: Inputs, Y: F64, k0: int, at: Sequence[dict[str, float]], mirror: tuple[Any, ...]
        ) -> Run | None:
    """Samples ``k0``, ``k0`` + 1, … of a batch through :func:`.nb_batch.run` (``Y``: every
    configured measurement per sample, in ``est.meas`` order; ``at``: the inputs per sample as the
    per-sample path takes them; ``mirror``: the change and divergence tests' sums for the kernel's
    stops); None when the kernels cannot run this estimator."""
    p = fused.plan(est)
    lin = est.lin
    if p is None or lin is None or not len(est.col):
        return None
    b = est.sim.buffers()
    assert b is not None
    m = meter()
    left = math.inf if m is None else m.limit - m.used
    OUT, X, SD, VEC = _arrays(est, p, inp.ts.shape[0])
    applied = np.array([est.applied[name] for name in est.param])  # unchanged by a run
    z = lin.z if lin.z is not None else np.zeros(0)
    args = (*b, inp.A, Y, inp.ts, k0, inp.t_last, inp.a_last, inp.off, inp.mcols, inp.zoh, inp.is_meas,
            p.bias_cols, p.bias_idx, p.i_run, p.qi, p.vi, est.x, est.P, lin.F, lin.Q, est._q_acc(lin, None), lin.H,
            est.r, p.all_rows, est.angular, est.low, est.high, p.param_idx, p.param_fb, applied, PARAM_WRITE,
            p.h_fixed, est.age, est.cfg.jacobian_every, lin.h, lin.n_steps, z, est.next_travel, left, *mirror,
            OUT, X, SD, VEC)
    c, back = nb_batch.run(*args)
    if not c:
        est.sim.buffers_done(b)
        return Run([], [], [], [], back)
    out = OUT[:c].copy()  # the records below are views of this copy
    est.sim.buffers_done(b, float(out[-1, -2]))  # no parameter written (nb_batch.run)
    est.age += c
    est.inputs = dict(at[k0 + c - 1])
    k, n = len(est.meas), est.n  # every measurement corrected: k rows of ν and σ (nb_filter.sample's record)
    est.step = Prediction(lin.H, out[-1, :k])
    est.clamped += int(out[:, -1].sum())
    inns = [Innovation(list(est.meas), o[k:2 * k], o[2 * k:3 * k], float(o[-3]), o[3 * k:3 * k + n],
                       o[3 * k + n:3 * k + 2 * n]) for o in out]
    return Run(inns, VEC[:c].tolist(), X[:c].tolist(), SD[:c].tolist(), back)
