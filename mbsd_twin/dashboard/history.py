"""The dashboard's view of the history store: any stored time range of an asset's channels,
read-only from the twin's configured store (docs/history.md), downsampled server-side.

``/dashboard/api/history`` — the asset's stored channels and the rig-time span of its blocks;
``/dashboard/api/history?from=…&to=…&channel=a,b[&points=N]`` — each channel in [from, to] (rig time
in s or ISO 8601, as ``twin history --from/--to``). A channel of more than ``points`` samples
(default 2000) comes as ``points`` equal time buckets over [from, to], each with its first sample's
time, the mean, min and max of its values (NaN ignored) and the mean σ: an hour of 1 kHz plots as
2000 points with the min/max envelope, so no spike is lost. Fewer samples come as they are (min = max
= value).
"""

from __future__ import annotations

import math
import threading
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

from ..twin.config import HistoryConfig
from ..twin.history.backends import open_store
from ..twin.history.export import ExportError, parse_time
from ..twin.history.stores import StoreError

MAX_POINTS = 2000


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


class HistoryView:
    """Read-only queries of the configured history store for the dashboard's routes."""

    def __init__(self, cfg: HistoryConfig, asset: str) -> None:
        self.asset = asset
        self.store = open_store(cfg.backend, cfg.path, cfg.dsn, cfg.timeout, create=False)
        self._lock = threading.Lock()  # one connection, used by one HTTP thread at a time

    def reply(self, path: str) -> tuple[int, Any]:
        """(HTTP status, JSON body): 400 for a bad request (naming the parameter), 503 when the
        store cannot be read."""
        q = parse_qs(urlsplit(path).query)
        try:
            with self._lock:
                if "from" not in q and "to" not in q:
                    return 200, self.overview()
                return 200, self.range(q)
        except ExportError as exc:
            return 400, {"error": str(exc)}
        except StoreError as exc:
            return 503, {"error": str(exc)}

    def overview(self) -> dict[str, Any]:
        channels = self.store.channels(self.asset)
        span = self.store.span(self.asset)
        return {"asset": self.asset, "channels": channels, "span": span, "max_points": MAX_POINTS}

    def range(self, q: dict[str, list[str]]) -> dict[str, Any]:
        t_from = parse_time(q.get("from", ["-inf"])[0], "from")
        t_to = parse_time(q.get("to", ["inf"])[0], "to")
        if not (math.isfinite(t_from) and math.isfinite(t_to)) or t_to <= t_from:
            raise ExportError(f"from {t_from!r} and to {t_to!r}: expected two finite times, from before to")
        try:
            points = int(q.get("points", [str(MAX_POINTS)])[0])
        except ValueError:
            raise ExportError(f"points {q['points'][0]!r}: expected an integer") from None
        if not 1 <= points <= MAX_POINTS:
            raise ExportError(f"points {points}: expected 1 to {MAX_POINTS}")
        wanted = [c for spec in q.get("channel", []) for c in spec.split(",") if c]
        known = self.store.channels(self.asset)
        unknown = [c for c in wanted if c not in known]
        if unknown or not wanted:
            raise ExportError(f"channel {', '.join(map(repr, unknown)) or '(none given)'}: asset {self.asset!r} "
                              f"has {', '.join(known) or 'no stored channel'}")
        out = {}
        for c in wanted:
            t, value, sigma = self.store.query(self.asset, c, t_from, t_to)
            out[c] = {"n": len(t), **downsample(t, value, sigma, t_from, t_to, points)}
        return {"asset": self.asset, "from": t_from, "to": t_to, "points": points, "channels": out}

    def close(self) -> None:
        self.store.close()
