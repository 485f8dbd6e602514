"""The history writer's outage spool: an append-only file of output messages in a directory.

Each line is ``<topic leaf>\\t<wall time>\\t<payload JSON>`` (the twin's payloads are compact JSON:
no tab, no newline). Messages are appended to ``active.part`` (flushed per append); rotation closes it
and renames it to the next ``NNNNNNNN.spool`` segment with ``os.replace`` (atomic: a segment is
always complete). Catching up reads the oldest segment in chunks; after each chunk is in the store
its offset is written to ``NNNNNNNN.spool.pos`` (atomically, through a temporary file and
``os.replace``), and the segment and its offset file are removed when it is done. An ``active.part``
left by a crash is rotated at start; a torn last line is skipped and counted.
"""

from __future__ import annotations

import contextlib
import os
from typing import BinaryIO

Message = tuple[str, float, str]  # (topic leaf, wall time, payload)
ACTIVE = "active.part"


def _count_lines(path: str, start: int = 0) -> int:
    n = 0
    with open(path, "rb") as fh:
        fh.seek(start)
        while chunk := fh.read(1 << 20):
            n += chunk.count(b"\n")
    return n


class Spool:
    def __init__(self, directory: str, segment_bytes: int = 64 << 20) -> None:
        self.dir, self.segment_bytes = directory, segment_bytes
        self.fh: BinaryIO | None = None
        self.size = 0
        self.torn = 0  # unreadable lines skipped while catching up
        self.carried = 0  # messages left in the spool by an earlier run
        try:  # a spool directory that cannot be made now is retried at the first append
            os.makedirs(directory, exist_ok=True)
            if os.path.exists(self._path(ACTIVE)):
                self.rotate()
            self.carried = sum(_count_lines(self._path(s), self._offset(s)) for s in self.segments())
        except OSError:
            pass

    def _path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def segments(self) -> list[str]:
        """Complete segments, oldest first."""
        try:
            return sorted(f for f in os.listdir(self.dir) if f.endswith(".spool"))
        except OSError:  # no spool directory (yet): nothing spooled
            return []

    def pending(self) -> bool:
        return self.size > 0 or bool(self.segments())

    def append(self, messages: list[Message]) -> None:
        """Append and flush (raises ``OSError``); rotates at ``segment_bytes``."""
        if self.fh is None:
            os.makedirs(self.dir, exist_ok=True)
            self.fh = open(self._path(ACTIVE), "ab")  # noqa: SIM115 - kept open between appends
            self.size = self.fh.tell()
        data = "".join(f"{leaf}\t{wall!r}\t{text}\n" for leaf, wall, text in messages).encode()
        self.fh.write(data)
        self.fh.flush()
        self.size += len(data)
        if self.size >= self.segment_bytes:
            self.rotate()

    def rotate(self) -> None:
        """Close the active file and make it the next segment (atomic rename, fsynced first)."""
        if self.fh is not None:
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
            self.fh = None
        active = self._path(ACTIVE)
        if os.path.exists(active) and os.path.getsize(active) > 0:
            last = max((int(s.split(".")[0]) for s in self.segments()), default=0)
            os.replace(active, self._path(f"{last + 1:08d}.spool"))
        elif os.path.exists(active):
            os.remove(active)
        self.size = 0

    def _offset(self, segment: str) -> int:
        try:
            with open(self._path(segment + ".pos"), encoding="ascii") as fh:
                return int(fh.read().strip() or 0)
        except (OSError, ValueError):
            return 0

    def read(self, max_messages: int) -> tuple[str, int, list[Message]] | None:
        """(segment, end offset, messages) of the next chunk of the oldest segment, or None."""
        segs = self.segments()
        if not segs:
            return None
        seg = segs[0]
        out: list[Message] = []
        with open(self._path(seg), "rb") as fh:
            fh.seek(self._offset(seg))
            while len(out) < max_messages and (line := fh.readline()):
                parts = line.rstrip(b"\n").decode("utf-8", "replace").split("\t", 2)
                try:
                    out.append((parts[0], float(parts[1]), parts[2]))
                except (IndexError, ValueError):
                    self.torn += 1
            end = fh.tell()
        return seg, end, out

    def done(self, segment: str, offset: int) -> None:
        """The chunk ending at ``offset`` is in the store: record it, or remove a finished segment."""
        path = self._path(segment)
        if offset >= os.path.getsize(path):
            os.remove(path)
            with contextlib.suppress(FileNotFoundError):
                os.remove(path + ".pos")
            return
        tmp = path + ".pos.tmp"
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write(str(offset))
        os.replace(tmp, path + ".pos")

    def disk(self) -> tuple[int, int]:
        """(segment files including the active one, bytes on disk)."""
        segs = self.segments()
        size = sum(os.path.getsize(self._path(s)) for s in segs)
        return len(segs) + (self.size > 0), size + self.size

    def close(self) -> None:
        if self.fh is not None:
            self.rotate()
