"""How the standalone FMU applies each parameter its modelDescription declares, found from the
Simulator that the other flavours build with it (``Simulator.set_parameter``):

- ``solver.rtol``, ``solver.max_step``: the options ``ob`` (tunable);
- a live parameter (``live_parameters``: mass, inertia, centre of mass, stiffness, damping,
  friction): one number of the packed float buffer ``fb``, within the validation's bound;
- any other model parameter whose new value the rebuilt Simulator stores as *plain entries* of
  ``fb`` (the same number at one or a few places, the integer buffer, options and inputs
  unchanged, besides the springs' free lengths and angles that the mechanism leaves to the
  assembled pose): gravity (``gravity.x``/``gravity.y``) and joint geometry (``<joint>.p1_x`` …).
  The FMU writes the value there; a parameter other than gravity that changes the packed model
  changes the constraints, so the initial configuration is assembled again from the mechanism's
  guess and those free lengths and angles taken from it, as the rebuild does. A parameter the
  compiled model does not read (a cam's or a gear's joint points: the rebuilt Simulator is the
  same) is accepted and changes nothing;
- a start value (``<body>.theta_start`` …, ``start_values``): imposed at initialisation with every
  other start value held (``nb_assembly.constrained_state``);
- the viscous friction of a revolute or prismatic joint built without friction (``PAR_LAYOUT``):
  the joint has no friction entry in the packed model, so the FMU carries a second layout of it
  (:func:`friction_layout`: every such joint with a friction entry of coefficient 0, which adds
  exact zeros) and runs that one when such a value is set before initialisation;
- the rest stays as built (an Error at set time, naming the parameter; none among the shipped
  mechanisms).

Plain entries are found by probing: the model is rebuilt with a changed value and the packed
buffers compared — many parameters in one rebuild where it tells them apart (:mod:`.probe`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import MbsdError
from ...model.validation import item_problems
from ...simulation.simulator import Simulator
from .probe import plain_entries_of

PAR_FIXED, PAR_RTOL, PAR_MAX_STEP, PAR_LIVE, PAR_FB, PAR_START, PAR_LAYOUT = range(7)  # c/sa_engine.h
TUNABLE = {"solver.rtol": PAR_RTOL, "solver.max_step": PAR_MAX_STEP}
_PROBE = 1.2345678e-3  # relative change of a probed value
_PLACEHOLDER = 1.0  # the friction a joint built without it gets in the second layout's Simulator (then 0)


@dataclass(frozen=True)
class Applied:
    """Where the FMU writes a parameter: ``kind`` (``PAR_*``), ``index`` (PAR_LIVE: its place in
    fb; PAR_START: its place in the state y), ``entries`` (PAR_LIVE, PAR_FB: its places in fb),
    ``assemble`` (the initial configuration follows it), the validation's lower bound (-inf: none)
    and whether the bound is excluded."""

    kind: int
    index: int = -1
    entries: tuple[int, ...] = ()
    assemble: bool = False
    minimum: float = -math.inf
    strict: bool = False


def _valid(sim: Simulator, name: str, value: float) -> bool:
    """Whether the mechanism's validation accepts ``value`` for the parameter ``name``."""
    mech = sim._table[name][1](sim.mechanism, value)
    return not item_problems(mech, name.rpartition(".")[0])


def _bound(sim: Simulator, name: str) -> tuple[float, bool]:
    """(minimum, excluded) of ``name``'s value: the validation's, found by asking it about 0 and -1."""
    if _valid(sim, name, -1.0):
        return -math.inf, False
    return 0.0, not _valid(sim, name, 0.0)


def reference_rows(sim: Simulator) -> tuple[list[int], list[int]]:
    """(rows of the spring-dampers, rows of the rotational spring-dampers) whose free length or
    angle the mechanism leaves to the assembled pose (``LoadSet.set_reference``)."""
    springs, rotational = sim.system.loads._springs, sim.system.loads._rotational
    sd = [k for k, ld in enumerate(springs.loads) if ld.free_length is None] if springs is not None else []
    rs = [k for k, ld in enumerate(rotational.loads) if ld.free_angle is None] if rotational is not None else []
    return sd, rs


def _reference_entries(sim: Simulator) -> set[int]:
    sd, rs = reference_rows(sim)
    st = sim._stepper
    return {st.model_index("sd", k, 6) for k in sd} | {st.model_index("rs", k, 2) for k in rs}


def plain_entries(sim: Simulator, name: str) -> tuple[tuple[int, ...], bool] | None:
    """(the places in ``fb`` where the Simulator rebuilt with a changed ``name`` holds its value,
    whether the packed model changed at all) when nothing else of the packed model, options,
    inputs and initial state changes besides the springs' free lengths and angles taken from the
    assembled pose; None otherwise."""
    st = sim._stepper
    value = float(sim._table[name][0].value)
    probe_value = value + _PROBE * max(1.0, abs(value))
    try:
        probe = Simulator(sim._base, sim.options)
        probe.set_parameter(name, probe_value)
    except MbsdError:
        return None
    ps = probe._stepper
    if (ps._fb.shape != st._fb.shape or ps._ib.shape != st._ib.shape or not np.array_equal(ps._ib, st._ib)
            or not np.array_equal(ps._ob, st._ob) or not np.array_equal(ps._u, st._u)):
        return None
    changed = set(np.nonzero(ps._fb != st._fb)[0].tolist())
    if not changed:  # not read by the compiled model
        return ((), False) if np.array_equal(ps._S, st._S) else None
    plain = sorted(changed - _reference_entries(sim))
    if not (ps._fb[plain] == probe_value).all() or not (st._fb[plain] == value).all():
        return None
    return tuple(int(k) for k in plain), True


def friction_layout(sim: Simulator) -> Simulator | None:
    """The Simulator of the mechanism with every revolute and prismatic joint built without
    friction given a friction entry (its coefficient is :data:`_PLACEHOLDER` there: the FMU writes
    0, see :func:`layout_friction_entries`), when there is such a joint and the layout keeps the
    integrator state, inputs, options and outputs; else None."""
    from ...simulation.ports import apply_parameters

    names = [f"{j.name}.viscous_friction" for j in sim.mechanism.joints
             if j.type in ("revolute", "prismatic") and j.viscous_friction == 0.0]
    if not names:
        return None
    try:
        full = Simulator(apply_parameters(sim._base, dict.fromkeys(names, _PLACEHOLDER)), sim.options)
    except MbsdError:
        return None
    a, b = sim._stepper, full._stepper
    if (a._S.shape != b._S.shape or a._u.shape != b._u.shape or not np.array_equal(a._ob, b._ob)
            or full.output_names() != sim.output_names() or not np.array_equal(sim._react_idx, full._react_idx)
            or not np.array_equal(sim._effort_rows, full._effort_rows)):
        return None
    return full


def layout_friction_entries(base: Simulator, full: Simulator) -> list[int]:
    """The places in ``full``'s ``fb`` (:func:`friction_layout`) of the frictions ``base`` lacks."""
    from ...simulation.live_parameters import live_slot

    out = []
    for j in base.mechanism.joints:
        name = f"{j.name}.viscous_friction"
        if j.type in ("revolute", "prismatic") and live_slot(base.system, name) is None:
            slot = live_slot(full.system, name)
            if slot is not None:
                out.append(full._stepper.model_index(slot.packed, slot.row, slot.col))
    return out


def applied(sim: Simulator, names: Sequence[str], layout: bool = False) -> dict[str, Applied]:
    """name → how the standalone FMU applies it, for the parameters ``names`` (with ``layout``: a
    friction that needs the second layout is ``PAR_LAYOUT``)."""
    from ...simulation.live_parameters import live_slot


    out: dict[str, Applied] = {}
    probed: list[str] = []
    for name in names:
        if name in TUNABLE:
            out[name] = Applied(TUNABLE[name])
        elif name in sim._starts.index:
            out[name] = Applied(PAR_START, index=sim._starts.index[name])
        elif name not in sim._table:
            out[name] = Applied(PAR_FIXED)
        elif (slot := live_slot(sim.system, name)) is not None:
            index = sim._stepper.model_index(slot.packed, slot.row, slot.col)
            out[name] = Applied(PAR_LIVE, index, (index,), False, *_bound(sim, name))
        elif name.endswith(".viscous_friction") and layout:
            out[name] = Applied(PAR_LAYOUT, -1, (), False, *_bound(sim, name))
        else:
            probed.append(name)
            out[name] = Applied(PAR_FIXED)  # its place in the order; the probe below may say otherwise
    for name, plain in plain_entries_of(sim, probed, plain_entries, _PROBE, _reference_entries(sim)).items():
        if plain is not None:
            entries, moved = plain
            out[name] = Applied(PAR_FB, -1, entries, moved and not name.startswith("gravity."), *_bound(sim, name))
    return out
