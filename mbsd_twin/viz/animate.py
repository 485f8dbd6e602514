"""Animations of a result CSV (``mbsd-twin animate``): the mechanism's :class:`~.sketch.Sketch`
drawn by a :class:`~.scene.Scene` at every frame time. Poses come from the ``<body>.x``,
``<body>.y``, ``<body>.theta`` columns (interpolated at the frame times); a traced path takes every
row of the result in the time range, so it has the simulation's output rate, not the frame rate.
GIF through Pillow; MP4 through ffmpeg (on PATH, or the one shipped by ``imageio-ffmpeg``).
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..model.model import Mechanism
from .scene import Scene, Trace, trace_of
from .sketch import Pose, Shape, Sketch, place

__all__ = ["AnimationError", "AnimationOptions", "Pose", "Shape", "Sketch", "animate", "build_scene", "ffmpeg_path",
           "frame_times", "parse_trace", "place"]

Vec2 = tuple[float, float]


class AnimationError(ValueError):
    """The animation cannot be written (a missing tool, bad options); the message says what to do."""


def parse_trace(spec: str) -> tuple[str, Vec2]:
    """``body`` (its reference point) or ``body:x,y`` (a point in the body frame, m)."""
    body, _, rest = spec.partition(":")
    if not rest:
        return body.strip(), (0.0, 0.0)
    try:
        x, y = (float(v) for v in rest.split(","))
    except ValueError:
        raise AnimationError(f"--trace expects BODY or BODY:X,Y (metres, body frame), got {spec!r}") from None
    return body.strip(), (x, y)


def ffmpeg_path() -> str | None:
    """ffmpeg on PATH, else the binary shipped by imageio-ffmpeg, else None."""
    exe = shutil.which("ffmpeg")
    if exe:
        return exe
    try:
        import imageio_ffmpeg
    except ImportError:
        return None
    try:
        return str(imageio_ffmpeg.get_ffmpeg_exe())
    except RuntimeError:
        return None


def _writer(dest: Path, fps: float) -> Any:
    from matplotlib import animation, rcParams

    suffix = dest.suffix.lower()
    if suffix == ".gif":
        return animation.PillowWriter(fps=fps)  # type: ignore[arg-type]
    if suffix == ".mp4":
        exe = ffmpeg_path()
        if exe is None:
            raise AnimationError("writing MP4 needs ffmpeg, which was not found: install it (e.g. apt-get install "
                                 "ffmpeg, or pip install imageio-ffmpeg) or write a .gif instead")
        rcParams["animation.ffmpeg_path"] = exe
        return animation.FFMpegWriter(fps=fps, codec="libx264",  # type: ignore[arg-type]
                                      extra_args=["-pix_fmt", "yuv420p"])
    raise AnimationError(f"unknown animation format {dest.suffix!r}: use .gif or .mp4")


@dataclass
class AnimationOptions:
    fps: float = 25.0
    t_start: float | None = None
    t_end: float | None = None
    speed: float = 1.0  # simulated seconds per second of animation
    traces: tuple[str, ...] = ()
    forces: tuple[str, ...] = ()
    max_frames: int = 2000
    dpi: int = 90


def frame_times(time: np.ndarray, opts: AnimationOptions) -> np.ndarray:
    t0 = float(time[0]) if opts.t_start is None else opts.t_start
    t1 = float(time[-1]) if opts.t_end is None else opts.t_end
    if not (opts.fps > 0 and opts.speed > 0):
        raise AnimationError("--fps and --speed must be positive")
    if t1 < t0 or t0 > time[-1] or t1 < time[0]:
        raise AnimationError(f"the time range [{t0:g}, {t1:g}] s is outside the result ({time[0]:g} .. {time[-1]:g} s)")
    n = int(math.floor((t1 - t0) * opts.fps / opts.speed + 1e-9)) + 1
    if n > opts.max_frames:
        raise AnimationError(f"{n} frames exceed --max-frames {opts.max_frames}: shorten the time range, "
                             "lower --fps or raise --speed")
    return t0 + np.arange(n) * opts.speed / opts.fps


def _columns(table: Any, body: str) -> np.ndarray:
    try:
        return np.column_stack([np.asarray(table[f"{body}.{c}"]) for c in ("x", "y", "theta")])
    except KeyError:
        raise AnimationError(f"the result has no {body}.x/.y/.theta columns: animate needs every body's "
                             "pose (simulate, kinematics and inverse CSVs have them)") from None


def _poses(table: Any, sketch: Sketch, times: np.ndarray) -> dict[str, np.ndarray]:
    """Body → array (frames, 3) of x, y, theta interpolated at ``times``."""
    t = np.asarray(table["time"])
    return {sh.body: np.column_stack([np.interp(times, t, col) for col in _columns(table, sh.body).T])
            for sh in sketch.shapes}


def _traces(table: Any, sketch: Sketch, times: np.ndarray, specs: tuple[str, ...]) -> list[Trace]:
    """Each ``--trace`` at every result row from the first frame to the last."""
    t = np.asarray(table["time"])
    rows = (t >= times[0] - 1e-9 * max(1.0, abs(times[0]))) & (t <= times[-1] + 1e-9 * max(1.0, abs(times[-1])))
    out = []
    for spec in specs:
        body, point = parse_trace(spec)
        if body not in {sh.body for sh in sketch.shapes}:
            raise AnimationError(f"--trace: no body {body!r}; bodies: {', '.join(sh.body for sh in sketch.shapes)}")
        out.append(trace_of(_columns(table, body)[rows], t[rows], point, f"{body} ({point[0]:g}, {point[1]:g}) m"))
    return out


def build_scene(mech: Mechanism, table: Any, opts: AnimationOptions) -> Scene:
    """The :class:`Scene` of an animation (not drawn yet): frames at ``opts``' times, traces at
    every result row."""
    sketch = Sketch.from_mechanism(mech)
    times = frame_times(np.asarray(table["time"]), opts)
    traces = _traces(table, sketch, times, opts.traces)
    joints = {name for name, _, _ in sketch.joints}
    for name in opts.forces:
        if name not in joints or f"{name}.fx" not in table:
            raise AnimationError(f"--forces: no reaction columns {name}.fx/.fy "
                                 f"(joints drawn: {', '.join(sorted(joints))})")
    forces = {n: np.column_stack([np.interp(times, table["time"], table[f"{n}.f{c}"]) for c in "xy"])
              for n in opts.forces}
    return Scene(sketch, times, _poses(table, sketch, times), mech.name, traces, forces)


def animate(mech: Mechanism, table: Any, dest: str | Path, opts: AnimationOptions | None = None) -> Path:
    """Write an animation of ``table`` (a :class:`mbsd_twin.viz.tables.Table` or :class:`Result`)."""
    opts = opts or AnimationOptions()
    dest = Path(dest)
    writer = _writer(dest, opts.fps)
    scene = build_scene(mech, table, opts)
    dest.parent.mkdir(parents=True, exist_ok=True)
    scene.write(writer, dest, opts.dpi)
    return dest
