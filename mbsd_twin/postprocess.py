"""Outputs recomputed from a :class:`Result`'s body columns.

``with_load_outputs`` appends the outputs that load groups report (contact normal and friction
forces, penetration, slip velocity; see ``LoadSet.output_specs``) to a simulation result. It
reads the pose and velocity columns, so it works on any result with them; extra (non-body)
coordinates are set to zero, which no load reads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from .results import Result
from .system import System

F = NDArray[Any]


def state_from_result(system: System, res: Result) -> tuple[F, F]:
    """q, v (N, n) from the ``<body>.x/.y/.theta/.vx/.vy/.omega`` columns."""
    N, n = len(res), system.n_coord
    q, v = np.zeros((N, n)), np.zeros((N, n))
    for k, b in enumerate(system.body_names):
        for c, (pos, vel) in enumerate((("x", "vx"), ("y", "vy"), ("theta", "omega"))):
            q[:, 3 * k + c] = res[f"{b}.{pos}"]
            v[:, 3 * k + c] = res[f"{b}.{vel}"]
    return q, v


def with_load_outputs(system: System, res: Result, inputs: dict[str, float] | None = None) -> Result:
    """``res`` with the load groups' outputs appended (columns already present are kept)."""
    specs = [s for s in system.loads.output_specs() if s.name not in res]
    if not specs:
        return res
    q, v = state_from_result(system, res)
    cols = system.loads.outputs(q, v, res.time, inputs or {})
    data = np.column_stack([res.data, *(cols[s.name] for s in specs)])
    return Result([*res.specs, *specs], data, res.kind, res.source, list(res.warnings), res.status, res.message)
