"""Read a mechanism from a TOML file (format ``mbsd-twin/1``, see ``docs/mechanism-file.md``).

Nothing in the file is evaluated: it is parsed with :mod:`tomllib` and mapped field by field onto
the dataclasses of :mod:`mbsd_twin.model.model`. Every problem found (unknown or missing key, wrong type,
wrong vector length, unknown profile kind, and then every :func:`validate_mechanism` problem) is
collected with its location, e.g. ``crank.toml: joints[2] (guide).axis``, and raised as one
:class:`~mbsd_twin.errors.MechanismError`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, cast

from ..errors import MechanismError, PlausibilityWarning, Problem
from . import loader_ext, toml_guard
from .model import Body, Driver, Joint, Load, Mechanism, Vec2
from .plausibility import plausibility_problems
from .profiles import PROFILE_KINDS, Constant, Polynomial, Profile, Table
from .surfaces import SURFACE_KINDS
from .toml_reader import (
    BODY_KEYS,
    DRIVER_COMMON,
    DRIVER_TYPES_KEYS,
    FORMAT,
    JOINT_COMMON,
    JOINT_TYPES_KEYS,
    LOAD_COMMON,
    LOAD_TYPES_KEYS,
    NAN,
    PROFILE_KEYS,
    TOP_KEYS,
    ZERO,
    Reader,
    T,
    at,
    toml_kind,
)
from .validation import label, table_problems, validate_mechanism
from .values import suggest


def _profile(r: Reader, tbl: Mapping[str, Any], loc: str) -> Profile | None:
    """The ``profile`` inline table of ``tbl``, or None when absent or broken (problem reported)."""
    if "profile" not in tbl:
        return None
    ploc, raw = at(loc, "profile"), tbl["profile"]
    if not isinstance(raw, dict):
        r.report(ploc, f"expected an inline table {{ kind = \"...\", ... }}, got {toml_kind(raw)}")
        return None
    kind = r.string(raw, ploc, "kind")
    if kind not in PROFILE_KEYS:
        if "kind" not in raw:
            r.report(f"{ploc}.kind", f"missing required key 'kind' (one of: {', '.join(PROFILE_KEYS)})")
        elif kind:
            r.report(f"{ploc}.kind", f"unknown profile kind {kind!r}; valid kinds: "
                                     f"{', '.join(PROFILE_KEYS)}{suggest(kind, PROFILE_KEYS)}")
        return None
    required, defaults = PROFILE_KEYS[kind]
    t = r.keys(raw, ploc, (("kind", *required), tuple(defaults)))
    if kind == "polynomial":
        coefficients = r.numbers(t, ploc, "coefficients")
        return None if coefficients is None else _as_profile(Polynomial(coefficients))
    if kind == "table":
        times, values = r.numbers(t, ploc, "times"), r.numbers(t, ploc, "values")
        if times is None or values is None:
            return None
        problems = table_problems(times, values)
        for key, message in problems:
            r.report(f"{ploc}.{key}", message)
        return None if problems else _as_profile(Table(times, values))
    args = {k: r.number(t, ploc, k, defaults.get(k, NAN)) for k in (*required, *defaults)}
    return _as_profile(PROFILE_KINDS[kind](**args))


def _as_profile(p: object) -> Profile:
    # The profile dataclasses are frozen, so mypy sees their ``kind`` as read-only while the
    # ``Profile`` protocol declares a settable attribute; they do satisfy it at run time.
    return cast(Profile, p)


def _body(r: Reader, tbl: Mapping[str, Any], loc: str) -> Body:
    t = r.keys(tbl, loc, BODY_KEYS)
    # initial velocities (forward dynamics) are passed only when given
    initial: dict[str, Any] = {}
    if "velocity" in t:
        initial["velocity"] = r.vector(t, loc, "velocity", ZERO)
    if "omega" in t:
        initial["omega"] = r.number(t, loc, "omega", 0.0)
    if "pin" in t:
        initial["pin"] = r.string_list(t, loc, "pin")
    return Body(name=r.string(t, loc, "name"), mass=r.number(t, loc, "mass", NAN),
                inertia=r.number(t, loc, "inertia", NAN), cg=r.vector(t, loc, "cg", ZERO),
                position=r.vector(t, loc, "position", ZERO), angle=r.number(t, loc, "angle", 0.0),
                **initial)


def _joint(r: Reader, tbl: Mapping[str, Any], loc: str) -> Joint:
    jtype = r.string(tbl, loc, "type")
    t = r.keys(tbl, loc, JOINT_COMMON, JOINT_TYPES_KEYS, jtype, "joint")
    first, second = r.names(t, loc, "bodies", 2)
    p0, p1 = r.points(t, loc, "points", 2)
    return Joint(name=r.string(t, loc, "name"), type=jtype, bodies=(first, second), points=(p0, p1),
                 axis=r.optional_vector(t, loc, "axis"), ratio=r.optional_number(t, loc, "ratio"),
                 offset=r.optional_number(t, loc, "offset"), angle=r.optional_number(t, loc, "angle"),
                 viscous_friction=r.number(t, loc, "viscous_friction", 0.0),
                 surfaces=_cam_surfaces(r, t, loc) if "surfaces" in t else (),
                 parameters=r.optional_vector(t, loc, "parameters"),
                 carrier=r.string(t, loc, "carrier") if "carrier" in t else None,
                 mesh=r.string(t, loc, "mesh") if "mesh" in t else None)


def _cam_surfaces(r: Reader, t: Mapping[str, Any], loc: str) -> tuple[Any, ...]:

    return loader_ext.curves(r, t, loc, "surfaces", 2, SURFACE_KINDS)


def _single_body(r: Reader, t: Mapping[str, Any], loc: str) -> tuple[tuple[str, ...], tuple[Vec2, ...]]:
    """``body``/``point`` (and ``reaction_body``) of a driver or load, as model tuples."""
    for field, key in (("bodies", "body"), ("points[0]", "point"), ("points", "point")):
        r.field_renames[f"{loc}.{field}"] = f"{loc}.{key}"
    bodies: tuple[str, ...] = (r.string(t, loc, "body"),)
    if "reaction_body" in t:
        bodies += (r.string(t, loc, "reaction_body"),)
    return bodies, (r.vector(t, loc, "point", ZERO),)


def _driver(r: Reader, tbl: Mapping[str, Any], loc: str) -> Driver:
    dtype = r.string(tbl, loc, "type")
    t = r.keys(tbl, loc, DRIVER_COMMON, DRIVER_TYPES_KEYS, dtype, "driver")
    if "bodies" in t or dtype == "distance":
        bodies, points = r.names(t, loc, "bodies", 2), r.points(t, loc, "points", 2)
    else:
        bodies, points = _single_body(r, t, loc)
    coordinate = r.string(t, loc, "coordinate", choices=("x", "y")) if dtype == "coordinate" else "theta"
    return Driver(name=r.string(t, loc, "name"), type=dtype, bodies=bodies,
                  profile=_profile(r, t, loc) or _as_profile(Constant(0.0)), coordinate=coordinate,
                  points=points)


def _magnitude(r: Reader, t: Mapping[str, Any], loc: str) -> tuple[float, Profile | None, str | None]:
    """(value, profile, input) of a force/torque: at most one of the three may be given."""
    given = [k for k in ("value", "profile", "input") if k in t]
    for extra in given[1:]:
        r.report(at(loc, extra), f"give at most one of value, profile and input, got {', '.join(given)}")
    keep = given[0] if given else ""
    return (r.number(t, loc, "value", 0.0) if keep == "value" else 0.0,
            _profile(r, t, loc) if keep == "profile" else None,
            r.string(t, loc, "input") if keep == "input" else None)


def _load(r: Reader, tbl: Mapping[str, Any], loc: str) -> Load | None:
    ltype = r.string(tbl, loc, "type")
    if ltype == "generalized":
        r.report(at(loc, "type"), "generalized loads need a Python function: build them with the "
                                   "Python API (mbsd_twin.model.model.Load), not in a file")
        return None
    t = r.keys(tbl, loc, LOAD_COMMON, LOAD_TYPES_KEYS, ltype, "load")
    if ltype in ("contact", "rotating_frame"):

        return (loader_ext.contact_load if ltype == "contact" else loader_ext.frame_load)(r, t, loc)
    if "bodies" in t or ltype in ("spring_damper", "rotational_spring_damper"):
        bodies = r.names(t, loc, "bodies", 2)
        points = r.points(t, loc, "points", 2)
    else:
        bodies, points = _single_body(r, t, loc)
    value, profile, input_ = _magnitude(r, t, loc)
    return Load(name=r.string(t, loc, "name"), type=ltype, bodies=bodies, points=points, value=value,
                profile=profile, input=input_, direction=r.vector(t, loc, "direction", (1.0, 0.0)),
                frame=r.string(t, loc, "frame", "world", choices=("world", "body")),
                stiffness=r.number(t, loc, "stiffness", 0.0), damping=r.number(t, loc, "damping", 0.0),
                free_length=r.optional_number(t, loc, "free_length"),
                free_angle=r.optional_number(t, loc, "free_angle"),
                unit=r.string(t, loc, "unit"), description=r.string(t, loc, "description"))


def _section(r: Reader, doc: Mapping[str, Any], section: str,
             build: Callable[[Reader, Mapping[str, Any], str], T | None]) -> tuple[T, ...]:
    """Build every element of ``[[section]]``; map the validator's indices onto the file's."""
    out: list[T] = []
    for i, tbl in r.elements(doc, section):
        name = tbl.get("name")
        loc = label(section, i, name)
        item = build(r, tbl, loc)
        if item is not None:
            if label(section, len(out), name) != loc:
                r.index_renames[label(section, len(out), name)] = loc
            out.append(item)
    return tuple(out)


def _mechanism(doc: Mapping[str, Any], source: str) -> Mechanism:
    r = Reader(source)
    t = r.keys(doc, "", TOP_KEYS)
    version = r.string(t, "", "format", FORMAT)
    if version != FORMAT and isinstance(t.get("format"), str):
        r.report("format", f"unsupported format {version!r}; expected {FORMAT!r}")
    mech = Mechanism(name=r.string(t, "", "name"), bodies=_section(r, t, "bodies", _body),
                     joints=_section(r, t, "joints", _joint), drivers=_section(r, t, "drivers", _driver),
                     loads=_section(r, t, "loads", _load), gravity=r.vector(t, "", "gravity", (0.0, -9.81)),
                     source=source, description=r.string(t, "", "description"))
    r.add_validation(validate_mechanism(mech))
    if r.problems:
        raise MechanismError(r.problems, source=source)
    return mech


def loads_mechanism(text: str, source: str = "<string>") -> Mechanism:
    r"""Parse the TOML ``text`` of a mechanism file; ``source`` names it in messages.

    Raises :class:`MechanismError` listing every problem found (also for a file over the size,
    nesting or dotted-key limits of :mod:`mbsd_twin.model.toml_guard`). Implausible but valid values
    (a mass of 1e30 kg, a subnormal length) are reported as :class:`PlausibilityWarning`\ s.
    """
    mech = _mechanism(toml_guard.parse(text, source), source)
    for p in plausibility_problems(mech):
        warnings.warn(str(p), PlausibilityWarning, stacklevel=2)
    return mech


def load_mechanism(path: str | os.PathLike[str]) -> Mechanism:
    """Read a mechanism file (TOML, format ``mbsd-twin/1``); ``Mechanism.source`` is the path.

    Raises :class:`MechanismError` listing every problem found (``OSError`` if it can't be read).
    """
    source = str(path)
    too_large = toml_guard.size_problem(Path(path).stat().st_size, source)
    if too_large is not None:
        raise too_large
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise MechanismError([Problem(source, f"not UTF-8 text: {exc}")], source=source) from exc
    return loads_mechanism(text, source=source)


def bundled_slider_crank() -> Path:
    """Path of the slider crank shipped as package data (``examples/mechanisms/slider_crank.toml``)."""
    return Path(str(resources.files("mbsd_twin") / "data" / "mechanisms" / "slider_crank.toml"))
