"""The matplotlib drawing of a :class:`~.sketch.Sketch` through a sequence of poses: bodies with
their names, joints, pivots, guides, springs and dampers, traced paths and reaction arrows.
:class:`Scene` holds the artists; ``draw(k)`` puts them in frame ``k`` (``check --plot`` draws one
frame, ``animate`` hands every frame to a movie writer)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .plotting import pyplot
from .sketch import Sketch, Vec2, place


@dataclass
class Trace:
    """The path of a body point at every output row of the result (not only at the frames)."""

    label: str
    t: np.ndarray  # row times [s]
    xy: np.ndarray  # (rows, 2) world positions [m]


def _joined(lines: Sequence[Sequence[Sequence[float]]]) -> tuple[list[float], list[float]]:
    """Polylines as one x, y pair of lists, NaN between them (one Line2D per spring)."""
    xs: list[float] = []
    ys: list[float] = []
    for line in lines:
        xs += [p[0] for p in line] + [math.nan]
        ys += [p[1] for p in line] + [math.nan]
    return xs, ys


def _limits(sketch: Sketch, poses: Mapping[str, np.ndarray], traces: Sequence[Trace]) -> tuple[float, ...]:
    xs, ys = [p[0] for p in sketch.pivots], [p[1] for p in sketch.pivots]
    for sh in sketch.shapes:
        for p in sh.points:
            for k in range(0, len(poses[sh.body]), max(1, len(poses[sh.body]) // 200)):
                x, y = place((poses[sh.body][k][0], poses[sh.body][k][1], poses[sh.body][k][2]), p)
                xs.append(x)
                ys.append(y)
    for tr in traces:
        xs += [float(np.nanmin(tr.xy[:, 0])), float(np.nanmax(tr.xy[:, 0]))] if len(tr.xy) else []
        ys += [float(np.nanmin(tr.xy[:, 1])), float(np.nanmax(tr.xy[:, 1]))] if len(tr.xy) else []
    m = 0.15 * sketch.scale
    return min(xs) - m, max(xs) + m, min(ys) - m, max(ys) + m


class Scene:
    """Figure and artists of a mechanism drawn at ``times`` in ``poses`` (body → (frames, 3))."""

    def __init__(self, sketch: Sketch, times: np.ndarray, poses: Mapping[str, np.ndarray], title: str,
                 traces: Sequence[Trace] = (), forces: Mapping[str, np.ndarray] | None = None) -> None:
        plt = pyplot()
        self.sketch, self.times, self.poses, self.traces = sketch, times, poses, list(traces)
        self.forces = dict(forces or {})
        self.fig, self.ax = plt.subplots(figsize=(6.4, 4.8))  # a fixed layout: the same for every frame
        ax = self.ax
        x0, x1, y0, y1 = _limits(sketch, poses, self.traces)
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
        ax.set_aspect("equal")
        ax.grid(True, alpha=0.25)
        ax.set_xlabel("x [m]")
        ax.set_ylabel("y [m]")
        ax.set_title(title, fontsize=10)
        for p, a in sketch.guides:
            L = 4 * sketch.scale
            ax.plot([p[0] - a[0] * L, p[0] + a[0] * L], [p[1] - a[1] * L, p[1] + a[1] * L], color="0.55", lw=3,
                    zorder=1)
        if sketch.pivots:
            ax.plot(*zip(*sketch.pivots, strict=True), "^", color="0.3", ms=11, zorder=2)
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        self.bodies = [ax.fill([0], [0], alpha=0.35, fc=colors[i % len(colors)], ec=colors[i % len(colors)], lw=2.5,
                               zorder=3)[0] for i, _ in enumerate(sketch.shapes)]
        self.names = [ax.text(0, 0, sh.body, fontsize=8, ha="center", va="center", zorder=7,
                              bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.75})
                      for sh in sketch.shapes]
        self.springs = [ax.plot([], [], "-", color="0.15", lw=1.1, zorder=4,
                                label=f"{s.name} ({s.kind.replace('_', '-')})")[0] for s in sketch.springs]
        self.spring_names = [ax.text(0, 0, s.name, fontsize=7, color="0.15", zorder=7) for s in sketch.springs]
        (self.joint_dots,) = ax.plot([], [], "o", mfc="white", mec="black", ms=6, zorder=5)
        self.trace_lines = [ax.plot([], [], "-", lw=1, label=f"path of {tr.label}", zorder=4)[0] for tr in self.traces]
        fmax = max([float(np.max(np.hypot(f[:, 0], f[:, 1]))) for f in self.forces.values()] + [1e-12])
        self.fscale = 0.6 * sketch.scale / fmax
        self.arrows: list[Any] = []
        self.clock = ax.text(0.02, 0.96, "", transform=ax.transAxes, va="top", fontsize=9)
        self.legend = None
        if self.traces or self.springs:  # under the axes, in the figure: never over the drawing
            self.fig.subplots_adjust(bottom=0.2)
            self.legend = self.fig.legend(loc="lower center", ncol=2, fontsize=7, frameon=False)

    def draw(self, k: int) -> None:
        """Put every artist in frame ``k``."""
        sk, t = self.sketch, float(self.times[k])
        pose = {b: (float(v[k][0]), float(v[k][1]), float(v[k][2])) for b, v in self.poses.items()}
        for poly, name, sh in zip(self.bodies, self.names, self.sketch.shapes, strict=True):
            pts = sk.outline(sh, pose[sh.body])
            poly.set_xy(pts if len(pts) > 2 else [*pts, *reversed(pts)])
            name.set_position(tuple(np.mean(pts, axis=0)))
        for line, label, spring in zip(self.springs, self.spring_names, sk.springs, strict=True):
            xs, ys = _joined(sk.spring_world(spring, pose))
            line.set_data(xs, ys)
            mid = (float(np.nanmean(xs)), float(np.nanmean(ys))) if len(xs) > 1 else (math.nan, math.nan)
            label.set_position(mid)
        jp = [place(pose[b], p) for _, b, p in sk.joints if b in pose] or [(math.nan, math.nan)]
        self.joint_dots.set_data(*zip(*jp, strict=True))
        for line, tr in zip(self.trace_lines, self.traces, strict=True):
            upto = tr.t <= t + 1e-9 * max(1.0, abs(t))
            line.set_data(tr.xy[upto, 0], tr.xy[upto, 1])
        for a in self.arrows:
            a.remove()
        self.arrows = [a for name, f in self.forces.items() for a in self._arrow(pose, name, f[k])]
        self.clock.set_text(f"t = {t:.3f} s")

    def _arrow(self, pose: Mapping[str, tuple[float, float, float]], name: str, f: np.ndarray) -> list[Any]:
        body, p = next((b, q) for n, b, q in self.sketch.joints if n == name)
        x, y = place(pose.get(body, (0.0, 0.0, 0.0)), p)
        tip = (x + f[0] * self.fscale, y + f[1] * self.fscale)
        arrow = self.ax.annotate("", xy=tip, xytext=(x, y), zorder=6,
                                 arrowprops={"arrowstyle": "-|>", "color": "crimson", "lw": 1.8})
        text = self.ax.text(*tip, f" {name} {math.hypot(f[0], f[1]):.3g} N", fontsize=7, color="crimson", zorder=6)
        return [arrow, text]

    def write(self, writer: Any, dest: Path, dpi: int) -> None:
        """Every frame through a matplotlib movie ``writer``; the figure is closed."""
        try:
            with writer.saving(self.fig, str(dest), dpi):
                for k in range(len(self.times)):
                    self.draw(k)
                    writer.grab_frame()
        finally:
            self.close()

    def save(self, dest: Path, dpi: int, k: int = 0) -> None:
        """Frame ``k`` as an image; the figure is closed."""
        self.draw(k)
        try:
            self.fig.savefig(dest, dpi=dpi)
        finally:
            self.close()

    def close(self) -> None:
        pyplot().close(self.fig)


def trace_of(body_poses: np.ndarray, t: np.ndarray, point: Vec2, label: str) -> Trace:
    """The world path of body-frame ``point`` over rows of (x, y, theta)."""
    x, y, th = body_poses[:, 0], body_poses[:, 1], body_poses[:, 2]
    c, s = np.cos(th), np.sin(th)
    return Trace(label, t, np.column_stack([x + c * point[0] - s * point[1], y + s * point[0] + c * point[1]]))
