"""Contact outputs (normal force, friction force, penetration) are Simulator outputs."""

from __future__ import annotations

import pytest

import mbsd_twin as mt

BALL = """
format = "mbsd-twin/1"
name = "ball"
gravity = [0.0, -9.81]
[[bodies]]
name = "ball"
mass = 2.0
inertia = 0.008
position = [0.0, {y0}]
[[loads]]
name = "floor"
type = "contact"
bodies = ["ground", "ball"]
surface = {{ kind = "line", point = [0.0, 0.0], direction = [1.0, 0.0] }}
radius = 0.1
stiffness = 1.0e6
damping = {c}
friction = 0.5
slip_velocity = 0.01
"""


def test_resting_ball_reports_its_weight_and_the_hertz_penetration() -> None:
    """At rest on a flat floor: Fn = m·g and δ = (m·g / K)^(2/3); no friction without slip."""
    m, g, K = 2.0, 9.81, 1.0e6
    delta = (m * g / K) ** (2.0 / 3.0)
    mech = mt.loads_mechanism(BALL.format(y0=0.1 - delta, c=0.0), source="ball.toml")
    sim = mt.Simulator(mech)
    out = sim.outputs()
    assert {"floor.normal_force", "floor.friction_force", "floor.penetration"} <= set(out)
    assert out["floor.normal_force"] == pytest.approx(m * g, rel=1e-9)
    assert out["floor.penetration"] == pytest.approx(delta, rel=1e-9)
    assert out["floor.friction_force"] == 0.0
    sim.advance_to(0.05)  # and it stays at rest there
    assert sim.get_output("floor.normal_force") == pytest.approx(m * g, rel=1e-6)
    assert {p.name for p in sim.output_ports} == set(out)
