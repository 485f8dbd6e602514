"""Rig onboarding (docs/connect-your-rig.md): the synthetic rig on a mechanism other than the slider
crank (the packaged driven pendulum) with its own channel names, noise and faults, read from a rig
file; a twin running that mechanism flags an injected torque bias (and estimates its size) and stays
quiet on the healthy run; the example publisher feeds a twin through a real mosquitto."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mbsd_twin.model.loader import load_mechanism
from mbsd_twin.rig.faults import RigFault, parse_fault
from mbsd_twin.rig.file import RigFileError, load_rig_file
from mbsd_twin.rig.messages import message_plan
from mbsd_twin.rig.synthetic import Trajectory, stream
from mbsd_twin.twin.config.file import load_config
from mbsd_twin.twin.core import TwinCore
from mbsd_twin.twin.protocol import encode, parse_sensor

RIG = "examples/rigs/pendulum_rig.toml"
TWIN = "examples/rigs/pendulum_twin.toml"
RIG_FILE = load_rig_file(RIG)
MECH = load_mechanism(RIG_FILE.mechanism)
# the bar: m = 1 kg, L = 0.5 m, inertia about the pin m L²/3, pivot viscous friction c = 0.02 N·m·s/rad
M, L, C, G = 1.0, 0.5, 0.02, 9.81
BIAS = 0.3  # N·m: the injected unmeasured torque
ON = 3.0  # s


def _traj(*faults: RigFault, **over: Any) -> Trajectory:
    return Trajectory(MECH, dataclasses.replace(RIG_FILE.config, faults=faults, **over))


def test_rig_file_reads_the_pendulum_rig() -> None:
    c = RIG_FILE.config
    assert RIG_FILE.mechanism.endswith("mbsd_twin/data/mechanisms/pendulum_driven.toml")
    assert c.asset == "pd-01" and c.channels["angle"] == "bar.theta" and c.noise["fx"] == 0.05
    assert c.drive == "motor_torque" and c.drive_speed == "" and c.mismatch == {} and RIG_FILE.duration == 20.0


def test_pendulum_rig_obeys_its_equation_of_motion() -> None:
    """The rig's truth against the pendulum's own equation of motion (derived by hand, not by the
    engine): (m L²/3)·α = τ + bias − m g (L/2) cos θ − c ω, with the channels as named in the rig file
    and the input bias acting from its onset sample while the torque channel reads the command."""
    tr = _traj(RigFault("input_bias", 0.25, "motor_torque", BIAS)).truth(0, 500)
    theta, omega, tau = tr["angle"], tr["speed"], tr["torque"]
    bias = np.where(np.arange(500) >= 250, BIAS, 0.0)
    alpha = (tau + bias - M * G * L / 2 * np.cos(theta) - C * omega) / (M * L * L / 3)
    np.testing.assert_allclose(tr["bar.alpha"], alpha, atol=1e-6)
    np.testing.assert_array_equal(theta, tr["bar.theta"])
    assert np.ptp(theta) > 0.5 and np.ptp(tau) > 0.9  # it swings, driven by a ±1 N·m torque
    # the pin force on the bar: m·(centre-of-mass acceleration) − gravity
    ax = -L / 2 * (alpha * np.sin(theta) + omega**2 * np.cos(theta))
    np.testing.assert_allclose(tr["fx"], M * ax, atol=1e-6)


def test_sensor_drift_and_dropout() -> None:
    """drift adds size·(t − onset) to its channel from the onset sample; dropout drops the messages
    whose first sample lies in its window (and the expected gap count follows)."""
    cfg = dataclasses.replace(RIG_FILE.config, faults=(parse_fault("drift@0.1:angle+0.5"),
                                                       parse_fault("dropout@0.2:sensors=0.1")))
    traj = Trajectory(MECH, cfg)
    got, true = traj.samples(0, 300)["angle"], traj.truth(0, 300)["angle"]
    k = np.arange(300)
    np.testing.assert_allclose(got - true, np.where(k >= 100, 0.5 * (k / 1000 - 0.1), 0.0), atol=1e-15)
    assert message_plan(cfg, 20, 0.0, 5) == {10: "drop", 11: "drop", 12: "drop", 13: "drop", 14: "drop"}


def _twin_run(traj: Trajectory, duration: float) -> tuple[list[dict[str, Any]], dict[str, list[float]], Any]:
    core = TwinCore(load_config(TWIN, env={}).core, MECH)
    alarms, est = [], {"t": [], "bias": [], "sd": []}
    for m in stream(traj, duration=duration):
        for o in core.step(parse_sensor(encode(m).encode(), "pd-01", 1 << 22), 1):  # type: ignore[arg-type]
            p = json.loads(o.payload)
            if o.topic.endswith("/alarms"):
                alarms.append(p)
            elif o.topic.endswith("/estimates"):
                est["t"] += [p["t0"] + i * p["dt"] for i in range(p["n"])]
                est["bias"] += p["ch"]["motor_torque.bias"]
                est["sd"] += p["ch"]["motor_torque.bias.sd"]
    return alarms, est, core


def test_twin_flags_a_torque_bias_on_the_pendulum_and_not_the_healthy_run() -> None:
    healthy, est, core = _twin_run(_traj(), 6.0)
    assert healthy == [] and dict(core.stats["resync"]) == {"start": 1}
    assert abs(np.mean(est["bias"][-1000:])) < 0.01  # no bias where there is none (σ of the noise: 2 mN·m)
    alarms, est, core = _twin_run(_traj(RigFault("input_bias", ON, "motor_torque", BIAS)), 6.0)
    raised = [a for a in alarms if a["event"] == "raised"]
    print("alarms", [(a["alarm"], a["t"], a.get("onset"), a.get("size")) for a in raised])
    assert raised and all(a["source"] == "change" for a in raised)
    assert all(ON <= a["t"] < ON + 0.05 and a["onset"] >= ON - 0.01 for a in raised)  # within 50 ms of the fault
    assert "change:motor_torque.bias" in {a["alarm"] for a in raised}
    t, bias = np.array(est["t"]), np.array(est["bias"])
    assert abs(np.mean(bias[t > ON + 1.0]) - BIAS) < 0.01  # the filter finds the injected 0.3 N·m
    assert abs(np.mean(bias[(t > 1.0) & (t < ON)])) < 0.01


def test_rig_file_errors_name_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "rig.toml"
    bad.write_text('rate = "fast"\nspeeds = 3\nfaults = ["wear@1:x*2"]\n[noise]\nangle = -1\n[channels]\nangle = 3\n')
    with pytest.raises(RigFileError) as err:
        load_rig_file(bad)
    text = str(err.value)
    assert text.startswith(f"{bad}: 5 rig file problem(s)")
    for part in ("rate: expected float, got 'fast'", "unknown key 'speeds'",
                 "faults[0]: bad rig fault spec 'wear@1:x*2'", "[noise] angle: expected a finite number >= 0, got -1",
                 "[channels] angle: expected a model output"):
        assert part in text, part
    for cfg, message in (
            (dict(channels={"angle": "bar.thetaa"}), "rig channel 'angle' = 'bar.thetaa': neither an output of"),
            (dict(noise={"theta": 1e-3}), "rig noise.theta: not a rig channel; channels are: angle, speed"),
            (dict(drive="gas_force"), "rig drive 'gas_force': no such input port of 'pendulum-driven'"),
            (dict(mismatch={"piston.mass": 1.5}), "rig mismatch 'piston.mass': no such parameter"),
            (dict(faults=(parse_fault("stuck@1:omega"),)), "unknown channel 'omega'; the rig's channels are: angle"),
            (dict(faults=(parse_fault("input_bias@1:piston_force+1"),)), "no input port 'piston_force'")):
        with pytest.raises(ValueError, match=re.escape(message)):
            Trajectory(MECH, dataclasses.replace(RIG_FILE.config, **cfg))


def test_rig_options_override_the_rig_file() -> None:
    """``mbsd-twin rig --rig FILE`` options win over the file: scalars, the channel map (noise kept
    only for the channels still published), noise entries, drive ``none``, faults added to the file's."""
    from mbsd_twin.cli import build_parser
    from mbsd_twin.twin.cli import _rig_config

    args = build_parser().parse_args(["rig", "--rig", RIG, "--asset", "pd-02", "--rate", "500", "--channel",
                                      "angle=bar.theta", "--channel", "fx=pivot.fx", "--noise", "fx=0.2",
                                      "--drive", "none", "--fault", "drift@1.0:angle+0.01"])
    rig_file, cfg = _rig_config(args)
    assert rig_file.duration == 20.0 and cfg.asset == "pd-02" and cfg.rate == 500.0 and cfg.batch == 20
    assert cfg.channels == {"angle": "bar.theta", "fx": "pivot.fx"} and cfg.noise == {"angle": 1e-3, "fx": 0.2}
    assert cfg.drive == "" and cfg.torque_amp == 1.0 and cfg.faults == (parse_fault("drift@1.0:angle+0.01"),)


# slow: every message of the real-time rig asserted processed; beside the parallel suite on a slow
# 2-core machine the twin processed 143-171 of 200 (this stop's CI run and a helper's)
@pytest.mark.slow
def test_rig_command_on_the_pendulum_flags_through_a_real_broker(broker: Any, tmp_path: Path) -> None:
    """``mbsd-twin rig --rig pendulum_rig.toml --fault input_bias@…`` against a twin service running the
    pendulum twin file, both through mosquitto: every message accepted, the change alarm raised."""
    from mbsd_twin.cli import main
    from mbsd_twin.twin.service import TwinService

    over = {"broker": {"url": broker.url, "protocol": broker.protocol}}
    svc = TwinService(load_config(TWIN, env={}, overrides=over))
    alarms: list[dict[str, Any]] = []
    starts: list[float] = []  # rig time of each state message's first sample

    def tap(out: Any) -> None:
        if out.topic.endswith("/alarms"):
            alarms.append(json.loads(out.payload))
        elif out.topic.endswith("/state"):
            starts.append(json.loads(out.payload)["t0"])

    svc.taps.append(tap)
    with svc:
        assert svc.connected.wait(10)
        code = main(["rig", "--rig", RIG, "--broker", broker.url, "--protocol", str(broker.protocol), "--duration",
                     "4", "--fault", "input_bias@2.0:motor_torque+0.3", "--manifest", str(tmp_path / "m.json")])
        _settle(svc)
        h = svc.health()["counters"]
    manifest = json.loads((tmp_path / "m.json").read_text())
    assert code == 0 and manifest["rig_faults"][0]["spec"] == "input_bias@2.0:motor_torque+0.3"
    assert h["received"] == h["batches"] == 200 and h["invalid"] == {} and h["missing_channels"] == 0
    raised = [a for a in alarms if a["event"] == "raised"]
    t_fault = min(starts) + 2.0  # the rig's epoch is its first sample
    print("alarms", [(a["alarm"], a["t"] - t_fault, a.get("onset", 0) - t_fault) for a in raised])
    assert raised and all(a["source"] == "change" and t_fault <= a["t"] < t_fault + 0.05 for a in raised)
    assert "change:motor_torque.bias" in {a["alarm"] for a in raised}


def _settle(svc: Any, timeout: float = 20.0) -> None:
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end and (svc.batches or svc.health()["counters"].get("received", 0)
                                        > svc.health()["counters"].get("batches", 0)):
        time.sleep(0.05)
    time.sleep(0.3)


def test_example_publisher_feeds_a_twin(broker: Any, tmp_path: Path) -> None:
    """examples/rig_publisher.py publishes a CSV (the pendulum rig's samples with noise, channel names
    of the twin file) through mosquitto; the twin accepts every message and tracks the pendulum."""
    from mbsd_twin.twin.service import TwinService

    msgs = stream(_traj(), duration=3.0)
    csv = tmp_path / "samples.csv"
    names = list(msgs[0]["ch"])
    lines = ["t," + ",".join(names), "# units: s, rad, rad/s, N, N, N.m"]
    for m in msgs:
        lines += [",".join(repr(v) for v in [m["t0"] + k * m["dt"], *(m["ch"][c][k] for c in names)])
                  for k in range(m["n"])]
    csv.write_text("\n".join(lines) + "\n")
    over = {"broker": {"url": broker.url, "protocol": broker.protocol}}
    with TwinService(load_config(TWIN, env={}, overrides=over)) as svc:
        assert svc.connected.wait(10)
        out = subprocess.run([sys.executable, "examples/rig_publisher.py", str(csv), "--broker", broker.url,
                              "--asset", "pd-01"], capture_output=True, text=True, timeout=60)
        _settle(svc)
        h = svc.health()["counters"]
    assert out.returncode == 0, out.stderr
    # every message received; each processed or shed by the overload policy (a loaded machine)
    assert h["received"] == h["batches"] + h["dropped_overload"] == len(msgs) == 150, h
    assert h["invalid"] == {} and h["missing_channels"] == 0 and h.get("rig_restart", 0) == 0
    assert dict(h["resync"]) == {"start": 1}, h["resync"]  # tracked throughout: never re-initialised
