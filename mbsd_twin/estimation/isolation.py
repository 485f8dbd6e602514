"""Fault isolation: which single change explains what the filter saw — a generalised likelihood
ratio (GLR) over a bank of hypotheses.

A change alarm says *that* something changed and which statistic noticed it first; several causes
can move the same statistic (a heavier rod and a heavier piston both raise the bearing force), and
an augmented unknown of the filter may absorb a change it does not stand for (the piston-mass
estimate follows a rod-mass change part of the way). Isolation answers with evidence instead.

From the filter's state a little before the onset (a snapshot of its Simulator, its input biases),
the model is replayed open loop through the measured inputs of a short window, sample by sample,
and its predicted measurements y₀(t) compared with the measured ones: the weighted residual
r = (y − y₀)/σ. Each hypothesis j is one column s_j = (∂y/∂p_j)/σ over the window, by a finite
difference of the same replay: a model parameter (``rod.mass`` …) or an input bias
(``motor_torque.bias``) changed from the onset on, or a sensor offset (``sensor:crank.theta``: a
constant added to that channel from the onset on). The initial coordinates and speeds are nuisance
parameters (columns N, projected out: the filter's own estimate error at the window's start is
never taken for a fault). With the projections r⊥, s⊥ onto N's orthogonal complement,

    size_j = (s⊥·r⊥)/(s⊥·s⊥)   [the hypothesis' unit],   σ_j = 1/√(s⊥·s⊥),
    GLR_j = (s⊥·r⊥)²/(s⊥·s⊥)   (χ² with 1 degree of freedom where hypothesis j is false and the
                                  change zero; the log-likelihood gain of fitting it, times 2),

and with equal prior odds the probability of hypothesis j among the bank is
exp(GLR_j/2)/Σ exp(GLR_k/2). ``explained`` is the share of the residual's χ² (after the nuisance
fit) that the best hypothesis removes: near 1 when one change of the bank is the cause, small when
none is (a fault outside the bank, or several at once).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from ..simulation.snapshot import Snapshot
from .holds import Step

if TYPE_CHECKING:
    from .ekf import StateEstimator

F64 = NDArray[np.float64]
SENSOR_KINDS = ("sensor", "sensor_drift")  # linear in their size: no re-fit
REFINE = 3  # best hypotheses re-fitted on the replay itself
PHYSICAL = (".mass", ".inertia", ".viscous_friction", ".stiffness", ".damping")


@dataclass(frozen=True)
class Hypothesis:
    """One candidate cause: ``kind`` ``parameter`` (a model parameter ``target``), ``input`` (a bias
    on the input port ``target``) or ``sensor`` (an offset on the measured output ``target``);
    ``step``: the finite-difference step in its unit."""

    name: str
    kind: str
    target: str
    step: float


@dataclass(frozen=True)
class Sample:
    """One measured sample of the window: the held input steps that lead to it (estimator time,
    inputs before biases), the inputs at its instant, the measured outputs (name → value)."""

    t: float
    steps: Sequence[Step]
    at: Mapping[str, float]
    y: Mapping[str, float]


@dataclass(frozen=True)
class Candidate:
    name: str
    kind: str
    size: float  # the change that fits best, in the hypothesis' unit
    sd: float  # its σ
    glr: float  # χ²₁ statistic
    probability: float  # among the bank, equal prior odds


@dataclass(frozen=True)
class Isolation:
    candidates: tuple[Candidate, ...]  # most probable first
    samples: int
    chi2: float  # the residual's χ² after the nuisance fit
    explained: float  # share of it the best candidate removes
    dispersion: float  # χ² the best leaves per degree of freedom (≥ 1; the GLRs are divided by it)


def bank(est: StateEstimator) -> list[Hypothesis]:
    """The default hypotheses of an estimator's model: every physical parameter (masses, inertias,
    friction, stiffness, damping; step 1 % of its value, or 1e-3 of its unit at 0), a bias on
    every input port (step 1e-3), and on every measured output an offset and a drift (a ramp
    from the onset, per second; both analytic)."""
    out = [Hypothesis(p.name, "parameter", p.name, 1e-2 * abs(p.value) if p.value else 1e-3)
           for p in est.sim.parameters if p.name.endswith(PHYSICAL)]
    out += [Hypothesis(f"{port}.bias", "input", port, 1e-3) for port in est.ports]
    out += [Hypothesis(f"sensor:{m}", "sensor", m, 1.0) for m in est.meas]
    out += [Hypothesis(f"sensor_drift:{m}", "sensor_drift", m, 1.0) for m in est.meas]
    return out


def _replay(est: StateEstimator, start: Snapshot, biases: Mapping[str, float], samples: Sequence[Sample],
            onset: float, hyp: Hypothesis | None = None, nuisance: tuple[int, float] | None = None) -> F64:
    """The model's measured outputs at each sample, replayed from ``start`` through the samples'
    inputs (plus ``biases``), with one hypothesis' step applied from the first sample after
    ``onset`` on, or one initial coordinate or speed moved (``nuisance``: index in [z, ż], step)."""
    sim, d = est.sim, est.d
    sim.restore(start)
    if nuisance is not None:
        x = sim.output_vector()[est.i_state].copy()
        x[nuisance[0]] += nuisance[1]
        sim.set_configuration(dict(zip(est.coords, x[:d].tolist(), strict=True)),
                              dict(zip(est.speeds, x[d:].tolist(), strict=True)))
    col = est.col
    base = np.array([sim.get_input(p) - biases.get(p, 0.0) for p in est.ports], dtype=float)  # before biases
    Y = np.empty((len(samples), len(est.meas)))
    changed = False
    for k, s in enumerate(samples):
        after = s.t > onset
        if hyp is not None and hyp.kind == "parameter" and after and not changed:
            sim.set_parameter(hyp.target, _value(sim, hyp.target) + hyp.step, keep_state=True)
            changed = True
        times = np.array([t for t, _ in s.steps])
        U = np.tile(base, (len(s.steps), 1))
        for i, (_, values) in enumerate(s.steps):
            for port, v in values.items():
                U[i, col[port]] = v
            base = U[i].copy()
        extra = np.zeros(len(est.ports))
        for port, b in biases.items():
            extra[col[port]] += b
        if hyp is not None and hyp.kind == "input" and after:
            extra[col[hyp.target]] += hyp.step
        sim.advance_held(times, (U + extra).reshape(len(times), len(est.ports)))
        for port in est.ports:
            sim.set_input(port, s.at.get(port, float(base[col[port]])) + extra[col[port]])
        Y[k] = sim.output_vector()[est.i_meas]
    return Y


def _value(sim: object, name: str) -> float:
    return next(p.value for p in sim.parameters if p.name == name)  # type: ignore[attr-defined]


def sensitivities(est: StateEstimator, start: Snapshot, biases: Mapping[str, float], samples: Sequence[Sample],
                  onset: float, hypotheses: Sequence[Hypothesis], nuisance_steps: Sequence[float]
                  ) -> tuple[F64, list[F64], list[F64]]:
    """The window's replayed measurements y₀ (samples × measured outputs), the nuisance columns
    ∂y/∂x₀ (one per initial coordinate and speed, by a finite difference of ``nuisance_steps``) and
    one column ∂y/∂p per hypothesis (a change from ``onset`` on; a sensor offset analytically), in
    the outputs' units per unit of the nuisance or hypothesis. The Simulator is left wherever the
    last replay ended (callers restore it)."""
    y0 = _replay(est, start, biases, samples, onset)
    N = [(_replay(est, start, biases, samples, onset, nuisance=(j, float(dj))) - y0) / dj
         for j, dj in enumerate(nuisance_steps)]
    cols = []
    for h in hypotheses:
        if h.kind in SENSOR_KINDS:  # an offset (1) or a drift (t − onset) on one channel after the onset
            c = np.zeros_like(y0)
            c[:, est.meas.index(h.target)] = [(1.0 if h.kind == "sensor" else s.t - onset) if s.t > onset else 0.0
                                              for s in samples]
        else:
            c = (_replay(est, start, biases, samples, onset, hyp=h) - y0) / h.step
        cols.append(c)
    return y0, N, cols


def isolate(est: StateEstimator, start: Snapshot, biases: Mapping[str, float], samples: Sequence[Sample],
            onset: float, hypotheses: Sequence[Hypothesis] | None = None, refine: int = REFINE) -> Isolation:
    """The GLR of each hypothesis over the window ``samples`` (module doc); the ``refine`` best
    re-fitted by Gauss–Newton on the replay itself. The estimator's Simulator is returned to the
    state it was in."""
    sim = est.sim
    now = sim.snapshot()
    hyps = list(hypotheses) if hypotheses is not None else bank(est)
    try:
        sd = est.sd()[:2 * est.d]  # steps of one σ: linear, and far above the integrator's error
        y0, N, cols = sensitivities(est, start, biases, samples, onset, hyps, sd.tolist())
        fit = WindowFit(est, samples, y0, N)
        scored = [fit.score(h, c) for h, c in zip(hyps, cols, strict=True)]
        scored.sort(key=lambda x: -x[3])
        for i, (h, size, sd_h, glr, col) in enumerate(scored[:refine]):
            if h.kind not in SENSOR_KINDS and math.isfinite(sd_h):
                scored[i] = fit.refined(h, size, glr, col, lambda p, h=h: _replay(  # type: ignore[misc]
                    est, start, biases, samples, onset, hyp=replace(h, step=p)))
    finally:
        sim.restore(now)
    return fit.result(scored)


def basis(A: F64) -> F64:
    """An orthonormal basis of the column space of ``A`` (columns that add nothing — a coordinate
    no measured output sees — are left out instead of spanning an arbitrary direction)."""
    if A.shape[1] == 0:
        return np.zeros((A.shape[0], 0))
    U, s, _ = np.linalg.svd(A, full_matrices=False)
    return U[:, s > s.max() * max(A.shape) * np.finfo(float).eps] if s.max() > 0 else U[:, :0]


class WindowFit:
    """Weighted least squares of the window: the residual and the columns scaled by the sensor σ,
    the nuisance (initial state) projected out."""

    def __init__(self, est: StateEstimator, samples: Sequence[Sample], y0: F64, N: list[F64]) -> None:
        self.est, self.y0 = est, y0
        self.mask = np.array([[m in s.y for m in est.meas] for s in samples])
        self.y = np.array([[s.y.get(m, 0.0) for m in est.meas] for s in samples])
        self.Q = basis(np.column_stack([self.flat(n) for n in N]) if N else np.zeros((int(self.mask.sum()), 0)))
        self.r = self.perp(self.residual(y0))
        self.chi2 = float(self.r @ self.r)
        self.dof = int(self.mask.sum()) - len(N) - 1  # of the residual after one hypothesis' fit

    def flat(self, a: F64) -> F64:
        return (a / self.est.r)[self.mask]

    def perp(self, v: F64) -> F64:
        return v - self.Q @ (self.Q.T @ v)

    def residual(self, y_model: F64) -> F64:
        res = self.y - y_model
        ang = self.est.angular
        res[:, ang] = np.remainder(res[:, ang] + math.pi, 2 * math.pi) - math.pi
        return self.flat(res)

    def score(self, h: Hypothesis, c: F64) -> tuple[Hypothesis, float, float, float, F64]:
        """(hypothesis, size, σ, GLR, its projected column) from the linear fit."""
        s = self.perp(self.flat(c))
        ss = float(s @ s)
        if ss <= 1e-12 * max(float(self.flat(c) @ self.flat(c)), 1e-300):
            return h, 0.0, math.inf, 0.0, s  # no effect on what is measured: not identifiable here
        sr = float(s @ self.r)
        return h, sr / ss, 1.0 / math.sqrt(ss), sr * sr / ss, s

    def refined(self, h: Hypothesis, size: float, glr: float, s: F64, replay: Callable[[float], F64]
                ) -> tuple[Hypothesis, float, float, float, F64]:
        """Two Gauss–Newton steps on the replay with the hypothesis' change at its fitted size (a
        large fault moves the motion itself: its effect is not linear in its size over the window);
        the GLR from the χ² actually left. The linear fit when the replay refuses a size (a
        negative mass)."""
        ss = float(s @ s)
        fitted = size
        try:
            for _ in range(2):
                r = self.perp(self.residual(replay(fitted)))
                fitted += float(s @ r) / ss
            r = self.perp(self.residual(replay(fitted)))
        except Exception:
            return h, size, 1.0 / math.sqrt(ss), glr, s
        return h, fitted, 1.0 / math.sqrt(ss), max(glr, self.chi2 - float(r @ r)), s

    def result(self, scored: list[tuple[Hypothesis, float, float, float, F64]]) -> Isolation:
        """Probabilities with equal prior odds; when the best hypothesis leaves more χ² than its
        degrees of freedom (the model does not fit the window exactly) the GLRs are divided by that
        dispersion (quasi-likelihood), so a marginal advantage is not reported as certainty."""
        g = np.array([x[3] for x in scored])
        if not len(g):
            return Isolation((), int(self.mask.shape[0]), self.chi2, 0.0, 1.0)
        phi = max(1.0, (self.chi2 - float(g.max())) / max(self.dof, 1))
        w = np.exp((g - g.max()) / (2.0 * phi))
        p = w / w.sum()
        cands = sorted((Candidate(h.name, h.kind, size, sd, glr, float(pj))
                        for (h, size, sd, glr, _), pj in zip(scored, p, strict=True)), key=lambda c: -c.glr)
        best = cands[0].glr
        return Isolation(tuple(cands), int(self.mask.shape[0]), self.chi2, best / self.chi2 if self.chi2 > 0 else 0.0,
                         phi)
