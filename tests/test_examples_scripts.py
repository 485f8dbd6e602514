"""Every example script runs (figures into a temporary folder) and its key numbers match closed
forms derived here or in the mechanism files' headers."""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from scipy.special import ellipk
from scipy.stats import chi2

SCRIPTS = Path(__file__).resolve().parents[1] / "examples" / "scripts"
G = 9.81


def load_script(name: str) -> ModuleType:
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(f"example_{name}", SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_slider_crank(n: dict[str, float]) -> None:
    assert n["piston_x_max"] == pytest.approx(0.3 + 0.1, abs=1e-9)     # l + r at θ = 0
    assert n["piston_x_min"] == pytest.approx(0.3 - 0.1, abs=1e-6)     # l − r at θ = π (sampled)
    assert n["forward_status"] == 0 and abs(n["forward_balance_error"]) < 1e-6


def check_four_bar(n: dict[str, float]) -> None:
    a, b, c, d = 0.8, 2.0, 1.0, 2.0           # rocker extremes: crank and coupler aligned
    far = math.pi - math.acos((c * c + d * d - (b + a) ** 2) / (2 * c * d))
    near = math.pi - math.acos((c * c + d * d - (b - a) ** 2) / (2 * c * d))
    assert n["rocker_min"] == pytest.approx(far, abs=1e-6)
    assert n["rocker_max"] == pytest.approx(near, abs=1e-6)
    assert n["free_energy_drift"] < 1e-6 and n["free_status"] == 0


def check_bicycle_leg(n: dict[str, float]) -> None:
    hip = np.array([-0.20, 0.70])
    for key, crank in (("thigh_at_0", 0.0), ("thigh_at_90", math.pi / 2)):
        P = 0.17 * np.array([math.cos(crank), math.sin(crank)])
        e = float(np.linalg.norm(P - hip))
        angle = math.acos((0.45**2 + e * e - 0.50**2) / (2 * 0.45 * e))
        assert n[key] == pytest.approx(math.atan2(*(P - hip)[::-1]) + angle, abs=1e-10)
    assert 30 < n["knee_min"] < n["knee_max"] < 120


def check_pendulum(n: dict[str, float]) -> None:
    assert n["period"] == pytest.approx(4 * math.sqrt(2 / (3 * G)) * ellipk(0.5), rel=1e-6)
    assert n["omega_min"] == pytest.approx(-math.sqrt(3 * G), rel=1e-4)   # at the bottom (sampled)
    assert n["energy_drift"] < 1e-8


def check_double_pendulum(n: dict[str, float]) -> None:
    assert n["alpha1_0"] == pytest.approx(-9 * G / 7, rel=1e-10)
    assert n["alpha2_0"] == pytest.approx(3 * G / 7, rel=1e-10)
    assert n["energy_drift"] < 1e-7


def check_mass_spring_damper(n: dict[str, float]) -> None:
    assert n["max_error"] < 1e-8
    assert n["guide_fy_mean"] == pytest.approx(2.0 * G, rel=1e-12)
    assert n["balance_error"] < 1e-8


def check_scotch_yoke(n: dict[str, float]) -> None:
    assert n["x_error"] < 1e-10 and n["torque_error"] < 1e-9


def check_pantograph(n: dict[str, float]) -> None:
    assert n["scale_error"] < 1e-12
    assert n["stylus_radius"] == pytest.approx(0.1, rel=1e-4)


def check_geneva_drive(n: dict[str, float]) -> None:
    slots = 4
    r, d = 0.05, 0.05 / math.sin(math.pi / slots)
    assert n["engaged_angle"] == pytest.approx(180 - 360 / slots, abs=0.01)
    assert n["dwell_angle"] == pytest.approx(180 + 360 / slots, abs=0.01)
    assert n["index_angle"] == pytest.approx(360 / slots, abs=0.01)
    assert n["speed_ratio_peak"] == pytest.approx(r / (d - r), rel=1e-6)
    assert n["speed_ratio_at_entry"] < 1e-3


def check_cam_follower(n: dict[str, float]) -> None:
    assert n["normal_force_min"] > 0                                  # the roller never lifts off
    assert n["tangential_force_max"] < 1e-9 * n["normal_force_max"]   # frictionless contact
    assert abs(n["mean_cam_torque"]) < 1e-9                          # no net work over a turn
    assert n["follower_swing"] == pytest.approx(0.3997, abs=2e-3)      # see test_cam (pitch curve)


def check_engines(n: dict[str, float]) -> None:
    lam = 0.04 / 0.14
    assert n["single_cylinder_force_order1"] == pytest.approx(1.0, rel=1e-10)
    assert lam**2 / 4 < n["single_cylinder_force_order2"] / lam - 1 < lam**2 / 4 + lam**4 / 4
    assert n["boxer_force_order1"] < 1e-9 and n["boxer_force_order2"] < 1e-9
    assert n["boxer_couple_order1"] == pytest.approx(0.10, rel=1e-10)
    assert n["inline_four_force_order1"] < 1e-9 and n["inline_four_couple_order1"] < 1e-9
    assert n["inline_four_force_order2"] == pytest.approx(4 * n["single_cylinder_force_order2"], rel=1e-10)
    for key in ("single_cylinder", "boxer", "inline_four"):
        assert n[f"{key}_inertia_check"] < 1e-9
    # firing order 1-3-4-2: evenly spaced firings, so the torque holds even orders only
    assert n["torque_mean"] > 0 and n["torque_half_orders"] < 1e-9 * n["torque_mean"]


def check_terrain_wheel(n: dict[str, float]) -> None:
    m, R, inertia, tau, mu, v_lim, K = 60.0, 0.3, 0.45, 60.0, 0.9, 0.1, 1e6
    a = tau / (R * m + inertia / R)
    assert n["round_acceleration"] == pytest.approx(a, rel=1e-4)
    assert n["round_slip"] == pytest.approx(-v_lim * math.atanh(m * a / (mu * m * G)), rel=1e-3)
    d2, d1 = (m * G / 2 / K) ** (2 / 3), (m * G / K) ** (2 / 3)     # two vertices / one vertex loaded
    assert n["octagon_hub_min"] == pytest.approx(R * math.cos(math.pi / 8) - d2, abs=1e-6)
    assert n["octagon_hub_max"] == pytest.approx(R - d1, abs=2e-3)    # vaulting over a vertex


def check_chaplygin_sleigh(n: dict[str, float]) -> None:
    assert n["u_error"] < 1e-8 and n["omega_error"] < 1e-8
    energy = 0.5 * 2.0 * 0.4**2 + 0.5 * (0.05 + 2.0 * 0.15**2) * 3.0**2
    assert n["u_final"] == pytest.approx(math.sqrt(2 * energy / 2.0), rel=1e-4)


def check_twin_estimation(n: dict[str, float]) -> None:
    k, b = n["k"], n["threshold_h"] + 1.166  # Siegmund: two-sided in-control ARL = one week at 1 kHz
    assert 0.5 * (math.exp(2 * k * b) - 2 * k * b - 1) / (2 * k * k) == pytest.approx(604800 * 1000, rel=1e-6)
    # S = H·P·Hᵀ + R ≥ R: the innovation RMS is at least the 1 mrad encoder σ (less 3.5 standard
    # errors of an RMS over ≥ 5000 samples, 1/√(2N) ≈ 1 %); target ≤ 1.2 mrad
    assert 0.97e-3 <= n["innov_rms"] <= 1.2e-3
    assert n["err_rms"] <= 2e-4  # target: the estimate 5× closer to the truth than one measurement
    m, N = 4, n["nis_samples"]  # θ, ω, f_x, f_y: NIS ~ χ²(4); the mean of N such is χ²(4N)/N
    lo, hi = chi2.ppf([0.0005, 0.9995], m * N) / N
    assert lo <= n["nis_mean"] <= hi and n["healthy_alarms"] == 0
    for fault in ("mass", "friction", "offset", "pulses", "stuck"):
        assert 0.0 <= n[f"{fault}_delay"] <= 0.25 and n[f"{fault}_early_alarms"] == 0, fault


def check_tutorial_figures(n: dict[str, float]) -> None:
    r, d = 0.05, 0.15                          # quick_return.toml: crank radius, O2–O4 distance
    beta = math.asin(r / d)                    # lever extremes: O4A tangent to the crank circle
    assert n["dof"] == 3 * 3 - 2 * 4
    assert n["lever_theta0"] == pytest.approx(math.atan2(d, r), abs=1e-12)   # crank pinned at 0
    assert n["lever_min"] == pytest.approx(math.pi / 2 - beta, abs=2e-4)      # sampled every 2 ms
    assert n["lever_max"] == pytest.approx(math.pi / 2 + beta, abs=2e-4)
    assert n["status"] == 0 and n["balance_error"] < 1e-7 and n["crank_turns"] > 3


CHECKS: dict[str, tuple[Callable[[dict[str, float]], None], tuple[str, ...]]] = {
    "slider_crank": (check_slider_crank, ("slider_crank.png",)),
    "four_bar": (check_four_bar, ("four_bar.png",)),
    "bicycle_leg": (check_bicycle_leg, ("bicycle_leg.png",)),
    "pendulum": (check_pendulum, ("pendulum.png",)),
    "double_pendulum": (check_double_pendulum, ("double_pendulum.png",)),
    "mass_spring_damper": (check_mass_spring_damper, ("mass_spring_damper.png",)),
    "scotch_yoke": (check_scotch_yoke, ("scotch_yoke.png",)),
    "pantograph": (check_pantograph, ("pantograph.png",)),
    "geneva_drive": (check_geneva_drive, ("geneva_drive.png",)),
    "cam_follower": (check_cam_follower, ("cam_follower.png",)),
    "engines": (check_engines, ("engines.png", "engine_torque.png")),
    "terrain_wheel": (check_terrain_wheel, ("terrain_wheel.png",)),
    "chaplygin_sleigh": (check_chaplygin_sleigh, ("chaplygin_sleigh.png",)),
    "tutorial_figures": (check_tutorial_figures, tuple(f"tutorial_{s}.png" for s in (
        "sketch", "pose", "simulate", "frame"))),
    "twin_estimation": (check_twin_estimation, tuple(f"twin_estimation_{s}.png" for s in (
        "healthy", "mass", "friction", "offset", "pulses", "stuck"))),
}


def test_every_script_is_checked() -> None:
    scripts = {p.stem for p in SCRIPTS.glob("*.py") if not p.stem.startswith("_")}
    assert scripts == set(CHECKS)


@pytest.mark.parametrize("name", list(CHECKS))
def test_example_script(name: str, tmp_path: Path) -> None:
    module = load_script(name)
    if name == "terrain_wheel":
        module.T_END = 0.5            # the flat start: closed forms hold there (full run: 1.3 s)
    if name == "twin_estimation":
        module.DURATION = 6.0         # the faults at 5 s are alarmed within 0.25 s (figures: 8 s)
    numbers = module.main(tmp_path)
    check, figures = CHECKS[name]
    for fig in figures:
        assert (tmp_path / fig).stat().st_size > 10_000
    check(numbers)
