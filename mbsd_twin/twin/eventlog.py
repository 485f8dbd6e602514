"""The twin's events in its log at INFO: what an operator reading ``journalctl`` or a container log
must see without subscribing to MQTT — every alarm raised and cleared, every re-initialisation
with its reason (``start`` included), every rig restart, every change of the solver hold, and the
stop with the run's totals. The published messages stay the record; these lines say the same in
words, each with the rig time [s] it happened at.

Alarms are already rate-limited by ``[core] alarm_max_events_per_minute``; re-initialisations are
logged one line per batch (the batch's reasons and count), so a re-initialisation loop shows as
one line per batch, never more."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from .core import Out

log = logging.getLogger("mbsd_twin.twin")


def alarm_line(msg: dict[str, Any]) -> str:
    """One alarm message (``twin/alarms``) in words."""
    name, event, t = msg.get("alarm", "?"), msg.get("event", "?"), msg.get("t", float("nan"))
    line = f"alarm {name} {event} at t = {t:.3f} s"
    if event != "raised":
        return line
    if msg.get("source") == "change":
        return (f"{line}: {msg.get('kind', '')} change of {msg.get('channel', '?')}, size {msg.get('size', 0):.4g}, "
                f"onset t = {msg.get('onset', float('nan')):.3f} s (statistic {msg.get('statistic', 0):.3g} > "
                f"{msg.get('threshold', 0):.3g})")
    return (f"{line}: {msg.get('source', '')} {msg.get('channel', '?')} = {msg.get('value', float('nan')):.4g} "
            f"(threshold {msg.get('threshold', float('nan')):.4g})")


class EventLog:
    """Watches what the service's worker does and logs the events (module docstring)."""

    def __init__(self, alarms_topic: str, logger: logging.Logger = log, start_hold: int | None = None) -> None:
        """``start_hold``: the configured start level's hold, so that a first batch already taken at
        another hold (a queue full before the first batch was done) is logged as a change from it."""
        self.alarms_topic = alarms_topic
        self.log = logger
        self.hold: int | None = start_hold
        self.raised = 0
        self.resyncs: Counter[str] = Counter()

    def outputs(self, outs: Iterable[Out]) -> list[dict[str, Any]]:
        """Log the alarm messages among a batch's outputs; return them (decoded)."""
        alarms = []
        for o in outs:
            if o.topic != self.alarms_topic:
                continue
            try:
                msg = orjson.loads(o.payload)
            except orjson.JSONDecodeError:  # the twin's own message: cannot happen, never fatal
                continue
            self.raised += msg.get("event") == "raised"
            self.log.info("%s", alarm_line(msg))
            alarms.append(msg)
        return alarms

    def resynced(self, events: list[dict[str, Any]]) -> None:
        """A batch's re-initialisations (``TwinCore.batch_resync_events``): one line."""
        if not events:
            return
        reasons = Counter(str(e.get("reason", "?")) for e in events)
        self.resyncs.update(reasons)
        first = events[0].get("t", float("nan"))
        what = ", ".join(f"{r} ×{n}" if n > 1 else r for r, n in reasons.items())
        self.log.info("re-initialised at t = %.3f s (%s); %d so far", first, what, sum(self.resyncs.values()))

    def hold_changed(self, hold: int, lag: float, depth: int, coalesced: int) -> None:
        """The solver hold used for the batch just taken [samples per correction]; ``coalesced``:
        batches just shed from a backlog."""
        if self.hold is not None and hold != self.hold:
            why = "overloaded" if hold > self.hold else "load back to normal"
            self.log.info("solver hold %d -> %d (%s: lag %.3f s, %d batches queued, %d coalesced)", self.hold, hold,
                          why, lag, depth, coalesced)
        self.hold = hold

    def rig_restarted(self) -> None:
        self.log.info("rig restarted (a new rig session): the model re-synchronises at its next batch")

    def stopped(self, batches: int, samples: int, dropped: int) -> None:
        resyncs = ", ".join(f"{r} {n}" for r, n in self.resyncs.most_common()) or "none"
        self.log.info("stopped: %d batches (%d samples) processed, %d dropped under overload, %d alarms raised, "
                      "re-initialisations: %s", batches, samples, dropped, self.raised, resyncs)
