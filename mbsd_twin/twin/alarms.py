"""Threshold alarms with hysteresis, a minimum duration and an event-rate limit (all in rig time)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .config import AlarmConfig


@dataclass
class _State:
    active: bool = False
    since: float | None = None  # rig time the pending transition's condition started
    events: deque[float] = field(default_factory=deque)
    peak: float = 0.0


class Alarms:
    """``update`` per output sample; returns raise / clear events."""

    def __init__(self, configs: tuple[AlarmConfig, ...], max_per_minute: int) -> None:
        self.configs = configs
        self.state = {a.name: _State() for a in configs}
        self.max_per_minute = max_per_minute
        self.suppressed = 0

    def update(self, t: float, values: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
        """``values[source][channel]`` at rig time ``t``."""
        events = []
        for a in self.configs:
            v = values.get(a.source, {}).get(a.channel)
            if v is None:
                continue
            st = self.state[a.name]
            mag = abs(v)
            st.peak = max(st.peak, mag) if st.active else mag
            pending = mag <= a.low if st.active else mag >= a.high
            if not pending:
                st.since = None
                continue
            if st.since is None:
                st.since = t
            if t - st.since < a.min_duration:
                continue
            st.since = None
            while st.events and st.events[0] < t - 60.0:
                st.events.popleft()
            if not st.active and len(st.events) >= self.max_per_minute:
                self.suppressed += 1  # flooding: stay clear, count it
                continue
            st.active = not st.active
            st.events.append(t)
            events.append({"alarm": a.name, "event": "raised" if st.active else "cleared", "t": t,
                           "source": a.source, "channel": a.channel, "value": v,
                           "threshold": a.high if st.active else a.low})
        return events

    def active(self) -> list[str]:
        return [n for n, s in self.state.items() if s.active]
