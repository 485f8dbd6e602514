"""point_on_line on a *moving* line: the acceleration right-hand side γ and the dynamics.

A rod turns about the world origin at θ = ω·t; a bead (point P on its own body) slides on the
rod's x axis. With e = (cos θ, sin θ), f = (−sin θ, cos θ) = the line's normal n, and P = r·e:
    C = n·P,    C̈ = −α·r − 2·ω·ṙ + n·P̈      (ṅ = −ω·e, n̈ = −ω²·f − α·e)
so the velocity-quadratic part is −2ωṙ and γ = 2·ω·ṙ exactly (a code that drops the terms of
the moving line returns 0 here).

Frictionless bead on a rod spinning at constant ω, no gravity: r̈ = ω²·r, so
    r(t) = r0·cosh ωt + (ṙ0/ω)·sinh ωt,
the rod pushes the bead sideways with the Coriolis force N = 2·m·ω·ṙ along f, and the motor
torque is d(m r² ω)/dt = 2·m·ω·r·ṙ (the rod's own inertia needs none at constant ω).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import mbsd_twin as mt


def bead_on_rod(omega: float, r0: float, rdot0: float, offset: tuple[float, float] = (0.0, 0.0),
                mass: float = 0.3) -> mt.Mechanism:
    b = mt.MechanismBuilder("bead-on-rod", gravity=(0.0, 0.0))
    b.body("rod", 2.0, 0.05, (0.2, 0.0), omega=omega)
    b.body("bead", mass, 1e-4, position=(r0, 0.0), velocity=(rdot0, r0 * omega))
    b.revolute("pivot", "ground", "rod", (0.0, 0.0), (0.0, 0.0))
    b.point_on_line("slot", "rod", "bead", offset, (0.0, 0.0), axis=(1.0, 0.0))
    b.angle_driver("motor", "rod", mt.ConstantSpeed(omega))
    return b.build()


@pytest.mark.parametrize(("theta", "omega", "r", "rdot"), [(0.7, 3.0, 0.4, 1.5), (-2.1, -1.2, 0.25, -0.6)])
def test_gamma_of_point_on_rotating_line_is_coriolis(theta: float, omega: float, r: float, rdot: float) -> None:
    system = mt.compile_mechanism(bead_on_rod(omega, 0.1, 0.0))
    e = np.array([math.cos(theta), math.sin(theta)])
    f = np.array([-math.sin(theta), math.cos(theta)])
    q = np.array([0.0, 0.0, theta, *(r * e), 0.3])
    v = np.array([0.0, 0.0, omega, *(rdot * e + r * omega * f), -0.8])
    row = system.rows_of("slot")[0]
    assert system.constraints(q)[row] == pytest.approx(0.0, abs=1e-15)
    assert system.gamma(q, v)[row] == pytest.approx(2.0 * omega * rdot, rel=1e-13)


def test_gamma_with_the_line_offset_from_the_rod_axis() -> None:
    """Line through (0, h) of the rod, P = h·f + r·e: C = f·P − h, and with ḟ = −ω·e,
    f̈ = −ω²·f − α·e:  C̈ = f̈·P + 2ḟ·Ṗ + f·P̈, whose velocity-quadratic part is
    −ω²·h − 2ω·(e·Ṗ) = −ω²h − 2ω(ṙ − hω) = hω² − 2ωṙ;  γ = 2ωṙ − hω².
    (Check: a bead fixed on the line, ṙ = 0, turns with the rod, P̈ = −ω²P, and Cq·a = f·P̈ = −ω²h.)"""
    theta, omega, r, rdot, h = 0.4, 2.5, 0.3, 0.9, 0.05
    system = mt.compile_mechanism(bead_on_rod(omega, 0.1, 0.0, offset=(0.0, h)))
    e = np.array([math.cos(theta), math.sin(theta)])
    f = np.array([-math.sin(theta), math.cos(theta)])
    P = h * f + r * e
    Pdot = h * (-omega * e) + rdot * e + r * omega * f
    q = np.array([0.0, 0.0, theta, *P, 0.0])
    v = np.array([0.0, 0.0, omega, *Pdot, 0.0])
    row = system.rows_of("slot")[0]
    assert system.gamma(q, v)[row] == pytest.approx(2.0 * omega * rdot - h * omega**2, rel=1e-13)


def test_bead_on_spinning_rod_cosh_law_coriolis_force_and_torque() -> None:
    omega, r0, rdot0, m = 2.0, 0.1, 0.05, 0.3
    res = mt.simulate(bead_on_rod(omega, r0, rdot0, mass=m), 1.0, 0.05,
                      options=mt.SolverOptions(rtol=1e-10, atol=1e-12))
    assert res.success, res.message
    t = res.time
    r = r0 * np.cosh(omega * t) + rdot0 / omega * np.sinh(omega * t)
    rdot = r0 * omega * np.sinh(omega * t) + rdot0 * np.cosh(omega * t)
    radius = np.hypot(res["bead.x"], res["bead.y"])
    np.testing.assert_allclose(radius, r, rtol=1e-8)
    th = omega * t
    f = np.stack([-np.sin(th), np.cos(th)], axis=1)
    force = np.stack([res["slot.fx"], res["slot.fy"]], axis=1)
    np.testing.assert_allclose((force * f).sum(axis=1), 2 * m * omega * rdot, rtol=1e-6)
    radial = force[:, 0] * np.cos(th) + force[:, 1] * np.sin(th)
    np.testing.assert_allclose(radial, 0.0, atol=1e-7)
    np.testing.assert_allclose(res["motor.effort"], 2 * m * omega * r * rdot, rtol=1e-6)
