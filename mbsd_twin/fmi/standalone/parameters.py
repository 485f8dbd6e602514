"""How the standalone FMU applies each parameter its modelDescription declares, found from the
Simulator that the other flavours build with it (``Simulator.set_parameter``):

- ``solver.rtol``, ``solver.max_step``: the options ``ob`` (tunable);
- a live parameter (``live_parameters``: mass, inertia, centre of mass, stiffness, damping,
  friction): one number of the packed float buffer ``fb``, within the validation's bound;
- any other model parameter whose new value the rebuilt Simulator stores as *plain entries* of
  ``fb`` (the same number at one or a few places, the integer buffer, options and inputs
  unchanged): gravity (``gravity.x``/``gravity.y``) and joint geometry (``<joint>.p1_x`` …). The FMU
  writes the value there; a parameter other than gravity changes the constraints, so the initial
  configuration is assembled again from the mechanism's guess, as the rebuild does;
- a start value (``<body>.theta_start`` …, ``start_values``): imposed at initialisation with every
  other start value held (``nb_assembly.constrained_state``);
- the rest stays as built (an Error at set time): parameters whose change alters the model's
  structure, such as the viscous friction of a joint built without friction (a new load entry).

Plain entries are found by probing: the model is rebuilt with a changed value and the packed
buffers compared (one Simulator build per such parameter).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import MbsdError
from ...model.validation import item_problems
from ...simulation.simulator import Simulator

PAR_FIXED, PAR_RTOL, PAR_MAX_STEP, PAR_LIVE, PAR_FB, PAR_START = range(6)  # c/sa_engine.h
TUNABLE = {"solver.rtol": PAR_RTOL, "solver.max_step": PAR_MAX_STEP}
_PROBE = 1.2345678e-3  # relative change of a probed value


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


def plain_entries(sim: Simulator, name: str) -> tuple[int, ...]:
    """The places in ``fb`` where the Simulator rebuilt with a changed ``name`` holds its value,
    when nothing else of the packed model, options and inputs changes; () otherwise."""
    st = sim._stepper
    value = float(sim._table[name][0].value)
    probe_value = value + _PROBE * max(1.0, abs(value))
    try:
        probe = Simulator(sim._base, sim.options)
        probe.set_parameter(name, probe_value)
    except MbsdError:
        return ()
    ps = probe._stepper
    if (ps._fb.shape != st._fb.shape or ps._ib.shape != st._ib.shape or not np.array_equal(ps._ib, st._ib)
            or not np.array_equal(ps._ob, st._ob) or not np.array_equal(ps._u, st._u)):
        return ()
    changed = np.nonzero(ps._fb != st._fb)[0]
    if not changed.size or not (ps._fb[changed] == probe_value).all() or not (st._fb[changed] == value).all():
        return ()
    return tuple(int(k) for k in changed)


def applied(sim: Simulator, names: Sequence[str]) -> dict[str, Applied]:
    """name → how the standalone FMU applies it, for the parameters ``names``."""
    from ...simulation.live_parameters import live_slot

    out: dict[str, Applied] = {}
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
        elif entries := plain_entries(sim, name):
            out[name] = Applied(PAR_FB, -1, entries, not name.startswith("gravity."), *_bound(sim, name))
        else:
            out[name] = Applied(PAR_FIXED)
    return out
