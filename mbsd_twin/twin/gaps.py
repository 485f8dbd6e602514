"""Gaps in the measurements (lost batches): which are predicted through, with what uncertainty, and
the gate on the first correction after one (docs/twin-estimation.md, "Timing").

Across a gap the inputs are unknown: the twin drives the model with the straight line between the
last sample before and the first after it (a first-order hold over the whole gap). How wrong that
line is depends on the rig — a slowly modulated motor torque is almost a line over 200 ms; a speed
controller that swings the torque with every revolution is not. :class:`InputHistory` measures it
on the rig's own recent inputs: over the last ``HISTORY_GAPS``·``max_gap`` seconds it lays the
straight line across stretches as long as the gap and takes the second moments of the line's
error as it moves the speeds (its mean) and the coordinates (its mean weighted towards the
stretch's start) (:func:`line_error`). The filter adds them to the process noise through the
input's effect on the speeds (:class:`~mbsd_twin.estimation.records.GapNoise`)."""

from __future__ import annotations

import math
from collections import Counter, deque
from typing import Any

import numpy as np

from ..estimation.change import nis_bound
from ..estimation.records import GapNoise
from .config.sections import CoreConfig
from .protocol import SensorBatch

HISTORY_GAPS = 4  # the input history spans this many max_gap (1 s at the default 0.25 s)
STARTS = 256  # stretches the line's error is averaged over at the most (evenly spaced starts)


class InputHistory:
    """The measured inputs (channel → input port) of the last ``span`` seconds, and the error of
    a straight line across a stretch of them as long as a gap."""

    def __init__(self, inputs: dict[str, str], span: float) -> None:
        self.inputs, self.span = dict(inputs), span
        self.batches: deque[tuple[float, float, int, dict[str, tuple[float, ...]]]] = deque()

    def add(self, batch: SensorBatch) -> None:
        self.batches.append((batch.t0, batch.dt, batch.n, {c: batch.ch[c] for c in self.inputs}))
        end = batch.time(batch.n - 1)
        while self.batches and self.batches[0][0] + self.batches[0][1] * self.batches[0][2] < end - self.span:
            self.batches.popleft()

    def shift(self, shift: float) -> None:
        """The rig's clock moved by ``shift`` s (:meth:`.core.TwinCore._relabel`)."""
        self.batches = deque((t0 + shift, dt, n, ch) for t0, dt, n, ch in self.batches)

    def line_error(self, gap: float) -> dict[str, tuple[float, float, float]]:
        """Input port → the second moments of the straight line's error across ``gap`` s on the
        history (:func:`line_error`; no history: nothing)."""
        if not self.batches:
            return {}
        t0 = self.batches[0][0]
        t = np.concatenate([t0_ - t0 + dt * np.arange(n) for t0_, dt, n, _ in self.batches])
        out: dict[str, tuple[float, float, float]] = {}
        for c, port in self.inputs.items():
            u = np.concatenate([np.asarray(ch[c], dtype=float) for _, _, _, ch in self.batches])
            out[port] = line_error(t, u, gap)
        return out


def line_error(t: np.ndarray, u: np.ndarray, gap: float) -> tuple[float, float, float]:
    """The worst case (max a², r·max|a|·max|v|, max v²; r the correlation of a and v) of the
    straight line's error across stretches
    [tᵢ, tᵢ + ``gap``] of the samples u at times ``t`` (increasing, possibly with holes: a stretch
    across one is left out; the line joins u at the stretch's first and last sample), where for
    the error e = u − line over a stretch

        v = mean of e                          (the speeds' error: Δż = B_ż·v)
        a = mean of e weighted by (t_end − t)  (the coordinates' error: Δz = B_ż·T/2·a)

    A constant error c gives a = v = c. The worst stretch rather than the mean square: where a
    controller sets the input, its torque answers the motion, and the line's error over one gap can
    be several times its RMS over the last seconds (on the independent rig at 10 rad/s, with the
    RMS 7 % of the gaps ended beyond 3 σ and the first correction after one failed its gate).
    History shorter than the gap: a and v uncorrelated with u's variance (the line knows
    nothing)."""
    t = t - t[0]
    last = int(np.searchsorted(t, t[-1] - gap, side="right"))
    var = float(np.var(u))
    if last < 1 or t.size < 2:
        return var, 0.0, var
    i = np.arange(0, last, max(1, last // STARTS), dtype=np.int64)
    j = np.minimum(np.searchsorted(t, t[i] + gap - 1e-9 * max(gap, 1e-9)), len(t) - 1)
    ok = (j > i) & (t[j] - t[i] < gap + 0.5 * float(np.min(np.diff(t))))  # no stretch across a hole
    i, j = i[ok], j[ok]
    if not i.size:
        return var, 0.0, var

    def sums(x: np.ndarray) -> np.ndarray:  # Σ x[k] for k in i..j
        c = np.concatenate(([0.0], np.cumsum(x)))
        return c[j + 1] - c[i]
    s0, s1, s2, su, stu = sums(np.ones_like(t)), sums(t), sums(t * t), sums(u), sums(t * u)
    ti, tj, ui = t[i], t[j], u[i]
    slope = (u[j] - ui) / (tj - ti)
    line_sum = ui * s0 + slope * (s1 - ti * s0)  # Σ line
    v = (su - line_sum) / s0
    w, wt = tj * s0 - s1, tj * s1 - s2  # Σ (t_j − t), Σ (t_j − t)·t
    a = (tj * su - stu - ui * w - slope * (wt - ti * w)) / w
    aa, vv = float(np.max(a * a)), float(np.max(v * v))  # the worst stretch: the tail is heavy
    r = float(np.mean(a * v)) / math.sqrt(max(float(np.mean(a * a)) * float(np.mean(v * v)), 1e-300))
    return aa, r * math.sqrt(aa * vv), vv


class GapGuard:
    """Which gaps are predicted through, and the gate on the first correction after one.

    A gap of at most ``max_gap`` s is predicted through with its process noise (:meth:`noise`:
    ``gap_accel_noise`` and the inputs' line error); longer ones re-initialise the filter from the
    measurements. The first correction after a predicted gap is iterated
    (:mod:`mbsd_twin.estimation.iterated`) and carries the gap's prediction error, so it is no
    statistic of the change tests or of the divergence window. The filter re-initialises there
    instead when the prediction's σ of a coordinate exceeds ``max_gap_sd`` (``gap_unsafe``: the
    motion went too far uncorrected for one correction to find it again, e.g. a fast machine whose
    inputs swing with every revolution) or when that correction's NIS exceeds the χ² bound at
    ``divergence_probability`` (``gap_rejected``: the prediction failed)."""

    def __init__(self, cfg: CoreConfig, counts: Counter[str]) -> None:
        self.max_gap, self.max_sd, self.level = cfg.max_gap, cfg.max_gap_sd, cfg.divergence_probability
        self.accel_noise = cfg.gap_accel_noise
        self.counts = counts
        self.history = InputHistory(cfg.inputs, HISTORY_GAPS * cfg.max_gap)
        self.pending = False  # the next correction is the first after a predicted gap
        self.bounds: dict[int, float] = {}

    def predictable(self, gap: float) -> bool:
        """Whether a gap of ``gap`` s is predicted through (else the filter re-initialises)."""
        self.pending = 0 < gap <= self.max_gap
        return self.pending

    def noise(self, gap: float) -> GapNoise:
        """The process noise of predicting through a gap of ``gap`` s (:class:`InputHistory`)."""
        return GapNoise(self.accel_noise, self.history.line_error(gap), self.max_sd)

    def failed(self, inn: Any, spread: float) -> bool:
        """Whether the prediction across a gap failed (the filter re-initialises at its first
        sample instead): ``spread``, its largest σ of a coordinate, beyond ``max_gap_sd``
        (``gap_unsafe``), or the iterated correction's NIS ``inn.nis`` beyond its χ² bound
        (``gap_rejected``)."""
        if not self.pending:
            return False
        if spread > self.max_sd:
            self.counts["gap_unsafe"] += 1
        elif inn is not None:
            dof = len(inn.names)
            if dof not in self.bounds:
                self.bounds[dof] = nis_bound(dof, self.level)
            if inn.nis <= self.bounds[dof]:
                return False
            self.counts["gap_rejected"] += 1
        else:
            return False
        self.pending = False
        return True

    def gated(self, inn: Any) -> Any:
        """The innovation as a statistic of the change tests: None for the first correction after
        a predicted gap (it carries the gap's prediction error)."""
        if inn is None or not self.pending:
            return inn
        self.pending = False
        return None
