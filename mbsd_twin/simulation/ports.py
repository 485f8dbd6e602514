"""Named ports and parameters of a simulated mechanism: the single list that drives Simulator
outputs, FMU variables, MQTT payloads and the docs.

Parameters map names such as ``crank.mass`` onto fields of the plain-data model; changing a
``fixed`` parameter rebuilds the mechanism, a ``tunable`` one only the solver settings.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import MechanismError, PortError
from ..model.model import Body, Joint, Load, Mechanism, positions, remember_positions
from ..model.validation import validate_mechanism
from ..physics.output_spec import OutputSpec
from ..physics.outputs import kinematic_specs, reaction_specs
from ..physics.system import System
from ..solvers.dynamics import SolverOptions


@dataclass(frozen=True)
class Port:
    """A named signal. ``causality`` is "input" or "output"; ``start`` the initial value."""

    name: str
    unit: str
    description: str
    causality: str
    start: float = 0.0


@dataclass(frozen=True)
class Parameter:
    """A named setting: ``variability`` "fixed" (changes rebuild the model) or "tunable"."""

    name: str
    unit: str
    description: str
    value: float
    variability: str


ENERGY_SPECS = [
    OutputSpec("energy.kinetic", "J", "kinetic energy ½·vᵀ·M·v"),
    OutputSpec("energy.gravitational", "J", "gravitational potential energy −Σ m·g·R_G (zero at the origin)"),
    OutputSpec("energy.elastic", "J", "energy stored in springs"),
    OutputSpec("energy.total", "J", "kinetic + gravitational + elastic"),
    OutputSpec("energy.dissipated", "J", "energy dissipated by dampers and viscous joint friction since start"),
    OutputSpec("energy.input_work", "J", "work done by external loads (inputs, forces, torques) since start"),
    OutputSpec("energy.constraint_work", "J", "work done by the constraint forces (drivers) since start"),
    OutputSpec("energy.balance_error", "J",
               "total + dissipated − input_work − constraint_work − initial total: zero up to solver error"),
]
RESIDUAL_SPEC = OutputSpec("constraints.position_residual", "m",
                           "max |C(q, t)| over all constraint equations (m for point equations; angle "
                           "equations contribute their value in rad)")


def output_specs(system: System) -> list[OutputSpec]:
    """Kinematics, reactions and efforts, energy, residual, then the loads' own outputs (contact)."""
    return [*kinematic_specs(system), *reaction_specs(system), *ENERGY_SPECS, RESIDUAL_SPEC,
            *system.loads.output_specs()]


def input_ports(mech: Mechanism) -> list[Port]:
    out: dict[str, Port] = {}
    for ld in mech.loads:
        if ld.input and ld.input not in out:
            unit = ld.unit or ("N.m" if ld.type == "torque" else "N")
            what = ld.description or f"{'torque about +z on' if ld.type == 'torque' else 'force on'} {ld.bodies[0]}"
            out[ld.input] = Port(ld.input, unit, what, "input", 0.0)
    return list(out.values())


# ---------------------------------------------------------------- parameters
_Setter = Callable[[Mechanism, float], Mechanism]


def _replace_item(mech: Mechanism, attr: str, name: str, **changes: object) -> Mechanism:
    """``mech`` with the ``changes`` made to its item ``name`` of section ``attr``: the one item
    found by its index (a copy of the tuple around it, which shares the index), else every item of
    that name."""
    old = getattr(mech, attr)
    index = positions(old)
    if index is None or name not in index:
        items = tuple(dataclasses.replace(it, **changes) if it.name == name else it for it in old)
    else:
        i = index[name]
        items = (*old[:i], dataclasses.replace(old[i], **changes), *old[i + 1:])
        if "name" not in changes:
            remember_positions(items, index)
    fields: dict[str, Any] = {attr: items}
    return dataclasses.replace(mech, **fields)


def _body_params(b: Body) -> list[tuple[Parameter, _Setter]]:
    def vec(idx: int) -> _Setter:  # the other component from ``m`` (it may have been changed too)
        return lambda m, v: _replace_item(m, "bodies", b.name, cg=tuple(v if k == idx else c
                                                                           for k, c in enumerate(m.body(b.name).cg)))
    return [
        (Parameter(f"{b.name}.mass", "kg", f"mass of {b.name}", b.mass, "fixed"),
         lambda m, v: _replace_item(m, "bodies", b.name, mass=v)),
        (Parameter(f"{b.name}.inertia", "kg.m2", f"inertia of {b.name} about its centre of mass", b.inertia, "fixed"),
         lambda m, v: _replace_item(m, "bodies", b.name, inertia=v)),
        (Parameter(f"{b.name}.cg_x", "m", f"centre of mass of {b.name}, body x", b.cg[0], "fixed"), vec(0)),
        (Parameter(f"{b.name}.cg_y", "m", f"centre of mass of {b.name}, body y", b.cg[1], "fixed"), vec(1)),
    ]


def _joint_params(j: Joint) -> list[tuple[Parameter, _Setter]]:
    out: list[tuple[Parameter, _Setter]] = []
    for k, body in enumerate(j.bodies):
        for c, axis in enumerate("xy"):
            def setter(m: Mechanism, v: float, k: int = k, c: int = c) -> Mechanism:
                pts = [list(p) for p in m.joint(j.name).points]
                pts[k][c] = v
                return _replace_item(m, "joints", j.name, points=tuple(tuple(p) for p in pts))
            out.append((Parameter(f"{j.name}.p{k + 1}_{axis}", "m",
                                  f"joint point on {body} ({'first' if k == 0 else 'second'} body), body {axis}",
                                  j.points[k][c], "fixed"), setter))
    if j.type in ("revolute", "prismatic"):
        unit = "N.m.s/rad" if j.type == "revolute" else "N.s/m"
        out.append((Parameter(f"{j.name}.viscous_friction", unit, f"viscous friction in {j.name}",
                              j.viscous_friction, "fixed"),
                    lambda m, v: _replace_item(m, "joints", j.name, viscous_friction=v)))
    return out


def _load_params(ld: Load) -> list[tuple[Parameter, _Setter]]:
    out: list[tuple[Parameter, _Setter]] = []
    if ld.type in ("spring_damper", "rotational_spring_damper"):
        rot = ld.type.startswith("rot")
        for fld, unit in (("stiffness", "N.m/rad" if rot else "N/m"), ("damping", "N.m.s/rad" if rot else "N.s/m")):
            out.append((Parameter(f"{ld.name}.{fld}", unit, f"{fld} of {ld.name}", getattr(ld, fld), "fixed"),
                        functools.partial(_set_load_field, name=ld.name, field=fld)))
    return out


def _set_load_field(m: Mechanism, v: float, *, name: str, field: str) -> Mechanism:
    return _replace_item(m, "loads", name, **{field: v})


def _gravity_params(mech: Mechanism) -> list[tuple[Parameter, _Setter]]:
    def setter(c: int) -> _Setter:
        return lambda m, v: dataclasses.replace(m, gravity=(v, m.gravity[1]) if c == 0 else (m.gravity[0], v))
    return [(Parameter(f"gravity.{axis}", "m/s2", f"gravitational acceleration, world {axis} component (the usual "
                       "value is gravity.y = -9.81: +y up)", float(mech.gravity[c]), "fixed"), setter(c))
            for c, axis in enumerate("xy")]


def model_parameters(mech: Mechanism) -> dict[str, tuple[Parameter, _Setter]]:
    items = [p for b in mech.bodies for p in _body_params(b)]
    items += [p for j in mech.joints for p in _joint_params(j)]
    items += [p for ld in mech.loads for p in _load_params(ld)]
    items += _gravity_params(mech)
    return {p.name: (p, s) for p, s in items}


TUNABLE = {"solver.rtol": ("1", "relative tolerance of the integrator"),
           "solver.max_step": ("s", "largest internal integration step (0 or inf: no limit)")}


def solver_parameters(opts: SolverOptions) -> list[Parameter]:
    return [Parameter(n, u, d, float(getattr(opts, n.split(".")[1])), "tunable") for n, (u, d) in TUNABLE.items()]


def apply_parameters(mech: Mechanism, values: dict[str, float]) -> Mechanism:
    """The mechanism with fixed parameters changed; raises :class:`PortError` for an unknown name and
    :class:`MechanismError` (naming the parameter) for a value the model rejects."""
    table = model_parameters(mech)
    for name, value in values.items():
        if name not in table:
            raise PortError(f"unknown parameter {name!r}", name=name)
        mech = table[name][1](mech, float(value))
    problems = validate_mechanism(mech)
    if problems:
        raise MechanismError(problems, source=f"{mech.source} (parameters {', '.join(values)})")
    return mech
