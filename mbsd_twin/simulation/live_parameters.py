"""Physical parameters that can change in place, without rebuilding the model.

A parameter is *live* when a new value leaves the mechanism's structure — coordinates, constraint
rows, load groups and their entries, the assembled initial configuration — as it is, so that only
one number changes where the dynamics read it: a body's ``mass`` [kg], ``inertia`` [kg·m²] and
``cg_x``/``cg_y`` [m], a spring-damper's or rotational spring-damper's ``stiffness`` and
``damping``, and a revolute or prismatic joint's ``viscous_friction`` when the joint already has a
friction entry (its friction was non-zero when the model was built; a joint built without friction
has none, and a new non-zero value needs a rebuild). Joint points change the constraints and are
never live.

:func:`live_slot` says where such a number sits: in the numpy :class:`System` (an array and an
index) and in the compiled path's packed model (a ``compiled_model.FLOAT_ARRAYS`` name, row and
column).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from numpy.typing import NDArray

from ..physics import loads as ld
from ..physics.system import System

F = NDArray[Any]
_BODY = {"mass": ("mass", 0), "inertia": ("inertia", 0), "cg_x": ("cg", 0), "cg_y": ("cg", 1)}
# load group → (packed array name, {field: (group attribute, packed column)}), see compiled_model
_GROUPS: dict[type, tuple[str, dict[str, tuple[str, int]]]] = {
    ld.SpringDampers: ("sd", {"stiffness": ("k", 4), "damping": ("c", 5)}),
    ld.RotationalSpringDampers: ("rs", {"stiffness": ("k", 0), "damping": ("c", 1),
                                        "viscous_friction": ("c", 1)}),
    ld.PrismaticFriction: ("pf", {"viscous_friction": ("c", 6)}),
}


@dataclass(frozen=True)
class Slot:
    """Where a live parameter's value is: ``array[index]`` in the numpy system, and row ``row``,
    column ``col`` of the packed float array ``packed`` on the compiled path."""

    array: F
    index: tuple[int, ...]
    packed: str
    row: int
    col: int

    def write(self, value: float) -> None:
        """Set the value in the numpy system (the compiled stepper is written separately)."""
        self.array[self.index] = value


def _group_names(g: Any) -> list[str]:
    return list(g.names) if isinstance(g, ld.PrismaticFriction) else [x.name for x in g.loads]


def live_slot(system: System, name: str) -> Slot | None:
    """The slot of parameter ``name`` (``<item>.<field>``) if it is live in ``system``, else None."""
    item, _, field = name.rpartition(".")
    if field in _BODY and item in system.body_names:
        k = system.body_names.index(item)
        attr, c = _BODY[field]
        arr = getattr(system, attr)
        return Slot(arr, (k, c) if arr.ndim == 2 else (k,), attr, k, c)
    for g in system.loads.groups:
        packed, fields = _GROUPS.get(type(g), ("", {}))
        if field in fields and item in _group_names(g):
            r = _group_names(g).index(item)
            attr, col = fields[field]
            return Slot(getattr(g, attr), (r,), packed, r, col)
    return None
