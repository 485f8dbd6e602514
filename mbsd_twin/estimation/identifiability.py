"""Which unknowns a window of healthy motion can tell apart: the Fisher information of every
candidate unknown of a model (each physical parameter — masses, inertias, viscous friction,
stiffness, damping — and a bias on every input port), with the initial coordinates and speeds as
nuisance parameters projected out.

The sensitivities are those of fault isolation (:mod:`.isolation`): the model is replayed from a
snapshot through the window's inputs and each column s_j = (∂y/∂p_j)/σ over the window's
measured samples is a finite difference of that replay (σ: each channel's noise). With S⊥ the
columns projected onto the orthogonal complement of the nuisance columns, the Fisher information
is J = S⊥ᵀ·S⊥ and, per candidate,

    σ_j = 1/√J_jj        the Cramér–Rao bound of p_j estimated alone (with the initial state) from
                         the window: no unbiased estimator does better (white Gaussian noise of the
                         configured σ, the model right),
    ρ_jk = J_jk/√(J_jj·J_kk)   how alike the two columns are (the cosine of their angle). Fitted
                         together, the estimates of p_j and p_k are correlated by −ρ_jk and their σ
                         grow by 1/√(1 − ρ²). |ρ| → 1: one change looks like the other (confusable).

For an augmentation (the unknowns the twin's filter estimates, set A) :func:`check` gives each
augmented unknown's bound jointly with the others in A, and what each candidate outside A does to
it: a change Δp_k of a candidate the filter does not estimate moves the estimates of A by
β·Δp_k with β = J_AA⁻¹·J_Ak (the least-squares projection of the change's signature onto A's), and
R² = J_kA·J_AA⁻¹·J_Ak/J_kk of that signature is absorbed — the rest is left in the innovations,
where the change alarms see it. A candidate with |ρ| ≥ ``THRESHOLD`` against an augmented unknown
is confusable with it: the estimate absorbs that change instead of alarming as something new.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from ..simulation.snapshot import Snapshot
from .isolation import SENSOR_KINDS, Hypothesis, Sample, WindowFit, bank, sensitivities

if TYPE_CHECKING:
    from .ekf import StateEstimator

F64 = NDArray[np.float64]
THRESHOLD = 0.95  # |ρ| at or above which two candidates are confusable
IDENTIFIABLE = 0.1  # an augmented unknown is identifiable when its joint CRLB σ ≤ this × its prior σ
STEP = 0.1  # finite-difference steps: this share of isolation's
SEEN = 1e-12  # a column whose projected norm² is below this share of its own is not seen at all


@dataclass(frozen=True)
class Segment:
    """A stretch of motion replayed open loop: the Simulator's ``start`` snapshot (the true state
    there) and the ``samples`` (held inputs, inputs at each instant, the measured outputs present)."""

    start: Snapshot
    samples: tuple[Sample, ...]


@dataclass(frozen=True)
class Motion:
    """A window of motion cut into segments, each with its own initial state as nuisance (the
    filter's state estimate forgets its past within a fraction of a second, so long open-loop
    replays would credit it with information its process noise denies it), and the input biases
    in effect."""

    segments: tuple[Segment, ...]
    biases: Mapping[str, float]

    @property
    def samples(self) -> int:
        return sum(len(s.samples) for s in self.segments)

    @property
    def duration(self) -> float:
        return sum(s.samples[-1].t - s.start.time for s in self.segments if s.samples)


@dataclass(frozen=True)
class Unknown:
    """One candidate: ``kind`` ``parameter`` or ``input`` (a bias on that port); ``value`` its
    model value (0 for a bias); ``sd`` its Cramér–Rao σ estimated alone over the window, in
    ``unit`` (inf: the measured outputs do not see it)."""

    name: str
    kind: str
    unit: str
    value: float
    sd: float

    @property
    def rel_sd(self) -> float:
        """σ relative to the value (nan for a zero value: a bias, an absent friction)."""
        return self.sd / abs(self.value) if self.value else math.nan


@dataclass(frozen=True, eq=False)
class Identifiability:
    """Every candidate's bound and the Fisher information (its order: ``unknowns``)."""

    unknowns: tuple[Unknown, ...]
    fisher: F64
    samples: int
    duration: float
    threshold: float = THRESHOLD

    def index(self, name: str) -> int:
        names = [u.name for u in self.unknowns]
        if name not in names:
            raise KeyError(f"{name!r} is not a candidate unknown ({', '.join(names)})")
        return names.index(name)

    @property
    def correlation(self) -> F64:
        """ρ between the candidates' columns (0 in the row and column of a candidate not seen)."""
        d = np.sqrt(np.diag(self.fisher))
        seen = np.isfinite([u.sd for u in self.unknowns])
        rho = np.zeros_like(self.fisher)
        rho[np.ix_(seen, seen)] = self.fisher[np.ix_(seen, seen)] / np.outer(d[seen], d[seen])
        return rho

    def partner(self, name: str) -> tuple[str, float]:
        """The other candidate most correlated with ``name`` and ρ ('' and 0 if there is none)."""
        i, rho = self.index(name), self.correlation
        others = [j for j in range(len(self.unknowns)) if j != i and rho[i, j] != 0.0]
        if not others:
            return "", 0.0
        j = max(others, key=lambda k: abs(rho[i, k]))
        return self.unknowns[j].name, float(rho[i, j])

    def confusable(self) -> list[tuple[str, str, float]]:
        """Pairs with |ρ| ≥ ``threshold``, most alike first."""
        rho, n = self.correlation, len(self.unknowns)
        pairs = [(self.unknowns[i].name, self.unknowns[j].name, float(rho[i, j]))
                 for i in range(n) for j in range(i + 1, n) if abs(rho[i, j]) >= self.threshold]
        return sorted(pairs, key=lambda p: -abs(p[2]))


@dataclass(frozen=True)
class Absorption:
    """What a change of the candidate ``name`` (not augmented) does to one augmented unknown:
    ``correlation`` ρ between the two, ``gain`` the estimate's move per unit change of ``name``
    (the augmented set fitted jointly), ``share`` R² of the change's signature the set absorbs."""

    name: str
    correlation: float
    gain: float
    share: float


@dataclass(frozen=True)
class AugmentCheck:
    """An augmented unknown: its joint CRLB σ with the other augmented ones over the window,
    whether that is at most ``IDENTIFIABLE`` × the prior σ, and the candidates it would absorb
    (``nearest``: the three most correlated non-augmented ones; ``confusable``: every one with
    |ρ| ≥ the threshold)."""

    name: str
    unit: str
    value: float
    prior_sd: float
    sd: float
    identifiable: bool
    nearest: tuple[Absorption, ...]
    confusable: tuple[Absorption, ...]


def candidates(est: StateEstimator) -> list[Hypothesis]:
    """The candidate unknowns of the estimator's model: isolation's bank without the sensor offsets
    (the filter augments parameters and input biases only), with a tenth of its steps (0.1 % of a
    parameter's value: a derivative, not a fault's size; the forward difference of a parameter that
    enters as 1/p is then 0.1 % low instead of 1 %)."""
    return [replace(h, step=STEP * h.step) for h in bank(est) if h.kind not in SENSOR_KINDS]


def analyse(est: StateEstimator, motion: Motion, hypotheses: Sequence[Hypothesis] | None = None,
            nuisance_steps: Sequence[float] | None = None, threshold: float = THRESHOLD) -> Identifiability:
    """The Fisher information of ``hypotheses`` (default :func:`candidates`) over ``motion``, the
    initial state projected out (finite-difference steps ``nuisance_steps``, default the
    estimator's σ of each coordinate and speed). The Simulator is returned to its state."""
    hyps = list(hypotheses) if hypotheses is not None else candidates(est)
    steps = list(nuisance_steps) if nuisance_steps is not None else est.sd()[:2 * est.d].tolist()
    J, raw = np.zeros((len(hyps), len(hyps))), np.zeros(len(hyps))
    for seg in motion.segments:
        S, norms = _columns(est, seg, motion.biases, hyps, steps)
        J += S.T @ S
        raw += norms
    sim = est.sim
    units = {p.name: p.unit for p in sim.parameters} | {f"{p.name}.bias": p.unit for p in sim.input_ports}
    values = {p.name: float(p.value) for p in sim.parameters}
    unknowns = []
    for j, h in enumerate(hyps):
        seen = J[j, j] > SEEN * max(raw[j], 1e-300)
        unknowns.append(Unknown(h.name, h.kind, units.get(h.name, ""), values.get(h.target, 0.0)
                                if h.kind == "parameter" else motion.biases.get(h.target, 0.0),
                                1.0 / math.sqrt(J[j, j]) if seen else math.inf))
    return Identifiability(tuple(unknowns), J, motion.samples, motion.duration, threshold)


def _columns(est: StateEstimator, seg: Segment, biases: Mapping[str, float], hyps: Sequence[Hypothesis],
             steps: Sequence[float]) -> tuple[F64, F64]:
    """One segment's weighted sensitivity columns with its initial state projected out, and each
    column's squared norm before the projection. The Simulator is returned to its state."""
    now = est.sim.snapshot()
    try:
        y0, N, cols = sensitivities(est, seg.start, biases, seg.samples, -math.inf, hyps, steps)
    finally:
        est.sim.restore(now)
    fit = WindowFit(est, seg.samples, y0, N)
    flat = [fit.flat(c) for c in cols]
    S = np.column_stack([fit.perp(f) for f in flat]) if flat else np.zeros((int(fit.mask.sum()), 0))
    return S, np.array([float(f @ f) for f in flat])


def check(ident: Identifiability, augmented: Mapping[str, float], nearest: int = 3) -> list[AugmentCheck]:
    """Each augmented unknown (name → prior σ, in the order given) checked against the others
    (module doc). An unknown the window does not see at all has σ inf and absorbs nothing."""
    A = [ident.index(n) for n in augmented]
    J, rho = ident.fisher, ident.correlation
    seen = [a for a in A if math.isfinite(ident.unknowns[a].sd)]
    cov = np.linalg.pinv(J[np.ix_(seen, seen)]) if seen else np.zeros((0, 0))
    others = [k for k in range(len(ident.unknowns)) if k not in A and math.isfinite(ident.unknowns[k].sd)]
    gains = cov @ J[np.ix_(seen, others)] if seen else np.zeros((0, len(others)))
    shares = [float(J[k, seen] @ gains[:, i] / J[k, k]) if seen else 0.0 for i, k in enumerate(others)]
    out = []
    for name, prior in augmented.items():
        a = ident.index(name)
        u = ident.unknowns[a]
        if a not in seen:
            out.append(AugmentCheck(name, u.unit, u.value, prior, math.inf, False, (), ()))
            continue
        r = seen.index(a)
        sd = math.sqrt(max(float(cov[r, r]), 0.0))
        every = sorted((Absorption(ident.unknowns[k].name, float(rho[a, k]), float(gains[r, i]), shares[i])
                        for i, k in enumerate(others)), key=lambda x: -abs(x.correlation))
        out.append(AugmentCheck(name, u.unit, u.value, prior, sd, sd <= IDENTIFIABLE * prior, tuple(every[:nearest]),
                                tuple(x for x in every if abs(x.correlation) >= ident.threshold)))
    return out
