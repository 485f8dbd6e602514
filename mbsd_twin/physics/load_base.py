"""What every applied-load kind builds on: the batch evaluation context, the energy totals and the
:class:`Group` interface (one group evaluates all loads of one kind). The kinds are in
:mod:`.loads` (forces, torques, springs, dampers, joint friction), :mod:`.contact` (penalty
contact) and :mod:`.frames` (rotating frames); :class:`.loads.LoadSet` assembles them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..model.model import GROUND, Load

F = NDArray[Any]
Idx = NDArray[np.intp]


@dataclass
class LoadContext:
    """One evaluation: q, v (B, n + 3) extended with the ground's zeros, t (B,), input values."""

    qx: F
    vx: F
    t: F
    inputs: dict[str, float]

    def pose(self, col: Idx) -> tuple[F, F]:
        th = self.qx[:, col + 2]
        return np.cos(th), np.sin(th)


@dataclass
class LoadTotals:
    Q: F
    elastic: F
    dissipation: F
    input: F


class Group:
    def __init__(self, col: dict[str, int], loads: Sequence[Load]) -> None:
        self.loads = list(loads)
        self.ci = np.array([col[ld.bodies[0]] for ld in loads], dtype=np.intp)
        self.cj = np.array([col[ld.bodies[1]] if len(ld.bodies) > 1 else col[GROUND] for ld in loads],
                           dtype=np.intp)

    def apply(self, Q: F, ctx: LoadContext) -> tuple[F, F, F]:
        raise NotImplementedError

    def output_specs(self) -> list[Any]:
        """Named outputs this group reports (``outputs.OutputSpec``); most groups have none."""
        return []

    def outputs(self, ctx: LoadContext) -> dict[str, F]:
        """Values of ``output_specs`` for the batch, each (B,)."""
        return {}
