"""Rows of the twin's outputs, built from the messages the service publishes (a service tap).

Per processed sensor batch the twin publishes ``state``, ``residuals`` and ``virtual`` (same
``src_seq``, in that order); one row per output sample joins them: ``t`` (rig time),
``sim.<channel>``, ``resid.<channel>``, ``meas.<channel>`` (= simulated + residual, for the compared
channels) and ``virt.<output>``. ``health``, ``latest`` and ``alarms`` messages are kept as they
come. Thread-safe: the tap runs in the service's worker thread, readers in HTTP threads.
"""

from __future__ import annotations

import json
import math
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..twin.core import Out


class Store:
    """``every_sample``: one row per output sample (else one per message, its last sample);
    ``maxlen``: rows kept (oldest dropped)."""

    def __init__(self, compare: Sequence[str], maxlen: int = 20000, every_sample: bool = False) -> None:
        self.compare = tuple(compare)
        self.every_sample = every_sample
        self.rows: deque[tuple[float, ...]] = deque(maxlen=maxlen)
        self.columns: list[str] = []
        self.total = 0  # rows ever added (the cursor)
        self.t0: float | None = None
        self.health: dict[str, Any] | None = None
        self.latest: dict[str, Any] | None = None
        self.alarms: deque[dict[str, Any]] = deque(maxlen=200)
        self.alarm_counts: dict[str, int] = {"raised": 0, "cleared": 0}
        self.messages = 0
        self._pending: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------- tap
    def __call__(self, out: Out) -> None:
        """The service tap: every published message."""
        _, sep, leaf = out.topic.rpartition("/twin/")
        if not sep:
            return
        if leaf in ("state", "residuals"):
            self._pending[leaf] = json.loads(out.payload)
        elif leaf == "virtual":
            self._join(json.loads(out.payload))
        elif leaf in ("health", "latest", "alarms"):
            body = json.loads(out.payload)
            with self._lock:
                if leaf == "alarms":
                    self.alarms.append(body)
                    ev = body.get("event", "")
                    self.alarm_counts[ev] = self.alarm_counts.get(ev, 0) + 1
                else:
                    setattr(self, leaf, body)

    def _join(self, virtual: dict[str, Any]) -> None:
        state, resid = self._pending.pop("state", None), self._pending.pop("residuals", None)
        if not state or not resid or state.get("src_seq") != virtual.get("src_seq") \
                or resid.get("src_seq") != virtual.get("src_seq"):
            return
        if not self.columns:
            self.columns = (["t"] + [f"sim.{c}" for c in state["ch"]] + [f"resid.{c}" for c in resid["ch"]]
                            + [f"meas.{c}" for c in self.compare if c in state["ch"] and c in resid["ch"]]
                            + [f"virt.{c}" for c in virtual["ch"]])
        n = int(virtual["n"])
        ks = range(n) if self.every_sample else [n - 1]
        new = [self._row(state, resid, virtual, k) for k in ks]
        with self._lock:
            if self.t0 is None:
                self.t0 = float(virtual["t0"])
            self.rows.extend(new)
            self.total += len(new)
            self.messages += 1

    def _row(self, state: dict[str, Any], resid: dict[str, Any], virtual: dict[str, Any], k: int) -> tuple[float, ...]:
        def value(msg: dict[str, Any], ch: str) -> float:
            v = msg["ch"].get(ch)
            return float(v[k]) if v is not None and k < len(v) else math.nan

        out = [float(virtual["t0"]) + k * float(virtual["dt"])]
        for col in self.columns[1:]:
            kind, _, ch = col.partition(".")
            if kind == "meas":
                out.append(value(state, ch) + value(resid, ch))
            else:
                out.append(value({"sim": state, "resid": resid, "virt": virtual}[kind], ch))
        return tuple(out)

    # --------------------------------------------------------------- readers
    def since(self, cursor: int, limit: int = 5000) -> tuple[int, list[tuple[float, ...]]]:
        """Rows added after ``cursor`` (at most ``limit``, the newest); the new cursor."""
        with self._lock:
            total, held = self.total, len(self.rows)
            n = min(max(0, total - max(0, cursor)), held, limit)
            rows = [self.rows[i] for i in range(held - n, held)]
        return total, rows

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"health": self.health, "latest": self.latest, "alarms": list(self.alarms)[-20:],
                    "alarm_counts": dict(self.alarm_counts), "messages": self.messages, "total_rows": self.total}

    def column(self, name: str) -> list[float]:
        k = self.columns.index(name)
        with self._lock:
            return [r[k] for r in self.rows]

    def to_csv(self, path: str | Path) -> Path:
        """All rows held, as CSV (header row, ``#`` comment lines, data), the layout of result CSVs."""
        path = Path(path)
        with self._lock:
            rows = list(self.rows)
        lines = [",".join(self.columns or ["t"]),
                 "# mbsd-twin demo: twin outputs per sample (t = rig time [s]; sim = model, meas = rig sensor, "
                 "resid = meas - sim with angles wrapped, virt = virtual sensors)"]
        lines += [",".join(repr(v) for v in r) for r in rows]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path
