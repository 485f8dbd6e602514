"""Sequence handling of sensor messages: duplicates, gaps, reordering and late arrivals.

``push`` returns the messages now deliverable in sequence order. A message ahead of the expected
seq waits in a buffer of at most ``window`` messages; when the buffer is full, or when its oldest
message has waited ``timeout`` s (``flush``, called by the twin's worker at least every 50 ms; ``due``
says when), the missing seqs are given up and counted as ``gap`` (``gap_timeout`` counts the times
the timeout, not the window, gave them up). A message older than
the expected seq is a ``duplicate`` when it was already delivered or buffered, else ``late``
(dropped). ``reordered`` counts messages that arrived after a later one and were put back in order.

A seq more than ``max_jump`` away from the expected one (ahead or behind) is implausible: it is
dropped and counted as ``jump``, unless ``jump_confirm`` such messages in a row continue one
another's numbering (seq, seq + 1, ...), which is then taken as a restart of the rig's numbering
(counted as ``restart``). One hostile seq (current + 10**12) therefore never blocks the stream, and
a legitimate stream that an attacker managed to displace takes its numbering back the same way.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Sequencer(Generic[T]):
    def __init__(self, window: int, history: int = 4096, max_jump: int = 1000, jump_confirm: int = 3) -> None:
        self.window, self.max_jump, self.jump_confirm = window, max_jump, jump_confirm
        self._jump: tuple[int, int] = (-1, 0)  # last implausible seq and the run of consecutive ones
        self.expected: int | None = None
        self.buffer: dict[int, tuple[T, float]] = {}
        self.delivered: OrderedDict[int, None] = OrderedDict()
        self._history = history
        self.counts = {"duplicate": 0, "late": 0, "gap": 0, "reordered": 0, "restart": 0, "jump": 0,
                       "gap_timeout": 0}
        self._waited: deque[int] = deque()

    def reset(self) -> None:
        """Forget the sequence (a rig restart): the next message starts a new one."""
        self.expected = None
        self.buffer.clear()
        self.delivered.clear()

    def _deliver(self, seq: int, item: T, out: list[T]) -> None:
        out.append(item)
        self.delivered[seq] = None
        if len(self.delivered) > self._history:
            self.delivered.popitem(last=False)
        self.expected = seq + 1

    def _drain(self, out: list[T]) -> None:
        while self.expected in self.buffer:
            item, _ = self.buffer.pop(self.expected)
            self._deliver(self.expected, item, out)

    def push(self, seq: int, item: T, now: float = 0.0) -> list[T]:
        out: list[T] = []
        if self.expected is None:
            self._deliver(seq, item, out)
            return out
        if seq == 0 and self.expected > self.window + 1 and 0 not in self.buffer:
            self.counts["restart"] += 1  # rig restarted without (or before) its birth message
            self.reset()
            self._deliver(seq, item, out)
            return out
        if abs(seq - self.expected) > self.max_jump:
            return self._jumped(seq, item)
        self._jump = (-1, 0)
        if seq < self.expected:
            self.counts["duplicate" if seq in self.delivered else "late"] += 1
            return out
        if seq in self.buffer:
            self.counts["duplicate"] += 1
            return out
        if seq == self.expected:
            if self.buffer:
                self.counts["reordered"] += 1  # it arrived after a later message
            self._deliver(seq, item, out)
            self._drain(out)
            return out
        self.buffer[seq] = (item, now)
        if len(self.buffer) > self.window:
            self._skip(out)
        return out

    def _jumped(self, seq: int, item: T) -> list[T]:
        """An implausible seq: dropped, or a restart of the numbering once confirmed."""
        last, run = self._jump
        run = run + 1 if seq == last + 1 else 1
        self._jump = (seq, run)
        self.counts["jump"] += 1
        if run < self.jump_confirm:
            return []
        self.counts["restart"] += 1
        self.reset()
        self._jump = (-1, 0)
        out: list[T] = []
        self._deliver(seq, item, out)
        return out

    def _skip(self, out: list[T]) -> None:
        """Give up the missing seqs before the oldest buffered message."""
        assert self.expected is not None
        first = min(self.buffer)
        self.counts["gap"] += first - self.expected
        self.expected = first
        item, _ = self.buffer.pop(first)
        self._deliver(first, item, out)
        self._drain(out)

    def due(self, timeout: float) -> float | None:
        """When the oldest buffered message will have waited ``timeout`` (None: none waits)."""
        return min(t for _, t in self.buffer.values()) + timeout if self.buffer else None

    def give_up(self) -> list[T]:
        """Give up the missing seqs before the oldest buffered message (its wait timed out)."""
        out: list[T] = []
        if self.buffer:
            self.counts["gap_timeout"] += 1
            self._skip(out)
        return out

    def flush(self, now: float, timeout: float) -> list[T]:
        """Give up missing seqs that buffered messages have waited for longer than ``timeout``."""
        out: list[T] = []
        while (due := self.due(timeout)) is not None and due <= now:
            out += self.give_up()
        return out
