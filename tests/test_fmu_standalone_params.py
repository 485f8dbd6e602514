"""The standalone FMU takes every parameter its modelDescription declares, and any start time, as
the other flavours do: start values (the initial state assembled again with them), gravity and
joint geometry (plain numbers of the packed model; geometry assembles the initial configuration
again and takes the springs' unset free lengths from it), live parameters, the friction of a joint
built without friction (the FMU's second layout), joint points the compiled model does not read;
checked in fmpy against the native Simulator built with the same values (``run_native(parameters=…)``,
times from the same start), FMI 2.0 and 3.0. A value the Simulator refuses is an Error naming the
parameter, and so is a parameter that needs another compiled structure (none among the shipped
mechanisms: forced here by building without the second layout)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

fmpy = pytest.importorskip("fmpy")
pytest.importorskip("pythonfmu")
if not shutil.which("gcc"):
    pytest.skip("gcc is needed to build the standalone FMU", allow_module_level=True)

from fmpy.fmi2 import FMU2Slave  # noqa: E402
from fmu_harness import REPO, shared_fmu, unpack  # noqa: E402

from mbsd_twin.errors import MbsdError  # noqa: E402
from mbsd_twin.fmi.native import run_native  # noqa: E402
from mbsd_twin.fmi.standalone import build_standalone, parameters  # noqa: E402
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism  # noqa: E402
from mbsd_twin.simulation.simulator import Simulator  # noqa: E402

STEP, TORQUE = 1e-3, 2.0
# by class: start values, gravity, geometry (an assembly again), live, all together
CASES = {"start": {"crank.theta_start": 0.7, "crank.omega_start": 3.0},
         "gravity": {"gravity.x": 1.5, "gravity.y": -3.0},
         "geometry": {"guide.p1_y": 0.02, "crank_pin.p1_x": 0.12},
         "live": {"crank.mass": 2.5, "rod.inertia": 0.02},
         "mixed": {"crank.theta_start": -1.1, "wrist_pin.p1_x": 0.32, "gravity.y": -5.0, "piston.mass": 3.0,
                   "solver.rtol": 1e-7},
         # joints built without friction (revolute crank_pin, prismatic guide): the second layout
         "friction": {"crank_pin.viscous_friction": 0.05, "guide.viscous_friction": 1.5},
         "friction+geometry": {"wrist_pin.viscous_friction": 0.02, "crank_pin.p1_x": 0.11, "crank.mass": 1.5}}
# the same kernels from the same initial state (the second layout's other friction entries add exact zeros)
BIT_FOR_BIT = {"gravity", "live", "friction"}


@pytest.fixture(scope="module")
def fmus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("standalone_params")
    return {v: shared_fmu(tmp_path_factory, f"standalone{v}", tmp / f"fmi{v}" / "SliderCrank.fmu") for v in ("2", "3")}


def _outputs(fmu: Path) -> list[str]:
    md = fmpy.read_model_description(str(fmu))
    return [v.name for v in md.modelVariables if v.causality == "output"]


def _compare(result: np.ndarray, ref: dict[str, np.ndarray], outputs: list[str], exact: bool) -> float:
    """The largest difference relative to an output's range, every one within 1e-9 (0 if
    ``exact``). Outputs whose range is below 1e-6 (the constraint residual, the constraint work and
    energy balance: integration noise around zero) within 1e-9 absolute."""
    worst = 0.0
    np.testing.assert_array_equal(result["time"], ref["time"])
    for name in outputs:
        diff = float(np.max(np.abs(result[name] - ref[name])))
        span = float(np.ptp(ref[name]))
        rel = diff / span if span >= 1e-6 else diff
        worst = max(worst, rel)
        assert (diff == 0.0) if exact else rel <= 1e-9, (name, diff, rel)
    return worst


def _matches(fmu: Path, mech_path: Path, params: dict[str, float], inputs: dict[str, float], exact: bool,
             matter: str = "crank.theta", stop: float = 0.5) -> float:
    """fmpy on ``fmu`` with ``params`` against ``run_native`` with them; the parameters move
    ``matter`` by more than 1e-6 (or, with ``matter`` empty, change nothing at all)."""
    outputs = _outputs(fmu)
    result = fmpy.simulate_fmu(str(fmu), stop_time=stop, output_interval=STEP, start_values={**inputs, **params},
                               output=outputs)
    mech = load_mechanism(mech_path)
    held = {n: (lambda t, x=x: x) for n, x in inputs.items()}
    ref = run_native(mech, result["time"], held, outputs, parameters=params)
    default = run_native(mech, result["time"], held, outputs)
    if matter:
        assert abs(ref[matter][-1] - default[matter][-1]) > 1e-6  # the parameters matter
    else:
        assert all(np.array_equal(ref[n], default[n]) for n in outputs)  # … or are not read
    return _compare(result, ref, outputs, exact)


@pytest.mark.parametrize("version", ["2", "3"])
@pytest.mark.parametrize("case", list(CASES))
def test_every_class_of_parameter_matches_the_simulator_built_with_it(fmus: dict[str, Path], case: str,
                                                                      version: str) -> None:
    worst = _matches(fmus[version], bundled_slider_crank(), CASES[case], {"motor_torque": TORQUE},
                     case in BIT_FOR_BIT)
    print(f"{case}: largest difference {worst:.3g} of an output's range")


# (mechanism, parameters, an output they move or "" for none, bit for bit): a spring whose free
# length is the assembled pose's (quick_return: moved joints assemble another pose) and a pivot built
# without friction; joint points the compiled model does not read (a cam's contact); both pivots of
# a double pendulum built without friction
OTHERS = [("quick_return", {"main_bearing.p1_x": 0.01, "lever_pivot.p1_y": -0.16, "crank_pin.viscous_friction": 0.01},
           "lever.theta", False),
          ("cam_follower", {"contact.p1_x": 0.01, "contact.p1_y": -0.02}, "", True),
          ("double_pendulum", {"shoulder.viscous_friction": 0.05, "elbow.viscous_friction": 0.02}, "lower.theta", True)]


@pytest.fixture(scope="module")
def other_fmus(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    tmp = tmp_path_factory.mktemp("standalone_others")
    return {(name, v): build_standalone(REPO / "examples" / "mechanisms" / f"{name}.toml", tmp / v / f"{name}.fmu",
                                        fmi_version=v) for name in {c[0] for c in OTHERS} for v in ("2", "3")}


@pytest.mark.parametrize("version", ["2", "3"])
@pytest.mark.parametrize("case", range(len(OTHERS)))
def test_other_mechanisms_take_the_parameters_the_simulator_takes(other_fmus: dict[tuple[str, str], Path],
                                                                  case: int, version: str) -> None:
    name, params, matter, exact = OTHERS[case]
    fmu = other_fmus[(name, version)]
    inputs = {v.name: 1.0 for v in fmpy.read_model_description(str(fmu)).modelVariables if v.causality == "input"}
    worst = _matches(fmu, REPO / "examples" / "mechanisms" / f"{name}.toml", params, inputs, exact, matter)
    print(f"{name} {sorted(params)}: largest difference {worst:.3g} of an output's range")


@pytest.mark.parametrize("version", ["2", "3"])
def test_a_start_time_other_than_zero_matches_the_simulator_started_there(fmus: dict[str, Path], version: str) -> None:
    params = {"crank.theta_start": 0.4} if version == "3" else {}
    outputs = _outputs(fmus[version])
    result = fmpy.simulate_fmu(str(fmus[version]), start_time=0.5, stop_time=1.0, output_interval=STEP,
                               start_values={"motor_torque": TORQUE, **params}, output=outputs)
    assert result["time"][0] == 0.5
    ref = run_native(load_mechanism(bundled_slider_crank()), result["time"], {"motor_torque": lambda t: TORQUE},
                     outputs, parameters=params)
    _compare(result, ref, outputs, not params)


def test_a_driven_mechanism_is_assembled_again_at_its_start_time(tmp_path: Path) -> None:
    """Drivers make the constraints depend on time: at another start time the configuration is
    assembled again (not bit for bit: the Simulator assembles with numpy). Energies within 1e-9 of
    the largest energy term's range, the rest of their own (below 1e-6: 1e-9 absolute)."""
    mech = REPO / "examples" / "mechanisms" / "four_bar_driven.toml"
    fmu = build_standalone(mech, tmp_path / "FourBarDriven.fmu")
    outputs = _outputs(fmu)
    result = fmpy.simulate_fmu(str(fmu), start_time=0.5, stop_time=1.0, output_interval=STEP, output=outputs)
    ref = run_native(load_mechanism(mech), result["time"], {}, outputs)
    energy = max(float(np.ptp(ref[n])) for n in outputs if n.startswith("energy."))
    for name in outputs:
        span = float(np.ptp(ref[name]))
        span = energy if name.startswith("energy.") else span if span >= 1e-6 else 1.0
        assert float(np.max(np.abs(result[name] - ref[name]))) <= 1e-9 * span, name


def _slave(fmu: Path, tmp_path: Path) -> tuple[FMU2Slave, dict[str, int]]:
    md = fmpy.read_model_description(str(fmu))
    s = FMU2Slave(guid=md.guid, unzipDirectory=str(unpack(fmu, tmp_path / "u")),
                  modelIdentifier=md.coSimulation.modelIdentifier, instanceName="p")
    s.instantiate(loggingOn=True)  # fmpy prints the FMU's log messages
    s.setupExperiment(startTime=0.0)
    s.enterInitializationMode()
    return s, {v.name: v.valueReference for v in md.modelVariables}


@pytest.mark.parametrize(("name", "value", "why"), [("crank.theta_start", math.inf, "must be a finite number"),
                                                    ("gravity.y", math.nan, "must be a finite number"),
                                                    ("crank_pin.viscous_friction", -0.1, "must be a finite number >=")])
def test_a_refused_value_is_an_error_naming_the_parameter_at_set_time(fmus: dict[str, Path], tmp_path: Path, name: str,
                                                                      value: float, why: str,
                                                                      capfd: pytest.CaptureFixture[str]) -> None:
    s, vr = _slave(fmus["2"], tmp_path)
    with pytest.raises(fmpy.fmi1.FMICallException) as refused:
        s.setReal([vr[name]], [value])
    assert refused.value.status == 3
    printed = capfd.readouterr().out
    assert name in printed and why in printed, printed
    s.exitInitializationMode()
    s.freeInstance()


def test_a_state_of_the_second_layout_comes_back_bit_for_bit_after_a_reset(fmus: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    """A state taken while the second layout runs (a friction the model as built lacks), serialised,
    restored after fmi2Reset (which goes back to the model as built and its defaults): the steps
    after it repeat bit for bit, and they differ from the defaults' (the layout came back)."""
    s, vr = _slave(fmus["2"], tmp_path)
    friction, torque, theta = vr["guide.viscous_friction"], vr["motor_torque"], vr["crank.theta"]
    s.setReal([friction, torque], [3.0, TORQUE])
    s.exitInitializationMode()

    def steps(t: float) -> list[float]:
        out = []
        for k in range(20):
            s.setReal([torque], [TORQUE])
            s.doStep(t + k * STEP, STEP)
            out.append(s.getReal([theta])[0])
        return out

    steps(0.0)
    blob = s.serializeFMUstate(s.getFMUstate())
    after = steps(20 * STEP)
    s.reset()
    s.setupExperiment(startTime=0.0)
    s.enterInitializationMode()
    s.setReal([torque], [TORQUE])
    s.exitInitializationMode()
    default = steps(0.0) + steps(20 * STEP)
    s.setFMUstate(s.deSerializeFMUstate(blob))
    assert s.getReal([friction]) == [3.0]
    assert steps(20 * STEP) == after
    assert after != default[20:]
    s.terminate()
    s.freeInstance()


def test_a_parameter_that_needs_another_structure_is_refused_naming_it(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capfd: pytest.CaptureFixture[str]) -> None:
    """Without the second layout (as for a joint whose friction entry would change the outputs) a
    friction the model as built has no entry for keeps its built value: a new one is an Error at
    set time naming the parameter and why; the built value itself is accepted."""
    monkeypatch.setattr(parameters, "friction_layout", lambda sim: None)
    monkeypatch.setattr("mbsd_twin.fmi.standalone.model_data.friction_layout", lambda sim: None)
    fmu = build_standalone(None, tmp_path / "fixed" / "SliderCrank.fmu")
    s, vr = _slave(fmu, tmp_path)
    s.setReal([vr["crank_pin.viscous_friction"]], [0.0])
    with pytest.raises(fmpy.fmi1.FMICallException) as refused:
        s.setReal([vr["crank_pin.viscous_friction"]], [0.1])
    assert refused.value.status == 3
    printed = capfd.readouterr().out
    assert "crank_pin.viscous_friction" in printed and "changes the model's structure" in printed, printed
    s.exitInitializationMode()
    s.freeInstance()


@pytest.mark.parametrize(("name", "value", "why"), [("guide.p1_y", 5.0, "cannot be assembled")])
def test_values_the_simulator_cannot_assemble_are_an_error_naming_them(fmus: dict[str, Path], tmp_path: Path,
                                                                       name: str, value: float, why: str,
                                                                       capfd: pytest.CaptureFixture[str]) -> None:
    mech = load_mechanism(bundled_slider_crank())
    s, vr = _slave(fmus["2"], tmp_path)
    with pytest.raises(MbsdError):
        run_native(mech, [0.0, 0.01], {}, ["crank.theta"], parameters={name: value})
    s.setReal([vr[name]], [value])
    with pytest.raises(fmpy.fmi1.FMICallException) as refused:
        s.exitInitializationMode()
    assert refused.value.status == 3
    printed = capfd.readouterr().out
    assert name in printed and why in printed, printed
    s.freeInstance()


def _probed(sim: Simulator) -> list[str]:
    """The parameters the standalone build probes for plain entries (a friction of a joint built
    without one is the second layout's: PAR_LAYOUT, not probed)."""
    from mbsd_twin.simulation.live_parameters import live_slot

    return [n for n in sim._table if n not in parameters.TUNABLE and n not in sim._starts.index
            and live_slot(sim.system, n) is None and not n.endswith(".viscous_friction")]


@pytest.mark.parametrize("path", sorted(str(p) for p in (REPO / "examples" / "mechanisms").glob("*.toml")))
def test_probing_in_groups_gives_the_one_by_one_answers(path: str) -> None:
    """Plain entries found by groups of parameters in one rebuild (fmi/standalone/probe.py) are the
    answers of probing each parameter alone, on every shipped mechanism."""
    from mbsd_twin.fmi.standalone.probe import plain_entries_of

    try:
        sim = Simulator(load_mechanism(path))
    except MbsdError as exc:  # a mechanism the Simulator cannot build alone (a callable's module)
        pytest.skip(f"{path}: {exc}")
    names = _probed(sim) + [n for n in sim._table if n.endswith(".viscous_friction")]
    one = {n: parameters.plain_entries(sim, n) for n in names}
    assert plain_entries_of(sim, names, parameters.plain_entries, parameters._PROBE,
                            parameters._reference_entries(sim)) == one


def test_probing_a_chain_in_groups() -> None:
    """A 15-link chain: the 62 probed parameters' answers by groups equal the one-by-one answers
    (each a joint point's two plain entries), found in a handful of rebuilds."""
    import large_mechanisms

    from mbsd_twin.fmi.standalone import probe

    sim = Simulator(large_mechanisms.chain(15))
    names = _probed(sim)
    one = {n: parameters.plain_entries(sim, n) for n in names}
    builds = []
    real = probe.Simulator

    def counted(*args: object, **kw: object) -> Simulator:
        builds.append(1)
        return real(*args, **kw)  # type: ignore[arg-type]
    probe.Simulator = counted  # type: ignore[assignment,misc]
    try:
        grouped = probe.plain_entries_of(sim, names, parameters.plain_entries, parameters._PROBE,
                                         parameters._reference_entries(sim))
    finally:
        probe.Simulator = real  # type: ignore[misc]
    assert grouped == one and len(names) == 62
    assert all(v is not None and len(v[0]) >= 1 for v in one.values())
    assert len(builds) <= 3, len(builds)
