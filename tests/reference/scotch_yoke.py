"""Closed-form Scotch yoke.

A crank of radius r turns about the ground origin (angle θ); its pin P = r e(θ) runs in a slot of
the yoke that is perpendicular to the yoke's sliding axis (the world x axis). The yoke therefore
follows the pin's x coordinate exactly (simple harmonic motion when θ̇ is constant):
    x  = r cos θ
    ẋ  = −r sin θ·θ̇
    ẍ  = −r cos θ·θ̇² − r sin θ·θ̈
and the pin's height along the slot is s = r sin θ (ṡ = r cos θ·θ̇, s̈ = −r sin θ·θ̇² + r cos θ·θ̈).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .planar import FloatArray


def yoke(theta: ArrayLike, omega: ArrayLike, alpha: ArrayLike = 0.0,
         r: float = 0.1) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(x, ẋ, ẍ) of the yoke (its slot line) for crank angle θ, rate θ̇ and acceleration θ̈."""
    th = np.asarray(theta, dtype=float)
    w = np.asarray(omega, dtype=float)
    al = np.asarray(alpha, dtype=float)
    s, c = np.sin(th), np.cos(th)
    return r * c, -r * s * w, -r * c * w * w - r * s * al


def slot_position(theta: ArrayLike, omega: ArrayLike, alpha: ArrayLike = 0.0,
                  r: float = 0.1) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(s, ṡ, s̈): the pin's height along the slot."""
    th = np.asarray(theta, dtype=float)
    w = np.asarray(omega, dtype=float)
    al = np.asarray(alpha, dtype=float)
    s, c = np.sin(th), np.cos(th)
    return r * s, r * c * w, -r * s * w * w + r * c * al
