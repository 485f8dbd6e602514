"""One twin of a fleet, in the process that runs it (a local child process or a Ray actor): the
:class:`TwinService`, resumed from the asset's last checkpoint when there is one, saving a new one
every ``[fleet] checkpoint_interval`` s.

A resumed twin says so in its retained birth on ``{p}/{a}/twin/status``:
``"restarted_from_checkpoint": {"saved_at", "rig_time", "gap_s", "age_s"}`` (the checkpoint's wall
time, the rig time of its last batch, and the seconds between it and the resumed start). A
checkpoint that does not fit (another mechanism or estimator) is reported as
``"checkpoint_rejected": REASON`` and the twin starts fresh. With a history store the same goes
into its ``events`` as a ``status`` row, ``{"state": "restarted", "history_last_t": T, …}`` (the birth
itself is not stored): the history's gap runs from ``T``, the rig time of the newest sample stored
before the restart, to the first sample of the restarted twin (its ``resync`` event). A store that
stays unreachable is no sign of a restart: that row says ``"state": "checkpoint_unavailable"``.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from ..storage.checkpoint.state import Checkpointer, apply
from ..storage.checkpoint.store import BadRow, CheckpointStore
from ..twin.heap import freeze_startup
from ..twin.protocol import encode
from ..twin.redaction import redact
from ..twin.service import TwinService
from ..twin.worker_guard import EXIT_WORKER_DIED
from .config import AssetSpec, FleetSettings
from .fence import Fence

log = logging.getLogger("mbsd_twin.fleet")


class Member:
    """Build, resume and start one asset's twin (``start``); ``stop`` saves a last checkpoint.
    ``birth``: more fields of the twin's birth (the Ray node id)."""

    def __init__(self, spec: AssetSpec, settings: FleetSettings, birth: dict[str, Any] | None = None) -> None:
        self.spec, self.settings = spec, settings
        self.cfg = spec.twin_config(settings)
        self.svc = TwinService(self.cfg)
        self.store = CheckpointStore(settings.store)
        # ``on_exit(code)``: how this twin's process ends once fenced off (fence.py) or its worker died
        self.on_exit: Callable[[int], None] = _exit_process
        self.fence = Fence(self.svc, self.store, spec.id, (birth or {}).get("node_id"), lambda code: self.on_exit(code),
                           settings.checkpoint_interval)
        self.resumed: dict[str, Any] = {}
        self._resume()
        self.checkpointer = Checkpointer(lambda: self.svc.core, self.store, spec.id, self.cfg.config_hash(),
                                         settings.checkpoint_interval, self.svc.counts)
        self.checkpointer.on_lease_lost = self.fence.lost
        self.svc.ticks.append(self._tick)
        self.svc.on_own_status = self.fence.birth  # a hint only: the store decides (fence.py)
        self.svc.on_worker_death = lambda reason: self.on_exit(EXIT_WORKER_DIED)  # mute is worse than restarted
        self.svc.birth_extra.update({"pid": os.getpid(), "started_at": self.fence.started_at, **(birth or {}),
                                     **self.resumed})
        if self.resumed and self.svc.history is not None:  # the restart and its gap into the history store
            self.svc.history.offer(self.svc.topics.twin("status"), encode(
                {"state": "restarted" if self.found else "checkpoint_unavailable", "asset": spec.id,
                 "instance": self.svc.instance, "history_last_t": self._history_last_t(), **self.svc.birth_extra}))

    def _resume(self) -> None:
        """Load and apply the asset's checkpoint: ``found`` when there was one (a restart), and
        ``resumed`` says what came of it. An unreachable store is tried three times, 0.5 s apart."""
        self.found = False
        for attempt in range(3):
            try:
                if self.fence.generation is None:  # the lease first: the checkpoint is then this instance's
                    self.fence.take()
                cp = self.store.load(self.spec.id)
                break
            except BadRow as exc:  # a tampered or corrupt row: no retry
                self.found = True
                self._reject(str(exc), None)
                return
            except Exception as exc:  # an unreachable store: start fresh, say why
                if attempt == 2:
                    self.resumed = {"checkpoint_rejected": redact(str(exc), self.settings.store)}
                    log.error("%s: checkpoint store unreachable (%s); starting fresh", self.spec.id,
                              self.resumed["checkpoint_rejected"])
                    return
                time.sleep(0.5)
        if cp is None:
            return
        self.found = True
        try:
            apply(self.svc.core, cp.state)
        except Exception as exc:  # a row that does not fit, or a tampered one (storage/checkpoint/check.py)
            self.svc.core = type(self.svc.core)(self.cfg.core, self.svc.mech, self.svc.recorder)
            self._reject(f"{type(exc).__name__}: {exc}", cp.saved_at)
            return
        now = time.time()
        self.resumed = {"restarted_from_checkpoint": {"saved_at": cp.saved_at, "rig_time": cp.rig_time,
                                                      "gap_s": round(now - cp.saved_at, 3),
                                                      "config_hash": cp.config_hash}}
        log.info("%s: resumed from the checkpoint of %.3f (%.1f s ago, rig time %s)", self.spec.id,
                 cp.saved_at, now - cp.saved_at, cp.rig_time)

    def _reject(self, why: str, saved_at: float | None) -> None:
        """The checkpoint is not used: the twin starts fresh, says why (birth, history row, log) and
        counts it (``checkpoint_rejected`` in its health)."""
        why = redact(why[:500], self.settings.store)
        self.resumed = {"checkpoint_rejected": why}
        self.svc.counts["checkpoint_rejected"] += 1
        log.error("%s: checkpoint of %s not used (%s); starting fresh", self.spec.id, saved_at, why)

    def _history_last_t(self) -> float | None:
        """Rig time of the asset's newest stored sample: the history's gap starts there (the dead
        twin's unwritten queue, up to ``batch_interval`` before its checkpoint, is lost with it)."""
        try:
            return self.svc.history.store.last_time(self.spec.id)  # type: ignore[union-attr]
        except Exception as exc:  # an unreachable store: the writer spools; the gap start is unknown
            log.warning("%s: newest stored sample unknown (%s)", self.spec.id, exc)
            return None

    def _tick(self, now: float) -> None:
        """Worker tick: the lease (fence.py), then the checkpoint when due (only while held)."""
        self.fence.tick(now)
        if not self.svc.superseded and self.fence.generation is not None:
            self.checkpointer.generation = self.fence.generation
            self.checkpointer(now)

    def start(self) -> None:
        self.svc.start()

    def status(self) -> dict[str, Any]:
        return {"asset": self.spec.id, "pid": os.getpid(), "uptime_s": time.monotonic() - self.svc.t_started,
                "connected": self.svc.connected.is_set(), "checkpoints": self.svc.counts["checkpoints"],
                "checkpoint_failed": self.svc.counts["checkpoint_failed"], **self.resumed}

    def stop(self, save: bool = True) -> None:
        """``save``: a last checkpoint (not after a failure: the core may be mid-batch; the twin then
        resumes from its last periodic one, as after a process death)."""
        self.svc.stop()  # the worker has stopped: the core is quiet
        if save and not self.svc.superseded and self.fence.generation is not None:  # else: not ours to write
            self.checkpointer.generation = self.fence.generation
            self.checkpointer.save()
        self.store.close()


def _exit_process(code: int) -> None:
    """The twin stopped publishing — its worker thread died (:mod:`.worker_guard`,
    ``EXIT_WORKER_DIED``: its will tells the broker and the fleet it is offline) or a newer instance
    holds the asset's lease (``EXIT_SUPERSEDED``) —: end this process at once with a non-zero status,
    so its supervisor (the local fleet, Ray) starts it again from the asset's last checkpoint."""
    logging.shutdown()  # flush the line saying why
    os._exit(code)


def run_process(spec: AssetSpec, settings: FleetSettings) -> None:
    """The entry point of a local fleet child: serve until SIGTERM/SIGINT."""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s [{spec.id}] %(name)s: %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    m = Member(spec, settings)
    m.start()
    freeze_startup()  # heap.py: no seconds of collecting the start-up's heap at each full collection and at exit
    while not stop.wait(0.5):
        pass
    m.stop()
