"""The dashboard's view of the history store: any stored time range of an asset's channels,
read-only from the twin's configured store (docs/history.md), downsampled while it is read.

``/dashboard/api/history`` — the asset's stored channels with their units (``units``: channel →
unit, '' when unknown), the rig-time span of its blocks and the request bounds;
``/dashboard/api/history?from=…&to=…&channel=a,b[&points=N]`` — each channel in [from, to] (rig
time in s or ISO 8601, as ``twin history --from/--to``; either may be left out).
The range is clamped to what the requested channels hold, a channel named twice is read once, and a
channel of more than ``points`` samples (default and bound ``[dashboard] history_points``, 2000)
comes as ``points`` equal time buckets over the clamped range, each with its first sample's time,
the mean, min and max of its values (NaN ignored) and the mean σ: an hour of 1 kHz plots as 2000
points with the min/max envelope, so no spike is lost. Fewer samples come as they are (min = max =
value). A large range is streamed through :mod:`mbsd_twin.storage.history.buckets` (PostgreSQL reduces
whole blocks itself), so a request's memory does not grow with its range.

A request beyond a bound — more than ``history_channels`` distinct channels, ``points`` above
``history_points``, a range of more than ``history_samples`` stored samples — is refused with 400
and JSON naming the parameter and the bound (``{"error", "parameter", "bound"}``).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

from ..storage.history.backends import open_store
from ..storage.history.export import ExportError, parse_time
from ..storage.history.stores import StoreError
from ..twin.config.sections import DashboardConfig, HistoryConfig
from .figures import channel_units
from .guard import Reply, ReplyCache, json_reply

MAX_POINTS = 2000  # the default of [dashboard] history_points
RAW_MAX = 262_144  # a channel whose range reads at most this many stored samples is read whole


class RequestError(Exception):
    """A bad or too large request: 400 with the parameter (and the bound it is beyond)."""

    def __init__(self, message: str, parameter: str, bound: float | None = None) -> None:
        super().__init__(message)
        self.parameter, self.bound = parameter, bound

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": str(self), "parameter": self.parameter}
        return out if self.bound is None else {**out, "bound": self.bound}


def downsample(t: np.ndarray, value: np.ndarray, sigma: np.ndarray, t_from: float, t_to: float,
               points: int) -> dict[str, list[float]]:
    """``points`` equal time buckets of [t_from, t_to] (the last one closed): first time, mean, min,
    max of the values and mean σ of each non-empty bucket; the samples as they are when they fit."""
    if len(t) <= points:
        v = value.tolist()
        return {"t": t.tolist(), "value": v, "min": v, "max": v, "sigma": sigma.tolist()}
    edges = np.linspace(t_from, t_to, points + 1)
    starts = np.unique(np.searchsorted(t, edges[:-1], side="left"))
    starts = starts[starts < len(t)]
    finite = np.isfinite(value)
    count = np.add.reduceat(finite.astype(float), starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.add.reduceat(np.where(finite, value, 0.0), starts) / count
        s_ok = np.isfinite(sigma)
        s_mean = np.add.reduceat(np.where(s_ok, sigma, 0.0), starts) / np.add.reduceat(s_ok.astype(float), starts)
    return {"t": t[starts].tolist(), "value": mean.tolist(), "min": np.fmin.reduceat(value, starts).tolist(),
            "max": np.fmax.reduceat(value, starts).tolist(), "sigma": s_mean.tolist()}


@dataclass(frozen=True)
class Request:
    t_from: float  # as asked (-inf / inf when left out)
    t_to: float
    channels: tuple[str, ...]  # distinct, in the order first named
    points: int


def parse_request(q: dict[str, list[str]], limits: DashboardConfig) -> Request | None:
    """The request's range, channels and points, checked against the bounds (no store needed);
    None for the overview (no range and no channel)."""
    if not ({"from", "to", "channel"} & q.keys()):
        return None
    try:
        t_from = parse_time(q.get("from", ["-inf"])[0], "from")
        t_to = parse_time(q.get("to", ["inf"])[0], "to")
    except ExportError as exc:
        raise RequestError(str(exc), "from" if str(exc).startswith("from") else "to") from None
    if math.isnan(t_from) or math.isnan(t_to) or t_to <= t_from:
        raise RequestError(f"from {t_from!r} and to {t_to!r}: expected from before to", "from")
    try:
        points = int(q.get("points", [str(limits.history_points)])[0])
    except ValueError:
        raise RequestError(f"points {q['points'][0][:40]!r}: expected an integer", "points") from None
    if not 1 <= points <= limits.history_points:
        raise RequestError(f"points {points}: expected 1 to {limits.history_points} ([dashboard] history_points)",
                           "points", limits.history_points)
    channels = tuple(dict.fromkeys(c for spec in q.get("channel", []) for c in spec.split(",") if c))
    if not channels:
        raise RequestError("channel (none given): name one or more stored channels", "channel")
    if len(channels) > limits.history_channels:
        raise RequestError(f"channel: {len(channels)} distinct channels, at most {limits.history_channels} "
                           "per request ([dashboard] history_channels)", "channel", limits.history_channels)
    return Request(t_from, t_to, channels, points)


class HistoryView:
    """Read-only queries of the configured history store for the dashboard's routes: its own
    connection (never one the twin's worker or writer uses), one request read at a time."""

    def __init__(self, cfg: HistoryConfig, asset: str, limits: DashboardConfig | None = None,
                 units: dict[str, str] | None = None) -> None:
        self.asset = asset
        self.units = units or {}  # the twin's units by output, input, parameter and channel name
        self.limits = limits or DashboardConfig()
        self.store = open_store(cfg.backend, cfg.path, cfg.dsn, cfg.timeout, create=False)
        self._lock = threading.Lock()  # one connection, used by one HTTP thread at a time
        self.cache = ReplyCache(self.limits.cache_entries)

    def reply(self, path: str) -> Reply:
        """400 for a bad request or one beyond a bound (naming the parameter), 503 when the store
        cannot be read or another request is being read for longer than ``history_wait``."""
        try:
            req = parse_request(parse_qs(urlsplit(path).query), self.limits)
            if not self._lock.acquire(timeout=self.limits.history_wait):
                return json_reply(503, {"error": f"history busy: another request has been read for more than "
                                                 f"{self.limits.history_wait:g} s ([dashboard] history_wait)"},
                                  {"Retry-After": "1"})
            try:
                return json_reply(200, self.overview()) if req is None else self.range(req)
            finally:
                self._lock.release()
        except RequestError as exc:
            return json_reply(400, exc.body())
        except StoreError as exc:
            return json_reply(503, {"error": str(exc)})

    def overview(self) -> dict[str, Any]:
        channels = self.store.channels(self.asset)
        span = self.store.span(self.asset)
        lim = self.limits
        return {"asset": self.asset, "channels": channels, "units": channel_units(channels, self.units), "span": span,
                "max_points": lim.history_points,
                "bounds": {"points": lim.history_points, "channels": lim.history_channels,
                           "samples": lim.history_samples}}

    def _clamp(self, req: Request) -> tuple[float, float]:
        known = self.store.channels(self.asset)
        unknown = [c for c in req.channels if c not in known]
        if unknown:
            raise RequestError(f"channel {', '.join(repr(c[:100]) for c in unknown[:5])}: asset {self.asset!r} "
                               f"has {', '.join(known) or 'no stored channel'}", "channel")
        spans = [s for s in (self.store.channel_span(self.asset, c) for c in req.channels) if s is not None]
        if not spans:
            return req.t_from, req.t_to
        return max(req.t_from, min(s[0] for s in spans)), min(req.t_to, max(s[1] for s in spans))

    def range(self, req: Request) -> Reply:
        t_from, t_to = self._clamp(req)
        stored = t_from <= t_to and math.isfinite(t_from) and math.isfinite(t_to)
        totals = {c: self.store.range_total(self.asset, c, t_from, t_to) if stored else 0 for c in req.channels}
        if sum(totals.values()) > self.limits.history_samples:
            raise RequestError(f"from/to: [{t_from!r}, {t_to!r}] holds {sum(totals.values())} stored samples of "
                               f"{len(req.channels)} channel(s), above {self.limits.history_samples} "
                               "([dashboard] history_samples); ask a shorter range or fewer channels",
                               "from", self.limits.history_samples)
        key = (req.channels, t_from, t_to, req.points)
        cached = self.cache.get(key, lambda tag: tag == totals)
        if cached is None:
            out = {c: self._channel(c, t_from, t_to, req.points, totals[c]) if totals[c] else
                   {"n": 0, "t": [], "value": [], "min": [], "max": [], "sigma": []} for c in req.channels}
            cached = self.cache.put(key, totals, json_reply(200, out))
        head = json_reply(200, {"asset": self.asset, "from": t_from, "to": t_to, "points": req.points,
                                "requested": {"from": req.t_from, "to": req.t_to}})
        # the channels (cached per clamped range) spliced into this request's head
        return 200, head[1], head[2][:-1] + b',"channels":' + cached[2] + b"}", cached[3]

    def _channel(self, c: str, t_from: float, t_to: float, points: int, total: int) -> dict[str, Any]:
        if total > RAW_MAX:
            return self.store.downsample(self.asset, c, t_from, t_to, points)
        t, value, sigma = self.store.query(self.asset, c, t_from, t_to)
        return {"n": len(t), **downsample(t, value, sigma, t_from, t_to, points)}

    def close(self) -> None:
        self.store.close()
