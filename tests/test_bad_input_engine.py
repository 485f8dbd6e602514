"""The engine on inputs it cannot (or can only partly) solve: unreachable geometry, the wrong number
of degrees of freedom, and redundant constraints."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from reference import four_bar as fbr
from reference import models
from reference import slider_crank as scr

import mbsd_twin as mt

OMEGA = 2.0 * np.pi
SLIDER_CRANK_JOINTS = ("main_bearing", "crank_pin", "wrist_pin", "guide", "motor")
FOUR_BAR = fbr.FourBar(a=0.8, b=2.0, c=1.0, d=2.0)
START = np.radians(10.0)


# --- unreachable geometry ------------------------------------------------------------------------

SHORT_ROD = scr.SliderCrank(r=0.1, l=0.05)   # the loop closes only while r |sin θ| <= l, θ <= 30°


def check_assembly_error(err: mt.AssemblyError) -> None:
    msg = str(err)
    assert err.residual > 1e-3, "the loop cannot close, so a real residual must remain"
    assert isinstance(err.iterations, int) and err.iterations >= 1
    assert f"{err.iterations} iteration" in msg
    assert f"{err.residual:.3g}" in msg
    assert err.worst, "the worst constraints must be listed"
    for name, value in err.worst:
        assert name.split("[")[0] in SLIDER_CRANK_JOINTS
        assert value >= 0.0
    assert err.worst[0][1] == pytest.approx(err.residual)
    worst_joint = err.worst[0][0].split("[")[0]
    assert worst_joint in msg
    assert re.search(r"wrist_pin|crank_pin|guide", msg)


def test_rod_shorter_than_crank_fails_with_a_located_error() -> None:
    mech = models.slider_crank(SHORT_ROD)
    t = np.linspace(0.0, 1.0, 361)
    with pytest.raises(mt.AssemblyError) as info:
        mt.kinematics(mech, t=t)
    err = info.value
    check_assembly_error(err)
    # the first time it cannot close is just after θ = 30° (t = 1/12) and before θ = 150°
    assert 1.0 / 12.0 - 1e-12 <= err.time <= 5.0 / 12.0


def test_rod_shorter_than_crank_cannot_assemble_at_quarter_turn() -> None:
    with pytest.raises(mt.AssemblyError) as info:
        mt.inverse_dynamics(models.slider_crank(SHORT_ROD), t=np.array([0.25]))
    check_assembly_error(info.value)
    assert info.value.time == pytest.approx(0.25)


# --- wrong number of degrees of freedom -----------------------------------------------------------

def undriven_slider_crank() -> mt.Mechanism:
    return models.slider_crank(scr.SliderCrank(), drive=False)


def free_double_pendulum() -> mt.Mechanism:
    b = mt.MechanismBuilder("double_pendulum")
    b.body("upper", 1.0, 1 / 12, (0.5, 0.0), (0.0, 0.0), 0.0)
    b.body("lower", 1.0, 1 / 12, (0.5, 0.0), (1.0, 0.0), 0.0)
    b.revolute("shoulder", "ground", "upper", (0.0, 0.0), (0.0, 0.0))
    b.revolute("elbow", "upper", "lower", (1.0, 0.0), (0.0, 0.0))
    return b.build()


@pytest.mark.parametrize(("make", "dof"), [(undriven_slider_crank, 1), (free_double_pendulum, 2)])
@pytest.mark.parametrize("analysis", [mt.inverse_dynamics, mt.kinematics])
def test_dof_error_names_the_dof(make, dof: int, analysis) -> None:
    with pytest.raises(mt.DOFError) as info:
        analysis(make(), t=np.linspace(0.0, 0.5, 11))
    assert info.value.dof == dof
    assert info.value.required == 0
    msg = str(info.value)
    assert "DOF" in msg or "degree" in msg
    assert re.search(rf"\b{dof}\b", msg), msg
    assert mt.check(make()).dof == dof


# --- redundant constraints -------------------------------------------------------------------------

def run_collecting_warnings(mech: mt.Mechanism, t: np.ndarray) -> tuple[mt.Result, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = mt.inverse_dynamics(mech, t=t)
    return res, [str(w.message) for w in caught] + list(res.warnings)


def assert_mentions_redundancy(messages: list[str]) -> None:
    assert any("redundant" in m.lower() for m in messages), \
        f"no warning mentions redundancy; got {messages!r}"


def test_four_bar_with_a_duplicated_pin() -> None:
    t = np.linspace(0.0, 1.0, 361)
    plain, plain_msgs = run_collecting_warnings(models.four_bar(FOUR_BAR, START, -1), t)
    doubled, msgs = run_collecting_warnings(
        models.four_bar(FOUR_BAR, START, -1, duplicate_pin=True), t)
    assert not any("redundant" in m.lower() for m in plain_msgs)
    assert_mentions_redundancy(msgs)
    # the drive torque is unique: the non-redundant model and the power balance both give it
    s = fbr.solve(FOUR_BAR, START + OMEGA * t, OMEGA, 0.0, branch=-1)
    expected = fbr.power_balance_torque(s, models.FOUR_BAR_INERTIA)
    tol = 1e-9 * np.max(np.abs(expected))
    np.testing.assert_allclose(plain["motor.effort"], expected, rtol=1e-9, atol=tol)
    np.testing.assert_allclose(doubled["motor.effort"], expected, rtol=1e-9, atol=tol)
    # the two copies of the pin share the load in some way, but together carry the single pin's
    for axis in ("fx", "fy"):
        total = doubled[f"B.{axis}"] + doubled[f"B_again.{axis}"]
        scale = np.max(np.abs(plain[f"B.{axis}"]))
        np.testing.assert_allclose(total, plain[f"B.{axis}"], rtol=1e-9, atol=1e-9 * scale)
    rep = mt.check(models.four_bar(FOUR_BAR, START, -1, duplicate_pin=True))
    assert rep.dof == 0
    assert rep.redundant == 2            # two equations of the copied pin (x and y)
    assert rep.n_constraints - rep.rank == rep.redundant


def parallelogram_expected(n_cranks: int, t: np.ndarray) -> np.ndarray:
    theta = START + OMEGA * t
    return fbr.parallelogram_torque(models.PARALLELOGRAM_CRANK, theta, OMEGA, 0.0,
                                    models.PARALLELOGRAM_INERTIA[:n_cranks], models.PARALLELOGRAM_COUPLER)


def test_parallelogram_with_a_third_crank() -> None:
    t = np.linspace(0.0, 1.0, 361)   # a full turn: the off-line third crank removes the change points
    res, msgs = run_collecting_warnings(models.parallelogram(3, START), t)
    assert_mentions_redundancy(msgs)
    expected = parallelogram_expected(3, t)
    np.testing.assert_allclose(res["motor.effort"], expected, rtol=1e-9,
                               atol=1e-9 * np.max(np.abs(expected)))
    # the coupler translates: its angle stays 0 and every crank turns with the driven one
    np.testing.assert_allclose(np.angle(np.exp(1j * res["coupler.theta"])), 0.0, atol=1e-10)
    for k in (1, 2):
        np.testing.assert_allclose(res[f"crank{k}.theta"], res["crank0.theta"], atol=1e-10)
    rep = mt.check(models.parallelogram(3, START))
    assert rep.redundant == 1
    assert rep.dof == 0
    assert rep.n_constraints - rep.rank == 1
    assert any("redundant" in w.lower() for w in rep.warnings)


def test_parallelogram_with_two_cranks_is_not_redundant() -> None:
    # stay clear of the change points θ = 0 and θ = π, where two-crank parallelograms bifurcate
    t = np.linspace(0.0, 0.35, 127)
    res, msgs = run_collecting_warnings(models.parallelogram(2, START), t)
    assert not any("redundant" in m.lower() for m in msgs)
    expected = parallelogram_expected(2, t)
    np.testing.assert_allclose(res["motor.effort"], expected, rtol=1e-9,
                               atol=1e-9 * np.max(np.abs(expected)))
    assert mt.check(models.parallelogram(2, START)).redundant == 0
