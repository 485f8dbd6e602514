"""The standalone FMU takes every parameter its modelDescription declares, and any start time, as
the other flavours do: start values (the initial state assembled again with them), gravity and
joint geometry (plain numbers of the packed model; geometry assembles the initial configuration
again), live parameters; checked in fmpy against the native Simulator built with the same values
(``run_native(parameters=…)``, times from the same start). A value the Simulator refuses is an
Error naming the parameter."""

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
from mbsd_twin.fmi.standalone import build_standalone  # noqa: E402
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism  # noqa: E402

STEP, TORQUE = 1e-3, 2.0
# by class: start values, gravity, geometry (an assembly again), live, all together
CASES = {"start": {"crank.theta_start": 0.7, "crank.omega_start": 3.0},
         "gravity": {"gravity.x": 1.5, "gravity.y": -3.0},
         "geometry": {"guide.p1_y": 0.02, "crank_pin.p1_x": 0.12},
         "live": {"crank.mass": 2.5, "rod.inertia": 0.02},
         "mixed": {"crank.theta_start": -1.1, "wrist_pin.p1_x": 0.32, "gravity.y": -5.0, "piston.mass": 3.0,
                   "solver.rtol": 1e-7}}
BIT_FOR_BIT = {"gravity", "live"}  # the same kernels from the same initial state


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


@pytest.mark.parametrize("case", list(CASES))
def test_every_class_of_parameter_matches_the_simulator_built_with_it(fmus: dict[str, Path], case: str) -> None:
    params = CASES[case]
    outputs = _outputs(fmus["2"])
    result = fmpy.simulate_fmu(str(fmus["2"]), stop_time=0.5, output_interval=STEP,
                               start_values={"motor_torque": TORQUE, **params}, output=outputs)
    mech = load_mechanism(bundled_slider_crank())
    ref = run_native(mech, result["time"], {"motor_torque": lambda t: TORQUE}, outputs, parameters=params)
    default = run_native(mech, result["time"], {"motor_torque": lambda t: TORQUE}, ["crank.theta"])
    assert abs(ref["crank.theta"][-1] - default["crank.theta"][-1]) > 1e-6  # the parameters matter
    worst = _compare(result, ref, outputs, case in BIT_FOR_BIT)
    print(f"{case}: largest difference {worst:.3g} of an output's range")


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
                                                    ("crank_pin.viscous_friction", 0.1, "model's structure")])
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
