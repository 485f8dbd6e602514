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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from ..simulation.snapshot import Snapshot
from .holds import Step

if TYPE_CHECKING:
    from .ekf import StateEstimator

F64 = NDArray[np.float64]
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


def bank(est: StateEstimator) -> list[Hypothesis]:
    """The default hypotheses of an estimator's model: every physical parameter (masses, inertias,
    friction, stiffness, damping; step 1 % of its value, or 1e-3 of its unit at 0), a bias on
    every input port (step 1e-3) and an offset on every measured output (analytic)."""
    out = [Hypothesis(p.name, "parameter", p.name, 1e-2 * abs(p.value) if p.value else 1e-3)
           for p in est.sim.parameters if p.name.endswith(PHYSICAL)]
    out += [Hypothesis(f"{port}.bias", "input", port, 1e-3) for port in est.ports]
    out += [Hypothesis(f"sensor:{m}", "sensor", m, 1.0) for m in est.meas]
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


def isolate(est: StateEstimator, start: Snapshot, biases: Mapping[str, float], samples: Sequence[Sample],
            onset: float, hypotheses: Sequence[Hypothesis] | None = None) -> Isolation:
    """The GLR of each hypothesis over the window ``samples`` (module doc); the estimator's
    Simulator is returned to the state it was in."""
    sim = est.sim
    now = sim.snapshot()
    hyps = list(hypotheses) if hypotheses is not None else bank(est)
    try:
        y0 = _replay(est, start, biases, samples, onset)
        sd = est.sd()[:2 * est.d]  # steps of one σ: linear, and far above the integrator's error
        N = [(_replay(est, start, biases, samples, onset, nuisance=(j, float(sd[j]))) - y0) / sd[j]
             for j in range(2 * est.d)]
        cols = []
        for h in hyps:
            if h.kind == "sensor":
                c = np.zeros_like(y0)
                c[[s.t > onset for s in samples], est.meas.index(h.target)] = 1.0
            else:
                c = (_replay(est, start, biases, samples, onset, hyp=h) - y0) / h.step
            cols.append(c)
    finally:
        sim.restore(now)
    return _glr(est, samples, y0, N, cols, hyps)


def _glr(est: StateEstimator, samples: Sequence[Sample], y0: F64, N: list[F64], cols: list[F64],
         hyps: Sequence[Hypothesis]) -> Isolation:
    mask = np.array([[m in s.y for m in est.meas] for s in samples])
    y = np.array([[s.y.get(m, 0.0) for m in est.meas] for s in samples])
    res = y - y0
    res[:, est.angular] = np.remainder(res[:, est.angular] + math.pi, 2 * math.pi) - math.pi

    def flat(a: F64) -> F64:
        return (a / est.r)[mask]
    r = flat(res)
    Q, _ = np.linalg.qr(np.column_stack([flat(n) for n in N]))
    r_perp = r - Q @ (Q.T @ r)
    chi2 = float(r_perp @ r_perp)
    scored = []
    for h, c in zip(hyps, cols, strict=True):
        s = flat(c)
        s_perp = s - Q @ (Q.T @ s)
        ss = float(s_perp @ s_perp)
        if ss <= 1e-12 * max(float(s @ s), 1e-300):
            scored.append((h, 0.0, math.inf, 0.0))  # no effect on what is measured: not identifiable here
            continue
        sr = float(s_perp @ r_perp)
        scored.append((h, sr / ss, 1.0 / math.sqrt(ss), sr * sr / ss))
    g = np.array([x[3] for x in scored])
    w = np.exp((g - g.max()) / 2.0) if len(g) else g
    p = w / w.sum() if len(g) else w
    cands = sorted((Candidate(h.name, h.kind, size, sd, glr, float(pj))
                    for (h, size, sd, glr), pj in zip(scored, p, strict=True)), key=lambda c: -c.glr)
    best = cands[0].glr if cands else 0.0
    return Isolation(tuple(cands), len(samples), chi2, best / chi2 if chi2 > 0 else 0.0)
