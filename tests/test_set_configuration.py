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
