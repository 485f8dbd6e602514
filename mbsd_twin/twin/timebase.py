"""The stream's time base: where each sensor batch sits in time, from its ``seq`` and ``t0``.

A rig's ``t0`` is stamped by its clock when the batch is sent and carries jitter (and the odd
clock step), while its samples are regular and its ``seq`` counts the batches. So the twin does
not take ``t0`` at face value: it counts samples. Batch ``seq`` sits where the previous batch
ended plus one sample period, plus the samples of the batches its ``seq`` says were missed
(``dt`` × the previous batch's ``n`` each):

    expected = anchor + dt · (samples since the anchor),   r = t0 − expected   (residual)

* ``|r| <= t0_jitter_bound``: jitter. The batch gets the expected time (it continues the stream, or
  follows a gap of exactly the missed batches); r enters the jitter figures (``t0_offset``: the
  mean of r, ``t0_jitter_rms``: the RMS of r about that mean, both over about the last
  ``WINDOW`` batches). When the mean drifts beyond half the bound (a sender clock running at
  another rate than its ``dt`` says) the time base is moved by it (``t0_realigned``).
* ``|r| > t0_jitter_bound``: the batch still gets the expected time and is counted
  (``t0_rejected``); when ``clock_step_batches`` such batches in a row agree on one new offset
  (within the bound), the rig's clock stepped: the time base moves by the step once
  (``clock_step``), the batch and its successors carry the rig's new clock, and the stream
  continues (the model's own time is not moved: :meth:`TwinCore._relabel`).
* No relation to the previous batch (the first batch, a ``seq`` that does not increase, another
  ``dt``, or :meth:`reset` at a rig restart): the batch's own ``t0`` starts a new anchor
  (``anchored``); the core then compares times as they come.

A move of the time base (clock step, realignment) relabels rig time; it is never a gap.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

from .config.sections import CoreConfig
from .protocol import SensorBatch

WINDOW = 256  # batches: memory of the offset and jitter figures (exponential weighting)
CENTRE_AFTER = 32  # batches of jitter figures before the time base is centred on their mean offset
CENTRE_FLOOR = 1e-5  # s: a mean offset below this is left alone


@dataclass(frozen=True)
class Placement:
    """Where a batch sits: its first sample's time on the time base [s], the move of the time base
    at this batch [s] (clock step or realignment; 0 mostly) and whether it starts a new anchor."""

    t0: float
    shift: float = 0.0
    anchored: bool = False


class TimeBase:
    def __init__(self, cfg: CoreConfig) -> None:
        self.bound, self.confirm = cfg.t0_jitter_bound, cfg.clock_step_batches
        self.anchor: float | None = None  # rig time of sample index 0
        self.dt = 0.0
        self.k_end = 0  # sample index of the previous batch's last sample
        self.seq = -1
        self.n = 0
        self.mean = 0.0  # offset of the rig's t0 from the time base [s] (exponentially weighted)
        self.var = 0.0  # jitter variance about it [s²]
        self.accepted = 0  # residuals in the figures since the last anchor
        self.candidates: deque[float] = deque(maxlen=max(1, self.confirm))
        self.counts: Counter[str] = Counter()

    def reset(self) -> None:
        """A new rig session: the next batch starts a new anchor."""
        self.anchor = None

    def place(self, batch: SensorBatch) -> Placement:
        missed = batch.seq - self.seq - 1
        if self.anchor is None or missed < 0 or batch.dt != self.dt:
            return self._anchor(batch)
        k0 = self.k_end + 1 + self.n * missed
        expected = self.anchor + k0 * self.dt
        r = batch.t0 - expected
        shift = 0.0
        if abs(r) <= self.bound:
            self.candidates.clear()
            shift = self._accept(r)
        else:
            self.candidates.append(r)
            c = sorted(self.candidates)
            if len(c) >= self.confirm and c[-1] - c[0] <= self.bound:
                shift = c[len(c) // 2] - self.mean
                self.counts["clock_step"] += 1
                self.candidates.clear()
            else:
                self.counts["t0_rejected"] += 1
        self.anchor += shift
        self.k_end, self.seq, self.n = k0 + batch.n - 1, batch.seq, batch.n
        return Placement(self.anchor + k0 * self.dt, shift)

    def _anchor(self, batch: SensorBatch) -> Placement:
        if self.anchor is not None:
            self.counts["anchored"] += 1
        self.anchor, self.dt, self.k_end, self.seq, self.n = batch.t0, batch.dt, batch.n - 1, batch.seq, batch.n
        self.mean = self.var = 0.0
        self.accepted = 0
        self.candidates.clear()
        return Placement(batch.t0, 0.0, True)

    def _accept(self, r: float) -> float:
        """Jitter ``r`` into the figures; the realignment it calls for (0: none)."""
        self.accepted += 1
        w = 1.0 / min(self.accepted, WINDOW)
        d = r - self.mean
        self.mean += w * d
        self.var = (1.0 - w) * (self.var + w * d * d)
        if abs(self.mean) > 0.5 * self.bound:
            self.counts["t0_realigned"] += 1
        elif not (self.accepted >= CENTRE_AFTER and abs(self.mean) > max(CENTRE_FLOOR, 3.0 * math.sqrt(
                self.var / min(self.accepted, WINDOW)))):
            return 0.0
        else:  # the anchor (the first batch's own jittered t0) centred on the offsets seen since
            self.counts["t0_centred"] += 1
        shift, self.mean = self.mean, 0.0
        return shift

    def figures(self) -> dict[str, Any]:
        """``health.counters.timing``: the counts by reason (also :class:`GapGuard`'s) and the
        jitter figures [s]."""
        return {"clock_step": 0, "t0_rejected": 0, "t0_realigned": 0, "t0_centred": 0, "anchored": 0, "gap_unsafe": 0,
                "gap_rejected": 0, **self.counts,
                "t0_offset": self.mean, "t0_jitter_rms": math.sqrt(self.var)}

    def snapshot(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("anchor", "dt", "k_end", "seq", "n", "mean", "var", "accepted")} \
            | {"candidates": list(self.candidates), "counts": dict(self.counts)}

    def restore(self, snap: dict[str, Any]) -> None:
        for k in ("anchor", "dt", "k_end", "seq", "n", "mean", "var", "accepted"):
            setattr(self, k, snap[k])
        self.candidates = deque(snap["candidates"], maxlen=max(1, self.confirm))
        self.counts.clear()  # in place: shared with the core's GapGuard
        self.counts.update(snap["counts"])
