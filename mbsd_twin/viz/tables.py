"""Reading the CSV files the project writes, and fmpy's, into a :class:`Table` of named columns.

Layouts read:

- a result CSV (:mod:`mbsd_twin.solvers.results`) and the twin's row CSV (the demo's ``twin.csv``,
  :meth:`mbsd_twin.dashboard.store.Store.to_csv`): one header row of column names, ``#`` comment
  lines (one of them ``# units: name [unit], ...``), then the data rows;
- fmpy's result CSV (``fmpy.util.write_csv``, ``fmpy simulate --output-file``) and the FMU
  validation's ``fmu.csv`` / ``native.csv``: a header row (names may be quoted), numeric rows
  (fmpy writes booleans as ``True`` / ``False``: read as 1 / 0);
- the history export (``mbsd-twin twin history``, :mod:`mbsd_twin.storage.history.export`): one row
  per sample ``asset, channel, t, value, sigma``, pivoted here to one column per channel on the
  union of the sample times (:attr:`Table.present` says which rows each channel has a sample in).

Any failure to read raises :class:`CsvError` naming the file (and the line).
"""

from __future__ import annotations

import csv
import fnmatch
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..storage.history.export import COLUMNS as HISTORY_COLUMNS

_UNIT = re.compile(r"\s*(.+?)\s*\[([^\]]*)\]\s*$")
_WORDS = {"true": 1.0, "false": 0.0, "": math.nan}


class CsvError(ValueError):
    """The file cannot be read as a table; the message names the file (and the line)."""


@dataclass
class Table:
    """Named columns of a CSV file; ``table["crank.theta"]`` is a column."""

    columns: list[str]
    data: NDArray[np.float64]
    units: dict[str, str] = field(default_factory=dict)
    comments: list[str] = field(default_factory=list)
    source: str = ""
    present: dict[str, NDArray[np.bool_]] = field(default_factory=dict)  # pivoted: rows with a sample

    def __getitem__(self, name: str) -> NDArray[np.float64]:
        try:
            return self.data[:, self.columns.index(name)]
        except ValueError:
            raise KeyError(f"{self.source}: no column {name!r}; columns are: {', '.join(self.columns)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self.columns

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def unit(self, name: str) -> str:
        return self.units.get(name, "")

    def rows_of(self, name: str) -> NDArray[np.bool_]:
        """The rows holding a sample of ``name`` (every row, except in a pivoted history export)."""
        return self.present.get(name, np.ones(len(self), dtype=bool))

    def select(self, patterns: Sequence[str]) -> list[str]:
        """Column names matching any of ``patterns`` (exact names or globs), in the given order."""
        out: list[str] = []
        for pat in patterns:
            hits = [c for c in self.columns if fnmatch.fnmatchcase(c, pat)]
            if not hits:
                raise KeyError(f"{self.source}: no column matches {pat!r}; columns are: {', '.join(self.columns)}")
            out += [h for h in hits if h not in out]
        return out


def _units(comments: list[str]) -> dict[str, str]:
    for line in comments:
        if line.startswith("units:"):
            out = {}
            for part in line[len("units:"):].split(","):
                m = _UNIT.match(part)
                if m:
                    out[m.group(1)] = m.group(2)
            return out
    return {}


def _number(cell: str, path: str | Path, line: int, column: str) -> float:
    try:
        return float(cell)
    except ValueError:
        word = _WORDS.get(cell.strip().lower())
        if word is None:
            raise CsvError(f"{path}, line {line}: column {column!r} holds {cell[:40]!r}, not a number") from None
        return word


def _rows(lines: list[tuple[int, str]], columns: list[str], path: str | Path) -> NDArray[np.float64]:
    body = "\n".join(text for _, text in lines)
    if not body:
        return np.empty((0, len(columns)))
    data: NDArray[np.float64] | None
    try:  # the fast path: plain numbers (nan and inf included)
        data = np.loadtxt(io.StringIO(body), delimiter=",", ndmin=2)
    except ValueError:
        data = None
    if data is None or data.shape[1] != len(columns):
        out = []
        for number, row in zip((n for n, _ in lines), csv.reader(text for _, text in lines), strict=True):
            if len(row) != len(columns):
                raise CsvError(f"{path}, line {number}: {len(row)} values but {len(columns)} column names")
            out.append([_number(c, path, number, name) for c, name in zip(row, columns, strict=True)])
        data = np.array(out, dtype=float).reshape(len(out), len(columns))
    return data


def _pivot(path: str | Path, lines: list[tuple[int, str]]) -> Table:
    """A history export (one row per sample) as one column per channel on the union of the times."""
    chans: dict[str, tuple[list[float], list[float]]] = {}
    assets = set()
    for number, row in zip((n for n, _ in lines), csv.reader(text for _, text in lines), strict=True):
        if len(row) != len(HISTORY_COLUMNS):
            raise CsvError(f"{path}, line {number}: {len(row)} values but {len(HISTORY_COLUMNS)} column names")
        assets.add(row[0])
        t, v = chans.setdefault(row[1], ([], []))
        t.append(_number(row[2], path, number, "t"))
        v.append(_number(row[3], path, number, "value"))
    times = np.unique(np.concatenate([np.array(t) for t, _ in chans.values()])) if chans else np.empty(0)
    data, present = np.full((len(times), len(chans) + 1), math.nan), {}
    data[:, 0] = times
    for k, (name, (t, v)) in enumerate(chans.items(), start=1):
        idx = np.searchsorted(times, np.array(t))
        data[idx, k] = v
        present[name] = np.zeros(len(times), dtype=bool)
        present[name][idx] = True
    comment = f"history export of asset {', '.join(sorted(assets))}, pivoted: one column per channel"
    return Table(["t", *chans], data, {"t": "s"}, [comment], str(path), present)


def read_csv(path: str | Path) -> Table:
    """Read any of the layouts of the module docstring; :class:`CsvError` naming the file otherwise."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CsvError(f"{path}: not a text CSV file (byte {exc.start} is not UTF-8)") from None
    except OSError as exc:
        raise CsvError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    lines = text.splitlines()
    if not lines or lines[0].startswith("#") or not lines[0].strip():
        raise CsvError(f"{path}: the first line must be the header row of column names")
    columns = [c.strip() for c in next(csv.reader([lines[0]]))]
    comments = [ln[1:].strip() for ln in lines[1:] if ln.startswith("#")]
    body = [(k, ln) for k, ln in enumerate(lines[1:], start=2) if ln.strip() and not ln.startswith("#")]
    if tuple(columns) == HISTORY_COLUMNS:
        return _pivot(path, body)
    if len(set(columns)) != len(columns):
        dup = sorted({c for c in columns if columns.count(c) > 1})
        raise CsvError(f"{path}: the header names column(s) {', '.join(map(repr, dup))} more than once")
    return Table(columns, _rows(body, columns, path), _units(comments), comments, str(path))
