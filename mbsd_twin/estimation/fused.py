"""The Python side of :mod:`.nb_filter`: a filter sample — and, when due, its linearisation — on a
compiled Simulator's arrays, each in one compiled call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import NDArray

from ..compiled.fastpath import Buffers, failure_text
from ..compiled.nb_dop853 import FAIL_MAX_STEPS
from ..errors import AssemblyError
from ..simulation.work import meter
from ..solvers.dynamics import SolverFailure
from . import linearisation, nb_filter
from .filter_config import FilterConfig
from .holds import Step, mean_step
from .records import PARAM_WRITE, GapNoise, Innovation, Linearisation, Prediction

if TYPE_CHECKING:
    from ..simulation.simulator import Simulator

F64 = np.ndarray


class Estimator(Protocol):
    """What these kernels read and write of an :class:`~.ekf.StateEstimator` (which imports this
    module: typed by its shape, so the import runs one way)."""

    age: int
    clamped: int
    cfg: FilterConfig
    inputs: dict[str, float]
    step: Prediction | None

    @property
    def sim(self) -> Simulator: ...
    @property
    def x(self) -> NDArray[Any]: ...
    @property
    def P(self) -> NDArray[Any]: ...  # noqa: N802
    @property
    def r(self) -> NDArray[Any]: ...
    @property
    def angular(self) -> NDArray[Any]: ...
    @property
    def low(self) -> NDArray[Any]: ...
    @property
    def high(self) -> NDArray[Any]: ...
    @property
    def i_run(self) -> NDArray[Any]: ...
    @property
    def n(self) -> int: ...
    @property
    def coords(self) -> list[str]: ...
    @property
    def speeds(self) -> list[str]: ...
    @property
    def meas(self) -> list[str]: ...
    @property
    def col(self) -> dict[str, int]: ...
    @property
    def bias(self) -> dict[str, int]: ...
    @property
    def param(self) -> dict[str, int]: ...
    @property
    def applied(self) -> dict[str, float]: ...
    @property
    def lin(self) -> Linearisation | None: ...

    def _held(self, steps: Sequence[Step], delta: tuple[str, float] | None) -> tuple[NDArray[Any], NDArray[Any]]: ...

    def _q_acc(self, lin: Linearisation, gap: GapNoise | None) -> NDArray[Any]: ...


class Plan:
    """What the kernels need of an estimator that does not change from sample to sample."""

    def __init__(self, est: Estimator, fb_index: dict[str, int]) -> None:
        sim = est.sim
        self.bias_cols = np.array([est.col[p] for p in est.bias], dtype=np.int64)
        self.bias_idx = np.array(list(est.bias.values()), dtype=np.int64)
        self.qi = np.array([sim.state_index(c) for c in est.coords], dtype=np.int64)
        self.vi = np.array([sim.state_index(v) for v in est.speeds], dtype=np.int64)
        self.i_run = est.i_run.astype(np.int64)
        self.param_idx = np.array(list(est.param.values()), dtype=np.int64)
        self.fb_index = fb_index
        self.param_fb = np.array([fb_index[name] for name in est.param], dtype=np.int64)
        self.out = np.zeros(len(est.meas) * 3 + 2 * est.n + 3)
        self.all_rows = np.arange(len(est.meas), dtype=np.int64)
        self.h_fixed = float(est.cfg.prediction_step)  # > 0: the prediction in fixed steps (nb_filter)
        self._runs: dict[tuple[str, ...], tuple[NDArray[np.int64], NDArray[np.int64]]] = {}

    def runs(self, runs: linearisation.Runs, est: Estimator) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The runs' kinds and targets as the kernel takes them (a state index, the parameter's
        place in the packed model, the input's column)."""
        key = tuple(port for _, port in runs.perts[est.n:])
        if key not in self._runs:
            self._runs[key] = (np.array([k for k, _ in runs.perts], dtype=np.int64),
                               np.array([t if k == 0 else self.fb_index[t] if k == 1 else est.col[t]
                                         for k, t in runs.perts], dtype=np.int64))
        return self._runs[key]


def plan(est: Estimator) -> Plan | None:
    """The kernels' plan when they can run this estimator: a compiled Simulator whose augmented
    parameters are all live (changed in place); else None (the Python methods)."""
    if "_plan" in est.__dict__:
        return est.__dict__["_plan"]
    where = {name: est.sim.parameter_index(name) for name in est.param}
    ok = est.sim.buffers() is not None and all(i is not None for i in where.values())
    p = Plan(est, {k: int(v) for k, v in where.items() if v is not None}) if ok else None
    est.__dict__["_plan"] = p
    return p


def _held(est: Estimator, steps: Sequence[Step], at_next: Mapping[str, float]) -> tuple[F64, F64, F64]:
    """End times, held input rows (biases added) and the inputs at the sample before biases."""
    times, U = est._held(steps, None)
    u_base = U[-1].copy()
    for port, v in at_next.items():
        u_base[est.col[port]] = v
    for port in est.bias:
        u_base[est.col[port]] = at_next.get(port, 0.0)
    if not U.shape[1]:  # no input ports: the compiled inputs array has one unused entry
        return times, np.zeros((len(times), 1)), np.zeros(1)
    return times, U, u_base


def _capped(status: int) -> None:
    """A fixed-step run that needed more steps than its block had left (FAIL_MAX_STEPS with the
    block's cap on, :func:`.nb_filter._march`, which begins no row it cannot finish): the block's
    work is used up (as an error-controlled run that stopped at the cap leaves it)."""
    m = meter()
    if status == FAIL_MAX_STEPS and m is not None and m.capped:
        m.charge(0, int(m.limit - m.used) + 1)


def _failed(est: Estimator, status: int) -> None:
    if status < 0:
        raise SolverFailure(f"integration failed at t={est.sim.time:.9g} s: {failure_text(status)}",
                            time=est.sim.time)
    if status == nb_filter.FAIL_ASSEMBLY:
        raise AssemblyError(f"{est.sim.mechanism.source}: the corrected state contradicts the constraints",
                            residual=float("nan"), iterations=30, time=est.sim.time, worst=[])


def linearise(est: Estimator, p: Plan, b: Buffers, times: F64, U: F64, u_base: F64, n_steps: int,
              h: float, extra: tuple[str, ...] = ()) -> Linearisation:
    """:meth:`~.ekf.StateEstimator._linearise` in one :func:`nb_filter.linearise` (``b``: the Simulator's
    buffers, which the call leaves as they were)."""
    runs = linearisation.runs(est, extra)
    kind, where = p.runs(runs, est)
    value = np.array([est.applied[t] if k == 1 else 0.0 for k, t in runs.perts])
    delta = linearisation.steps_of(est, runs)
    row = u_base.copy()
    row[p.bias_cols] += est.x[p.bias_idx]
    D = np.zeros((len(runs.perts), len(p.i_run)))
    status = nb_filter.linearise(*b, times, U, row, p.i_run, p.qi, p.vi, est.x, kind, where, value, delta, D,
                                 p.h_fixed)
    _capped(status)
    _failed(est, status)
    return linearisation.assembled(est, h, n_steps, D, runs, delta)


def sample(est: Estimator, p: Plan, steps: Sequence[Step], at_next: Mapping[str, float],
           measured: Mapping[str, float], rows: list[int], gap: GapNoise | None) -> Innovation:
    """:meth:`~.ekf.StateEstimator.predict` + :meth:`~.ekf.StateEstimator.update` in one :func:`nb_filter.sample`
    (after :func:`linearise` when the Jacobians are due)."""
    times, U, u_base = _held(est, steps, at_next)
    h = steps[-1][0] - est.sim.time
    b = est.sim.buffers()
    assert b is not None
    if linearisation.stale(est, h, len(steps)):
        lt, lU, _ = _held(est, mean_step(est.sim.time, list(steps)), at_next)
        linearisation.adopt(est, linearise(est, p, b, lt, lU, u_base, len(steps), h,
                                          tuple(gap.input_error) if gap else ()), h)
    else:
        est.age += 1
    lin = est.lin
    assert lin is not None
    y = np.array([measured[est.meas[i]] for i in rows])
    applied = np.array([est.applied[name] for name in est.param])
    status = nb_filter.sample(*b, times, U, u_base, p.bias_cols, p.bias_idx, p.i_run, p.qi, p.vi, est.x, est.P,
                              lin.F, lin.Q, est._q_acc(lin, gap), lin.H, est.r, y,
                              p.all_rows if len(rows) == len(est.meas) else np.array(rows, dtype=np.int64),
                              est.angular, est.low, est.high, p.param_idx, p.param_fb, applied, PARAM_WRITE, p.out,
                              p.h_fixed)
    written = {name: float(v) for name, v in zip(est.param, applied.tolist(), strict=True)
               if v != est.applied[name]} if est.param else {}
    est.applied.update(written)
    out = p.out.copy()  # the records below are views of this copy
    est.sim.buffers_done(b, float(out[-2]) if status == nb_filter.OK else None, written)
    if p.h_fixed > 0.0:
        _capped(status)
    est.inputs = dict(at_next)
    m, k, n = len(rows), len(est.meas), est.n
    if status >= 0:
        est.step = Prediction(lin.H, out[:k])
    _failed(est, status)
    est.clamped += int(out[-1])
    return Innovation([est.meas[i] for i in rows], out[k:k + m], out[k + m:k + 2 * m], float(out[-3]),
                      out[k + 2 * m:k + 2 * m + n], out[k + 2 * m + n:k + 2 * m + 2 * n])
