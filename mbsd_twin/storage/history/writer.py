"""The history writer: a thread beside the twin's worker that batches what the service publishes
into the store (docs/history.md).

``offer`` (the service's publish tap, on the worker thread) only appends the topic leaf, wall time
and payload to a deque — nothing is parsed or written on the sample loop. The writer thread wakes
every ``batch_interval`` (or when ``batch_messages`` wait), turns the messages into blocks and
events (:mod:`.rows`) and writes them in one transaction. When the store fails (unreachable,
locked, read-only, a statement beyond ``timeout``) the batch goes to the disk spool (:mod:`.spool`)
and so does everything after it until a retry — after ``retry_min`` s, doubling up to
``retry_max`` — succeeds; then the spool is written back, oldest first, in chunks between the live
batches. A backlog of more than ten batches in memory (a store too slow for the stream) is spooled
too, so memory stays bounded. Nothing is dropped unless the spool's own disk fails (``lost``).
Samples whose times the store holds already (another instance of the twin wrote them during a
fencing hand-over; a spool chunk written twice) are not stored again (:mod:`.overlap`): counted in
``duplicates`` and logged once.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ...twin.config.sections import HistoryConfig
from .backends import open_store
from .rows import STORED_TOPICS, convert
from .spool import Message, Spool
from .stores import StoreError

log = logging.getLogger("mbsd_twin.history")

def spool_dir(cfg: HistoryConfig) -> str:
    if cfg.spool_dir:
        return cfg.spool_dir
    return f"{cfg.path}.spool" if cfg.backend == "sqlite" else os.path.join(os.getcwd(), "history-spool")


class HistoryWriter:
    def __init__(self, cfg: HistoryConfig, report: Callable[[str, str], None] | None = None, store: Any = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.cfg, self.clock, self.wall = cfg, clock, wall
        self.report = report or (lambda event, msg: None)
        self.store = store if store is not None else open_store(cfg.backend, cfg.path, cfg.dsn, cfg.timeout)
        self.spool = Spool(spool_dir(cfg), cfg.spool_segment_bytes)
        self.queue: deque[tuple[str, float, str, float]] = deque()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="twin-history", daemon=True)
        self.counts = {"written": 0, "blocks": 0, "samples": 0, "events": 0, "spooled": 0, "replayed": 0, "errors": 0,
                       "unreadable": 0, "lost": 0, "duplicates": 0}
        self.down = False
        self.backoff = cfg.retry_min
        self.retry_at = 0.0
        self.last_error = ""
        self.lag_s = self.lag_max_s = 0.0
        self.next_retention = 0.0
        self.closed = False

    # ------------------------------------------------------------- producer side
    def offer(self, topic: str, payload: str) -> None:
        """Queue one published message (called on the twin's worker thread: an append, nothing else)."""
        leaf = topic.rsplit("/", 1)[-1]
        if leaf in STORED_TOPICS:
            self.queue.append((leaf, self.wall(), payload, self.clock()))
            if len(self.queue) >= self.cfg.batch_messages:
                self.wake.set()

    def tap(self, out: Any) -> None:
        self.offer(out.topic, out.payload)

    def start(self) -> None:
        self.thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued (or spool it) and stop the thread."""
        self.stopping.set()
        self.wake.set()
        if self.thread.is_alive():
            self.thread.join(timeout)
            if self.thread.is_alive():  # a store call hanging past the stop: say what may not arrive
                busy = self.last_error or "a store call in progress"
                self.report("stop", f"history writer still busy after {timeout:g} s at stop ({busy}); "
                            f"{len(self.queue)} queued message(s) may not be written")
                return
        else:
            self._drain()
        self.spool.close()
        self.store.close()
        self.closed = True

    # ------------------------------------------------------------- writer thread
    def _run(self) -> None:
        while not self.stopping.is_set():
            self.wake.wait(self.cfg.batch_interval)
            self.wake.clear()
            self.cycle()
        self._drain()

    def cycle(self) -> None:
        """One round: the queued messages, then a share of the spool, then retention when due."""
        self._drain()
        self._catch_up()
        if self.cfg.retention_days > 0 and self.clock() >= self.next_retention and not self.down:
            self.next_retention = self.clock() + self.cfg.retention_interval
            try:
                self.store.retain(self.cfg.retention_days, self.wall())
            except StoreError as exc:
                self._fail(exc)

    def _drain(self) -> None:
        while self.queue:
            batch = [self.queue.popleft() for _ in range(min(len(self.queue), self.cfg.batch_messages))]
            msgs = [(leaf, wall, text) for leaf, wall, text, _ in batch]
            if len(self.queue) > 10 * self.cfg.batch_messages or not self._store_due():
                self._to_spool(msgs)  # a backlog the store cannot keep up with, or the store is out
            elif self._write(msgs):
                self.lag_s = self.clock() - batch[0][3]
                self.lag_max_s = max(self.lag_max_s, self.lag_s)
            else:
                self._to_spool(msgs)

    def _store_due(self) -> bool:
        return not self.down or self.clock() >= self.retry_at

    def _write(self, msgs: list[Message]) -> bool:
        blocks, events, bad = convert(msgs)
        try:
            dup = int(self.store.write(blocks, events) or 0)  # samples whose times were stored already
        except StoreError as exc:
            self._fail(exc)
            return False
        c = self.counts
        c["written"] += len(msgs)
        c["blocks"] += len(blocks)
        c["samples"] += sum(b.n for b in blocks) - dup
        if dup and not c["duplicates"]:
            log.warning("history: %d sample(s) not stored again: their times are in %s already (first write "
                        "wins; e.g. another instance of this twin during a fencing hand-over); counted in "
                        "sinks.history.duplicates, not logged again", dup, self.store.name)
        c["duplicates"] += dup
        c["events"] += len(events)
        c["unreadable"] += bad
        if self.down:
            self.down = False
            self.report("resumed", f"history store back ({self.store.name}); catching up "
                        f"{self.spool_pending()} spooled message(s)")
        self.backoff = self.cfg.retry_min
        return True

    def _catch_up(self) -> None:
        """Spooled messages back into the store while the live queue is short (live data first)."""
        if self.spool.size > 0 and self._store_due():
            self._spool_call(self.spool.rotate)
        while self._store_due() and len(self.queue) < self.cfg.batch_messages and not self.stopping.is_set():
            chunk = self._spool_call(lambda: self.spool.read(self.cfg.batch_messages))
            if not chunk:
                return
            seg, end, msgs = chunk
            if not self._write(msgs):
                return
            self.counts["written"] -= len(msgs)  # counted as replayed, not as live
            self.counts["replayed"] += len(msgs)
            self._spool_call(functools.partial(self.spool.done, seg, end))

    def _to_spool(self, msgs: list[Message]) -> None:
        try:
            self.spool.append(msgs)
            self.counts["spooled"] += len(msgs)
        except OSError as exc:
            self.counts["lost"] += len(msgs)
            self.last_error = f"spooling to {self.spool.dir}: {exc.strerror or exc}; {len(msgs)} message(s) lost"
            self.report("lost", self.last_error)

    def _spool_call(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except OSError as exc:
            self.last_error = f"spool {self.spool.dir}: {exc.strerror or exc}"
            self.report("spool", self.last_error)
            return None

    def _fail(self, exc: StoreError) -> None:
        self.counts["errors"] += 1
        self.last_error = str(exc)
        self.retry_at = self.clock() + self.backoff
        if not self.down:
            self.report("spooling", f"{exc}; spooling to {self.spool.dir} (the twin keeps running); "
                        f"retrying in {self.backoff:g} s")
        self.down = True
        self.backoff = min(self.cfg.retry_max, 2 * self.backoff)

    # ------------------------------------------------------------------- health
    def spool_pending(self) -> int:
        return self.spool.carried + self.counts["spooled"] - self.counts["replayed"] - self.spool.torn

    def status(self) -> dict[str, Any]:
        """``sinks.history`` of the health message (docs/mqtt-contract.md)."""
        files, size = self.spool.disk()
        state = "closed" if self.closed else "spooling" if self.down else "ok"
        return {"backend": self.cfg.backend, "state": state, **self.counts,
                "spool_pending": self.spool_pending(), "spool_files": files, "spool_bytes": size,
                "queue": len(self.queue), "lag_s": self.lag_s, "lag_max_s": self.lag_max_s,
                "last_error": self.last_error,
                "retry_in_s": max(0.0, self.retry_at - self.clock()) if self.down else 0.0}
