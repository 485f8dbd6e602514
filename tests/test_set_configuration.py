"""Simulator.set_configuration: re-initialise from measured angle and speed (twin re-sync)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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
