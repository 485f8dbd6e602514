"""Figures of result tables (``mbsd-twin plot``) and the axis conventions every figure of the project
shares: a unit in brackets on every axis, a title, the legend outside the data.

The tables come from :func:`mbsd_twin.viz.tables.read_csv` (result CSVs, the twin's row CSV, fmpy's
CSV, the history export). A time axis of Unix times (a rig's clock) is drawn as seconds since its
first value, which the label gives in UTC. matplotlib (the ``plot`` extra) is imported only when a
figure is drawn.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .tables import CsvError, Table, read_csv

__all__ = ["CsvError", "Table", "read_csv", "pyplot", "plot_csv", "plot_table", "table_figure", "legend_outside",
           "axis_label", "time_axis", "save"]

DEFAULT_PATTERNS = ("*.theta", "*.fx", "*.fy", "*.mz", "*.effort")
EPOCH_MIN = 1e8  # an x value beyond this many seconds is a Unix time (after 1973)
QUANTITY = {"s": "time", "rad": "angle", "rad/s": "angular speed", "rad/s2": "angular acceleration", "m": "position",
            "m/s": "speed", "m/s2": "acceleration", "N": "force", "N.m": "torque", "kg": "mass", "kg.m2": "inertia",
            "J": "energy", "W": "power", "1": "dimensionless", "σ": "statistic"}


def pyplot() -> Any:
    """matplotlib.pyplot with the non-interactive Agg backend (clear error without the extra)."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("plotting needs matplotlib: pip install 'mbsd-twin[plot]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def axis_label(what: str, unit: str) -> str:
    """``what [unit]``; an unknown unit says so."""
    return f"{what} [{unit}]" if unit else f"{what} (unit not given)"


def legend_outside(ax: Any, **kw: Any) -> Any:
    """The axes' legend to the right of its box, never over the data."""
    kw.setdefault("fontsize", 8)
    return ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **kw)


def time_axis(xs: NDArray[np.float64], name: str, unit: str) -> tuple[NDArray[np.float64], str]:
    """The values drawn and the label of an x column: Unix times as seconds since the first one. A
    column named ``time`` or ``t`` without a unit is in seconds (FMI's time, the rig's clock)."""
    unit = unit or ("s" if name in ("time", "t") else "")
    finite = xs[np.isfinite(xs)]
    if unit == "s" and len(finite) and finite[0] > EPOCH_MIN:
        start = datetime.fromtimestamp(float(finite[0]), UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        return xs - finite[0], f"{name}: seconds since {start} UTC [s]"
    return xs, axis_label(name, unit)


def group_by_unit(table: Table, names: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Columns grouped by unit, in first-appearance order (one axis per unit); a column of unknown
    unit gets an axis of its own."""
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(table.unit(n) or f"?{n}", []).append(n)
    return [(u if not u.startswith("?") else "", cols) for u, cols in groups.items()]


def table_figure(table: Table, names: Sequence[str], x: str = "time", title: str | None = None,
                 t_range: tuple[float | None, float | None] = (None, None)) -> Any:
    """One panel per unit with every column of ``names`` against column ``x`` (a figure)."""
    plt = pyplot()
    xs = table[x]
    keep = np.ones(len(xs), dtype=bool)
    if t_range[0] is not None:
        keep &= xs >= t_range[0]
    if t_range[1] is not None:
        keep &= xs <= t_range[1]
    if not keep.any():
        raise ValueError(f"{table.source}: no rows with {x} in the range {t_range}")
    groups = group_by_unit(table, [n for n in names if n != x])
    if not groups:
        raise ValueError(f"{table.source}: nothing to plot: give --columns")
    shown, xlabel = time_axis(xs, x, table.unit(x))
    fig, axes = plt.subplots(len(groups), 1, figsize=(11, 2.6 * len(groups) + 0.7), sharex=True, squeeze=False,
                             layout="constrained")
    for ax, (unit, cols) in zip(axes[:, 0], groups, strict=True):
        for c in cols:
            rows = keep & table.rows_of(c)
            ax.plot(shown[rows], table[c][rows], label=c, lw=1.2)
        what = QUANTITY.get(unit, "value") if unit else cols[0]
        ax.set_ylabel(axis_label(what, unit))
        ax.set_title(", ".join(cols) if len(cols) <= 3 else f"{len(cols)} columns in {unit}", fontsize=9, loc="left")
        ax.grid(True, alpha=0.3)
        legend_outside(ax)
    axes[-1, 0].set_xlabel(xlabel)
    fig.suptitle(title or Path(table.source).name, fontsize=11)
    return fig


def save(fig: Any, dest: str | Path, dpi: int = 110) -> Path:
    """Write ``fig`` (the format from the suffix: png, svg, pdf) and close it."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(dest, dpi=dpi)
    finally:
        pyplot().close(fig)
    return dest


def plot_table(table: Table, names: Sequence[str], dest: str | Path, x: str = "time",
               title: str | None = None, t_range: tuple[float | None, float | None] = (None, None)) -> Path:
    """:func:`table_figure` written to ``dest``."""
    return save(table_figure(table, names, x, title, t_range), dest)


def default_x(table: Table) -> str:
    """``time`` (results, fmpy) or ``t`` (the twin's rows, the history export); else the first column."""
    return next((c for c in ("time", "t") if c in table), table.columns[0])


def default_columns(table: Table, x: str) -> list[str]:
    """Every channel of a pivoted history export; else every angle, reaction and effort; else six."""
    rest = [c for c in table.columns if c != x]
    if table.present:
        return rest
    names = [c for c in rest if any(fnmatch.fnmatchcase(c, p) for p in DEFAULT_PATTERNS)]
    return names or rest[:6]


def plot_csv(path: str | Path, dest: str | Path, columns: Sequence[str] | None = None, x: str | None = None,
             title: str | None = None, t_range: tuple[float | None, float | None] = (None, None),
             units: Callable[[list[str]], dict[str, str]] | None = None) -> Path:
    """``mbsd-twin plot``: the columns (names or globs; default :func:`default_columns`) against ``x``
    (default :func:`default_x`); ``units(columns)`` adds to the file's own units (a history export
    has none)."""
    table = read_csv(path)
    if units is not None:
        table.units = {**units(table.columns), **table.units}
    x = x or default_x(table)
    if x not in table:
        raise KeyError(f"{path}: no column {x!r} for the x axis; columns are: {', '.join(table.columns)}")
    names = table.select(columns) if columns else default_columns(table, x)
    return plot_table(table, names, dest, x, title, t_range)
