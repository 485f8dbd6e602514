"""Kinematic sweeps against closed forms: four-bar (both assembly branches), Scotch yoke, slider crank."""

from __future__ import annotations

import numpy as np
import pytest
from reference import four_bar as fbr
from reference import models
from reference import scotch_yoke as syr
from reference import slider_crank as scr
from reference.compare import assert_columns

import mbsd_twin as mt

OMEGA = 2.0 * np.pi                      # 1 rev/s
START = np.radians(10.0)
FULL_TURN = np.linspace(0.0, 1.0, 721)   # 0.5° steps over one turn
FOUR_BAR = fbr.FourBar(a=0.8, b=2.0, c=1.0, d=2.0)


def circle_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(np.angle(np.exp(1j * (np.asarray(a) - np.asarray(b)))))


@pytest.fixture(scope="module", params=[1, -1], ids=["branch+1", "branch-1"])
def four_bar_run(request: pytest.FixtureRequest) -> tuple[int, mt.Result]:
    branch = request.param
    res = mt.kinematics(models.four_bar(FOUR_BAR, START, branch), t=FULL_TURN)
    return branch, res


def test_four_bar_matches_closed_form(four_bar_run: tuple[int, mt.Result]) -> None:
    branch, res = four_bar_run
    s = fbr.solve(FOUR_BAR, START + OMEGA * FULL_TURN, OMEGA, 0.0, branch=branch)
    assert_columns(res, fbr.body_states(FOUR_BAR, s), floor=FOUR_BAR.a, wrap_angles=True)


def test_four_bar_stays_on_the_branch_of_the_guess(four_bar_run: tuple[int, mt.Result]) -> None:
    branch, res = four_bar_run
    theta2 = START + OMEGA * FULL_TURN
    # the initial guess of the rocker angle picks the branch; the sweep must keep it all the time
    guess = models.four_bar(FOUR_BAR, START, branch).body("rocker").angle
    assert fbr.branch_of(FOUR_BAR, START, guess) == branch
    own = fbr.rocker_angle(FOUR_BAR, theta2, branch)
    other = fbr.rocker_angle(FOUR_BAR, theta2, -branch)
    gap = circle_distance(own, other)
    assert gap.min() > 0.5   # the two branches never come close for this crank-rocker
    err_own = circle_distance(res["rocker.theta"], own)
    err_other = circle_distance(res["rocker.theta"], other)
    assert err_own.max() < 1e-9, f"rocker angle off its branch by {err_own.max():.3g} rad"
    assert np.all(err_other > 0.5 * gap)


def test_four_bar_full_turn_of_the_crank(four_bar_run: tuple[int, mt.Result]) -> None:
    _, res = four_bar_run
    # the crank angle is continuous (not wrapped) and follows the driver exactly
    np.testing.assert_allclose(res["crank.theta"], START + OMEGA * FULL_TURN, rtol=0, atol=1e-12)


@pytest.mark.parametrize("theta0", [0.0, np.radians(37.0)])
def test_scotch_yoke_matches_closed_form(theta0: float) -> None:
    r = 0.1
    res = mt.kinematics(models.scotch_yoke(r, theta0), t=FULL_TURN)
    theta = theta0 + OMEGA * FULL_TURN
    x, xd, xdd = syr.yoke(theta, OMEGA, 0.0, r=r)
    z = np.zeros_like(x)
    expected = {"yoke.x": x, "yoke.vx": xd, "yoke.ax": xdd,
                "yoke.y": z, "yoke.vy": z, "yoke.ay": z,
                "yoke.theta": z, "yoke.omega": z, "yoke.alpha": z,
                "crank.x": z, "crank.y": z, "crank.theta": theta,
                "crank.omega": z + OMEGA, "crank.alpha": z}
    assert_columns(res, expected, floor=r)


def test_slider_crank_kinematics_matches_closed_form() -> None:
    p = scr.SliderCrank()
    res = mt.kinematics(models.slider_crank(p), t=FULL_TURN)
    assert_columns(res, scr.body_states(p, OMEGA * FULL_TURN, OMEGA), floor=p.r, wrap_angles=True)
