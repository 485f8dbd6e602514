"""The shipped co-simulation example (examples/cosim): a PI speed controller and a set-point
profile written in C, and the host-independent slider-crank FMU, connected both ways in an SSP
file and run in libcosim and in the plain C master.

Checked against an independent derivation: the same PI law and profile written here in Python,
with the native ``mbsd_twin.Simulator`` stepped through the same communication points in the same
master order (Jacobi: every model steps with the inputs of the step's start, then outputs are
transferred). The settings differ from the FMUs' start values, so the parameter values of the
.ssd must reach the FMUs in both masters. The controller FMU alone (fmpy): its PI law, the torque
limit, the anti-windup and a rejected parameter. The profile FMU alone (fmpy): the same samples on
libcosim's time grid and on a grid accumulated with t += h.
"""

from __future__ import annotations

import math
import shutil
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("libcosimpy")
pytest.importorskip("fmpy")
if not shutil.which("gcc"):
    pytest.skip("gcc is needed to build the example's FMUs and C host", allow_module_level=True)

import mbsd_twin as mt  # noqa: E402

COSIM = Path(__file__).resolve().parents[1] / "examples" / "cosim"
sys.path.insert(0, str(COSIM))
from cosim_build import PI_CONTROLLER, SLIDER_CRANK, SPEED_PROFILE, Settings, build_c_fmu  # noqa: E402
from fmu_harness import wrapper_python  # noqa: E402
from speed_control import SETPOINT, SPEED, TORQUE, main, read_csv  # noqa: E402

SETTINGS = Settings(controller={"kp": 3.0, "ki": 30.0, "torque_max": 15.0},
                    profile={"ramp_start": 0.1, "ramp_end": 0.6, "ramp_speed": 15.0, "step_time": 1.5,
                             "step_speed": 25.0},
                    stop=2.5, step=1e-3)
STEP_NS = 1_000_000


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, float]]]:
    out = tmp_path_factory.mktemp("cosim")
    with pytest.MonkeyPatch.context() as mp:  # the workers import this checkout's mbsd_twin
        mp.setenv("MBSD_TWIN_FMU_PYTHON", str(wrapper_python(out)))
        yield out, main(out, SETTINGS)


def _profile(t: float) -> float:
    p = SETTINGS.profile
    if t >= p["step_time"]:
        return p["step_speed"]
    fraction = min(max((t - p["ramp_start"]) / (p["ramp_end"] - p["ramp_start"]), 0.0), 1.0)
    return p["ramp_speed"] * fraction


def _pi(setpoint: float, speed: float, integral: float, h: float, ki: float) -> tuple[float, float]:
    """(torque, integral) after one step with the error held; clamping anti-windup."""
    c = SETTINGS.controller
    error = setpoint - speed
    trial = integral + error * h
    torque = c["kp"] * error + ki * trial
    if abs(torque) > c["torque_max"]:
        torque = math.copysign(c["torque_max"], torque)
        if error * torque > 0:
            trial = integral
    return torque, trial


def reference(ki: float) -> dict[str, np.ndarray]:
    """The closed loop with the native Simulator, Jacobi order, libcosim's time grid."""
    sim = mt.Simulator(mt.load_mechanism(SLIDER_CRANK))
    setpoint, speed, torque, integral = _profile(0.0), sim.get_output("crank.omega"), 0.0, 0.0
    rows = []
    for k in range(round(SETTINGS.stop / SETTINGS.step)):
        t, t_next = k * STEP_NS / 1e9, (k + 1) * STEP_NS / 1e9
        sim.set_input("motor_torque", torque)  # the mechanism steps with the torque of the step's start
        sim.advance_to(t + (t_next - t))
        new_torque, integral = _pi(setpoint, speed, integral, t_next - t, ki)  # so does the controller
        setpoint, speed, torque = _profile(t_next), sim.get_output("crank.omega"), new_torque
        rows.append((t_next, setpoint, speed, torque))
    data = np.array(rows)
    return {"time": data[:, 0], SETPOINT: data[:, 1], SPEED: data[:, 2], TORQUE: data[:, 3]}


def _mean_error_over_revolutions(run: dict[str, np.ndarray], t_end: float, revolutions: int) -> float:
    """Mean speed error over the last whole crank revolutions before ``t_end``."""
    keep = run["time"] < t_end
    angle = np.cumsum(run[SPEED][keep]) * SETTINGS.step
    start = int(np.searchsorted(angle, angle[-1] - revolutions * 2 * math.pi))
    return float(np.mean((run[SETPOINT] - run[SPEED])[keep][start:]))


def test_both_masters_give_the_same_result_bit_for_bit(example: tuple[Path, dict[str, float]]) -> None:
    out, numbers = example
    libcosim, c_host = read_csv(out / "libcosim.csv"), read_csv(out / "c_host.csv")
    assert list(libcosim) == ["time", SETPOINT, SPEED, TORQUE]  # the .ssd's connections, named by output
    assert len(libcosim["time"]) == 2500 and libcosim["time"][-1] == 2.5
    for name in libcosim:
        np.testing.assert_array_equal(c_host[name], libcosim[name], err_msg=name)
    assert numbers["max_difference_libcosim_vs_c_host"] == 0.0
    assert (out / "speed_control.png").stat().st_size > 10_000


def test_closed_loop_equals_the_independent_derivation(example: tuple[Path, dict[str, float]]) -> None:
    out, _ = example
    ref = reference(SETTINGS.controller["ki"])
    run = read_csv(out / "libcosim.csv")
    np.testing.assert_array_equal(run["time"], ref["time"])
    np.testing.assert_allclose(run[SETPOINT], ref[SETPOINT], rtol=0, atol=1e-12)
    for name in (SPEED, TORQUE):
        np.testing.assert_allclose(run[name], ref[name], rtol=0, atol=1e-9, err_msg=name)
    assert np.max(np.abs(run[TORQUE])) == SETTINGS.controller["torque_max"]  # the limit is reached


def _profile_run(fmu: Path, grid: list[float]) -> list[float]:
    """The profile FMU's speed after each step of ``grid`` (fmpy), with the example's settings."""
    from fmpy import extract, read_model_description
    from fmpy.fmi2 import FMU2Slave

    md = read_model_description(str(fmu))
    vr = {v.name: v.valueReference for v in md.modelVariables}
    s = FMU2Slave(guid=md.guid, unzipDirectory=extract(str(fmu)), modelIdentifier=md.coSimulation.modelIdentifier,
                  instanceName="profile")
    s.instantiate()
    s.setupExperiment(startTime=grid[0])
    s.enterInitializationMode()
    s.setReal([vr[name] for name in SETTINGS.profile], list(SETTINGS.profile.values()))
    s.exitInitializationMode()
    speeds = []
    for t, t_next in zip(grid[:-1], grid[1:], strict=True):
        s.doStep(t, t_next - t)
        speeds.append(s.getReal([vr["speed"]])[0])
    s.terminate()
    s.freeInstance()
    return speeds


def test_profile_fmu_gives_the_same_samples_on_an_accumulated_time_grid(tmp_path: Path) -> None:
    fmu = build_c_fmu(SPEED_PROFILE, tmp_path, SETTINGS)
    n = round(SETTINGS.stop / SETTINGS.step)
    libcosim = [k * STEP_NS / 1e9 for k in range(n + 1)]  # libcosim counts nanoseconds
    accumulated = [0.0]
    for _ in range(n):
        accumulated.append(accumulated[-1] + SETTINGS.step)  # a master that adds the step up
    k = round(SETTINGS.profile["step_time"] / SETTINGS.step)
    assert accumulated[k] < SETTINGS.profile["step_time"] == libcosim[k]  # 1.4999999999999456: short of the step
    on_libcosim, on_accumulated = _profile_run(fmu, libcosim), _profile_run(fmu, accumulated)
    assert on_accumulated == on_libcosim  # bit for bit
    assert on_accumulated[k - 1] == SETTINGS.profile["step_speed"]  # the step comes at the same point
    np.testing.assert_allclose(on_libcosim, [_profile(t) for t in libcosim[1:]], rtol=0, atol=1e-12)


def test_integral_action_removes_the_steady_state_error(example: tuple[Path, dict[str, float]]) -> None:
    out, _ = example
    run, p_only = read_csv(out / "libcosim.csv"), reference(ki=0.0)
    for t_end, setpoint in ((SETTINGS.profile["step_time"], 15.0), (SETTINGS.stop, 25.0)):
        offset = _mean_error_over_revolutions(p_only, t_end, 2)
        error = _mean_error_over_revolutions(run, t_end, 2)
        assert offset > 0.01 * setpoint        # proportional control alone lags (friction 0.05 N·m·s/rad)
        assert abs(error) < 0.1 * offset        # the integral removes the mean error


def test_the_ssd_and_the_c_fmus_pass_fmpy_validation(example: tuple[Path, dict[str, float]]) -> None:
    from fmpy.ssp.ssd import read_ssd
    from fmpy.validation import validate_fmu

    out, _ = example
    ssd = read_ssd(str(out / "SpeedControl.ssp"), validate=True)  # against the SSP 1.0 schema (XSD) in fmpy
    assert [e.name for e in ssd.system.elements] == ["profile", "controller", "mechanism"]
    assert len(ssd.system.connections) == 3
    with zipfile.ZipFile(out / "SpeedControl.ssp") as zf:
        names = sorted(zf.namelist())
        zf.extractall(out / "validate")
    assert names == ["SystemStructure.ssd", "resources/PIController.fmu", "resources/SliderCrank.fmu",
                     "resources/SpeedProfile.fmu"]
    for fmu in ("PIController", "SpeedProfile"):
        assert validate_fmu(str(out / "validate" / "resources" / f"{fmu}.fmu")) == []


def _controller(tmp: Path, kp: float, ki: float, torque_max: float) -> tuple[Any, dict[str, int]]:
    from fmpy import extract, read_model_description
    from fmpy.fmi2 import FMU2Slave

    fmu = str(build_c_fmu(PI_CONTROLLER, tmp, SETTINGS))
    md = read_model_description(fmu)
    vr = {v.name: v.valueReference for v in md.modelVariables}
    slave = FMU2Slave(guid=md.guid, unzipDirectory=extract(fmu), modelIdentifier="PIController", instanceName="pi")
    slave.instantiate()
    slave.setupExperiment(startTime=0.0)
    slave.setReal([vr["kp"], vr["ki"], vr["torque_max"]], [kp, ki, torque_max])
    slave.enterInitializationMode()
    return slave, vr


def _steps(slave: Any, vr: dict[str, int], t: float, n: int, setpoint: float, speed: float) -> list[float]:
    out = []
    for k in range(n):
        slave.setReal([vr["speed_setpoint"], vr["speed"]], [setpoint, speed])
        slave.doStep(t + k * 0.01, 0.01)
        out.append(slave.getReal([vr["torque"]])[0])
    return out


def test_controller_fmu_pi_law_limit_and_anti_windup(tmp_path: Path) -> None:
    slave, vr = _controller(tmp_path, kp=1.0, ki=10.0, torque_max=2.0)
    slave.exitInitializationMode()
    assert slave.getReal([vr["torque"]]) == [0.0]                   # until the first step
    small = _steps(slave, vr, 0.0, 3, 0.1, 0.0)                      # e = 0.1: kp·e + ki·Σe·h
    np.testing.assert_allclose(small, [0.1 + 10 * 0.1 * 0.01 * n for n in (1, 2, 3)], rtol=1e-12)
    saturated = _steps(slave, vr, 0.03, 100, 10.0, 0.0)             # e = 10 for 1 s: limited to 2 N·m
    assert saturated == [2.0] * 100
    after = _steps(slave, vr, 1.03, 1, 10.0, 10.5)[0]                # the error reverses: no wound-up integral
    assert after == pytest.approx(-0.5 + 10 * (0.003 - 0.005), abs=1e-12)
    slave.terminate()
    slave.freeInstance()


def test_controller_fmu_rejects_a_non_positive_torque_limit(tmp_path: Path) -> None:
    from fmpy.fmi1 import FMICallException

    slave, _ = _controller(tmp_path, kp=1.0, ki=10.0, torque_max=0.0)
    with pytest.raises(FMICallException):
        slave.exitInitializationMode()
    slave.freeInstance()
