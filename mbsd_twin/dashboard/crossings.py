"""Why a threshold was crossed without an alarm: the runs of |value| ≥ ``high`` of each threshold
alarm's channel, found sample by sample in the twin's published messages (every output sample, as
the twin's own :class:`~mbsd_twin.twin.alarms.Alarms` sees them), each with its duration against the
alarm's ``min_duration``. A run shorter than that raises nothing; the dashboard says so under the
chart. Duration as the twin measures it: from the first sample at or above ``high`` to the last one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from ..twin.config.sections import AlarmConfig

LEAF = {"residual": "residuals", "state": "state", "virtual": "virtual"}


class Crossings:
    """``feed(msgs)`` per joined batch (state, residuals, virtual by leaf); ``runs`` the finished and
    open runs (``alarm``, ``t`` start, ``duration`` [s], ``long_enough``, ``open``)."""

    def __init__(self, alarms: Sequence[AlarmConfig], maxlen: int = 500) -> None:
        self.alarms = tuple(alarms)
        self.start: dict[str, float | None] = {a.name: None for a in self.alarms}
        self.last: dict[str, float] = {}
        self.runs: deque[dict[str, Any]] = deque(maxlen=maxlen)

    def _values(self, a: AlarmConfig, msgs: dict[str, dict[str, Any]]) -> list[float | None]:
        if a.source == "meas":  # the sensor's sample: estimate + innovation
            sim = msgs["state"]["ch"].get(a.channel) or []
            res = msgs["residuals"]["ch"].get(a.channel) or []
            return [None if s is None or r is None else s + r for s, r in zip(sim, res, strict=False)]
        return list(msgs[LEAF[a.source]]["ch"].get(a.channel) or [])

    def feed(self, msgs: dict[str, dict[str, Any]]) -> None:
        t0, dt = float(msgs["virtual"]["t0"]), float(msgs["virtual"]["dt"])
        for a in self.alarms:
            for k, v in enumerate(self._values(a, msgs)):
                t = t0 + k * dt
                if v is not None and abs(v) >= a.high:
                    if self.start[a.name] is None:
                        self.start[a.name] = t
                    self.last[a.name] = t
                elif self.start[a.name] is not None:
                    self._close(a)

    def _close(self, a: AlarmConfig) -> None:
        t = self.start[a.name]
        assert t is not None
        self.runs.append(self._run(a, t, False))
        self.start[a.name] = None

    def _run(self, a: AlarmConfig, t: float, is_open: bool) -> dict[str, Any]:
        d = self.last[a.name] - t
        return {"alarm": a.name, "t": t, "duration": d, "long_enough": d >= a.min_duration, "open": is_open}

    def since(self, t_from: float) -> list[dict[str, Any]]:
        """Runs ending at or after ``t_from`` (open ones included), oldest first."""
        out = [r for r in self.runs if r["t"] + r["duration"] >= t_from]
        return out + [self._run(a, t, True) for a in self.alarms if (t := self.start[a.name]) is not None]
