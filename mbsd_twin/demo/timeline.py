"""The twin's own account of a demo run, from the messages it publishes (a service tap).

Kept per message, in the order the twin published them:

- ``outputs``: per ``residuals`` message (one per solved batch) its ``src_seq``, the rig times of
  its first and last output sample, their number and the hold (``stride``), and, with ``counters``
  (the service's health counters, read as the message is published), the batches the twin had
  counted by then as ``coalesced``, dropped with the queue full (``dropped_overload`` beyond
  ``coalesced``) and rejected (``invalid.range``, ``missing_channels``, ``recovered``); a jump in
  ``src_seq`` is a run of sensor batches the twin published nothing for;
- ``hold_changes``: the residual messages' ``hold_change`` (``from``, ``to``, ``t``: the rig time of
  the first sample of the first batch solved at the new hold);
- ``resyncs``: their ``resync_events`` (``t``, ``reason``): every (re)initialisation of the filter;
- ``health``: every health message's counters, hold, lag and queue depth, with ``t``: the rig time
  of the last output sample published before it (the twin's worker publishes both, in order);
- ``alarms``: every alarm event (raised and cleared).

Rig times are as the twin publishes them (the rig's clock, seconds since the epoch).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..twin.core import Out

HEALTH_KEYS = ("hold", "lag_s", "queue_depth")


class Timeline:
    """A service tap (``svc.taps.append(timeline)``); :meth:`to_dict` is its JSON record."""

    def __init__(self, counters: Callable[[], Mapping[str, Any]] | None = None) -> None:
        self.counters = counters
        self.outputs: list[tuple[Any, ...]] = []  # src_seq, first t, last t, n, stride[, coalesced, queue, rejected]
        self.hold_changes: list[dict[str, Any]] = []
        self.resyncs: list[dict[str, Any]] = []
        self.health: list[dict[str, Any]] = []
        self.alarms: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, out: Out) -> None:
        _, sep, leaf = out.topic.rpartition("/twin/")
        if not sep or leaf not in ("residuals", "health", "alarms"):
            return
        body = json.loads(out.payload)
        if leaf == "residuals":
            self._residuals(body)
        elif leaf == "alarms":
            with self._lock:
                self.alarms.append(body)
        else:
            self.add_health(body)

    def _residuals(self, body: dict[str, Any]) -> None:
        n, t0, dt = int(body["n"]), float(body["t0"]), float(body["dt"])
        counted = skipped(self.counters()) if self.counters else ()
        with self._lock:
            self.outputs.append((int(body["src_seq"][0]), t0, t0 + (n - 1) * dt, n, int(body.get("stride", 1)),
                                 *counted))
            if "hold_change" in body:
                self.hold_changes.append(dict(body["hold_change"]))
            self.resyncs.extend(dict(e) for e in body.get("resync_events", ()))

    def add_health(self, health: dict[str, Any]) -> None:
        """A health message (also the one the demo takes from the service after the run)."""
        with self._lock:
            t = self.outputs[-1][2] if self.outputs else None
            self.health.append({"t": t, **{k: health.get(k) for k in HEALTH_KEYS},
                                "counters": health.get("counters", {})})

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {"outputs": [list(o) for o in self.outputs], "hold_changes": list(self.hold_changes),
                    "resyncs": list(self.resyncs), "health": list(self.health), "alarms": list(self.alarms)}


def skipped(c: Mapping[str, Any]) -> tuple[int, int, int]:
    """Batches the health counters ``c`` say the twin skipped: coalesced, dropped with the queue
    full, rejected (a value out of range, a missing channel, a failed step)."""
    rec, co = c.get("recovered", {}), int(c.get("coalesced", 0))
    rejected = c.get("invalid", {}).get("range", 0) + c.get("missing_channels", 0) + rec.get("step", 0) \
        + rec.get("work", 0)
    return co, int(c.get("dropped_overload", 0)) - co, int(rejected)
