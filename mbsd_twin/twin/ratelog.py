"""A logger that says each kind of problem at most once per period: the twin's per-message and
per-batch error paths log through it, so that a flood of bad input cannot flood the log."""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

log = logging.getLogger("mbsd_twin.twin")


class RateLimitedLog:
    """Log each key at most once per ``period`` seconds; the next line says how many were left out.
    Every per-message and per-batch error path logs through it (keys are a fixed set)."""

    def __init__(self, period: float = 60.0) -> None:
        self.period = period
        self.last: dict[str, float] = {}
        self.suppressed: Counter[str] = Counter()

    def warning(self, key: str, msg: str, *args: Any, level: int = logging.WARNING, exc_info: bool = False) -> None:
        now = time.monotonic()
        if now - self.last.get(key, -1e18) < self.period:
            self.suppressed[key] += 1
            return
        self.last[key] = now
        n = self.suppressed.pop(key, 0)
        if n:
            msg += f" ({n} more like this in the last {self.period:g} s not logged)"
        log.log(level, msg, *args, exc_info=exc_info)
