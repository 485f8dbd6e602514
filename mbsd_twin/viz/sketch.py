"""What a drawing of a mechanism shows, in body frames (:class:`Sketch`), placed in a pose by
:meth:`Sketch.world` — shared by ``check --plot``, ``animate`` and the dashboard.

A body is drawn through its attachment points (joint, driver and load points, in the body frame;
its centre of mass too when it has fewer than two): a bar for two points, a plate for three or
more, a small block for one, with its name. Ground attachment points are drawn as fixed pivots and
ground-fixed prismatic / point-on-line joints as guide lines. Springs and dampers are drawn between
their attachment points (a zigzag, a dashpot, or both side by side); a rotational spring-damper as
a spiral about the joint between its bodies. Cam surfaces are not drawn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model.model import GROUND, Mechanism

Vec2 = tuple[float, float]
Pose = tuple[float, float, float]  # x [m], y [m], theta [rad]
Polyline = list[list[float]]
COILS = 6  # zigzag teeth of a drawn spring


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
class Spring:
    """A spring, damper or both between two body points; ``rotational``: a spiral about ``points[1]``
    of ``bodies[1]`` (the joint between the two bodies, else that body's reference point)."""

    name: str
    kind: str  # "spring", "damper", "spring_damper" or "rotational"
    bodies: tuple[str, str]
    points: tuple[Vec2, Vec2]


def _springs(mech: Mechanism) -> tuple[Spring, ...]:
    out = []
    for ld in mech.loads:
        if ld.type == "spring_damper":
            kind = "spring_damper" if ld.stiffness and ld.damping else "damper" if ld.damping else "spring"
            out.append(Spring(ld.name, kind, (ld.bodies[0], ld.bodies[1]), (ld.points[0], ld.points[1])))
        elif ld.type == "rotational_spring_damper":
            pair = set(ld.bodies[:2])
            pin = next((j.points[list(j.bodies).index(ld.bodies[1])] for j in mech.joints
                        if j.type == "revolute" and set(j.bodies) == pair), (0.0, 0.0))
            out.append(Spring(ld.name, "rotational", (ld.bodies[0], ld.bodies[1]), (pin, pin)))
    return tuple(out)


def _unit(v: Sequence[float]) -> Vec2:
    n = math.hypot(v[0], v[1]) or 1.0
    return (v[0] / n, v[1] / n)


def place(pose: Pose, p: Vec2) -> tuple[float, float]:
    """World position of body-frame point ``p`` of a body in ``pose``."""
    x, y, th = pose
    c, s = math.cos(th), math.sin(th)
    return x + c * p[0] - s * p[1], y + s * p[0] + c * p[1]


def _along(a: Sequence[float], b: Sequence[float]) -> Any:
    """f(s, n): the point at fraction ``s`` of a→b, ``n`` widths to its left (one width = 1)."""
    ux, uy = b[0] - a[0], b[1] - a[1]
    length = math.hypot(ux, uy)
    nx, ny = (-uy / length, ux / length) if length > 0 else (0.0, 0.0)
    return lambda s, n: [a[0] + s * ux + n * nx, a[1] + s * uy + n * ny]


def spring_lines(kind: str, a: Sequence[float], b: Sequence[float], width: float, angle: float = 0.0) -> list[Polyline]:
    """Polylines of a spring (zigzag), damper (dashpot) or both between world points ``a``, ``b``;
    ``rotational``: a spiral of radius ``2·width`` about ``a``, starting at ``angle``. Nothing for a
    zero length."""
    if kind == "rotational":
        s = np.linspace(0.0, 1.0, 60)
        r, th = 2 * width * (0.25 + 0.75 * s), angle + 4 * math.pi * s
        return [np.column_stack([a[0] + r * np.cos(th), a[1] + r * np.sin(th)]).tolist()]
    if math.hypot(b[0] - a[0], b[1] - a[1]) < 1e-12:
        return []
    at = _along(a, b)
    if kind == "spring":
        teeth = [at(0.15 + 0.7 * i / (2 * COILS), width * (1 if i % 2 else -1)) for i in range(1, 2 * COILS)]
        return [[list(a), at(0.15, 0), *teeth, at(0.85, 0), list(b)]]
    if kind == "damper":
        return [[list(a), at(0.3, 0)], [at(0.7, width), at(0.3, width), at(0.3, -width), at(0.7, -width)],
                [at(0.55, 0.7 * width), at(0.55, -0.7 * width)], [at(0.55, 0), list(b)]]
    lo, hi = at(0.12, 0), at(0.88, 0)
    side = 1.3 * width
    return [[list(a), lo], [at(0.12, side), at(0.12, -side)], [at(0.88, side), at(0.88, -side)], [hi, list(b)],
            *spring_lines("spring", at(0.12, side), at(0.88, side), 0.6 * width),
            *spring_lines("damper", at(0.12, -side), at(0.88, -side), 0.6 * width)]


@dataclass(frozen=True)
class Sketch:
    """What to draw of a mechanism, in body frames; :meth:`world` places it in a pose."""

    shapes: tuple[Shape, ...]
    joints: tuple[tuple[str, str, Vec2], ...]  # (joint, body, point on that body) for markers / forces
    pivots: tuple[Vec2, ...]  # ground attachment points
    guides: tuple[tuple[Vec2, Vec2], ...]  # ground-fixed guide lines (point, unit axis)
    scale: float  # a characteristic length [m]
    springs: tuple[Spring, ...] = ()

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
        return cls(tuple(shapes), joints, tuple(_dedupe(att[GROUND])), guides, max([*reach, 1e-3]), _springs(mech))

    def outline(self, shape: Shape, pose: Pose) -> list[list[float]]:
        """World points of one body's outline (a block: a small rectangle about its point)."""
        pts = list(shape.points)
        if shape.kind == "block":
            h = 0.06 * self.scale
            px, py = pts[0]
            pts = [(px - h, py - h / 1.6), (px + h, py - h / 1.6), (px + h, py + h / 1.6), (px - h, py + h / 1.6)]
        return [list(place(pose, p)) for p in pts]

    def spring_world(self, spring: Spring, poses: Mapping[str, Pose]) -> list[Polyline]:
        """Polylines of one spring or damper in ``poses``."""
        p0, p1 = (poses.get(b, (0.0, 0.0, 0.0)) for b in spring.bodies)
        a, b = place(p0, spring.points[0]), place(p1, spring.points[1])
        if spring.kind == "rotational":
            return spring_lines("rotational", b, b, 0.04 * self.scale, p1[2])
        return spring_lines(spring.kind, a, b, 0.035 * self.scale)

    def world(self, poses: Mapping[str, Pose]) -> dict[str, Any]:
        """World coordinates of every shape (with the point its name is written at), joint marker,
        pivot, guide and spring (JSON-ready)."""
        def pose(body: str) -> Pose:
            return poses.get(body, (0.0, 0.0, 0.0))

        bodies = []
        for sh in self.shapes:
            pts = self.outline(sh, pose(sh.body))
            bodies.append({"body": sh.body, "kind": sh.kind, "pts": pts, "label": np.mean(pts, axis=0).tolist()})
        return {"bodies": bodies,
                "joints": [[name, *place(pose(body), p)] for name, body, p in self.joints],
                "pivots": [list(p) for p in self.pivots],
                "guides": [[[p[0] - a[0] * self.scale * 2, p[1] - a[1] * self.scale * 2],
                            [p[0] + a[0] * self.scale * 2, p[1] + a[1] * self.scale * 2]] for p, a in self.guides],
                "springs": [_spring_json(s, self.spring_world(s, poses)) for s in self.springs],
                "scale": self.scale}


def _spring_json(spring: Spring, lines: list[Polyline]) -> dict[str, Any]:
    pts = [q for line in lines for q in line]
    return {"name": spring.name, "kind": spring.kind, "lines": lines,
            "label": np.mean(pts, axis=0).tolist() if pts else None}
