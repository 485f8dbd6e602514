"""What keeps the dashboard's read endpoints from taking the twin's time: a per-client rate limit
(token bucket by client address) and reply caches (docs/history.md, "The dashboard's history view").

A request over the rate is answered 429 at once — JSON naming the bound and ``Retry-After`` — and
costs nothing else. A cached reply is served as it was built (``X-Cache: hit``); it is built again
(``X-Cache: miss``) only when what it shows has changed.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import orjson

Reply = tuple[int, str, bytes, dict[str, str]]
MAX_CLIENTS = 4096  # client addresses tracked (the longest idle forgotten first)


def json_reply(status: int, obj: Any, headers: dict[str, str] | None = None) -> Reply:
    """JSON (orjson: NaN and infinities as null, ten times json's speed on a 5000-row reply);
    ``Cache-Control: no-store``."""
    body = orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    return status, "application/json", body, {"Cache-Control": "no-store", **(headers or {})}


class RateLimit:
    """``rate`` requests per s per client address, ``burst`` at once (a token bucket each)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # client → (tokens, at)
        self._lock = threading.Lock()
        self.refused = 0

    def wait(self, client: str) -> float:
        """0 when ``client`` may make a request now (a token is taken), else the s until it may."""
        now = self.clock()
        with self._lock:
            tokens, at = self._buckets.pop(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            wait = 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate
            self._buckets[client] = (tokens - 1.0 if wait == 0.0 else tokens, now)
            while len(self._buckets) > MAX_CLIENTS:
                self._buckets.popitem(last=False)
            self.refused += wait > 0
        return wait

    def refuse(self, wait: float) -> Reply:
        return json_reply(429, {"error": f"rate: more than {self.rate:g} requests per s (burst {self.burst}) "
                                         "from this client address; retry later",
                                "parameter": "rate", "bound": self.rate, "retry_after": round(wait, 3)},
                          {"Retry-After": str(max(1, math.ceil(wait)))})


class ReplyCache:
    """Replies by key, at most ``entries`` and ``max_bytes`` of bodies (the oldest dropped first)."""

    def __init__(self, entries: int, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.entries, self.max_bytes = entries, max_bytes
        self._items: OrderedDict[Hashable, tuple[Any, Reply]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: Hashable, fresh: Callable[[Any], bool]) -> Reply | None:
        """The reply kept under ``key`` if ``fresh(its tag)``; None (a miss) otherwise."""
        with self._lock:
            item = self._items.get(key)
            if item is None or not fresh(item[0]):
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
        status, ctype, body, headers = item[1]
        return status, ctype, body, {**headers, "X-Cache": "hit"}

    def put(self, key: Hashable, tag: Any, reply: Reply) -> Reply:
        size = len(reply[2])
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= len(old[1][2])
            if size <= self.max_bytes:
                self._items[key] = (tag, reply)
                self._bytes += size
            while len(self._items) > self.entries or self._bytes > self.max_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= len(dropped[2])
        status, ctype, body, headers = reply
        return status, ctype, body, {**headers, "X-Cache": "miss"}
