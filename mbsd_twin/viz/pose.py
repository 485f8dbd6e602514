"""A drawing of one pose of a mechanism (``mbsd-twin check --plot``): the animation's renderer
(:func:`.animate.render`) with one frame, saved as an image instead of grabbed into a movie."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..model.model import Mechanism
from .animate import Sketch, render


class _OneFrame:
    """The writer interface ``render`` uses, saving its single frame to the destination file."""

    def __init__(self) -> None:
        self._fig: Any = None
        self._dest, self._dpi = "", 100

    @contextmanager
    def saving(self, fig: Any, dest: str, dpi: int) -> Iterator[None]:
        self._fig, self._dest, self._dpi = fig, dest, dpi
        yield

    def grab_frame(self) -> None:
        self._fig.savefig(self._dest, dpi=self._dpi)


def plot_pose(mech: Mechanism, pose: Sequence[tuple[str, float, float, float]], dest: str | Path,
              title: str = "", dpi: int = 100) -> Path:
    """Draw ``mech`` with each body at (body, x [m], y [m], θ [rad]) into the image ``dest``
    (the format from its suffix, e.g. .png)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    poses = {b: np.array([[x, y, th]]) for b, x, y, th in pose}
    render(Sketch.from_mechanism(mech), np.zeros(1), poses, (), {}, _OneFrame(), dest, dpi,
           title or f"{mech.name}: assembled pose")
    return dest
