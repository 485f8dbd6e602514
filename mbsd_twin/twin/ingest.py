"""Sensor messages from the network thread to the worker: reject early, keep the newest, coalesce.

The network thread (:meth:`Intake.ingest`) validates each message before anything is queued — the
cheapest checks first (size, UTF-8, another asset's name; :func:`.protocol.parse_sensor`), so a
flood of invalid messages costs a few µs to a few tens of µs each and never reaches the queue —
and sequences the valid ones. The queue is bounded (``queue_size``): when full, its oldest batch is
dropped, so it always holds the newest data. The worker (:meth:`Intake.take`) coalesces a backlog
it cannot work off in time: when the newest batch would wait longer than ``max_lag`` (the batches
before it times the worker's median time per batch over its last 21, once it has 5), it skips to
the newest batch; a short backlog after a stall is worked off. Under a flood — valid batches
arriving faster than the worker works them off (over the last ``ARRIVALS`` arrivals, arrival rate ×
median time per batch > 1) — a backlog can only grow, so waiting for it buys nothing: the limit is
then ``flood_lag``, and the twin stays on the freshest data. The hold adaptation (coarser above
``lag_high``) makes each batch cheaper first. Skipped batches count as ``dropped_overload`` (and
``coalesced``); the twin core predicts through the gap they leave (up to ``[core] max_gap``) or
re-initialises from the newest batch's measurements after a longer one (``resync.gap``). A rig
restart queued among them is kept, in order, before the newest batch.

Two clocks per batch (:class:`Item`): ``arrival`` (the message reached the twin) and ``ready`` (the
sequencer released it: the arrival, unless it waited in the reorder buffer for a missing
predecessor). The overload lag (hold adaptation) is measured from ``ready``: waiting for a lost
message is the network's doing, not a backlog of the twin, and is reported apart
(:meth:`Intake.reorder_figures`, ``health.reorder_wait_s``). A batch released by the reorder
timeout became ready when the timeout expired, not when the worker noticed it.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from typing import NamedTuple, Protocol

import numpy as np

from .config.sections import ServiceConfig
from .metrics import Metrics
from .protocol import Invalid, SensorBatch, parse_sensor
from .sequencer import Sequencer

ARRIVALS = 64  # valid batches over which the arrival rate is measured
RIG_RESTART = None  # queued in place of a batch: a new rig session starts after the batches before it
WAITS = 1000  # reorder waits kept for the health figures


class Item(NamedTuple):
    """A batch (or RIG_RESTART) for the worker, with its monotonic times."""

    batch: SensorBatch | None
    arrival: float  # s: the message reached the twin
    ready: float  # s: the sequencer released it (after any wait for a missing predecessor)


Arrived = tuple[SensorBatch, float]  # a valid batch and its arrival time, as the sequencer holds it


class _Log(Protocol):
    def warning(self, key: str, msg: str, *args: object) -> None: ...


class Intake:
    """Validation, sequencing and the bounded queue; ``lock`` guards ``batches`` and ``seq``."""

    def __init__(self, cfg: ServiceConfig, asset: str, lock: threading.Condition, counts: Counter[str],
                 invalid: Counter[str], metrics: Metrics, rlog: _Log) -> None:
        self.cfg, self.asset, self.lock = cfg, asset, lock
        self.counts, self.invalid, self.metrics, self.rlog = counts, invalid, metrics, rlog
        self.seq: Sequencer[Arrived] = Sequencer(cfg.reorder_window, max_jump=cfg.max_seq_jump,
                                              jump_confirm=cfg.seq_jump_confirm)
        self.batches: deque[Item] = deque()
        self.shed = 0  # batches skipped at the last take (pressure for the hold adaptation)
        self.recent: deque[float] = deque(maxlen=21)  # the worker's wall time of its last batches
        self.batch_s = 0.0  # their median: a typical batch, not a stall (CPU taken by another process)
        self.arrivals: deque[float] = deque(maxlen=ARRIVALS)  # arrival times of the last valid batches
        self.waits: deque[float] = deque(maxlen=WAITS)  # s each of the last batches waited in the reorder buffer

    def cost(self, seconds: float) -> None:
        """The worker took ``seconds`` for a batch (its estimate of how long a backlog takes)."""
        self.recent.append(seconds)
        if len(self.recent) >= 5:  # (no estimate from the first batches, which set the model up)
            self.batch_s = sorted(self.recent)[len(self.recent) // 2]

    # ------------------------------------------------------- network thread
    def ingest(self, payload: bytes, now: float) -> None:
        """Validate one message (rejected before it is queued), sequence and queue it."""
        self.counts["received"] += 1
        got = parse_sensor(payload, self.asset, self.cfg.max_message_bytes)
        if isinstance(got, Invalid):
            self.invalid[got.reason] += 1
            self.metrics.invalid.labels(got.reason).inc()
            self.rlog.warning(got.reason, "invalid sensor message (%s): %s", got.reason, got.detail)
            return
        self.metrics.messages.labels("valid").inc()
        with self.lock:
            self.arrivals.append(now)
            self.enqueue(self.seq.push(got.seq, (got, now), now), now)

    def enqueue(self, items: list[Arrived], ready: float) -> None:
        """Append in order what the sequencer released at ``ready`` (caller holds the lock); beyond
        ``queue_size`` the oldest is dropped. A batch that waited for a missing predecessor counts
        as ``reorder_waited``, its wait kept for :meth:`reorder_figures`."""
        for batch, arrival in items:
            if ready > arrival:
                self.counts["reorder_waited"] += 1
                self.waits.append(ready - arrival)
            self.batches.append(Item(batch, arrival, ready))
            if len(self.batches) > self.cfg.queue_size:
                self.batches.popleft()
                self.counts["dropped_overload"] += 1
        if items:
            self.lock.notify()

    def restart(self, now: float) -> None:
        """A new rig session: forget the sequence; the marker is processed after the batches before it."""
        with self.lock:
            self.seq.reset()
            self.counts["rig_restart"] += 1
            self.batches.append(Item(RIG_RESTART, now, now))
            self.lock.notify()

    # ---------------------------------------------------------------- worker
    def flush(self, now: float) -> None:
        """Give up missing seqs that waited longer than ``reorder_timeout`` (caller holds the lock);
        what that releases became ready when the timeout expired."""
        while (due := self.seq.due(self.cfg.reorder_timeout)) is not None and due <= now:
            self.enqueue(self.seq.give_up(), due)

    def reorder_figures(self) -> dict[str, float]:
        """s the last ``WAITS`` batches that waited for a missing predecessor waited (p50, p99, max)."""
        w = np.array(self.waits or [0.0])
        return {"p50": float(np.percentile(w, 50)), "p99": float(np.percentile(w, 99)), "max": float(w.max())}

    def take(self, now: float) -> Item | None:
        """The next item for the worker (caller holds the lock), after coalescing a backlog."""
        self.shed = 0
        if not self.batches:
            return None
        limit = self.cfg.flood_lag if self.flooded() else self.cfg.max_lag
        if (len(self.batches) - 1) * self.batch_s > limit:
            self._coalesce()
        return self.batches.popleft()

    def flooded(self) -> bool:
        """Valid batches arrive faster than the worker works them off (caller holds the lock)."""
        a = self.arrivals
        return len(a) == ARRIVALS and (len(a) - 1) * self.batch_s > a[-1] - a[0]

    def _coalesce(self) -> None:
        """Skip to the newest batch, keeping a rig restart among the skipped ones (before it)."""
        q = self.batches
        newest = q.pop()
        restart = any(it.batch is RIG_RESTART for it in q)
        self.shed = sum(it.batch is not RIG_RESTART for it in q)
        q.clear()
        if restart:
            q.append(Item(RIG_RESTART, newest.arrival, newest.ready))
        q.append(newest)
        self.counts["dropped_overload"] += self.shed
        self.counts["coalesced"] += self.shed
