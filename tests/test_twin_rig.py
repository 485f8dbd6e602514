"""The synthetic rig's truth: the continuous motor torque against an independent closed-form
integration of the slider crank, and every injected fault against what it must change (nothing
before its onset sample; after it, what a lever model of the slider crank or the fault's own
definition predicts). Fault specs of the CLI and their errors."""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from mbsd_twin.model.loader import load_mechanism
from mbsd_twin.rig.faults import RigFault, check_faults, parse_fault
from mbsd_twin.rig.synthetic import RigConfig, Trajectory, fault_manifest, stream

MECH = "examples/mechanisms/slider_crank.toml"
MECHANISM = load_mechanism(MECH)
ON = 0.5  # s: onset of the faults below (sample 500 at 1 kHz, a knot)


def _traj(*faults: RigFault, **cfg: Any) -> Trajectory:
    return Trajectory(MECHANISM, RigConfig(mismatch={}, faults=faults, **cfg))


_CLEAN: dict[str, np.ndarray] = {}


def _clean(n: int) -> dict[str, np.ndarray]:
    """The fault-free run (model-exact), computed once."""
    if len(_CLEAN.get("t", ())) < n:
        _CLEAN.clear()
        _CLEAN.update(_traj().truth(0, n))
    return {k: v[:n] for k, v in _CLEAN.items()}


# ----------------------------------------------------------- closed-form slider crank
def _lever(theta: float) -> tuple[list[tuple[float, float, float, float]], float]:
    """Each body coordinate's (mass or inertia, d/dθ, d²/dθ²) and the generalised gravity force of
    the slider crank of slider_crank.toml (crank r = 0.1 with its centre of mass at a = 0.05, rod
    l = 0.3 with its centre of mass at b = 0.15 from the crank pin, piston on the x axis)."""
    m = {b.name: b for b in MECHANISM.bodies}
    r, a, ln, b, g = 0.1, m["crank"].cg[0], 0.3, m["rod"].cg[0], 9.81
    s, c = math.sin(theta), math.cos(theta)
    u, du, ddu = r * s, r * c, -r * s
    w = math.sqrt(ln * ln - u * u)
    dw = -u * du / w
    sp, cp = -u / ln, w / ln  # rod angle φ: sin, cos
    dp = -du / w
    ddp = -(ddu * w - du * dw) / (w * w)
    terms = [(m["crank"].mass, -a * s, -a * c), (m["crank"].mass, a * c, -a * s), (m["crank"].inertia, 1.0, 0.0),
             (m["rod"].mass, -r * s - b * sp * dp, -r * c - b * (cp * dp * dp + sp * ddp)),
             (m["rod"].mass, r * c + b * cp * dp, -r * s + b * (-sp * dp * dp + cp * ddp)),
             (m["rod"].inertia, dp, ddp),
             (m["piston"].mass, -r * s - ln * sp * dp, -r * c - ln * (cp * dp * dp + sp * ddp))]
    q_grav = -g * (m["crank"].mass * a * c + m["rod"].mass * (r * c + b * cp * dp))
    return [(k, j, h, 0.0) for k, j, h in terms], q_grav


def _rhs(tau: Any, friction: float) -> Any:
    def f(t: float, y: np.ndarray) -> list[float]:
        terms, q_grav = _lever(y[0])
        mass = sum(k * j * j for k, j, _, _ in terms)
        quad = sum(k * j * h for k, j, h, _ in terms)
        return [y[1], (tau(t) - friction * y[1] + q_grav - quad * y[1] ** 2) / mass]
    return f


def test_continuous_torque_against_an_independent_integration() -> None:
    """2 s from rest: the rig's crank angle agrees to 1e-7 rad with scipy's DOP853 (rtol 1e-12) of the
    closed-form 1-DOF slider crank, M(θ)·α + Σ m·J·H·ω² = τ(t) − c·ω + Q_g(θ), driven by the
    torque ramp through the rig's knot values; tau_m is that ramp at every sample, and each knot's
    new command is the controller's law applied to the true speed at the knot."""
    n, spk = 2001, 10
    tr = _clean(n)
    t, tau = tr["t"], tr["tau_m"]
    knots = np.arange(0, n, spk)
    assert np.allclose(tau, np.interp(t, t[knots], tau[knots]), rtol=0, atol=1e-12)  # linear between knots
    ref = 10.0 + 2.0 * np.sin(2 * math.pi * 0.5 * t[knots[:-1]])
    command = 0.05 * ref + 0.5 * (ref - tr["omega"][knots[:-1]])
    assert np.allclose(tau[knots[1:]], command, rtol=0, atol=1e-12)  # the ramp reaches it one knot later
    assert tau[0] == tau[spk] == pytest.approx(5.5)

    theta = np.empty(n)
    y = np.array([tr["theta"][0], tr["omega"][0]])
    for j in knots[:-1]:
        seg = slice(j, j + spk + 1)
        sol = solve_ivp(_rhs(lambda s, j=j: np.interp(s, t[[j, j + spk]], tau[[j, j + spk]]), 0.05),
                        (t[j], t[j + spk]), y, method="DOP853", rtol=1e-12, atol=1e-13, t_eval=t[seg])
        theta[seg], y = sol.y[0], sol.y[:, -1]
    err = np.abs(theta - tr["theta"])
    print(f"rig vs closed form over 2 s: max |Δθ| {err.max():.2e} rad (θ reaches {theta[-1]:.2f} rad)")
    assert err.max() < 1e-7 and theta[-1] > 15


def _before_is_identical(tr: dict[str, np.ndarray], k_on: int) -> dict[str, np.ndarray]:
    ref = _clean(len(tr["t"]))
    for name in ("crank.theta", "crank.omega", "crank.alpha", "piston.x", "piston.ax", "main_bearing.fx",
                 "main_bearing.fy", "tau_m"):
        assert np.array_equal(tr[name][:k_on], ref[name][:k_on]), name  # bit-identical before the onset
        assert not np.array_equal(tr[name][k_on + 20:], ref[name][k_on + 20:]), name
    for name in ("crank.theta", "crank.omega", "piston.x", "piston.vx", "rod.theta"):
        assert tr[name][k_on] == ref[name][k_on], name  # the state at onset is the fault-free one
    return ref


def _lever_at(ref: dict[str, np.ndarray], k: int) -> tuple[float, float, float, float]:
    """(M, s', s'', ω) at sample k of a run: generalised mass from the kinetic energy (M = 2T/ω²),
    the piston's lever s' = dx/dθ = vx/ω and s'' from ax = s'·α + s''·ω²."""
    w, alpha = ref["crank.omega"][k], ref["crank.alpha"][k]
    s1 = ref["piston.vx"][k] / w
    return 2 * ref["energy.kinetic"][k] / w**2, s1, (ref["piston.ax"][k] - s1 * alpha) / w**2, w


def test_mass_fault() -> None:
    """piston.mass × 1.2 at 0.5 s: before, the motion is the fault-free one bit for bit; at onset the
    crank acceleration jumps to (M·α − Δm·s'·s''·ω²)/(M + Δm·s'²) (same state and torque); the true
    parameter is reported over time."""
    k_on = 500
    traj = _traj(RigFault("mass", ON, "piston.mass", 1.2, scale=True))
    tr = traj.truth(0, 1000)
    ref = _before_is_identical(tr, k_on)
    M, s1, s2, w = _lever_at(ref, k_on)
    dm = 0.2 * 1.5
    predicted = (M * ref["crank.alpha"][k_on] - dm * s1 * s2 * w**2) / (M + dm * s1**2)
    print(f"mass fault: α {ref['crank.alpha'][k_on]:.6f} → {tr['crank.alpha'][k_on]:.6f} rad/s² "
          f"(lever model {predicted:.6f}, relative difference {tr['crank.alpha'][k_on] / predicted - 1:.1e})")
    assert tr["crank.alpha"][k_on] == pytest.approx(predicted, rel=1e-10)
    assert abs(tr["crank.alpha"][k_on] - ref["crank.alpha"][k_on]) > 1e-3
    assert tr["tau_m"][k_on] == ref["tau_m"][k_on]
    assert list(tr["param:piston.mass"][[0, k_on - 1, k_on, 999]]) == [1.5, 1.5, pytest.approx(1.8), pytest.approx(1.8)]
    assert traj.parameters(0.4999) == {} and traj.parameters(0.5) == {"piston.mass": pytest.approx(1.8)}


def _integral(y: np.ndarray, dt: float = 1e-3) -> float:
    """Simpson over sample pairs (the torque's kinks, at knots every 10 samples, fall between pairs)."""
    assert len(y) % 2 == 1
    return float(np.sum(y[:-1:2] + 4 * y[1::2] + y[2::2]) * dt / 3)


def _net_input_work(tr: dict[str, np.ndarray], s: slice) -> float:
    """Motor work minus the bearing's viscous loss (c = 0.05 N·m·s/rad) over the samples ``s``."""
    w = tr["crank.omega"][s]
    return _integral(tr["tau_m"][s] * w - 0.05 * w**2)


def _energy_change(tr: dict[str, np.ndarray], s: slice) -> float:
    e = tr["energy.kinetic"][s] + tr["energy.gravitational"][s]
    return float(e[-1] - e[0])


def test_friction_fault_dissipates_t_omega() -> None:
    """+0.3 N·m at main_bearing from 0.5 s: the unmeasured torque is −0.3 (ω > 0); the mechanical
    energy balance from the samples (Simpson at 1 kHz) shows exactly the extra loss 0.3·∫|ω| dt."""
    k_on, T = 500, 0.3
    tr = _traj(RigFault("friction", ON, "main_bearing", T)).truth(0, 1001)
    _before_is_identical(tr, k_on)
    load = tr["_rig_fault_0"]
    assert np.all(load[:k_on] == 0) and np.all(load[k_on:] == -T)
    s = slice(k_on, None)
    w = tr["crank.omega"][s]
    assert w.min() > 1.0

    lost = _net_input_work(tr, s) - _energy_change(tr, s)
    print(f"friction fault: lost {lost:.6f} J over 0.5 s, T·∫|ω|dt = {T * _integral(np.abs(w)):.6f} J, "
          f"difference {lost - T * _integral(np.abs(w)):.1e} J")
    assert lost == pytest.approx(T * _integral(np.abs(w)), abs=1e-6)


def test_friction_ramp_grows_linearly() -> None:
    """0.3 N·m reached over a 0.4 s ramp from 0.5 s: the unmeasured torque at each sample is
    −0.3·(t − 0.5)/0.4 until 0.9 s, −0.3 after (ω > 1 rad/s: tanh(ω/1e-3) = 1); the energy lost to
    it is ∫ T(t)·|ω| dt."""
    k_on, T, ramp = 500, 0.3, 0.4
    tr = _traj(RigFault("friction", ON, "main_bearing", T, ramp=ramp)).truth(0, 1001)
    _before_is_identical(tr, k_on)
    t, load = tr["t"], tr["_rig_fault_0"]
    assert tr["crank.omega"][k_on:].min() > 1.0
    assert np.all(load[:k_on] == 0)
    assert np.allclose(load[k_on:], -T * np.minimum(1.0, (t[k_on:] - ON) / ramp), rtol=0, atol=1e-15)
    s = slice(k_on, None)
    lost = _net_input_work(tr, s) - _energy_change(tr, s)
    assert lost == pytest.approx(_integral(-load[s] * np.abs(tr["crank.omega"][s])), abs=1e-5)


def test_load_pulses() -> None:
    """20 N on the piston, 30 ms every 0.5 s from 0.5 s: the force is on over [0.5, 0.53) and
    [1.0, 1.03); at the pulse's first sample the piston's acceleration jumps by F/m_eff with the
    lever model's m_eff = M/s'² (and the crank's by F·s'/M); the mechanical energy gains the pulses'
    work F·Δx over each pulse."""
    k_on, F = 500, 20.0
    tr = _traj(RigFault("load_pulses", ON, "piston", F, width=0.03, period=0.5)).truth(0, 1100)
    ref = _before_is_identical(tr, k_on)
    on = np.flatnonzero(tr["_rig_fault_0"])
    assert list(on) == [*range(500, 530), *range(1000, 1030)] and set(tr["_rig_fault_0"][on]) == {F}
    M, s1, _, _ = _lever_at(ref, k_on)
    jump = tr["piston.ax"][k_on] - ref["piston.ax"][k_on]
    print(f"load pulse: piston ax jump {jump:.6f} m/s², F/m_eff = {F * s1**2 / M:.6f} (m_eff {M / s1**2:.4f} kg, "
          f"relative difference {jump / (F * s1**2 / M) - 1:.1e})")
    assert jump == pytest.approx(F * s1**2 / M, rel=1e-10)
    assert tr["crank.alpha"][k_on] - ref["crank.alpha"][k_on] == pytest.approx(F * s1 / M, rel=1e-10)
    x = tr["piston.x"]
    pulses = F * (x[530] - x[500] + x[1030] - x[1000])
    s = slice(k_on, 1081)
    gained = _energy_change(tr, s) - _net_input_work(tr, s)
    print(f"load pulses: energy gained {gained:.7f} J, pulses' work F·Δx {pulses:.7f} J")
    assert abs(pulses) > 0.1 and gained == pytest.approx(pulses, abs=1e-6)


def test_encoder_offset_and_stuck() -> None:
    """theta + 0.02 rad and omega stuck from 0.5 s: measured − true = 0 before, the offset after; the
    stuck channel equals its true value at onset ever after; the motion and other channels are
    untouched (sensor faults do not feed back)."""
    k_on = 500
    traj = _traj(RigFault("encoder_offset", ON, "theta", 0.02), RigFault("stuck", ON, "omega"))
    meas, tr = traj.samples(400, 200), traj.truth(400, 200)
    assert np.array_equal(tr["theta"], _clean(600)["theta"][400:])
    i = k_on - 400
    assert np.array_equal(meas["theta"][:i], tr["theta"][:i])
    assert np.allclose(meas["theta"][i:] - tr["theta"][i:], 0.02, rtol=0, atol=1e-14)
    assert np.array_equal(meas["omega"][:i], tr["omega"][:i])
    assert np.all(meas["omega"][i:] == tr["omega"][i]) and np.ptp(tr["omega"][i:]) > 0.01
    for ch in ("tau_m", "f_x", "f_y"):
        assert np.array_equal(meas[ch], tr[ch])
    late = traj.samples(700, 3)  # a window after the onset still reads the frozen value
    assert np.all(late["omega"] == tr["omega"][i])


def test_stream_noise_and_manifest() -> None:
    """stream(): 0.5 s in 25 messages at the contract's layout; the theta noise is 1e-3 rad (sample
    std of measured − sensor values within 10 %); the manifest entry of each fault."""
    faults = (RigFault("encoder_offset", 0.2005, "theta", 0.02),)
    cfg = RigConfig(mismatch={}, faults=faults)
    traj = Trajectory(MECHANISM, cfg)
    msgs = stream(traj, duration=0.5, epoch=100.0)
    assert len(msgs) == 25 and [m["seq"] for m in msgs] == list(range(25)) and msgs[1]["t0"] == 100.02
    theta = np.concatenate([m["ch"]["theta"] for m in msgs])
    noise = theta - traj.samples(0, 500)["theta"]
    assert cfg.noise["theta"] == 1e-3 and np.std(noise) == pytest.approx(1e-3, rel=0.1)
    assert np.mean(noise[201:]) == pytest.approx(np.mean(noise[:201]), abs=3e-4)  # the offset is not in the noise
    assert np.mean(theta[201:] - traj.truth(201, 299)["theta"]) == pytest.approx(0.02, abs=3e-4)
    (entry,) = fault_manifest(cfg)
    assert entry | {"effective": 0} == {"kind": "encoder_offset", "onset": 0.2005, "target": "theta", "size": 0.02,
                                        "scale": False, "width": 0.03, "period": 0.5, "omega_s": 1e-3, "ramp": 0.0,
                                        "sample": 201,
                                        "effective": 0, "spec": "encoder_offset@0.2005:theta+0.02"}
    assert entry["effective"] == pytest.approx(0.201)


# ---------------------------------------------------------------------------- specs
@pytest.mark.parametrize("spec, fault", [
    ("mass@2.0:piston.mass*1.2", RigFault("mass", 2.0, "piston.mass", 1.2, scale=True)),
    ("mass@2:piston.mass=1.8", RigFault("mass", 2.0, "piston.mass", 1.8)),
    ("friction@3.0:main_bearing=0.3", RigFault("friction", 3.0, "main_bearing", 0.3)),
    ("friction@3.0:main_bearing=0.3,10", RigFault("friction", 3.0, "main_bearing", 0.3, ramp=10.0)),
    ("encoder_offset@4.0:theta+0.02", RigFault("encoder_offset", 4.0, "theta", 0.02)),
    ("encoder_offset@4.0:theta-0.02", RigFault("encoder_offset", 4.0, "theta", -0.02)),
    ("load_pulses@5.0:piston=20,0.03,0.5", RigFault("load_pulses", 5.0, "piston", 20.0, width=0.03, period=0.5)),
    ("stuck@6.0:omega", RigFault("stuck", 6.0, "omega")),
    ("input_bias@3.0:motor_torque+0.3", RigFault("input_bias", 3.0, "motor_torque", 0.3)),
    ("drift@2.0:theta-0.001", RigFault("drift", 2.0, "theta", -0.001)),
    ("dropout@4.0:sensors=0.5", RigFault("dropout", 4.0, "sensors", width=0.5)),
])
def test_fault_specs(spec: str, fault: RigFault) -> None:
    assert parse_fault(spec) == fault and parse_fault(fault.spec()) == fault


@pytest.mark.parametrize("spec, message", [
    ("mass@x:piston.mass*1.2", "onset 'x' is not a number"),
    ("mass@-1:piston.mass*1.2", "onset must be >= 0"),
    ("wear@1:piston.mass*1.2", "unknown kind 'wear'"),
    ("mass@1:piston.mass+1", "the form is mass@T:PARAM*FACTOR or mass@T:PARAM=VALUE"),
    ("stuck@1:omega=2", "the form is stuck@T:CHANNEL"),
    ("dropout@1:theta=0.5", "need target 'sensors'"),
    ("load_pulses@1:piston=20,0.03", "the form is load_pulses@T:BODY=N,WIDTH,PERIOD"),
    ("load_pulses@1:piston=20,0.6,0.5", "need 0 < width <= period"),
    ("friction@1:main_bearing=inf", "value 'inf' is not finite"),
    ("friction@1:main_bearing=0.3,-2", "ramp must be >= 0 s"),
    ("friction@1:main_bearing=0.3,2,1", "the form is friction@T:JOINT=N.m or friction@T:JOINT=N.m,RAMP_S"),
    ("friction", "expected KIND@ONSET:TARGET"),
])
def test_bad_fault_specs_are_named(spec: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_fault(spec)
    assert f"bad rig fault spec {spec!r}" in str(err.value) and message in str(err.value)


def test_unknown_targets_and_bad_config() -> None:
    for fault, message in ((RigFault("mass", 1, "piston.weight", 2.0), "unknown parameter 'piston.weight'"),
                           (RigFault("friction", 1, "guide", 0.3), "no revolute joint 'guide'"),
                           (RigFault("load_pulses", 1, "valve", 1.0), "no body 'valve'"),
                           (RigFault("stuck", 1, "speed"), "unknown channel 'speed'; the rig's channels are: theta")):
        with pytest.raises(ValueError, match=message):
            check_faults(MECHANISM, (fault,))
    with pytest.raises(ValueError, match="RigConfig.knot = 0.0105 s must be a whole number"):
        RigConfig(knot=0.0105).samples_per_knot()


def test_cli_specs() -> None:
    """``rig --fault/--noise/--mismatch`` parse into RigFaults and pairs; a bad spec exits 2 naming it."""
    from mbsd_twin.cli import build_parser

    p = build_parser()
    a = p.parse_args(["rig", "--fault", "mass@2.0:piston.mass*1.2", "--fault", "stuck@6.0:omega", "--noise",
                      "theta=1e-3", "--mismatch", "none"])
    assert a.fault == [RigFault("mass", 2.0, "piston.mass", 1.2, scale=True), RigFault("stuck", 6.0, "omega")]
    assert a.noise == [("theta", 1e-3)] and a.mismatch == ["none"]
    for argv, message in ((["--fault", "mass@2.0:piston.mass"], "bad rig fault spec 'mass@2.0:piston.mass'"),
                          (["--noise", "speed"], "bad noise spec 'speed': expected NAME=NUMBER (>= 0) or none"),
                          (["--channel", "angle"], "bad channel spec 'angle': expected NAME=OUTPUT or none"),
                          (["--mismatch", "piston.mass"], "bad mismatch spec 'piston.mass'")):
        with pytest.raises(SystemExit) as exc:
            _parse_quietly(p, ["rig", *argv], message)
        assert exc.value.code == 2


def _parse_quietly(p: argparse.ArgumentParser, argv: list[str], message: str) -> None:
    import contextlib
    import io

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            p.parse_args(argv)
    finally:
        assert message in err.getvalue(), err.getvalue()


def test_rig_command_manifest(broker: Any, tmp_path: Any) -> None:
    """``mbsd-twin rig`` with --fault/--noise/--mismatch streams to a broker and its manifest lists
    the injected faults with their onset and effective sample, the noise and the mismatch."""
    import json

    from mbsd_twin.cli import main

    path = tmp_path / "manifest.json"
    code = main(["rig", "--broker", broker.url, "--protocol", str(broker.protocol), "--mechanism", MECH,
                 "--duration", "0.2", "--fault", "mass@0.1:piston.mass*1.2", "--fault", "stuck@0.15:omega",
                 "--noise", "theta=0.002", "--mismatch", "none", "--manifest", str(path)])
    manifest = json.loads(path.read_text())
    assert code == 0 and manifest["messages"] == 10 and manifest["mismatch"] == {}
    assert manifest["noise"] == RigConfig().noise | {"theta": 0.002}
    assert [(f["spec"], f["onset"], f["sample"]) for f in manifest["rig_faults"]] == \
        [("mass@0.1:piston.mass*1.2", 0.1, 100), ("stuck@0.15:omega", 0.15, 150)]
