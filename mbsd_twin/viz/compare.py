"""The FMU-against-native figure (``fmu validate --plot``, the demo's ``fmu_vs_native.png``): every
compared output in a grid of small panels, native solid and FMU dashed, each panel titled with the
output and its largest |FMU − native| (the two curves coincide to the eye when the FMU agrees)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .plotting import QUANTITY, axis_label, pyplot, save

COLUMNS = 4


def comparison_figure(rep: Any, names: Sequence[str] | None = None) -> Any:
    """The figure of a :class:`mbsd_twin.fmi.validation.ValidationReport` (default: every output)."""
    plt = pyplot()
    errors = {e.name: e for e in rep.errors}
    names = list(names or errors or [n for n in rep.fmu_result if n != "time"])
    cols = min(COLUMNS, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.1 * rows + 1.0), sharex=True, squeeze=False,
                             layout="constrained")
    t_f, t_n = rep.fmu_result["time"], rep.native_result["time"]
    for ax, name in zip(axes.flat, names, strict=False):
        err = errors.get(name)
        ax.plot(t_n, rep.native_result[name], lw=1.4, label="native solver")
        ax.plot(t_f, rep.fmu_result[name], "--", lw=1.0, label="FMU (fmpy)")
        diff = f"max |Δ| {err.max_abs:.2g} {err.unit}".rstrip() + ("" if err.ok else " OUT OF BAND") if err else ""
        ax.set_title(f"{name}\n{diff}", fontsize=7.5, color="black" if err is None or err.ok else "crimson")
        unit = err.unit if err else ""
        ax.set_ylabel(axis_label(QUANTITY.get(unit, "value"), unit), fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax in axes.flat[max(0, len(names) - cols):len(names)]:  # the lowest panel of each column
        ax.set_xlabel("time [s]", fontsize=7)
        ax.xaxis.set_tick_params(labelbottom=True)
    in_band = sum(e.ok for e in rep.errors)
    fig.suptitle(f"FMU (fmpy) vs native solver, {Path(rep.fmu).name}: {len(names)} outputs, "
                 f"{in_band}/{len(rep.errors)} within tolerance", fontsize=11)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=8)
    return fig


def plot_comparison(rep: Any, path: str | Path, names: Sequence[str] | None = None) -> Path:
    """:func:`comparison_figure` written to ``path``."""
    return save(comparison_figure(rep, names), path)
