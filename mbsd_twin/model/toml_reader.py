"""Reading a mechanism file's TOML document field by field: the keys each section and element kind
takes, and :class:`Reader`, whose typed field readers record every problem with its location
(``joints[2] (guide).axis``) instead of raising. :mod:`.loader` maps the document onto the model
with it; :mod:`.loader_ext` reads the newer element kinds (cam curves, contact, rotating frames).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from ..errors import Problem
from . import toml_guard
from .model import Vec2
from .values import fmt, is_number, suggest, to_float

FORMAT = "mbsd-twin/1"
NAN = math.nan
ZERO: Vec2 = (0.0, 0.0)
T = TypeVar("T")

# Per section: keys every element takes (required, optional), then per type (required, optional).
Keys = tuple[tuple[str, ...], tuple[str, ...]]
TOP_KEYS: Keys = (("format", "name", "bodies"), ("description", "gravity", "joints", "drivers", "loads"))
BODY_KEYS: Keys = (("name", "mass", "inertia"), ("cg", "position", "angle", "velocity", "omega", "pin"))
JOINT_COMMON: Keys = (("name", "type", "bodies"), ("points", "viscous_friction"))
JOINT_TYPES_KEYS: dict[str, Keys] = {
    "revolute": ((), ()),
    "prismatic": (("axis",), ("angle",)),
    "point_on_line": (("axis",), ()),
    "gear": (("ratio",), ("offset", "carrier", "mesh")),
    "fixed": ((), ("angle",)),
    "cam": (("surfaces",), ("parameters",)),
    "knife_edge": (("axis",), ()),
}
DRIVER_COMMON: Keys = (("name", "type", "profile"), ())
DRIVER_TYPES_KEYS: dict[str, Keys] = {
    "angle": (("body",), ()),
    "coordinate": (("body", "coordinate"), ("point",)),
    "distance": (("bodies",), ("points",)),
}
MAGNITUDE = ("value", "profile", "input", "unit", "description")
LOAD_COMMON: Keys = (("name", "type"), ())
LOAD_TYPES_KEYS: dict[str, Keys] = {
    "force": (("body",), ("point", "direction", "frame", *MAGNITUDE)),
    "torque": (("body",), ("reaction_body", *MAGNITUDE)),
    "spring_damper": (("bodies", "stiffness"), ("points", "damping", "free_length")),
    "rotational_spring_damper": (("bodies", "stiffness"), ("damping", "free_angle")),
    "contact": (("bodies", "stiffness", "surface"),
                ("damping", "friction", "slip_velocity", "radius", "center", "vertices")),
    "rotating_frame": (("rate",), ("bodies", "center")),
}
PROFILE_KEYS: dict[str, tuple[tuple[str, ...], dict[str, float]]] = {
    "constant": (("value",), {}),
    "constant_speed": (("speed",), {"start": 0.0}),
    "polynomial": (("coefficients",), {}),
    "harmonic": (("amplitude", "frequency"), {"phase": 0.0, "offset": 0.0}),
    "table": (("times", "values"), {}),
}
# File keys that fill a differently named model field (for locations of validation problems).
FIELD_OF_KEY = {"body": "bodies", "reaction_body": "bodies", "point": "points"}


def at(loc: str, key: str) -> str:
    return f"{loc}.{key}" if loc else key


def under(loc: str, prefix: str) -> bool:
    """``loc`` is ``prefix`` or a field/item of it."""
    return loc == prefix or (loc.startswith(prefix) and loc[len(prefix)] in ".[")


def toml_kind(x: object) -> str:
    """How a TOML value is called in messages: ``string 'heavy'``, ``boolean true``, ``array [...]``."""
    if isinstance(x, bool):
        return f"boolean {str(x).lower()}"
    if isinstance(x, str):
        return f"string {fmt(x)}"
    if isinstance(x, list):
        return f"array {fmt(x)}"
    if isinstance(x, dict):
        return "table"
    return f"{type(x).__name__} {fmt(x)}"


def _is_vec(x: object) -> bool:
    return isinstance(x, list) and len(x) == 2 and all(map(is_number, x))


def _to_vec(x: list[Any]) -> Vec2:
    return to_float(x[0]), to_float(x[1])


class Reader:
    """Generic field readers that record problems (with their file location) instead of raising.

    A reader returns a placeholder (NaN, empty string) for a missing or mistyped value and marks
    its location bad, so that the validator's complaint about the same placeholder is dropped.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[Problem] = []
        self.bad: set[str] = set()
        # validator location prefix -> file location prefix: element indices (when an element
        # was skipped), then model fields filled from differently named keys (bodies <- body)
        self.index_renames: dict[str, str] = {}
        self.field_renames: dict[str, str] = {}

    def report(self, loc: str, message: str) -> None:
        self.problems.append(Problem(f"{self.source}: {loc}", message))
        self.bad.add(loc)
        owner, _, key = loc.rpartition(".")
        if key in FIELD_OF_KEY:
            self.bad.add(at(owner, FIELD_OF_KEY[key]))

    def keys(self, tbl: Mapping[str, Any], loc: str, common: Keys, by_type: Mapping[str, Keys] | None = None,
             type_: str = "", what: str = "") -> dict[str, Any]:
        """Report missing and unknown keys; return the table without the unknown ones."""
        required, optional = common
        if by_type is not None and type_ in by_type:
            required, optional = required + by_type[type_][0], optional + by_type[type_][1]
        elif by_type is not None:  # unknown type: the validator reports it; accept any section key
            optional = optional + tuple(k for r, o in by_type.values() for k in r + o)
        allowed = required + optional
        other = {k: t for t, (r, o) in (by_type or {}).items() for k in r + o if t != type_}
        for key in tbl:
            if key in allowed:
                continue
            if key in other:
                users = [t for t, (r, o) in (by_type or {}).items() if key in r + o]
                self.report(at(loc, key), f"key {key!r} does not apply to {type_} {what}s "
                                           f"(it is used by: {', '.join(users)})")
            else:
                self.report(at(loc, key), f"unknown key {key!r}{suggest(key, allowed)}")
        for key in required:
            if key not in tbl:
                self.report(at(loc, key), f"missing required key {key!r}")
        return {k: v for k, v in tbl.items() if k in allowed}

    def _get(self, tbl: Mapping[str, Any], loc: str, key: str, default: T, check: Callable[[Any], bool],
             expected: str, convert: Callable[[Any], T], placeholder: T) -> T:
        if key not in tbl:
            return default
        raw = tbl[key]
        if not check(raw):
            self.report(at(loc, key), f"expected {expected}, got {toml_kind(raw)}")
            return placeholder
        return convert(raw)

    def number(self, tbl: Mapping[str, Any], loc: str, key: str, default: float) -> float:
        return self._get(tbl, loc, key, default, is_number, "a number", to_float, NAN)

    def optional_number(self, tbl: Mapping[str, Any], loc: str, key: str) -> float | None:
        return self.number(tbl, loc, key, NAN) if key in tbl else None

    def string(self, tbl: Mapping[str, Any], loc: str, key: str, default: str = "",
               choices: tuple[str, ...] = ()) -> str:
        value = self._get(tbl, loc, key, default, lambda x: isinstance(x, str), "a string", str, "")
        if choices and key in tbl and value and value not in choices:
            self.report(at(loc, key), f"expected one of {', '.join(map(repr, choices))}, got "
                                       f"{value!r}{suggest(value, choices)}")
        return value

    def vector(self, tbl: Mapping[str, Any], loc: str, key: str, default: Vec2) -> Vec2:
        return self._get(tbl, loc, key, default, _is_vec, "[x, y] (2 numbers)", _to_vec, (NAN, NAN))

    def optional_vector(self, tbl: Mapping[str, Any], loc: str, key: str) -> Vec2 | None:
        return self.vector(tbl, loc, key, ZERO) if key in tbl else None

    def points(self, tbl: Mapping[str, Any], loc: str, key: str, n: int) -> tuple[Vec2, ...]:
        return self._get(tbl, loc, key, (ZERO,) * n,
                         lambda x: isinstance(x, list) and len(x) == n and all(map(_is_vec, x)),
                         f"{n} points [[x, y], ...]", lambda x: tuple(map(_to_vec, x)), ((NAN, NAN),) * n)

    def names(self, tbl: Mapping[str, Any], loc: str, key: str, n: int) -> tuple[str, ...]:
        return self._get(tbl, loc, key, ("",) * n,
                         lambda x: isinstance(x, list) and len(x) == n and all(isinstance(s, str) for s in x),
                         f"{n} body names [\"first\", \"second\"]", tuple, ("",) * n)

    def string_list(self, tbl: Mapping[str, Any], loc: str, key: str) -> tuple[str, ...]:
        return self._get(tbl, loc, key, (), lambda x: isinstance(x, list) and all(isinstance(s, str) for s in x),
                         "an array of strings", tuple, ())

    def numbers(self, tbl: Mapping[str, Any], loc: str, key: str) -> tuple[float, ...] | None:
        ok = self._get(tbl, loc, key, None, lambda x: isinstance(x, list) and all(map(is_number, x)),
                       "an array of numbers", lambda x: tuple(map(to_float, x)), None)
        return ok

    def elements(self, doc: Mapping[str, Any], section: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """(index, table) of each element of an array of tables ``[[section]]``."""
        items = doc.get(section, [])
        if not isinstance(items, list):
            self.report(section, f"expected an array of tables [[{section}]], got {toml_kind(items)}")
            return
        if len(items) > toml_guard.MAX_ELEMENTS:
            self.report(section, f"{len(items)} elements (limit {toml_guard.MAX_ELEMENTS})")
            return
        for i, item in enumerate(items):
            if isinstance(item, dict):
                yield i, item
            else:
                self.report(f"{section}[{i}]", f"expected a table, got {toml_kind(item)}")

    def file_location(self, loc: str) -> str:
        """Translate a validator location into the file's terms (longest matching prefixes)."""
        for renames in (self.index_renames, self.field_renames):
            for prefix in sorted(renames, key=len, reverse=True):
                if under(loc, prefix):
                    loc = renames[prefix] + loc[len(prefix):]
                    break
        return loc

    def add_validation(self, problems: list[Problem]) -> None:
        for p in problems:
            loc = self.file_location(p.location)
            if not any(under(loc, b) for b in self.bad):
                self.problems.append(Problem(f"{self.source}: {loc}", p.message))
