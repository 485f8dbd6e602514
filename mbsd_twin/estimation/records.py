"""The filter's records: an update's innovation, a prediction, a linearisation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]
PARAM_WRITE = 0.05  # a parameter estimate is written into the Simulator once it moved this many σ


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
