"""The Model Exchange logic (``fmi/model_exchange.py``, the start of issue #34's ME FMU) driven by
value references as an ME importer drives an FMU: scipy's DOP853 integrates the states it hands
out, with the event iteration after each step, against the native Simulator."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import DOP853
from test_ode_form import COMPILED, NUMPY, REF, load, rocker_first

import mbsd_twin as mt
from mbsd_twin.fmi.model_exchange import ModelExchange, model_description, model_description3


def run(me: ModelExchange, t_end: float, rtol: float = 1e-10, atol: float = 1e-12) -> int:
    """An importer's loop: set time and states, get derivatives; after each step
    completedIntegratorStep → event mode → update discrete states → restart. Returns the events."""
    def f(t: float, x: np.ndarray) -> np.ndarray:
        me.set_time(t)
        me.set_continuous_states(x)
        return me.get_derivatives()

    events = 0
    solver = DOP853(f, me.t, me.get_continuous_states(), t_end, rtol=rtol, atol=atol)
    while solver.status == "running":
        assert solver.step() is None
        me.set_time(solver.t)
        me.set_continuous_states(solver.y)
        if me.completed_integrator_step() and me.update_discrete_states():
            events += 1
            solver = DOP853(f, me.t, me.get_continuous_states(), t_end, rtol=rtol, atol=atol)
    return events


def test_variables_states_and_derivatives() -> None:
    me = ModelExchange(mt.Simulator(load("slider_crank.toml"), NUMPY))
    names = [v.name for v in me.variables]
    assert names[-10:] == [*(f"ode.x[{k}]" for k in range(5)), *(f"der(ode.x[{k}])" for k in range(5))]
    assert "motor_torque" in names and "crank.theta" in names and "crank.mass" in names
    with pytest.raises(RuntimeError, match="exit_initialization_mode"):
        me.get_derivatives()


def test_slider_crank_with_a_parameter_and_inputs_matches_the_native_simulator() -> None:
    mech = load("slider_crank.toml")
    ref = mt.Simulator(mech, REF)
    me = ModelExchange(mt.Simulator(mech, COMPILED))
    for name, value in (("crank.mass", 1.3), ("crank.omega_start", 5.0)):
        ref.set_parameter(name, value)
        me.set_real([me.vr(name)], [value])
    me.exit_initialization_mode()
    me.set_real([me.vr("motor_torque"), me.vr("piston_force")], [1.5, 10.0])
    ref.set_input("motor_torque", 1.5)
    ref.set_input("piston_force", 10.0)
    assert run(me, 2.0) == 0
    ref.advance_to(2.0)
    theta, energy = me.get_real([me.vr("crank.theta"), me.vr("energy.input_work")])
    assert abs(theta - ref.get_output("crank.theta")) < 1e-7
    assert abs(energy - ref.get_output("energy.input_work")) < 1e-6 * abs(ref.get_output("energy.input_work"))
    with pytest.raises(ValueError, match="crank.mass"):
        me.set_real([me.vr("crank.mass")], [2.0])


def test_crank_rocker_event_repartitions_the_states() -> None:
    mech = rocker_first()
    ref = mt.Simulator(mech, REF)
    me = ModelExchange(mt.Simulator(mech, NUMPY))
    ref.set_parameter("rocker.omega_start", 3.0)
    me.set_real([me.vr("rocker.omega_start")], [3.0])
    me.exit_initialization_mode()
    x0 = me.get_real([me.vr("ode.x[0]")])[0]
    assert x0 == pytest.approx(me.get_real([me.vr("rocker.theta")])[0], abs=0.0)
    assert run(me, 2.0) == 1
    ref.advance_to(2.0)
    theta = me.get_real([me.vr("crank.theta")])[0]
    assert abs(theta - ref.get_output("crank.theta")) < 1e-7
    assert me.get_real([me.vr("ode.x[0]")])[0] == theta  # the state is the crank's angle now


def test_directional_derivative_by_value_references() -> None:
    """Seeds over states and inputs, unknowns derivatives and outputs: against central differences
    of get_derivatives / get_real over set_continuous_states and set_real."""
    me = ModelExchange(mt.Simulator(load("slider_crank.toml"), NUMPY))
    me.exit_initialization_mode()
    me.set_time(0.4)
    x = np.array([1.1, -12.0, 0.3, 0.2, 0.0])
    me.set_continuous_states(x)
    knowns = [me.vr("ode.x[0]"), me.vr("ode.x[1]"), me.vr("motor_torque")]
    unknowns = [me.vr("der(ode.x[1])"), me.vr("main_bearing.fx"), me.vr("piston.x")]
    seed = [0.7, -0.2, 1.5]
    got = me.get_directional_derivative(unknowns, knowns, seed)

    def at(eps: float) -> np.ndarray:
        me.set_continuous_states(x + eps * np.array([0.7, -0.2, 0, 0, 0]))
        me.set_real([me.vr("motor_torque")], [eps * 1.5])
        return np.array(me.get_real(unknowns))

    h = 1e-6
    fd = (at(h) - at(-h)) / (2 * h)
    assert np.allclose(got, fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())
    assert not math.isclose(got[0], 0.0)


def test_model_description_is_valid_fmi_2_model_exchange(tmp_path: Path) -> None:
    """fmpy reads and validates it (schema, variable names, model structure); each derivative
    names its state; the value references are the table's positions."""
    from fmpy.model_description import read_model_description
    from fmpy.validation import validate_model_description

    me = ModelExchange(mt.Simulator(load("slider_crank.toml"), NUMPY))
    path = tmp_path / "modelDescription.xml"
    path.write_bytes(model_description(me, "slider_crank", "{0a3e5c1e-2b4f-4c39-9d3e-0c1a2b3c4d5e}"))
    md = read_model_description(str(path), validate=True, validate_variable_names=True,
                                validate_model_structure=True)
    assert validate_model_description(md, validate_variable_names=True, validate_model_structure=True) == []
    assert md.modelExchange is not None and md.modelExchange.providesDirectionalDerivative
    assert [(d.variable.name, d.variable.derivative.name) for d in md.derivatives] == \
        [(f"der(ode.x[{k}])", f"ode.x[{k}]") for k in range(5)]
    assert all(v.valueReference == me.vr(v.name) for v in md.modelVariables)
    units = {v.name: v.unit for v in md.modelVariables}
    assert units["crank.theta"] == "rad" and units["motor_torque"] == "N.m"


def test_fmu_state_rolls_back_across_a_repartition() -> None:
    """A state saved before the crank-rocker's re-partition (0.249 s), restored after it: the
    partition, states and warm start come back and the run repeats bit for bit."""
    sim = mt.Simulator(rocker_first(), NUMPY)
    me = ModelExchange(sim)
    me.set_real([me.vr("rocker.omega_start")], [3.0])
    me.exit_initialization_mode()
    run(me, 0.2)
    saved = me.get_state()
    assert run(me, 0.4) == 1
    first = (me.t, me.get_continuous_states(), me.get_real([me.vr("crank.theta")]))
    me.set_state(saved)
    assert me.t == 0.2 and me.ode.state_names[0] == "rocker.theta" and not me.ode.changes
    assert run(me, 0.4) == 1
    assert me.t == first[0] and np.array_equal(me.get_continuous_states(), first[1])
    assert me.get_real([me.vr("crank.theta")]) == first[2]
    with pytest.raises(ValueError, match="state"):
        me.set_state(b'{"format": "other"}')


def test_model_description_is_valid_fmi_3_model_exchange(tmp_path: Path) -> None:
    """FMI 3.0: ``time`` at value reference 0, the table after it; fmpy validates it clean."""
    from fmpy.model_description import read_model_description
    from fmpy.validation import validate_model_description

    me = ModelExchange(mt.Simulator(load("slider_crank.toml"), NUMPY), fmi_version="3.0")
    assert me.vr("time") == 0 and me.vr("motor_torque") == 1
    path = tmp_path / "modelDescription.xml"
    xml = model_description3(me, "slider_crank", "{0a3e5c1e-2b4f-4c39-9d3e-0c1a2b3c4d5e}")
    path.write_bytes(xml)
    md = read_model_description(str(path), validate=True, validate_variable_names=True,
                                validate_model_structure=True)
    assert validate_model_description(md, validate_variable_names=True, validate_model_structure=True) == []
    assert b'providesDirectionalDerivatives="true"' in xml  # FMI 3.0's name (fmpy reads FMI 2.0's)
    assert [(d.variable.name, d.variable.derivative.name) for d in md.derivatives] == \
        [(f"der(ode.x[{k}])", f"ode.x[{k}]") for k in range(5)]
    assert all(v.valueReference == me.vr(v.name) for v in md.modelVariables)
    me.exit_initialization_mode()
    me.set_time(0.25)
    assert me.get_real([0]) == [0.25]
    with pytest.raises(ValueError, match="fmi_version='2.0'"):
        model_description(me, "slider_crank", "{0a3e5c1e-2b4f-4c39-9d3e-0c1a2b3c4d5e}")
