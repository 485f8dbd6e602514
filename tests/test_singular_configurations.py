"""Near-singular (toggle) configurations are reported with their time and condition number."""

from __future__ import annotations

import numpy as np

import mbsd_twin as mt


def _slider_crank_driven_by_piston(x_of_t: mt.Profile) -> mt.Mechanism:
    """Crank 0.1 m, rod 0.3 m, the piston's x prescribed: top dead centre is x = 0.4 m, where the
    crank and rod align and the Jacobian loses rank (the crank angle is stationary in x)."""
    b = mt.MechanismBuilder("piston-driven")
    b.body("crank", 1.0, 1e-3, cg=(0.05, 0.0), angle=0.5)
    b.body("rod", 2.0, 0.015, cg=(0.15, 0.0), position=(0.0878, 0.0479), angle=-0.16)
    b.body("piston", 1.5, 1e-3, position=(0.3841, 0.0))
    b.revolute("main_bearing", "ground", "crank", (0, 0), (0, 0))
    b.revolute("crank_pin", "crank", "rod", (0.1, 0), (0, 0))
    b.revolute("wrist_pin", "rod", "piston", (0.3, 0), (0, 0))
    b.prismatic("guide", "ground", "piston", (0, 0), (0, 0), axis=(1, 0))
    b.coordinate_driver("stroke", "piston", "x", x_of_t)
    return b.build()


def test_toggle_position_is_reported_with_time_and_condition_number() -> None:
    # x(t) = 0.4 − 0.016·(1 − t)²: reaches within 1e-8 m of dead centre at t = 1 − 7.9e-4 s.
    x = mt.Polynomial((0.4 - 0.016, 0.032, -0.016))
    mech = _slider_crank_driven_by_piston(x)
    t = np.linspace(0.0, 0.99921, 200)
    res = mt.kinematics(mech, t, mt.KinematicsOptions(cond_warn=1e3))
    warn = [w for w in res.warnings if "near-singular" in w]
    assert len(warn) == 1
    # Near dead centre the crank angle φ obeys x = r cos φ + sqrt(l² − r² sin² φ) ≈ 0.4 − (r·l/(2(l+r)))·φ²,
    # so the Jacobian's smallest singular value shrinks like φ; the worst point is the last one.
    assert f"t={t[-1]:.6g} s" in warn[0]
    cond = float(warn[0].split("condition number ")[1].split(" ")[0])
    gap = 0.4 - x.evaluate(np.array([t[-1]]))[0][0]
    phi = np.sqrt(gap * 2 * (0.3 + 0.1) / (0.1 * 0.3))
    # condition number grows as 1/φ: between 1/φ and 100/φ for this scaling of the rows
    assert 1.0 / phi < cond < 100.0 / phi
    # positions stay exact even there
    th = res["crank.theta"]
    assert np.allclose(0.1 * np.cos(th) + np.sqrt(0.09 - (0.1 * np.sin(th)) ** 2),
                       x.evaluate(t)[0], atol=1e-11)


def test_regular_sweep_has_no_singularity_warning() -> None:
    mech = mt.load_mechanism("examples/mechanisms/slider_crank_driven.toml")
    res = mt.kinematics(mech, np.linspace(0, 1, 361))
    assert not [w for w in res.warnings if "near-singular" in w]
