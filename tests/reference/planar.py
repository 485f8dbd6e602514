"""Small planar-vector helpers shared by the closed-form references (numpy only).

Vectors are arrays whose last axis has length 2; everything broadcasts over leading axes so a
whole time series is evaluated at once.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]


def unit(angle: ArrayLike) -> FloatArray:
    """e(θ) = (cos θ, sin θ), shape ``angle.shape + (2,)``."""
    a = np.asarray(angle, dtype=float)
    return np.stack([np.cos(a), np.sin(a)], axis=-1)


def perp(v: ArrayLike) -> FloatArray:
    """J·v with J = [[0, −1], [1, 0]] (rotation by +90°): the ω × v of planar kinematics."""
    v = np.asarray(v, dtype=float)
    return np.stack([-v[..., 1], v[..., 0]], axis=-1)


def cross(a: ArrayLike, b: ArrayLike) -> FloatArray:
    """Scalar planar cross product a × b = a_x b_y − a_y b_x (the z component)."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def rotate(angle: ArrayLike, s: ArrayLike) -> FloatArray:
    """A(θ)·s for a body-frame vector s (shape (2,)) and angles of any shape."""
    a = np.asarray(angle, dtype=float)
    s = np.asarray(s, dtype=float)
    c, si = np.cos(a), np.sin(a)
    return np.stack([c * s[0] - si * s[1], si * s[0] + c * s[1]], axis=-1)


def offset_kinematics(theta: ArrayLike, omega: ArrayLike, alpha: ArrayLike,
                      s: ArrayLike) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Position, velocity and acceleration of a body-fixed offset relative to the reference point.

    With d = A(θ)s:  ḋ = ω J d  and  d̈ = α J d − ω² d  (rigid-body rotation in the plane).
    """
    d = rotate(theta, s)
    w = np.asarray(omega, dtype=float)[..., None]
    al = np.asarray(alpha, dtype=float)[..., None]
    return d, w * perp(d), al * perp(d) - w * w * d


def power_balance(gravity: ArrayLike,
                  bodies: list[tuple[float, float, ArrayLike, ArrayLike, ArrayLike, ArrayLike,
                                     ArrayLike, ArrayLike]]) -> FloatArray:
    """Rate of change of kinetic plus gravitational potential energy, Σ_i d(E_i)/dt.

    Each body is ``(mass, inertia_about_G, cg, v_ref, a_ref, angle, omega, alpha)`` with the
    reference-point velocity/acceleration (…, 2) and the body-frame centre of mass ``cg``:
        dE/dt = Σ_i [ m_i (a_Gi − g)·v_Gi + I_i α_i ω_i ].
    With ideal (workless) joints this equals the power of the drives, e.g. T·θ̇ for one motor.
    """
    g = np.asarray(gravity, dtype=float)
    total: FloatArray | float = 0.0
    for mass, inertia, cg, v_ref, a_ref, angle, omega, alpha in bodies:
        _, d_d, d_dd = offset_kinematics(angle, omega, alpha, cg)
        vG = np.asarray(v_ref, dtype=float) + d_d
        aG = np.asarray(a_ref, dtype=float) + d_dd
        total = total + mass * np.sum((aG - g) * vG, axis=-1) + inertia * np.asarray(alpha) * omega
    return np.asarray(total, dtype=float)
