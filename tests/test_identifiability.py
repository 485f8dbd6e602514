"""The identifiability check (mbsd_twin/estimation/identifiability.py, `twin identify`): exact
degeneracies derived by hand, a Cramér–Rao bound against its closed form, the shipped slider
crank's augmentation and the command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from mbsd_twin.cli import main
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism
from mbsd_twin.rig.synthetic import RigConfig
from mbsd_twin.twin.config.sections import AugmentConfig, CoreConfig
from mbsd_twin.twin.identify import identify

ROOT = Path(__file__).resolve().parents[1]
SIGMA = {"angle": 1e-3, "speed": 0.01, "fx": 0.05, "fy": 0.05, "torque": 0.002}


def _rotor(tmp_path: Path, cg: float, friction: float) -> Path:
    """A bar on a fixed pivot in a horizontal plane (no gravity), driven by a motor torque at the pin."""
    text = f"""format = "mbsd-twin/1"
name = "rotor"
gravity = [0.0, 0.0]
[[bodies]]
name = "bar"
mass = 1.0
inertia = 0.02
cg = [{cg}, 0.0]
position = [0.0, 0.0]
angle = 0.0
[[joints]]
name = "pivot"
type = "revolute"
bodies = ["ground", "bar"]
points = [[0.0, 0.0], [0.0, 0.0]]
viscous_friction = {friction}
[[loads]]
name = "motor"
type = "torque"
body = "bar"
input = "motor_torque"
"""
    path = tmp_path / "rotor.toml"
    path.write_text(text)
    return path


def _config(forces: bool) -> CoreConfig:
    compare = {"angle": "bar.theta", "speed": "bar.omega"} | ({"fx": "pivot.fx", "fy": "pivot.fy"} if forces else {})
    return CoreConfig(inputs={"torque": "motor_torque"}, compare=compare, state_extra=(), resync_angle="angle",
                      resync_speed="speed", resync_bounds={"angle": 0.1, "speed": 5.0},
                      noise={ch: SIGMA[ch] for ch in (*compare, "torque")},
                      augment=(AugmentConfig("motor_torque.bias", 0.5, 0.01),))


def _rig(torque: float, amp: float) -> RigConfig:
    return RigConfig(asset="r-01", channels={"angle": "bar.theta", "speed": "bar.omega", "torque": "motor_torque"},
                     mismatch={}, noise={}, drive="motor_torque", drive_speed="", friction_joint="",
                     torque=torque, torque_amp=amp, speed_freq=1.0)


def test_mass_and_inertia_of_a_rotor_are_confusable_without_a_force_sensor(tmp_path: Path) -> None:
    """Without gravity a bar about a fixed pivot moves by (I_G + m·a²)·θ'' = τ − c·θ': its mass and
    inertia enter the angle and speed only through I_G + m·a², so ∂y/∂m = a²·∂y/∂I_G: ρ = +1 and
    σ_m = σ_I/a². The pivot force m·a·(α, −ω²) sees the mass on its own: they part."""
    a = 0.25
    mech = load_mechanism(_rotor(tmp_path, a, 0.02))
    blind = identify(_config(False), mech, _rig(0.3, 0.5), duration=0.5).ident
    m, inertia = blind.unknowns[blind.index("bar.mass")], blind.unknowns[blind.index("bar.inertia")]
    rho = blind.correlation[blind.index("bar.mass"), blind.index("bar.inertia")]
    assert rho == pytest.approx(1.0, abs=2e-4)
    assert m.sd == pytest.approx(inertia.sd / a ** 2, rel=0.005)
    assert ("bar.mass", "bar.inertia") in {(p[0], p[1]) for p in blind.confusable()}
    seen = identify(_config(True), mech, _rig(0.3, 0.5), duration=0.5).ident
    rho_f = seen.correlation[seen.index("bar.mass"), seen.index("bar.inertia")]
    assert abs(rho_f) < 0.5, rho_f  # fitted together, their σ grow by 1/√(1 − ρ²) < 1.16 only
    assert not any({"bar.mass", "bar.inertia"} <= {p[0], p[1]} for p in seen.confusable())


def _closed_form_sd(inertia: float, tau: float, duration: float, segment: float, rate: float) -> float:
    """The CRLB of I alone for a balanced rotor under a constant torque τ, θ and ω measured, the
    initial angle and speed of every segment projected out: per segment (t from its start, one
    sample every 1/rate) the columns are ∂θ/∂I = −τt²/(2I²), ∂ω/∂I = −τt/I² against the nuisance
    (θ₀: 1, 0) and (ω₀: t, 1), each weighted by 1/σ."""
    per = round(segment * rate)
    t = np.arange(1, per + 1) / rate
    s = np.concatenate([-tau * t ** 2 / (2 * inertia ** 2) / SIGMA["angle"], -tau * t / inertia ** 2 / SIGMA["speed"]])
    N = np.column_stack([np.concatenate([np.ones_like(t) / SIGMA["angle"], 0 * t]),
                         np.concatenate([t / SIGMA["angle"], np.ones_like(t) / SIGMA["speed"]])])
    perp = s - N @ np.linalg.lstsq(N, s, rcond=None)[0]
    return 1.0 / math.sqrt(round(duration / segment) * float(perp @ perp))


def test_crlb_of_a_rotor_inertia_matches_its_closed_form(tmp_path: Path) -> None:
    """A balanced rotor (centre of mass on the pivot, no friction) under a constant torque: the
    bound of its inertia from the replayed sensitivities equals the closed form; its mass moves
    nothing measured (σ inf); and a torque bias b enters only as (τ + b)/I, so ∂y/∂b = −(I/τ)·∂y/∂I:
    ρ(I, b) = −1."""
    tau, duration, segment = 0.4, 0.4, 0.1
    mech = load_mechanism(_rotor(tmp_path, 0.0, 0.0))
    ident = identify(_config(False), mech, _rig(tau, 0.0), duration=duration, segment=segment).ident
    inertia = ident.unknowns[ident.index("bar.inertia")]
    assert inertia.sd == pytest.approx(_closed_form_sd(0.02, tau, duration, segment, 1000.0), rel=0.005)
    assert ident.unknowns[ident.index("bar.mass")].sd == math.inf
    rho = ident.correlation[ident.index("bar.inertia"), ident.index("motor_torque.bias")]
    assert rho == pytest.approx(-1, abs=1e-3)


@pytest.fixture(scope="module")
def slider_crank() -> object:
    return identify(CoreConfig(), load_mechanism(bundled_slider_crank()), duration=1.0)


def test_slider_crank_default_augmentation(slider_crank: object) -> None:
    """The default augmentation (torque bias, piston mass) is identifiable; the torque bias is the
    main-bearing friction's stand-in (confusable, as intended); the piston mass is not confusable
    with the rod mass but absorbs part of a rod-mass change: about the rod's translating share
    (centre of mass at mid-length: 0.5 kg per kg in the two-mass model; the field saw 1.70 kg after
    +0.4 kg of rod, 0.5 kg per kg)."""
    checks = {a.name: a for a in slider_crank.augmented}  # type: ignore[attr-defined]
    bias, mass = checks["motor_torque.bias"], checks["piston.mass"]
    assert bias.identifiable and mass.identifiable
    assert "main_bearing.viscous_friction" in [x.name for x in bias.confusable]
    assert not mass.confusable
    ident = slider_crank.ident  # type: ignore[attr-defined]
    rho = ident.correlation[ident.index("piston.mass"), ident.index("rod.mass")]
    assert 0.2 < rho < 0.95
    from mbsd_twin.estimation.identifiability import check
    rod = next(x for x in check(ident, {"motor_torque.bias": 0.5, "piston.mass": 0.2}, nearest=12)[1].nearest
               if x.name == "rod.mass")
    assert 0.4 < rod.gain < 0.75, rod
    assert ident.unknowns[ident.index("piston.inertia")].sd == math.inf  # the piston does not turn


def test_cli_on_the_shipped_pendulum(capsys: pytest.CaptureFixture[str]) -> None:
    cfg, rig = ROOT / "examples/rigs/pendulum_twin.toml", ROOT / "examples/rigs/pendulum_rig.toml"
    import os
    here = os.getcwd()
    os.chdir(ROOT)  # the config's mechanism path is relative to the repository
    try:
        assert main(["twin", "identify", "--config", str(cfg), "--rig", str(rig), "--duration", "0.5", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert main(["twin", "identify", "--config", str(cfg), "--rig", str(rig), "--duration", "0.3"]) == 0
        text = capsys.readouterr().out
    finally:
        os.chdir(here)
    names = [u["name"] for u in data["unknowns"]]
    assert names == ["bar.mass", "bar.inertia", "pivot.viscous_friction", "motor_torque.bias"]
    assert data["augmented"][0]["name"] == "motor_torque.bias" and data["augmented"][0]["identifiable"]
    assert data["confusable"] == []
    assert "motor_torque.bias" in text and "CRLB σ" in text and "yes" in text


def test_cli_errors_name_the_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "twin.toml"
    bad.write_text('[[core.augment]]\nname = "piston.colour"\nsigma = 1.0\n')
    assert main(["twin", "identify", "--config", str(bad), "--duration", "0.1"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "[core] augment" in err and "piston.colour" in err
    assert main(["twin", "identify", "--config", str(bad), "--duration", "-1"]) == 2
    assert "--duration" in capsys.readouterr().err
