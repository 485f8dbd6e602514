"""Slow-drift test and rate of change of the filter's augmented estimates (docs/twin-estimation.md,
"Drift alarms").

**Why a test of its own.** The change tests (:mod:`mbsd_twin.estimation.change`) watch each
unknown's normalised correction Δa/σ(Δa). A ramp of slope s moves the estimate by s·Δt per
sample, while σ(Δa) = rate·√Δt in steady state: a mean shift of s·√Δt/rate σ (0.09 σ for
0.03 N·m/s at the default 0.01 N·m/√s and 1 kHz), far below the CUSUM's reference k = 0.5 σ.
The filter follows such a ramp closely and no change test ever crosses.

**Model of a healthy estimate.** While the true unknown is constant, the estimate's error is
close to an Ornstein–Uhlenbeck process: variance at most P (the filter's own variance of the
unknown; a random walk it assumes but that does not happen makes P about twice the real one) and
time constant τ = P/rate² (the steady state of a random-walk estimate: the gain that makes the
filter's lag behind a ramp s·τ). The mean of the estimate over a block of w seconds then has the
variance

    v(w) = 2·P·(τ/w)²·(w/τ − 1 + exp(−w/τ))

**Test.** Per unknown with rate > 0, once the change tests are armed: block means m_j over blocks
of w = max(``drift_window``, 4τ) (τ at arming; 4τ keeps neighbouring blocks nearly uncorrelated),
their recursive residuals against the weighted mean of all earlier blocks since the test started,

    e_j = (m_j − μ_{j−1}) / √(v_j + V_{j−1}),  μ = Σ(m_i/v_i)/Σ(1/v_i),  V = 1/Σ(1/v_i)

(independent N(0, 1) while the unknown is constant), and Page's two-sided CUSUM on e_j with the
change tests' k = ``change_shift``/2 and h from ``change_mtbfa`` at the block rate 1/w. At a
crossing the test restarts from the next block (a new baseline): a continuing ramp crosses again
(its alarm stays raised), a ramp that stopped does not (its alarm clears). A filter (re)start or a
release of the unknown (a change alarm on it) restarts the test too.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from ..estimation.change import Cusum, threshold

TAU_BLOCKS = 4.0  # blocks at least this many time constants long


def block_variance(p: float, tau: float, w: float) -> float:
    """Variance of the mean over ``w`` s of an Ornstein–Uhlenbeck process of variance ``p`` and
    time constant ``tau``."""
    r = w / tau
    if r < 1e-3:  # the series: no cancellation in exp(−r) − 1 + r
        return 2.0 * p * (0.5 - r / 6.0 + r * r / 24.0)
    return 2.0 * p * (math.exp(-r) - 1.0 + r) / (r * r)


class DriftTest:
    """One unknown's drift test; ``update`` per sample with the estimate and its σ."""

    def __init__(self, name: str, rate: float, window: float, mtbfa: float, shift: float) -> None:
        self.name, self.rate, self.window, self.mtbfa, self.shift = name, rate, window, mtbfa, shift
        self.w = self.h = math.nan  # block length [s] and threshold, set when the test starts
        self.block: list[float] = []  # [start, samples, Σ estimate, Σ variance]
        self.base = [0.0, 0.0]  # Σ 1/v_i, Σ m_i/v_i of the blocks since the (re)start
        self.cusum = Cusum(name, 0.5 * shift, math.inf)

    def reset(self) -> None:
        """Start afresh (new block length and baseline) at the next sample."""
        self.block, self.base, self.w = [], [0.0, 0.0], math.nan
        self.cusum.reset()

    def restart(self) -> None:
        """After a crossing: a new baseline from the next block, same block length."""
        self.block, self.base = [], [0.0, 0.0]
        self.cusum.reset()

    def update(self, t: float, value: float, sd: float) -> dict[str, Any] | None:
        if not (math.isfinite(value) and math.isfinite(sd) and sd > 0):
            return None
        if math.isnan(self.w):
            tau = sd * sd / (self.rate * self.rate)
            self.w = max(self.window, TAU_BLOCKS * tau)
            self.h = threshold(self.mtbfa, 1.0 / self.w, self.shift)
            self.cusum.h = self.h
        if not self.block:
            self.block = [t, 0.0, 0.0, 0.0]
        b = self.block
        b[1], b[2], b[3] = b[1] + 1, b[2] + value, b[3] + sd * sd
        return self._close(t) if t - b[0] >= self.w * (1.0 - 1e-9) else None

    def _close(self, t: float) -> dict[str, Any] | None:
        start, n, total, var = self.block
        self.block = []
        m, p = total / n, var / n
        v = block_variance(p, p / (self.rate * self.rate), self.w)
        wsum, msum = self.base
        self.base = [wsum + 1.0 / v, msum + m / v]
        if wsum == 0.0:
            return None  # the first block is the baseline
        mu, vmu = msum / wsum, 1.0 / wsum
        alarm = self.cusum.update(start, (m - mu) / math.sqrt(v + vmu), m - mu)
        if alarm is None:
            return None
        self.restart()
        return {"onset": alarm["onset"], "size": m - mu, "direction": alarm["direction"],
                "statistic": alarm["cusum"], "threshold": self.h, "window": self.w, "detected": t}

    def value(self) -> float:
        return self.cusum.value()

    def state(self) -> list[Any]:
        sides = [[s.g, s.start, s.total, s.n] for s in self.cusum.sides]
        return [self.w, self.h, list(self.block), list(self.base), sides]

    def restore(self, st: list[Any]) -> None:
        from ..estimation.change import _Side

        self.w, self.h = float(st[0]), float(st[1])
        self.block, self.base = [float(x) for x in st[2]], [float(x) for x in st[3]]
        self.cusum.h = self.h
        self.cusum.sides = tuple(_Side(float(g), None if s is None else float(s), float(tot), int(k))
                                 for g, s, tot, k in st[4])  # type: ignore[assignment]


class RateWindow:
    """Rate of change of one estimate [unit/s] over ``window`` s: (mean over the newer half −
    mean over the older half)/(window/2), defined once a whole window of samples is in."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.new: deque[tuple[float, float]] = deque()
        self.old: deque[tuple[float, float]] = deque()
        self.sums = [0.0, 0.0]  # Σ newer half, Σ older half
        self.t0: float | None = None

    def reset(self) -> None:
        self.new.clear()
        self.old.clear()
        self.sums, self.t0 = [0.0, 0.0], None

    def update(self, t: float, value: float) -> float | None:
        if self.t0 is None:
            self.t0 = t
        self.new.append((t, value))
        self.sums[0] += value
        half = 0.5 * self.window
        while self.new and self.new[0][0] <= t - half:
            tv = self.new.popleft()
            self.old.append(tv)
            self.sums[0] -= tv[1]
            self.sums[1] += tv[1]
        while self.old and self.old[0][0] <= t - self.window:
            self.sums[1] -= self.old.popleft()[1]
        if t - self.t0 < self.window or not self.new or not self.old:
            return None
        return (self.sums[0] / len(self.new) - self.sums[1] / len(self.old)) / half

    def state(self) -> list[Any]:
        return [list(map(list, self.new)), list(map(list, self.old)), list(self.sums), self.t0]

    def restore(self, st: list[Any]) -> None:
        self.new = deque((float(a), float(b)) for a, b in st[0])
        self.old = deque((float(a), float(b)) for a, b in st[1])
        self.sums, self.t0 = [float(x) for x in st[2]], st[3]
