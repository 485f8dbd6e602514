"""Closed-form four-bar linkage: position (law of cosines, explicit branch), velocity, acceleration.

Layout
------
Ground pivots O2 = (0, 0) and O4 = (d, 0). Crank O2→A of length a at angle θ2, coupler A→B of
length b at angle θ3, rocker O4→B of length c at angle θ4 (all angles from the world +x axis,
counter-clockwise). Each body's reference point is the start of its vector (crank at O2, coupler
at A, rocker at O4), the end point is the body-frame point (length, 0).

Position
--------
A = a e(θ2). Let u = A − O4, e = |u|, δ = atan2(u_y, u_x). B lies on the circle of radius c about
O4 and on the circle of radius b about A; in triangle O4-A-B the law of cosines gives the angle ψ
between O4→A and O4→B:
    cos ψ = (c² + e² − b²) / (2 c e),   0 ≤ ψ ≤ π,
so θ4 = δ + σ ψ with the branch σ = ±1 (the two assembly modes, mirror images about the line
O4-A). Then B = O4 + c e(θ4) and θ3 = atan2(B_y − A_y, B_x − A_x).

Velocity
--------
Loop closure a e^{iθ2} + b e^{iθ3} − c e^{iθ4} − d = 0, differentiated and divided by i:
    a ω2 e^{iθ2} + b ω3 e^{iθ3} = c ω4 e^{iθ4}.
Multiply by e^{−iθ4} and take the imaginary part (eliminates ω4), then by e^{−iθ3} (eliminates ω3):
    ω3 = a ω2 sin(θ4 − θ2) / (b sin(θ3 − θ4))
    ω4 = a ω2 sin(θ2 − θ3) / (c sin(θ4 − θ3)).

Acceleration
------------
Differentiating again:
    a (iα2 − ω2²) e^{iθ2} + b (iα3 − ω3²) e^{iθ3} = c (iα4 − ω4²) e^{iθ4}.
Multiply by e^{−iθ4}, real part (eliminates α4):
    −a α2 sin(θ2−θ4) − a ω2² cos(θ2−θ4) − b α3 sin(θ3−θ4) − b ω3² cos(θ3−θ4) = −c ω4²
    ⇒ α3 = [c ω4² − a α2 sin(θ2−θ4) − a ω2² cos(θ2−θ4) − b ω3² cos(θ3−θ4)] / (b sin(θ3−θ4))
Multiply by e^{−iθ3}, real part (eliminates α3):
    −a α2 sin(θ2−θ3) − a ω2² cos(θ2−θ3) − b ω3² = −c α4 sin(θ4−θ3) − c ω4² cos(θ4−θ3)
    ⇒ α4 = [a α2 sin(θ2−θ3) + a ω2² cos(θ2−θ3) + b ω3² − c ω4² cos(θ4−θ3)] / (c sin(θ4−θ3)).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .planar import FloatArray, perp, power_balance, unit


@dataclass(frozen=True)
class FourBar:
    a: float = 0.8   # crank
    b: float = 2.0   # coupler
    c: float = 1.0   # rocker
    d: float = 2.0   # ground (O2 → O4 along +x)


@dataclass(frozen=True)
class FourBarState:
    theta2: FloatArray
    omega2: FloatArray
    alpha2: FloatArray
    theta3: FloatArray
    omega3: FloatArray
    alpha3: FloatArray
    theta4: FloatArray
    omega4: FloatArray
    alpha4: FloatArray
    A: FloatArray        # crank tip = coupler reference point, (N, 2)
    A_d: FloatArray
    A_dd: FloatArray
    B: FloatArray        # coupler tip = rocker tip, (N, 2)


def rocker_angle(fb: FourBar, theta2: ArrayLike, branch: int) -> FloatArray:
    """θ4 on the assembly branch σ = ``branch`` (±1), wrapped to (−π, π]."""
    if branch not in (1, -1):
        raise ValueError("branch must be +1 or -1")
    A = fb.a * unit(theta2)
    u = A - np.array([fb.d, 0.0])
    e = np.hypot(u[..., 0], u[..., 1])
    cos_psi = (fb.c**2 + e**2 - fb.b**2) / (2.0 * fb.c * e)
    if np.any(np.abs(cos_psi) > 1.0):
        raise ValueError("the four-bar cannot assemble at some crank angle")
    psi = np.arccos(cos_psi)
    delta = np.arctan2(u[..., 1], u[..., 0])
    return np.angle(np.exp(1j * (delta + branch * psi)))


def branch_of(fb: FourBar, theta2: float, theta4_guess: float) -> int:
    """The branch σ whose rocker angle is closest (on the circle) to a guess."""
    def dist(sigma: int) -> float:
        return abs(float(np.angle(np.exp(1j * (rocker_angle(fb, theta2, sigma) - theta4_guess)))))
    return 1 if dist(1) <= dist(-1) else -1


def solve(fb: FourBar, theta2: ArrayLike, omega2: ArrayLike, alpha2: ArrayLike = 0.0,
          branch: int = 1) -> FourBarState:
    """Closed-form position, velocity and acceleration (see the module docstring)."""
    t2 = np.asarray(theta2, dtype=float)
    w2 = np.broadcast_to(np.asarray(omega2, dtype=float), t2.shape).copy()
    a2 = np.broadcast_to(np.asarray(alpha2, dtype=float), t2.shape).copy()
    a, b, c = fb.a, fb.b, fb.c
    t4 = rocker_angle(fb, t2, branch)
    A = a * unit(t2)
    B = np.array([fb.d, 0.0]) + c * unit(t4)
    t3 = np.arctan2(B[..., 1] - A[..., 1], B[..., 0] - A[..., 0])
    w3 = a * w2 * np.sin(t4 - t2) / (b * np.sin(t3 - t4))
    w4 = a * w2 * np.sin(t2 - t3) / (c * np.sin(t4 - t3))
    a3 = (c * w4**2 - a * a2 * np.sin(t2 - t4) - a * w2**2 * np.cos(t2 - t4)
          - b * w3**2 * np.cos(t3 - t4)) / (b * np.sin(t3 - t4))
    a4 = (a * a2 * np.sin(t2 - t3) + a * w2**2 * np.cos(t2 - t3) + b * w3**2
          - c * w4**2 * np.cos(t4 - t3)) / (c * np.sin(t4 - t3))
    A_d = a * w2[..., None] * perp(unit(t2))
    A_dd = a * a2[..., None] * perp(unit(t2)) - a * (w2**2)[..., None] * unit(t2)
    return FourBarState(t2, w2, a2, t3, w3, a3, t4, w4, a4, A, A_d, A_dd, B)


def body_states(fb: FourBar, s: FourBarState,
                names: tuple[str, str, str] = ("crank", "coupler", "rocker")) -> dict[str, FloatArray]:
    """Engine-style reference-point columns ``<body>.x/.y/.theta/.vx/.vy/.omega/.ax/.ay/.alpha``."""
    z = np.zeros_like(s.theta2)
    rows = {
        names[0]: (z, z, s.theta2, z, z, s.omega2, z, z, s.alpha2),
        names[1]: (s.A[..., 0], s.A[..., 1], s.theta3, s.A_d[..., 0], s.A_d[..., 1], s.omega3,
                   s.A_dd[..., 0], s.A_dd[..., 1], s.alpha3),
        names[2]: (z + fb.d, z, s.theta4, z, z, s.omega4, z, z, s.alpha4),
    }
    cols = ("x", "y", "theta", "vx", "vy", "omega", "ax", "ay", "alpha")
    return {f"{body}.{n}": v for body, vals in rows.items() for n, v in zip(cols, vals, strict=True)}


@dataclass(frozen=True)
class Inertia:
    mass: float
    inertia: float                  # about the centre of mass
    cg: tuple[float, float]         # body frame, from the body's reference point


def power_balance_torque(s: FourBarState, bodies: Sequence[Inertia],
                         gravity: tuple[float, float] = (0.0, -9.81)) -> FloatArray:
    """Crank torque from T ω2 = Σ [m (a_G − g)·v_G + I α ω] (ideal joints do no work).

    ``bodies`` = (crank, coupler, rocker). Valid whenever ω2 ≠ 0; the torque of an ideal drive is
    unique even when the joint reactions are not (redundant constraints), which is what the
    redundant-pin tests rely on.
    """
    zero2 = np.zeros_like(s.A)
    refs = ((zero2, zero2, s.theta2, s.omega2, s.alpha2),
            (s.A_d, s.A_dd, s.theta3, s.omega3, s.alpha3),
            (zero2, zero2, s.theta4, s.omega4, s.alpha4))
    terms = [(bd.mass, bd.inertia, bd.cg, *ref) for ref, bd in zip(refs, bodies, strict=True)]
    return power_balance(gravity, terms) / s.omega2


def parallelogram_torque(a: float, theta: ArrayLike, omega: ArrayLike, alpha: ArrayLike,
                         cranks: Sequence[Inertia], coupler: Inertia, coupler_angle: float = 0.0,
                         gravity: tuple[float, float] = (0.0, -9.81)) -> FloatArray:
    """Drive torque of a parallel-crank linkage (all cranks of length ``a`` at the same angle θ).

    Every crank turns about its own ground pivot with θ, θ̇, θ̈; the coupler translates (angle fixed)
    with the crank-tip motion: v = a θ̇ J e(θ), a_ref = a θ̈ J e(θ) − a θ̇² e(θ). The single motor's
    torque follows from the power balance T θ̇ = dE/dt. Extra parallel cranks make the pin forces
    statically indeterminate but leave T unique.
    """
    th = np.asarray(theta, dtype=float)
    w = np.broadcast_to(np.asarray(omega, dtype=float), th.shape)
    al = np.broadcast_to(np.asarray(alpha, dtype=float), th.shape)
    e = unit(th)
    v_tip = a * w[..., None] * perp(e)
    a_tip = a * al[..., None] * perp(e) - a * (w * w)[..., None] * e
    zero2 = np.zeros_like(e)
    z = np.zeros_like(th)
    terms = [(cr.mass, cr.inertia, cr.cg, zero2, zero2, th, w, al) for cr in cranks]
    terms.append((coupler.mass, coupler.inertia, coupler.cg, v_tip, a_tip, z + coupler_angle, z, z))
    return power_balance(gravity, terms) / w
