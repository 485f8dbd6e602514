"""The twin's worker never dies mute: a health message that cannot be built is replaced by a minimal
one saying why (:func:`fallback_health`), and a worker thread that died all the same (an exception
the loop's guards do not catch, e.g. ``SystemExit`` raised inside a library) is noticed by
:class:`WorkerWatch`, which calls its ``on_death``: ``twin serve`` then stops and exits with status
:data:`EXIT_WORKER_DIED`, a fleet twin's process exits at once with that status (its will tells the
broker it is offline) so that its supervisor — the fleet, Ray, systemd — starts it again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("mbsd_twin.twin")

EXIT_WORKER_DIED = 70  # EX_SOFTWARE: the process's twin worker thread died


def run_worker(svc: Any) -> None:
    """The worker thread: ``svc._work_once`` until the service stops, every turn guarded — an
    exception anywhere (a batch, a command, a tick, a publication, the health message) is counted
    (``internal_error``) and logged at most once a minute with its traceback, and the loop goes on."""
    next_health, failed = time.monotonic(), 0
    while not svc.stopping.is_set():
        try:
            next_health = svc._work_once(next_health)
            failed = 0
        except Exception:
            internal_error(svc, "worker error", "unexpected error in the twin worker")
            failed += 1
            if failed > 1:  # a fault that repeats at once does not spin the CPU
                svc.stopping.wait(0.05)


def internal_error(svc: Any, kind: str, what: str) -> None:
    svc.rlog.warning(kind, what, level=logging.ERROR, exc_info=True)
    svc.counts["internal_error"] += 1


def health_tick(svc: Any) -> None:
    """Publish the health message (its warnings also logged, at most once a minute each) and send
    the next pair of round-trip probes. A health message that cannot be built is counted
    (``health_failed``), logged, and replaced by a minimal one that says why."""
    from .outbox import Out
    from .protocol import encode

    try:
        h = svc.health()
        for w in h["warnings"]:
            svc.rlog.warning("health warning", "%s", w)
    except Exception as exc:
        svc.counts["health_failed"] += 1
        internal_error(svc, "health error", "the health message could not be built")
        h = fallback_health(svc, exc)
    svc.publish(Out(svc.topics.twin("health"), encode(h)))
    if svc.connected.is_set() and not svc.superseded:
        svc.rtt.send(svc.client, svc.topics.twin("probe"))


def fallback_health(svc: Any, exc: BaseException) -> dict[str, Any]:
    """What a health message can still say when building the full one failed (``exc``)."""
    return {"v": 1, "asset": svc.cfg.core.asset, "connected": svc.connected.is_set(),
            "uptime_s": time.monotonic() - svc.t_started, "degraded": True,
            "error": f"the health message could not be built: {type(exc).__name__}: {exc}"[:500],
            "warnings": ["the twin's health message could not be built; see its log"],
            "counters": {k: v for k, v in svc.counts.items() if isinstance(v, int)}}


class WorkerWatch:
    """A daemon thread that waits for ``worker`` to end; if it ends while ``stopping`` is not set,
    ``on_death(reason)`` is called once (after a CRITICAL log line)."""

    def __init__(self, worker: threading.Thread, stopping: threading.Event,
                 on_death: Callable[[str], None]) -> None:
        self.worker, self.stopping, self.on_death = worker, stopping, on_death
        self.died = ""  # why the worker died ("": it has not)
        self.thread = threading.Thread(target=self._run, name="twin-worker-watch", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        self.worker.join()  # returns when the worker thread ends, for whatever reason
        if self.stopping.is_set():
            return
        self.died = f"the twin's worker thread ({self.worker.name}) died; the process exits with status " \
                    f"{EXIT_WORKER_DIED} so that its supervisor restarts it"
        log.critical("%s", self.died)
        self.on_death(self.died)
