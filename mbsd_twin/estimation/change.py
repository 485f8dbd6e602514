"""Sequential change detection: two-sided CUSUM on normalised statistics, tuned by a mean time
between false alarms.

Each statistic e_k is N(0, 1) and white while nothing changes: a filter's normalised innovation
ν/√S of one channel, or an augmented unknown's normalised correction Δa/√(K·S·Kᵀ). A change of the
mean by δ (in σ units) is detected by Page's CUSUM with reference k = ``shift``/2:

    g⁺ ← max(0, g⁺ + e − k),  g⁻ ← max(0, g⁻ − e − k),  alarm when g⁺ or g⁻ > h.

The threshold h comes from the required mean time between false alarms T (per statistic): with
Siegmund's approximation of the in-control average run length of a one-sided CUSUM,
ARL(h) ≈ (exp(2k·b) − 2k·b − 1)/(2k²), b = h + 1.166, and the two-sided ARL half of it, h solves
ARL = T·rate. The expected detection delay for a change of δ σ is about b/(δ − k) samples.
At an alarm: the onset is the last sample at which the alarming sum was zero, and the size is the
mean of the raw values (ν in the channel's unit, or Δa summed for an unknown) since then.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from scipy.optimize import brentq
from scipy.stats import chi2

SIEGMUND = 1.166


def arl0(h: float, k: float) -> float:
    """Two-sided in-control average run length [samples] of the CUSUM (Siegmund's approximation)."""
    b = min(h + SIEGMUND, 300.0 / k)  # beyond: larger than any float ARL that matters
    return 0.5 * (math.exp(2.0 * k * b) - 2.0 * k * b - 1.0) / (2.0 * k * k)


def threshold(mtbfa: float, rate: float, shift: float) -> float:
    """h for a mean time between false alarms ``mtbfa`` [s] at ``rate`` samples/s and a design
    shift ``shift`` [σ] (k = shift/2)."""
    k, target = 0.5 * shift, mtbfa * rate
    if arl0(0.0, k) >= target:
        return 0.0
    return float(brentq(lambda h: math.log(arl0(h, k)) - math.log(target), 0.0, 200.0 / k, xtol=1e-9))


@dataclass
class _Side:
    g: float = 0.0
    start: float | None = None  # time the current excursion began (g left zero)
    total: float = 0.0  # sum of the raw values since then
    n: int = 0


@dataclass
class Cusum:
    """One statistic's two-sided CUSUM. ``update(t, e, raw)`` returns an alarm dict or None."""

    name: str
    k: float
    h: float
    sides: tuple[_Side, _Side] = field(default_factory=lambda: (_Side(), _Side()))

    def update(self, t: float, e: float, raw: float) -> dict[str, Any] | None:
        if not math.isfinite(e):
            return None
        up, down = self.sides  # the up side first: an alarm there leaves the down side as it was
        return self._side(up, t, e, raw, "up") or self._side(down, t, -e, raw, "down")

    def _side(self, side: _Side, t: float, e: float, raw: float, direction: str) -> dict[str, Any] | None:
        """One side's step with its signed value ``e``; the alarm when it crosses."""
        g = side.g + e - self.k
        if g <= 0.0:
            side.g, side.start, side.total, side.n = 0.0, None, 0.0, 0
            return None
        if side.start is None:
            side.start = t
        side.g, side.total, side.n = g, side.total + raw, side.n + 1
        if not g > self.h:  # noqa: SIM201 (a NaN threshold never alarms)
            return None
        alarm = {"statistic": self.name, "onset": side.start, "detected": t, "cusum": g, "threshold": self.h,
                 "direction": direction, "mean": side.total / side.n, "sum": side.total}
        self.reset()
        return alarm

    def reset(self) -> None:
        self.sides = (_Side(), _Side())

    def value(self) -> float:
        return max(s.g for s in self.sides)


class ChangeDetector:
    """A CUSUM per named statistic, all with the same tuning."""

    def __init__(self, names: list[str], mtbfa: float, rate: float, shift: float) -> None:
        self.k, self.h = 0.5 * shift, threshold(mtbfa, rate, shift)
        self.tests = {n: Cusum(n, self.k, self.h) for n in names}

    def update(self, t: float, values: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
        """``values``: name → (normalised e, raw value); the alarms raised at ``t``."""
        out = []
        for name, (e, raw) in values.items():
            test = self.tests.get(name)
            alarm = test.update(t, e, raw) if test else None
            if alarm:
                out.append(alarm)
        return out

    def reset(self) -> None:
        for c in self.tests.values():
            c.reset()

    def statistics(self) -> dict[str, float]:
        return {n: c.value() for n, c in self.tests.items()}

    def state(self) -> dict[str, list[list[Any]]]:
        """Each test's sums: name → two sides (up, down) as ``[g, start, total, n]`` (JSON-exact)."""
        return {n: [[sd.g, sd.start, sd.total, sd.n] for sd in c.sides] for n, c in self.tests.items()}

    def restore(self, state: dict[str, list[list[Any]]]) -> None:
        """Put back a :meth:`state` of a detector with the same statistics (``ValueError`` else)."""
        if set(state) != set(self.tests):
            raise ValueError(f"change tests {sorted(state)} in the checkpoint, {sorted(self.tests)} here")
        for n, sides in state.items():
            up, down = (_Side(float(g), None if t is None else float(t), float(tot), int(k)) for g, t, tot, k in sides)
            self.tests[n].sides = (up, down)


def nis_bound(dof: int, level: float) -> float:
    """Upper bound of a sum of NIS values with ``dof`` degrees of freedom in all, exceeded with
    probability ``level`` by a consistent filter."""
    return float(chi2.isf(level, dof))
