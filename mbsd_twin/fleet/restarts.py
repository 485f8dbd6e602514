"""When a dead twin is started again (the local backend's processes, a shared process's twins):
after ``restart_delay``, doubled for every death in a row within :data:`QUICK` s of a start (at
most 32 times: a crash loop does not spin), never again after ``max_restarts`` restarts."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("mbsd_twin.fleet")

QUICK = 10.0  # s: a twin dying sooner after its start is in a crash loop (e.g. its mechanism file vanished)


@dataclass
class Restarts:
    """One twin's (or one process's) deaths and restarts; times are ``time.monotonic()``."""

    delay: float  # s: [fleet] restart_delay
    max_restarts: int  # [fleet] max_restarts; -1: no limit
    restarts: int = 0
    started_at: float = field(default_factory=time.monotonic)
    quick_deaths: int = 0  # deaths in a row within QUICK s of a start
    died_at: float | None = None
    given_up: bool = False

    def died(self, now: float) -> bool:
        """Note a death seen at ``now``; True the first time it is seen (the caller logs it)."""
        if self.died_at is not None:
            return False
        self.died_at = now
        self.quick_deaths = self.quick_deaths + 1 if now - self.started_at < QUICK else 0
        return True

    def due(self, now: float) -> bool:
        """True when the dead twin is to be started now (``given_up`` set, and logged by the caller,
        once ``max_restarts`` is reached)."""
        if self.given_up or self.died_at is None:
            return False
        if 0 <= self.max_restarts <= self.restarts:
            self.given_up = True
            return False
        return now - self.died_at >= self.delay * 2 ** min(max(self.quick_deaths - 1, 0), 5)

    def restarted(self, now: float) -> None:
        self.restarts += 1
        self.died_at, self.started_at = None, now


def revive(r: Restarts, now: float, what: str, why: str, start: Callable[[], str]) -> None:
    """One look at a dead ``what`` (a twin's process, a shared process, a twin in one): its death
    logged once (``why``), started again when due (``start()``: how, for the log), or given up once
    ``max_restarts`` is reached (logged once)."""
    if r.given_up:
        return
    if r.died(now):
        log.error("%s died: %s", what, why)
    if r.due(now):
        r.restarted(now)  # before the start: a start that fails is a death of its own
        how = start()
        log.warning("%s restarted (%s, restart %d)", what, how, r.restarts)
    elif r.given_up:
        log.error("%s: not restarted again (max_restarts = %d reached)", what, r.max_restarts)
