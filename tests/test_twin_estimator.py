"""The motor-torque virtual sensor (mbsd_twin/twin/estimator.py): inverse dynamics of the model along
the measured motion, against a closed form, the engine's inverse_dynamics and the synthetic rig's
true (hidden) torque."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mbsd_twin import inverse_dynamics, load_mechanism, loads_mechanism
from mbsd_twin.twin.config import CoreConfig
from mbsd_twin.twin.core import TwinCore
from mbsd_twin.twin.estimator import DRIVER, TorqueEstimator, fit_filters
from mbsd_twin.twin.protocol import SensorBatch, encode, parse_sensor
from mbsd_twin.twin.rig import MessageSource, RigConfig, Trajectory

MECH = "examples/mechanisms/slider_crank.toml"
# a crank on a fixed pivot: J_O = 0.01 + 2·0.1² = 0.03 kg·m², m·g·r = 2·9.81·0.1, friction 0.05
CRANK = """format = "mbsd-twin/1"
name = "crank"
gravity = [0.0, -9.81]
[[bodies]]
name = "crank"
mass = 2.0
inertia = 0.01
cg = [0.1, 0.0]
[[joints]]
name = "pivot"
type = "revolute"
bodies = ["ground", "crank"]
points = [[0.0, 0.0], [0.0, 0.0]]
viscous_friction = 0.05
[[loads]]
name = "motor"
type = "torque"
body = "crank"
input = "tau"
"""


def _batch(seq: int, t0: float, dt: float, ch: dict[str, list[float]]) -> SensorBatch:
    n = len(next(iter(ch.values())))
    got = parse_sensor(encode({"v": 1, "asset": "a", "seq": seq, "t0": t0, "dt": dt, "n": n, "ch": ch}).encode(),
                       "a", 1 << 20)
    assert isinstance(got, SensorBatch)
    return got


def test_fit_filters_are_exact_for_quadratics() -> None:
    dt = 1e-3
    tau = (np.arange(7) - 6) * dt
    y = 0.3 - 2.0 * tau + 40.0 * tau**2
    assert fit_filters(7, 6, dt) @ y == pytest.approx([0.3, -2.0, 80.0], rel=1e-9)
    assert fit_filters(7, 2, dt) @ y == pytest.approx([0.3 + 8e-3 + 40 * 16e-6, -2.0 - 0.32, 80.0], rel=1e-9)
    assert fit_filters(1, 0, dt) @ [5.0] == pytest.approx([5.0, 0.0, 0.0])


@pytest.mark.parametrize("hold", [1, 5])
def test_crank_closed_form(hold: int) -> None:
    """θ = θ0 + ω0·t + α·t²/2 (noise-free): τ = J_O·α + c·ω + m·g·r·cos θ at every output sample."""
    est = TorqueEstimator(loads_mechanism(CRANK), "crank", "tau", 0.02, "theta", "omega", {"tau": "tau"})
    th0, om0, al, dt, t_start = 0.4, 3.0, -25.0, 1e-3, 1.767e9
    for i in range(4):
        k = np.arange(20) + 20 * i
        t = k * dt
        b = _batch(i, t_start + 20 * i * dt, dt, {"theta": list(th0 + om0 * t + 0.5 * al * t * t),
                                                 "omega": list(om0 + al * t), "tau": [9.0] * 20})
        ends = list(range((b.n - 1) % hold, b.n, hold))
        got = est.estimate(b, ends)
        te = t[ends]
        want = 0.03 * al + 0.05 * (om0 + al * te) + 2.0 * 9.81 * 0.1 * np.cos(th0 + om0 * te + 0.5 * al * te**2)
        assert got == pytest.approx(list(want), abs=1e-9), i


def test_matches_engine_inverse_dynamics() -> None:
    """The estimator's fast path equals mbsd_twin.inverse_dynamics on its driven copy of the model."""
    mech = load_mechanism(MECH)
    est = TorqueEstimator(mech, "crank", "motor_torque", 0.02, "theta", "omega", {"tau_m": "motor_torque"})
    src = MessageSource(Trajectory(mech, RigConfig(noise={})), 50.0)
    for i in range(3):
        b = parse_sensor(encode(src.message(i)).encode(), "sc-01", 1 << 20)
        assert isinstance(b, SensorBatch)
        got = est.estimate(b, list(range(b.n)))
    ref = inverse_dynamics(est.system, est._cur["t"])[f"{DRIVER}.effort"]
    assert np.max(np.abs(np.array(got) - ref)) < 1e-9


def _run_core(traj: Trajectory, seconds: float, tau_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Stream ``seconds`` of the rig through a TwinCore; (estimate, applied motor_torque) per sample."""
    core = TwinCore(CoreConfig(resync_bounds={"theta": 0.01}), load_mechanism(MECH))
    src = MessageSource(traj, 1000.0)
    est, applied = [], []
    for i in range(int(seconds * 50)):
        msg = src.message(i)
        msg["ch"]["tau_m"] = [tau_scale * x for x in msg["ch"]["tau_m"]]
        b = parse_sensor(encode(msg).encode(), "sc-01", 1 << 20)
        virtual = [json.loads(o.payload) for o in core.step(b) if o.topic.endswith("/virtual")][0]
        est += virtual["ch"]["motor_torque.estimate"]
        applied += virtual["ch"]["motor_torque"]
    assert core.stats["estimate_failure"] == 0
    return np.array(est), np.array(applied)


def test_against_the_rigs_true_torque() -> None:
    """Noisy sensors (θ 2e-3 rad, ω 0.01 rad/s at 1 kHz), torque updated every 1 ms by the rig's
    speed controller; the twin's model has the rig's true parameters. The estimate uses only θ and ω."""
    traj = Trajectory(load_mechanism(MECH), RigConfig(mismatch={}, knot=0.001))
    est, applied = _run_core(traj, 3.0)
    true = traj.samples(0, len(est))["tau_m"]
    err = (est - true)[100:]  # after the first 0.1 s (start-up transient of the rig)
    rms_true = float(np.sqrt(np.mean(true[100:] ** 2)))
    print(f"torque estimate: error mean {err.mean():.4f} rms {np.sqrt(np.mean(err**2)):.4f} "
          f"p99 {np.percentile(np.abs(err), 99):.4f} N.m; true torque rms {rms_true:.3f} N.m, "
          f"range {true.min():.2f} .. {true.max():.2f} N.m")
    assert abs(err.mean()) < 0.01 and math.sqrt(np.mean(err**2)) < 0.08
    assert np.percentile(np.abs(err), 99) < 0.3
    # the measured-torque channel is the noisy sensor; the estimate is independent of it
    est_faulty, applied_faulty = _run_core(traj, 1.0, tau_scale=0.5)
    assert np.array_equal(est_faulty, est[:len(est_faulty)])
    assert np.allclose(applied_faulty, 0.5 * applied[:len(applied_faulty)])


def test_rejects_a_port_that_is_not_a_torque_on_the_body() -> None:
    mech = load_mechanism(MECH)
    with pytest.raises(ValueError, match="piston_force"):
        TorqueEstimator(mech, "crank", "piston_force", 0.02, "theta", "omega", {})
    with pytest.raises(ValueError, match="torque_estimate"):
        TwinCore(CoreConfig(torque_estimate="nope"), mech)


def test_recordings_from_before_the_estimate_replay_without_it(tmp_path) -> None:
    """A header without torque_estimate/estimate_window (older recordings) replays identically."""
    from pathlib import Path

    from mbsd_twin.twin.recorder import FORMAT, Recorder, replay

    cfg = CoreConfig(torque_estimate="", solver_method="RK45")
    header = {k: v for k, v in cfg.to_dict().items() if k not in ("torque_estimate", "estimate_window")}
    path = str(tmp_path / "old.jsonl")
    rec = Recorder(path, 1 << 20)
    rec({"k": "header", "format": FORMAT, "core": header, "mechanism": MECH, "mechanism_toml": Path(MECH).read_text()})
    core = TwinCore(cfg, load_mechanism(MECH), rec)
    src = MessageSource(Trajectory(load_mechanism(MECH), RigConfig()), 10.0)
    for i in range(3):
        outs = core.step(parse_sensor(encode(src.message(i)).encode(), "sc-01", 1 << 20))  # type: ignore[arg-type]
    rec.close()
    assert "motor_torque.estimate" not in [o for o in outs if o.topic.endswith("/virtual")][0].payload
    res = replay(path)
    assert res.identical and res.recorded == 10  # 3 × (state, residuals, virtual) + latest
