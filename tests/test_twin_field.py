"""The twin in the field: the default twin core against a slider-crank rig written from scratch
(tests/field_rig.py, scipy; not the engine), across the speeds a production rig runs, at every hold
level, healthy and with faults.

Healthy: no alarm, no re-initialisation, the angle estimate within 2e-4 rad RMS of the truth at
hold 1 and, at every hold level, as far from the truth as the filter's own σ says (the normalised
estimation error squared of the crank angle, mean 1 for a consistent filter). Faults: alarmed within
0.25 s naming a quantity the fault acts on, nothing before the onset.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from field_rig import Fault, Rig, messages

import mbsd_twin as mt
from mbsd_twin.twin.config.sections import CoreConfig
from mbsd_twin.twin.core import TwinCore
from mbsd_twin.twin.protocol import SensorBatch, encode, parse_sensor

SETTLE = 1.0  # s: the start transient left out of the error figures


@dataclass
class Run:
    alarms: list[dict[str, Any]] = field(default_factory=list)
    resyncs: dict[str, int] = field(default_factory=dict)
    t: list[float] = field(default_factory=list)
    theta: list[float] = field(default_factory=list)
    theta_sd: list[float] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    diagnoses: list[dict[str, Any]] = field(default_factory=list)

    def raised(self) -> list[tuple[str, float]]:
        return [(a["channel"], a["t"]) for a in self.alarms if a["event"] == "raised"]


def run_core(msgs: list[dict[str, Any]], hold: int = 1, cfg: CoreConfig | None = None,
             keep: np.ndarray | None = None) -> Run:
    """The messages (those ``keep`` marks) through a TwinCore at solver ``hold``."""
    core = TwinCore(cfg or CoreConfig(), mt.load_mechanism("examples/mechanisms/slider_crank.toml"))
    out = Run()
    for i, m in enumerate(msgs):
        if keep is not None and not keep[i]:
            continue
        batch = parse_sensor(encode(m).encode(), m["asset"], 1 << 22)
        assert isinstance(batch, SensorBatch)
        for o in core.step(batch, hold):
            p, leaf = json.loads(o.payload), o.topic.rsplit("/", 1)[1]
            if leaf == "alarms":
                out.alarms.append(p)
            elif leaf == "diagnosis":
                out.diagnoses.append(p)
            elif leaf == "state":  # the rig's sample index k (truth at k/rate: t0 may carry clock jitter)
                first = p["src_seq"][0] * batch.n + (batch.n - 1) % p["stride"]
                out.t += [(first + i * p["stride"]) * batch.dt for i in range(p["n"])]
                out.theta += p["ch"]["theta"]
            elif leaf == "estimates":
                out.theta_sd += p["ch"]["crank.theta.sd"]
    out.resyncs = {k: v for k, v in core.stats["resync"].items() if k != "start"}
    out.stats = {**core.stats, "timing": core.timebase.figures()}
    return out


def angle_errors(run: Run, truth: Any) -> tuple[np.ndarray, np.ndarray]:
    """The estimate's crank-angle error against the truth and the filter's σ of it, after SETTLE."""
    t = np.array(run.t)
    sel = t >= SETTLE
    true = truth.state(t[sel])["theta"]
    err = np.remainder(np.array(run.theta)[sel] - true + np.pi, 2 * np.pi) - np.pi
    return err, np.array(run.theta_sd, dtype=float)[sel]


_STREAMS: dict[tuple[Any, ...], Any] = {}


def stream(speed: float, duration: float, *faults: Fault, seed: int = 0) -> Any:
    key = (speed, duration, faults, seed)
    if key not in _STREAMS:
        _STREAMS[key] = messages(Rig(speed=speed, seed=seed, faults=faults), duration)
    return _STREAMS[key]


@pytest.mark.parametrize("hold", [1, 5, 20])
@pytest.mark.parametrize("speed", [2.0, 10.0, 38.0, 100.0])
def test_healthy_rig_at_every_speed_and_hold(speed: float, hold: int) -> None:
    """No alarm, no re-initialisation, a consistent angle estimate: mean of (error/σ)² within the
    χ²-band a consistent filter gives (its samples are correlated over the filter's time constant,
    so the band is wide: 0.4 … 2.0), and at hold 1 within the 2e-4 rad RMS target."""
    msgs, truth = stream(speed, 6.0)
    run = run_core(msgs, hold)
    assert run.raised() == []
    assert run.resyncs == {}
    err, sd = angle_errors(run, truth)
    nees = float(np.mean((err / sd) ** 2))
    assert 0.4 <= nees <= 2.0, (nees, float(np.sqrt(np.mean(err ** 2))))
    if hold == 1:
        assert float(np.sqrt(np.mean(err ** 2))) <= 2e-4


FIXED_STEP = 2e-3  # s: the fixed-step prediction's option (not the default: tests/test_twin_plausible.py)


@pytest.mark.parametrize("speed", [38.0, 100.0])
def test_fixed_step_prediction_estimates_as_the_error_controlled_one(speed: float) -> None:
    """The prediction in fixed Runge–Kutta steps (``prediction_step`` 2 ms: one step per
    half-millisecond row of the first-order hold) against DOP853 under error control
    (``prediction_step = 0``, the default), healthy at hold 1: neither alarms nor re-initialises, and the angle
    error's RMS and the mean (error/σ)² differ by less than 2 % (measured: 0.01 % at 38 rad/s,
    0.5 % at 100)."""
    msgs, truth = stream(speed, 6.0)
    runs = [run_core(msgs, 1, CoreConfig(prediction_step=step)) for step in (FIXED_STEP, 0.0)]
    figures = []
    for run in runs:
        assert run.raised() == [] and run.resyncs == {}
        err, sd = angle_errors(run, truth)
        figures.append((float(np.sqrt(np.mean(err ** 2))), float(np.mean((err / sd) ** 2))))
    (rms, nees), (rms_ref, nees_ref) = figures
    assert rms == pytest.approx(rms_ref, rel=0.02) and nees == pytest.approx(nees_ref, rel=0.02)
    assert rms != rms_ref  # two different integrations


ONSET = 3.0
FAULTS = {  # fault → the quantities whose alarm names it rightly, the isolated cause and its size
    "bearing_friction": (Fault("torque", 0.3, ONSET), {"motor_torque.bias", "f_x", "omega"},
                         ("motor_torque.bias", -0.3)),
    "rod_mass": (Fault("rod_mass", 1.2, ONSET), {"f_x", "f_y", "omega"}, ("rod.mass", 0.4)),
    "piston_mass": (Fault("piston_mass", 1.2, ONSET), {"piston.mass", "f_x", "f_y", "omega"}, ("piston.mass", 0.3)),
    "encoder_offset": (Fault("offset", 0.02, ONSET, "theta"), {"theta"}, ("sensor:crank.theta", 0.02)),
    "encoder_scale": (Fault("scale", 0.02, ONSET, "theta"), {"theta"}, ("sensor:crank.theta", None)),
    "torque_sensor_bias": (Fault("offset", 0.05, ONSET, "tau_m"), {"motor_torque.bias"},
                           ("motor_torque.bias", -0.05)),  # the torque that acts is 0.05 below the reading
    "speed_sensor_stuck": (Fault("stuck", 0.0, ONSET, "omega"), {"omega"}, (None, None)),
}


@pytest.mark.parametrize("name", list(FAULTS))
def test_step_fault_at_production_speed_is_alarmed_named_and_isolated(name: str) -> None:
    """Alarmed within 0.25 s of the onset, first by a statistic the fault acts on, nothing before;
    then the isolation (twin/diagnosis) names the cause with its size within 5 %: a heavier rod is
    a rod-mass change, not a piston-mass one, although the filter's piston-mass estimate moves. A
    stuck speed sensor is no change of the bank (parameters, input biases, sensor offsets): the
    best candidate then leaves most of the residual unexplained, and says so."""
    fault, right, (cause, size) = FAULTS[name]
    msgs, _ = stream(38.0, ONSET + 1.0, fault)
    run = run_core(msgs)
    raised = run.raised()
    assert raised, f"{name}: no alarm"
    assert all(t >= ONSET for _, t in raised), raised
    first_t = min(t for _, t in raised)
    assert first_t - ONSET <= 0.25, raised
    first = [c for c, t in raised if t <= first_t + 0.01]
    assert set(first) & right, (name, raised[:5])
    assert len(run.diagnoses) == 1, run.diagnoses
    d = run.diagnoses[0]
    best = d["candidates"][0]
    if cause is None:
        assert d["explained"] < 0.8, d
        return
    assert best["name"] == cause, d["candidates"][:3]
    assert best["probability"] > 0.99
    if size is not None:
        assert best["size"] == pytest.approx(size, rel=0.05), best


@pytest.mark.parametrize("name", ["bearing_friction", "piston_mass", "rod_mass"])
def test_fixed_step_prediction_alarms_and_isolates_as_the_error_controlled_one(name: str) -> None:
    """A step fault through a core predicting in fixed steps (2 ms) and through the default one,
    DOP853 under error control (``prediction_step = 0``): the same alarms at the same samples, and the isolation's best
    candidate the same, its size within 1 %."""
    fault = FAULTS[name][0]
    msgs, _ = stream(38.0, ONSET + 1.0, fault)
    fixed, ref = (run_core(msgs, 1, CoreConfig(prediction_step=step)) for step in (FIXED_STEP, 0.0))
    assert fixed.raised() == ref.raised() and fixed.raised()
    best, best_ref = (r.diagnoses[0]["candidates"][0] for r in (fixed, ref))
    assert best["name"] == best_ref["name"]
    assert best["size"] == pytest.approx(best_ref["size"], rel=0.01)


def bursty_loss(n: int, loss: float, mean_burst: float, seed: int) -> np.ndarray:
    """Which of ``n`` batches arrive: a two-state (Gilbert) chain losing ``loss`` of them in bursts
    of ``mean_burst`` batches on average (geometric lengths; at 20 ms a batch, 4 → 80 ms)."""
    rng = np.random.default_rng(seed)
    p_end = 1.0 / mean_burst
    p_start = loss * p_end / (1.0 - loss)
    keep, lost = np.ones(n, dtype=bool), False
    for i in range(2, n):
        lost = rng.random() < (1.0 - p_end if lost else p_start)
        keep[i] = not lost
    return keep


def jittered(msgs: list[dict[str, Any]], sd: float, seed: int) -> list[dict[str, Any]]:
    """The messages with each ``t0`` off by N(0, sd) (the rig's clock jitter; samples regular)."""
    rng = np.random.default_rng(seed)
    return [{**m, "t0": m["t0"] + float(rng.normal(0.0, sd))} for m in msgs]


CONDITIONS = {"loss20": (0.2, 0.0), "loss30": (0.3, 0.0), "t0jitter5": (0.0, 0.005), "t0jitter10": (0.0, 0.010),
              "loss20+t0jitter5": (0.2, 0.005)}
CELLS = [(c, s, 1) for c in CONDITIONS for s in (2.0, 10.0, 38.0, 100.0)] + \
    [(c, 38.0, h) for c in CONDITIONS for h in (5, 20)]


@pytest.mark.parametrize(("condition", "speed", "hold"), CELLS)
def test_healthy_rig_through_lossy_links_and_jittered_clocks(condition: str, speed: float, hold: int) -> None:
    """20 or 30 % of the batches lost in bursts (mean 80 ms), t0 off by N(0, 5 or 10 ms): no alarm,
    no re-initialisation (every gap predicted through: `gap_predicted` one per burst); the angle
    estimate as far from the truth as its own σ says."""
    loss, t0_sd = CONDITIONS[condition]
    msgs, truth = stream(speed, 6.0)
    keep = bursty_loss(len(msgs), loss, 4.0, seed=int(speed) + hold) if loss else None
    run = run_core(jittered(msgs, t0_sd, seed=7) if t0_sd else msgs, hold, keep=keep)
    assert run.raised() == []
    timing = run.stats["timing"]
    assert run.resyncs == {}, (run.resyncs, {k: v for k, v in timing.items() if "gap" in k})
    bursts = int(np.count_nonzero(np.diff(keep.astype(int)) == -1)) if keep is not None else 0
    assert run.stats["gap_predicted"] == bursts
    if not loss:
        assert timing["t0_jitter_rms"] == pytest.approx(t0_sd, rel=0.25)
    err, sd = angle_errors(run, truth)
    nees = float(np.mean((err / sd) ** 2))
    assert 0.3 <= nees <= 2.0, (nees, float(np.sqrt(np.mean(err ** 2))), timing)


def test_lossy_link_at_the_coarsest_hold_and_the_highest_speed() -> None:
    """100 rad/s, 20 % of the batches lost in bursts, hold 20 (2 rad of crank travel between
    corrections), 30 s: no alarm; a re-initialisation only where a burst outlasts ``max_gap``, every
    other burst predicted through. The batch after a gap is corrected at every sample whatever the
    hold: without that, this stream raised 3 false alarms (f_x, omega) with 3 divergences."""
    msgs, truth = stream(100.0, 30.0)
    keep = bursty_loss(len(msgs), 0.2, 4.0, seed=120)
    run = run_core(msgs, 20, keep=keep)
    k = keep.astype(int)
    starts, ends = np.flatnonzero(np.diff(k) == -1) + 1, np.flatnonzero(np.diff(k) == 1) + 1
    gaps = (ends - starts[:len(ends)] + 1) * 0.02  # s from the last batch received to the next
    too_long = int(np.count_nonzero(gaps > CoreConfig().max_gap))
    assert run.raised() == []
    assert run.resyncs == ({"gap": too_long} if too_long else {})
    assert run.stats["gap_predicted"] == len(gaps) - too_long
    err, sd = angle_errors(run, truth)
    assert 0.3 <= float(np.mean((err / sd) ** 2)) <= 2.0


@pytest.mark.parametrize("hold", [1, 5, 20])
@pytest.mark.parametrize("name", list(FAULTS))
def test_step_fault_through_a_lossy_jittered_link(name: str, hold: int) -> None:
    """The step faults with 20 % of the batches lost in bursts and 5 ms of t0 jitter, at each hold
    level (1, 5, 20): nothing before the onset, the first alarm within 0.25 s of the first sample that reaches the
    twin after the onset, and by a statistic the fault acts on (or, for a fault that a gap's
    re-initialisation absorbs into the state, by its own kind of evidence: the isolation)."""
    fault, right, _ = FAULTS[name]
    msgs, _ = stream(38.0, ONSET + 1.0, fault)
    keep = bursty_loss(len(msgs), 0.2, 4.0, seed=11)
    first_seen = min(m["t0"] for m, k in zip(msgs, keep, strict=True) if k and m["t0"] + 0.019 >= ONSET)
    run = run_core(jittered(msgs, 0.005, seed=3), hold, keep=keep)
    raised = run.raised()
    assert raised and all(t >= ONSET - 0.02 for _, t in raised), raised  # t carries the rig's jittered clock
    first_t = min(t for _, t in raised)
    assert first_t - max(first_seen, ONSET) <= 0.25, (raised, first_seen)
    assert {c for c, t in raised if t <= first_t + 0.01} & right, raised[:5]


@pytest.mark.parametrize("hold", [1, 5, 20])
def test_friction_ramp_alarmed_before_it_reaches_a_third(hold: int) -> None:
    """Bearing friction growing 0 → 0.3 N·m over 10 s from 3 s, at 38 rad/s through the lossy,
    jittered link, at holds 1, 5 and 20: a drift alarm on the torque bias before the friction
    reaches 0.1 N·m (6.33 s), and no alarm before the ramp starts (measured: 4.00 / 4.05 / 4.84 s,
    0.030 / 0.032 / 0.055 N·m). At hold 20 a block of the drift test often closes on the first
    correction after a gap, which the gap gate keeps from the change tests; the crossing was
    dropped there (and the test restarted) until it waited for the next update: 6.40 s, 0.102 N·m."""
    msgs, _ = stream(38.0, 6.5, Fault("torque", 0.3, ONSET, ramp=10.0))
    keep = bursty_loss(len(msgs), 0.2, 4.0, seed=5)
    run = run_core(jittered(msgs, 0.005, seed=9), hold, keep=keep)
    assert all(t >= ONSET for _, t in run.raised()), run.raised()
    drift = [a["t"] for a in run.alarms if a["alarm"] == "drift:motor_torque.bias" and a["event"] == "raised"]
    assert drift and drift[0] < ONSET + 10.0 / 3.0, run.raised()


RAMPS = {  # a fault that grows from 0 at ONSET to its size 10 s later → the alarms that name it rightly
    "torque_sensor_drift": (Fault("offset", 0.05, ONSET, "tau_m", ramp=10.0), {"drift:motor_torque.bias"}),
    "encoder_drift": (Fault("offset", 0.02, ONSET, "theta", ramp=10.0), {"change:theta"}),
    "encoder_scale_drift": (Fault("scale", 0.02, ONSET, "theta", ramp=10.0), {"change:theta"}),
    "force_sensor_drift": (Fault("offset", 5.0, ONSET, "f_x", ramp=10.0), {"change:f_x"}),
}


@pytest.mark.parametrize("hold", [1, 5, 20])
@pytest.mark.parametrize("name", list(RAMPS))
def test_ramp_fault_alarmed_before_a_third_of_its_size(name: str, hold: int) -> None:
    """Sensor faults that grow slowly (10 s to full size) at 38 rad/s: nothing before the onset,
    the first alarm names the right quantity before the fault reaches a third of its size."""
    fault, right = RAMPS[name]
    msgs, _ = stream(38.0, ONSET + 10.0 / 3.0, fault)
    run = run_core(msgs, hold)
    raised = [(a["alarm"], a["t"]) for a in run.alarms if a["event"] == "raised"]
    assert raised and all(t >= ONSET for _, t in raised), raised
    first_t = min(t for _, t in raised)
    assert {a for a, t in raised if t <= first_t + 0.01} & right, raised[:5]
    assert first_t < ONSET + 10.0 / 3.0
