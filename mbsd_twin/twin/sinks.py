"""The service's storage sinks fail safe: a write failure suspends the sink, never the twin.

:class:`RecordingSink` wraps the :class:`.recorder.Recorder` the service records with. Any
``OSError`` (disk full, directory removed, permission, I/O error) while opening, writing, rotating
or flushing suspends it: the records in between are dropped and counted, the error is counted and
kept (``status()``, shown in the health message under ``sinks.recording``) and reported through
``report(event, text)`` (event ``suspended`` or ``resumed``; the service logs it rate-limited).
The sink retries after a back-off doubling from ``retry_min`` to ``retry_max`` seconds. A retry
appends to the current segment: it first ends a line a failed write may have left torn, then
writes a ``{"k": "gap", "lost": n}`` record (replay counts it and is then not identical), or the
header when it never reached the disk. The live twin keeps publishing throughout; only the
recording has a hole.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from .recorder import Recorder


class RecordingSink:
    """A :class:`Recorder` that suspends on ``OSError`` and retries (callable like it)."""

    def __init__(self, path: str, max_bytes: int, keep: int, header: dict[str, Any], retry_min: float = 1.0,
                 retry_max: float = 30.0, report: Callable[[str, str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path, self.max_bytes, self.keep, self.header = path, max_bytes, keep, header
        self.retry_min, self.retry_max = retry_min, retry_max
        self.report = report or (lambda event, msg: None)
        self.clock = clock
        self.rec: Recorder | None = None
        self.segment = 0
        self.header_on_disk = False
        self.errors = 0  # write failures (each suspends the sink)
        self.dropped = 0  # records not written while suspended
        self.lost = 0  # records dropped since the last successful resume (the next gap record)
        self.last_error = ""
        self.backoff = retry_min
        self.retry_at = 0.0
        self.closed = False
        try:
            self.rec = Recorder(path, max_bytes, keep)
            self.rec(header)
        except OSError as exc:
            self._fail(exc, "opening")

    # ------------------------------------------------------------------ writing
    def __call__(self, record: dict[str, Any]) -> None:
        if not self._ready():
            self.dropped += 1
            self.lost += 1
            return
        assert self.rec is not None
        try:
            self.rec(record)
        except OSError as exc:
            self.dropped += 1
            self.lost += 1
            self._fail(exc, "writing")

    def flush(self) -> None:
        if self.rec is None:
            return
        try:
            self.rec.flush()
        except OSError as exc:
            self._fail(exc, "flushing")
            return
        if self.written_since_open:
            self.header_on_disk = True
            self.backoff = self.retry_min  # a flush that worked: the next failure starts the back-off afresh

    @property
    def written_since_open(self) -> bool:
        return self.rec is not None and self.rec.written > 0

    def close(self) -> None:
        if self.rec is not None:
            self.flush()
        self._discard()
        self.closed = True

    # ---------------------------------------------------------------- suspension
    def _fail(self, exc: OSError, doing: str) -> None:
        self.errors += 1
        self.last_error = f"{doing} {self._segment_name()}: {exc.strerror or exc}"
        if self.rec is not None:
            self.segment = self.rec.segment
        self._discard()
        self.retry_at = self.clock() + self.backoff
        self.report("suspended", f"recording suspended ({self.last_error}); the twin keeps publishing; retrying in "
                    f"{self.backoff:g} s")
        self.backoff = min(self.retry_max, 2 * self.backoff)

    def _discard(self) -> None:
        if self.rec is None:
            return
        with contextlib.suppress(OSError):
            self.rec.close()  # closes the file even when its final flush fails
        self.rec = None

    def _ready(self) -> bool:
        """Writable now: open, or a retry is due and the segment re-opens (and flushes) fine."""
        if self.rec is not None:
            return True
        if self.closed or self.clock() < self.retry_at:
            return False
        try:
            self.rec = Recorder(self.path, self.max_bytes, self.keep, segment=self.segment, append=True)
            if self.header_on_disk or self.rec.written:
                self.rec.write_raw("\n")  # ends a line a failed write may have left torn
                self.rec({"k": "gap", "lost": self.lost, "error": self.last_error})
            else:
                self.rec(self.header)
            self.rec.flush()
        except OSError as exc:
            self._fail(exc, "re-opening")
            return False
        self.header_on_disk = True
        self.lost = 0
        self.report("resumed", f"recording resumed in {self._segment_name()} after {self.errors} error(s)")
        return True

    def _segment_name(self) -> str:
        return self.path if self.segment == 0 else f"{self.path}.{self.segment:04d}"

    # ------------------------------------------------------------------- health
    def status(self) -> dict[str, Any]:
        """``state`` ok/suspended/closed, ``errors``, ``dropped`` records, ``last_error``, ``retry_in_s``."""
        suspended = self.rec is None and not self.closed
        state = "closed" if self.closed else "suspended" if suspended else "ok"
        return {"state": state, "errors": self.errors, "dropped": self.dropped,
                "last_error": self.last_error,
                "retry_in_s": max(0.0, self.retry_at - self.clock()) if suspended else 0.0}
