"""Semantic checks of a :class:`~mbsd_twin.model.model.Mechanism`.

:func:`validate_mechanism` applies to mechanisms read from a file and built in Python alike. It
returns every problem found (never stops at the first); locations look like
``joints[3] (guide).axis``. The file loader prefixes them with the file name.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from ..errors import Problem
from .model import (
    DRIVER_TYPES,
    GEAR_MESHES,
    GROUND,
    JOINT_TYPES,
    LOAD_TYPES,
    Body,
    ContactSpec,
    Driver,
    Joint,
    Load,
    Mechanism,
    Polyline,
    positions,
)
from .profiles import Constant, ConstantSpeed, FunctionProfile, Harmonic, Polynomial, Profile, Table
from .surface_io import surface_problems
from .values import fmt, is_number, number_problem, suggest, to_float, vector_problem

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
COORDINATES = ("x", "y", "theta")  # a body's coordinates: coordinate drivers, pins
FRAMES = ("world", "body")
FRICTION_JOINTS = ("revolute", "prismatic")


def label(section: str, index: int, name: object) -> str:
    """``bodies[1] (rod)``, or ``bodies[1]`` when the element has no usable name."""
    if isinstance(name, str) and name:
        return f"{section}[{index}] ({name})"
    return f"{section}[{index}]"


def table_problems(times: Sequence[object], values: Sequence[object]) -> list[tuple[str, str]]:
    """(field, message) pairs wrong with a table profile's data (shared with the loader)."""
    out: list[tuple[str, str]] = []
    if len(times) != len(values):
        out.append(("values", f"times and values must have equal lengths, got {len(times)} and "
                              f"{len(values)}"))
    if len(times) < 2:
        out.append(("times", f"a table needs at least 2 points, got {len(times)}"))
    for key, seq in (("times", times), ("values", values)):
        bad = [fmt(x) for x in seq if number_problem(x) is not None]
        if bad:
            out.append((key, f"must contain only finite numbers, got {', '.join(bad)}"))
    ok = [to_float(t) for t in times if number_problem(t) is None]
    if len(ok) == len(times) and any(b <= a for a, b in zip(ok, ok[1:], strict=False)):
        out.append(("times", f"times must be strictly increasing, got {fmt(list(ok))}"))
    return out


def _profile_fields(p: object) -> list[tuple[str, str | None]]:
    """(field, problem) pairs of a profile's parameters; problem is None when fine."""
    if isinstance(p, Constant):
        return [("value", number_problem(p.value))]
    if isinstance(p, ConstantSpeed):
        return [("speed", number_problem(p.speed)), ("start", number_problem(p.start))]
    if isinstance(p, Harmonic):
        return [("amplitude", number_problem(p.amplitude)),
                ("frequency", number_problem(p.frequency, minimum=0.0)),
                ("phase", number_problem(p.phase)), ("offset", number_problem(p.offset))]
    if isinstance(p, Polynomial):
        coeffs = list(p.coefficients)
        bad = [fmt(c) for c in coeffs if number_problem(c) is not None]
        return [("coefficients", "needs at least 1 coefficient, got none" if not coeffs else None),
                ("coefficients", f"must contain only finite numbers, got {', '.join(bad)}" if bad else None)]
    if isinstance(p, Table):
        return list(table_problems(p.times, p.values))
    if isinstance(p, FunctionProfile):
        return [("fn", None if callable(p.fn) else f"must be callable, got {p.fn!r}")]
    return []


def profile_problems(p: object, loc: str) -> list[Problem]:
    """Problems of a driver/load profile at location ``loc`` (e.g. ``drivers[0] (motor).profile``)."""
    if not isinstance(p, Profile):
        return [Problem(loc, f"must be a profile object (with kind and evaluate(t)), got {p!r}")]
    return [Problem(f"{loc}.{key}", f"{key} {msg}" if msg.startswith("must") else msg)
            for key, msg in _profile_fields(p) if msg is not None]


def _at(loc: str, key: str) -> str:
    return f"{loc}.{key}" if loc else key


class _Checker:
    """Collects problems while walking the mechanism."""

    def __init__(self, mech: Mechanism) -> None:
        self.mech = mech
        self.problems: list[Problem] = []

    @functools.cached_property
    def body_names(self) -> list[str]:
        return [b.name for b in self.mech.bodies if isinstance(b.name, str)]

    def _is_body(self, name: object) -> bool:
        """Whether ``name`` is the ground's or a body's name (a string): by the bodies' index
        (``model.positions``) without a pass over them."""
        if name == GROUND:
            return True
        index = positions(self.mech.bodies)
        if index is None:
            return name in self.body_names
        return isinstance(name, str) and name in index

    def add(self, loc: str, message: str | None) -> None:
        if message is not None:
            self.problems.append(Problem(loc, message))

    def number(self, loc: str, key: str, x: object, *, minimum: float | None = None,
               strict: bool = False, nonzero: bool = False) -> None:
        msg = number_problem(x, minimum=minimum, strict=strict, nonzero=nonzero)
        if msg:
            self.add(_at(loc, key), f"{key} {msg}")

    def vector(self, loc: str, key: str, v: object, *, nonzero: bool = False) -> None:
        msg = vector_problem(v, nonzero=nonzero)
        if msg:
            self.add(_at(loc, key), f"{key} {msg}")

    def choice(self, loc: str, what: str, value: object, choices: Sequence[str]) -> bool:
        if value in choices:
            return True
        hint = suggest(value, choices) if isinstance(value, str) else ""
        self.add(loc, f"unknown {what} {value!r}; valid {what}s: {', '.join(choices)}{hint}")
        return False

    def names(self, section: str, items: Sequence[Body | Joint | Driver | Load],
              seen: dict[str, str]) -> None:
        for i, item in enumerate(items):
            loc = label(section, i, item.name) + ".name"
            if not isinstance(item.name, str) or not item.name:
                self.add(loc, f"name must be a non-empty string, got {item.name!r}")
            elif item.name in seen:
                self.add(loc, f"duplicate name {item.name!r} (also used by {seen[item.name]})")
            else:
                seen[item.name] = label(section, i, item.name)

    def refs(self, loc: str, bodies: object, count: int, *, allow_ground: bool = True,
             distinct: bool = False, what: str = "") -> None:
        """``bodies`` must hold ``count`` names of existing bodies."""
        loc = f"{loc}.bodies"
        if not isinstance(bodies, tuple | list) or len(bodies) != count:
            self.add(loc, f"{what} needs exactly {count} bod{'y' if count == 1 else 'ies'}, got {bodies!r}")
            return
        for name in bodies:
            if name == GROUND and not allow_ground:
                self.add(loc, f"{what} cannot act on {GROUND!r}: it has no coordinates")
            elif not self._is_body(name):
                valid = list(dict.fromkeys([GROUND, *self.body_names]))
                hint = suggest(name, valid) if isinstance(name, str) else ""
                self.add(loc, f"unknown body {name!r} (bodies: {', '.join(valid)}){hint}")
        if distinct and count == 2 and bodies[0] == bodies[1]:
            self.add(loc, f"{what} must connect two different bodies, got {bodies[0]!r} twice")

    def points(self, loc: str, points: object, count: int) -> None:
        if not isinstance(points, tuple | list) or len(points) < count:
            self.add(f"{loc}.points", f"points needs {count} [x, y] point(s), got {fmt(points)}")
            return
        for k in range(count):
            self.vector(loc, f"points[{k}]", points[k])

    def body(self, i: int, b: Body) -> None:
        loc = label("bodies", i, b.name)
        if b.name == GROUND:
            self.add(f"{loc}.name", f"{GROUND!r} is reserved for the fixed world body; rename this body")
        self.number(loc, "mass", b.mass, minimum=0.0, strict=True)
        self.number(loc, "inertia", b.inertia, minimum=0.0, strict=True)
        self.vector(loc, "cg", b.cg)
        self.vector(loc, "position", b.position)
        self.number(loc, "angle", b.angle)
        self.vector(loc, "velocity", getattr(b, "velocity", (0.0, 0.0)))
        self.number(loc, "omega", getattr(b, "omega", 0.0))
        pin = getattr(b, "pin", ())
        bad = [c for c in pin if c not in COORDINATES] if isinstance(pin, tuple | list) else [pin]
        if bad:
            self.add(f"{loc}.pin", f"pin lists coordinates among {', '.join(map(repr, COORDINATES))}, "
                                   f"got {fmt(bad[0])}")
        elif len(set(pin)) != len(pin):
            self.add(f"{loc}.pin", f"pin names a coordinate twice: {fmt(list(pin))}")

    def joint(self, i: int, j: Joint) -> None:
        loc = label("joints", i, j.name)
        if not self.choice(f"{loc}.type", "joint type", j.type, JOINT_TYPES):
            return
        self.refs(loc, j.bodies, 2, distinct=True, what=f"{j.type} joint")
        self.points(loc, j.points, 2)
        if j.type in ("prismatic", "point_on_line", "knife_edge"):
            if j.axis is None:
                self.add(f"{loc}.axis", f"a {j.type} joint needs an axis")
            else:
                self.vector(loc, "axis", j.axis, nonzero=True)
        if j.type == "gear":
            self._gear(loc, j)
        elif j.carrier is not None or j.mesh is not None:
            self.add(f"{loc}.{'carrier' if j.carrier is not None else 'mesh'}",
                     f"carrier and mesh apply only to gear joints, not {j.type}")
        for key in ("offset", "angle"):
            if getattr(j, key) is not None:
                self.number(loc, key, getattr(j, key))
        if j.type == "cam":
            self._cam(loc, j)
        self.number(loc, "viscous_friction", j.viscous_friction, minimum=0.0)
        if j.type not in FRICTION_JOINTS and j.viscous_friction != 0.0:
            self.add(f"{loc}.viscous_friction",
                     f"viscous_friction applies only to {' and '.join(FRICTION_JOINTS)} joints, "
                     f"not {j.type}")

    def _gear(self, loc: str, j: Joint) -> None:
        if j.ratio is None:
            self.add(f"{loc}.ratio", "a gear joint needs a ratio")
        else:
            self.number(loc, "ratio", j.ratio, nonzero=True)
        if j.mesh is not None and self.choice(f"{loc}.mesh", "gear mesh", j.mesh, GEAR_MESHES) \
                and is_number(j.ratio) and not float(j.ratio) > 0:  # type: ignore[arg-type]
            self.add(f"{loc}.ratio", f"with mesh = {j.mesh!r} the ratio is the positive tooth ratio "
                                     f"z2/z1 (the mesh gives the sign), got {fmt(j.ratio)}")
        if j.carrier is not None:
            valid = [GROUND, *self.body_names]
            if j.carrier not in valid:
                self.add(f"{loc}.carrier", f"unknown body {j.carrier!r} (bodies: {', '.join(valid)})"
                                           f"{suggest(j.carrier, valid)}")
            elif j.carrier in j.bodies:
                self.add(f"{loc}.carrier", f"the carrier must differ from the gear's bodies, got {j.carrier!r}")

    def _cam(self, loc: str, j: Joint) -> None:

        surfs = j.surfaces
        if not isinstance(surfs, tuple | list) or len(surfs) != 2:
            self.add(f"{loc}.surfaces", f"a cam joint needs 2 surfaces (one per body), got {fmt(surfs)}")
            return
        for k, surf in enumerate(surfs):
            for key, msg in surface_problems(surf):
                self.add(f"{loc}.surfaces[{k}]" + (f".{key}" if key else ""), msg)
        if j.parameters is not None:
            self.vector(loc, "parameters", j.parameters)

    def driver(self, i: int, d: Driver) -> None:
        loc = label("drivers", i, d.name)
        if not self.choice(f"{loc}.type", "driver type", d.type, DRIVER_TYPES):
            return
        what = f"{d.type} driver"
        if d.type == "distance":
            self.refs(loc, d.bodies, 2, distinct=True, what=what)
            self.points(loc, d.points, 2)
        else:
            self.refs(loc, d.bodies, 1, allow_ground=False, what=what)
        if d.type == "coordinate":
            self.choice(f"{loc}.coordinate", "coordinate", d.coordinate, COORDINATES)
            self.points(loc, d.points, 1)
        self.problems += profile_problems(d.profile, f"{loc}.profile")

    def load(self, i: int, ld: Load) -> None:
        loc = label("loads", i, ld.name)
        if not self.choice(f"{loc}.type", "load type", ld.type, LOAD_TYPES):
            return
        what = f"{ld.type} load"
        if ld.type in ("force", "torque"):
            self._magnitude(loc, ld)
        if ld.type == "force":
            self.refs(loc, ld.bodies, 1, what=what)
            self.points(loc, ld.points, 1)
            self.vector(loc, "direction", ld.direction, nonzero=True)
            self.choice(f"{loc}.frame", "frame", ld.frame, FRAMES)
        elif ld.type == "torque":
            two = isinstance(ld.bodies, tuple | list) and len(ld.bodies) == 2
            self.refs(loc, ld.bodies, 2 if two else 1, distinct=True,
                      what=what if two else "torque load (plus an optional reaction body)")
        elif ld.type in ("spring_damper", "rotational_spring_damper"):
            self._spring(loc, ld, what)
        elif ld.type == "contact":
            self._contact(loc, ld)
        elif ld.type == "rotating_frame":
            self.refs(loc, ld.bodies, len(ld.bodies), allow_ground=False, what=what)
            self.number(loc, "value", ld.value)
            self.points(loc, ld.points, 1)
        elif not callable(ld.function):
            self.add(f"{loc}.function", f"a generalized load needs a callable function, got {ld.function!r}")

    def _magnitude(self, loc: str, ld: Load) -> None:
        self.number(loc, "value", ld.value)
        if ld.profile is not None and ld.input is not None:
            self.add(f"{loc}.input", "give at most one of profile and input (value is the constant "
                                     "used when neither is set)")
        if ld.profile is not None:
            self.problems += profile_problems(ld.profile, f"{loc}.profile")
        if ld.input is not None and (not isinstance(ld.input, str) or not IDENTIFIER.match(ld.input)):
            self.add(f"{loc}.input", f"input name must be an identifier (letters, digits, _; not "
                                     f"starting with a digit), got {ld.input!r}")

    def _contact(self, loc: str, ld: Load) -> None:

        self.refs(loc, ld.bodies, 2, distinct=True, what="contact load")
        self.number(loc, "stiffness", ld.stiffness, minimum=0.0, strict=True)
        self.number(loc, "damping", ld.damping, minimum=0.0)
        sp = ld.contact
        if not isinstance(sp, ContactSpec):
            self.add(f"{loc}.contact", f"a contact load needs a ContactSpec, got {sp!r}")
            return
        if isinstance(sp.surface, Polyline):
            if len(sp.surface.points) < 2 or any(vector_problem(p) for p in sp.surface.points):
                self.add(f"{loc}.surface.points", "a polyline needs at least 2 finite [x, y] points")
        else:
            for key, msg in surface_problems(sp.surface):
                self.add(f"{loc}.surface" + (f".{key}" if key else ""), msg)
        self.number(loc, "friction", sp.friction, minimum=0.0)
        self.number(loc, "slip_velocity", sp.slip_velocity, minimum=0.0, strict=True)
        self.number(loc, "radius", sp.radius, minimum=0.0)
        if sp.radius > 0 and sp.vertices:
            self.add(f"{loc}.vertices", "give a circle (radius > 0) or polygon vertices, not both")
        elif sp.radius > 0:
            self.vector(loc, "center", sp.center)
        elif sp.radius == 0 and (not sp.vertices or any(vector_problem(p) for p in sp.vertices)):
            self.add(f"{loc}.radius", "a contact needs a circle (radius > 0) or polygon vertices "
                                      "(finite [x, y] points)")

    def _spring(self, loc: str, ld: Load, what: str) -> None:
        self.refs(loc, ld.bodies, 2, distinct=True, what=what)
        self.number(loc, "stiffness", ld.stiffness, minimum=0.0)
        self.number(loc, "damping", ld.damping, minimum=0.0)
        if ld.type == "spring_damper":
            self.points(loc, ld.points, 2)
            if ld.free_length is not None:
                self.number(loc, "free_length", ld.free_length, minimum=0.0)
        elif ld.free_angle is not None:
            self.number(loc, "free_angle", ld.free_angle)


def validate_mechanism(mech: Mechanism) -> list[Problem]:
    """Every semantic problem of ``mech`` (an empty list when it is valid)."""
    c = _Checker(mech)
    if not mech.bodies:
        c.add("bodies", "a mechanism needs at least one body")
    c.vector("", "gravity", mech.gravity)
    c.names("bodies", mech.bodies, {})
    elements: dict[str, str] = {}
    c.names("joints", mech.joints, elements)
    c.names("drivers", mech.drivers, elements)
    c.names("loads", mech.loads, elements)
    for i, b in enumerate(mech.bodies):
        c.body(i, b)
    for i, j in enumerate(mech.joints):
        c.joint(i, j)
    for i, d in enumerate(mech.drivers):
        c.driver(i, d)
    for i, ld in enumerate(mech.loads):
        c.load(i, ld)
    return c.problems


def item_problems(mech: Mechanism, name: str) -> list[Problem]:
    """The problems :func:`validate_mechanism` reports about the body, joint or load called
    ``name`` on its own (its fields and references; not the cross-item checks such as duplicate
    names): enough to re-check an item after one of its numbers changed."""
    c = _Checker(mech)
    for i in _where(mech.bodies, name):
        c.body(i, mech.bodies[i])
    for i in _where(mech.joints, name):
        c.joint(i, mech.joints[i])
    for i in _where(mech.loads, name):
        c.load(i, mech.loads[i])
    return c.problems


def _where(items: tuple[Any, ...], name: str) -> list[int]:
    """The places of the items called ``name``: by the section's index (``model.positions``), by a
    pass over the items where a name repeats."""
    index = positions(items)
    if index is None:
        return [i for i, it in enumerate(items) if it.name == name]
    return [index[name]] if name in index else []
