"""The knife-edge (nonholonomic) constraint: its row against the velocity it constrains, γ against
finite differences, and the Chaplygin sleigh against its reduced equations.

Chaplygin sleigh: a body with its centre of mass G a distance a ahead of a knife edge P (heading
e, lateral f). With u = e·v_P the blade's speed along its heading, v_G = u·e + a·ω·f and Newton–
Euler about G with the lateral blade force F·f give
    m (u̇ − a ω²) = 0,   m (u ω + a ω̇) = F,   I ω̇ = −a F
so  u̇ = a ω²,  (I + m a²) ω̇ = −m a u ω,  F = m u ω · I / (I + m a²),
with ½ m u² + ½ (I + m a²) ω² conserved. For a = 0 the sleigh runs on a circle of radius u/ω
with F = m u ω.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.integrate as si

import mbsd_twin as mt


def two_bodies() -> mt.MechanismBuilder:
    b = mt.MechanismBuilder("knife")
    b.body("a", 1.0, 0.1, (0.1, 0.05), (0.3, -0.2), 0.4)
    b.body("b", 2.0, 0.2, (-0.05, 0.1), (0.5, 0.1), -0.7)
    return b


def rot(th: float, p: tuple[float, float]) -> np.ndarray:
    c, s = math.cos(th), math.sin(th)
    return np.array([c * p[0] - s * p[1], s * p[0] + c * p[1]])


@pytest.mark.parametrize("first", ["a", "ground"])
def test_knife_edge_row_is_the_lateral_relative_velocity_and_gamma_matches(first: str) -> None:
    p_j, axis = (0.2, -0.1), (0.6, 0.8)
    b = two_bodies()
    b.joint("blade", "knife_edge", first, "b", (0.0, 0.0), p_j, axis=axis)
    system = mt.compile_mechanism(b.build())
    rng = np.random.default_rng(5)
    h = 1e-6
    for _ in range(5):
        q, v = system.q0 + rng.normal(0.0, 0.5, 6), rng.normal(0.0, 1.0, 6)
        # independent: P on b, velocity of b's point P minus that of a's material point at P
        aj = rot(q[5], p_j)
        P = q[3:5] + aj
        vPj = v[3:5] + v[5] * np.array([-aj[1], aj[0]])
        if first == "a":
            d = P - q[0:2]
            vPi = v[0:2] + v[2] * np.array([-d[1], d[0]])
        else:
            vPi = np.zeros(2)
        u = rot(q[5], axis) / math.hypot(*axis)
        n = np.array([-u[1], u[0]])
        row = system.jacobian(q)[0]
        assert row @ v == pytest.approx(n @ (vPj - vPi), rel=1e-12, abs=1e-14)
        assert system.constraints(q)[0] == 0.0

        def rate(s: float, q: np.ndarray = q, v: np.ndarray = v) -> float:
            return float(system.jacobian(q + v * s)[0] @ v)

        assert system.gamma(q, v)[0] == pytest.approx(-(rate(h) - rate(-h)) / (2 * h), rel=1e-6, abs=1e-8)


def sleigh(a: float, u0: float, w0: float, m: float = 2.0, inertia: float = 0.05) -> mt.Mechanism:
    """Reference point = centre of mass; blade at (−a, 0), rolling along the body x axis; at θ = 0
    the blade velocity (u0, 0) needs v_G = (u0, a·ω0)."""
    b = mt.MechanismBuilder("chaplygin-sleigh", gravity=(0.0, 0.0))
    b.body("sleigh", m, inertia, velocity=(u0, a * w0), omega=w0)
    b.joint("blade", "knife_edge", "ground", "sleigh", (0.0, 0.0), (-a, 0.0), axis=(1.0, 0.0))
    return b.build()


def test_chaplygin_sleigh_against_its_reduced_equations() -> None:
    a, u0, w0, m, inertia = 0.15, 0.4, 3.0, 2.0, 0.05
    res = mt.simulate(sleigh(a, u0, w0, m, inertia), 3.0, 0.05, options=mt.SolverOptions(rtol=1e-10, atol=1e-12))
    assert res.success, res.message

    def ode(_t: float, y: np.ndarray) -> list[float]:
        u, w = y
        return [a * w * w, -m * a * u * w / (inertia + m * a * a)]

    ref = si.solve_ivp(ode, (0.0, 3.0), [u0, w0], rtol=1e-12, atol=1e-13, dense_output=True)
    u_ref, w_ref = ref.sol(res.time)
    th = res["sleigh.theta"]
    e = np.stack([np.cos(th), np.sin(th)], axis=1)
    f = np.stack([-np.sin(th), np.cos(th)], axis=1)
    v = np.stack([res["sleigh.vx"], res["sleigh.vy"]], axis=1)
    np.testing.assert_allclose((v * e).sum(axis=1), u_ref, atol=1e-8)
    np.testing.assert_allclose(res["sleigh.omega"], w_ref, atol=1e-8)
    np.testing.assert_allclose((v * f).sum(axis=1), a * w_ref, atol=1e-8)      # no side slip at the blade
    force = np.stack([res["blade.fx"], res["blade.fy"]], axis=1)
    np.testing.assert_allclose((force * f).sum(axis=1), m * u_ref * w_ref * inertia / (inertia + m * a * a),
                               atol=1e-7)
    np.testing.assert_allclose((force * e).sum(axis=1), 0.0, atol=1e-9)
    E = 0.5 * m * u0**2 + 0.5 * (inertia + m * a * a) * w0**2
    np.testing.assert_allclose(res["energy.kinetic"], E, rtol=1e-9)


def test_sleigh_with_the_blade_under_the_centre_of_mass_runs_on_a_circle() -> None:
    u0, w0, m = 0.5, 2.0, 2.0
    res = mt.simulate(sleigh(0.0, u0, w0, m), 2.0, 0.1, options=mt.SolverOptions(rtol=1e-10, atol=1e-12))
    centre = np.array([0.0, u0 / w0])        # starts at the origin heading +x, turning left
    radius = np.hypot(res["sleigh.x"] - centre[0], res["sleigh.y"] - centre[1])
    np.testing.assert_allclose(radius, u0 / w0, atol=1e-9)
    np.testing.assert_allclose(np.hypot(res["blade.fx"], res["blade.fy"]), m * u0 * w0, rtol=1e-8)


def test_knife_edge_in_a_file_and_its_dof() -> None:
    text = """
format = "mbsd-twin/1"
name = "sleigh"
gravity = [0.0, 0.0]
[[bodies]]
name = "sleigh"
mass = 2.0
inertia = 0.05
[[joints]]
name = "blade"
type = "knife_edge"
bodies = ["ground", "sleigh"]
points = [[0.0, 0.0], [-0.15, 0.0]]
axis = [1.0, 0.0]
"""
    report = mt.check(mt.loads_mechanism(text))
    assert (report.n_coord, report.n_constraints, report.dof) == (3, 1, 2)   # velocity degrees of freedom
    with pytest.raises(mt.MechanismError) as err:
        mt.loads_mechanism(text.replace("axis = [1.0, 0.0]", "axis = [0.0, 0.0]"), "k.toml")
    assert [p.location for p in err.value.problems] == ["k.toml: joints[0] (blade).axis"]


def test_kinematic_analyses_refuse_a_knife_edge_with_the_joint_named() -> None:
    b = mt.MechanismBuilder("sleigh")
    b.body("sled", 1.0, 0.1, cg=(0.2, 0.0))
    b.joint("blade", "knife_edge", "ground", "sled", (0, 0), (0, 0), axis=(1.0, 0.0))
    b.angle_driver("steer", "sled", mt.ConstantSpeed(1.0))
    mech = b.build()
    for analysis in (mt.kinematics, mt.inverse_dynamics):
        with pytest.raises(mt.MechanismError, match=r"joints\[0\] \(blade\).type.*knife_edge"):
            analysis(mech, np.linspace(0, 1, 5))
