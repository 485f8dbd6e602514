"""The filter's records: an update's innovation, a prediction, a linearisation, a gap's noise; and
the angle arithmetic they share (:func:`wrap`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]
PARAM_WRITE = 0.2  # a parameter estimate is written into the Simulator once it moved this many σ


@dataclass
class Innovation:
    """One update: measured − predicted per output, the predicted σ of that difference, NIS."""

    names: list[str]
    nu: F64
    sd: F64
    nis: float
    dx: F64  # the correction K·ν of every state component
    dx_sd: F64  # its σ while the filter is consistent: √diag(K·S·Kᵀ)

    @property
    def normalised(self) -> F64:
        return self.nu / self.sd


@dataclass
class Prediction:
    H: F64  # measurement Jacobian at the predicted point
    y: F64  # predicted measurements (all configured outputs)


@dataclass
class Linearisation:
    """The step's linearisation: length [s], transition F, measurement Jacobian H, process noise Q."""

    h: float
    n_steps: int
    F: F64
    H: F64
    Q: F64  # the inputs' share of the process noise
    Qa: F64 | None = None  # the white-acceleration share at the configured density
    z: F64 | None = None  # the coordinates at the linearised interval's end (the travel is measured from here)
    B: dict[str, F64] = field(default_factory=dict)  # input port → the state's change per unit offset held over it


@dataclass(frozen=True)
class GapNoise:
    """What is unknown across a gap in the measurements (a lost batch): the white-acceleration
    density that stands in for the model's own error over it, and for each input the second
    moments (E[a²], E[a·v], E[v²]) of the error of the straight line the input is reconstructed by
    across the gap — v its mean (what moves the speeds), a its mean weighted towards the gap's
    start (what moves the coordinates), in the input's unit (``mbsd_twin.twin.gaps.line_error``)."""

    accel_noise: float
    input_error: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)
    max_sd: float = math.inf  # a coordinate's predicted σ beyond which the prediction is not corrected


def wrap(x: F64, angular: NDArray[np.bool_]) -> F64:
    """``x`` with the angular entries wrapped to (−π, π]."""
    out = x.copy()
    out[angular] = np.remainder(out[angular] + math.pi, 2.0 * math.pi) - math.pi
    return out
