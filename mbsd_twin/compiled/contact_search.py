"""Search tables for the compiled nearest-point search of penalty contact (``nb_contact``).

The numpy path (``contact.nearest``) seeds Newton with the nearest of several hundred samples of the
profile; per probe and right-hand side that would cost the compiled path more than the rest of the
dynamics. Instead the profile's parameter range is cut into *segments* (a spline's knot intervals, a
closed curve's turn in ``N_TURN`` equal parts, a polyline's edges; curve segments further cut until
each turns by at most ``TURN``, so that the distance to a point has one minimum along each but
for points near its centres of curvature, where the distance hardly varies along it), each stored
with its end points a, b (curve points) and a bound e on how far the arc strays from the chord
[a, b]. The arc lies in
the "capsule" of radius e about the chord, so dist(x, chord) − e is a lower bound of the distance
from x to the arc and |x − a|, |x − b| upper bounds. Segments are grouped into consecutive *blocks*
of about √(segments) each. Blocks and segments also have a box (the end points' bounding box grown
by the largest e, which holds every capsule): the distance to it is a lower bound that costs a few
comparisons. The search (``nb_contact.nearest``) visits the block and the segment nearest by their
boxes first, minimises within that segment (clamped Newton), and then only the blocks and segments
whose lower bounds (box, then capsule) do not exceed the best distance found: the global nearest
point, typically after one or two segments, in O(√segments) box tests.

The bound e of a spline segment (a cubic): the larger distance of its two inner Bézier control
points p(s_a) + h/3·p'(s_a) and p(s_b) − h/3·p'(s_b) (h = s_b − s_a) from the chord — the arc lies
in the control points' convex hull, and the chord's end points are the outer two. Of another curve's
segment: the largest distance of ``N_SAMPLE`` + 1 samples from the chord, plus half the largest gap
between neighbouring samples (every arc point lies within half the arc length between two samples
of one of them; the arc length is taken as 1.05 × the chord between samples, generous for segments
turning by less than a radian). A polyline's e is 0 (the chord is the profile). Lines and
polynomial graphs need no table: as on the numpy path, Newton starts from the projection (a line's
exact foot, a graph's x).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..model.surfaces import Circle, Polar, Spline

F = NDArray[Any]
N_TURN = 64  # segments of a closed curve without knots of its own (circle, polar curve)
N_SAMPLE = 64  # samples per segment for its bound (curves other than splines) and its turning
TURN = 0.25  # rad: the most a segment's tangent turns
SEG = 12  # floats per segment: s_a, s_b, a_x, a_y, b_x, b_y, e, 1/|b − a|², its box (as a block's)
BLK = 4  # floats per block: x_min, y_min, x_max, y_max
POLYLINE = 6  # the profile code of a polyline (surface codes 0–5: ``nb_curves.curve``)


def _breaks(surf: Any) -> F | None:
    """Parameters of the segment ends along the profile, or None (no table: line, polynomial):
    the knots or ``N_TURN`` equal parts of the turn, each interval cut into equal parts that turn
    by at most ``TURN`` (measured on ``N_SAMPLE`` + 1 samples)."""
    if isinstance(surf, Spline):
        base = np.asarray(surf._spline.x, float)
    elif isinstance(surf, Circle | Polar):
        first = float(surf.angles[0]) if isinstance(surf, Polar) and surf.angles else 0.0
        base = np.linspace(first, first + 2.0 * math.pi, N_TURN + 1)
    else:
        return None
    out = [base[:1]]
    for sa, sb in zip(base[:-1], base[1:], strict=True):
        d1 = surf.curve(np.linspace(sa, sb, N_SAMPLE + 1))[1]
        turn = float(np.abs(np.diff(np.unwrap(np.arctan2(d1[:, 1], d1[:, 0])))).sum())
        out.append(np.linspace(sa, sb, max(1, math.ceil(turn / TURN)) + 1)[1:])
    return np.concatenate(out)


def _chord_distance(p: F, a: F, b: F) -> F:
    """Distances of points p (..., 2) from the segment [a, b]."""
    ab = b - a
    t = np.clip(((p - a) @ ab) / max(float(ab @ ab), 1e-300), 0.0, 1.0)
    return np.asarray(np.hypot(*(p - a - t[..., None] * ab).T))


def _bounded(surf: Any, sa: float, sb: float) -> list[float]:
    """[a_x, a_y, b_x, b_y, e] of the segment [s_a, s_b] of a curve."""
    if isinstance(surf, Spline):
        p, d1 = surf.curve(np.array([sa, sb]))[:2]
        inner = np.array([p[0] + (sb - sa) / 3 * d1[0], p[1] - (sb - sa) / 3 * d1[1]])
        return [*p[0], *p[1], float(_chord_distance(inner, p[0], p[1]).max())]
    p = surf.curve(np.linspace(sa, sb, N_SAMPLE + 1))[0]
    gap = float(np.hypot(*np.diff(p, axis=0).T).max())
    return [*p[0], *p[-1], float(_chord_distance(p, p[0], p[-1]).max()) + 0.5 * 1.05 * gap]


def segments(surf: Any) -> F:
    """The segment table (rows of ``SEG`` floats) of a curve, or of a ``Polyline``; (0, SEG) when the
    profile needs none."""
    if getattr(surf, "kind", "") == "polyline":
        pts = np.asarray(surf.points, float)
        k = np.arange(len(pts) - 1, dtype=float)
        rows = np.column_stack([k, k + 1, pts[:-1], pts[1:], np.zeros(len(k))])
    else:
        s = _breaks(surf)
        if s is None:
            return np.zeros((0, SEG))
        rows = np.asarray([[sa, sb, *_bounded(surf, sa, sb)] for sa, sb in zip(s[:-1], s[1:], strict=True)])
    chord2 = ((rows[:, 4:6] - rows[:, 2:4]) ** 2).sum(axis=1)
    e = rows[:, 6:7]
    low, high = np.minimum(rows[:, 2:4], rows[:, 4:6]) - e, np.maximum(rows[:, 2:4], rows[:, 4:6]) + e
    return np.column_stack([rows, 1.0 / np.maximum(chord2, 1e-300), low, high])


def blocks(seg: F) -> tuple[int, F]:
    """(block size, rows of ``BLK``): consecutive segments in blocks, each bounded by the bounding
    box of its end points grown by its segments' largest e."""
    n = seg.shape[0]
    if n == 0:
        return 1, np.zeros((0, BLK))
    size = max(4, math.ceil(math.sqrt(n)))
    out = []
    for lo in range(0, n, size):
        part = seg[lo:lo + size]
        ends = np.vstack([part[:, 2:4], part[:, 4:6]])
        e = float(part[:, 6].max())
        out.append([*(ends.min(axis=0) - e), *(ends.max(axis=0) + e)])
    return size, np.asarray(out, float)
