"""The mechanism as plain data: bodies, joints, drivers and loads.

Frames and units: every vector is a 2-tuple of floats in SI units. ``points``, ``cg`` and body-fixed
directions are given in the owning body's frame, relative to that body's reference point; world
quantities (``gravity``, ``position``) are in the world frame. Angles are in rad, counter-clockwise
positive. The body named ``ground`` always exists, is fixed at the world origin with angle 0, and
has no coordinates.

Nothing here computes: ``mbsd_twin.physics.system.compile_mechanism`` turns a ``Mechanism`` into the
vectorised system the analyses run on.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .profiles import Profile

Vec2 = tuple[float, float]
GROUND = "ground"

JOINT_TYPES = ("revolute", "prismatic", "point_on_line", "gear", "fixed", "cam", "knife_edge")
DRIVER_TYPES = ("angle", "coordinate", "distance")
LOAD_TYPES = ("force", "torque", "spring_damper", "rotational_spring_damper", "generalized", "contact",
              "rotating_frame")


@dataclass(frozen=True)
class Polyline:
    """A profile through ``points`` (at least 2) in order; its free side is left of the direction
    of travel (above, for increasing x). Beyond its ends the end vertices are the nearest points."""

    points: tuple[tuple[float, float], ...]
    kind: str = field(default="polyline", init=False)


@dataclass(frozen=True)
class ContactSpec:
    """Geometry and friction of a ``contact`` load: the profile on the first body, and on the
    second body a circle (``radius`` > 0 about ``center``) or a polygon (``vertices``, radius 0)."""

    surface: Any
    radius: float = 0.0
    center: tuple[float, float] = (0.0, 0.0)
    vertices: tuple[tuple[float, float], ...] = ()
    friction: float = 0.0
    slip_velocity: float = 1e-3


@dataclass(frozen=True)
class Body:
    """A rigid body: mass [kg], inertia about its centre of mass [kg·m²], centre of mass ``cg`` [m]
    in the body frame, the initial guess of its reference point ``position`` [m, world] and
    ``angle`` [rad], and the initial ``velocity`` of the reference point [m/s, world] and angular
    velocity ``omega`` [rad/s] (forward dynamics only). ``pin`` names coordinates ("x", "y",
    "theta") the initial position assembly holds at their given values (the others move)."""

    name: str
    mass: float
    inertia: float
    cg: Vec2 = (0.0, 0.0)
    position: Vec2 = (0.0, 0.0)
    angle: float = 0.0
    velocity: Vec2 = (0.0, 0.0)
    omega: float = 0.0
    pin: tuple[str, ...] = ()


GEAR_MESHES = ("external", "internal")


@dataclass(frozen=True)
class Joint:
    """A kinematic pair between ``bodies[0]`` (first) and ``bodies[1]`` (second).

    - ``revolute``: ``points[0]`` on the first body coincides with ``points[1]`` on the second.
    - ``prismatic``: the relative angle θ2 − θ1 stays ``angle`` (default: its value in the initial
      guess) and ``points[1]`` stays on the line through ``points[0]`` along ``axis`` (first body's
      frame).
    - ``point_on_line``: ``points[1]`` stays on the line through ``points[0]`` along ``axis``.
    - ``gear``: angles relative to the ``carrier`` body (default ground, i.e. absolute angles):
      (θ1 − θc) − τ·(θ2 − θc) = ``offset`` (default: its value in the initial guess), with
      τ = −ratio for ``mesh`` "external" (the wheels turn opposite ways), τ = +ratio for "internal"
      (a ring gear; same way); without ``mesh``, τ = ratio as given (signed: negative for an
      external mesh). For teeth counts z1, z2: ratio = z2 / z1.
    - ``fixed``: revolute plus fixed relative angle ``angle`` (default from the initial guess).
    - ``cam``: curve ``surfaces[0]`` on the first body and ``surfaces[1]`` on the second (see
      ``mbsd_twin.model.surfaces``) stay in tangent contact; their parameters are two extra coordinates
      ``<name>.s1``, ``<name>.s2`` with initial guesses ``parameters`` (default: the closest pair
      of points at the initial poses).
    - ``knife_edge``: the blade at ``points[1]`` of the second body, rolling along ``axis`` (the
      second body's frame), has no sideways velocity relative to the first body: a nonholonomic
      constraint (see ``mbsd_twin.physics.nonholonomic``).

    ``viscous_friction`` adds a dissipative load in revolute (N·m·s/rad, on the relative angular
    speed) and prismatic joints (N·s/m, on the sliding speed).
    """

    name: str
    type: str
    bodies: tuple[str, str]
    points: tuple[Vec2, Vec2] = ((0.0, 0.0), (0.0, 0.0))
    axis: Vec2 | None = None
    ratio: float | None = None
    offset: float | None = None
    angle: float | None = None
    viscous_friction: float = 0.0
    surfaces: tuple[Any, ...] = ()
    parameters: tuple[float, float] | None = None
    carrier: str | None = None
    mesh: str | None = None


@dataclass(frozen=True)
class Driver:
    """A rheonomic constraint C(q, t) = g(q) − profile(t) = 0.

    - ``angle``: g = θ of ``bodies[0]`` [rad].
    - ``coordinate``: g = the world ``coordinate`` ("x" or "y") of ``points[0]`` on ``bodies[0]`` [m].
    - ``distance``: g = |P1 − P0| between ``points[0]`` on ``bodies[0]`` and ``points[1]`` on
      ``bodies[1]`` [m].

    The multiplier gives ``<driver>.effort``: the generalised force the actuator applies — motor
    torque about +z [N·m] for ``angle``, force along +x / +y [N] for ``coordinate``, force pushing
    the two points apart [N] for ``distance``.
    """

    name: str
    type: str
    bodies: tuple[str, ...]
    profile: Profile
    coordinate: str = "theta"
    points: tuple[Vec2, ...] = ((0.0, 0.0), (0.0, 0.0))


@dataclass(frozen=True)
class Load:
    """An applied load (generalised force).

    - ``force``: a force of magnitude m(t) along ``direction`` (unit vector; ``frame`` "world" or
      "body") applied at ``points[0]`` of ``bodies[0]`` [N].
    - ``torque``: a torque m(t) about +z on ``bodies[0]`` [N·m] (reaction on ``bodies[1]`` if given).
    - ``spring_damper``: between ``points[0]`` of ``bodies[0]`` and ``points[1]`` of ``bodies[1]``;
      tension F = stiffness·(L − free_length) + damping·dL/dt [N].
    - ``rotational_spring_damper``: torque on ``bodies[1]`` of
      −stiffness·(θ1 − θ0 − free_angle) − damping·(ω1 − ω0) [N·m], opposite on ``bodies[0]``.
      ``free_length`` / ``free_angle`` default (None) to the value in the assembled initial pose
      (after the position assembly, see ``System.set_reference_pose``), so a default spring
      starts unloaded.
    - ``generalized``: a Python callable Q(t, q, v) on ``coordinates`` (API only).
    - ``contact``: unilateral penalty contact between a profile on ``bodies[0]`` and a circle or
      polygon on ``bodies[1]`` (``contact``: a ``mbsd_twin.model.model.ContactSpec``); ``stiffness``
      is the Hertz K [N/m^1.5], ``damping`` the C of C·δ̇·δ [N·s/m²] (see ``mbsd_twin.physics.contact``).
    - ``rotating_frame``: centrifugal and Coriolis pseudo-forces on ``bodies`` (all when empty)
      of a frame turning at ``value`` [rad/s] about ``points[0]`` (see ``mbsd_twin.physics.frames``).

    The magnitude m(t) of ``force``/``torque`` is ``value`` (constant), ``profile`` (of time), or
    the value of the input port named ``input`` (held constant over each step).
    """

    name: str
    type: str
    bodies: tuple[str, ...]
    points: tuple[Vec2, ...] = ((0.0, 0.0), (0.0, 0.0))
    value: float = 0.0
    profile: Profile | None = None
    input: str | None = None
    direction: Vec2 = (1.0, 0.0)
    frame: str = "world"
    stiffness: float = 0.0
    damping: float = 0.0
    free_length: float | None = None
    free_angle: float | None = None
    function: Callable[..., np.ndarray] | None = None
    coordinates: tuple[str, ...] = ()
    unit: str = ""
    description: str = ""
    contact: Any = None


_POSITIONS: OrderedDict[int, tuple[tuple[Any, ...], dict[str, int] | None]] = OrderedDict()
_POSITIONS_KEPT = 64  # tuples remembered, the least recently used forgotten first
_POSITIONS_LOCK = threading.Lock()


def positions(items: tuple[Any, ...]) -> dict[str, int] | None:
    """name → index of a mechanism section's ``items`` (bodies, joints, …), or None when a name
    repeats; remembered for this very tuple (held, so that its id stays its own), so that looking
    items up one parameter at a time is not linear in their number each time."""
    with _POSITIONS_LOCK:
        hit = _POSITIONS.get(id(items))
        if hit is not None and hit[0] is items:
            _POSITIONS.move_to_end(id(items))
            return hit[1]
    try:
        index = {it.name: i for i, it in enumerate(items)}
    except TypeError:  # a name that is no string (the validation reports it)
        index = {}
    found = index if len(index) == len(items) else None
    remember_positions(items, found)
    return found


def remember_positions(items: tuple[Any, ...], index: dict[str, int] | None) -> None:
    """Record ``index`` as the :func:`positions` of ``items`` (a copy of a tuple whose names and
    order are unchanged shares its index)."""
    with _POSITIONS_LOCK:
        _POSITIONS[id(items)] = (items, index)
        _POSITIONS.move_to_end(id(items))
        while len(_POSITIONS) > _POSITIONS_KEPT:
            _POSITIONS.popitem(last=False)


@dataclass(frozen=True)
class Mechanism:
    """A planar mechanism. ``gravity`` is the world gravity vector [m/s²]; ``source`` names the file
    it was read from (for messages)."""

    name: str
    bodies: tuple[Body, ...]
    joints: tuple[Joint, ...] = ()
    drivers: tuple[Driver, ...] = ()
    loads: tuple[Load, ...] = ()
    gravity: Vec2 = (0.0, -9.81)
    source: str = "<api>"
    description: str = ""
    extra: dict[str, object] = field(default_factory=dict, compare=False)

    def body(self, name: str) -> Body:
        return _named(self.bodies, name, f"no body named {name!r} in mechanism {self.name!r}")

    def joint(self, name: str) -> Joint:
        return _named(self.joints, name, f"no joint named {name!r} in mechanism {self.name!r}")

    @property
    def input_names(self) -> tuple[str, ...]:
        """Input ports the loads read, in first-use order."""
        seen: dict[str, None] = {}
        for ld in self.loads:
            if ld.input:
                seen.setdefault(ld.input, None)
        return tuple(seen)


def _named(items: tuple[Any, ...], name: str, missing: str) -> Any:
    """The first item called ``name`` (KeyError ``missing`` when there is none)."""
    index = positions(items)
    if index is not None:
        if name in index:
            return items[index[name]]
    else:
        for it in items:
            if it.name == name:
                return it
    raise KeyError(missing)
