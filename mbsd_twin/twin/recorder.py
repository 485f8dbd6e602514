"""Recording (JSON lines, flushed, rotated by size) and deterministic replay without a broker.

Records: ``header`` (core configuration and the mechanism file text), ``in`` (a sensor message
as the core processed it, with the ``hold`` the service chose), ``cmd`` (a command), ``restart``
(a new rig session began), ``out`` (an output message), ``gap`` (the service's recording was
suspended by a write failure: ``lost`` records are missing, see :mod:`.sinks`). Segments: ``PATH``, ``PATH.0001``,
``PATH.0002`` … Replay feeds ``in``, ``cmd`` and ``restart`` records to a fresh :class:`TwinCore`
and compares its outputs with the ``out`` records; a recording with a gap (or a line a failed
write left torn, read as a gap) is replayed but never identical.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from ..model.loader import loads_mechanism
from .config.sections import CoreConfig
from .protocol import parse_sensor

FORMAT = "mbsd-twin-recording/1"


class Recorder:
    """Writes records; raises ``OSError`` (the service wraps it in :class:`.sinks.RecordingSink`).
    ``segment``/``append``: continue segment k of an earlier recorder (after a write failure)."""

    def __init__(self, path: str, max_bytes: int, keep: int = 0, segment: int = 0, append: bool = False) -> None:
        self.path, self.max_bytes, self.keep = path, max_bytes, keep
        self.segment = segment
        self.fh: TextIO = open(self._name(segment), "a" if append else "w", encoding="utf-8")  # noqa: SIM115
        self.written = self.fh.tell() if append else 0

    def _name(self, k: int) -> str:
        return self.path if k == 0 else f"{self.path}.{k:04d}"

    def __call__(self, rec: dict[str, Any]) -> None:
        line = json.dumps(rec, separators=(",", ":")) + "\n"
        if self.written and self.written + len(line) > self.max_bytes:
            self.fh.close()
            self.segment += 1
            self.fh, self.written = open(self._name(self.segment), "w", encoding="utf-8"), 0  # noqa: SIM115
            if self.keep and self.segment >= self.keep:
                old = self._name(self.segment - self.keep)
                if os.path.exists(old):
                    os.remove(old)
        self.write_raw(line)

    def write_raw(self, text: str) -> None:
        self.fh.write(text)
        self.written += len(text)

    def flush(self) -> None:
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


def segments(path: str) -> list[str]:
    out, k = [path], 1
    while os.path.exists(f"{path}.{k:04d}"):
        out.append(f"{path}.{k:04d}")
        k += 1
    return out


def numbered_records(path: str) -> Iterator[tuple[str, int, dict[str, Any] | None]]:
    """(segment, line number, record) of every non-blank line of every segment; the record is None
    for a line that is not a JSON object — torn by a failed write (the recording then holds a gap
    record) or by a crash mid-line, or not UTF-8."""
    for seg in segments(path):
        with open(seg, "rb") as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    rec = None
                yield seg, n, rec if isinstance(rec, dict) else None


def read_records(path: str) -> Iterator[dict[str, Any]]:
    """The records in order; an unreadable line reads as a gap record."""
    for seg, n, rec in numbered_records(path):
        yield rec if rec is not None else {"k": "gap", "lost": 0, "error": f"{seg}: line {n}: unreadable"}


@dataclass
class ReplayResult:
    outputs: list[tuple[str, str]] = field(default_factory=list)
    recorded: int = 0
    mismatches: int = 0
    first_mismatch: str = ""
    gaps: int = 0  # gap records: the recording was suspended by a write failure

    @property
    def identical(self) -> bool:
        return self.mismatches == 0 and self.recorded == len(self.outputs) and self.gaps == 0


def replay(path: str) -> ReplayResult:
    """Re-run a recording; every output is compared with the recorded one."""
    from .core import TwinCore

    res = ReplayResult()
    core: TwinCore | None = None
    for rec in read_records(path):
        kind = rec.get("k")
        if kind == "header":
            if rec.get("format") != FORMAT:
                raise ValueError(f"{path}: not a {FORMAT} file")
            cfg = CoreConfig.from_dict(rec["core"])
            core = TwinCore(cfg, loads_mechanism(rec["mechanism_toml"], source=rec["mechanism"]))
            asset = cfg.asset
        elif core is None:
            raise ValueError(f"{path}: the recording does not start with a header (first segment missing?)")
        elif kind == "in":
            batch = parse_sensor(rec["p"].encode(), asset, 1 << 30)
            if hasattr(batch, "seq"):
                res.outputs += [(o.topic, o.payload) for o in core.step(batch, rec["hold"])]  # type: ignore[arg-type]
        elif kind == "cmd":
            core.command(rec["name"], rec["args"])
        elif kind == "restart":
            core.rig_restart()
        elif kind == "gap":
            res.gaps += 1
        elif kind == "out":
            k = res.recorded
            res.recorded += 1
            if k >= len(res.outputs) or res.outputs[k] != (rec["t"], rec["p"]):
                res.mismatches += 1
                res.first_mismatch = res.first_mismatch or f"output #{k} on {rec['t']}"
    return res
