"""A drawing of one pose of a mechanism (``mbsd-twin check --plot``): the animation's
:class:`~.scene.Scene` with one frame, saved as an image."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..model.model import Mechanism
from .scene import Scene
from .sketch import Sketch


def pose_scene(mech: Mechanism, pose: Sequence[tuple[str, float, float, float]], title: str = "") -> Scene:
    """The scene of ``mech`` with each body at (body, x [m], y [m], θ [rad]), drawn."""
    poses = {b: np.array([[x, y, th]]) for b, x, y, th in pose}
    scene = Scene(Sketch.from_mechanism(mech), np.zeros(1), poses, title or f"{mech.name}: assembled pose")
    scene.draw(0)
    scene.clock.set_text("")  # a pose, not a time
    return scene


def plot_pose(mech: Mechanism, pose: Sequence[tuple[str, float, float, float]], dest: str | Path,
              title: str = "", dpi: int = 100) -> Path:
    """Draw ``mech`` in ``pose`` (see :func:`pose_scene`) into the image ``dest`` (the format from
    its suffix, e.g. .png)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    scene = pose_scene(mech, pose, title)
    try:
        scene.fig.savefig(dest, dpi=dpi)
    finally:
        scene.close()
    return dest
