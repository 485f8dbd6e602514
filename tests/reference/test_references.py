"""Self-checks of the closed-form references, with no engine involved.

Each reference is checked against facts it was not built from: the loop-closure equations, finite
differences in time of its own positions/velocities, and (for the Newton–Euler solution) the
power balance and the global force/moment balance of the whole mechanism.
"""

from __future__ import annotations

import numpy as np
import pytest

from . import four_bar as fbr
from . import scotch_yoke as syr
from . import slider_crank as scr
from .planar import cross, offset_kinematics, unit

# A non-uniform drive θ(t) = θ0 + w t + ½ k t² so that θ̈ ≠ 0 is exercised too.
TH0, W0, K0 = 0.3, 2.0 * np.pi, 1.7
H = 1e-5


def drive(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = np.asarray(t, dtype=float)
    return TH0 + W0 * t + 0.5 * K0 * t * t, W0 + K0 * t, np.full_like(t, K0)


def fd(fun, t: np.ndarray) -> np.ndarray:
    return (fun(t + H) - fun(t - H)) / (2.0 * H)


T = np.linspace(0.0, 1.0, 97) + 0.0031

SC_2D = scr.SliderCrank(c1=(0.05, 0.02), c2=(0.15, -0.03), c3=(0.01, 0.025))


def test_slider_crank_closure_and_derivatives() -> None:
    def k(t):
        return scr.kinematics(*drive(t))

    s = k(T)
    C = s.B + 0.3 * unit(s.phi)
    np.testing.assert_allclose(C[:, 1], 0.0, atol=1e-15)
    np.testing.assert_allclose(C[:, 0], s.x, rtol=1e-14)
    assert np.all(np.cos(s.phi) > 0)
    for pos, vel, acc in (("phi", "phi_d", "phi_dd"), ("x", "x_d", "x_dd"), ("B", "B_d", "B_dd")):
        np.testing.assert_allclose(fd(lambda t, n=pos: getattr(k(t), n), T), getattr(s, vel),
                                   rtol=1e-7, atol=1e-8)
        np.testing.assert_allclose(fd(lambda t, n=vel: getattr(k(t), n), T), getattr(s, acc),
                                   rtol=1e-7, atol=1e-6)


@pytest.mark.parametrize("p", [scr.SliderCrank(), SC_2D], ids=["file", "cg2d"])
def test_slider_crank_newton_euler_balances(p: scr.SliderCrank) -> None:
    th, w, al = drive(T)
    r = scr.inverse_dynamics(p, th, w, al)
    # torque from step 7 equals the independent power balance
    np.testing.assert_allclose(r.torque, scr.power_balance_torque(p, th, w, al), rtol=1e-12,
                               atol=1e-12 * np.max(np.abs(r.torque)))
    # the whole mechanism: external forces (ground bearing + guide + gravity) = Σ m a_G
    g = np.asarray(p.gravity)
    G = scr.centres_of_mass(p, scr.kinematics(th, w, al))
    masses, inertias = (p.m1, p.m2, p.m3), (p.I1, p.I2, p.I3)
    total = sum(m * (aG - g) for m, (_, _, aG, *_) in zip(masses, G, strict=True))
    np.testing.assert_allclose(r.main_bearing + r.guide_force, total, atol=1e-11)
    # moments about the world origin: T + M + C × (0, N) + Σ G × m g = Σ (I α + G × m a_G)
    kin = scr.kinematics(th, w, al)
    C = np.stack([kin.x, np.zeros_like(kin.x)], axis=-1)
    lhs = r.torque + r.guide_moment + cross(C, r.guide_force)
    rhs = sum(inertia * alpha + cross(Gp, m * (aG - g))
              for m, inertia, (Gp, _, aG, _, _, alpha) in zip(masses, inertias, G, strict=True))
    np.testing.assert_allclose(lhs, rhs, atol=1e-11)
    # the prismatic guide transmits no force along its axis
    np.testing.assert_array_equal(r.guide_force[:, 0], 0.0)


def test_slider_crank_piston_moment_vanishes_for_centred_cg() -> None:
    th, w, al = drive(T)
    np.testing.assert_allclose(scr.inverse_dynamics(scr.SliderCrank(), th, w, al).guide_moment, 0.0,
                               atol=1e-15)


@pytest.mark.parametrize("branch", [1, -1])
def test_four_bar_closure_and_derivatives(branch: int) -> None:
    fb = fbr.FourBar()

    def s(t):
        return fbr.solve(fb, *drive(t), branch=branch)

    st = s(T)
    B_coupler = st.A + fb.b * unit(st.theta3)
    B_rocker = np.array([fb.d, 0.0]) + fb.c * unit(st.theta4)
    np.testing.assert_allclose(B_coupler, B_rocker, atol=1e-14)

    def angle_rate(name):
        # wrapped angles: difference on the circle
        return np.angle(np.exp(1j * (getattr(s(T + H), name) - getattr(s(T - H), name)))) / (2 * H)

    for pos, vel, acc in (("theta3", "omega3", "alpha3"), ("theta4", "omega4", "alpha4")):
        np.testing.assert_allclose(angle_rate(pos), getattr(st, vel), rtol=1e-7, atol=1e-7)
        np.testing.assert_allclose(fd(lambda t, n=vel: getattr(s(t), n), T), getattr(st, acc),
                                   rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(fd(lambda t: s(t).A, T), st.A_d, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(fd(lambda t: s(t).A_d, T), st.A_dd, rtol=1e-7, atol=1e-6)


def test_four_bar_branches_are_mirror_images() -> None:
    fb = fbr.FourBar()
    th2 = np.radians(10.0)
    up, down = fbr.rocker_angle(fb, th2, 1), fbr.rocker_angle(fb, th2, -1)
    assert abs(np.angle(np.exp(1j * (up - down)))) > 1.0
    assert fbr.branch_of(fb, th2, up + 0.1) == 1
    assert fbr.branch_of(fb, th2, down - 0.1) == -1


def test_parallelogram_torque_matches_four_bar_power() -> None:
    # a parallelogram four-bar (a = c, b = d) on its parallel branch: θ3 = 0, θ4 = θ2
    fb = fbr.FourBar(a=0.5, b=1.2, c=0.5, d=1.2)
    th, w, al = drive(np.linspace(0.05, 0.4, 23))  # away from the change point θ2 = π
    st = fbr.solve(fb, th, w, al, branch=fbr.branch_of(fb, th[0], th[0]))
    np.testing.assert_allclose(np.angle(np.exp(1j * (st.theta4 - th))), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.angle(np.exp(1j * st.theta3)), 0.0, atol=1e-12)
    crank = fbr.Inertia(0.7, 0.02, (0.25, 0.01))
    coupler = fbr.Inertia(1.3, 0.2, (0.6, -0.05))
    rocker = fbr.Inertia(0.9, 0.03, (0.2, 0.04))
    expected = fbr.power_balance_torque(st, (crank, coupler, rocker))
    got = fbr.parallelogram_torque(0.5, th, w, al, (crank, rocker), coupler)
    np.testing.assert_allclose(got, expected, rtol=1e-9)


def test_scotch_yoke_derivatives() -> None:
    x, xd, xdd = syr.yoke(*drive(T))
    np.testing.assert_allclose(fd(lambda t: syr.yoke(*drive(t))[0], T), xd, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(fd(lambda t: syr.yoke(*drive(t))[1], T), xdd, rtol=1e-7, atol=1e-7)
    s, sd, sdd = syr.slot_position(*drive(T))
    np.testing.assert_allclose(x**2 + s**2, 0.01, rtol=1e-14)
    np.testing.assert_allclose(fd(lambda t: syr.slot_position(*drive(t))[0], T), sd, rtol=1e-7,
                               atol=1e-9)
    np.testing.assert_allclose(fd(lambda t: syr.slot_position(*drive(t))[1], T), sdd, rtol=1e-7,
                               atol=1e-7)


def test_offset_kinematics_is_a_rigid_rotation() -> None:
    th, w, al = drive(T)
    s = (0.3, -0.2)
    d, dd, ddd = offset_kinematics(th, w, al, s)
    np.testing.assert_allclose(fd(lambda t: offset_kinematics(*drive(t), s)[0], T), dd, atol=1e-8)
    np.testing.assert_allclose(fd(lambda t: offset_kinematics(*drive(t), s)[1], T), ddd, atol=1e-6)
