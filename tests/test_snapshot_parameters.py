"""Simulator.snapshot/restore and fixed parameters changed in place or with the state kept
(``set_parameter(..., keep_state=True)``): compared with freshly built Simulators."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.optimize as so

import mbsd_twin as mt
from mbsd_twin.model.loader import bundled_slider_crank
from mbsd_twin.simulation.ports import apply_parameters

BACKENDS = ["compiled", "numpy"]
DRIVEN = Path(__file__).resolve().parents[1] / "examples" / "mechanisms" / "slider_crank_driven.toml"
LIVE = {"piston.mass": 0.9, "crank.inertia": 2e-3, "rod.cg_x": 0.12, "rod.cg_y": 0.01,
        "main_bearing.viscous_friction": 0.2, "guide.viscous_friction": 0.1, "spring.stiffness": 80.0,
        "spring.damping": 0.7, "twist.stiffness": 0.5, "twist.damping": 0.02}


def mechanism() -> mt.Mechanism:
    """The bundled slider crank with a friction-loaded guide, a spring-damper pulling the piston
    towards x = 0.6 m and a rotational spring-damper on the crank: every live parameter kind."""
    mech = mt.load_mechanism(bundled_slider_crank())
    joints = tuple(dataclasses.replace(j, viscous_friction=0.4) if j.name == "guide" else j for j in mech.joints)
    extra = (mt.Load("spring", "spring_damper", ("ground", "piston"), points=((0.6, 0.0), (0.0, 0.0)),
                     stiffness=50.0, damping=0.3),
             mt.Load("twist", "rotational_spring_damper", ("ground", "crank"), stiffness=0.2, damping=0.01))
    return dataclasses.replace(mech, joints=joints, loads=mech.loads + extra)


def drive(sim: mt.Simulator, t_end: float, h: float = 1e-3, changing: bool = True) -> np.ndarray:
    """Advance in steps of h [s] with a torque that changes at every step (or a constant 2 N·m:
    the compiled stepper then serves the points from inside its longer steps); every output at
    every step."""
    rows = []
    while sim.time < t_end - 1e-12:
        sim.set_input("motor_torque", 1.5 + math.sin(40.0 * sim.time) if changing else 2.0)
        sim.advance_to(sim.time + h)
        rows.append(sim.output_vector().copy())
    return np.array(rows)


@pytest.mark.parametrize("changing", [True, False])
@pytest.mark.parametrize("backend", BACKENDS)
def test_restore_continues_bit_identically_also_across_a_parameter_change(backend: str, changing: bool) -> None:
    sim = mt.Simulator(mechanism(), mt.SolverOptions(backend=backend))
    drive(sim, 0.0205, changing=changing)
    snap = sim.snapshot()
    assert snap.time == sim.time
    # live, geometry (a rebuild) and solver parameters changed after the snapshot are set back
    first = drive(sim, 0.04, changing=changing)
    sim.restore(snap)
    assert sim.time == snap.time
    np.testing.assert_array_equal(drive(sim, 0.04, changing=changing), first)
    for name, value in (("piston.mass", 3.0), ("crank_pin.p1_x", 0.11), ("solver.rtol", 1e-6)):
        sim.restore(snap)
        sim.set_parameter(name, value, keep_state=True)
        drive(sim, 0.03)
        sim.restore(snap)
        assert {p.name: p.value for p in sim.parameters}[name] == mechanism_value(name)
        assert sim.options == mt.SolverOptions(backend=backend)
        np.testing.assert_array_equal(drive(sim, 0.04, changing=changing), first)


def mechanism_value(name: str) -> float:
    return {p.name: p.value for p in mt.Simulator(mechanism()).parameters}[name]


def test_snapshot_of_another_mechanism_is_refused() -> None:
    other = mt.Simulator(mt.load_mechanism(bundled_slider_crank())).snapshot()
    assert isinstance(other, mt.Snapshot) and "Snapshot" in mt.__all__
    with pytest.raises(ValueError, match="different mechanism"):
        mt.Simulator(mechanism()).restore(other)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(LIVE))
def test_live_parameter_resets_like_a_model_built_with_that_value(backend: str, name: str) -> None:
    opts = mt.SolverOptions(backend=backend)
    sim = mt.Simulator(mechanism(), opts)
    drive(sim, 0.01)
    sim.set_parameter(name, LIVE[name])
    assert sim.time == 0.0 and sim.get_input("motor_torque") == 0.0
    built = mt.Simulator(apply_parameters(mechanism(), {name: LIVE[name]}), opts)
    np.testing.assert_array_equal(sim.output_vector(), built.output_vector())
    np.testing.assert_array_equal(drive(sim, 0.03), drive(built, 0.03))
    assert {p.name: p.value for p in sim.parameters}[name] == LIVE[name]
    assert sim.mechanism == built.mechanism
    # the state of the changed model round-trips through get_state into a new Simulator
    copy = mt.Simulator(mechanism(), opts)
    copy.set_state(sim.get_state())
    np.testing.assert_array_equal(drive(copy, 0.05), drive(sim, 0.05))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["piston.mass", "spring.stiffness", "guide.viscous_friction"])
def test_keep_state_continues_like_a_new_model_started_at_that_state(backend: str, name: str) -> None:
    """keep_state=True ≡ a Simulator built with the value, driven the same way (so that its
    integrator also knows the inputs are streaming: a re-initialisation keeps that record) and set
    to the same time, positions and velocities with set_configuration: the same outputs, bit for
    bit, and a fresh energy balance."""
    opts = mt.SolverOptions(backend=backend)
    sim = mt.Simulator(mechanism(), opts)
    drive(sim, 0.02)
    t, u, before = sim.time, sim.get_input("motor_torque"), sim.outputs()
    sim.set_parameter(name, LIVE[name], keep_state=True)
    after = sim.outputs()
    assert sim.time == t and sim.get_input("motor_torque") == u
    coords = [f"{b}.{c}" for b in ("crank", "rod", "piston") for c in ("x", "y", "theta")]
    rates = [f"{b}.{c}" for b in ("crank", "rod", "piston") for c in ("vx", "vy", "omega")]
    assert [after[k] for k in coords + rates] == [before[k] for k in coords + rates]
    assert after["energy.balance_error"] == 0.0 and after["energy.dissipated"] == 0.0
    built = mt.Simulator(apply_parameters(mechanism(), {name: LIVE[name]}), opts)
    drive(built, 0.02)
    built.set_input("motor_torque", sim.get_input("motor_torque"))
    built.set_configuration({k: before[k] for k in coords}, {k: before[k] for k in rates}, time=t)
    np.testing.assert_array_equal(sim.output_vector(), built.output_vector())
    np.testing.assert_array_equal(drive(sim, 0.05), drive(built, 0.05))


@pytest.mark.parametrize("backend", BACKENDS)
def test_keep_state_after_a_geometry_change_moves_the_positions_least(backend: str) -> None:
    """A longer crank (crank_pin.p1_x 0.1 → 0.104 m) with the state kept: the positions are moved
    onto the new constraints, as far as the nearest consistent point that scipy finds
    (min |q − q_old|² subject to C(q) = 0), and the velocities satisfy Cq·v = 0."""
    sim = mt.Simulator(mechanism(), mt.SolverOptions(backend=backend))
    drive(sim, 0.02)
    n = sim.system.n_coord
    t, y_old = sim.time, sim._stepper.y.copy()
    sim.set_parameter("crank_pin.p1_x", 0.104, keep_state=True)
    s = sim.system
    assert s.mechanism.joint("crank_pin").points[0] == (0.104, 0.0)
    y = sim._stepper.y
    q, v = y[:n], y[n:2 * n]
    assert sim.time == t
    assert np.abs(s.constraints(q, t)).max() < 1e-12
    assert np.abs(s.jacobian(q, t) @ v + s.ct(q, t)).max() < 1e-12
    best = so.minimize(lambda x: float(((x - y_old[:n]) ** 2).sum()), y_old[:n], method="SLSQP",
                       constraints=[{"type": "eq", "fun": lambda x: s.constraints(x, t),
                                     "jac": lambda x: s.jacobian(x, t)}], options={"ftol": 1e-16, "maxiter": 200})
    assert np.abs(s.constraints(best.x, t)).max() < 1e-9
    moved, least = np.linalg.norm(q - y_old[:n]), np.linalg.norm(best.x - y_old[:n])
    assert least > 5e-3 and moved == pytest.approx(least, rel=1e-9)  # 5.66 mm here
    assert np.abs(q - best.x).max() < 1e-7  # second order in the move: 4e-9 here
    assert sim.outputs()["energy.balance_error"] == 0.0
    drive(sim, 0.03)
    assert sim.outputs()["constraints.position_residual"] < 1e-10


@pytest.mark.parametrize("backend", BACKENDS)
def test_impossible_geometry_or_rejected_value_leave_the_simulator_as_it_was(backend: str) -> None:
    """At t = 0.25 s the driven crank stands at 90°: a 0.5 m crank cannot reach the 0.3 m rod's
    guide line. The error leaves the old model and state; so does a negative mass."""
    sim = mt.Simulator(mt.load_mechanism(DRIVEN), mt.SolverOptions(backend=backend, initial_velocity="project"))
    sim.advance_to(0.25)
    before = sim.output_vector().copy()
    with pytest.raises(mt.AssemblyError, match="new geometry"):
        sim.set_parameter("crank_pin.p1_x", 0.5, keep_state=True)
    with pytest.raises(mt.MechanismError, match="piston.mass"):
        sim.set_parameter("piston.mass", -1.0, keep_state=True)
    with pytest.raises(mt.MechanismError, match="piston.mass"):
        sim.set_parameter("piston.mass", 0.0)
    assert sim.time == 0.25
    np.testing.assert_array_equal(sim.output_vector(), before)
    values = {p.name: p.value for p in sim.parameters}
    assert values["crank_pin.p1_x"] == 0.1 and values["piston.mass"] == 1.5
    assert sim.mechanism.joint("crank_pin").points[0] == (0.1, 0.0)
    fresh = mt.Simulator(mt.load_mechanism(DRIVEN), mt.SolverOptions(backend=backend, initial_velocity="project"))
    fresh.advance_to(0.25)
    fresh.advance_to(0.3)
    sim.advance_to(0.3)
    np.testing.assert_array_equal(sim.output_vector(), fresh.output_vector())


def test_a_joint_without_friction_gets_it_by_a_rebuild() -> None:
    """The bundled crank pin has no friction entry: a non-zero value rebuilds (and still matches a
    model built with it); setting it back to zero and both cg components compose."""
    base = mt.load_mechanism(bundled_slider_crank())
    sim = mt.Simulator(base)
    for name, value in (("crank_pin.viscous_friction", 0.03), ("rod.cg_x", 0.1), ("rod.cg_y", 0.02)):
        sim.set_parameter(name, value)
    built = mt.Simulator(dataclasses.replace(base, joints=tuple(
        dataclasses.replace(j, viscous_friction=0.03) if j.name == "crank_pin" else j for j in base.joints),
        bodies=tuple(dataclasses.replace(b, cg=(0.1, 0.02)) if b.name == "rod" else b for b in base.bodies)))
    assert sim.mechanism == built.mechanism
    np.testing.assert_array_equal(drive(sim, 0.03), drive(built, 0.03))
