"""Plots of result CSV files (``mbsd-twin plot``) and the figure helpers the demo report uses.

A result CSV (:mod:`mbsd_twin.solvers.results`) has one header row of column names, then ``#`` comment
lines (one of them ``# units: name [unit], ...``), then the data rows. Any CSV with a header row
and numeric rows reads as well (units then empty). matplotlib (the ``plot`` extra) is imported
only when a figure is drawn.
"""

from __future__ import annotations

import fnmatch
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

DEFAULT_PATTERNS = ("*.theta", "*.fx", "*.fy", "*.mz", "*.effort")
_UNIT = re.compile(r"\s*(.+?)\s*\[([^\]]*)\]\s*$")


@dataclass
class Table:
    """Named columns of a CSV file; ``table["crank.theta"]`` is a column."""

    columns: list[str]
    data: NDArray[np.float64]
    units: dict[str, str] = field(default_factory=dict)
    comments: list[str] = field(default_factory=list)
    source: str = ""

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


def read_csv(path: str | Path) -> Table:
    """Read a result CSV: header row, ``#`` comment lines, numeric rows."""
    text = Path(path).read_text(encoding="utf-8")
    lines = text.splitlines()
    if not lines or lines[0].startswith("#"):
        raise ValueError(f"{path}: the first line must be the header row of column names")
    columns = [c.strip() for c in lines[0].split(",")]
    comments = [ln[1:].strip() for ln in lines[1:] if ln.startswith("#")]
    body = "\n".join(ln for ln in lines[1:] if ln.strip() and not ln.startswith("#"))
    data = np.loadtxt(io.StringIO(body), delimiter=",", ndmin=2) if body else np.empty((0, len(columns)))
    if data.shape[1] != len(columns):
        raise ValueError(f"{path}: {data.shape[1]} values per row but {len(columns)} column names")
    return Table(columns, data, _units(comments), comments, str(path))


def pyplot() -> Any:
    """matplotlib.pyplot with the non-interactive Agg backend (clear error without the extra)."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("plotting needs matplotlib: pip install 'mbsd-twin[plot]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def group_by_unit(table: Table, names: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Columns grouped by unit, in first-appearance order (one axis per unit)."""
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(table.unit(n), []).append(n)
    return list(groups.items())


def plot_table(table: Table, names: Sequence[str], dest: str | Path, x: str = "time",
               title: str | None = None, t_range: tuple[float | None, float | None] = (None, None)) -> Path:
    """One panel per unit with every column of ``names`` against column ``x``; written to ``dest``
    (format from its suffix: png, svg, pdf)."""
    plt = pyplot()
    xs = table[x]
    keep = np.ones(len(xs), dtype=bool)
    if t_range[0] is not None:
        keep &= xs >= t_range[0]
    if t_range[1] is not None:
        keep &= xs <= t_range[1]
    if not keep.any():
        raise ValueError(f"no rows with {x} in the range {t_range}")
    groups = group_by_unit(table, [n for n in names if n != x])
    if not groups:
        raise ValueError("nothing to plot: give --columns")
    fig, axes = plt.subplots(len(groups), 1, figsize=(9, 2.6 * len(groups) + 0.6), sharex=True, squeeze=False)
    for ax, (unit, cols) in zip(axes[:, 0], groups, strict=True):
        for c in cols:
            ax.plot(xs[keep], table[c][keep], label=c, lw=1.2)
        ax.set_ylabel(f"[{unit}]" if unit else "value")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper right", ncol=min(3, len(cols)))
    axes[-1, 0].set_xlabel(f"{x} [{table.unit(x)}]" if table.unit(x) else x)
    fig.suptitle(title or Path(table.source).name, fontsize=10)
    fig.tight_layout()
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dest, dpi=110)
    plt.close(fig)
    return dest


def plot_csv(path: str | Path, dest: str | Path, columns: Sequence[str] | None = None, x: str = "time",
             title: str | None = None, t_range: tuple[float | None, float | None] = (None, None)) -> Path:
    """``mbsd-twin plot``: the columns (names or globs; default every angle, reaction and effort)."""
    table = read_csv(path)
    if x not in table:
        raise KeyError(f"{path}: no column {x!r} for the x axis")
    if columns:
        names = table.select(columns)
    else:
        names = [c for c in table.columns if any(fnmatch.fnmatchcase(c, p) for p in DEFAULT_PATTERNS)]
        names = names or [c for c in table.columns if c != x][:6]
    return plot_table(table, names, dest, x, title, t_range)
