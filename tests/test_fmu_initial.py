"""Initial conditions and gravity as FMU parameters (issue #18 item 3), on the pendulum of
examples/mechanisms/pendulum.toml (a 1 m, 1 kg slender bar pinned at the origin at its reference
point; θ counter-clockwise from world +x).

- The FMU with ``bar.theta_start``, ``bar.omega_start`` and ``gravity.y`` set runs the trajectory
  of the native Simulator of a mechanism *written* with that angle, speed and gravity (no start
  parameter involved: the pin is the reference point, so that state is consistent as written).
- Small swings about the equilibrium under a modified gravity, in y and then in x (direction and
  sign), have the closed-form period 2π·sqrt(2L / 3|g|) of the compound pendulum.
- On the Simulator: start values are imposed exactly and consistently, survive a geometry
  rebuild, ``reset`` and a state round trip; a non-finite one is rejected naming it.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fmpy")

from fmu_harness import REPO  # noqa: E402

import mbsd_twin as mt  # noqa: E402
from mbsd_twin.errors import FmuWarning  # noqa: E402
from mbsd_twin.fmi.build import build_fmu  # noqa: E402
from mbsd_twin.fmi.inputs import communication_points  # noqa: E402
from mbsd_twin.fmi.native import run_native  # noqa: E402

PENDULUM = REPO / "examples" / "mechanisms" / "pendulum.toml"
FOUR_BAR = REPO / "examples" / "mechanisms" / "four_bar.toml"
STEP = 1e-3
L = 1.0


@pytest.fixture(scope="module")
def fmu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with pytest.warns(FmuWarning, match="no input"):
        return build_fmu(PENDULUM, tmp_path_factory.mktemp("pendulum") / "Pendulum.fmu")


def _fmpy(fmu: Path, out: Path, stop: float, params: dict[str, float]) -> dict[str, np.ndarray]:
    """The FMU in fmpy (a subprocess, see fmu_harness) at 1 ms with ``params`` set."""
    cmd = [sys.executable, "-m", "mbsd_twin.fmi.importers", "fmpy", str(fmu), "--stop", repr(stop), "--step",
           repr(STEP), *(f"--param={k}={v!r}" for k, v in params.items()), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and out.exists(), proc.stdout + proc.stderr
    with np.load(out) as data:
        return {k: np.array(data[k]) for k in data.files}


def _period(t: np.ndarray, angle: np.ndarray) -> float:
    """Mean period from the upward zero crossings of ``angle`` (linear interpolation)."""
    k = np.flatnonzero((angle[:-1] < 0.0) & (angle[1:] >= 0.0))
    crossings = t[k] - angle[k] * (t[k + 1] - t[k]) / (angle[k + 1] - angle[k])
    assert len(crossings) >= 2
    return float((crossings[-1] - crossings[0]) / (len(crossings) - 1))


def test_variables_include_start_values_gravity_and_y(fmu: Path) -> None:
    with zipfile.ZipFile(fmu) as zf:
        md = ET.fromstring(zf.read("modelDescription.xml"))
    mv = md.find("ModelVariables")
    assert mv is not None
    sv = {v.get("name"): v for v in mv}
    for name, unit, start in (("bar.theta_start", "rad", "0.0"), ("bar.omega_start", "rad/s", "0.0"),
                              ("gravity.x", "m/s2", "0.0"), ("gravity.y", "m/s2", "-9.81")):
        v = sv[name]
        assert (v.get("causality"), v.get("variability"), v.get("initial")) == ("parameter", "fixed", "exact")
        real = v.find("Real")
        assert real is not None and real.get("unit") == unit and real.get("start") == start, name
    assert not any(n.endswith(("x_start", "y_start", "vx_start", "vy_start")) for n in sv if n)  # one DOF
    outputs = [n for n, v in sv.items() if v.get("causality") == "output"]
    assert outputs[:6] == ["bar.x", "bar.y", "bar.theta", "bar.vx", "bar.vy", "bar.omega"]  # Simulator order


def test_start_angle_speed_and_gravity_match_a_mechanism_written_that_way(fmu: Path, tmp_path: Path) -> None:
    theta0, omega0, g = -1.2, 0.7, -3.0
    fmu_run = _fmpy(fmu, tmp_path / "r.npz", 1.0, {"bar.theta_start": theta0, "bar.omega_start": omega0,
                                                    "gravity.y": g})
    mech = mt.load_mechanism(PENDULUM)
    bar = dataclasses.replace(mech.body("bar"), angle=theta0, omega=omega0)
    written = dataclasses.replace(mech, bodies=(bar,), gravity=(0.0, g))
    names = [n for n in fmu_run if n != "time"]
    ref = run_native(written, communication_points(0.0, 1.0, STEP), {}, names)
    np.testing.assert_array_equal(fmu_run["time"], ref["time"])
    assert fmu_run["bar.theta"][0] == theta0 and fmu_run["bar.omega"][0] == omega0
    for name in names:
        scale = float(np.abs(ref[name]).max())
        np.testing.assert_allclose(fmu_run[name], ref[name], rtol=0, atol=1e-9 * scale + 1e-12, err_msg=name)
    # and it is the closed form at release: θ'' = −(3 g_abs / 2L)·cos θ0, pin reaction m·g/4 on a horizontal bar …
    alpha0 = (3.0 * g / (2.0 * L)) * math.cos(theta0)
    sim = mt.Simulator(written)
    assert sim.get_output("bar.alpha") == pytest.approx(alpha0, rel=1e-12)
    assert fmu_run["bar.y"][-1] == pytest.approx(ref["bar.y"][-1], abs=1e-9)


@pytest.mark.parametrize("gx, gy, theta_eq", [(0.0, -3.0, -math.pi / 2), (4.0, 0.0, 0.0)])
def test_small_swing_period_under_modified_gravity_is_the_closed_form(fmu: Path, tmp_path: Path, gx: float,
                                                                     gy: float, theta_eq: float) -> None:
    amplitude = 0.01  # rad: the finite-amplitude correction θ0²/16 = 6e-6 of the period
    g = math.hypot(gx, gy)
    period = 2.0 * math.pi * math.sqrt(2.0 * L / (3.0 * g))  # compound pendulum, I_pin = m L²/3
    run = _fmpy(fmu, tmp_path / "p.npz", 2.2 * period, {"gravity.x": gx, "gravity.y": gy,
                                                        "bar.theta_start": theta_eq + amplitude})
    swing = run["bar.theta"] - theta_eq
    assert float(np.abs(swing).max()) == pytest.approx(amplitude, rel=1e-3)  # released from rest at +amplitude
    measured = _period(run["time"], swing)
    assert measured == pytest.approx(period, rel=2e-5)  # small-angle closed form (6.25e-6 here)
    assert measured == pytest.approx(period * (1.0 + amplitude**2 / 16.0), rel=1e-7)  # with the amplitude term


def test_simulator_start_values_are_exact_consistent_and_kept() -> None:
    sim = mt.Simulator(mt.load_mechanism(FOUR_BAR))
    params = {p.name: p for p in sim.parameters}
    assert [n for n in params if n.endswith("_start")] == ["crank.theta_start", "crank.omega_start"]
    sim.set_parameter("crank.theta_start", 0.5)
    sim.set_parameter("crank.omega_start", 2.0)
    out = sim.outputs()
    assert out["crank.theta"] == 0.5 and out["crank.omega"] == 2.0
    assert out["constraints.position_residual"] < 1e-10
    s, n = sim.system, sim.system.n_coord
    y = sim.get_state()
    q, v = sim._stepper.y[:n], sim._stepper.y[n:2 * n]
    assert np.abs(s.jacobian(q, 0.0) @ v + s.ct(q, 0.0)).max() < 1e-10
    sim.set_parameter("coupler.mass", 2.5)  # a rebuild or a live change: the start values stay
    sim.set_parameter("crank_pin.p1_x", sim.mechanism.joint("crank_pin").points[0][0] * 1.01)
    assert sim.outputs()["crank.theta"] == 0.5 and sim.outputs()["crank.omega"] == 2.0
    sim.advance_to(0.05)
    sim.reset()
    assert sim.outputs()["crank.theta"] == 0.5
    fresh = mt.Simulator(mt.load_mechanism(FOUR_BAR))
    fresh.set_state(y)
    fresh.reset()
    assert fresh.outputs()["crank.theta"] == 0.5 and fresh.outputs()["crank.omega"] == 2.0
    assert {p.name: p.value for p in fresh.parameters}["crank.theta_start"] == 0.5


def test_simulator_rejects_a_non_finite_start_value_and_changes_nothing() -> None:
    sim = mt.Simulator(mt.load_mechanism(FOUR_BAR))
    before = sim.output_vector().copy()
    with pytest.raises(mt.PortError, match="crank.omega_start must be finite"):
        sim.set_parameter("crank.omega_start", math.nan)
    np.testing.assert_array_equal(sim.output_vector(), before)
    assert {p.name: p.value for p in sim.parameters}["crank.omega_start"] == 0.0


def test_free_coordinates_per_degree_of_freedom_angles_first() -> None:
    """A double pendulum (2 DOF): both angles. A knife-edge sleigh (no position constraint, one
    velocity row): all three positions are free, two speeds (the blade forbids sideways speed)."""
    double = mt.Simulator(mt.load_mechanism(REPO / "examples" / "mechanisms" / "double_pendulum.toml"))
    assert [p.name for p in double.parameters if p.name.endswith("_start")] == [
        "upper.theta_start", "lower.theta_start", "upper.omega_start", "lower.omega_start"]
    sleigh = mt.Simulator(mt.load_mechanism(REPO / "examples" / "mechanisms" / "chaplygin_sleigh.toml"))
    starts = [p.name for p in sleigh.parameters if p.name.endswith("_start")]
    assert starts == ["sleigh.theta_start", "sleigh.x_start", "sleigh.y_start", "sleigh.omega_start",
                      "sleigh.vx_start"]
    for name, value in (("sleigh.theta_start", 0.4), ("sleigh.y_start", -0.2), ("sleigh.omega_start", 1.5),
                        ("sleigh.vx_start", 0.3)):
        sleigh.set_parameter(name, value)
    out = sleigh.outputs()
    assert (out["sleigh.theta"], out["sleigh.y"], out["sleigh.omega"], out["sleigh.vx"]) == (0.4, -0.2, 1.5, 0.3)
    s, n = sleigh.system, sleigh.system.n_coord
    q, v = sleigh._stepper.y[:n], sleigh._stepper.y[n:2 * n]
    assert np.abs(s.jacobian(q, 0.0) @ v + s.ct(q, 0.0)).max() < 1e-12  # the no-slip row holds
