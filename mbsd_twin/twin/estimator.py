"""Virtual sensor: an independent estimate of an input torque from the measured motion alone.

The twin's model is driven *by* the measured motor torque; this estimate instead runs the model's
inverse dynamics along the measured motion (angle and speed of the synchronised body), so the
torque sensor and the model can be checked against each other (docs/mqtt-contract.md).

Per output sample t_b:

1. Smoothing: least-squares quadratics through the last W samples of the contiguous measured
   history (W = ``window``/dt, across batches), evaluated at t_b — causal Savitzky–Golay end-point
   filters: θ̂ from the (unwrapped) angle, ω̂ and α̂ from the speed. Right after a (re)start, while
   fewer than W samples precede t_b, the fit uses the first W samples of the batch instead.
2. Inverse dynamics: a copy of the mechanism in which an angle driver imposes θ̂ on the body (with
   ω̂ and α̂ as its derivatives) and the estimated input's torque load is removed; other input loads
   take their measured value at t_b (mapped inputs) or their start value 0. From M·a + Cqᵀ·λ = Q the
   driver's effort is the torque the motor must have applied: the estimate.

Positions are solved by Newton from the last solution (the twin's configuration after a reset),
so the estimate stays on the twin's assembly branch.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..analysis import multipliers
from ..kinematics import (
    KinematicsOptions,
    assemble,
    length_scale,
    rank_info,
    solve_positions,
    sweep,
    velocity_acceleration,
)
from ..model import Driver, Mechanism
from ..outputs import reaction_columns
from ..profiles import FunctionProfile
from ..system import compile_mechanism
from .protocol import SensorBatch

F = NDArray[np.float64]
DRIVER = "_twin_torque_estimate"


def fit_filters(m: int, p: int, dt: float) -> F:
    """Rows: value, first and second derivative at sample ``p`` of ``m`` samples ``dt`` apart of the
    least-squares polynomial of degree min(2, m − 1) through them (shape (3, m))."""
    deg = min(2, m - 1)
    tau = (np.arange(m) - p) * dt
    V = np.vander(tau, deg + 1, increasing=True)
    rows = np.zeros((3, m))
    rows[:deg + 1] = np.linalg.pinv(V)
    rows[2] *= 2.0
    return rows


class TorqueEstimator:
    """``estimate(batch, ends, guess)``: the input torque ``port`` at the samples ``ends``."""

    def __init__(self, mech: Mechanism, body: str, port: str, window: float, angle: str, speed: str,
                 inputs: dict[str, str]) -> None:
        self.body, self.port, self.window = body, port, float(window)
        self.angle, self.speed = angle, speed
        self.inputs = {p: c for c, p in inputs.items() if p != port}  # other mapped inputs: port → channel
        self.opts = KinematicsOptions()
        self._cur: dict[str, F] = {}  # the samples being solved: times, θ̂, ω̂, α̂ and other inputs
        self._check_load(mech)
        self.rebuild(mech)

    # ------------------------------------------------------------------ model
    def _check_load(self, mech: Mechanism) -> None:
        loads = [ld for ld in mech.loads if ld.input == self.port]
        ok = len(loads) == 1 and loads[0].type == "torque" and loads[0].bodies[0] == self.body \
            and (len(loads[0].bodies) < 2 or loads[0].bodies[1] == "ground")
        if not ok:
            raise ValueError(f"torque_estimate: input {self.port!r} must feed exactly one torque load on body "
                             f"{self.body!r} (reacting on ground); loads reading it: {[ld.name for ld in loads]}")

    def rebuild(self, mech: Mechanism) -> None:
        """(Re)build the driven copy (after a parameter change); forgets the history."""
        loads = []
        for ld in mech.loads:
            if ld.input == self.port:
                continue
            if ld.input is not None:
                prof = FunctionProfile(partial(self._input, ld.input)) if ld.input in self.inputs else None
                ld = dataclasses.replace(ld, input=None, value=0.0, profile=prof)
            loads.append(ld)
        drv = Driver(DRIVER, "angle", (self.body,), FunctionProfile(self._motion))
        self.system = compile_mechanism(dataclasses.replace(mech, drivers=(*mech.drivers, drv), loads=tuple(loads)))
        self.reset()
        self._cur = {"t": np.zeros(1), "theta": np.array([mech.body(self.body).angle]), "omega": np.zeros(1),
                     "alpha": np.zeros(1), **{p: np.zeros(1) for p in self.inputs}}
        q = assemble(self.system, None, 0.0, self.opts)
        dof = rank_info(self.system, q, 0.0, self.opts.rank_tol).dof
        if dof != 0:
            raise ValueError(f"torque_estimate needs a mechanism whose only free motion is the angle of "
                             f"{self.body!r}; with it driven, {dof} degree(s) of freedom remain")
        self.tol = self.opts.tol * max(1.0, length_scale(self.system))
        self.reset()

    def reset(self) -> None:
        """Forget the measured history (a discontinuity: start, gap, rig restart)."""
        self.hist: dict[str, F] = {self.angle: np.zeros(0), self.speed: np.zeros(0)}
        self.dt = 0.0
        self.q: F | None = None  # last solved configuration, velocity, acceleration (Newton predictor)
        self.v = self.a = np.zeros(0)
        self.t_last = self.t_ref = 0.0  # profile times are rig times − t_ref (small numbers)
        self._cur = {}

    # ------------------------------------------------------------ profiles
    def _index(self, t: Any) -> tuple[F, Any]:
        """``t`` as an array and the index of the nearest sample being solved."""
        tt = np.atleast_1d(np.asarray(t, float))
        return tt, np.abs(tt[:, None] - self._cur["t"][None, :]).argmin(axis=1)

    def _motion(self, t: Any) -> tuple[F, F, F]:
        """The driver profile: θ̂, ω̂, α̂ at the nearest solved sample, Taylor-extended to ``t``."""
        tt, k = self._index(t)
        th, om, al = self._cur["theta"][k], self._cur["omega"][k], self._cur["alpha"][k]
        d = tt - self._cur["t"][k]
        return th + om * d + 0.5 * al * d * d, om + al * d, al.copy()

    def _input(self, port: str, t: Any) -> tuple[F, F, F]:
        tt, k = self._index(t)
        return self._cur[port][k], np.zeros_like(tt), np.zeros_like(tt)

    # ------------------------------------------------------------ estimate
    def _smooth(self, batch: SensorBatch, ends: list[int]) -> dict[str, F]:
        """θ̂, ω̂, α̂ at the samples ``ends`` from the history plus this batch (history updated)."""
        if self.dt and abs(batch.dt - self.dt) > 1e-9 * self.dt:
            self.reset()
        self.dt = batch.dt
        w = max(3, round(self.window / batch.dt))
        prev = self.hist[self.angle]
        raw = np.asarray(batch.ch[self.angle], float)
        theta = np.unwrap(np.r_[prev[-1:], raw])[len(prev[-1:]):] if len(prev) else np.unwrap(raw)
        th_all, om_all = np.r_[prev, theta], np.r_[self.hist[self.speed], batch.ch[self.speed]]
        n0 = len(prev)
        m = min(w, len(th_all))
        out = {k: np.empty(len(ends)) for k in ("theta", "omega", "alpha")}
        cache: dict[int, F] = {}
        for i, b in enumerate(ends):
            start = max(0, n0 + b + 1 - m)  # the m samples ending at b (right after a reset: the first m)
            rows = cache.get(n0 + b - start)
            if rows is None:
                rows = cache[n0 + b - start] = fit_filters(m, n0 + b - start, batch.dt)
            seg = slice(start, start + m)
            out["theta"][i] = rows[0] @ th_all[seg]
            out["omega"][i], out["alpha"][i] = rows[0] @ om_all[seg], rows[1] @ om_all[seg]
        self.hist = {self.angle: th_all[-(w - 1):], self.speed: om_all[-(w - 1):]}
        return out

    def estimate(self, batch: SensorBatch, ends: list[int], guess: dict[str, float] | None = None) -> list[float]:
        """The torque estimate [N·m] at the samples ``ends`` of ``batch``. ``guess``: outputs of the
        twin's model (``<body>.x/.y/.theta``) for the first solve after a reset. Raises
        :class:`~mbsd_twin.errors.MbsdError` (or LinAlgError) when the motion cannot be followed."""
        fit = self._smooth(batch, ends)
        if self.q is None:
            self.t_ref = batch.t0
        t = np.array([batch.time(b) for b in ends]) - self.t_ref
        self._cur = {"t": t, **fit, **{p: np.array([batch.ch[c][b] for b in ends], float)
                                       for p, c in self.inputs.items()}}
        if self.q is None:
            self.q = assemble(self.system, self._guess(guess), float(t[0]), self.opts)
            self.v, self.a, self.t_last = np.zeros_like(self.q), np.zeros_like(self.q), float(t[0])
        h = (t - self.t_last)[:, None]
        pred = self.q[None, :] + h * self.v[None, :] + 0.5 * h * h * self.a[None, :]
        square = self.system.n_constraints == self.system.n_coord
        q, res, _, Cq, Ct = solve_positions(self.system, pred, t, self.opts, square)
        if (res > self.tol).any():  # too far for one Newton solve: continuation from the last point
            sw = sweep(self.system, t, self.q, self.opts)
            q, Cq = sw.q, sw.Cq
            _, _, Ct = self.system.evaluate_batch(q, t)
        v, a, solver = velocity_acceleration(self.system, q, t, Cq, Ct)
        assert solver is not None
        lam = multipliers(self.system, t, q, v, a, solver.inv)
        effort = reaction_columns(self.system, q, Cq, lam)[f"{DRIVER}.effort"]
        self.q, self.v, self.a, self.t_last = q[-1], v[-1], a[-1], float(t[-1])
        if not np.isfinite(effort).all():
            raise FloatingPointError("non-finite torque estimate")
        return [float(x) for x in effort]

    def _guess(self, outputs: dict[str, float] | None) -> F | None:
        s = self.system
        if not outputs or s.n_coord != 3 * s.n_body:
            return None
        try:
            return np.array([outputs[f"{b}.{c}"] for b in s.body_names for c in ("x", "y", "theta")])
        except KeyError:
            return None

