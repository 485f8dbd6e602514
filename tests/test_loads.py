"""Applied loads: each kind's generalised force against an independent computation.

Springs: Q = −∂V/∂q by central differences of the potential written here from the geometry, plus
the damper term −c·L̇·∂L/∂q. Forces at body points: Q = J_Pᵀ·F with J_P = ∂P/∂q by differences
(the virtual-power statement Q·v = F·v_P). Torques, callables and joint friction from their
definitions. Joint friction in motion: energy.dissipated against the integral of c·(relative
speed)² from the output columns.

The engine's Q is read from ``System.forces_and_power`` as the difference between the mechanism
with the load and without it (gravity and the velocity terms of offset centres of mass cancel).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import scipy.integrate as si

import mbsd_twin as mt

RNG = np.random.default_rng(20240611)
Q_NOW = np.array([0.31, -0.12, 0.7, 1.05, 0.42, -1.3])      # a.x, a.y, a.θ, b.x, b.y, b.θ
V_NOW = np.array([0.4, -0.9, 1.7, -0.25, 0.6, -2.2])
T_NOW = 0.37
H = 1e-6


def rot(th: float, p: tuple[float, float] | np.ndarray) -> np.ndarray:
    c, s = math.cos(th), math.sin(th)
    return np.array([c * p[0] - s * p[1], s * p[0] + c * p[1]])


def point(q: np.ndarray, body: int | None, p: tuple[float, float]) -> np.ndarray:
    """World position of body-frame point p; body None is the ground."""
    if body is None:
        return np.asarray(p, float)
    k = 3 * body
    return q[k:k + 2] + rot(q[k + 2], p)


def grad(fun: Callable[[np.ndarray], float], q: np.ndarray) -> np.ndarray:
    out = np.zeros_like(q)
    for i in range(len(q)):
        e = np.zeros_like(q)
        e[i] = H
        out[i] = (fun(q + e) - fun(q - e)) / (2 * H)
    return out


def jac_point(q: np.ndarray, body: int | None, p: tuple[float, float]) -> np.ndarray:
    """∂P/∂q (2, n) by central differences."""
    cols = []
    for i in range(len(q)):
        e = np.zeros_like(q)
        e[i] = H
        cols.append((point(q + e, body, p) - point(q - e, body, p)) / (2 * H))
    return np.array(cols).T


def two_bodies(gravity: tuple[float, float] = (0.0, -9.81)) -> mt.MechanismBuilder:
    """Two free bodies with offset centres of mass (so gravity and ω² terms are non-trivial)."""
    b = mt.MechanismBuilder("loads", gravity=gravity)
    b.body("a", 1.3, 0.02, cg=(0.1, -0.05), position=tuple(Q_NOW[0:2]), angle=float(Q_NOW[2]))
    b.body("b", 0.8, 0.03, cg=(-0.07, 0.02), position=tuple(Q_NOW[3:5]), angle=float(Q_NOW[5]))
    return b


def engine_q(with_load: mt.Mechanism, without: mt.Mechanism, q: np.ndarray = Q_NOW,
             v: np.ndarray = V_NOW, t: float = T_NOW, inputs: dict[str, float] | None = None
             ) -> tuple[np.ndarray, float, float, float]:
    """(Q of the load alone, elastic energy, dissipated power, input power) from the engine."""
    s1, s0 = mt.compile_mechanism(with_load), mt.compile_mechanism(without)
    args = (q[None, :], v[None, :], np.array([t]))
    r1 = s1.forces_and_power(*args, inputs)
    r0 = s0.forces_and_power(*args, inputs)
    return (r1.Q[0] - r0.Q[0], float(r1.elastic[0]), float(r1.dissipation[0]), float(r1.input[0]))


# ---------------------------------------------------------------------------------- springs
@pytest.mark.parametrize("to_ground", [False, True])
def test_spring_damper_is_minus_the_potential_gradient_plus_damping(to_ground: bool) -> None:
    k, c, L0 = 350.0, 4.5, 0.6
    pi, pj = (0.2, 0.05), (-0.1, 0.15)
    first, ib = ("ground", None) if to_ground else ("a", 0)
    if to_ground:
        pi = (0.9, -0.4)
    base = two_bodies()
    mech0 = base.build()
    mech = base.spring_damper("s", first, "b", pi, pj, stiffness=k, damping=c, free_length=L0).build()

    def length(q: np.ndarray) -> float:
        return float(np.linalg.norm(point(q, 1, pj) - point(q, ib, pi)))

    def V(q: np.ndarray) -> float:
        return 0.5 * k * (length(q) - L0) ** 2

    dL = grad(length, Q_NOW)
    Ldot = float(dL @ V_NOW)
    expected = -grad(V, Q_NOW) - c * Ldot * dL
    Q, elastic, diss, power = engine_q(mech, mech0)
    np.testing.assert_allclose(Q, expected, rtol=0, atol=1e-7 * np.abs(expected).max())
    assert elastic == pytest.approx(V(Q_NOW), rel=1e-12)
    assert diss == pytest.approx(c * Ldot**2, rel=1e-8)
    assert power == 0.0
    # the spring pulls the points together when stretched
    assert length(Q_NOW) > L0


def test_spring_free_length_defaults_to_the_initial_distance() -> None:
    pi, pj = (0.2, 0.05), (-0.1, 0.15)
    mech = two_bodies().spring_damper("s", "a", "b", pi, pj, stiffness=100.0).build()
    L_init = float(np.linalg.norm(point(Q_NOW, 1, pj) - point(Q_NOW, 0, pi)))
    q = Q_NOW + np.array([0.0, 0.0, 0.0, 0.05, 0.0, 0.0])       # stretch b along x
    L = float(np.linalg.norm(point(q, 1, pj) - point(q, 0, pi)))
    _, elastic, _, _ = engine_q(mech, two_bodies().build(), q=q)
    assert elastic == pytest.approx(0.5 * 100.0 * (L - L_init) ** 2, rel=1e-10)


def test_rotational_spring_damper() -> None:
    k, c, phi0 = 12.0, 0.3, 0.25
    base = two_bodies()
    mech0 = base.build()
    mech = base.rotational_spring_damper("r", "a", "b", stiffness=k, damping=c, free_angle=phi0).build()

    def V(q: np.ndarray) -> float:
        return 0.5 * k * (q[5] - q[2] - phi0) ** 2

    w_rel = V_NOW[5] - V_NOW[2]
    d_rel = np.array([0, 0, -1.0, 0, 0, 1.0])
    expected = -grad(V, Q_NOW) - c * w_rel * d_rel
    Q, elastic, diss, _ = engine_q(mech, mech0)
    np.testing.assert_allclose(Q, expected, rtol=0, atol=1e-7 * np.abs(expected).max())
    assert elastic == pytest.approx(V(Q_NOW), rel=1e-12)
    assert diss == pytest.approx(c * w_rel**2, rel=1e-12)


# ----------------------------------------------------------------------------------- forces
@pytest.mark.parametrize("frame", ["world", "body"])
@pytest.mark.parametrize("source", ["value", "profile", "input"])
def test_force_at_a_body_point_by_virtual_power(frame: str, source: str) -> None:
    p, d = (0.25, -0.1), (3.0, 4.0)                 # direction normalised by the engine: (0.6, 0.8)
    magnitude = {"value": 7.5, "profile": 2.0 + 0.5 * math.sin(2 * math.pi * 0.8 * T_NOW),
                 "input": -3.25}[source]
    kw: dict[str, object] = {"value": {"value": 7.5},
                             "profile": {"profile": mt.Harmonic(0.5, 0.8, offset=2.0)},
                             "input": {"input": "push"}}[source]
    base = two_bodies()
    mech0 = base.build()
    mech = base.force("f", "b", point=p, direction=d, frame=frame, **kw).build()  # type: ignore[arg-type]
    u = np.array(d) / 5.0
    F = magnitude * (rot(Q_NOW[5], u) if frame == "body" else u)
    J = jac_point(Q_NOW, 1, p)
    expected = J.T @ F
    Q, _, _, power = engine_q(mech, mech0, inputs={"push": -3.25})
    np.testing.assert_allclose(Q, expected, rtol=0, atol=1e-8 * np.abs(expected).max())
    # virtual power: Q·v = F·v_P for any v, and the reported input power is F·v_P at V_NOW
    for v in [V_NOW, *RNG.normal(size=(3, 6))]:
        assert float(Q @ v) == pytest.approx(float(F @ (J @ v)), rel=1e-7, abs=1e-9)
    assert power == pytest.approx(float(F @ (J @ V_NOW)), rel=1e-7)


@pytest.mark.parametrize("reaction", [None, "a"])
def test_torque_with_and_without_reaction_body(reaction: str | None) -> None:
    base = two_bodies()
    mech0 = base.build()
    mech = base.torque("m", "b", value=1.75, reaction_body=reaction).build()
    expected = np.array([0, 0, -1.75 if reaction else 0.0, 0, 0, 1.75])
    Q, _, _, power = engine_q(mech, mech0)
    np.testing.assert_allclose(Q, expected, rtol=0, atol=1e-14)
    w_rel = V_NOW[5] - (V_NOW[2] if reaction else 0.0)
    assert power == pytest.approx(1.75 * w_rel, rel=1e-14)


def test_generalized_force_callable() -> None:
    calls: list[tuple[float, np.ndarray, np.ndarray]] = []

    def fn(t: float, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        calls.append((t, q.copy(), v.copy()))
        return np.array([t * q[0], -2.0 * v[5]])

    base = two_bodies()
    mech0 = base.build()
    mech = base.generalized_force("g", fn, coordinates=["a.x", "b.theta"]).build()
    Q, _, _, power = engine_q(mech, mech0)
    f = np.array([T_NOW * Q_NOW[0], -2.0 * V_NOW[5]])
    np.testing.assert_allclose(Q, [f[0], 0, 0, 0, 0, f[1]], rtol=1e-15, atol=0)
    assert power == pytest.approx(f[0] * V_NOW[0] + f[1] * V_NOW[5], rel=1e-14)
    t, q, v = calls[-1]
    assert t == T_NOW and np.array_equal(q, Q_NOW) and np.array_equal(v, V_NOW)


# ----------------------------------------------------------------------- joint friction: Q
def test_revolute_friction_generalised_force() -> None:
    c = 0.35
    base = two_bodies()
    base.revolute("pin", "a", "b", (0.3, 0.0), (0.0, 0.1))
    mech0 = base.build()
    mech = dataclasses.replace(mech0, joints=(dataclasses.replace(mech0.joints[0], viscous_friction=c),))
    w_rel = V_NOW[5] - V_NOW[2]
    Q, _, diss, power = engine_q(mech, mech0)
    np.testing.assert_allclose(Q, [0, 0, c * w_rel, 0, 0, -c * w_rel], rtol=1e-14, atol=1e-15)
    assert diss == pytest.approx(c * w_rel**2, rel=1e-14)
    assert power == 0.0


def test_prismatic_friction_generalised_force() -> None:
    """Sliding coordinate s = u(θa)·(P_b − P_a), u the guide axis turned with body a; the friction
    force −c·ṡ along the guide has the generalised force −c·ṡ·∂s/∂q and dissipates c·ṡ²."""
    c, axis, pa, pb = 2.5, (1.0, 2.0), (0.1, 0.2), (-0.05, 0.03)
    base = two_bodies()
    base.prismatic("guide", "a", "b", pa, pb, axis=axis)
    mech0 = base.build()
    mech = dataclasses.replace(mech0, joints=(dataclasses.replace(mech0.joints[0], viscous_friction=c),))
    u_body = np.array(axis) / np.linalg.norm(axis)

    def s(q: np.ndarray) -> float:
        return float(rot(q[2], u_body) @ (point(q, 1, pb) - point(q, 0, pa)))

    ds = grad(s, Q_NOW)
    sdot = float(ds @ V_NOW)
    Q, _, diss, _ = engine_q(mech, mech0)
    np.testing.assert_allclose(Q, -c * sdot * ds, rtol=0, atol=1e-8 * np.abs(c * sdot * ds).max())
    assert diss == pytest.approx(c * sdot**2, rel=1e-8)


# ------------------------------------------------------------------ joint friction in motion
def dissipation_run(mech: mt.Mechanism, t_end: float, h: float = 0.005) -> mt.Result:
    res = mt.simulate(mech, t_end, h)
    assert res.status == 0, res.message
    assert res["energy.dissipated"][-1] > 1e-3
    # the balance still closes with friction (relative to the energy moved around)
    scale = float(np.abs(res["energy.kinetic"]).max())
    assert np.abs(res["energy.balance_error"]).max() < 1e-8 * scale
    assert np.all(np.diff(res["energy.total"]) <= 1e-10 * scale)
    return res


def test_revolute_friction_dissipates_c_times_relative_speed_squared() -> None:
    c_pivot, c_elbow = 0.02, 0.05
    b = mt.MechanismBuilder("damped double pendulum")
    b.body("upper", 1.0, 1 / 12, cg=(0.5, 0.0))
    b.body("lower", 1.0, 1 / 12, cg=(0.5, 0.0), position=(1.0, 0.0))
    b.revolute("shoulder", "ground", "upper", (0.0, 0.0), (0.0, 0.0), viscous_friction=c_pivot)
    b.revolute("elbow", "upper", "lower", (1.0, 0.0), (0.0, 0.0), viscous_friction=c_elbow)
    res = dissipation_run(b.build(), 2.0)
    w1, w2 = res["upper.omega"], res["lower.omega"]
    expected = si.simpson(c_pivot * w1**2 + c_elbow * (w2 - w1) ** 2, x=res.time)
    assert res["energy.dissipated"][-1] == pytest.approx(expected, rel=1e-5)


def test_prismatic_friction_dissipates_c_times_sliding_speed_squared() -> None:
    """A slider on a guide along a swinging arm (a prismatic pair between two moving bodies) and the
    slider crank's ground guide with friction."""
    c = 0.8
    b = mt.MechanismBuilder("slider on arm")
    b.body("arm", 2.0, 0.2, cg=(0.4, 0.0))
    b.body("slider", 0.5, 0.005, position=(0.5, 0.0), velocity=(0.0, 0.0))
    b.revolute("pivot", "ground", "arm", (0.0, 0.0), (0.0, 0.0))
    b.prismatic("rail", "arm", "slider", (0.0, 0.0), (0.0, 0.0), axis=(1.0, 0.0), viscous_friction=c)
    b.spring_damper("tether", "arm", "slider", (0.0, 0.0), (0.0, 0.0), stiffness=40.0, free_length=0.4)
    res = dissipation_run(b.build(), 0.8)
    th, w = res["arm.theta"], res["arm.omega"]
    dx, dy = res["slider.x"] - res["arm.x"], res["slider.y"] - res["arm.y"]
    dvx, dvy = res["slider.vx"] - res["arm.vx"], res["slider.vy"] - res["arm.vy"]
    # s = u·d with u = (cos θ, sin θ):  ṡ = u̇·d + u·ḋ,  u̇ = ω (−sin θ, cos θ)
    sdot = w * (-np.sin(th) * dx + np.cos(th) * dy) + np.cos(th) * dvx + np.sin(th) * dvy
    assert np.abs(sdot).max() > 0.1
    expected = si.simpson(c * sdot**2, x=res.time)
    assert res["energy.dissipated"][-1] == pytest.approx(expected, rel=1e-5)

    mech = mt.load_mechanism(Path(__file__).resolve().parents[1] / "examples" / "mechanisms"
                             / "slider_crank.toml")
    mech = dataclasses.replace(mech, joints=tuple(
        dataclasses.replace(j, viscous_friction={"guide": 3.0}.get(j.name, 0.0)) for j in mech.joints))
    res = dissipation_run(mech, 0.6)
    expected = si.simpson(3.0 * res["piston.vx"] ** 2, x=res.time)
    assert res["energy.dissipated"][-1] == pytest.approx(expected, rel=1e-5)
