"""Rows of the twin's outputs, built from the messages the service publishes (a service tap).

Per processed sensor batch the twin publishes ``state``, ``residuals``, ``virtual`` and, with the
Kalman filter, ``estimates`` (same ``src_seq``, in that order); one row per output sample joins them:
``t`` (rig time), ``sim.<channel>``, ``resid.<channel>`` (the filter's innovation, measured −
predicted), ``meas.<channel>`` (= estimate + innovation, for the compared channels: the sensor's
sample up to the filter's correction of that sample, which the twin does not publish), ``virt.<output>``
and ``est.<estimate>`` (``nis``, ``<state>.sd``, the augmented unknowns, ``cusum.<statistic>``).
Columns only grow: a key first seen in a later message is appended and the rows before it read NaN;
a null (missing) value is NaN. ``health``, ``latest`` and ``alarms`` messages are kept as they come.
Thread-safe: the tap runs in the service's worker thread, readers in HTTP threads.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..twin.config.sections import AlarmConfig
from ..twin.core import Out
from .crossings import Crossings
from .figures import column_unit

JOINED = ("state", "residuals", "virtual", "estimates")
KINDS = {"sim": "state", "resid": "residuals", "virt": "virtual", "est": "estimates"}


class Store:
    """``every_sample``: one row per output sample (else one per message, its last sample);
    ``maxlen``: rows kept (oldest dropped); ``estimates``: the twin publishes ``estimates`` after
    ``virtual`` (the Kalman filter) and they are joined (a row is complete with them; otherwise rows
    are joined at ``virtual`` and have no ``est.*`` columns); ``units``: units by channel, output,
    input and parameter name (for the CSV header); ``alarms``: the twin's threshold alarms, whose
    crossings are followed sample by sample (:mod:`.crossings`)."""

    def __init__(self, compare: Sequence[str], maxlen: int = 20000, every_sample: bool = False,
                 estimates: bool = False, units: dict[str, str] | None = None,
                 alarms: Sequence[AlarmConfig] = ()) -> None:
        self.compare = tuple(compare)
        self.every_sample = every_sample
        self.estimates = estimates
        self.units = dict(units or {})
        self.rows: deque[tuple[float, ...]] = deque(maxlen=maxlen)
        self.columns: list[str] = []
        self.total = 0  # rows ever added (the cursor)
        self.t0: float | None = None
        self.sample_dt: float | None = None  # the rig's sample interval (output dt / stride)
        self.health: dict[str, Any] | None = None
        self.latest: dict[str, Any] | None = None
        self.alarms: deque[dict[str, Any]] = deque(maxlen=200)
        self.resyncs: deque[dict[str, Any]] = deque(maxlen=200)  # {"t", "reason"} of each re-initialisation
        self.crossings = Crossings(alarms)
        self.alarm_counts: dict[str, int] = {"raised": 0, "cleared": 0}
        self.messages = 0
        self.version = 0  # changes with everything the readers show (read without the lock: one int)
        self._pending: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------- tap
    def __call__(self, out: Out) -> None:
        """The service tap: every published message."""
        _, sep, leaf = out.topic.rpartition("/twin/")
        if not sep:
            return
        if leaf in JOINED:
            if leaf == "state" and "virtual" in self._pending:
                self._join()  # the previous batch came without estimates
            self._pending[leaf] = json.loads(out.payload)
            if leaf == "estimates" or (leaf == "virtual" and not self.estimates):
                self._join()
        elif leaf in ("health", "latest", "alarms"):
            body = json.loads(out.payload)
            with self._lock:
                if leaf == "alarms":
                    self.alarms.append(body)
                    ev = body.get("event", "")
                    self.alarm_counts[ev] = self.alarm_counts.get(ev, 0) + 1
                else:
                    setattr(self, leaf, body)
                self.version += 1

    def _join(self) -> None:
        msgs, self._pending = self._pending, {}
        seq = msgs.get("virtual", {}).get("src_seq")
        if any(leaf not in msgs or msgs[leaf].get("src_seq") != seq for leaf in JOINED[:3]):
            return
        if msgs.get("estimates", {}).get("src_seq") != seq:
            msgs.pop("estimates", None)
        virtual = msgs["virtual"]
        n = int(virtual["n"])
        ks = range(n) if self.every_sample else [n - 1]
        with self._lock:
            self._grow(msgs)
            new = [self._row(msgs, float(virtual["t0"]) + k * float(virtual["dt"]), k) for k in ks]
            if self.t0 is None:
                self.t0 = float(virtual["t0"])
            self.sample_dt = float(virtual["dt"]) / max(1, int(virtual.get("stride", 1)))
            self.rows.extend(new)
            self.resyncs.extend(msgs["residuals"].get("resync_events", ()))
            self.crossings.feed(msgs)
            self.total += len(new)
            self.messages += 1
            self.version += 1

    def _grow(self, msgs: dict[str, dict[str, Any]]) -> None:
        """Append the columns of keys not seen before (in the order t, sim, resid, meas, virt, est)."""
        state, resid = msgs["state"]["ch"], msgs["residuals"]["ch"]
        cols = ["t"] + [f"sim.{c}" for c in state] + [f"resid.{c}" for c in resid]
        cols += [f"meas.{c}" for c in self.compare if c in state and c in resid]
        cols += [f"virt.{c}" for c in msgs["virtual"]["ch"]]
        cols += [f"est.{c}" for c in msgs.get("estimates", {}).get("ch", {})]
        known = set(self.columns)
        self.columns += [c for c in cols if c not in known]

    def _row(self, msgs: dict[str, dict[str, Any]], t: float, k: int) -> tuple[float, ...]:
        def value(kind: str, ch: str) -> float:
            v = msgs.get(KINDS[kind], {}).get("ch", {}).get(ch)
            x = v[k] if v is not None and k < len(v) else None
            return float(x) if x is not None else math.nan

        out = [t]
        for col in self.columns[1:]:
            kind, _, ch = col.partition(".")
            out.append(value("sim", ch) + value("resid", ch) if kind == "meas" else value(kind, ch))
        return tuple(out)

    # --------------------------------------------------------------- readers
    def _padded(self, r: tuple[float, ...]) -> tuple[float, ...]:
        return r + (math.nan,) * (len(self.columns) - len(r))

    def since(self, cursor: int, limit: int = 5000) -> tuple[int, list[tuple[float, ...]]]:
        """Rows added after ``cursor`` (at most ``limit``, the newest; NaN-padded to all columns);
        the new cursor. The lock (which the twin's worker takes in the tap) is held only to copy the
        references of the rows."""
        with self._lock:
            total, held, width = self.total, len(self.rows), len(self.columns)
            n = min(max(0, total - max(0, cursor)), held, limit)
            rows = list(itertools.islice(reversed(self.rows), n))
        rows.reverse()
        return total, [r + (math.nan,) * (width - len(r)) for r in rows]

    def snapshot(self, window: float | None = None) -> dict[str, Any]:
        """Health, latest, counts, the alarm events and the re-initialisations (``resyncs``: rig time
        and reason): the last 20, or with ``window`` those of the last ``window`` s of rig time (at
        most 100); ``crossings``: the threshold crossings of that window (all held without one)."""
        with self._lock:
            alarms, resyncs = list(self.alarms)[-20:], list(self.resyncs)[-20:]
            crossings = self.crossings.since(-math.inf)
            if window is not None:
                t_end = max(self.rows[-1][0] if self.rows else -math.inf,
                            self.alarms[-1].get("t", -math.inf) if self.alarms else -math.inf)
                alarms = [e for e in self.alarms if e.get("t", t_end) >= t_end - window][-100:]
                resyncs = [e for e in self.resyncs if e["t"] >= t_end - window][-100:]
                crossings = self.crossings.since(t_end - window)
            return {"health": self.health, "latest": self.latest, "alarms": alarms, "resyncs": resyncs,
                    "crossings": crossings,
                    "alarm_counts": dict(self.alarm_counts), "messages": self.messages, "total_rows": self.total}

    def column(self, name: str) -> list[float]:
        k = self.columns.index(name)
        with self._lock:
            return [r[k] if k < len(r) else math.nan for r in self.rows]

    def recent(self, name: str, span: float) -> list[float]:
        """Values of column ``name`` in the rows of the last ``span`` s of rig time (empty if unknown)."""
        with self._lock:
            if name not in self.columns or not self.rows:
                return []
            k, t_end = self.columns.index(name), self.rows[-1][0]
            return [r[k] if k < len(r) else math.nan for r in self.rows if r[0] >= t_end - span]

    def to_csv(self, path: str | Path) -> Path:
        """All rows held, as CSV (header row, ``#`` comment lines with the units, data), the layout
        of result CSVs."""
        path = Path(path)
        with self._lock:
            cols, rows = list(self.columns or ["t"]), [self._padded(r) for r in self.rows]
        lines = [",".join(cols),
                 "# mbsd-twin demo: twin outputs per sample (t = rig time [s]; sim = model estimate, "
                 "meas = rig sensor, resid = meas - predicted (innovation) with angles wrapped, virt = virtual "
                 "sensors, est = filter estimates: nis, sigma (.sd), augmented unknowns, cusum statistics)",
                 "# units: " + ", ".join(f"{c} [{column_unit(c, self.units)}]" for c in cols)]
        lines += [",".join(repr(v) for v in r) for r in rows]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path
