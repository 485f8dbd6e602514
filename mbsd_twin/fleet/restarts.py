"""When a dead twin is started again (the local backend's processes, a shared process's twins):
after ``restart_delay``, doubled for every death in a row within :data:`QUICK` s of a start (at
most 32 times: a crash loop does not spin), never again after ``max_restarts`` restarts."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

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
