"""Simulator.set_configuration: re-initialise from measured angle and speed (twin re-sync)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.linalg

import mbsd_twin as mt

FREE = Path(__file__).resolve().parents[1] / "examples/mechanisms/slider_crank.toml"
R, L = 0.1, 0.3


@pytest.mark.parametrize("backend", ["compiled", "numpy"])
def test_imposed_crank_angle_and_speed_give_the_closed_form_pose(backend: str) -> None:
    sim = mt.Simulator(mt.load_mechanism(FREE), mt.SolverOptions(backend=backend))
    sim.set_input("motor_torque", 1.0)
    sim.advance_to(0.05)
    th, w = 2.0, 7.5
    sim.set_configuration({"crank.theta": th}, {"crank.omega": w}, time=10.0)
    out = sim.outputs()
    assert sim.time == 10.0
    assert out["crank.theta"] == th and out["crank.omega"] == w
    # closed form: piston x = r cos θ + sqrt(l² − r² sin² θ), its rate by differentiation
    s = R * np.sin(th)
    x = R * np.cos(th) + np.sqrt(L**2 - s**2)
    xdot = -R * np.sin(th) * w - (s * R * np.cos(th) * w) / np.sqrt(L**2 - s**2)
    assert out["piston.x"] == pytest.approx(x, abs=1e-12)
    assert out["piston.vx"] == pytest.approx(xdot, abs=1e-10)
    assert out["constraints.position_residual"] < 1e-12
    assert out["energy.balance_error"] == 0.0 and out["energy.input_work"] == 0.0
    sim.advance_to(10.01)  # and it keeps running from there
    assert sim.get_output("crank.theta") > th


def test_contradicting_values_and_unknown_names_are_rejected() -> None:
    sim = mt.Simulator(mt.load_mechanism(FREE))
    with pytest.raises(mt.AssemblyError):
        sim.set_configuration({"crank.theta": 0.0, "piston.x": 0.1})  # piston must be at 0.4
    with pytest.raises(mt.PortError, match="crank.omega"):
        sim.set_configuration({"crank.omega": 1.0})
    with pytest.raises(mt.PortError, match="nope"):
        sim.set_configuration(velocities={"nope": 1.0})


@pytest.mark.parametrize("backend", ["compiled", "numpy"])
def test_outputs_feel_a_new_input_at_once(backend: str) -> None:
    """Direct feedthrough: the crank's angular acceleration changes with the motor torque without
    a step. At rest at θ = 0 the piston is momentarily stationary, the crank pin moves at r·ω
    upwards and the rod turns about the wrist pin at φ' = −r·ω/l, its centre (mid-rod) moving at
    r·ω/2. Kinetic energy ½·J·ω² with J = I_c + m_c·rG² + m_rod·(r/2)² + I_rod·(r/l)², so a torque
    step Δτ changes α by Δτ / J (friction is zero at rest, gravity does not change)."""
    sim = mt.Simulator(mt.load_mechanism(FREE), mt.SolverOptions(backend=backend))
    a0 = sim.get_output("crank.alpha")
    sim.set_input("motor_torque", 1.0)
    a1 = sim.get_output("crank.alpha")
    sim.set_input("motor_torque", 2.0)
    a2 = sim.get_output("crank.alpha")
    J = 8.333e-4 + 1.0 * 0.05**2 + 2.0 * (R / 2) ** 2 + 0.015 * (R / L) ** 2
    assert a1 - a0 == pytest.approx(1.0 / J, rel=1e-9)
    assert a2 - a1 == pytest.approx(1.0 / J, rel=1e-9)


PROJECT = {"initial_velocity": "project"}  # driven mechanisms: the files give no velocities
CASES = [("slider_crank.toml", {}), ("four_bar.toml", {}), ("double_pendulum.toml", {}),
         ("slider_crank_driven.toml", PROJECT), ("pantograph.toml", PROJECT)]


@pytest.mark.parametrize(("file", "extra"), CASES)
def test_compiled_constrained_state_matches_the_numpy_algorithm(file: str, extra: dict[str, str]) -> None:
    """The compiled re-initialisation (nb_config) against Dynamics.constrained_state (numpy, the
    reference algorithm) from perturbed states with nothing, one coordinate, a whole body's
    coordinates (rows that lose their free columns) and a velocity held: the same q and v to
    1e-12, the constraints met, the held values exact and the velocity move the minimum-norm
    least-squares one (scipy)."""
    mech = mt.load_mechanism(FREE.parent / file)
    sim = mt.Simulator(mech, mt.SolverOptions(backend="compiled", **extra))  # type: ignore[arg-type]
    sim.advance_to(0.13)
    s, st, dyn, n, t = sim.system, sim._stepper, sim._dyn, sim.system.n_coord, sim.time
    rng = np.random.default_rng(7)
    for fq, fv in (([], []), ([2], [2]), ([0, 1, 2], []), ([], [0, 1, 2]), ([2, 5], [2])):
        q0 = st.y[:n] + rng.normal(scale=1e-3, size=n)
        v0 = st.y[n:2 * n] + rng.normal(scale=0.1, size=n)
        fqa, fva = np.array(fq, dtype=np.int64), np.array(fv, dtype=np.int64)
        q0[fqa], v0[fva] = st.y[fqa], st.y[n + fva]  # held values that the constraints allow
        q, v, left = st.constrained_state(t, q0, v0, fqa, fva)
        qr, vr, left_r = dyn.constrained_state(t, q0, v0, fqa, fva)
        np.testing.assert_allclose(q, qr, rtol=0, atol=1e-12)
        np.testing.assert_allclose(v, vr, rtol=0, atol=1e-12)
        assert left < 1e-12 and left_r < 1e-12
        rows = dyn.rows
        A = s.jacobian(q, t)[rows]
        assert np.abs(s.constraints(q, t)[rows]).max() < 1e-12
        assert np.abs(A @ v + s.ct(q, t)[rows]).max() < 1e-12
        assert np.array_equal(q[fqa], q0[fqa]) and np.array_equal(v[fva], v0[fva])
        free = np.setdiff1d(np.arange(n), fva)
        d = scipy.linalg.lstsq(A[:, free], A @ v0 + s.ct(q, t)[rows])[0]  # minimum-norm by SVD
        np.testing.assert_allclose(v[free], v0[free] - d, rtol=0, atol=1e-12)
