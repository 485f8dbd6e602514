"""Gear joints on angles relative to a carrier (issue #18): a planetary train against Willis' formula
on both backends, the mesh keyword against the legacy signed ratio, and the file keys.

The train: sun (z_s teeth), planets' carrier and ring (z_r) on the same ground axis, one planet (z_p)
pinned on the carrier at R_s + R_p. Relative to the carrier the sun–planet mesh is external and the
planet–ring mesh internal, so Willis' formula (ω_s − ω_c)/(ω_r − ω_c) = −z_r/z_s holds, and
ω_p − ω_c = −(z_s/z_p)·(ω_s − ω_c).
"""

from __future__ import annotations

import numpy as np
import pytest

import mbsd_twin as mt
from mbsd_twin.compiled.compiled_model import pack
from mbsd_twin.compiled.nb_solve import accelerations, reactions
from mbsd_twin.physics.outputs import reaction_columns
from mbsd_twin.physics.system import gear_factor
from mbsd_twin.solvers.dynamics import Dynamics

Z_S, Z_P, Z_R = 20, 10, 40  # Z_R = Z_S + 2 Z_P: the planet fits between sun and ring
MODULE = 0.01  # [m] pitch radius = z·module / 2
R_S, R_P = Z_S * MODULE / 2, Z_P * MODULE / 2
I_SUN, I_CARRIER, M_PLANET, I_PLANET, I_RING = 0.005, 0.01, 0.3, 4e-4, 0.08


def planetary(sun: str, ring: str, w_s: float = 0.0, w_r: float = 0.0, torque: float = 0.0) -> mt.Mechanism:
    """``sun``/``ring``: "driven" (angle driver at w_s / w_r [rad/s]) or "free"; ``torque`` [N·m] on
    the sun. No gravity; every centre of mass on its axis."""
    b = mt.MechanismBuilder("planetary", gravity=(0.0, 0.0))
    b.body("sun", 1.0, I_SUN)
    b.body("carrier", 0.5, I_CARRIER)
    b.body("planet", M_PLANET, I_PLANET, position=(R_S + R_P, 0.0))
    b.body("ring", 2.0, I_RING)
    for name in ("sun", "carrier", "ring"):
        b.revolute(f"{name}_axis", "ground", name, (0.0, 0.0), (0.0, 0.0))
    b.revolute("planet_axis", "carrier", "planet", (R_S + R_P, 0.0), (0.0, 0.0))
    b.gear("sun_planet", "sun", "planet", ratio=Z_P / Z_S, mesh="external", carrier="carrier")
    b.gear("planet_ring", "planet", "ring", ratio=Z_R / Z_P, mesh="internal", carrier="carrier")
    if sun == "driven":
        b.angle_driver("sun_motor", "sun", mt.ConstantSpeed(speed=w_s))
    if ring == "driven":
        b.angle_driver("ring_motor", "ring", mt.ConstantSpeed(speed=w_r))
    if torque:
        b.torque("sun_torque", "sun", value=torque)
    return b.build()


@pytest.mark.parametrize(("w_s", "w_r"), [(2.0, 0.0), (3.0, -1.5), (0.0, 1.0)])
def test_planetary_kinematics_follow_willis(w_s: float, w_r: float) -> None:
    """Both outer members driven (DOF 0): the numpy sweep's carrier and planet speeds and angles."""
    res = mt.kinematics(planetary("driven", "driven", w_s, w_r), t=np.linspace(0.0, 2.0, 41))
    w_c = (Z_S * w_s + Z_R * w_r) / (Z_S + Z_R)  # Willis solved for the carrier
    w_p = w_c - Z_S / Z_P * (w_s - w_c)
    np.testing.assert_allclose(res["carrier.omega"], w_c, rtol=0, atol=1e-12)
    np.testing.assert_allclose(res["planet.omega"], w_p, rtol=0, atol=1e-12)
    np.testing.assert_allclose((res["sun.omega"] - w_c) / (res["ring.omega"] - w_c), -Z_R / Z_S, rtol=1e-12)
    np.testing.assert_allclose(res["carrier.theta"], w_c * res["time"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(res["planet.theta"], w_p * res["time"], rtol=0, atol=1e-10)
    # the planet's centre rides the carrier at R_s + R_p
    np.testing.assert_allclose(np.hypot(res["planet.x"], res["planet.y"]), R_S + R_P, rtol=0, atol=1e-12)


def equivalent_inertia() -> float:
    """Ring held, sun turning at ω: ω_c = ω·z_s/(z_s + z_r), ω_p = −ω (Willis); the kinetic energy
    ½·J·ω² gives J about the sun."""
    kc = Z_S / (Z_S + Z_R)
    kp = kc - Z_S / Z_P * (1 - kc)
    return I_SUN + (I_CARRIER + M_PLANET * (R_S + R_P) ** 2) * kc**2 + I_PLANET * kp**2


@pytest.mark.parametrize("backend", ["compiled", "numpy"])
def test_planetary_dynamics_on_both_backends(backend: str) -> None:
    """Ring held by a driver, a constant torque T on the sun, no gravity: θ_s = T·t²/(2J) with J of
    :func:`equivalent_inertia`; the carrier and planet follow Willis at every sample."""
    T = 2.0
    sim = mt.Simulator(planetary("free", "driven", torque=T),
                       mt.SolverOptions(backend=backend, rtol=1e-10, atol=1e-12))
    assert sim.backend == backend
    J = equivalent_inertia()
    for t in (0.1, 0.25, 0.5):
        sim.advance_to(t)
        out = sim.outputs()
        assert out["sun.theta"] == pytest.approx(T * t**2 / (2 * J), rel=1e-8)
        assert out["carrier.theta"] == pytest.approx(out["sun.theta"] * Z_S / (Z_S + Z_R), rel=1e-10, abs=1e-12)
        assert out["planet.theta"] == pytest.approx(-out["sun.theta"], rel=1e-10, abs=1e-12)
        assert out["ring.theta"] == pytest.approx(0.0, abs=1e-12)
        assert out["energy.kinetic"] == pytest.approx(out["energy.input_work"], rel=1e-8)


def test_planetary_compiled_rows_match_numpy_at_random_states() -> None:
    """The packed gear rows (carrier column included) against the numpy kernels off the constraints:
    residuals, accelerations, multipliers and the gears' reaction torques."""
    system = mt.compile_mechanism(planetary("free", "driven", torque=1.0))
    dyn = Dynamics(system, mt.SolverOptions())
    model, joints = pack(system, dyn.rows, None)
    q0 = mt.assemble(system)
    rng = np.random.default_rng(18)
    for _ in range(5):
        q = q0 + rng.normal(scale=0.1, size=q0.shape)
        v = rng.normal(size=q0.shape)
        t = float(rng.uniform(0, 1))
        a, lam, _, _, _, C, Jv, _, ok = accelerations(t, q, v, np.zeros(1), model)
        ev = dyn.evaluate(t, q, v, {})
        assert ok
        np.testing.assert_allclose(C[: system.n_constraints], system.constraints(q, t), rtol=0, atol=1e-14)
        np.testing.assert_allclose(a, ev.a, rtol=0, atol=1e-10 * max(1.0, np.abs(ev.a).max()))
        np.testing.assert_allclose(lam, ev.lam, rtol=0, atol=1e-10 * max(1.0, np.abs(ev.lam).max()))
        react = reactions(q, lam, Jv, model[3], joints, system.n_coord)
        cols = reaction_columns(system, q[None], ev.Cq[None], ev.lam[None])
        for k, j in enumerate(system.joints):
            for c in j.components:
                assert react[k, "xyz".index(c[1])] == pytest.approx(cols[f"{j.name}.{c}"][0], rel=1e-9, abs=1e-9)


def two_gears(**gear: object) -> mt.System:
    b = mt.MechanismBuilder("pair")
    b.body("a", 1.0, 0.1, angle=0.3)
    b.body("b", 1.0, 0.1, position=(1.0, 0.0), angle=-0.2)
    b.gear("g", "a", "b", **gear)  # type: ignore[arg-type]
    return mt.compile_mechanism(b.build())


def test_mesh_keyword_matches_the_legacy_signed_ratio() -> None:
    """A positive ratio with mesh "external" is the legacy negative ratio (and "internal" the legacy
    positive one): same residuals and Jacobians everywhere, offsets from the same guess."""
    rng = np.random.default_rng(5)
    for new, old in (({"ratio": 1.5, "mesh": "external"}, {"ratio": -1.5}),
                     ({"ratio": 1.5, "mesh": "internal"}, {"ratio": 1.5})):
        s_new, s_old = two_gears(**new), two_gears(**old)
        for _ in range(3):
            q = rng.normal(size=s_new.n_coord)
            np.testing.assert_array_equal(s_new.constraints(q), s_old.constraints(q))
            np.testing.assert_array_equal(s_new.jacobian(q), s_old.jacobian(q))
    # the grounded-axes formula of the legacy gear: θ_a − τ·θ_b = offset with the guess's offset
    s = two_gears(ratio=2.0, mesh="external")
    q = np.array([0.0, 0.0, 0.7, 1.0, 0.0, 0.1])
    assert s.constraints(q)[0] == pytest.approx(0.7 + 2.0 * 0.1 - (0.3 + 2.0 * -0.2), abs=1e-15)


def test_gear_keys_in_the_file_and_their_errors() -> None:
    text = """format = "mbsd-twin/1"
name = "pair"
[[bodies]]
name = "a"
mass = 1.0
inertia = 0.1
[[bodies]]
name = "b"
mass = 1.0
inertia = 0.1
[[bodies]]
name = "arm"
mass = 1.0
inertia = 0.1
[[joints]]
name = "g"
type = "gear"
bodies = ["a", "b"]
ratio = RATIO
MORE
"""
    mech = mt.loads_mechanism(text.replace("RATIO", "2.0").replace("MORE", 'mesh = "internal"\ncarrier = "arm"'))
    assert (mech.joint("g").carrier, mech.joint("g").mesh, mech.joint("g").ratio) == ("arm", "internal", 2.0)
    assert gear_factor(mech.joint("g")) == 2.0
    assert gear_factor(mt.loads_mechanism(text.replace("RATIO", "-2.0").replace("MORE", "")).joint("g")) == -2.0
    cases = {('-2.0', 'mesh = "external"'): "joints[0] (g).ratio: with mesh = 'external' the ratio is the positive",
             ('2.0', 'mesh = "externel"'): "did you mean 'external'?",
             ('2.0', 'carrier = "a"'): "joints[0] (g).carrier: the carrier must differ from the gear's bodies",
             ('2.0', 'carrier = "arn"'): "joints[0] (g).carrier: unknown body 'arn'"}
    for (ratio, more), expected in cases.items():
        with pytest.raises(mt.MechanismError) as err:
            mt.loads_mechanism(text.replace("RATIO", ratio).replace("MORE", more))
        assert expected in str(err.value)


def test_velocity_check_names_the_gear_rows_a_given_speed_violates() -> None:
    """Ring held, the sun given ω_s = 3 rad/s and every other body at rest: the sun–planet row
    (ω_s − ω_c) + (z_p/z_s)·(ω_p − ω_c) = 3 rad/s is the only one violated (the planet–ring row has
    no sun term, the revolutes hold: each body turns about its own reference point)."""
    mech = planetary("free", "driven")
    bodies = tuple(b if b.name != "sun" else mt.Body(b.name, b.mass, b.inertia, omega=3.0) for b in mech.bodies)
    bad = mt.Mechanism(mech.name, bodies, mech.joints, mech.drivers, mech.loads, mech.gravity)
    with pytest.raises(mt.ConsistencyError) as err:
        mt.Simulator(bad, mt.SolverOptions(initial_velocity="check"))
    assert err.value.joints == ["sun_planet"]
    assert err.value.worst[0] == ("sun_planet[gear]", pytest.approx(3.0, rel=1e-14))
    assert "sun_planet[gear] 3 rad/s" in str(err.value)


def test_shipped_planetary_example_follows_the_closed_form() -> None:
    """examples/mechanisms/planetary_gear.toml is the train above with the ring fixed to the frame
    (a fixed joint instead of a driver) and 2 N·m on the sun."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples/mechanisms/planetary_gear.toml"
    sim = mt.Simulator(mt.load_mechanism(path))
    assert sim.backend == "compiled"
    sim.advance_to(0.5)
    out = sim.outputs()
    assert out["sun.theta"] == pytest.approx(2.0 * 0.5**2 / (2 * equivalent_inertia()), rel=1e-8)
    assert out["carrier.theta"] == pytest.approx(out["sun.theta"] / 3, rel=1e-10)
