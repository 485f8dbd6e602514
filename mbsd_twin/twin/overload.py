"""The solver's hold under load (the service's overload policy, step 1; docs/mqtt-contract.md): the
twin steps ``hold`` samples per solver step, through ``[service] hold_levels``, coarser under
pressure and finer again once the queue is calm."""

from __future__ import annotations

from collections import Counter

from .config.sections import ServiceConfig


class Overload:
    """The current level of ``hold_levels`` (from ``start_level``) and the calm batches counted
    towards stepping back down."""

    def __init__(self, cfg: ServiceConfig, counts: Counter[str]) -> None:
        self.cfg, self.counts = cfg, counts
        self.level = cfg.start_level
        self.low_batches = 0

    def hold(self, lag: float, depth: int, shed: int) -> int:
        """The hold for the next batch: coarser under pressure (lag above ``lag_high``, the queue
        more than half full, or a backlog just coalesced: ``shed``), finer after ``lag_low_batches``
        calm batches (any pressure restarts that count)."""
        s = self.cfg
        pressure = lag > s.lag_high or depth > s.queue_size // 2 or shed > 0
        if pressure and self.level < len(s.hold_levels) - 1:
            self.level += 1
            self.counts["degrade"] += 1
        if pressure or lag >= s.lag_low:
            self.low_batches = 0
        elif self.level > 0:
            self.low_batches += 1
            if self.low_batches >= s.lag_low_batches:
                self.level -= 1
                self.low_batches = 0
        return s.hold_levels[self.level]
