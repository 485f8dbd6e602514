"""Slider-crank inverse dynamics against the Newton–Euler closed form of ``reference.slider_crank``.

Sign conventions checked here (engine): ``<joint>.fx/.fy`` is the force ON the joint's second body
(main_bearing → crank, crank_pin → rod, wrist_pin → piston, guide → piston), ``guide.mz`` the
moment on the piston about the wrist-pin point, ``motor.effort`` the motor torque on the crank
about +z.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from reference import models
from reference import slider_crank as scr
from reference.compare import assert_columns

import mbsd_twin as mt

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mechanisms" / "slider_crank_driven.toml"
OMEGA = 2.0 * np.pi

# 24 crank angles over one turn, offset from the multiples of 15° (first angle ≈ 4.7°), and the
# fine grid the demo uses.
GRIDS = {
    "24_angles": (np.arange(24) + 0.3137) / 24.0,
    "fine": np.linspace(0.0, 1.0, 3601),
}

FORCE_COLUMNS = ("main_bearing.fx", "main_bearing.fy", "crank_pin.fx", "crank_pin.fy",
                 "wrist_pin.fx", "wrist_pin.fy", "guide.fx", "guide.fy")

CG_2D = scr.SliderCrank(c1=(0.05, 0.02), c2=(0.15, -0.03), c3=(0.01, 0.025))


def expected_columns(p: scr.SliderCrank, theta: np.ndarray, omega: np.ndarray | float,
                     alpha: np.ndarray | float = 0.0) -> dict[str, np.ndarray]:
    """Engine column name → closed-form value."""
    r = scr.inverse_dynamics(p, theta, omega, alpha)
    cols = {"motor.effort": r.torque, "guide.mz": r.guide_moment}
    for joint, f in (("main_bearing", r.main_bearing), ("crank_pin", r.crank_pin),
                     ("wrist_pin", r.wrist_pin), ("guide", r.guide_force)):
        cols[f"{joint}.fx"], cols[f"{joint}.fy"] = f[:, 0], f[:, 1]
    return cols


def check_against_reference(res: mt.Result, p: scr.SliderCrank, theta: np.ndarray,
                            omega: np.ndarray | float, alpha: np.ndarray | float = 0.0) -> None:
    exp = expected_columns(p, theta, omega, alpha)
    force_scale = max(float(np.max(np.abs(exp[c]))) for c in FORCE_COLUMNS)
    torque_scale = float(np.max(np.abs(exp["motor.effort"])))
    # forces: the atol is 1e-9 of the largest force; moments: 1e-9 of the motor torque's scale
    assert_columns(res, {c: exp[c] for c in FORCE_COLUMNS}, floor=force_scale)
    assert_columns(res, {c: exp[c] for c in ("motor.effort", "guide.mz")}, floor=torque_scale)
    assert_columns(res, scr.body_states(p, theta, omega, alpha), floor=p.r, wrap_angles=True)


@pytest.fixture(scope="module")
def file_mechanism() -> mt.Mechanism:
    return mt.load_mechanism(str(EXAMPLE))


@pytest.mark.parametrize("grid", GRIDS)
def test_file_slider_crank_matches_newton_euler(file_mechanism: mt.Mechanism, grid: str) -> None:
    t = GRIDS[grid]
    res = mt.inverse_dynamics(file_mechanism, t=t)
    np.testing.assert_array_equal(res.time, t)
    check_against_reference(res, scr.SliderCrank(), OMEGA * t, OMEGA)


@pytest.mark.parametrize("grid", GRIDS)
def test_builder_slider_crank_matches_newton_euler(grid: str) -> None:
    t = GRIDS[grid]
    res = mt.inverse_dynamics(models.slider_crank(scr.SliderCrank()), t=t)
    check_against_reference(res, scr.SliderCrank(), OMEGA * t, OMEGA)


def test_file_and_builder_give_identical_numbers(file_mechanism: mt.Mechanism) -> None:
    t = GRIDS["fine"]
    from_file = mt.inverse_dynamics(file_mechanism, t=t)
    built = mt.inverse_dynamics(models.slider_crank(scr.SliderCrank()), t=t)
    exp = expected_columns(scr.SliderCrank(), OMEGA * t, OMEGA)
    assert set(exp) <= set(from_file.columns)
    # the two models differ only in their initial guesses, which the assembly removes: the
    # results agree to round-off of the converged Newton iteration
    for name in [*exp, *scr.body_states(scr.SliderCrank(), OMEGA * t, OMEGA)]:
        scale = max(float(np.max(np.abs(built[name]))), 1e-3)
        np.testing.assert_allclose(from_file[name], built[name], rtol=1e-12, atol=1e-12 * scale,
                                   err_msg=name)


@pytest.mark.parametrize("grid", GRIDS)
def test_cg_offsets_in_two_directions(grid: str) -> None:
    """Centres of mass off the body x axes (and an off-centre piston, so guide.mz ≠ 0)."""
    t = GRIDS[grid]
    res = mt.inverse_dynamics(models.slider_crank(CG_2D, name="slider_crank_cg2d"), t=t)
    exp = expected_columns(CG_2D, OMEGA * t, OMEGA)
    assert np.max(np.abs(exp["guide.mz"])) > 0.1   # the variant really exercises the moment
    check_against_reference(res, CG_2D, OMEGA * t, OMEGA)


def test_accelerating_crank() -> None:
    """θ(t) = 0.2 + 5 t + 3 t²: θ̈ = 6 rad/s² adds I·θ̈ and tangential accelerations."""
    coeffs = (0.2, 5.0, 3.0)
    t = (np.arange(30) + 0.41) / 30.0
    res = mt.inverse_dynamics(models.slider_crank(CG_2D, mt.Polynomial(coeffs)), t=t)
    theta = coeffs[0] + coeffs[1] * t + coeffs[2] * t * t
    check_against_reference(res, CG_2D, theta, coeffs[1] + 2 * coeffs[2] * t,
                            np.full_like(t, 2 * coeffs[2]))


def test_effort_satisfies_power_balance(file_mechanism: mt.Mechanism) -> None:
    """The motor torque also equals d(energy)/dt / θ̇ — a second, independent reference."""
    t = GRIDS["24_angles"]
    res = mt.inverse_dynamics(file_mechanism, t=t)
    expected = scr.power_balance_torque(scr.SliderCrank(), OMEGA * t, OMEGA)
    np.testing.assert_allclose(res["motor.effort"], expected, rtol=1e-9,
                               atol=1e-9 * np.max(np.abs(expected)))
