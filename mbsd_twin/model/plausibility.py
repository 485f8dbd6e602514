"""Plausibility of a valid mechanism's numbers: warnings, never errors.

A mass of 1e30 kg or a speed of 1e30 m/s is a finite number and passes validation, but makes the
integrator take minutes of tiny steps or fail. :func:`plausibility_problems` lists every value
more than :data:`FACTOR` times outside the typical range of its quantity (table :data:`TYPICAL`),
and every subnormal value (0 < |x| < 2.2e-308: no physical quantity is that small, and its
reciprocal overflows), each with its location as in a :class:`~mbsd_twin.errors.MechanismError`.
It also lists likely unit slips: an angle of more than a full turn (degrees written for radians)
and a length more than :data:`SLIP_LENGTH` times the median of the mechanism's non-zero lengths
(millimetres written for metres). The loader issues them as
:class:`~mbsd_twin.errors.PlausibilityWarning`\\ s.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..errors import MbsdError, MechanismError, Problem
from .model import Mechanism
from .validation import label
from .values import is_number, to_float

FACTOR = 1e6
SLIP_LENGTH = 1e3  # a length this many times the median non-zero length is a likely unit slip
# quantity -> (smallest typical non-zero magnitude or 0, largest typical magnitude, unit)
TYPICAL: dict[str, tuple[float, float, str]] = {
    "mass": (1e-3, 1e3, "kg"),
    "inertia": (1e-6, 1e3, "kg·m²"),
    "length": (0.0, 10.0, "m"),
    "speed": (0.0, 100.0, "m/s"),
    "rate": (0.0, 1e3, "rad/s"),
    "angle": (0.0, 1e3, "rad"),
    "acceleration": (0.0, 100.0, "m/s²"),
    "force": (0.0, 1e6, "N or N·m"),
    "stiffness": (0.0, 1e9, "N/m or N·m/rad"),
    "damping": (0.0, 1e6, "N·s/m or N·m·s/rad"),
    "frequency": (0.0, 1e4, "Hz"),
    "number": (0.0, 0.0, ""),  # only the subnormal check
}
Item = tuple[str, str, object]  # (location, quantity, value: a number or a 2-vector)


def _vec(loc: str, quantity: str, v: object) -> Iterator[Item]:
    if isinstance(v, tuple | list):
        for k, x in enumerate(v):
            yield f"{loc}[{k}]", quantity, x


def _profile(loc: str, p: object, quantity: str) -> Iterator[Item]:
    for key, q in (("value", quantity), ("speed", "rate"), ("start", quantity), ("amplitude", quantity),
                   ("frequency", "frequency"), ("offset", quantity), ("phase", "angle")):
        if hasattr(p, key):
            yield f"{loc}.{key}", q, getattr(p, key)
    for key in ("coefficients", "times", "values"):
        yield from _vec(f"{loc}.{key}", "number", getattr(p, key, ()))


def _bodies(mech: Mechanism) -> Iterator[Item]:
    for i, b in enumerate(mech.bodies):
        loc = label("bodies", i, b.name)
        yield f"{loc}.mass", "mass", b.mass
        yield f"{loc}.inertia", "inertia", b.inertia
        yield f"{loc}.angle", "angle", b.angle
        yield f"{loc}.omega", "rate", getattr(b, "omega", 0.0)
        for key, q in (("cg", "length"), ("position", "length"), ("velocity", "speed")):
            yield from _vec(f"{loc}.{key}", q, getattr(b, key, ()))


def _points(loc: str, points: Any) -> Iterator[Item]:
    for k, p in enumerate(points if isinstance(points, tuple | list) else ()):
        yield from _vec(f"{loc}.points[{k}]", "length", p)


def _elements(mech: Mechanism) -> Iterator[Item]:
    for i, j in enumerate(mech.joints):
        loc = label("joints", i, j.name)
        yield from _points(loc, j.points)
        yield from _vec(f"{loc}.axis", "number", j.axis or ())
        yield f"{loc}.offset", "length", j.offset or 0.0
        yield f"{loc}.ratio", "number", j.ratio or 0.0
        yield f"{loc}.viscous_friction", "damping", j.viscous_friction
    for i, d in enumerate(mech.drivers):
        loc = label("drivers", i, d.name)
        yield from _points(loc, d.points)
        yield from _profile(f"{loc}.profile", d.profile, "length" if d.type != "angle" else "angle")
    for i, ld in enumerate(mech.loads):
        loc = label("loads", i, ld.name)
        yield from _points(loc, ld.points)
        yield f"{loc}.value", "rate" if ld.type == "rotating_frame" else "force", ld.value
        yield f"{loc}.stiffness", "stiffness", ld.stiffness
        yield f"{loc}.damping", "damping", ld.damping
        yield f"{loc}.free_length", "length", ld.free_length or 0.0
        yield from _vec(f"{loc}.direction", "number", ld.direction)
        if ld.profile is not None:
            yield from _profile(f"{loc}.profile", ld.profile, "force")
        spec = ld.contact
        if spec is not None:
            yield f"{loc}.radius", "length", spec.radius
            yield from _vec(f"{loc}.center", "length", spec.center)
            for k, p in enumerate(spec.vertices):
                yield from _vec(f"{loc}.vertices[{k}]", "length", p)


def _problem(quantity: str, x: float) -> str | None:
    if x == 0.0 or not math.isfinite(x):
        return None  # zero is common; non-finite values are validation errors
    if abs(x) < sys.float_info.min:
        return f"{x!r} is a subnormal number (|x| < {sys.float_info.min:.3g}): write 0 or a normal value"
    lo, hi, unit = TYPICAL[quantity]
    if hi and abs(x) > hi * FACTOR:
        return f"{x!r} {unit} is implausibly large for a {quantity} (typical up to {hi:g} {unit})"
    if lo and abs(x) < lo / FACTOR:
        return f"{x!r} {unit} is implausibly small for a {quantity} (typical from {lo:g} {unit})"
    return None


def _unit_slips(items: list[Item]) -> Iterator[tuple[str, str]]:
    """(location, message) of every likely unit slip among ``items`` (see the module doc)."""
    finite = [(loc, q, to_float(x)) for loc, q, x in items if is_number(x) and math.isfinite(to_float(x))]
    lengths = [abs(x) for _, q, x in finite if q == "length" and x != 0.0]
    median = statistics.median(lengths) if len(lengths) >= 3 else math.inf
    for loc, q, x in finite:
        if q == "angle" and abs(x) > 2.0 * math.pi:
            yield loc, (f"{x!r} rad is more than a full turn ({math.degrees(x):.0f}°): degrees written for "
                        "radians? (angles are in radians)")
        elif q == "length" and abs(x) > SLIP_LENGTH * median:
            yield loc, (f"{x!r} m is {abs(x) / median:.0f} times the median length of this mechanism "
                        f"({median:g} m): millimetres written for metres? (lengths are in metres)")


def plausibility_problems(mech: Mechanism) -> list[Problem]:
    """Every implausible value and likely unit slip of ``mech`` (see the module doc), located like
    a MechanismError."""
    out = []
    items = [*_vec("gravity", "acceleration", mech.gravity), *_bodies(mech), *_elements(mech)]
    for loc, quantity, x in items:
        if is_number(x):
            msg = _problem(quantity, to_float(x))
            if msg:
                out.append(Problem(f"{mech.source}: {loc}", msg))
    out += [Problem(f"{mech.source}: {loc}", msg) for loc, msg in _unit_slips(items)]
    return out


def extreme_value(mech: Mechanism) -> tuple[str, float] | None:
    """(location, value) of the number of ``mech`` farthest from 1 in orders of magnitude (zero
    and non-finite values aside): the likeliest culprit of a numerical failure."""
    best: tuple[float, str, float] | None = None
    for loc, _, x in [*_vec("gravity", "acceleration", mech.gravity), *_bodies(mech), *_elements(mech)]:
        if is_number(x) and math.isfinite(to_float(x)) and x != 0.0:
            v = to_float(x)
            score = abs(math.log10(abs(v)))
            if best is None or score > best[0]:
                best = (score, loc, v)
    return None if best is None else (best[1], best[2])


@contextmanager
def numerical(mech: Mechanism, what: str) -> Iterator[None]:
    """Turn a bare numerical exception inside the block (``LinAlgError``, a scipy ``ValueError``
    on non-finite arrays, overflow) into a :class:`MechanismError` naming the most extreme value
    of ``mech`` (package errors pass through unchanged)."""
    try:
        yield
    except MbsdError:
        raise
    except (np.linalg.LinAlgError, FloatingPointError, ZeroDivisionError, OverflowError, ValueError) as exc:
        worst = extreme_value(mech)
        where = f"{mech.source}: {worst[0]}" if worst else mech.source
        hint = f"; the most extreme value is here: {worst[1]!r}" if worst else ""
        raise MechanismError([Problem(where, f"{what} failed numerically ({type(exc).__name__}: "
                                             f"{str(exc)[:200]}){hint}")], source=mech.source) from exc
