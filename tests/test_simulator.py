"""The co-simulation core: ports, communication-step independence, state save/restore (also in a
new process), reset, parameters, port errors, and forward vs inverse dynamics."""

from __future__ import annotations

import ast
import dataclasses
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from reference import slider_crank as scr

import mbsd_twin as mt

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "mechanisms"
FREE = EXAMPLES / "slider_crank.toml"
DRIVEN = EXAMPLES / "slider_crank_driven.toml"

BACKENDS = ["compiled", "numpy"]

# piecewise-constant motor torque [N·m], one value per 0.1 s
TORQUES = (2.0, -1.0, 3.0)


def torque_at(t: float) -> float:
    return TORQUES[min(int(math.floor(t / 0.1 + 1e-9)), len(TORQUES) - 1)]


def csv_header(path: Path) -> list[str]:
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            return line.split(",")
    raise AssertionError(f"no header in {path}")


# ------------------------------------------------------------------------------------ ports
def test_ports_and_parameters_of_the_free_slider_crank(tmp_path: Path) -> None:
    sim = mt.Simulator(mt.load_mechanism(FREE))
    inputs = {p.name: p for p in sim.input_ports}
    assert list(inputs) == ["motor_torque", "piston_force"]
    assert inputs["motor_torque"].unit == "N.m" and inputs["piston_force"].unit == "N"
    assert all(p.causality == "input" and p.start == 0.0 and p.description for p in inputs.values())

    outputs = {p.name: p for p in sim.output_ports}
    inv = mt.inverse_dynamics(mt.load_mechanism(DRIVEN), np.linspace(0.0, 0.1, 11))
    inv.to_csv(tmp_path / "inverse.csv")
    columns = csv_header(tmp_path / "inverse.csv")
    assert columns[0] == "time" and "motor.effort" in columns
    # every inverse-dynamics column is an output of the free model, except time and the effort of
    # the driven model's motor driver (in the free model the motor is the motor_torque input)
    assert set(columns) - set(outputs) == {"time", "motor.effort"}
    energy = ["energy.kinetic", "energy.gravitational", "energy.elastic", "energy.total",
              "energy.dissipated", "energy.input_work", "energy.constraint_work", "energy.balance_error"]
    for name in energy:
        assert outputs[name].unit == "J" and outputs[name].causality == "output"
    assert outputs["constraints.position_residual"].unit == "m"
    assert outputs["crank.theta"].unit == "rad" and outputs["main_bearing.fx"].unit == "N"
    assert outputs["guide.mz"].unit == "N.m"
    assert set(sim.outputs()) == set(outputs)

    params = {p.name: p for p in sim.parameters}
    assert params["crank.mass"].value == 1.0 and params["crank.mass"].unit == "kg"
    assert params["crank.mass"].variability == "fixed"
    assert params["main_bearing.viscous_friction"].value == 0.05
    assert params["main_bearing.viscous_friction"].unit == "N.m.s/rad"
    assert params["solver.rtol"].value == 1e-8 and params["solver.rtol"].variability == "tunable"
    assert all(p.description for p in params.values())


# -------------------------------------------------------------------------- step independence
@pytest.mark.parametrize("backend", BACKENDS)
def test_communication_step_size_does_not_change_the_answer(backend: str) -> None:
    mech = mt.load_mechanism(FREE)
    opts = mt.SolverOptions(backend=backend)
    fine, coarse = mt.Simulator(mech, opts), mt.Simulator(mech, opts)
    n_fine = 100                                  # 1 ms steps per 0.1 s
    fine_theta, coarse_theta = [], []
    for k in range(len(TORQUES)):
        coarse.set_input("motor_torque", TORQUES[k])
        coarse.advance_to(0.1 * (k + 1))
        coarse_theta.append(coarse.get_output("crank.theta"))
        for j in range(n_fine):
            t0 = (k * n_fine + j) * 1e-3
            fine.set_input("motor_torque", torque_at(t0))
            fine.advance_to(t0 + 1e-3)
        assert fine.time == pytest.approx(coarse.time, abs=1e-12)
        fine_theta.append(fine.get_output("crank.theta"))
    assert abs(coarse_theta[-1] - coarse_theta[0]) > 0.5       # the crank moved
    np.testing.assert_allclose(fine_theta, coarse_theta, rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------------ state
STATE_SCRIPT = """
import sys
import mbsd_twin as mt
sim = mt.Simulator(mt.load_mechanism(sys.argv[1]))   # default options: set_state brings the saved ones
with open(sys.argv[2], "rb") as f:
    sim.set_state(f.read())
assert sim.get_input("motor_torque") == 2.0
sim.set_input("motor_torque", -1.0)
sim.advance_to(0.3)
print(repr(sim.outputs()))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_state_round_trip_is_bit_identical_also_in_a_new_process(tmp_path: Path, backend: str) -> None:
    sim = mt.Simulator(mt.load_mechanism(FREE), mt.SolverOptions(backend=backend))
    sim.set_input("motor_torque", 2.0)
    sim.advance_to(0.2)
    blob = sim.get_state()
    assert isinstance(blob, bytes)
    sim.set_input("motor_torque", -1.0)
    sim.advance_to(0.3)
    first = dict(sim.outputs())

    sim.set_state(blob)
    assert sim.time == 0.2 and sim.get_input("motor_torque") == 2.0
    sim.set_input("motor_torque", -1.0)
    sim.advance_to(0.3)
    assert sim.outputs() == first                 # every float bit-identical

    state_file = tmp_path / "state.json"
    state_file.write_bytes(blob)
    proc = subprocess.run([sys.executable, "-c", STATE_SCRIPT, str(FREE), str(state_file)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    other = ast.literal_eval(proc.stdout.strip())
    assert other.keys() == first.keys()
    diff = {k: (first[k], other[k]) for k in first if first[k] != other[k]}
    assert not diff, f"outputs differ after restoring in a new process: {diff}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_copied_simulator_continues_bit_identically_and_independently(backend: str, how: str) -> None:
    """A copy (copy.deepcopy or pickle, e.g. to fork a scenario) continues exactly as the original
    would, and driving one does not move the other."""
    import copy
    import pickle

    sim = mt.Simulator(mt.load_mechanism(FREE), mt.SolverOptions(backend=backend))
    sim.set_input("motor_torque", 2.0)
    sim.advance_to(0.1)
    twin = copy.deepcopy(sim) if how == "deepcopy" else pickle.loads(pickle.dumps(sim))
    fresh = mt.Simulator(mt.load_mechanism(FREE), mt.SolverOptions(backend=backend))
    fresh.set_input("motor_torque", 2.0)
    fresh.advance_to(0.1)
    for s in (twin, fresh):
        s.set_input("motor_torque", -1.0)
        s.advance_to(0.2)
    assert twin.outputs() == fresh.outputs()      # every float bit-identical
    sim.advance_to(0.2)                           # the original still holds 2 N·m
    assert sim.get_output("crank.omega") > fresh.get_output("crank.omega") + 0.5


def test_state_of_another_mechanism_is_refused() -> None:
    blob = mt.Simulator(mt.load_mechanism(FREE)).get_state()
    other = mt.Simulator(mt.load_mechanism(EXAMPLES / "pendulum.toml"))
    with pytest.raises(ValueError, match="different mechanism"):
        other.set_state(blob)
    with pytest.raises(ValueError):
        other.set_state(b"not json")


# ------------------------------------------------------------------- reset and parameters
def slider_crank_builder(crank_mass: float) -> mt.Mechanism:
    """slider_crank.toml rebuilt in Python with another crank mass."""
    b = mt.MechanismBuilder("slider-crank", gravity=(0.0, -9.81))
    b.body("crank", crank_mass, 8.333e-4, cg=(0.05, 0.0), position=(0.0, 0.0))
    b.body("rod", 2.0, 0.015, cg=(0.15, 0.0), position=(0.1, 0.0))
    b.body("piston", 1.5, 1.0e-3, position=(0.4, 0.0))
    b.revolute("main_bearing", "ground", "crank", (0.0, 0.0), (0.0, 0.0), viscous_friction=0.05)
    b.revolute("crank_pin", "crank", "rod", (0.1, 0.0), (0.0, 0.0))
    b.revolute("wrist_pin", "rod", "piston", (0.3, 0.0), (0.0, 0.0))
    b.prismatic("guide", "ground", "piston", (0.0, 0.0), (0.0, 0.0), axis=(1.0, 0.0))
    b.torque("motor", "crank", input="motor_torque")
    b.force("gas_force", "piston", direction=(1.0, 0.0), input="piston_force")
    return b.build()


def run(sim: mt.Simulator, tau: float, t: float) -> float:
    sim.set_input("motor_torque", tau)
    sim.advance_to(t)
    return sim.get_output("crank.theta")


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_returns_exactly_to_the_initial_outputs(backend: str) -> None:
    sim = mt.Simulator(mt.load_mechanism(FREE), mt.SolverOptions(backend=backend))
    initial = dict(sim.outputs())
    run(sim, 2.0, 0.2)
    assert sim.outputs() != initial
    sim.reset()
    assert sim.time == 0.0
    assert sim.outputs() == initial
    assert sim.get_input("motor_torque") == 0.0


def test_fixed_parameter_rebuilds_and_matches_a_model_built_with_that_value() -> None:
    sim = mt.Simulator(mt.load_mechanism(FREE))
    theta_1 = run(sim, 2.0, 0.3)
    sim.set_parameter("crank.mass", 1.2)
    assert sim.time == 0.0                        # fixed parameter: rebuilt and reset
    assert {p.name: p.value for p in sim.parameters}["crank.mass"] == 1.2
    theta_12 = run(sim, 2.0, 0.3)
    assert abs(theta_12 - theta_1) > 1e-3, (theta_1, theta_12)
    built = mt.Simulator(slider_crank_builder(1.2))
    assert run(built, 2.0, 0.3) == pytest.approx(theta_12, abs=1e-12)
    # the builder model with the file's mass reproduces the file
    assert run(mt.Simulator(slider_crank_builder(1.0)), 2.0, 0.3) == pytest.approx(theta_1, abs=1e-12)


def test_rejected_parameter_value_keeps_the_model() -> None:
    sim = mt.Simulator(mt.load_mechanism(FREE))
    with pytest.raises(mt.MechanismError, match="crank.mass"):
        sim.set_parameter("crank.mass", -1.0)
    assert {p.name: p.value for p in sim.parameters}["crank.mass"] == 1.0
    assert run(sim, 2.0, 0.05) > 0.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_tunable_parameter_keeps_the_state(backend: str) -> None:
    """solver.rtol is tunable: the new value must take effect while time and state are kept."""
    sim = mt.Simulator(mt.load_mechanism(FREE), mt.SolverOptions(backend=backend))
    run(sim, 2.0, 0.2)
    before = dict(sim.outputs())
    sim.set_parameter("solver.rtol", 1e-9)
    assert sim.time == 0.2
    assert sim.options.rtol == 1e-9
    assert {p.name: p.value for p in sim.parameters}["solver.rtol"] == 1e-9
    assert sim.outputs() == before
    assert sim.options.backend == backend
    assert run(sim, 2.0, 0.3) > before["crank.theta"]
    sim.set_parameter("solver.max_step", 1e-3)
    assert sim.options.max_step == 1e-3 and sim.options.rtol == 1e-9 and sim.time == 0.3
    with pytest.raises(mt.PortError, match="rtol"):
        sim.set_parameter("solver.rtol", -1.0)


@pytest.mark.parametrize("call", [
    lambda s: s.set_input("motor_torq", 1.0),
    lambda s: s.get_input("motor_torq"),
    lambda s: s.set_parameter("crank.masss", 1.0),
    lambda s: s.get_output("crank.thetaa"),
])
def test_unknown_names_raise_port_error_naming_them(call: Callable[[mt.Simulator], object]) -> None:
    sim = mt.Simulator(mt.load_mechanism(FREE))
    with pytest.raises(mt.PortError) as err:
        call(sim)
    assert err.value.name in ("motor_torq", "crank.masss", "crank.thetaa")
    assert repr(err.value.name) in str(err.value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_input_is_rejected(value: float) -> None:
    sim = mt.Simulator(mt.load_mechanism(FREE))
    with pytest.raises(mt.PortError, match="motor_torque") as err:
        sim.set_input("motor_torque", value)
    assert err.value.name == "motor_torque"
    assert sim.get_input("motor_torque") == 0.0


# ---------------------------------------------------------------- forward vs inverse dynamics
def test_inverse_dynamics_torque_drives_the_free_crank_at_constant_speed() -> None:
    """Inverse dynamics of slider_crank_driven.toml (2π rad/s) gives τ(t); applied as a table
    profile to the free, frictionless slider crank started with the closed-form velocities at
    θ = 0, ω = 2π, the forward simulation must turn the crank at θ = 2π t."""
    w = 2.0 * math.pi
    t_tab = np.linspace(-0.05, 0.55, 1201)        # past both ends of the run: no end effects
    inv = mt.inverse_dynamics(mt.load_mechanism(DRIVEN), t_tab)
    tau = inv["motor.effort"]
    # the table agrees with the Newton–Euler closed form
    p = scr.SliderCrank()
    np.testing.assert_allclose(tau, scr.inverse_dynamics(p, w * t_tab, w).torque, rtol=0,
                               atol=1e-9 * np.abs(tau).max())

    free = mt.load_mechanism(FREE)
    v0 = scr.body_states(p, np.array([0.0]), np.array([w]))
    bodies = tuple(dataclasses.replace(b, velocity=(float(v0[f"{b.name}.vx"][0]), float(v0[f"{b.name}.vy"][0])),
                                       omega=float(v0[f"{b.name}.omega"][0])) for b in free.bodies)
    joints = tuple(dataclasses.replace(j, viscous_friction=0.0) for j in free.joints)
    loads = tuple(dataclasses.replace(ld, input=None, profile=mt.Table(tuple(t_tab), tuple(tau)))
                  if ld.name == "motor" else ld for ld in free.loads)
    mech = dataclasses.replace(free, bodies=bodies, joints=joints, loads=loads)
    res = mt.simulate(mech, 0.5, 0.01, options=mt.SolverOptions(rtol=1e-10, atol=1e-12))
    assert res.status == 0, res.message
    assert mt.Simulator(mech).input_ports[0].name == "piston_force"
    np.testing.assert_allclose(res["crank.theta"], w * res.time, rtol=0, atol=1e-5)
    np.testing.assert_allclose(res["crank.omega"], w, rtol=0, atol=1e-4)
    # the whole state follows the closed-form kinematics
    ref = scr.body_states(p, w * res.time, w)
    for name in ("piston.x", "piston.vx", "rod.theta", "rod.omega"):
        np.testing.assert_allclose(res[name], ref[name], rtol=0, atol=1e-5, err_msg=name)
