"""Threshold alarms with hysteresis, a minimum duration and an event-rate limit (all in rig time);
change and drift alarms from the filter.

Pairing (every alarm a consumer sees comes as raised … cleared): the rate limit
(``alarm_max_events_per_minute``) applies to raises only. A raise it refuses is counted
(``suppressed``, published as ``health.counters.alarm_suppressed``), is not published and leaves
the alarm clear: it never becomes active and is never cleared; the next attempt (a threshold
alarm's condition holding for another ``min_duration``, a test crossing again) is raised once the
budget allows. A clear is never rate-limited: an alarm whose raise was published always gets its
clear, and clears do not use up the budget."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .batchpath import change_statistics, change_values
from .config.sections import AlarmConfig, CoreConfig


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
        """``values[source][channel]`` at rig time ``t`` (an alarm whose value is missing keeps its
        state and timers)."""
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
            if not st.active:
                if len(st.events) >= self.max_per_minute:
                    self.suppressed += 1  # flooding: stay clear (never cleared either), count it
                    continue
                st.events.append(t)  # the budget counts raises; clears always go out
            st.active = not st.active
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
    """Change and drift alarms from the filter. Change: a CUSUM on each measured channel's
    normalised innovation and on each augmented unknown's normalised correction
    (:mod:`mbsd_twin.estimation.change`), tuned by ``change_mtbfa`` and ``change_shift``; the alarm
    names the channel or unknown, the estimated onset time and the size of the change (channel:
    mean innovation since onset, in its unit; unknown: the estimate's change since onset). Drift:
    the slow-drift test of each augmented unknown with a random-walk rate (:mod:`.drift`; alarm
    ``drift:<unknown>``). The tests are armed ``divergence_window`` s after each (re)start of the
    filter, once its prior has settled; the estimates (and their rates of change over
    ``estimate_rate_window``) are offered to the threshold alarms from then on. An alarm stays
    raised while its test keeps crossing, or the filter keeps diverging, and clears after
    ``CLEAR_AFTER`` s of rig time without either; raises are rate-limited (one budget for all
    change and drift alarms; see the module doc for the pairing rules)."""

    CLEAR_AFTER = 2.0

    def __init__(self, cfg: CoreConfig, rate: float, tracker: Any, fast: bool = True) -> None:
        from ..estimation.change import ChangeDetector
        from .drift import DriftTest, RateWindow

        est = getattr(tracker, "est", None)
        self.channel = {p: c for c, p in cfg.compare.items()}  # model output → channel
        self.aug = [a.name for a in est.aug] if est is not None else []
        self.offset = 2 * est.d if est is not None else 0
        names = [self.channel[m] for m in (est.meas if est is not None else [])] + self.aug
        self.rate = rate  # samples/s: tunes the thresholds
        self.detector = ChangeDetector(names, cfg.change_mtbfa, rate, cfg.change_shift)
        on = {a.name for a in cfg.augment if a.drift and a.rate > 0}
        self.drift = {a.name: DriftTest(a.name, a.rate, cfg.drift_window, cfg.change_mtbfa, cfg.change_shift)
                      for a in (est.aug if est is not None else []) if a.name in on}
        rated = {a.channel for a in cfg.alarms if a.source == "estimate"}  # only what an alarm reads
        self.rates = {n: RateWindow(cfg.estimate_rate_window) for n in self.aug if f"{n}.rate" in rated}
        self.drifted: list[tuple[str, dict[str, Any]]] = []  # drift crossings of the current sample
        self.last: dict[str, float] = {}  # active (published) alarm → rig time of its last crossing
        self.max_per_minute = cfg.alarm_max_events_per_minute
        self.events: deque[float] = deque()
        self.suppressed = 0
        self.crossed: list[str] = []  # statistics that crossed their threshold at the last update
        self.settle = cfg.divergence_window  # s after a (re)start before the tests are armed
        self.armed_at: float | None = None
        self.fast = fast  # :mod:`.batchpath` (False: the reference path)

    def _armed(self, t: float) -> bool:
        if self.armed_at is None:
            self.armed_at = t + self.settle
        return t >= self.armed_at

    def observe(self, t: float, filt: dict[str, float]) -> dict[str, float]:
        """The estimates at ``t`` (``filt``: the row's filter figures, ``<name>`` and ``<name>.sd``)
        into the drift tests and rate windows; for the threshold alarms (source ``estimate``) each
        unknown's value and ``<name>.rate`` [unit/s] once defined. Nothing before the tests are armed.
        A drift crossing waits in ``drifted`` for the next :meth:`update` (a correction the gap gate
        keeps from the change tests has none: dropping it there lost the crossing, and the test had
        restarted, so a ramp seen at hold 20 alarmed one crossing later, at 0.102 N·m)."""
        if not self._armed(t):
            return {}
        out: dict[str, float] = {}
        for name in self.aug:
            v = filt.get(name)
            if v is None or not math.isfinite(v):
                continue
            out[name] = v
            rw = self.rates.get(name)
            r = rw.update(t, v) if rw is not None else None
            if r is not None:
                out[f"{name}.rate"] = r
            test = self.drift.get(name)
            a = test.update(t, v, filt.get(f"{name}.sd", math.nan)) if test else None
            if a:
                self.drifted.append((name, a))
        return out

    def update(self, t: float, inn: Any) -> list[dict[str, Any]]:
        """Change tests at ``t`` (after :meth:`observe` of the same sample); the raise events."""
        if not self._armed(t):
            self.crossed = []
            return []
        values = (change_values(self, inn) if self.fast else None) or self._values(inn)
        out = []
        self.crossed = []
        for a in self.detector.update(t, values):
            name = a["statistic"]
            self.crossed.append(name)
            kind = "parameter" if name in self.aug else "channel"
            if kind == "parameter" and name in self.drift:
                self.drift[name].reset()  # the filter re-opens the unknown: its estimate jumps
            out += self._raise(t, f"change:{name}", {
                "source": "change", "channel": name, "kind": kind, "onset": a["onset"],
                "size": a["sum"] if kind == "parameter" else a["mean"], "direction": a["direction"],
                "statistic": a["cusum"], "threshold": a["threshold"]})
        for name, a in self.drifted:
            out += self._raise(t, f"drift:{name}", {
                "source": "drift", "channel": name, "kind": "drift", "onset": a["onset"], "size": a["size"],
                "direction": a["direction"], "statistic": a["statistic"], "threshold": a["threshold"],
                "window": a["window"]})
        self.drifted = []
        return out

    def _values(self, inn: Any) -> dict[str, tuple[float, float]]:
        """Each statistic's (normalised, raw) value of the update ``inn`` (the reference path)."""
        values = {self.channel[m]: (float(nu / sd), float(nu)) for m, nu, sd in zip(inn.names, inn.nu, inn.sd,
                                                                                   strict=True)}
        for j, name in enumerate(self.aug):
            dx, sd = inn.dx[self.offset + j], inn.dx_sd[self.offset + j]
            values[name] = (float(dx / sd) if sd > 0 else 0.0, float(dx))
        return values

    def diverged(self, t: float, inn: Any) -> list[dict[str, Any]]:
        """The divergence test fired at ``t``: while the tests are armed that is a detection in its
        own right, raised as the change alarm of the channel with the largest normalised innovation
        at that sample (``divergence``: true). A sudden large fault (a rod 20 % heavier at
        38 rad/s: bearing-force innovations of 15 σ) pushes the window's NIS over its bound at its
        first sample, before a CUSUM can cross, and the re-initialisation would otherwise disarm
        the tests each time it recurs."""
        if inn is None or not len(inn.names) or self.armed_at is None or t < self.armed_at:
            return []
        z = [abs(float(nu / sd)) if sd > 0 else 0.0 for nu, sd in zip(inn.nu, inn.sd, strict=True)]
        j = max(range(len(z)), key=z.__getitem__)
        name = self.channel[inn.names[j]]
        nu = float(inn.nu[j])
        return self._raise(t, f"change:{name}", {
            "source": "change", "channel": name, "kind": "channel", "onset": t, "size": nu,
            "direction": "up" if nu > 0 else "down", "statistic": z[j], "threshold": self.detector.h,
            "divergence": True})

    def _raise(self, t: float, alarm: str, fields: dict[str, Any]) -> list[dict[str, Any]]:
        """A crossing: keeps an active alarm raised; raises a clear one when the budget allows
        (else counted in ``suppressed`` and left clear)."""
        if alarm in self.last:
            self.last[alarm] = t
            return []
        if not self._allowed(t):
            return []
        self.last[alarm] = t
        return [{"alarm": alarm, "event": "raised", "t": t, **fields}]

    def _allowed(self, t: float) -> bool:
        while self.events and self.events[0] < t - 60.0:
            self.events.popleft()
        if len(self.events) >= self.max_per_minute:
            self.suppressed += 1
            return False
        self.events.append(t)
        return True

    def clear_quiet(self, t: float) -> list[dict[str, Any]]:
        """Clears of the active alarms without a crossing for ``CLEAR_AFTER`` s (never rate-limited)."""
        quiet = [n for n, t_last in self.last.items() if t - t_last >= self.CLEAR_AFTER]
        for n in quiet:
            del self.last[n]
        return [{"alarm": n, "event": "cleared", "t": t, "source": n.split(":", 1)[0], "channel": n.split(":", 1)[1]}
                for n in quiet]

    def hold(self, t: float) -> None:
        """The filter diverged and restarts at ``t``: raised alarms count as crossing again (they do
        not clear while a persistent fault keeps the filter from converging)."""
        for name in self.last:
            self.last[name] = t

    def statistics(self) -> dict[str, float]:
        """``cusum.<statistic>``: each CUSUM's current sum, ``drift.<unknown>``: each drift test's (σ
        units; each alarms above its threshold)."""
        if self.fast:
            return change_statistics(self)
        return {f"cusum.{n}": v for n, v in self.detector.statistics().items()} | \
            {f"drift.{n}": d.value() for n, d in self.drift.items()}

    def reset(self, t: float | None = None, settle: float | None = None) -> None:
        """A (re)start of the filter: the tests re-arm after the settling time from the next update,
        the drift tests and rate windows start afresh; or, after a restart that kept the unknowns
        (their estimates go on), ``settle`` s after rig time ``t`` with the drift tests and rate
        windows going on (a lossy link's gaps must not keep a slow drift from being seen)."""
        self.detector.reset()
        kept = t is not None and settle is not None
        for d in () if kept else self.drift.values():
            d.reset()
        for r in () if kept else self.rates.values():
            r.reset()
        self.armed_at = t + settle if t is not None and settle is not None else None

    def active(self) -> list[str]:
        return list(self.last)

    def snapshot(self) -> dict[str, Any]:
        """The tests' sums, windows and the alarm timers (JSON; :meth:`restore` puts them back)."""
        return {"rate": self.rate, "detector": self.detector.state(), "last": dict(self.last),
                "events": list(self.events), "suppressed": self.suppressed, "crossed": list(self.crossed),
                "armed_at": self.armed_at, "drift": {n: d.state() for n, d in self.drift.items()},
                "rates": {n: r.state() for n, r in self.rates.items()}}

    def restore(self, snap: dict[str, Any]) -> None:
        """A :meth:`snapshot` of change alarms over the same statistics (``ValueError`` else). One
        without drift tests (checkpoint format 2) leaves them and the rate windows fresh; its alarm
        names without a kind are change alarms."""
        self.detector.restore(snap["detector"])
        self.last = {(str(k) if ":" in str(k) else f"change:{k}"): float(v) for k, v in snap["last"].items()}
        self.events = deque(float(t) for t in snap["events"])
        self.suppressed, self.crossed, self.armed_at = int(snap["suppressed"]), list(snap["crossed"]), snap["armed_at"]
        for n, st in snap.get("drift", {}).items():
            if n in self.drift:
                self.drift[n].restore(st)
        for n, st in snap.get("rates", {}).items():
            if n in self.rates:
                self.rates[n].restore(st)
