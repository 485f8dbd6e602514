"""Input reconstruction between samples.

A sampled input channel holds u_k, the value at the instant t_k = t0 + k·dt (docs/mqtt-contract.md).
The Simulator holds each input constant over one ``advance_to`` call, so the interval [t_k, t_k+1]
is driven by one value per channel:

- ``"foh"`` (first-order hold, the default): (u_k + u_k+1)/2, the mean of the straight line through
  the two samples. Its impulse over the interval is exact for any input that is linear between
  samples, so the speeds follow such an input exactly at every sample (the positions to
  O(dt³·du/dt)).
- ``"zoh"`` (zero-order hold): u_k, for an input that really is held at each sample until the next
  (a digital controller's command written at the sample instant).

Over a block of h intervals (the twin's coarser hold levels under load) the value is the mean of
the per-interval values, which keeps the block's impulse.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

HOLDS = ("foh", "zoh")


def interval_inputs(samples: ArrayLike, hold: str = "foh") -> NDArray[np.float64]:
    """The value to hold over each of the len(samples) − 1 intervals between consecutive samples."""
    u = np.asarray(samples, dtype=float)
    if hold == "foh":
        return 0.5 * (u[:-1] + u[1:])
    if hold == "zoh":
        return u[:-1].copy()
    raise ValueError(f"unknown input hold {hold!r}; holds: {', '.join(HOLDS)}")
