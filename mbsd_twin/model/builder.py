"""Build a mechanism in Python, without a file.

    b = MechanismBuilder("slider-crank")
    b.body("crank", mass=1.0, inertia=8.333e-4, cg=(0.05, 0.0))
    b.revolute("main_bearing", "ground", "crank", (0.0, 0.0), (0.0, 0.0))
    b.angle_driver("motor", "crank", ConstantSpeed(2 * np.pi))
    mech = b.build()          # validated: raises MechanismError listing every problem

Every method returns the builder, so calls can be chained. Names, units and conventions are those
of the mechanism file (``docs/mechanism-file.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import MechanismError
from .model import Body, Driver, Joint, Load, Mechanism, Vec2
from .profiles import Profile


def _v(p: Sequence[float]) -> Vec2:
    return (float(p[0]), float(p[1]))


class MechanismBuilder:
    """A mechanism assembled in Python, one element per call, instead of read from a TOML file.

    ``MechanismBuilder(name, gravity=(0, -9.81), description="")`` starts an empty mechanism; the
    world is the body ``"ground"``. Add bodies (:meth:`body`), joints (:meth:`revolute`,
    :meth:`prismatic`, :meth:`point_on_line`, :meth:`gear`, :meth:`fixed` or any kind through
    :meth:`joint`), drivers (:meth:`angle_driver`, :meth:`coordinate_driver`,
    :meth:`distance_driver`) and loads (:meth:`torque`, :meth:`force`, :meth:`spring_damper`,
    :meth:`rotational_spring_damper`, :meth:`generalized_force`); each call returns the builder, so
    calls chain. :meth:`build` validates the whole mechanism and returns a
    :class:`~mbsd_twin.model.model.Mechanism`, the same plain data :func:`~mbsd_twin.load_mechanism`
    reads from a file, or raises :class:`~mbsd_twin.errors.MechanismError` listing every problem. Names,
    units (SI: m, kg, kg·m², rad, N, N·m) and sign conventions are those of the mechanism file
    (``docs/mechanism-file.md``): points are in the body's frame, angles counter-clockwise.

    A pendulum: a 1 kg bar whose centre of mass is 0.5 m from its pivot, released horizontally.
    After 0.1 s it has fallen by about ½·(m·g·r / I_pivot)·t² = ½·(4.905 / 0.26)·0.01 = 0.094 rad:

    >>> import mbsd_twin as mt
    >>> mech = (mt.MechanismBuilder("pendulum")
    ...         .body("bar", mass=1.0, inertia=0.01, cg=(0.5, 0.0))
    ...         .revolute("pivot", "ground", "bar", (0.0, 0.0), (0.0, 0.0))
    ...         .build())
    >>> sim = mt.Simulator(mech)
    >>> sim.advance_to(0.1)
    >>> round(sim.get_output("bar.theta"), 3)
    -0.094
    """

    def __init__(self, name: str, gravity: Sequence[float] = (0.0, -9.81), description: str = "") -> None:
        self.name, self.gravity, self.description = name, _v(gravity), description
        self._bodies: list[Body] = []
        self._joints: list[Joint] = []
        self._drivers: list[Driver] = []
        self._loads: list[Load] = []

    # bodies -----------------------------------------------------------------
    def body(self, name: str, mass: float, inertia: float, cg: Sequence[float] = (0.0, 0.0),
             position: Sequence[float] = (0.0, 0.0), angle: float = 0.0,
             velocity: Sequence[float] = (0.0, 0.0), omega: float = 0.0,
             pin: Sequence[str] = ()) -> MechanismBuilder:
        """``pin``: coordinates ("x", "y", "theta") held at their given values by the assembly."""
        self._bodies.append(Body(name, float(mass), float(inertia), _v(cg), _v(position), float(angle),
                                 _v(velocity), float(omega), tuple(pin)))
        return self

    # joints -----------------------------------------------------------------
    def joint(self, name: str, type: str, first: str, second: str, p1: Sequence[float] = (0.0, 0.0),
              p2: Sequence[float] = (0.0, 0.0), **kw: Any) -> MechanismBuilder:
        axis = kw.pop("axis", None)
        self._joints.append(Joint(name, type, (first, second), (_v(p1), _v(p2)),
                                  None if axis is None else _v(axis), **kw))
        return self

    def revolute(self, name: str, first: str, second: str, p1: Sequence[float], p2: Sequence[float],
                 viscous_friction: float = 0.0) -> MechanismBuilder:
        return self.joint(name, "revolute", first, second, p1, p2, viscous_friction=viscous_friction)

    def prismatic(self, name: str, first: str, second: str, p1: Sequence[float], p2: Sequence[float],
                  axis: Sequence[float], angle: float | None = None,
                  viscous_friction: float = 0.0) -> MechanismBuilder:
        return self.joint(name, "prismatic", first, second, p1, p2, axis=axis, angle=angle,
                          viscous_friction=viscous_friction)

    def point_on_line(self, name: str, first: str, second: str, p1: Sequence[float],
                      p2: Sequence[float], axis: Sequence[float]) -> MechanismBuilder:
        return self.joint(name, "point_on_line", first, second, p1, p2, axis=axis)

    def gear(self, name: str, first: str, second: str, ratio: float, offset: float | None = None,
             mesh: str | None = None, carrier: str | None = None) -> MechanismBuilder:
        """(θ1 − θc) − τ·(θ2 − θc) = offset; τ = −ratio (``mesh="external"``), +ratio ("internal"),
        or the signed ratio as given without a mesh; θc the ``carrier``'s angle (default ground)."""
        return self.joint(name, "gear", first, second, ratio=float(ratio), offset=offset, mesh=mesh,
                          carrier=carrier)

    def fixed(self, name: str, first: str, second: str, p1: Sequence[float], p2: Sequence[float],
              angle: float | None = None) -> MechanismBuilder:
        return self.joint(name, "fixed", first, second, p1, p2, angle=angle)

    # drivers ----------------------------------------------------------------
    def angle_driver(self, name: str, body: str, profile: Profile) -> MechanismBuilder:
        self._drivers.append(Driver(name, "angle", (body,), profile, "theta", ((0.0, 0.0),)))
        return self

    def coordinate_driver(self, name: str, body: str, coordinate: str, profile: Profile,
                          point: Sequence[float] = (0.0, 0.0)) -> MechanismBuilder:
        self._drivers.append(Driver(name, "coordinate", (body,), profile, coordinate, (_v(point),)))
        return self

    def distance_driver(self, name: str, first: str, second: str, p1: Sequence[float],
                        p2: Sequence[float], profile: Profile) -> MechanismBuilder:
        self._drivers.append(Driver(name, "distance", (first, second), profile, "", (_v(p1), _v(p2))))
        return self

    # loads ------------------------------------------------------------------
    def torque(self, name: str, body: str, value: float = 0.0, profile: Profile | None = None,
               input: str | None = None, reaction_body: str | None = None, unit: str = "N.m",
               description: str = "") -> MechanismBuilder:
        bodies = (body,) if reaction_body is None else (body, reaction_body)
        self._loads.append(Load(name, "torque", bodies, value=float(value), profile=profile, input=input,
                                unit=unit, description=description))
        return self

    def force(self, name: str, body: str, point: Sequence[float] = (0.0, 0.0),
              direction: Sequence[float] = (1.0, 0.0), frame: str = "world", value: float = 0.0,
              profile: Profile | None = None, input: str | None = None, unit: str = "N",
              description: str = "") -> MechanismBuilder:
        self._loads.append(Load(name, "force", (body,), (_v(point),), float(value), profile, input,
                                _v(direction), frame, unit=unit, description=description))
        return self

    def spring_damper(self, name: str, first: str, second: str, p1: Sequence[float], p2: Sequence[float],
                      stiffness: float, damping: float = 0.0,
                      free_length: float | None = None) -> MechanismBuilder:
        self._loads.append(Load(name, "spring_damper", (first, second), (_v(p1), _v(p2)),
                                stiffness=float(stiffness), damping=float(damping), free_length=free_length))
        return self

    def rotational_spring_damper(self, name: str, first: str, second: str, stiffness: float,
                                 damping: float = 0.0, free_angle: float | None = None) -> MechanismBuilder:
        self._loads.append(Load(name, "rotational_spring_damper", (first, second), stiffness=float(stiffness),
                                damping=float(damping), free_angle=free_angle))
        return self

    def generalized_force(self, name: str, function: Callable[..., np.ndarray],
                          coordinates: Sequence[str]) -> MechanismBuilder:
        """``function(t, q, v) -> Q`` on the named coordinates (e.g. ``["crank.theta"]``); t is a
        float, q and v the full coordinate vectors."""
        self._loads.append(Load(name, "generalized", (), function=function, coordinates=tuple(coordinates)))
        return self

    # build ------------------------------------------------------------------
    def build(self) -> Mechanism:
        from .validation import validate_mechanism

        mech = Mechanism(self.name, tuple(self._bodies), tuple(self._joints), tuple(self._drivers),
                         tuple(self._loads), self.gravity, "<api>", self.description)
        problems = validate_mechanism(mech)
        if problems:
            raise MechanismError(problems, source=f"<api: {self.name}>")
        return mech
