"""Every shipped mechanism runs with default options; initial velocities are made consistent by
least change (reported per body and joint), or checked with an error naming the joint."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg as sla

import mbsd_twin as mt
from mbsd_twin.cli import main
from mbsd_twin.solvers.initial_velocity import velocity_names

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "mechanisms"
SHIPPED = sorted([*EXAMPLES.glob("*.toml"), *(ROOT / "mbsd_twin" / "data" / "mechanisms").glob("*.toml")])
RESIDUAL_TOL = 1e-9  # constraints.position_residual [m or rad]; the projection drives it below 1e-12


def _state(sim: mt.Simulator) -> tuple[np.ndarray, np.ndarray]:
    n = sim.system.n_coord
    y = np.asarray(sim._stepper.y)
    return y[:n].copy(), y[n:2 * n].copy()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_mechanism_runs_with_default_options(path: Path) -> None:
    """``Simulator(load_mechanism(f))`` and one simulated second: no error, the constraint residual
    below 1e-9 at every 0.05 s, and every one on the compiled backend (issue #16: the terrain
    wheels' penalty contact included)."""
    started = time.perf_counter()
    sim = mt.Simulator(mt.load_mechanism(path))
    assert sim.backend == "compiled"
    horizon = 1.0
    worst = 0.0
    for t in np.linspace(0.05, horizon, round(horizon / 0.05)):
        sim.advance_to(float(t))
        worst = max(worst, sim.get_output("constraints.position_residual"))
    assert sim.time == pytest.approx(horizon, abs=1e-12)
    assert worst < RESIDUAL_TOL
    print(f"{path.stem}: {sim.backend}, {horizon} s in {time.perf_counter() - started:.2f} s wall, "
          f"max residual {worst:.2g}, {len(sim.initial_velocity_changes)} initial velocities changed")


def _fd_jacobian(system: mt.System, q: np.ndarray, t: float, h: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """Cq and Ct by central differences of C(q, t) (holonomic mechanisms), checked against the
    engine's analytic ones to 1e-7; returns the analytic pair."""
    _, Cq, Ct = system.evaluate_batch(q[None, :], np.array([t]))
    eye = np.eye(len(q))
    qs = np.concatenate([q + h * eye, q - h * eye, [q, q]])
    ts = np.array([t] * (2 * len(q)) + [t + h, t - h])
    C = system.evaluate_batch(qs, ts)[0]
    n = len(q)
    np.testing.assert_allclose((C[:n] - C[n:2 * n]).T / (2 * h), Cq[0], rtol=0, atol=1e-7 * (1 + np.abs(Cq[0]).max()))
    np.testing.assert_allclose((C[-2] - C[-1]) / (2 * h), Ct[0], rtol=0, atol=1e-7 * (1 + np.abs(Ct[0]).max()))
    return Cq[0], Ct[0]


def _nearest_consistent(sim: mt.Simulator, v0: np.ndarray) -> np.ndarray:
    """The consistent velocity nearest to v0 at the Simulator's initial positions, independently:
    v0 + the minimum-norm least-squares solution dv of Cq·dv = −(Cq·v0 + Ct) (scipy lstsq, every
    constraint row, redundant ones included; the Jacobian checked against central differences)."""
    q, _ = _state(sim)
    A, ct = _fd_jacobian(sim.system, q, sim.time)
    dv = sla.lstsq(A, -(A @ v0 + ct))[0]
    # the result is consistent, and the change is orthogonal to every consistent motion
    np.testing.assert_allclose(A @ (v0 + dv) + ct, 0.0, atol=1e-9)
    null = sla.null_space(A)
    np.testing.assert_allclose(null.T @ dv, 0.0, atol=1e-9)
    return v0 + dv


@pytest.mark.parametrize("name", ["slider_crank_driven", "four_bar_driven", "cam_follower", "engine_boxer",
                                  "pantograph"])
def test_projected_initial_velocity_is_the_least_squares_nearest(name: str) -> None:
    sim = mt.Simulator(mt.load_mechanism(EXAMPLES / f"{name}.toml"))
    v0 = sim.system.v0
    _, v = _state(sim)
    expected = _nearest_consistent(sim, v0)
    np.testing.assert_allclose(v, expected, rtol=0, atol=1e-10 * (1.0 + np.abs(expected).max()))
    # the report lists exactly the velocities that moved, with the values used
    changed = {c.name: c for c in sim.initial_velocity_changes}
    assert changed, "a driven mechanism at rest needs its driver speeds"
    names = [n for n, _ in velocity_names(sim.system)]
    for k, nm in enumerate(names):
        if nm in changed:
            assert changed[nm].given == v0[k] and changed[nm].value == v[k]
            assert changed[nm].unit in ("m/s", "rad/s")
        else:
            assert abs(v[k] - v0[k]) <= 1e-12 * (1 + abs(v[k]))
    assert sim.initial_velocity_report.violations  # the drivers' rows, at least


def test_given_speeds_are_kept_as_far_as_the_constraints_allow() -> None:
    """The slider crank with only the crank turning (ω0 = 2π rad/s): the rod and piston get the
    velocities the joints demand, the crank keeps the speed the least-squares change allows."""
    mech = mt.load_mechanism(EXAMPLES / "slider_crank.toml")
    w0 = 2 * math.pi
    bad = dataclasses.replace(mech, bodies=tuple(dataclasses.replace(b, omega=w0) if b.name == "crank"
                                                 else b for b in mech.bodies))
    sim = mt.Simulator(bad)
    _, v = _state(sim)
    np.testing.assert_allclose(v, _nearest_consistent(sim, sim.system.v0), rtol=0, atol=1e-12)
    changed = {c.name: c for c in sim.initial_velocity_changes}
    assert changed["crank.omega"].given == w0 and 0 < changed["crank.omega"].value < w0
    assert changed["rod.omega"].unit == "rad/s" and changed["rod.vy"].unit == "m/s"
    assert "piston.vx" not in changed  # at θ = 0 (dead centre) the piston is at rest either way
    summary = sim.initial_velocity_report.summary()
    assert "crank_pin" in summary and "crank.omega 6.28319 -> " in summary and "rad/s" in summary


def test_check_mode_names_the_joint_and_its_residual() -> None:
    mech = mt.load_mechanism(EXAMPLES / "slider_crank.toml")
    bad = dataclasses.replace(mech, bodies=tuple(dataclasses.replace(b, omega=2 * math.pi) if b.name == "crank"
                                                 else b for b in mech.bodies))
    with pytest.raises(mt.ConsistencyError) as err:
        mt.Simulator(bad, mt.SolverOptions(initial_velocity="check"))
    # the crank pin (r, 0) moves at r·ω = 0.1·2π along y; the rod's reference point (the same pin) is at rest
    assert err.value.joints == ["crank_pin"]
    assert err.value.worst[0][0] == "crank_pin[y]"
    assert err.value.worst[0][1] == pytest.approx(0.1 * 2 * math.pi, rel=1e-12)
    assert "crank_pin" in str(err.value) and "crank_pin[y] 0.628 m/s" in str(err.value)

    with pytest.raises(mt.ConsistencyError) as err:  # a driven mechanism at rest: the driver is named
        mt.Simulator(mt.load_mechanism(EXAMPLES / "slider_crank_driven.toml"),
                     mt.SolverOptions(initial_velocity="check"))
    assert "motor" in err.value.joints and "motor[drive]" in str(err.value) and "rad/s" in str(err.value)


def test_cli_simulate_initial_velocity_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    driven = str(EXAMPLES / "slider_crank_driven.toml")
    out = tmp_path / "out.csv"
    assert main(["simulate", driven, "--t-end", "0.02", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "initial velocities made consistent with the constraints of motor" in printed
    assert "crank.omega 0 -> 6.28319 rad/s" in printed
    assert "# warning: initial velocities made consistent" in out.read_text()
    assert main(["simulate", driven, "--t-end", "0.02", "--initial-velocity", "check", "-o", str(out)]) == 2
    assert "motor[drive]" in capsys.readouterr().err


def test_fmu_of_a_driven_mechanism_builds_and_starts_at_the_driver_speed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``mbsd-twin fmu build`` of four_bar_driven (at rest in the file, the motor at 1 rev/s): the
    build notes the projected velocities, and the FMU (fmpy, its own process) starts at the motor's
    speed and agrees with the native Simulator."""
    pytest.importorskip("pythonfmu")
    pytest.importorskip("fmpy")
    from mbsd_twin.fmi.importers import output_names, run_isolated
    from mbsd_twin.fmi.inputs import communication_points
    from mbsd_twin.fmi.native import run_native

    path = EXAMPLES / "four_bar_driven.toml"
    fmu = tmp_path / "FourBarDriven.fmu"
    assert main(["fmu", "build", str(path), "-o", str(fmu)]) == 0
    printed = capsys.readouterr().out
    assert "note: the FMU starts with its initial velocities made consistent with the constraints of motor" in printed
    assert "crank.omega 0 -> 6.28319 rad/s" in printed
    got = run_isolated("fmpy", fmu, stop=0.1, step=0.01, timeout=600)
    native = run_native(mt.load_mechanism(path), communication_points(0.0, 0.1, 0.01), {}, output_names(fmu))
    assert got["crank.omega"][0] == pytest.approx(2 * math.pi, rel=1e-12)
    for name, ref in native.items():
        np.testing.assert_allclose(got[name], ref, rtol=0, atol=1e-9 * (1.0 + np.abs(ref).max()), err_msg=name)


def test_initial_velocity_is_a_solver_option_not_a_file_key(tmp_path: Path) -> None:
    """docs/mechanism-file.md: the handling of inconsistent velocities is chosen in SolverOptions
    (or on the command line); a file that sets it is told the key is unknown."""
    path = tmp_path / "pendulum.toml"
    path.write_text('initial_velocity = "project"\n' + (EXAMPLES / "pendulum.toml").read_text())
    with pytest.raises(mt.MechanismError, match="initial_velocity: unknown key"):
        mt.load_mechanism(path)


def test_set_configuration_holds_a_given_speed_exactly() -> None:
    """The documented way to keep one speed exactly after the least-squares start."""
    mech = mt.load_mechanism(EXAMPLES / "slider_crank.toml")
    sim = mt.Simulator(dataclasses.replace(mech, bodies=tuple(
        dataclasses.replace(b, omega=2 * math.pi) if b.name == "crank" else b for b in mech.bodies)))
    assert sim.get_output("crank.omega") < 2 * math.pi
    sim.set_configuration(velocities={"crank.omega": 2 * math.pi})
    assert sim.get_output("crank.omega") == 2 * math.pi
    assert sim.get_output("rod.vy") == pytest.approx(0.1 * 2 * math.pi, rel=1e-12)  # the crank pin's speed


def test_contradicting_velocity_constraints_fail_in_both_modes(tmp_path: Path) -> None:
    """Two motors on one crank at 1 and 2 rad/s: the positions assemble (both start at 0), no
    velocity satisfies both, so even ``project`` fails, naming the driver left violated."""
    path = tmp_path / "two_motors.toml"
    path.write_text("\n".join([
        'format = "mbsd-twin/1"', 'name = "two-motors"', "gravity = [0.0, -9.81]",
        "[[bodies]]", 'name = "crank"', "mass = 1.0", "inertia = 0.01",
        "[[joints]]", 'name = "bearing"', 'type = "revolute"', 'bodies = ["ground", "crank"]',
        *(line for name, speed in (("motor_a", 1.0), ("motor_b", 2.0)) for line in (
            "[[drivers]]", f'name = "{name}"', 'type = "angle"', 'body = "crank"',
            f'profile = {{ kind = "constant_speed", speed = {speed} }}')), ""]))
    mech = mt.load_mechanism(path)
    with pytest.raises(mt.ConsistencyError, match="still violated after the least-squares projection") as err:
        mt.Simulator(mech)
    assert err.value.joints == ["motor_b"] and err.value.residual == pytest.approx(1.0)
    with pytest.raises(mt.ConsistencyError, match="violate the velocity constraints of motor_b, motor_a"):
        mt.Simulator(mech, mt.SolverOptions(initial_velocity="check"))
