"""The live dashboard: a web page served by the twin service's HTTP server.

``mount(service)`` (called by :class:`~mbsd_twin.twin.service.TwinService` when its HTTP server is
on) adds a :class:`~.store.Store` tap and the routes:

- ``/`` → redirect to ``/dashboard/``; ``/dashboard/`` the page; ``/dashboard/static/…`` its
  hand-written JS/CSS (package data, no CDN);
- ``/dashboard/api/config``: channels, alarm thresholds with their minimum duration, units of every
  output, the mechanism sketch, the measured channels (NIS degrees of freedom), the augmented
  unknowns, the charts' time window, whether a history store is configured (``history``), and the
  controls offered (``controls``: ``reset`` and ``set_param`` where ``[commands] enabled`` has them)
  with the parameters ``set_param`` may change;
- ``/dashboard/api/data?since=CURSOR``: new rows, health, the alarm events and re-initialisations
  (rig time and reason) of the charts' time window, the mechanism drawn in its simulated pose and
  in the pose of the measured angle, the bounding box of the mechanism's motion so far
  (``bounds``), the mean NIS over the time window with its χ² 95 % band
  (:func:`.figures.nis_band`) and the CUSUM threshold;
- ``/dashboard/api/history``: with ``[history]`` configured, any stored time range of the asset's
  channels, read-only, clamped to what is stored, downsampled while it is read and refused beyond
  the ``[dashboard]`` bounds (:mod:`.history`); 404 without a history store;
- POST ``/dashboard/api/cmd/<name>`` (only when a control is offered): the command relayed over
  MQTT as the requesting user (:mod:`.commands`).

The read routes (``config``, ``data``, ``history``) are rate-limited per client address
(``[dashboard] rate``/``burst``: 429 beyond) and their replies cached (:mod:`.guard`): a ``data``
reply is reused for its cursor while the store has not changed (or for ``data_cache_s``), a
``history`` reply while its range holds the same stored samples. No read route holds the store's
lock (the one the twin's worker takes in the tap) longer than it takes to copy the new rows.

Poses: the synchronised body's angle (simulated or measured) is imposed on a private
:class:`~mbsd_twin.Simulator` (``set_configuration``) and every body follows from the constraints,
which fixes the pose of a one-degree-of-freedom mechanism such as the slider crank.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..model.model import Mechanism
from ..twin.metrics import request_client
from ..viz.sketch import Pose, Sketch
from .commands import CommandRelay
from .figures import base_units, cusum_threshold, measured_channels, nis_band, unit_of
from .guard import RateLimit, ReplyCache, json_reply
from .history import HistoryView
from .store import Store

__all__ = ["Dashboard", "PoseSolver", "Store", "mount"]

STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "estimator.js": "text/javascript; charset=utf-8", "controls.js": "text/javascript; charset=utf-8",
          "history.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
Reply = tuple[int, str, bytes, dict[str, str]]
WINDOW_S = 20.0  # s of rig time the charts show (and the NIS mean is taken over)
SINCE_LIMIT = 5000  # rows one data reply holds at most (the newest)


def _static(name: str) -> bytes:
    return (resources.files(__package__) / "static" / name).read_bytes()


def _json(obj: Any) -> Reply:
    return json_reply(200, obj)


class PoseSolver:
    """Body poses with the body ``body`` at a given angle (assembled by the engine)."""

    def __init__(self, mech: Mechanism, body: str) -> None:
        self.mech, self.body = mech, body
        self.bodies = [b.name for b in mech.bodies]
        self._sim: Any = None
        self._lock = threading.Lock()

    def __call__(self, angle: float) -> dict[str, Pose] | None:
        if not math.isfinite(angle):
            return None
        from ..errors import MbsdError
        from ..simulation.simulator import Simulator

        with self._lock:
            try:
                if self._sim is None:
                    self._sim = Simulator(self.mech)
                self._sim.set_configuration({f"{self.body}.theta": angle})
                o = self._sim.outputs()
            except (MbsdError, FloatingPointError, ValueError):
                self._sim = None
                return None
        return {b: (o[f"{b}.x"], o[f"{b}.y"], o[f"{b}.theta"]) for b in self.bodies}


class Dashboard:
    def __init__(self, service: Any, history: int = 6000) -> None:
        core = service.cfg.core
        self.cfg = core
        self.mech: Mechanism = service.mech
        self._units = base_units(self.mech, core.compare)
        self.store = Store(list(core.compare), maxlen=history, estimates=core.estimator == "ekf", units=self._units,
                           alarms=core.alarms)
        self.sketch = Sketch.from_mechanism(self.mech)
        self.body = core.compare[core.resync_angle].split(".")[0]
        self.poses = PoseSolver(self.mech, self.body)
        self.dof = len(measured_channels(core)) if core.estimator == "ekf" else 0
        self._bounds: list[float] | None = None
        self._motion: list[float] | None = None  # bounding box of every pose drawn so far
        cmds = service.cfg.commands
        self.relay = CommandRelay(service.cfg.broker, service.topics, cmds.enabled, service.cfg.source)
        self._threshold: dict[float | None, float | None] = {}  # CUSUM threshold by sample interval
        h, lim = service.cfg.history, service.cfg.dashboard
        self.limits = lim
        self.history = HistoryView(h, core.asset, lim, self._units) if h.enabled else None
        self.rate = RateLimit(lim.rate, lim.burst)
        self.data_cache = ReplyCache(lim.cache_entries)

    def routes(self) -> dict[str, Any]:
        return {"/": self.root, "/dashboard": self.page, "/dashboard/static": self.static,
                "/dashboard/api/config": self.limited(self.config), "/dashboard/api/data": self.limited(self.data),
                "/dashboard/api/history": self.limited(self.history_range)}

    def limited(self, route: Callable[[str], Reply]) -> Callable[[str], Reply]:
        """``route`` behind the per-client rate limit (429 at once beyond it)."""
        def guarded(path: str) -> Reply:
            wait = self.rate.wait(request_client())
            return self.rate.refuse(wait) if wait > 0 else route(path)
        return guarded

    # ---------------------------------------------------------------- routes
    def root(self, path: str) -> Reply:
        if urlsplit(path).path != "/":
            return 404, "text/plain", b"not found", {}
        return 302, "text/plain", b"see /dashboard/", {"Location": "/dashboard/"}

    def page(self, path: str) -> Reply:
        p = urlsplit(path).path
        if p == "/dashboard":
            return 302, "text/plain", b"see /dashboard/", {"Location": "/dashboard/"}
        if p not in ("/dashboard/", "/dashboard/index.html"):
            return 404, "text/plain", b"not found", {}
        return 200, STATIC["index.html"], _static("index.html"), {"Cache-Control": "no-store"}

    def static(self, path: str) -> Reply:
        name = urlsplit(path).path.rsplit("/", 1)[-1]
        if name not in STATIC:
            return 404, "text/plain", b"not found", {}
        return 200, STATIC[name], _static(name), {"Cache-Control": "no-store"}

    def config(self, path: str) -> Reply:
        c = self.cfg
        alarms = [{"name": a.name, "channel": a.channel, "source": a.source, "high": a.high, "low": a.low,
                   "min_duration": a.min_duration} for a in c.alarms]
        names = [*c.compare, *c.state_extra, *c.inputs.values()]
        units = self._units | {n: unit_of(n, self._units) for n in names}
        augment = [{"name": a.name, "unit": unit_of(a.name, self._units)} for a in c.augment] \
            if c.estimator == "ekf" else []
        rest = self.sketch.world({b.name: (b.position[0], b.position[1], b.angle) for b in self.mech.bodies})
        return _json({"asset": c.asset, "base": c.base, "model": self.mech.name, "compare": c.compare,
                      "angle": c.resync_angle, "speed": c.resync_speed, "alarms": alarms, "units": units,
                      "resync_bounds": c.resync_bounds, "body": self.body, "sketch": rest,
                      "bounds": self.bounds(rest), "estimator": c.estimator, "inputs": c.inputs,
                      "measured": measured_channels(c) if self.dof else [], "nis_dof": self.dof,
                      "augment": augment, "window_s": WINDOW_S, "history": self.history is not None,
                      "controls": self.relay.offered,
                      "parameters": self.parameters() if "set_param" in self.relay.offered else []})

    def parameters(self) -> list[dict[str, Any]]:
        """What ``set_param`` may change: every model parameter and the tunable solver settings."""
        from ..simulation.ports import TUNABLE, model_parameters

        params = [{"name": n, "unit": p.unit, "value": p.value} for n, (p, _) in model_parameters(self.mech).items()]
        return params + [{"name": n, "unit": u, "value": None} for n, (u, _) in TUNABLE.items()]

    def bounds(self, rest: dict[str, Any]) -> list[float]:
        """[x0, x1, y0, y1] of the drawing over a full turn of the synchronised body (cached)."""
        if self._bounds is None:
            pts = [p for b in rest["bodies"] for p in b["pts"]] + rest["pivots"]
            for k in range(24):
                poses = self.poses(2 * math.pi * k / 24)
                if poses:
                    pts += [p for b in self.sketch.world(poses)["bodies"] for p in b["pts"]]
            self._bounds = self._box(pts)
        return self._bounds

    def _box(self, pts: list[Any], box: list[float] | None = None) -> list[float]:
        """[x0, x1, y0, y1] around ``pts`` (and ``box``) with a margin of a tenth of the sketch's scale."""
        m = 0.1 * self.sketch.scale
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        out = [min(xs) - m, max(xs) + m, min(ys) - m, max(ys) + m]
        if box is not None:
            out = [min(out[0], box[0]), max(out[1], box[1]), min(out[2], box[2]), max(out[3], box[3])]
        return out

    def motion_bounds(self, views: list[dict[str, Any] | None]) -> list[float] | None:
        """The bounding box of every pose drawn so far (the mechanism panel fits it)."""
        pts = [p for v in views if v for b in v["bodies"] for p in b["pts"]]
        if pts:
            self._motion = self._box(pts, self._motion)
        return self._motion

    def data(self, path: str) -> Reply:
        q = parse_qs(urlsplit(path).query)
        try:
            cursor = int(q.get("since", ["0"])[0])
        except ValueError:
            return 400, "text/plain", b"since must be an integer", {}
        # every cursor older than the rows a reply can hold gives the same reply: one cache entry
        version, now, total = self.store.version, time.monotonic(), self.store.total
        cursor = total - min(max(0, total - max(0, cursor)), len(self.store.rows), SINCE_LIMIT)
        hit = self.data_cache.get(cursor, lambda tag: tag[0] == version or now - tag[1] < self.limits.data_cache_s)
        if hit is not None:
            return hit
        return self.data_cache.put(cursor, (version, now), self._data(cursor))

    def _data(self, cursor: int) -> Reply:
        total, rows = self.store.since(cursor, SINCE_LIMIT)
        snap = self.store.snapshot(WINDOW_S)
        pose = self._pose(snap["latest"])
        bounds = self.motion_bounds([pose.get("sim"), pose.get("meas")] if pose else [])
        return _json({"cursor": total, "t0": self.store.t0, "columns": self.store.columns, "rows": rows,
                      **snap, "pose": pose, "bounds": bounds, **self.filter_figures()})

    def history_range(self, path: str) -> Reply:
        if self.history is None:
            return 404, "text/plain", b"no history store configured ([history] path or dsn)", {}
        return self.history.reply(path)

    def filter_figures(self) -> dict[str, Any]:
        """``nis``: mean NIS over the last ``WINDOW_S`` s of rows and its χ² 95 % band;
        ``cusum_threshold`` [σ]: where a change test alarms (None without the filter)."""
        if not self.dof:
            return {"nis": None, "cusum_threshold": None}
        return {"nis": {**nis_band(self.store.recent("est.nis", WINDOW_S), self.dof), "window_s": WINDOW_S},
                "cusum_threshold": self._cusum_threshold(self.store.sample_dt)}

    def _cusum_threshold(self, dt: float | None) -> float | None:
        if dt not in self._threshold:
            self._threshold[dt] = cusum_threshold(self.cfg, dt)
        return self._threshold[dt]

    def _pose(self, latest: dict[str, Any] | None) -> dict[str, Any] | None:
        if not latest:
            return None
        ch = self.cfg.resync_angle
        sim = latest.get("state", {}).get(ch)
        resid = latest.get("residuals", {}).get(ch)
        out: dict[str, Any] = {"t": latest.get("t")}
        for key, angle in (("sim", sim), ("meas", None if sim is None or resid is None else sim + resid)):
            poses = self.poses(float(angle)) if angle is not None else None
            out[key] = self.sketch.world(poses) if poses else None
        return out


def mount(service: Any) -> Dashboard:
    """Add the dashboard's tap and routes to a :class:`TwinService` (before ``start``)."""
    dash = Dashboard(service)
    service.taps.append(dash.store)
    service.http_routes.update(dash.routes())
    if dash.relay.offered:
        service.http_post_routes["/dashboard/api/cmd"] = dash.relay
    return dash
