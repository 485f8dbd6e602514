"""``mbsd-twin fleet serve``: one twin per ``[[asset]]`` of a fleet file, kept running.

:class:`Fleet` watches the file's mtime; a changed file is validated whole (:func:`load_fleet`)
before anything is applied — a bad edit is logged with every problem and ignored — then only the
assets added, removed or changed are started or stopped (the others keep running untouched).
Backends: :class:`LocalBackend` (one process per asset on this machine, restarted after
``restart_delay`` when it dies; or ``twins_per_process`` assets per process, :mod:`.shared`) and
:class:`~.ray_backend.RayBackend` (a Ray actor per asset, restarted by Ray). A restarted twin
resumes from its last checkpoint (:mod:`.member`).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from ..storage.checkpoint.store import CheckpointStore
from ..twin.protocol import Topics
from .config import AssetSpec, FleetConfig, FleetError, FleetSettings, load_fleet
from .member import run_process
from .restarts import Restarts, revive
from .shared.pool import Pool, end_process
from .status import FleetStatus

log = logging.getLogger("mbsd_twin.fleet")


class Backend(Protocol):
    name: str  # "local" or "ray" (in the fleet status)

    def start(self, spec: AssetSpec, settings: FleetSettings) -> None: ...
    def stop(self, asset: str) -> None: ...
    def check(self) -> None: ...
    def dead(self) -> dict[str, bool]: ...
    def pid(self, asset: str) -> int | None: ...
    def status(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


@dataclass
class _Child:
    spec: AssetSpec
    settings: FleetSettings
    proc: Any
    r: Restarts


class LocalBackend:
    """One process per asset (``fork`` where available: the engine's modules are already imported);
    a dead one is started again as :class:`~.restarts.Restarts` says. With ``[fleet]
    twins_per_process`` > 1 the assets share processes instead (:class:`~.shared.pool.Pool`)."""

    name = "local"

    def __init__(self) -> None:
        methods = mp.get_all_start_methods()
        self.ctx: Any = mp.get_context("fork" if "fork" in methods else "spawn")
        self.children: dict[str, _Child] = {}
        self.pool = Pool(self.ctx)

    def _spawn(self, spec: AssetSpec, settings: FleetSettings) -> Any:
        p = self.ctx.Process(target=run_process, args=(spec, settings), name=f"twin-{spec.id}")
        p.start()
        return p

    def start(self, spec: AssetSpec, settings: FleetSettings) -> None:
        if settings.twins_per_process > 1:
            self.pool.start(spec, settings)
            return
        r = Restarts(settings.restart_delay, settings.max_restarts)
        self.children[spec.id] = _Child(spec, settings, self._spawn(spec, settings), r)

    def stop(self, asset: str) -> None:
        if asset in self.pool:
            self.pool.stop(asset)
            return
        c = self.children.pop(asset, None)
        if c is not None:
            end_process(c.proc, f"twin {asset}")

    def check(self) -> None:
        now = time.monotonic()
        self.pool.check(now)
        for aid, c in self.children.items():
            if not c.proc.is_alive():
                revive(c.r, now, f"twin {aid}", f"pid {c.proc.pid}, exit code {c.proc.exitcode}",
                       partial(self._respawn, c))

    def _respawn(self, c: _Child) -> str:
        c.proc = self._spawn(c.spec, c.settings)
        return f"pid {c.proc.pid}"

    def dead(self) -> dict[str, bool]:
        """The assets whose twin is not running: True when it will not be restarted again."""
        return {**{aid: c.r.given_up for aid, c in self.children.items() if not c.proc.is_alive()},
                **self.pool.dead()}

    def pid(self, asset: str) -> int | None:
        """The pid of the asset's process while it is alive (what its lease must name)."""
        if asset in self.pool:
            return self.pool.pid(asset)
        c = self.children.get(asset)
        return c.proc.pid if c is not None and c.proc.is_alive() else None

    def status(self) -> dict[str, Any]:
        return {**{aid: {"pid": c.proc.pid, "alive": c.proc.is_alive(), "restarts": c.r.restarts}
                   for aid, c in self.children.items()}, **self.pool.status()}

    def close(self) -> None:
        self.pool.close()
        for aid in list(self.children):
            self.stop(aid)


class Fleet:
    """The assets of the fleet file, run by ``backend``; ``poll`` once per ``watch_interval``. The
    fleet's retained status topic (:mod:`.status`) follows every start, stop and death."""

    def __init__(self, path: str, backend: Backend) -> None:
        self.path, self.backend = path, backend
        self.cfg: FleetConfig = load_fleet(path)  # a bad file at start is fatal (FleetError)
        self.mtime = os.stat(path).st_mtime_ns
        self.rejected: str = ""  # the last bad edit's problems ("" none)
        broker, topic = self.cfg.status_target()
        self.status = FleetStatus(broker, topic, backend.name, self.cfg.settings.status_interval, self.cfg.path,
                                  self.cfg.settings.store, backend.pid if backend.name == "local" else None)
        for spec in self.cfg.assets:
            self._start(spec, self.cfg.settings)

    def _start(self, spec: AssetSpec, settings: FleetSettings) -> None:
        self.status.watch(spec.id, Topics(spec.twin_config(settings).core.base).twin("status"))
        self.backend.start(spec, settings)

    def _stop(self, asset: str) -> None:
        self.backend.stop(asset)
        self.status.stopped(asset)

    def poll(self) -> None:
        self.backend.check()
        self.status.dead(self.backend.dead())
        self.status.tick(time.monotonic())
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except OSError as exc:
            self._reject(f"{self.path}: {exc}")
            return
        if mtime == self.mtime:
            return
        self.mtime = mtime
        try:
            new = load_fleet(self.path)
        except FleetError as exc:
            self._reject(str(exc))
            return
        self.rejected = ""
        self.apply(new)

    def _reject(self, why: str) -> None:
        if why != self.rejected:
            log.error("fleet file edit ignored, the fleet keeps running as before:\n%s", why)
        self.rejected = why

    def apply(self, new: FleetConfig) -> None:
        old = self.cfg.by_id()
        want = new.by_id()
        for aid in old.keys() - want.keys():
            log.info("asset %s removed from %s: stopping its twin", aid, self.path)
            self._stop(aid)
        for aid, spec in want.items():
            if aid in old and old[aid] == spec and new.settings == self.cfg.settings:
                continue
            if aid in old:
                log.info("asset %s changed in %s: restarting its twin", aid, self.path)
                self._stop(aid)
            else:
                log.info("asset %s added to %s: starting its twin", aid, self.path)
            self._start(spec, new.settings)
        if new.settings.store != self.cfg.settings.store:
            self.status.witness.store = CheckpointStore(new.settings.store)
        self.cfg = new

    def run(self, stop: Any) -> None:
        """Poll until ``stop`` (a threading.Event) is set; then stop every twin."""
        try:
            while not stop.is_set():
                self.status.loop(min(self.cfg.settings.watch_interval, 0.5))  # the status topic's I/O
                if not stop.is_set():
                    self.poll()
        finally:
            self.backend.close()
            self.status.close()
