"""Shared helpers of the example scripts: the output folder argument, mechanism paths, figures.

Every script is run as ``python examples/scripts/<name>.py OUTPUT_FOLDER`` and has a
``main(out: Path) -> dict[str, float]`` that writes its figure(s) into ``out`` and returns the key
numbers it printed (the test suite calls it with a temporary folder).
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import mbsd_twin as mt  # noqa: E402

MECHANISMS = Path(__file__).resolve().parents[1] / "mechanisms"


def load(name: str) -> mt.Mechanism:
    return mt.load_mechanism(MECHANISMS / name)


def output_folder(argv: list[str] | None = None) -> Path:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.exit(f"usage: python {Path(sys.argv[0]).name} OUTPUT_FOLDER")
    out = Path(args[0])
    out.mkdir(parents=True, exist_ok=True)
    return out


def figure(rows: int, cols: int = 1, size: tuple[float, float] = (8.0, 6.0)) -> tuple[Figure, object]:
    fig, axes = plt.subplots(rows, cols, figsize=size, squeeze=False)
    return fig, axes


def save(fig: Figure, out: Path, name: str) -> Path:
    path = out / name
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def report(numbers: dict[str, float]) -> dict[str, float]:
    for key, value in numbers.items():
        print(f"{key:40s} {value: .6g}")
    return numbers
