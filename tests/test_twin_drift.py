"""Alarm bookkeeping (every published alarm comes as a raised/cleared pair; a rate-limited raise is
counted, never active, never cleared) and the drift alarms on the augmented estimates: the slow
friction ramp of the 'wear' scenario alarms through TwinCore with default settings before the
friction reaches 0.1 N·m; threshold and rate-of-change alarms on estimates; config validation;
checkpoints with the drift tests."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from mbsd_twin.estimation.change import threshold
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism
from mbsd_twin.rig.scenarios import ONSET, SLOW_FAULTS
from mbsd_twin.rig.synthetic import RigConfig, Trajectory, stream
from mbsd_twin.storage.checkpoint.state import apply, capture
from mbsd_twin.twin.alarms import Alarms, ChangeAlarms
from mbsd_twin.twin.config.file import load_config
from mbsd_twin.twin.config.sections import AlarmConfig, ConfigError, CoreConfig
from mbsd_twin.twin.core import TwinCore
from mbsd_twin.twin.drift import DriftTest, block_variance
from mbsd_twin.twin.protocol import SensorBatch, encode, parse_sensor

MECH = load_mechanism(bundled_slider_crank())
SLOPE = 0.3 / 10.0  # N·m/s: the wear scenario's friction ramp


def _pairs_ok(events: list[dict[str, Any]]) -> bool:
    """Per alarm name the events alternate raised, cleared, raised, … starting with raised."""
    state: dict[str, bool] = {}
    for e in events:
        up = e["event"] == "raised"
        if state.get(e["alarm"], False) == up:
            return False
        state[e["alarm"]] = up
    return True


# ------------------------------------------------------------------ item 5: pairing and suppression
def test_change_alarm_suppressed_raises_are_counted_never_active_never_cleared() -> None:
    """One-sample 20 σ bursts on the θ innovation every 2.3 s for 50 bursts (each crosses the CUSUM
    threshold 19.05 at its sample: 20 − k = 19.5), quiet (e = 0) in between: each published raise
    clears 2 s later, before the next burst. Budget 6 raises per 60 s: a raise leaves the window 27
    bursts later (26·2.3 = 59.8 s < 60 s < 62.1 s), so bursts 0–5 and 27–32 are raised (12), the
    other 38 are suppressed; 12 clears, in pairs."""
    cfg = CoreConfig(compare={"theta": "crank.theta"}, augment=())
    est = SimpleNamespace(aug=[], d=1, meas=["crank.theta"])
    ch = ChangeAlarms(cfg, 1000.0, SimpleNamespace(est=est))
    assert ch.detector.h == pytest.approx(19.05, abs=0.01)
    events: list[dict[str, Any]] = []
    bursts = {round((1.0 + 2.3 * i) * 1000) for i in range(50)}
    for k in range(500, round((1.0 + 2.3 * 49) * 1000) + 3000):
        t = k / 1000.0
        nu = 20e-3 if k in bursts else 0.0
        inn = SimpleNamespace(names=["crank.theta"], nu=[nu], sd=[1e-3], dx=[0.0, 0.0], dx_sd=[1.0, 1.0])
        ch.observe(t, {})
        events += ch.update(t, inn)
        events += ch.clear_quiet(t)
    raised = [e["t"] for e in events if e["event"] == "raised"]
    expected = [round(1.0 + 2.3 * i, 3) for i in (*range(6), *range(27, 33))]
    assert [round(t, 3) for t in raised] == expected
    assert sum(e["event"] == "cleared" for e in events) == 12 and ch.suppressed == 38
    assert _pairs_ok(events) and ch.active() == []


def test_threshold_alarm_suppressed_raises_are_counted_never_cleared() -> None:
    """A value high for 12 samples of every 64 (dt 1/64 s, min_duration 8 samples: one raise attempt
    per period, at 0.125 s into it), low otherwise (cleared 8 samples into the low part), for 100 s;
    budget 2 raises per minute: raised at 0.125 and 1.125 s, then refused until the first leaves
    the 60 s window, raised again at 61.125 and 62.125 s: 4 pairs, 96 suppressed."""
    a = Alarms((AlarmConfig("big", "x", "residual", high=1.0, low=0.5, min_duration=0.125),), max_per_minute=2)
    events = [e for k in range(6400) for e in a.update(k / 64, {"residual": {"x": 2.0 if k % 64 < 12 else 0.1}})]
    assert [e["t"] for e in events if e["event"] == "raised"] == [0.125, 1.125, 61.125, 62.125]
    assert sum(e["event"] == "cleared" for e in events) == 4 and a.suppressed == 96 and _pairs_ok(events)


# ---------------------------------------------------------------------------- the drift test itself
def test_drift_test_block_length_threshold_and_variance() -> None:
    """τ = sd²/rate² at the start; blocks of max(window, 4τ); h from change_mtbfa at the block rate
    (Siegmund, :func:`threshold`); the block-mean variance of an Ornstein–Uhlenbeck process tends to
    2·P·τ/w for w ≫ τ and to P for w ≪ τ. A constant estimate never alarms."""
    d = DriftTest("b", 0.01, 0.5, 604800.0, 1.0)
    assert d.update(0.0, 0.0, 2e-3) is None
    assert d.w == 0.5 and d.h == pytest.approx(threshold(604800.0, 2.0, 1.0)) and d.h == pytest.approx(12.84, abs=0.01)
    m = DriftTest("m", 0.002, 0.5, 604800.0, 1.0)
    m.update(0.0, 1.5, 2e-3)
    assert m.w == pytest.approx(4 * 4e-6 / 4e-6) and m.h == pytest.approx(threshold(604800.0, 0.25, 1.0))
    assert block_variance(1.0, 1e-3, 10.0) == pytest.approx(2e-4, rel=1e-3)
    assert block_variance(1.0, 1e3, 1e-3) == pytest.approx(1.0, rel=1e-5)
    assert all(d.update(k * 1e-3, 0.0, 2e-3) is None for k in range(1, 60000))


# -------------------------------------------------------------------------- through the twin core
def _wear_batches(duration: float, seed: int = 0) -> list[SensorBatch]:
    traj = Trajectory(MECH, RigConfig(mismatch={}, faults=(SLOW_FAULTS["wear"],), seed=seed))
    out = []
    for m in stream(traj, duration=duration):
        b = parse_sensor(encode(m).encode(), "sc-01", 1 << 22)
        assert isinstance(b, SensorBatch)
        out.append(b)
    return out


@pytest.fixture(scope="module")
def wear() -> list[SensorBatch]:
    return _wear_batches(9.0)


def _alarms(core: TwinCore, batches: list[SensorBatch]) -> list[dict[str, Any]]:
    return [json.loads(o.payload) for b in batches for o in core.step(b) if o.topic.endswith("/alarms")]


def test_friction_ramp_raises_a_drift_alarm_before_it_reaches_0_1_nm(wear: list[SensorBatch]) -> None:
    """Bearing friction 0 → 0.3 N·m over 10 s from 5 s, default settings: the first alarm is
    drift:motor_torque.bias, kind drift, the estimate going down (friction opposes ω > 0), at
    t − 5 s < 1/3 · 10 s (the friction below 0.1 N·m), onset in [5 s − one block, t]; nothing before
    the ramp; no change alarm (the ramp is too slow for the change tests)."""
    alarms = _alarms(TwinCore(CoreConfig(), MECH), wear)
    assert alarms and all(a["t"] > ONSET for a in alarms), alarms
    first = alarms[0]
    assert first["alarm"] == "drift:motor_torque.bias" and first["event"] == "raised" and first["kind"] == "drift"
    assert first["source"] == "drift" and first["channel"] == "motor_torque.bias" and first["direction"] == "down"
    delay = first["t"] - ONSET
    assert 0 < delay < 0.1 / SLOPE, first
    assert ONSET - first["window"] <= first["onset"] <= first["t"] and first["statistic"] > first["threshold"]
    assert -SLOPE * delay < first["size"] < 0
    assert not any(a["alarm"].startswith("change:") for a in alarms), alarms
    assert _pairs_ok(alarms)


def test_estimate_level_and_rate_alarms(wear: list[SensorBatch]) -> None:
    """Threshold alarms on the bias estimate: its level |b| >= 0.05 N·m for 0.1 s (the truth reaches
    it at 5 + 0.05/0.03 = 6.67 s; the estimate lags by s·τ = 1.2 mN·m and its noise, σ 1 mN·m
    measured, can interrupt the 0.1 s: at the latest when the truth is 4.5 mN·m past) and its rate of change over
    the 1 s window |ḃ| >= 0.02 N·m/s for 0.1 s (0.03 N·m/s once the window is inside the ramp, at
    6 s; the half-window means differ by 0.02·0.5 N·m at the latest then)."""
    cfg = CoreConfig(alarms=(AlarmConfig("bias", "motor_torque.bias", "estimate", 0.05, 0.04, 0.1),
                             AlarmConfig("bias_rate", "motor_torque.bias.rate", "estimate", 0.02, 0.01, 0.1)))
    raised = {a["alarm"]: a for a in _alarms(TwinCore(cfg, MECH), wear) if a["event"] == "raised"}
    level, rate = raised["bias"], raised["bias_rate"]
    assert 5.0 + 0.05 / SLOPE + 0.1 <= level["t"] < 5.0 + 0.0545 / SLOPE + 0.1, level
    assert level["value"] <= -0.05
    assert ONSET < rate["t"] <= ONSET + 1.0 + 0.1 + 0.01 and -0.035 < rate["value"] <= -0.02, rate


def test_estimate_alarm_channels_are_validated(tmp_path: Any) -> None:
    p = tmp_path / "twin.toml"
    p.write_text('[[core.alarms]]\nname = "m"\nchannel = "piston.mas"\nsource = "estimate"\nhigh = 2.0\nlow = 1.9\n'
                 '[[core.alarms]]\nname = "r"\nchannel = "piston.mass.rate"\nsource = "estimate"\n'
                 '[[core.alarms]]\nname = "s"\nchannel = "x"\nsource = "estimates"\n'
                 '[core]\ndrift_window = 0\n')
    with pytest.raises(ConfigError) as err:
        load_config(str(p), env={})
    text = str(err.value)
    assert ("[[core.alarms]] m: channel 'piston.mas' is not an augmented estimate; valid channels for source "
            "'estimate': motor_torque.bias, piston.mass, motor_torque.bias.rate, piston.mass.rate") in text
    assert "[[core.alarms]] r" not in text and "[[core.alarms]] s: need source residual/state/virtual/meas/estimate" \
        in text and "[core] drift_window must be > 0, got 0.0" in text and len(err.value.problems) == 3


def test_checkpoint_keeps_the_drift_test(wear: list[SensorBatch]) -> None:
    """Captured at 5.6 s, with the drift test part-way (blocks summed, baseline set, no alarm yet):
    the restored twin publishes the same texts (drift alarm included) as the uninterrupted one. The
    same checkpoint as format 2 (no drift tests) still loads; its drift test starts afresh and
    alarms later."""
    k = next(i for i, b in enumerate(wear) if b.t0 >= 5.6)
    ref = TwinCore(CoreConfig(), MECH)
    for b in wear[:k]:
        ref.step(b)
    blob = capture(ref)
    assert ref.changes is not None and ref.changes.drift["motor_torque.bias"].base[0] > 0
    resumed = TwinCore(CoreConfig(), MECH)
    apply(resumed, blob)
    outs = [(o.topic, o.payload) for b in wear[k:] for o in ref.step(b)]
    assert outs == [(o.topic, o.payload) for b in wear[k:] for o in resumed.step(b)]
    first = next(json.loads(p) for t, p in outs if t.endswith("/alarms"))
    old = json.loads(blob)
    old["format"] = "mbsd-twin-checkpoint/2"
    del old["changes"]["drift"], old["changes"]["rates"]
    older = TwinCore(CoreConfig(), MECH)
    apply(older, json.dumps(old).encode())
    later = _alarms(older, wear[k:])
    assert later and later[0]["alarm"] == first["alarm"] and later[0]["t"] > first["t"]


@pytest.mark.parametrize("scenario", ["healthy", "lossy"])
def test_drift_statistics_stay_low_on_healthy_streams(scenario: str) -> None:
    """20 s healthy (and lossy) streams: no alarm; the drift statistics (published as
    ``drift.<unknown>`` in twin/estimates) stay far below their thresholds."""
    from mbsd_twin.rig.scenarios import run
    res = run(scenario, 20.0)
    assert res.alarms == []
    for name in ("motor_torque.bias", "piston.mass"):
        v = np.asarray(res.rows[f"drift.{name}"], dtype=float)
        assert np.nanmax(v) < 0.5 * threshold(604800.0, 1.0 / 4.5, 1.0) and math.isfinite(np.nanmax(v))
