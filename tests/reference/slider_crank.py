"""Closed-form kinematics and Newton–Euler inverse dynamics of the in-line slider crank.

Geometry (the layout of ``examples/mechanisms/slider_crank_driven.toml``)
-------------------------------------------------------------------------
* crank (body 1): reference point O at the world origin (main bearing), angle θ; the crank pin B
  is the crank-frame point (r, 0), so B = r·e(θ) with e(a) = (cos a, sin a).
* rod (body 2): reference point at B (rod point (0, 0) is the crank pin), angle φ; the wrist pin C
  is the rod-frame point (l, 0), so C = B + l·e(φ).
* piston (body 3): reference point at C (piston point (0, 0) is the wrist pin), sliding on the
  world x axis (the guide line through the ground origin along (1, 0)); its angle is a constant β
  (the prismatic joint locks the relative angle; β = 0 in the example).
* every body i has mass m_i, centroidal inertia I_i and centre of mass G_i = ref_i + A(angle_i)·c_i.

Kinematics
----------
Closure of the loop in y (C_y = 0):   r sin θ + l sin φ = 0  ⇒  sin φ = −r sin θ / l,
and the assembled branch has the piston on the +x side, cos φ = +√(1 − sin² φ) > 0 (|φ| < 90°).
Piston position  x = C_x = r cos θ + l cos φ.

Differentiating the closure once:   r cos θ·θ̇ + l cos φ·φ̇ = 0
    ⇒ φ̇ = −r cos θ·θ̇ / (l cos φ)
and twice:   −r sin θ·θ̇² + r cos θ·θ̈ − l sin φ·φ̇² + l cos φ·φ̈ = 0
    ⇒ φ̈ = (r sin θ·θ̇² − r cos θ·θ̈ + l sin φ·φ̇²) / (l cos φ).
For the piston:
    ẋ = −r sin θ·θ̇ − l sin φ·φ̇
    ẍ = −r cos θ·θ̇² − r sin θ·θ̈ − l cos φ·φ̇² − l sin φ·φ̈.
Reference-point accelerations: a_O = 0;  a_B = r θ̈ J e(θ) − r θ̇² e(θ);  a_C = (ẍ, 0).
Centre-of-mass accelerations (rigid body, d = A c):  a_G = a_ref + α J d − ω² d.

Inverse dynamics (free-body diagrams, Newton–Euler per body)
------------------------------------------------------------
Unknowns (9), each named after the force ON the second body of the joint, as the engine reports:
    F01 = main-bearing force on the crank (ground → crank) at O
    F12 = crank-pin force on the rod (crank → rod) at B          (the rod feels +F12, the crank −F12)
    F23 = wrist-pin force on the piston (rod → piston) at C      (the piston feels +F23, the rod −F23)
    N   = guide normal force on the piston, (0, N), acting at C (perpendicular to the axis (1, 0);
          a frictionless prismatic pair transmits no force along its axis)
    M   = guide reaction moment on the piston about C (the prismatic pair locks the piston angle)
    T   = motor torque on the crank about +z
Body equations (g = gravity vector, × the scalar planar cross product):
  piston:  F23 + (0, N) + m3 g = m3 a_G3                                   (2)
           Σ moments about C:  M + (G3 − C) × m3 g = I3·0 + (G3 − C) × m3 a_G3     (1)
  rod:     F12 − F23 + m2 g = m2 a_G2                                      (2)
           Σ moments about B:  (C − B) × (−F23) + (G2 − B) × m2 g = I2 φ̈ + (G2 − B) × m2 a_G2   (1)
  crank:   F01 − F12 + m1 g = m1 a_G1                                      (2)
           Σ moments about O:  T + (B − O) × (−F12) + (G1 − O) × m1 g = I1 θ̈ + (G1 − O) × m1 a_G1 (1)
(Moments about a point P that is not the centre of mass use Σ M_P = I α + (G − P) × m a_G.)

The nine equations are solved in this order (each step uses only earlier results):
  1. piston x:          F23_x = m3 (a_G3 − g)_x
  2. rod moment about B, with L = C − B = l e(φ):  −(L_x F23_y − L_y F23_x) = I2 φ̈ + (G2 − B) × m2 (a_G2 − g)
                        ⇒ F23_y = [L_y F23_x − I2 φ̈ − (G2 − B) × m2 (a_G2 − g)] / L_x      (L_x = l cos φ > 0)
  3. piston y:          N = m3 (a_G3 − g)_y − F23_y
  4. piston moment:     M = (G3 − C) × m3 (a_G3 − g)
  5. rod force:         F12 = m2 (a_G2 − g) + F23
  6. crank force:       F01 = m1 (a_G1 − g) + F12
  7. crank moment:      T = I1 θ̈ + (G1 − O) × m1 (a_G1 − g) + B × F12
The drive is general (θ, θ̇, θ̈ given), so θ̈ ≠ 0 is covered although the example runs at constant
speed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .planar import FloatArray, cross, offset_kinematics, perp, power_balance, unit


@dataclass(frozen=True)
class SliderCrank:
    """Parameters of the in-line slider crank; defaults are the example file's values."""

    r: float = 0.1                          # crank radius O→B [m]
    l: float = 0.3                          # rod length B→C [m]  # noqa: E741
    m1: float = 1.0
    I1: float = 8.333e-4
    c1: tuple[float, float] = (0.05, 0.0)   # crank centre of mass, crank frame, from O
    m2: float = 2.0
    I2: float = 0.015
    c2: tuple[float, float] = (0.15, 0.0)   # rod centre of mass, rod frame, from B
    m3: float = 1.5
    I3: float = 1e-3
    c3: tuple[float, float] = (0.0, 0.0)    # piston centre of mass, piston frame, from C
    piston_angle: float = 0.0               # β, held by the prismatic joint
    gravity: tuple[float, float] = (0.0, -9.81)


@dataclass(frozen=True)
class SliderCrankKinematics:
    theta: FloatArray
    omega: FloatArray
    alpha: FloatArray
    phi: FloatArray          # rod angle [rad]
    phi_d: FloatArray
    phi_dd: FloatArray
    x: FloatArray            # piston reference point (wrist pin) x [m]; its y is 0
    x_d: FloatArray
    x_dd: FloatArray
    B: FloatArray            # crank-pin position (N, 2) = rod reference point
    B_d: FloatArray
    B_dd: FloatArray


@dataclass(frozen=True)
class SliderCrankReactions:
    """Inverse-dynamics results; every force is (N, 2) in world axes, ON the joint's second body."""

    torque: FloatArray        # motor torque on the crank about +z [N·m]
    main_bearing: FloatArray  # ground → crank at O
    crank_pin: FloatArray     # crank → rod at B
    wrist_pin: FloatArray     # rod → piston at C
    guide_force: FloatArray   # ground → piston: (0, N)
    guide_moment: FloatArray  # ground → piston moment about C [N·m]

    @property
    def guide_normal(self) -> FloatArray:
        return self.guide_force[..., 1]


def kinematics(theta: ArrayLike, omega: ArrayLike, alpha: ArrayLike = 0.0,
               r: float = 0.1, l: float = 0.3) -> SliderCrankKinematics:  # noqa: E741
    """Closed-form positions, velocities and accelerations (see the module docstring)."""
    th = np.asarray(theta, dtype=float)
    w = np.broadcast_to(np.asarray(omega, dtype=float), th.shape)
    al = np.broadcast_to(np.asarray(alpha, dtype=float), th.shape)
    s, c = np.sin(th), np.cos(th)
    sphi = -r * s / l
    if np.any(np.abs(sphi) >= 1.0):
        raise ValueError("the loop cannot close: r |sin θ| >= l")
    cphi = np.sqrt(1.0 - sphi * sphi)
    phi = np.arctan2(sphi, cphi)
    phi_d = -r * c * w / (l * cphi)
    phi_dd = (r * s * w * w - r * c * al + l * sphi * phi_d * phi_d) / (l * cphi)
    x = r * c + l * cphi
    x_d = -r * s * w - l * sphi * phi_d
    x_dd = -r * c * w * w - r * s * al - l * cphi * phi_d * phi_d - l * sphi * phi_dd
    e = unit(th)
    B = r * e
    B_d = r * w[..., None] * perp(e)
    B_dd = r * al[..., None] * perp(e) - r * (w * w)[..., None] * e
    return SliderCrankKinematics(th, np.array(w), np.array(al), phi, phi_d, phi_dd, x, x_d, x_dd,
                                 B, B_d, B_dd)


def centres_of_mass(p: SliderCrank, k: SliderCrankKinematics) -> list[tuple[FloatArray, ...]]:
    """(G, v_G, a_G, angle, ω, α) of crank, rod and piston."""
    zeros = np.zeros_like(k.theta)
    beta = np.full_like(k.theta, p.piston_angle)
    C = np.stack([k.x, zeros], axis=-1)
    C_d = np.stack([k.x_d, zeros], axis=-1)
    C_dd = np.stack([k.x_dd, zeros], axis=-1)
    out = []
    for ref, ref_d, ref_dd, ang, w, al, cg in (
        (np.zeros_like(k.B), np.zeros_like(k.B), np.zeros_like(k.B), k.theta, k.omega, k.alpha, p.c1),
        (k.B, k.B_d, k.B_dd, k.phi, k.phi_d, k.phi_dd, p.c2),
        (C, C_d, C_dd, beta, zeros, zeros, p.c3),
    ):
        d, d_d, d_dd = offset_kinematics(ang, w, al, cg)
        out.append((ref + d, ref_d + d_d, ref_dd + d_dd, ang, w, al))
    return out


def inverse_dynamics(p: SliderCrank, theta: ArrayLike, omega: ArrayLike,
                     alpha: ArrayLike = 0.0) -> SliderCrankReactions:
    """Newton–Euler per body, solved in the order written in the module docstring."""
    k = kinematics(theta, omega, alpha, p.r, p.l)
    g = np.asarray(p.gravity, dtype=float)
    (G1, _, aG1, *_), (G2, _, aG2, *_), (G3, _, aG3, *_) = centres_of_mass(p, k)
    C = np.stack([k.x, np.zeros_like(k.x)], axis=-1)
    # "effective" loads m (a_G − g): the resultant the joints must supply to each body
    f1 = p.m1 * (aG1 - g)
    f2 = p.m2 * (aG2 - g)
    f3 = p.m3 * (aG3 - g)
    # 1. piston x
    F23x = f3[..., 0]
    # 2. rod moments about B
    L = p.l * unit(k.phi)
    F23y = (L[..., 1] * F23x - p.I2 * k.phi_dd - cross(G2 - k.B, f2)) / L[..., 0]
    F23 = np.stack([F23x, F23y], axis=-1)
    # 3. piston y
    N = f3[..., 1] - F23y
    # 4. piston moments about C (piston does not rotate)
    M = cross(G3 - C, f3)
    # 5. rod force balance
    F12 = f2 + F23
    # 6. crank force balance
    F01 = f1 + F12
    # 7. crank moments about O
    T = p.I1 * k.alpha + cross(G1, f1) + cross(k.B, F12)
    guide = np.stack([np.zeros_like(N), N], axis=-1)
    return SliderCrankReactions(T, F01, F12, F23, guide, M)


def power_balance_torque(p: SliderCrank, theta: ArrayLike, omega: ArrayLike,
                         alpha: ArrayLike = 0.0) -> FloatArray:
    """Motor torque from the power balance T·θ̇ = d(kinetic + potential energy)/dt.

    An independent cross-check of step 7 above (needs θ̇ ≠ 0):
        T θ̇ = Σ_i [ m_i (a_Gi − g) · v_Gi + I_i α_i ω_i ]
    (ideal joints do no work; the guide moment does no work because the piston does not rotate).
    """
    k = kinematics(theta, omega, alpha, p.r, p.l)
    z = np.zeros_like(k.theta)
    zero2 = np.zeros_like(k.B)
    C_d = np.stack([k.x_d, z], axis=-1)
    C_dd = np.stack([k.x_dd, z], axis=-1)
    bodies = [
        (p.m1, p.I1, p.c1, zero2, zero2, k.theta, k.omega, k.alpha),
        (p.m2, p.I2, p.c2, k.B_d, k.B_dd, k.phi, k.phi_d, k.phi_dd),
        (p.m3, p.I3, p.c3, C_d, C_dd, z + p.piston_angle, z, z),
    ]
    return power_balance(p.gravity, bodies) / k.omega


def body_states(p: SliderCrank, theta: ArrayLike, omega: ArrayLike,
                alpha: ArrayLike = 0.0) -> dict[str, FloatArray]:
    """Engine-style columns for the reference points: ``<body>.x/.y/.theta/.vx/…/.alpha``."""
    k = kinematics(theta, omega, alpha, p.r, p.l)
    z = np.zeros_like(k.theta)
    rows = {
        "crank": (z, z, k.theta, z, z, k.omega, z, z, k.alpha),
        "rod": (k.B[..., 0], k.B[..., 1], k.phi, k.B_d[..., 0], k.B_d[..., 1], k.phi_d,
                k.B_dd[..., 0], k.B_dd[..., 1], k.phi_dd),
        "piston": (k.x, z, z + p.piston_angle, k.x_d, z, z, k.x_dd, z, z),
    }
    names = ("x", "y", "theta", "vx", "vy", "omega", "ax", "ay", "alpha")
    return {f"{body}.{n}": v for body, vals in rows.items() for n, v in zip(names, vals, strict=True)}

