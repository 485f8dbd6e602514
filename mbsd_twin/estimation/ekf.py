"""An extended Kalman filter on a mechanism's independent coordinates, its prediction the Simulator.

State x = [z, ż, a]: the independent coordinates z (position outputs such as ``crank.theta``, one
per degree of freedom), their speeds ż (``crank.omega``) and augmented unknowns a — named model
parameters (``piston.mass``, ``main_bearing.viscous_friction``: the Simulator's fixed parameters)
and input biases (``motor_torque.bias``: the model is driven by measured value + bias, so an
unmeasured load torque on the crank, or the whole torque of an unmeasured input, is estimated).

Prediction over [t_k, t_k+1]: the Simulator itself, with the interval's input values (see
:mod:`.holds`); every other coordinate and velocity follows from the constraints
(:meth:`Simulator.set_configuration`). Jacobians by finite differences of that step: from a
snapshot at t_k each state component is perturbed and the step repeated, giving the transition
F = ∂x_k+1/∂x_k and G = ∂y_k+1/∂x_k for the measured outputs y; the measurement Jacobian at the
predicted point is H = G·F⁻¹ (F is a flow map, invertible). Process noise: white acceleration of
spectral density ``accel_noise``² on each coordinate and a random walk of ``rate``² per second on
each augmented unknown.

Update: the innovation ν = y − ŷ (angles wrapped to (−π, π]), S = H·P·Hᵀ + R, the Joseph form for
P, and the normalised innovation squared NIS = νᵀ·S⁻¹·ν (χ² with len(ν) degrees of freedom when
the filter is consistent). The corrected state is written back into the Simulator.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from ..simulation.simulator import Simulator
from ..simulation.snapshot import Snapshot
from . import fused, iterated, linearisation, nb_jacobians, nb_kalman
from .filter_config import Augment, FilterConfig, speed_of
from .holds import Step, mean_step
from .records import PARAM_WRITE, GapNoise, Innovation, Linearisation, Prediction, wrap

__all__ = ["PARAM_WRITE", "Augment", "FilterConfig", "Innovation", "StateEstimator", "speed_of", "wrap"]

F64 = NDArray[np.float64]
_NONE = np.zeros(0)  # no fixed finite-difference steps (nb_jacobians.fd_steps)


class StateEstimator:
    """The filter around one :class:`Simulator` (which it owns: the Simulator's state is the
    estimate's full configuration). ``initialize`` → (``predict`` → ``update``)…"""

    def __init__(self, sim: Simulator, cfg: FilterConfig) -> None:
        problems = cfg.problems(sim)
        if problems:
            raise ValueError("estimator configuration: " + "; ".join(problems))
        self.sim, self.cfg = sim, cfg
        self.coords = list(cfg.coordinates)
        self.speeds = [speed_of(c) for c in self.coords]
        self.d = len(self.coords)
        self.aug = list(cfg.augment)
        self.n = 2 * self.d + len(self.aug)
        self.meas = list(cfg.measurements)
        self.r = np.array([cfg.measurements[m] for m in self.meas], dtype=float)
        self.angular = np.array([m.endswith(".theta") for m in self.meas])
        self.bias = {a.bias_port: 2 * self.d + i for i, a in enumerate(self.aug) if a.bias_port}
        self.param = {a.name: 2 * self.d + i for i, a in enumerate(self.aug) if not a.bias_port}
        values = {p.name: p.value for p in sim.parameters}
        self.prior = np.array([a.value if a.value is not None else (0.0 if a.bias_port else values[a.name])
                               for a in self.aug], dtype=float)
        self.low = np.array([a.low for a in self.aug], dtype=float)
        self.high = np.array([a.high for a in self.aug], dtype=float)
        self.clamped = 0  # updates that left an unknown's plausible range (held at its bound)
        self.x = np.zeros(self.n)
        self.x[2 * self.d:] = self.prior
        self.P = np.eye(self.n)
        self.applied = {name: values[name] for name in self.param}  # parameter values in the Simulator
        where = {name: k for k, name in enumerate(sim.output_names())}  # outputs read by index
        self.i_state = np.array([where[c] for c in (*self.coords, *self.speeds)], dtype=np.intp)
        self.i_meas = np.array([where[m] for m in self.meas], dtype=np.intp)
        self.i_run = np.concatenate([self.i_state, self.i_meas])
        self.step: Prediction | None = None
        self.lin: Linearisation | None = None
        self.age = 0  # steps since the Jacobians were computed
        self.next_travel = 0.0  # coordinates' travel after which the Jacobians are refreshed (linearisation.adopt)
        self.refreshes = 0  # linearisations so far
        self.gap_sd = 0.0  # the largest σ of a coordinate predicted across the last gap (its unit)
        self.gap_prior: tuple[F64, F64] | None = None  # (x, P) predicted across the last gap, before its correction
        self.initialised = False  # a restart keeps the unknowns' covariance
        self.inputs: dict[str, float] = {}  # measured inputs at the current sample (no bias)
        self.ports = [p.name for p in sim.input_ports]
        self.col = {p: j for j, p in enumerate(self.ports)}

    # ------------------------------------------------------------ state I/O
    def _read(self) -> F64:
        """[z, ż] from the Simulator."""
        return self.sim.output_vector()[self.i_state]

    def _write(self, x: F64, params: bool = True) -> None:
        """Put the coordinates of ``x`` (and with ``params`` its parameters) into the Simulator
        (inputs unchanged). A parameter is rewritten only when it moved by more than
        ``PARAM_WRITE`` of its σ since it was last written: smaller moves change the motion by far
        less than the estimate's own uncertainty, and each write restarts the integrator."""
        for name, i in self.param.items() if params else ():
            moved = abs(x[i] - self.applied[name])
            if moved > PARAM_WRITE * math.sqrt(self.P[i, i]):
                self.applied[name] = float(x[i])
                self.sim.set_parameter(name, float(x[i]), keep_state=True)
        d = self.d
        self.sim.set_configuration(dict(zip(self.coords, x[:d].tolist(), strict=True)),
                                   dict(zip(self.speeds, x[d:2 * d].tolist(), strict=True)))

    def _set_inputs(self, inputs: Mapping[str, float], delta: tuple[str, float] | None = None) -> None:
        for port in set(inputs) | set(self.bias):
            v = inputs.get(port, 0.0) + (self.x[self.bias[port]] if port in self.bias else 0.0)
            if delta is not None and delta[0] == port:
                v += delta[1]
            self.sim.set_input(port, v)

    # ------------------------------------------------------------- public
    def initialize(self, t: float, positions: Mapping[str, float], velocities: Mapping[str, float],
                   inputs: Mapping[str, float], reset_unknowns: bool = False) -> None:
        """Start (or restart) at time ``t`` [s] from measured coordinates/speeds (others: the
        Simulator's current values) with the prior covariance of the motion; augmented unknowns keep
        their current estimate and its covariance on a restart, unless ``reset_unknowns`` (back to
        their prior)."""
        if reset_unknowns:
            self.x[2 * self.d:] = self.prior
            for name, i in self.param.items():
                if self.applied[name] != self.x[i]:
                    self.applied[name] = float(self.x[i])
                    self.sim.set_parameter(name, float(self.x[i]), keep_state=True)
        self.inputs = dict(inputs)
        self._set_inputs(self.inputs)  # before the re-initialisation, which then starts with them
        self.sim.set_configuration(positions, velocities, time=t)
        self.x[:2 * self.d] = self._read()
        sig = self.cfg.measurements
        s_pos, s_vel = self.cfg.initial_sigma
        sd = [sig.get(c, s_pos) for c in self.coords] + [sig.get(v, s_vel) for v in self.speeds]
        sd += [a.sigma for a in self.aug]
        kept = self.P[2 * self.d:, 2 * self.d:].copy()
        self.P = np.diag(np.square(sd))
        if self.initialised and not reset_unknowns:  # the unknowns keep their estimate and its uncertainty
            self.P[2 * self.d:, 2 * self.d:] = kept
        self.initialised = True
        self.step = self.lin = None
        self.next_travel = 0.0

    def _deltas(self) -> F64:
        """Finite-difference steps of the state components: ``fd_scale`` of each one's σ."""
        return nb_jacobians.fd_steps(self.P, self.cfg.fd_scale, _NONE)

    def predict(self, steps: Sequence[Step], at_next: Mapping[str, float], gap: GapNoise | None = None
                ) -> None:
        """Advance the estimate through ``steps`` ((end time [s], input port → value held until
        then, before biases), see :func:`~mbsd_twin.estimation.holds.interval_steps`) and predict
        the measurements with the inputs ``at_next`` (their values at the last step's end: reactions
        feel the input at once). ``gap``: the interval is a gap in the measurements, with its own
        acceleration density and the inputs' uncertainty (:class:`.records.GapNoise`). The
        Jacobians are refreshed when due (:func:`.linearisation.stale`)."""
        sim, d = self.sim, self.d
        h = steps[-1][0] - sim.time
        lin = self.lin
        start = sim.snapshot() if linearisation.stale(self, h, len(steps)) else None
        base = self._run(steps, at_next, None)
        if start is not None:
            nominal = sim.snapshot()
            extra = tuple(gap.input_error) if gap else ()
            lin = linearisation.adopt(self, self._linearise(start, h, steps, at_next, extra), h)
            sim.restore(nominal)
        else:
            self.age += 1
        assert lin is not None
        self.x[:2 * d] = base[:2 * d]
        self.P = nb_kalman.propagate(lin.F, self.P, lin.Q, self._q_acc(lin, gap))
        self.step = Prediction(lin.H, base[2 * d:])
        self.inputs = dict(at_next)

    def _q_acc(self, lin: Linearisation, gap: GapNoise | None) -> F64:
        """The process noise beyond the inputs' sample noise: white acceleration at the configured
        density, or across a gap of T s at its own plus each input's line error through its
        effect on the speeds b = B_ż (per unit input held over the gap): with the line error's
        moments (E[a²], E[a·v], E[v²]) (:class:`.records.GapNoise`), Δż = b·v and Δz = b·T/2·a, so

            Q_zz = T²/4·E[a²]·b·bᵀ,  Q_zż = T/2·E[a·v]·b·bᵀ,  Q_żż = E[v²]·b·bᵀ."""
        if gap is not None:
            Q, d, T = self._q(lin.h, gap.accel_noise), self.d, lin.h
            for port, (aa, av, vv) in gap.input_error.items():
                b = lin.B.get(port)
                if b is not None:
                    shape = np.array([[T * T / 4.0 * aa, T / 2.0 * av], [T / 2.0 * av, vv]])
                    Q[:2 * d, :2 * d] += np.kron(shape, np.outer(b[d:2 * d], b[d:2 * d]))
            return Q
        if lin.Qa is None:
            lin.Qa = self._q(lin.h, self.cfg.accel_noise)
        return lin.Qa

    def _linearise(self, start: Snapshot, h: float, steps: Sequence[Step],
                   at_next: Mapping[str, float], extra: tuple[str, ...] = ()) -> Linearisation:
        """F, H and the input part of Q of the prediction from the snapshot ``start`` by finite
        differences over the interval as one step with the inputs' means (:func:`.holds.mean_step`):
        on a compiled Simulator in one compiled call, its runs in fixed steps
        (:func:`.fused.linearise`, as :meth:`sample` takes them), else through the Simulator's API
        (:func:`.linearisation.stepwise`)."""
        p = fused.plan(self)
        if p is None:
            return linearisation.stepwise(self, start, h, steps, at_next, extra)
        self.sim.restore(start)
        _, _, u_base = fused._held(self, steps, at_next)
        times, U, _ = fused._held(self, mean_step(start.time, list(steps)), at_next)
        b = self.sim.buffers()
        assert b is not None
        try:
            return fused.linearise(self, p, b, times, U, u_base, len(steps), h, extra)
        finally:
            self.sim.buffers_done(b)

    def _held(self, steps: Sequence[Step], delta: tuple[str, float] | None) -> tuple[F64, F64]:
        """End times and input rows (``input_ports`` order) of ``steps`` as :meth:`_set_inputs`
        applies them one after the other: biases and ``delta`` added, a port a step leaves out
        keeps its value (a biased one: 0 + bias)."""
        sim, col = self.sim, self.col
        row = [sim.get_input(p) for p in self.ports]
        bias = [(col[port], port, float(self.x[i])) for port, i in self.bias.items()]
        rows = []
        for _, values in steps:
            for port, v in values.items():
                row[col[port]] = v
            for c, port, b in bias:
                row[c] = values.get(port, 0.0) + b
            rows.append(row.copy())
            if delta is not None:
                rows[-1][col[delta[0]]] += delta[1]
        return np.array([t for t, _ in steps]), np.array(rows, dtype=float).reshape(len(steps), len(self.ports))

    def _run(self, steps: Sequence[Step], at_next: Mapping[str, float], delta: tuple[str, float] | None) -> F64:
        """[z, ż, y] after ``steps`` from the Simulator's current state."""
        self.sim.advance_held(*self._held(steps, delta))
        self._set_inputs(at_next, delta)
        return self.sim.output_vector()[self.i_run]

    def _q(self, h: float, accel_noise: float) -> F64:
        """Process noise of a prediction of ``h`` s: white acceleration on each coordinate, random
        walks of the augmented unknowns."""
        d, q = self.d, accel_noise ** 2
        Q = np.zeros((self.n, self.n))
        for i in range(d):
            Q[i, i], Q[i, d + i] = q * h ** 3 / 3.0, q * h ** 2 / 2.0
            Q[d + i, i], Q[d + i, d + i] = q * h ** 2 / 2.0, q * h
        for i, a in enumerate(self.aug):
            Q[2 * d + i, 2 * d + i] = a.rate ** 2 * h
        return Q

    def update(self, measured: Mapping[str, float]) -> Innovation | None:
        """Correct the predicted estimate with the measured outputs present in ``measured`` (output
        name → value); the innovation (None when nothing configured was measured)."""
        got = self._measured(measured)
        if got is None:
            return None
        rows, y = got
        assert self.step is not None
        nu = wrap(y - self.step.y[rows], self.angular[rows])
        self.P, dx, nis, sd, dx_sd = nb_kalman.update(self.P, np.ascontiguousarray(self.step.H[rows]),
                                                      self.r[rows], nu)
        self.x = self._bounded(self.x + dx)
        self._corrected()
        return Innovation([self.meas[i] for i in rows], nu, sd, float(nis), dx, dx_sd)

    def _measured(self, measured: Mapping[str, float]) -> tuple[list[int], F64] | None:
        """The rows of the configured measurements present in ``measured`` and their values (None
        when none is); an update needs a prediction first."""
        if self.step is None:
            raise RuntimeError("update before predict")
        rows = [i for i, m in enumerate(self.meas) if m in measured]
        return (rows, np.array([measured[self.meas[i]] for i in rows])) if rows else None

    def _bounded(self, x: F64) -> F64:
        """``x`` with its augmented unknowns held in their ``low``/``high`` range (counted)."""
        a = x[2 * self.d:]
        if a.size and ((a < self.low) | (a > self.high)).any():
            self.clamped += 1
            np.clip(a, self.low, self.high, out=a)
        return x

    def undo_gap_correction(self) -> None:
        """Back to the prediction across the last gap, before its (refused) correction, with the
        parameters written into the Simulator as they were (:mod:`.iterated`)."""
        if self.gap_prior is not None:
            self.x, self.P = (a.copy() for a in self.gap_prior)
            self._write(self.x)

    def _corrected(self) -> None:
        """The corrected estimate into the Simulator (the inputs with the corrected biases first, so
        that the re-initialisation starts with them); its coordinates and speeds read back."""
        self._set_inputs(self.inputs)
        self._write(self.x)
        self.x[:2 * self.d] = self._read()

    def sample(self, steps: Sequence[Step], at_next: Mapping[str, float], measured: Mapping[str, float],
               gap: GapNoise | None = None) -> Innovation | None:
        """:meth:`predict` then :meth:`update`: on a compiled Simulator with current Jacobians in
        one compiled call (:mod:`.nb_filter`, the same operations without the Python between
        them), otherwise through the two methods; across a ``gap`` the update iterated
        (:mod:`.iterated`), and none (None) when the prediction's σ of a coordinate (``gap_sd``)
        exceeds ``gap.max_sd``."""
        rows = [i for i, m in enumerate(self.meas) if m in measured]
        p = fused.plan(self) if rows else None
        if gap is not None and rows:  # a wide prior: the iterated update (:mod:`.iterated`)
            self.predict(steps, at_next, gap)
            self.gap_sd = float(np.sqrt(np.diag(self.P)[:self.d]).max())
            self.gap_prior = (self.x.copy(), self.P.copy())
            return iterated.update(self, measured) if self.gap_sd <= gap.max_sd else None
        if p is None:
            self.predict(steps, at_next, gap)
            return self.update(measured)
        return fused.sample(self, p, steps, at_next, measured, rows, gap)

    def release(self, name: str) -> None:
        """Re-open an augmented unknown after a detected change: its variance back to the prior σ²
        and its correlations dropped, so it re-converges at the rate of a fresh start."""
        i = 2 * self.d + [a.name for a in self.aug].index(name)
        self.P[i, :] = 0.0
        self.P[:, i] = 0.0
        self.P[i, i] = self.aug[i - 2 * self.d].sigma ** 2

    # ------------------------------------------------------------ results
    def sd(self) -> F64:
        """Standard deviations of the state components [z, ż, a]."""
        return np.sqrt(np.maximum(np.diag(self.P), 0.0))

    def names(self) -> list[str]:
        return [*self.coords, *self.speeds, *(a.name for a in self.aug)]

    def estimates(self) -> dict[str, tuple[float, float]]:
        """Name → (estimate, σ) of every state component."""
        return {k: (float(v), float(s)) for k, v, s in zip(self.names(), self.x, self.sd(), strict=True)}

    def output_sd(self, names: list[str]) -> F64:
        """σ of measured outputs at the current estimate (from the last step's H)."""
        if self.step is None:
            return np.full(len(names), math.nan)
        rows = [self.meas.index(m) for m in names]
        H = self.step.H[rows]
        return np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", H, self.P, H), 0.0))
