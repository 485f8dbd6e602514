"""Centrifugal and Coriolis pseudo-forces of a rotating frame (the ``rotating_frame`` load).

* A free body seen from a frame turning at Ω about c: in the inertial frame its centre of mass
  moves on a straight line at constant speed and its angle grows linearly, so in the rotating
  frame R_G(t) = A(−Ωt)·(R_G0 + V·t) with V = v_G0 + Ω·R90·(R_G0 − c) (about c), and
  θ(t) = θ0 + ω0·t (θ_inertial = θ + Ωt, ω_inertial = ω0 + Ω constant).
* A bead on a rod fixed in the rotating frame (prismatic along x) obeys r̈ = Ω²·r:
  r = r0·cosh Ωt + (ṙ0/Ω)·sinh Ωt, and the rod holds it against the Coriolis force with a side
  force +2·m·Ω·ṙ (y), the same as on a rod spun in the inertial frame.

Both on the compiled path (``nb_kernels``) and on the numpy one (``frames.py``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import mbsd_twin as mt
from mbsd_twin.model.model import Load


def rot(angle: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c, s = np.cos(angle), np.sin(angle)
    return c * x - s * y, s * x + c * y


@pytest.mark.parametrize("backend", ["compiled", "numpy"])
def test_free_body_in_a_rotating_frame_moves_straight_in_the_inertial_frame(backend: str) -> None:
    Om, c = 1.7, np.array([0.3, -0.2])
    cg = np.array([0.12, -0.05])
    th0, w0 = 0.4, -0.9
    v_ref0 = np.array([0.5, 0.8])
    b = mt.MechanismBuilder("free", gravity=(0.0, 0.0))
    b.body("plate", 2.0, 0.03, tuple(cg), (0.5, 0.1), th0, tuple(v_ref0), w0)
    mech = b.build()
    mech = mt.Mechanism(mech.name, mech.bodies, loads=(Load("frame", "rotating_frame", (), ((0.3, -0.2),),
                                                            value=Om),), gravity=(0.0, 0.0))
    opts = mt.SolverOptions(rtol=1e-11, atol=1e-12, backend=backend)
    assert mt.Simulator(mech, opts).backend == backend
    res = mt.simulate(mech, 1.5, 0.05, options=opts)
    assert res.success
    t = res.time
    gx0, gy0 = rot(np.array(th0), np.array(cg[0]), np.array(cg[1]))
    RG0 = np.array([0.5 + gx0, 0.1 + gy0]) - c
    vG0 = v_ref0 + w0 * np.array([-gy0, gx0])
    V = vG0 + Om * np.array([-RG0[1], RG0[0]])
    x_in, y_in = RG0[0] + V[0] * t, RG0[1] + V[1] * t
    ex, ey = rot(-Om * t, x_in, y_in)
    gx, gy = rot(res["plate.theta"], np.full_like(t, cg[0]), np.full_like(t, cg[1]))
    np.testing.assert_allclose(res["plate.x"] + gx - c[0], ex, atol=1e-9)
    np.testing.assert_allclose(res["plate.y"] + gy - c[1], ey, atol=1e-9)
    np.testing.assert_allclose(res["plate.theta"], th0 + w0 * t, atol=1e-9)
    assert np.abs(res["energy.balance_error"]).max() < 1e-9


@pytest.mark.parametrize("backend", ["compiled", "numpy"])
def test_bead_on_a_rod_fixed_in_a_rotating_frame(backend: str) -> None:
    Om, r0, rdot0, m = 2.0, 0.1, 0.05, 0.3
    b = mt.MechanismBuilder("bead", gravity=(0.0, 0.0))
    b.body("bead", m, 1e-4, position=(r0, 0.0), velocity=(rdot0, 0.0))
    b.prismatic("rod", "ground", "bead", (0.0, 0.0), (0.0, 0.0), axis=(1.0, 0.0))
    mech = b.build()
    mech = mt.Mechanism(mech.name, mech.bodies, mech.joints,
                        loads=(Load("frame", "rotating_frame", ("bead",), ((0.0, 0.0),), value=Om),),
                        gravity=(0.0, 0.0))
    opts = mt.SolverOptions(rtol=1e-10, atol=1e-12, backend=backend)
    assert mt.Simulator(mech, opts).backend == backend
    res = mt.simulate(mech, 1.0, 0.05, options=opts)
    t = res.time
    r = r0 * np.cosh(Om * t) + rdot0 / Om * np.sinh(Om * t)
    rdot = r0 * Om * np.sinh(Om * t) + rdot0 * np.cosh(Om * t)
    np.testing.assert_allclose(res["bead.x"], r, rtol=1e-8)
    np.testing.assert_allclose(res["rod.fy"], 2 * m * Om * rdot, rtol=1e-6)
    np.testing.assert_allclose(res["rod.fx"], 0.0, atol=1e-9)
    # Jacobi integral: ½ m ṙ² − ½ m Ω² r² is constant, i.e. T − W_centrifugal
    jacobi = res["energy.kinetic"] - res["energy.input_work"]
    assert jacobi == pytest.approx(np.full_like(t, 0.5 * m * rdot0**2), abs=1e-9)
    assert math.isclose(res["energy.input_work"][-1], 0.5 * m * Om**2 * (r[-1] ** 2 - r0**2), rel_tol=1e-7)
