"""Threshold alarms with hysteresis, a minimum duration and an event-rate limit (all in rig time)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .config import AlarmConfig, CoreConfig


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

    def snapshot(self) -> dict[str, Any]:
        """The alarms' timers and flags (JSON; :meth:`restore` puts them back)."""
        return {"state": {n: [s.active, s.since, list(s.events), s.peak] for n, s in self.state.items()},
                "suppressed": self.suppressed}

    def restore(self, snap: dict[str, Any]) -> None:
        """A :meth:`snapshot`; alarms no longer configured are left out, new ones start clear."""
        for n, (active, since, events, peak) in snap["state"].items():
            if n in self.state:
                self.state[n] = _State(bool(active), since, deque(events), float(peak))
        self.suppressed = int(snap["suppressed"])


class ChangeAlarms:
    """Change alarms from the filter (:mod:`mbsd_twin.estimation.change`): a CUSUM on each measured
    channel's normalised innovation and on each augmented unknown's normalised correction, tuned
    by ``change_mtbfa`` and ``change_shift``. An alarm names the channel or unknown, the estimated
    onset time and the size of the change (channel: mean innovation since onset, in its unit;
    unknown: the estimate's change since onset). The tests are armed ``divergence_window`` s after
    each (re)start of the filter, once its prior has settled. An alarm stays raised while the
    statistic keeps alarming, or the filter keeps diverging, and clears after ``CLEAR_AFTER`` s of
    rig time without either; events are rate-limited like the threshold alarms."""

    CLEAR_AFTER = 2.0

    def __init__(self, cfg: CoreConfig, rate: float, tracker: Any) -> None:
        from ..estimation.change import ChangeDetector

        est = getattr(tracker, "est", None)
        self.channel = {p: c for c, p in cfg.compare.items()}  # model output → channel
        self.aug = [a.name for a in est.aug] if est is not None else []
        self.offset = 2 * est.d if est is not None else 0
        names = [self.channel[m] for m in (est.meas if est is not None else [])] + self.aug
        self.rate = rate  # samples/s: tunes the thresholds
        self.detector = ChangeDetector(names, cfg.change_mtbfa, rate, cfg.change_shift)
        self.last: dict[str, float] = {}  # active statistic → rig time of its last crossing
        self.max_per_minute = cfg.alarm_max_events_per_minute
        self.events: deque[float] = deque()
        self.suppressed = 0
        self.crossed: list[str] = []  # statistics that crossed their threshold at the last update
        self.settle = cfg.divergence_window  # s after a (re)start before the tests are armed
        self.armed_at: float | None = None

    def update(self, t: float, inn: Any) -> list[dict[str, Any]]:
        if self.armed_at is None:
            self.armed_at = t + self.settle
        if t < self.armed_at:
            self.crossed = []
            return []
        values = {self.channel[m]: (float(nu / sd), float(nu)) for m, nu, sd in zip(inn.names, inn.nu, inn.sd,
                                                                                   strict=True)}
        for j, name in enumerate(self.aug):
            dx, sd = inn.dx[self.offset + j], inn.dx_sd[self.offset + j]
            values[name] = (float(dx / sd) if sd > 0 else 0.0, float(dx))
        out = []
        self.crossed = []
        for a in self.detector.update(t, values):
            name = a["statistic"]
            self.crossed.append(name)
            if name not in self.last and self._allowed(t):
                kind = "parameter" if name in self.aug else "channel"
                size = a["sum"] if kind == "parameter" else a["mean"]
                out.append({"alarm": f"change:{name}", "event": "raised", "t": t, "source": "change",
                            "channel": name, "kind": kind, "onset": a["onset"], "size": size,
                            "direction": a["direction"], "statistic": a["cusum"], "threshold": a["threshold"]})
            self.last[name] = t
        return out

    def _allowed(self, t: float) -> bool:
        while self.events and self.events[0] < t - 60.0:
            self.events.popleft()
        if len(self.events) >= self.max_per_minute:
            self.suppressed += 1
            return False
        self.events.append(t)
        return True

    def clear_quiet(self, t: float) -> list[dict[str, Any]]:
        quiet = [n for n, t_last in self.last.items() if t - t_last >= self.CLEAR_AFTER]
        for n in quiet:
            del self.last[n]
        return [{"alarm": f"change:{n}", "event": "cleared", "t": t, "source": "change", "channel": n}
                for n in quiet]

    def hold(self, t: float) -> None:
        """The filter diverged and restarts at ``t``: raised alarms count as crossing again (they do
        not clear while a persistent fault keeps the filter from converging)."""
        for name in self.last:
            self.last[name] = t

    def statistics(self) -> dict[str, float]:
        """``cusum.<statistic>``: each CUSUM's current sum (in σ units; it alarms above ``threshold``)."""
        return {f"cusum.{n}": v for n, v in self.detector.statistics().items()}

    def reset(self, t: float | None = None, settle: float | None = None) -> None:
        """A (re)start of the filter: the tests re-arm after the settling time from the next update,
        or ``settle`` s after rig time ``t`` when given."""
        self.detector.reset()
        self.armed_at = None if t is None or settle is None else t + settle

    def active(self) -> list[str]:
        return [f"change:{n}" for n in self.last]

    def snapshot(self) -> dict[str, Any]:
        """The CUSUM sums and the alarm timers (JSON; :meth:`restore` puts them back)."""
        return {"rate": self.rate, "detector": self.detector.state(), "last": dict(self.last),
                "events": list(self.events), "suppressed": self.suppressed, "crossed": list(self.crossed),
                "armed_at": self.armed_at}

    def restore(self, snap: dict[str, Any]) -> None:
        """A :meth:`snapshot` of change alarms over the same statistics (``ValueError`` else)."""
        self.detector.restore(snap["detector"])
        self.last = {str(k): float(v) for k, v in snap["last"].items()}
        self.events = deque(float(t) for t in snap["events"])
        self.suppressed, self.crossed, self.armed_at = int(snap["suppressed"]), list(snap["crossed"]), snap["armed_at"]
