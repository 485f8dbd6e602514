"""Issue #30, item 4: plausibility by default. Every channel's limit is derived from the mechanism
(twin/plausible.py) instead of 1e6 in every unit, and one batch's solver work is bounded
(simulation/work.py). Every test here fails on 897160f: there ``tau_m = 999999`` was under the
default ``input_limit`` 1e6, reached the filter and the isolation replays (one batch took 5 s of
solver work), and the twin tracked nothing for about half a second after it."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import pytest

from mbsd_twin import load_mechanism
from mbsd_twin.model.loader import bundled_slider_crank
from mbsd_twin.rig.synthetic import MessageSource, RigConfig, Trajectory
from mbsd_twin.twin.config.file import load_config
from mbsd_twin.twin.config.sections import CoreConfig
from mbsd_twin.twin.core import TwinCore
from mbsd_twin.twin.protocol import SensorBatch, encode, parse_sensor

HOSTILE = 999999.0
MINUTE = 3000  # batches of 20 samples at 1 kHz: 60 s
EVERY = 500  # one hostile batch every 10 s (the first at 5 s)


@pytest.fixture(scope="module")
def mech() -> Any:
    return load_mechanism(bundled_slider_crank())


@pytest.fixture(scope="module")
def minute(mech: Any) -> Trajectory:
    tr = Trajectory(mech, RigConfig())
    tr.samples(0, 20 * MINUTE + 20)  # 60 s precomputed once
    return tr


def _batch(msg: dict[str, Any]) -> SensorBatch:
    b = parse_sensor(encode(msg).encode(), "sc-01", 1 << 20)
    assert isinstance(b, SensorBatch)
    return b


def _hostile(i: int) -> bool:
    return i % EVERY == EVERY // 2


def _tracks(outs: list[Any], msg: dict[str, Any], tol: float = 0.05) -> bool:
    """The batch was answered with a state that follows the measured crank angle."""
    state = next((json.loads(o.payload) for o in outs if o.topic.endswith("/state")), None)
    if state is None:
        return False
    meas = msg["ch"]["theta"][-state["n"]:]
    return max(abs(math.remainder(m - s, 2 * math.pi)) for m, s in zip(meas, state["ch"]["theta"], strict=True)) < tol


def test_default_limits_of_the_slider_crank(mech: Any) -> None:
    """The derived limits of the bundled slider crank (the rule of twin/plausible.py, max_speed
    1000 rad/s, factor 4): every channel bounded, tau_m far below 999999, no warning; an explicit
    limit wins; input_limit > 0 is one fixed limit (the old behaviour)."""
    from mbsd_twin.twin.plausible import ANGLE_LIMIT, plausible_limits

    lim = plausible_limits(CoreConfig(), mech)
    assert set(lim) == {"tau_m", "theta", "omega", "f_x", "f_y"} and lim.unbounded == [] and lim.warning() == ""
    assert 1e4 < lim["tau_m"] < HOSTILE / 4, lim.describe("tau_m")
    assert 4000 <= lim["omega"] < 4001 and lim["theta"] == ANGLE_LIMIT
    assert 1e5 < lim["f_x"] < 1e7 and 1e5 < lim["f_y"] < 1e7
    assert lim.describe("tau_m").endswith("N.m (holds and accelerates the model at max_speed 1000)")
    slow = plausible_limits(CoreConfig(max_speed=100.0), mech)
    assert slow["tau_m"] < lim["tau_m"] / 50 and slow["omega"] < 401  # torques scale with speed²
    own = plausible_limits(CoreConfig(channel_limits={"tau_m": 50.0}), mech)
    assert own["tau_m"] == 50.0 and own.how["tau_m"] == "[core] channel_limits" and own["omega"] == lim["omega"]
    fixed = plausible_limits(CoreConfig(input_limit=1e6), mech)
    assert set(fixed.values()) == {1e6}
    free = plausible_limits(CoreConfig(input_limit=math.inf), mech)
    assert free.unbounded == [] and all(v == math.inf for v in free.values())  # asked for: no warning


def test_unbounded_channel_is_named_in_a_warning(mech: Any) -> None:
    """A compared output the rule cannot bound (a length coordinate's positions) is left
    unbounded and named, with the fix."""
    from mbsd_twin.twin.plausible import plausible_limits

    cfg = CoreConfig(compare={"theta": "crank.theta", "omega": "crank.omega", "x": "piston.x"},
                     coordinates=("piston.x",), noise={"theta": 1e-3, "omega": 0.01})
    lim = plausible_limits(cfg, mech)  # (at the assembled pose, a dead centre, the torque moves no piston)
    assert "x" in lim.unbounded and lim["x"] == math.inf and lim["theta"] < math.inf
    assert "x (a position, and a coordinate is a length; left unbounded)" in lim.warning()
    assert "[core] channel_limits" in lim.warning()


def test_out_of_range_problem_names_channel_limit_and_unit(mech: Any, minute: Trajectory) -> None:
    src = MessageSource(minute, 1000.0)
    core = TwinCore(CoreConfig(), mech)
    msg = src.message(0)
    msg["ch"]["tau_m"][3] = HOSTILE
    assert core.step(_batch(msg)) == [] and core.stats["invalid"]["range"] == 1
    assert core.last_problem.startswith("channel 'tau_m' sample 3 = 999999.0: |value| > ")
    assert " N.m (holds and accelerates the model at max_speed 1000)" in core.last_problem


def test_hostile_torque_every_10_s_on_the_core(mech: Any, minute: Trajectory) -> None:
    """The issue's target in process: tau_m = 999999 in one batch every 10 s for 60 s on a default
    twin; >= 99 % of the good batches are answered with a state that tracks the crank. Before:
    each hostile batch was run, the filter diverged and its state was wrong until re-initialised,
    and the isolation replay after it took seconds."""
    src = MessageSource(minute, 1000.0)
    core = TwinCore(CoreConfig(), mech)
    good = answered = 0
    for i in range(MINUTE):
        msg = src.message(i)
        if _hostile(i):
            msg["ch"]["tau_m"][7] = HOSTILE
            core.step(_batch(msg))
            continue
        good += 1
        answered += _tracks(core.step(_batch(msg)), msg)
    print(f"answered {answered} of {good}; stats {core.stats}")
    assert answered >= 0.99 * good
    assert core.stats["invalid"]["range"] == MINUTE // EVERY
    assert set(core.stats["resync"]) == {"start"} and not core.stats["recovered"]


def test_excessive_solver_work_is_rejected_and_counted(mech: Any, minute: Trajectory) -> None:
    """The limit of tau_m widened explicitly (it wins over the derived one), the hostile torque
    reaches the model; the first batch whose solver work exceeds the bound — the hostile one (its
    Jacobians' fixed-step runs would need the integrator's last step, a millionth of the interval,
    many thousand times), or the isolation replay of the change it causes — is rejected and counted
    (recovered.work), and the next batch is answered."""
    src = MessageSource(minute, 1000.0)
    core = TwinCore(CoreConfig(channel_limits={"tau_m": 1e7}), mech)
    for i in range(50):
        assert _tracks(core.step(_batch(src.message(i))), src.message(i))
    rejected = None
    for i in range(50, 80):
        msg = src.message(i)
        if i == 50:
            msg["ch"]["tau_m"][7] = HOSTILE
        t = time.perf_counter()
        outs = core.step(_batch(msg))
        if core.stats["recovered"]["work"]:
            rejected = i
            assert outs == [] and "solver work limit reached" in core.last_problem
            print(f"batch {i} rejected after {time.perf_counter() - t:.2f} s: {core.last_problem}")
            break
    assert rejected is not None, f"no batch rejected; stats {core.stats}"
    # the next batch is answered (the filter, thrown off by the torque, re-initialises within 0.5 s)
    assert any(o.topic.endswith("/state") for o in core.step(_batch(src.message(rejected + 1))))
    for i in range(rejected + 2, rejected + 30):
        core.step(_batch(src.message(i)))
    assert all(_tracks(core.step(_batch(src.message(i))), src.message(i)) for i in range(rejected + 30, rejected + 40))
    assert core.stats["recovered"]["work"] == 1


def test_a_batch_over_its_own_step_bound_is_rejected(mech: Any, minute: Trajectory) -> None:
    """No isolation (its replays have their own share of the bound), the limit of tau_m widened:
    the batch whose own integration through a huge torque takes more than its bound (5,000 + 100
    per sample) is rejected and counted, and the next one is answered."""
    src = MessageSource(minute, 1000.0)
    core = TwinCore(CoreConfig(channel_limits={"tau_m": 1e10}, isolation_window=0.0), mech)
    for i in range(50):
        assert _tracks(core.step(_batch(src.message(i))), src.message(i))
    msg = src.message(50)
    msg["ch"]["tau_m"][7] = 1e8
    assert core.step(_batch(msg)) == []
    assert core.stats["recovered"]["work"] == 1 and "limit 7000" in core.last_problem
    assert all(_tracks(core.step(_batch(src.message(i))), src.message(i)) for i in range(51, 60))


def test_work_limit_config_is_checked(tmp_path: Any) -> None:
    from mbsd_twin.twin.config.sections import ConfigError

    p = tmp_path / "t.toml"
    p.write_text("[core]\nmax_speed = -1.0\nlimit_factor = 0.0\nmax_solver_steps = 0\ninput_limit = -2.0\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p), env={})
    assert sorted(e.value.problems) == [
        "[core] input_limit must be 0 (limits derived from the mechanism) or a number > 0 (inf: no limit), got -2.0",
        "[core] limit_factor must be a finite number > 0, got 0.0",
        "[core] max_solver_steps must be an integer >= 1 (internal steps per batch), got 0",
        "[core] max_speed must be a finite number > 0, got -1.0"]


# slow: 60 s of a real-time twin, 99 % of its good batches asserted answered; 97.2 % beside the
# parallel suite on a slow 2-core machine (this stop's CI run)
@pytest.mark.slow
def test_hostile_torque_every_10_s_through_the_broker(broker: Any, tmp_path: Any, minute: Trajectory) -> None:
    """The issue's target through the real service on a real mosquitto: a rig at 1 kHz in batches
    of 20 for 60 s, one batch every 10 s with tau_m = 999999; >= 99 % of the good batches get a
    twin/state. Before: each hostile batch darkened the twin's outputs for about 11 s."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion
    from test_twin_broker import Collector, _config, _wait

    from mbsd_twin.twin.service import TwinService

    src = MessageSource(minute, time.time())
    msgs = [encode(src.message(i)) for i in range(MINUTE)]
    for i in range(MINUTE):
        if _hostile(i):
            m = src.message(i)
            m["ch"]["tau_m"] = [HOSTILE] * len(m["ch"]["tau_m"])
            msgs[i] = encode(m)
    col = Collector(broker.url, broker.mqtt5)
    pub = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5 if broker.mqtt5 else mqtt.MQTTv311)
    pub.connect("127.0.0.1", broker.port)
    pub.loop_start()
    with TwinService(_config(broker, tmp_path, core={"resync_bounds": {"theta": 0.1, "omega": 5.0}})) as svc:
        assert _wait(svc.connected.is_set, 5)
        t0 = time.monotonic()
        for i, body in enumerate(msgs):  # the rig's own pace: one batch every 20 ms
            wait = t0 + 0.02 * i - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            pub.publish("dt/v1/sc-01/meas/sensors", body, qos=0)
        # bounded waits for the twin to work off what it received (no assertion: the share below is the test)
        _wait(lambda: svc.counts["received"] >= MINUTE and not svc.batches, 20)
        _wait(lambda: any(MINUTE - 1 in s["src_seq"] for s in col.get("twin/state")), 10)
        health = svc.health()
    pub.loop_stop()
    col.close()
    answered = {q for s in col.get("twin/state") for q in s["src_seq"]}
    good = [i for i in range(MINUTE) if not _hostile(i)]
    share = sum(i in answered for i in good) / len(good)
    print(f"answered {share:.4f} of the good batches; counters {health['counters']}")
    assert share >= 0.99
    assert health["counters"]["invalid"].get("range") == MINUTE // EVERY
    assert health["warnings"] == [] or all("plausibility" not in w for w in health["warnings"])


def test_unbounded_channel_warned_in_log_and_health(broker: Any, tmp_path: Any, caplog: Any) -> None:
    """Through the service: a channel the rule leaves unbounded (a piston force, which moves no
    crank at the dead centre) is named in a warning at start and in every health message."""
    import logging

    from test_twin_broker import Collector, _config, _wait

    from mbsd_twin.twin.service import TwinService

    cfg = _config(broker, tmp_path, service={"health_interval": 0.2},
                  core={"inputs": {"tau_m": "motor_torque", "f_p": "piston_force"}})
    col = Collector(broker.url, broker.mqtt5)
    with caplog.at_level(logging.WARNING, logger="mbsd_twin.twin"), TwinService(cfg) as svc:
        assert _wait(svc.connected.is_set, 5)
        assert _wait(lambda: col.get("twin/health"), 10)
    col.close()
    said = ("channels without a plausibility limit: f_p (moves no coordinate at some pose of the envelope; "
            "left unbounded)")
    assert any(said in r.getMessage() for r in caplog.records)
    assert any(said in w for w in col.get("twin/health")[0]["warnings"])
    assert "tau_m" not in col.get("twin/health")[0]["warnings"][0]
