"""Penalty contact: forces against the energy they derive from, and motions against closed forms.

* Q of an undamped frictionless contact is −∂V/∂q of its elastic energy 0.4·K·δ^2.5 (central
  differences), for every geometry; with damping and friction the power identity
  Q·v = −dV/dt − D holds (D the reported dissipated power) — this checks δ̇ and v_slip.
* Ball drop (C = 0): energy conserved to a tolerance proportional to the integrator tolerance;
  largest penetration from ½·m·v² + m·g·δ = 0.4·K·δ^2.5.
* With damping the mechanical energy never increases.
* Block on a slope: creeps at v = v_lim·atanh(tan α / μ) (from m g sin α = μ m g cos α tanh(v/v_lim))
  when tan α < μ; slides with g·(sin α − μ cos α) when tan α > μ.
* Uniform disc on a slope (tan α < 3μ): slip rate ṡ = a − R·ω̇ = g sin α − 3f/m → 0 gives
  f = m g sin α / 3, a = 2/3·g·sin α, slip speed v_lim·atanh(tan α / (3μ)) ≪ v_lim.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy.optimize import brentq

import mbsd_twin as mt
from mbsd_twin.model.model import ContactSpec, Load, Polyline
from mbsd_twin.model.surfaces import Graph, Line, Polynomial, Spline
from mbsd_twin.model.validation import validate_mechanism
from mbsd_twin.solvers.results import TIME_SPEC

G = 9.81


def contact_load(name: str, bodies: tuple[str, str], spec: ContactSpec, K: float = 1e6, C: float = 0.0) -> Load:
    return Load(name, "contact", bodies, stiffness=K, damping=C, contact=spec)


def with_loads(mech: mt.Mechanism, *loads: Load) -> mt.Mechanism:
    out = dataclasses.replace(mech, loads=mech.loads + loads)
    assert validate_mechanism(out) == []
    return out


def two_body_case(spec: ContactSpec, first: str) -> mt.Mechanism:
    b = mt.MechanismBuilder("contact-geometry")
    b.body("plate", 2.0, 0.1, (0.05, 0.0), (0.02, -0.01), 0.1)
    b.body("wheel", 1.0, 0.01, (0.01, 0.02), (0.05, 0.04), 0.3)
    return with_loads(b.build(), contact_load("c", (first, "wheel"), spec, K=2e5, C=300.0))


GEOMETRIES = {
    "circle-line_on_body": (ContactSpec(Line((0.0, 0.0), (1.0, 0.1)), radius=0.05, center=(0.01, -0.02),
                                        friction=0.4, slip_velocity=0.05), "plate"),
    "circle-polynomial": (ContactSpec(Polynomial((0.0, 0.1, -0.3)), radius=0.06, friction=0.6,
                                      slip_velocity=0.02), "ground"),
    "circle-graph_function": (ContactSpec(Graph(lambda x: (0.02 * np.sin(5 * x), 0.1 * np.cos(5 * x),
                                                          -0.5 * np.sin(5 * x), -2.5 * np.cos(5 * x))),
                                          radius=0.06, friction=0.4, slip_velocity=0.05), "ground"),
    "circle-spline": (ContactSpec(Spline.graph((-0.5, -0.1, 0.2, 0.6), (0.0, 0.02, -0.01, 0.03)), radius=0.06,
                                  friction=0.3, slip_velocity=0.1), "ground"),
    "circle-polyline_on_body": (ContactSpec(Polyline(((-0.5, 0.0), (0.1, 0.02), (0.6, -0.05))), radius=0.07,
                                            friction=0.5, slip_velocity=0.05), "plate"),
    "polygon-polyline": (ContactSpec(Polyline(((-0.5, 0.03), (0.0, 0.0), (0.5, 0.04))),
                                     vertices=((-0.04, -0.05), (0.05, -0.06), (0.06, 0.05), (-0.05, 0.04)),
                                     friction=0.7, slip_velocity=0.05), "ground"),
}


def contact_force(system: mt.System, q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The contact's generalised force: Q minus that of the same bodies without loads."""
    bare = mt.compile_mechanism(dataclasses.replace(system.mechanism, loads=()))
    return np.asarray(system.forces(q, v) - bare.forces(q, v))


@pytest.mark.parametrize("case", list(GEOMETRIES))
def test_contact_force_is_minus_gradient_of_its_energy_and_powers_match(case: str) -> None:
    spec, first = GEOMETRIES[case]
    system = mt.compile_mechanism(two_body_case(spec, first))
    conservative = mt.compile_mechanism(
        dataclasses.replace(two_body_case(spec, first), loads=(contact_load("c", (first, "wheel"), spec, K=2e5),)))
    rng = np.random.default_rng(11)
    n, h, checked = system.n_coord, 1e-7, 0

    def V(x: np.ndarray) -> float:
        return float(conservative.forces_and_power(x[None], np.zeros((1, n)), np.zeros(1)).elastic[0])

    for _ in range(40):
        q, v = system.q0 + rng.normal(0.0, 0.02, n), rng.normal(0.0, 0.3, n)
        tot = system.forces_and_power(q[None], v[None], np.zeros(1))
        if tot.elastic[0] == 0.0:
            continue
        checked += 1
        grad = np.array([(V(q + h * e) - V(q - h * e)) / (2 * h) for e in np.eye(n)])
        # at zero velocity no damping or friction acts: the force is elastic
        np.testing.assert_allclose(contact_force(conservative, q, np.zeros(n)), -grad, rtol=1e-5,
                                   atol=1e-6 * np.abs(grad).max())
        dVdt = (V(q + h * v) - V(q - h * v)) / (2 * h)
        assert contact_force(system, q, v) @ v == pytest.approx(-dVdt - tot.dissipation[0], rel=1e-5, abs=1e-9)
        assert tot.dissipation[0] >= 0.0
    assert checked >= 5


def ball(C: float = 0.0, K: float = 1e6, h0: float = 0.2, R: float = 0.05, m: float = 1.0) -> mt.Mechanism:
    b = mt.MechanismBuilder("ball", gravity=(0.0, -G))
    b.body("ball", m, 0.4 * m * R**2, position=(0.0, h0))
    return with_loads(b.build(), contact_load("floor", ("ground", "ball"), ContactSpec(Line(), radius=R), K, C))


@pytest.mark.parametrize("rtol", [1e-8, 1e-10])
def test_undamped_ball_bounce_conserves_energy_to_integrator_tolerance(rtol: float) -> None:
    res = mt.simulate(ball(), 0.25, 0.0025, options=mt.SolverOptions(rtol=rtol, atol=rtol * 1e-2))
    assert res.success
    E = res["energy.total"]
    assert res["ball.vy"][-1] > 0  # bounced
    assert np.abs(E - E[0]).max() <= 1e3 * rtol * E[0]
    assert np.abs(res["energy.balance_error"]).max() <= 1e3 * rtol * E[0]


def test_ball_largest_penetration_and_contact_outputs() -> None:
    K, m, R, h0 = 1e6, 1.0, 0.05, 0.2
    v0 = math.sqrt(2 * G * (h0 - R))
    delta = brentq(lambda d: 0.4 * K * d**2.5 - 0.5 * m * v0**2 - m * G * d, 1e-6, 0.05, xtol=1e-15)
    mech = ball(K=K, h0=h0, R=R, m=m)
    t_hit = math.sqrt(2 * (h0 - R) / G)
    sim = mt.Simulator(mech, mt.SolverOptions(rtol=1e-10, atol=1e-12))
    rows = []
    for t in [t_hit - 1e-3, *(t_hit + np.arange(0.0, 0.012, 2e-5))]:   # every 20 µs through the impact
        sim.advance_to(float(t))
        out = sim.outputs()
        rows.append([sim.time, *(out[s.name] for s in sim.output_specs)])
    res = mt.Result([TIME_SPEC, *sim.output_specs], np.array(rows))
    pen = res["floor.penetration"]
    k = int(np.argmax(pen))
    assert R - res["ball.y"][k] == pytest.approx(pen[k], abs=1e-12)
    assert pen[k] == pytest.approx(delta, rel=1e-4)
    assert res["floor.normal_force"][k] == pytest.approx(K * pen[k] ** 1.5, rel=1e-9)  # undamped
    assert res["floor.normal_force"][0] == 0.0 and pen[0] == 0.0                       # before impact


def test_damped_ball_energy_never_increases() -> None:
    res = mt.simulate(ball(C=2e5), 0.3, 0.001, options=mt.SolverOptions(rtol=1e-9, atol=1e-11))
    assert res.success
    E = res["energy.total"]
    assert np.all(np.diff(E) <= 1e-9)
    assert E[-1] < 0.9 * E[0]   # the impact took energy
    assert res["energy.dissipated"][-1] == pytest.approx(E[0] - E[-1], rel=1e-6)


def block_on_slope(alpha: float, mu: float, v_lim: float = 0.01, K: float = 1e6, C: float = 2e5) -> mt.Mechanism:
    """A 0.2 m × 0.1 m, 1 kg block, its four corners against a polyline slope going down in +x;
    it starts at rest with the static penetration (m g cos α / 2 / K)^(2/3) under its lower corners."""
    m, hh = 1.0, 0.05
    d0 = (m * G * math.cos(alpha) / 2 / K) ** (2 / 3)
    ca, sa = math.cos(alpha), math.sin(alpha)
    b = mt.MechanismBuilder("block-on-slope", gravity=(0.0, -G))
    b.body("block", m, m * (0.2**2 + 0.1**2) / 12, position=((hh - d0) * sa, (hh - d0) * ca), angle=-alpha)
    spec = ContactSpec(Polyline(((-3 * ca, 3 * sa), (3 * ca, -3 * sa))),
                       vertices=((-0.1, -hh), (0.1, -hh), (0.1, hh), (-0.1, hh)), friction=mu, slip_velocity=v_lim)
    return with_loads(b.build(), contact_load("slope", ("ground", "block"), spec, K, C))


def downhill_speed(res: mt.Result, alpha: float) -> np.ndarray:
    return np.asarray(res["block.vx"] * math.cos(alpha) - res["block.vy"] * math.sin(alpha))


def test_block_creeps_below_the_friction_limit() -> None:
    alpha, mu, v_lim = math.atan(0.15), 0.5, 0.01
    mech = block_on_slope(alpha, mu, v_lim)
    res = mt.simulate(mech, 0.3, 0.01)
    creep = v_lim * math.atanh(math.tan(alpha) / mu)
    v = downhill_speed(res, alpha)
    assert v[-1] == pytest.approx(creep, rel=1e-4)
    assert v[-1] < 0.35 * v_lim
    assert res["slope.normal_force"][-1] == pytest.approx(G * math.cos(alpha), rel=1e-6)
    assert res["slope.friction_force"][-1] == pytest.approx(-G * math.sin(alpha), rel=1e-6)


def test_block_slides_with_coulomb_acceleration_above_the_limit() -> None:
    alpha, mu = math.atan(0.7), 0.3
    res = mt.simulate(block_on_slope(alpha, mu), 0.3, 0.01)
    v = downhill_speed(res, alpha)
    late = res.time > 0.15                      # v > 0.4 m/s ≫ v_lim: tanh = 1 to 1e-30
    slope = np.polyfit(res.time[late], v[late], 1)[0]
    assert slope == pytest.approx(G * (math.sin(alpha) - mu * math.cos(alpha)), rel=1e-5)


def disc_on_slope(alpha: float, mu: float, v_lim: float = 0.01, K: float = 1e7, C: float = 1e6) -> mt.Mechanism:
    m, R = 1.0, 0.1
    d0 = (m * G * math.cos(alpha) / K) ** (2 / 3)
    n = np.array([math.sin(alpha), math.cos(alpha)])
    b = mt.MechanismBuilder("disc-on-slope", gravity=(0.0, -G))
    b.body("disc", m, 0.5 * m * R**2, position=tuple((R - d0) * n))
    spec = ContactSpec(Line((0.0, 0.0), (math.cos(alpha), -math.sin(alpha))), radius=R, friction=mu,
                       slip_velocity=v_lim)
    return with_loads(b.build(), contact_load("slope", ("ground", "disc"), spec, K, C))


@pytest.mark.parametrize(("tan_alpha", "mu"), [(0.6, 0.5), (0.3, 0.5)])
def test_uniform_disc_rolls_without_slipping(tan_alpha: float, mu: float) -> None:
    """tan α < 3μ in both cases; in the first tan α > μ, so a block would slide."""
    alpha, v_lim = math.atan(tan_alpha), 0.01
    mech = disc_on_slope(alpha, mu, v_lim)
    res = mt.simulate(mech, 0.3, 0.01)
    v = res["disc.vx"] * math.cos(alpha) - res["disc.vy"] * math.sin(alpha)
    late = res.time > 0.1
    slope = np.polyfit(res.time[late], v[late], 1)[0]
    assert slope == pytest.approx(2 / 3 * G * math.sin(alpha), rel=1e-4)
    slip = res["slope.slip_velocity"][late]
    np.testing.assert_allclose(slip, v_lim * math.atanh(tan_alpha / (3 * mu)), rtol=1e-3)
    assert np.abs(slip).max() < 0.5 * v_lim     # atanh(x) < 0.5 for x = tan α / 3μ ≤ 0.4
    assert v[-1] > 50 * v_lim                   # while the disc itself runs 100 times faster
    # rolling: ω·R follows the centre's speed up to the slip
    np.testing.assert_allclose(-res["disc.omega"][late] * 0.1, v[late] - slip, atol=1e-6)


def test_contact_and_rotating_frame_in_a_file() -> None:
    text = """
format = "mbsd-twin/1"
name = "ball-on-floor"
[[bodies]]
name = "ball"
mass = 1.0
inertia = 1e-3
position = [0.0, 0.2]
[[loads]]
name = "floor"
type = "contact"
bodies = ["ground", "ball"]
surface = { kind = "polyline", points = [[-1.0, 0.0], [1.0, 0.0]] }
radius = 0.05
stiffness = 1e6
damping = 100.0
friction = 0.5
slip_velocity = 0.01
[[loads]]
name = "spin"
type = "rotating_frame"
rate = 2.0
center = [0.1, 0.0]
"""
    mech = mt.loads_mechanism(text)
    spec = mech.loads[0].contact
    assert isinstance(spec.surface, Polyline) and spec.radius == 0.05 and spec.friction == 0.5
    assert (mech.loads[1].value, mech.loads[1].points[0], mech.loads[1].bodies) == (2.0, (0.1, 0.0), ())
    bad = text.replace("radius = 0.05", "radius = -0.05").replace("[1.0, 0.0]]", "[-1.0, 0.0]]") \
        .replace("rate = 2.0", "rate = true")
    with pytest.raises(mt.MechanismError) as err:
        mt.loads_mechanism(bad, "f.toml")
    assert sorted(p.location for p in err.value.problems) == [
        "f.toml: loads[0] (floor).radius", "f.toml: loads[0] (floor).surface.points", "f.toml: loads[1] (spin).rate"]
