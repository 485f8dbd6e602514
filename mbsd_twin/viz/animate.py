"""Drawings of a mechanism in a pose (:class:`Sketch`, shared with the dashboard) and animations of a
result CSV (``mbsd-twin animate``).

A body is drawn through its attachment points (joint, driver and load points, in the body frame;
its centre of mass too when it has fewer than two): a bar for two points, a plate for three or
more, a small block for one. Ground attachment points are drawn as fixed pivots and ground-fixed
prismatic / point-on-line joints as guide lines. Cam surfaces are not drawn. Poses come from the
``<body>.x``, ``<body>.y``, ``<body>.theta`` columns. GIF through Pillow; MP4 through ffmpeg (on
PATH, or the one shipped by ``imageio-ffmpeg``).
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..model.model import GROUND, Mechanism

Vec2 = tuple[float, float]
Pose = tuple[float, float, float]  # x [m], y [m], theta [rad]


class AnimationError(ValueError):
    """The animation cannot be written (a missing tool, bad options); the message says what to do."""


def _dedupe(points: Sequence[Vec2], tol: float = 1e-9) -> list[Vec2]:
    out: list[Vec2] = []
    for p in points:
        if all(math.hypot(p[0] - q[0], p[1] - q[1]) > tol for q in out):
            out.append((float(p[0]), float(p[1])))
    return out


def _attachments(mech: Mechanism) -> dict[str, list[Vec2]]:
    pts: dict[str, list[Vec2]] = {b.name: [] for b in mech.bodies}
    pts[GROUND] = []
    for j in mech.joints:
        if j.type in ("revolute", "prismatic", "point_on_line", "fixed"):
            for body, p in zip(j.bodies, j.points, strict=False):
                pts.setdefault(body, []).append(p)
    for d in mech.drivers:
        if d.type in ("coordinate", "distance"):
            for body, p in zip(d.bodies, d.points, strict=False):
                pts.setdefault(body, []).append(p)
    for ld in mech.loads:
        if ld.type in ("force", "spring_damper"):
            for body, p in zip(ld.bodies, ld.points, strict=False):
                pts.setdefault(body, []).append(p)
    return pts


@dataclass(frozen=True)
class Shape:
    body: str
    kind: str  # "bar", "plate" or "block"
    points: tuple[Vec2, ...]  # body frame


@dataclass(frozen=True)
class Sketch:
    """What to draw of a mechanism, in body frames; :meth:`world` places it in a pose."""

    shapes: tuple[Shape, ...]
    joints: tuple[tuple[str, str, Vec2], ...]  # (joint, body, point on that body) for markers / forces
    pivots: tuple[Vec2, ...]  # ground attachment points
    guides: tuple[tuple[Vec2, Vec2], ...]  # ground-fixed guide lines (point, unit axis)
    scale: float  # a characteristic length [m]

    @classmethod
    def from_mechanism(cls, mech: Mechanism) -> Sketch:
        att = _attachments(mech)
        shapes = []
        for b in mech.bodies:
            pts = _dedupe(att.get(b.name, []))
            if len(pts) < 2:
                pts = _dedupe([*pts, b.cg])
            if len(pts) >= 3:
                cx, cy = np.mean(pts, axis=0)
                pts.sort(key=lambda p: math.atan2(p[1] - cy, p[0] - cx))
            shapes.append(Shape(b.name, "bar" if len(pts) == 2 else "plate" if len(pts) > 2 else "block",
                                tuple(pts)))
        joints = tuple((j.name, j.bodies[1], j.points[1]) for j in mech.joints
                       if j.type in ("revolute", "prismatic", "point_on_line", "fixed"))
        guides = tuple((j.points[0], _unit(j.axis or (1.0, 0.0))) for j in mech.joints
                       if j.type in ("prismatic", "point_on_line") and j.bodies[0] == GROUND)
        reach = [math.hypot(*b.position) + max((math.hypot(*p) for p in att.get(b.name, [])), default=0.0)
                 for b in mech.bodies]
        reach += [math.hypot(*p) for p in att[GROUND]]
        return cls(tuple(shapes), joints, tuple(_dedupe(att[GROUND])), guides, max([*reach, 1e-3]))

    def world(self, poses: Mapping[str, Pose]) -> dict[str, Any]:
        """World coordinates of every shape, joint marker, pivot and guide (JSON-ready)."""
        def at(body: str, p: Vec2) -> list[float]:
            return list(place(poses.get(body, (0.0, 0.0, 0.0)), p))

        bodies = []
        for sh in self.shapes:
            pts = list(sh.points)
            if sh.kind == "block":
                h = 0.06 * self.scale
                px, py = pts[0]
                pts = [(px - h, py - h / 1.6), (px + h, py - h / 1.6), (px + h, py + h / 1.6), (px - h, py + h / 1.6)]
            bodies.append({"body": sh.body, "kind": sh.kind, "pts": [at(sh.body, p) for p in pts]})
        return {"bodies": bodies,
                "joints": [[name, *at(body, p)] for name, body, p in self.joints],
                "pivots": [list(p) for p in self.pivots],
                "guides": [[[p[0] - a[0] * self.scale * 2, p[1] - a[1] * self.scale * 2],
                            [p[0] + a[0] * self.scale * 2, p[1] + a[1] * self.scale * 2]] for p, a in self.guides],
                "scale": self.scale}


def _unit(v: Sequence[float]) -> Vec2:
    n = math.hypot(v[0], v[1]) or 1.0
    return (v[0] / n, v[1] / n)


def place(pose: Pose, p: Vec2) -> tuple[float, float]:
    """World position of body-frame point ``p`` of a body in ``pose``."""
    x, y, th = pose
    c, s = math.cos(th), math.sin(th)
    return x + c * p[0] - s * p[1], y + s * p[0] + c * p[1]


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


def _poses(table: Any, sketch: Sketch, times: np.ndarray) -> dict[str, np.ndarray]:
    """Body → array (frames, 3) of x, y, theta interpolated at ``times``."""
    t = table["time"]
    out = {}
    for sh in sketch.shapes:
        try:
            out[sh.body] = np.column_stack([np.interp(times, t, table[f"{sh.body}.{c}"]) for c in ("x", "y", "theta")])
        except KeyError:
            raise AnimationError(f"the result has no {sh.body}.x/.y/.theta columns: animate needs every body's "
                                 "pose (simulate, kinematics and inverse CSVs have them)") from None
    return out


def animate(mech: Mechanism, table: Any, dest: str | Path, opts: AnimationOptions | None = None) -> Path:
    """Write an animation of ``table`` (a :class:`mbsd_twin.viz.plotting.Table` or :class:`Result`)."""
    opts = opts or AnimationOptions()
    dest = Path(dest)
    sketch = Sketch.from_mechanism(mech)
    times = frame_times(np.asarray(table["time"]), opts)
    writer = _writer(dest, opts.fps)
    traces = [parse_trace(s) for s in opts.traces]
    for body, _ in traces:
        if body not in {sh.body for sh in sketch.shapes}:
            raise AnimationError(f"--trace: no body {body!r} in {mech.name}")
    joints = {name for name, _, _ in sketch.joints}
    for name in opts.forces:
        if name not in joints or f"{name}.fx" not in table:
            raise AnimationError(f"--forces: no reaction columns {name}.fx/.fy "
                                 f"(joints drawn: {', '.join(sorted(joints))})")
    forces = {n: np.column_stack([np.interp(times, table["time"], table[f"{n}.f{c}"]) for c in "xy"])
              for n in opts.forces}
    dest.parent.mkdir(parents=True, exist_ok=True)
    render(sketch, times, _poses(table, sketch, times), traces, forces, writer, dest, opts.dpi, mech.name)
    return dest


def _limits(sketch: Sketch, poses: Mapping[str, np.ndarray]) -> tuple[float, float, float, float]:
    xs, ys = [p[0] for p in sketch.pivots], [p[1] for p in sketch.pivots]
    for sh in sketch.shapes:
        for p in sh.points:
            for k in range(0, len(poses[sh.body]), max(1, len(poses[sh.body]) // 200)):
                x, y = place((poses[sh.body][k][0], poses[sh.body][k][1], poses[sh.body][k][2]), p)
                xs.append(x)
                ys.append(y)
    m = 0.15 * sketch.scale
    return min(xs) - m, max(xs) + m, min(ys) - m, max(ys) + m


def render(sketch: Sketch, times: np.ndarray, poses: Mapping[str, np.ndarray], traces: Sequence[tuple[str, Vec2]],
           forces: Mapping[str, np.ndarray], writer: Any, dest: Path, dpi: int, title: str) -> None:
    """Draw every frame with matplotlib and hand it to ``writer``."""
    from .plotting import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    x0, x1, y0, y1 = _limits(sketch, poses)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal")
    ax.grid(True, alpha=0.25)
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    for p, a in sketch.guides:
        L = 4 * sketch.scale
        ax.plot([p[0] - a[0] * L, p[0] + a[0] * L], [p[1] - a[1] * L, p[1] + a[1] * L], color="0.55", lw=3, zorder=1)
    if sketch.pivots:
        ax.plot(*zip(*sketch.pivots, strict=True), "^", color="0.3", ms=11, zorder=2)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    bodies = [ax.fill([0], [0], alpha=0.35, fc=colors[i % len(colors)], ec=colors[i % len(colors)], lw=2.5,
                      zorder=3)[0] for i, _ in enumerate(sketch.shapes)]
    (joint_dots,) = ax.plot([], [], "o", mfc="white", mec="black", ms=6, zorder=5)
    trace_lines = [ax.plot([], [], "-", lw=1, label=f"trace {b} {p}", zorder=4)[0] for b, p in traces]
    fmax = max([float(np.max(np.hypot(f[:, 0], f[:, 1]))) for f in forces.values()] + [1e-12])
    fscale = 0.6 * sketch.scale / fmax
    arrows: list[Any] = []
    label = ax.text(0.02, 0.96, "", transform=ax.transAxes, va="top", fontsize=9)
    ax.set_title(title, fontsize=10)
    if traces:
        ax.legend(fontsize=7, loc="lower right")
    path = {i: [] for i in range(len(traces))}  # type: dict[int, list[tuple[float, float]]]
    with writer.saving(fig, str(dest), dpi):
        for k, t in enumerate(times):
            pose = {b: tuple(v[k]) for b, v in poses.items()}
            for poly, sh in zip(bodies, sketch.shapes, strict=True):
                pts = Sketch((sh,), (), (), (), sketch.scale).world(pose)["bodies"][0]["pts"]
                poly.set_xy(pts if len(pts) > 2 else [*pts, *reversed(pts)])
            jp = [place(pose[b], p) for _, b, p in sketch.joints if b in pose] or [(math.nan, math.nan)]
            joint_dots.set_data(*zip(*jp, strict=True))
            for i, (b, p) in enumerate(traces):
                path[i].append(place(pose[b], p))
                trace_lines[i].set_data(*zip(*path[i], strict=True))
            for a in arrows:
                a.remove()
            arrows = [a for name, f in forces.items() for a in _arrow(ax, sketch, pose, name, f[k], fscale)]
            label.set_text(f"t = {t:.3f} s")
            writer.grab_frame()
    plt.close(fig)


def _arrow(ax: Any, sketch: Sketch, pose: Mapping[str, Pose], name: str, f: np.ndarray, scale: float) -> list[Any]:
    body, p = next((b, q) for n, b, q in sketch.joints if n == name)
    x, y = place(pose.get(body, (0.0, 0.0, 0.0)), p)
    tip = (x + f[0] * scale, y + f[1] * scale)
    arrow = ax.annotate("", xy=tip, xytext=(x, y), zorder=6,
                        arrowprops={"arrowstyle": "-|>", "color": "crimson", "lw": 1.8})
    text = ax.text(*tip, f" {name} {math.hypot(f[0], f[1]):.3g} N", fontsize=7, color="crimson", zorder=6)
    return [arrow, text]
