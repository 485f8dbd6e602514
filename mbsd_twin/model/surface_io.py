"""Curves in mechanism files: ``{ kind = "circle", radius = 0.03 }`` and friends, read into
:mod:`mbsd_twin.model.surfaces` objects, and the semantic checks of curves built in Python.

Both functions report problems as ``(key, message)`` pairs; the caller adds its location.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .model import Polyline
from .surfaces import Circle, Line, Polar, Polynomial, Spline, Surface
from .values import fmt, is_number, number_problem, suggest, to_float, vector_problem

# kind -> (required keys, optional keys)
SURFACE_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "circle": (("radius",), ("center",)),
    "line": ((), ("point", "direction")),
    "polynomial": (("coefficients",), ()),
    "spline": (("points",), ("closed",)),
    "polar": ((), ("fourier", "angles", "radii")),
    "polyline": (("points",), ()),
}
Problems = list[tuple[str, str]]


def _numbers(raw: object) -> tuple[float, ...] | None:
    if isinstance(raw, list | tuple) and all(is_number(x) and math.isfinite(to_float(x)) for x in raw):
        return tuple(to_float(x) for x in raw)
    return None


def _points(raw: object) -> tuple[tuple[float, float], ...] | None:
    if isinstance(raw, list | tuple) and all(vector_problem(p) is None for p in raw):
        return tuple((to_float(p[0]), to_float(p[1])) for p in raw)
    return None


def _vec(tbl: Mapping[str, Any], key: str, default: tuple[float, float], out: Problems,
         nonzero: bool = False) -> tuple[float, float]:
    if key not in tbl:
        return default
    msg = vector_problem(tbl[key], nonzero=nonzero)
    if msg:
        out.append((key, f"{key} {msg}"))
        return default
    return to_float(tbl[key][0]), to_float(tbl[key][1])


def surface_from_table(raw: object, allow: tuple[str, ...] = tuple(SURFACE_KEYS)) -> tuple[Any, Problems]:
    """A curve from an inline table, or (None, problems)."""
    if not isinstance(raw, Mapping):
        return None, [("", f"expected an inline table {{ kind = \"...\", ... }}, got {fmt(raw)}")]
    kind = raw.get("kind")
    if kind not in allow:
        hint = suggest(kind, allow) if isinstance(kind, str) else ""
        return None, [("kind", f"unknown curve kind {kind!r}; valid kinds: {', '.join(allow)}{hint}")]
    required, optional = SURFACE_KEYS[kind]
    out: Problems = [(k, f"missing required key {k!r}") for k in required if k not in raw]
    out += [(k, f"unknown key {k!r} for a {kind} curve{suggest(k, required + optional)}")
            for k in raw if k not in ("kind", *required, *optional)]
    if out:
        return None, out
    surf = _build(kind, raw, out)
    if surf is not None and not out and kind != "polyline":
        out += surface_problems(surf)
    return (None if out else surf), out


def _build(kind: str, raw: Mapping[str, Any], out: Problems) -> Any:
    if kind == "circle":
        r = raw["radius"]
        if number_problem(r, minimum=0.0, strict=True):
            out.append(("radius", f"radius {number_problem(r, minimum=0.0, strict=True)}"))
            return None
        return Circle(to_float(r), _vec(raw, "center", (0.0, 0.0), out))
    if kind == "line":
        return Line(_vec(raw, "point", (0.0, 0.0), out), _vec(raw, "direction", (1.0, 0.0), out, nonzero=True))
    if kind == "polynomial":
        c = _numbers(raw["coefficients"])
        if not c:
            out.append(("coefficients", "coefficients must be a non-empty array of finite numbers"))
        return Polynomial(c) if c else None
    if kind in ("spline", "polyline"):
        pts = _points(raw["points"])
        if pts is None:
            out.append(("points", "points must be an array of finite [x, y] points"))
            return None
        if kind == "polyline":
            return _polyline(pts, out)
        closed = raw.get("closed", False)
        if not isinstance(closed, bool):
            out.append(("closed", f"closed must be true or false, got {fmt(closed)}"))
            return None
        bad = _spline_points_problem(pts, closed)
        if bad:
            out.append(("points", bad))
            return None
        return _construct("points", lambda: Spline(pts, closed), out)
    return _polar(raw, out)


def _construct(key: str, make: Callable[[], Any], out: Problems) -> Any:
    """``make()``, a curve whose construction (scipy's spline fit) may fail on extreme values:
    None and a problem at ``key`` then, also when the curve is not finite at its samples."""
    try:
        with np.errstate(all="ignore"):
            surf = make()
            grid = surf.samples()
            finite = grid is None or all(np.isfinite(a).all() for a in surf.curve(grid))
    except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
        out.append((key, f"no curve can be built through these values: {exc}"))
        return None
    if not finite:
        out.append((key, "the curve through these values is not finite everywhere (values too extreme)"))
        return None
    return surf


def _polyline(pts: tuple[tuple[float, float], ...], out: Problems) -> Any:

    p = np.asarray(pts)
    if len(pts) < 2 or (np.hypot(*np.diff(p, axis=0).T) == 0).any():
        out.append(("points", "a polyline needs at least 2 points, consecutive points distinct"))
        return None
    return Polyline(pts)


def _spline_points_problem(pts: tuple[tuple[float, float], ...], closed: bool) -> str | None:
    if len(pts) < 3:
        return f"a spline needs at least 3 points, got {len(pts)}"
    p = np.asarray(pts + ((pts[0],) if closed else ()))
    if (np.hypot(*np.diff(p, axis=0).T) == 0).any():
        return "consecutive spline points must differ"
    return None


def _polar(raw: Mapping[str, Any], out: Problems) -> Polar | None:
    if "fourier" in raw:
        if "angles" in raw or "radii" in raw:
            out.append(("fourier", "give either fourier or angles and radii, not both"))
            return None
        c = _numbers(raw["fourier"])
        if not c or len(c) % 2 == 0:
            out.append(("fourier", "fourier must be (a0, a1, b1, a2, b2, ...): an odd number of finite numbers"))
            return None
        return _construct("fourier", lambda: Polar(fourier=c), out)
    a, r = _numbers(raw.get("angles")), _numbers(raw.get("radii"))
    if a is None or r is None or len(a) != len(r) or len(a) < 3:
        out.append(("angles", "a polar cam needs fourier, or angles and radii (equal lengths, at least 3)"))
        return None
    if any(y <= x for x, y in zip(a, a[1:], strict=False)) or a[-1] - a[0] >= 2 * math.pi:
        out.append(("angles", "angles must increase strictly and span less than one turn"))
        return None
    return _construct("radii", lambda: Polar(angles=a, radii=r), out)


def surface_problems(surf: object) -> Problems:
    """Semantic problems of a curve object (also for curves built in Python)."""
    if not isinstance(surf, Surface):
        return [("", f"must be a curve from mbsd_twin.model.surfaces, got {surf!r}")]
    if isinstance(surf, Circle) and not (surf.radius > 0 and math.isfinite(surf.radius)):
        return [("radius", f"radius must be a finite number > 0, got {fmt(surf.radius)}")]
    if isinstance(surf, Line) and vector_problem(surf.direction, nonzero=True):
        return [("direction", f"direction {vector_problem(surf.direction, nonzero=True)}")]
    if isinstance(surf, Polar):
        r = surf.radius(np.linspace(0.0, 2 * math.pi, 721))[0]
        if not (np.isfinite(r).all() and r.min() > 0):
            return [("fourier" if surf.fourier else "radii", f"the radius r(φ) must stay > 0, min {r.min():.4g}")]
    return []
