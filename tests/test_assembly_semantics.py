"""Modelling semantics of the initial assembly (issue #18): spring free values from the assembled
pose, pinned coordinates, and failures that say why (inconsistent constraints, pinned coordinates
that cannot be held, a guess too far)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from reference import models
from reference import slider_crank as scr

import mbsd_twin as mt
from mbsd_twin.solvers.kinematics import KinematicsOptions

EX = Path(__file__).resolve().parents[1] / "examples/mechanisms"
K_SPRING, K_TORSION = 100.0, 3.0


def slider_with_arm(free_length: float | None = None, free_angle: float | None = None) -> mt.Mechanism:
    """A slider on the x axis (guessed 0.05 m above it, tilted 0.1 rad) with an arm hinged on it
    (guessed at 0.4 rad; its revolute holds it there), a spring from the origin to the slider and
    a torsion spring slider–arm. Assembled: slider at (0.3, 0) with θ = 0, arm at 0.4 rad."""
    b = mt.MechanismBuilder("slider_arm", gravity=(0.0, 0.0))
    b.body("slider", 1.0, 0.01, position=(0.3, 0.05), angle=0.1)
    b.body("arm", 0.5, 0.01, position=(0.3, 0.05), angle=0.4)
    b.prismatic("guide", "ground", "slider", (0, 0), (0, 0), axis=(1, 0), angle=0.0)
    b.revolute("hinge", "slider", "arm", (0, 0), (0, 0))
    b.spring_damper("spring", "ground", "slider", (0, 0), (0, 0), stiffness=K_SPRING, free_length=free_length)
    b.rotational_spring_damper("torsion", "slider", "arm", stiffness=K_TORSION, free_angle=free_angle)
    return b.build()


@pytest.mark.parametrize("backend", ["compiled", "numpy"])
def test_default_spring_free_values_come_from_the_assembled_pose(backend: str) -> None:
    """With the defaults both springs are unloaded at t = 0 (the guess would have preloaded them:
    L = 0.3 m against hypot(0.3, 0.05), relative angle 0.4 against 0.3 rad), so nothing moves."""
    sim = mt.Simulator(slider_with_arm(), mt.SolverOptions(backend=backend))
    out = sim.outputs()
    assert out["slider.y"] == pytest.approx(0.0, abs=1e-12) and out["slider.theta"] == pytest.approx(0.0, abs=1e-12)
    assert out["energy.elastic"] == pytest.approx(0.0, abs=1e-20)
    assert out["slider.ax"] == pytest.approx(0.0, abs=1e-12) and out["arm.alpha"] == pytest.approx(0.0, abs=1e-12)
    sim.advance_to(0.2)
    assert sim.outputs()["slider.x"] == pytest.approx(0.3, abs=1e-12)


@pytest.mark.parametrize("backend", ["compiled", "numpy"])
def test_explicit_free_values_still_win(backend: str) -> None:
    out = mt.Simulator(slider_with_arm(0.25, 0.1), mt.SolverOptions(backend=backend)).outputs()
    expected = 0.5 * K_SPRING * (0.3 - 0.25) ** 2 + 0.5 * K_TORSION * (0.4 - 0.1) ** 2
    assert out["energy.elastic"] == pytest.approx(expected, rel=1e-12)
    assert out["slider.ax"] == pytest.approx(-K_SPRING * 0.05 / 1.5, rel=1e-9)  # slider + arm: 1.5 kg


def crank_file(tmp_path: Path, pin: str) -> Path:
    """The shipped slider crank with the crank written at 0.5 rad and the rod and piston left at
    their (θ = 0) guesses."""
    text = (EX / "slider_crank.toml").read_text()
    head, _, rest = text.partition('name = "rod"')
    head = head.replace("angle = 0.0                       # rad, initial guess",
                        f"angle = 0.5\n{pin}", 1)
    path = tmp_path / "crank.toml"
    path.write_text(head + 'name = "rod"' + rest)
    return path


def test_pinned_crank_angle_is_held_exactly(tmp_path: Path) -> None:
    r, l = 0.1, 0.3  # noqa: E741
    free = mt.check(mt.load_mechanism(crank_file(tmp_path, "")))
    assert abs(free.q[2] - 0.5) > 1e-3, "without the pin the assembly moves the crank"
    mech = mt.load_mechanism(crank_file(tmp_path, 'pin = ["theta"]'))
    assert mech.body("crank").pin == ("theta",)
    rep = mt.check(mech)
    assert rep.q[2] == 0.5  # exactly the written value
    assert rep.assembly_residual <= 1e-10
    assert rep.pinned == ["crank.theta"] and "pinned in the assembly: crank.theta" in rep.summary()
    piston_x = r * math.cos(0.5) + math.sqrt(l**2 - (r * math.sin(0.5)) ** 2)
    assert dict((b, x) for b, x, _, _ in rep.pose)["piston"] == pytest.approx(piston_x, abs=1e-10)
    sim = mt.Simulator(mech)  # the simulation starts from the pinned assembly
    assert sim.outputs()["crank.theta"] == 0.5


def test_builder_pin_and_a_pin_that_cannot_be_held() -> None:
    """Crank pinned at 0.5 rad and the piston pinned at x = 0.2 m (the loop closes only for
    x = r cos θ + sqrt(l² − r² sin² θ) ≈ 0.382 m): the error names both pinned coordinates and the
    values they take when released."""
    b = mt.MechanismBuilder("crank")
    b.body("crank", 1.0, 8e-4, angle=0.5, pin=("theta",))
    b.body("rod", 2.0, 0.015, position=(0.1, 0.0))
    b.body("piston", 1.5, 1e-3, position=(0.2, 0.0), pin=["x"])
    b.revolute("main_bearing", "ground", "crank", (0, 0), (0, 0))
    b.revolute("crank_pin", "crank", "rod", (0.1, 0), (0, 0))
    b.revolute("wrist_pin", "rod", "piston", (0.3, 0), (0, 0))
    b.prismatic("guide", "ground", "piston", (0, 0), (0, 0), axis=(1, 0))
    with pytest.raises(mt.AssemblyError) as err:
        mt.check(b.build())
    assert err.value.cause == "pinned"
    assert err.value.conflicting == ["crank.theta", "piston.x"]
    msg = str(err.value)
    assert "cannot be assembled" in msg and "pinned coordinate(s) crank.theta, piston.x" in msg
    assert "piston.x = " in msg and "(pinned at 0.2)" in msg


def test_pin_names_are_validated(tmp_path: Path) -> None:
    with pytest.raises(mt.MechanismError) as err:
        mt.load_mechanism(crank_file(tmp_path, 'pin = ["phi"]'))
    assert "bodies[0] (crank).pin" in str(err.value) and "'phi'" in str(err.value)


def test_inconsistent_constraints_are_named() -> None:
    """A two-bar chain pinned to ground 2.5 m apart but only 2 m long: the closest pose spreads the
    0.5 m misfit evenly over the three x rows (least squares), 1/6 m each; all three joints conflict."""
    b = mt.MechanismBuilder("too_short")
    b.body("bar", 1.0, 0.1)
    b.body("arm", 1.0, 0.1, position=(1.0, 0.0))
    b.revolute("left", "ground", "bar", (0, 0), (0, 0))
    b.revolute("mid", "bar", "arm", (1, 0), (0, 0))
    b.revolute("right", "ground", "arm", (2.5, 0), (1, 0))
    with pytest.raises(mt.AssemblyError) as err:
        mt.check(b.build())
    assert err.value.cause == "inconsistent"
    assert err.value.conflicting == ["left", "mid", "right"]
    assert err.value.residual == pytest.approx(0.5 / 3, rel=1e-9)
    msg = str(err.value)
    assert "inconsistent (overconstrained)" in msg and "left, mid, right conflict" in msg
    assert "closest pose: bar x=0.166667 m" in msg


def test_short_rod_is_reported_as_inconsistent() -> None:
    """Rod shorter than the crank at θ = 90°: no pose closes the loop."""
    mech = models.slider_crank(scr.SliderCrank(r=0.1, l=0.05), theta0=np.pi / 2)
    with pytest.raises(mt.AssemblyError) as err:
        mt.check(mech)
    assert err.value.cause == "inconsistent"
    assert set(err.value.conflicting) <= {"main_bearing", "crank_pin", "wrist_pin", "guide", "motor"}
    assert "wrist_pin" in err.value.conflicting


def test_a_guess_too_far_reports_the_closest_pose() -> None:
    """One Newton iteration from the perturbed guess is not enough, but an assembly exists: the
    error says the guess was too far and where the descent gets (max |C| ~ 0)."""
    mech = models.slider_crank(scr.SliderCrank(), theta0=0.3)
    with pytest.raises(mt.AssemblyError) as err:
        mt.check(mech, opts=KinematicsOptions(max_iter=1))
    assert err.value.cause == "too_far" and err.value.conflicting == []
    msg = str(err.value)
    assert "too far from an assembled pose" in msg and "Newton stopped at crank x=" in msg
    reached = float(msg.split("reaches max |C| = ")[1].split(" ")[0])
    assert reached < 1e-12


def test_check_report_shows_the_pose_with_units() -> None:
    mech = dataclasses.replace(mt.load_mechanism(EX / "four_bar_bicycle_leg.toml"))
    rep = mt.check(mech)
    text = rep.summary()
    assert "x [m]" in text and "y [m]" in text and "theta [rad]" in text
    system = mt.compile_mechanism(mech)
    q = mt.assemble(system)
    for k, name in enumerate(system.body_names):
        assert rep.pose[k] == (name, q[3 * k], q[3 * k + 1], q[3 * k + 2])
    assert "DOF            0 (coordinates − rank of the constraint Jacobian)" in text
