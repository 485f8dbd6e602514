"""SI units of FMU variables: the ASCII unit strings of :mod:`mbsd_twin.physics.outputs` and
:mod:`mbsd_twin.simulation.ports` (``N.m``, ``m/s2``, ``kg.m2``, ``N.m.s/rad``, ``1``) turned into FMI 2.0
``<Unit>`` definitions (exponents of the SI base units, radian counted as a base unit as FMI does)
and declared types (``Angle``, ``Torque``, ``Force`` …).

Grammar: ``unit := "1" | product ["/" product]``, ``product := factor ("." factor)*``,
``factor := symbol [integer exponent]``; symbols are the SI base units plus N, J, W, Pa, Hz.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

BASE = ("kg", "m", "s", "A", "K", "mol", "cd", "rad")

# Symbol -> exponents of the base units (in BASE order).
_SYMBOLS: dict[str, tuple[int, ...]] = {
    "kg": (1, 0, 0, 0, 0, 0, 0, 0), "m": (0, 1, 0, 0, 0, 0, 0, 0), "s": (0, 0, 1, 0, 0, 0, 0, 0),
    "A": (0, 0, 0, 1, 0, 0, 0, 0), "K": (0, 0, 0, 0, 1, 0, 0, 0), "mol": (0, 0, 0, 0, 0, 1, 0, 0),
    "cd": (0, 0, 0, 0, 0, 0, 1, 0), "rad": (0, 0, 0, 0, 0, 0, 0, 1),
    "N": (1, 1, -2, 0, 0, 0, 0, 0), "J": (1, 2, -2, 0, 0, 0, 0, 0), "W": (1, 2, -3, 0, 0, 0, 0, 0),
    "Pa": (1, -1, -2, 0, 0, 0, 0, 0), "Hz": (0, 0, -1, 0, 0, 0, 0, 0),
}
_FACTOR = re.compile(r"^([A-Za-z]+?)(-?\d+)?$")

# Declared types: (unit, type name, quantity). A unit may carry several quantities (N.m: torque
# and energy are told apart by their unit string, J for energy).
DECLARED_TYPES: dict[str, tuple[str, str]] = {
    "m": ("Length", "Length"),
    "rad": ("Angle", "Angle"),
    "m/s": ("Velocity", "Velocity"),
    "rad/s": ("AngularVelocity", "AngularVelocity"),
    "m/s2": ("Acceleration", "Acceleration"),
    "rad/s2": ("AngularAcceleration", "AngularAcceleration"),
    "N": ("Force", "Force"),
    "N.m": ("Torque", "Torque"),
    "J": ("Energy", "Energy"),
    "kg": ("Mass", "Mass"),
    "kg.m2": ("MomentOfInertia", "MomentOfInertia"),
    "s": ("Time", "Time"),
    "N/m": ("TranslationalSpringConstant", "TranslationalSpringConstant"),
    "N.s/m": ("TranslationalDampingConstant", "TranslationalDampingConstant"),
    "N.m/rad": ("RotationalSpringConstant", "RotationalSpringConstant"),
    "N.m.s/rad": ("RotationalDampingConstant", "RotationalDampingConstant"),
    "1": ("DimensionlessRatio", "DimensionlessRatio"),
}

# Display units offered to tools: (unit, display name, factor) with display = factor · value.
DISPLAY_UNITS: dict[str, tuple[str, float]] = {
    "rad": ("deg", 180.0 / math.pi),
    "rad/s": ("rpm", 30.0 / math.pi),
    "rad/s2": ("deg/s2", 180.0 / math.pi),
}


class UnitError(ValueError):
    """A unit string that is not in the grammar above."""


@dataclass(frozen=True)
class Unit:
    """One FMI unit: its name (the ASCII string) and the exponents of the SI base units."""

    name: str
    exponents: dict[str, int]


def _product(text: str, unit: str) -> list[int]:
    exps = [0] * len(BASE)
    for factor in text.split("."):
        match = _FACTOR.match(factor)
        if not match or match.group(1) not in _SYMBOLS:
            raise UnitError(f"unit {unit!r}: unknown factor {factor!r} (known: {', '.join(_SYMBOLS)})")
        power = int(match.group(2) or 1)
        for k, e in enumerate(_SYMBOLS[match.group(1)]):
            exps[k] += power * e
    return exps


def parse_unit(unit: str) -> Unit:
    """The base-unit exponents of ``unit``; raises :class:`UnitError` if it is not understood."""
    text = unit.strip()
    if text == "1":
        return Unit("1", {})
    num, sep, den = text.partition("/")
    if not num or (sep and not den) or "/" in den:
        raise UnitError(f"unit {unit!r}: expected 'a.b/c.d' with SI symbols, or '1'")
    exps = _product(num, unit)
    if den:
        exps = [a - b for a, b in zip(exps, _product(den, unit), strict=True)]
    return Unit(text, {b: e for b, e in zip(BASE, exps, strict=True) if e != 0})


def declared_type(unit: str) -> str | None:
    """Name of the declared type for ``unit`` (``None`` when there is none)."""
    entry = DECLARED_TYPES.get(unit)
    return entry[0] if entry else None
