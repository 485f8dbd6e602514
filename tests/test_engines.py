"""Engine balance from inverse dynamics, against the slider-crank closed forms.

Per cylinder (φ from top dead centre, λ = r/l): s = r cos φ + l sqrt(1 − λ² sin² φ). With the
rotating masses balanced, the frame force along the cylinder axis is −m_rec·s̈, whose Fourier
series is m_rec r ω² (cos φ + λ(1 + λ²/4 + 15λ⁴/128 + …) cos 2φ + …): the primary is exactly
m_rec r ω² (the rod term holds even harmonics only) and the classical secondary m_rec r ω² λ is
low by the factor 1 + λ²/4 + … . The "exact" secondary is also computed here from the FFT of the
closed-form s(φ) (independently of the engine).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import mbsd_twin as mt
from mbsd_twin.solvers import shaking as sh

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "mechanisms"
R, L = 0.04, 0.14
LAM = R / L
M_REC = 0.35 + 0.5 * 0.045 / 0.14      # piston + the rod's share at the wrist pin
W = 100 * math.pi
F0 = M_REC * R * W**2
N = 360


def run(name: str) -> tuple[mt.Mechanism, mt.Result]:
    mech = mt.load_mechanism(EXAMPLES / name)
    return mech, mt.inverse_dynamics(mech, np.arange(N) / N / 50.0)


def cylinder_force(mech: mt.Mechanism, res: mt.Result, k: str) -> np.ndarray:
    return sh.frame_force(mech, res, [f"main_bearing{k}", f"cylinder{k}"])


def exact_order(k: int) -> float:
    """m_rec·(kω)²·|S_k| from the FFT of the closed-form piston travel s(φ)."""
    phi = 2 * math.pi * np.arange(4096) / 4096
    s = R * np.cos(phi) + L * np.sqrt(1 - LAM**2 * np.sin(phi) ** 2)
    return float(M_REC * (k * W) ** 2 * 2 * abs(np.fft.rfft(s)[k]) / 4096)


def test_single_cylinder_primary_and_secondary_forces() -> None:
    mech, res = run("engine_single_cylinder.toml")
    phi = np.arange(N) / N * 2 * math.pi
    s = R * np.cos(phi) + L * np.sqrt(1 - LAM**2 * np.sin(phi) ** 2)
    np.testing.assert_allclose(res["piston.y"], s, atol=1e-12)
    F = sh.frame_force(mech, res)
    np.testing.assert_allclose(F, sh.inertia_force(mech, res), atol=1e-9 * F0)
    assert sh.order_amplitude(F[:, 1], 1) == pytest.approx(F0, rel=1e-10)          # m_rec r ω², exactly
    assert np.fft.rfft(F[:, 1])[1].real > 0                                          # + cos φ
    secondary = sh.order_amplitude(F[:, 1], 2)
    assert secondary == pytest.approx(exact_order(2), rel=1e-9)
    ratio = secondary / (F0 * LAM)                                                   # vs m_rec r ω² λ
    assert LAM**2 / 4 < ratio - 1 < LAM**2 / 4 + LAM**4 / 4                          # 2.1 % here
    assert np.abs(F[:, 0]).max() < 1e-9 * F0                                         # rotating part balanced


def test_boxer_primary_and_secondary_forces_cancel_but_not_the_couple() -> None:
    mech, res = run("engine_boxer.toml")
    F = sh.frame_force(mech, res)
    for order in (1, 2, 3, 4):
        assert sh.order_amplitude(F[:, 0], order) < 1e-9 * F0
        assert sh.order_amplitude(F[:, 1], order) < 1e-9 * F0
    couple = sh.rocking_couple([(-0.05, cylinder_force(mech, res, "_1")), (0.05, cylinder_force(mech, res, "_2"))])
    assert sh.order_amplitude(couple[:, 1], 1) == pytest.approx(0.1 * F0, rel=1e-10)
    assert sh.order_amplitude(couple[:, 1], 2) == pytest.approx(0.1 * exact_order(2), rel=1e-9)
    assert np.abs(couple[:, 0]).max() < 1e-9 * F0


def test_inline_four_primary_force_and_couple_cancel_secondary_force_does_not() -> None:
    mech, res = run("engine_inline_four.toml")
    z = {"_1": -0.135, "_2": -0.045, "_3": 0.045, "_4": 0.135}
    F = sh.frame_force(mech, res)
    np.testing.assert_allclose(F, sh.inertia_force(mech, res), atol=1e-9 * F0)
    assert sh.order_amplitude(F[:, 1], 1) < 1e-9 * F0
    couple = sh.rocking_couple([(zk, cylinder_force(mech, res, k)) for k, zk in z.items()])
    assert sh.order_amplitude(couple[:, 0], 1) < 1e-9 * F0
    assert sh.order_amplitude(couple[:, 0], 2) < 1e-9 * F0                           # secondary couple too
    secondary = sh.order_amplitude(F[:, 1], 2)
    assert secondary == pytest.approx(4 * exact_order(2), rel=1e-9)
    assert secondary > 4 * F0 * LAM                                                  # 4 m_rec r ω² λ (1 + …)
    # each cylinder alone is unbalanced: the cancellation is between cylinders
    assert sh.order_amplitude(cylinder_force(mech, res, "_1")[:, 1], 1) == pytest.approx(F0, rel=1e-10)


def test_order_spectrum_reads_amplitudes_and_half_orders() -> None:
    phi = 4 * math.pi * np.arange(720) / 720             # two turns
    x = 3.0 + 2.0 * np.cos(phi + 0.3) + 0.5 * np.sin(1.5 * phi) + 0.25 * np.cos(4 * phi)
    orders, amp = sh.order_spectrum(x, revolutions=2)
    assert orders[3] == 1.5
    assert (amp[0], amp[2], amp[3], amp[8]) == pytest.approx((3.0, 2.0, 0.5, 0.25), abs=1e-12)
    with pytest.raises(ValueError):
        sh.order_amplitude(x, 0.25, revolutions=2)
