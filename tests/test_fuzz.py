"""Property-based fuzzing (issue #15, item 7), sized for CI: a few seconds each, derandomized so a
run is reproducible. The mutators live in tests/fuzz_cases.py; benchmarks/fuzz.py runs the same
ones ten thousand times and prints its counts. The FMU inputs are fuzzed in test_fmu_hostile.py.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from fuzz_cases import ROOT, command_call, mutate_mechanism, run_mechanism, sensor_message, timed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mbsd_twin import load_mechanism
from mbsd_twin.rig.synthetic import MessageSource, RigConfig, Trajectory
from mbsd_twin.twin.config.sections import CoreConfig
from mbsd_twin.twin.core import TwinCore
from mbsd_twin.twin.protocol import REASONS, Invalid, SensorBatch, encode, parse_command, parse_sensor

MECH = str(ROOT / "examples" / "mechanisms" / "slider_crank.toml")
MAX_BYTES = 256 * 1024
CI = settings(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
RANDOMS = st.randoms(use_true_random=False)


@pytest.fixture(scope="module")
def source() -> MessageSource:
    return MessageSource(Trajectory(load_mechanism(MECH), RigConfig()), 1000.0)


def _batch(msg: dict[str, Any]) -> SensorBatch:
    b = parse_sensor(encode(msg).encode(), "sc-01", MAX_BYTES)
    assert isinstance(b, SensorBatch)
    return b


def _states(core: TwinCore, batch: SensorBatch) -> bool:
    return any(o.topic.endswith("/state") for o in core.step(batch))


@settings(CI, max_examples=80)
@given(rng=RANDOMS)
def test_every_fuzzed_mechanism_file_loads_or_fails_located(rng: random.Random) -> None:
    name, text = mutate_mechanism(rng)
    outcome, detail, _ = timed(run_mechanism, text, budget=20.0)
    assert outcome in ("ok", "stopped", "located", "model"), f"{name}: {outcome}: {detail}\n--- file ---\n{text[:3000]}"


@settings(CI, max_examples=400)
@given(rng=RANDOMS, raw=st.binary(max_size=300))
def test_sensor_and_command_parsers_never_raise(rng: random.Random, raw: bytes, source: MessageSource) -> None:
    for payload in (sensor_message(rng, source.message(rng.randrange(50))), raw):
        got = parse_sensor(payload, "sc-01", MAX_BYTES)
        assert isinstance(got, SensorBatch) or (isinstance(got, Invalid) and got.reason in REASONS)
        cmd = parse_command(payload)
        assert cmd is None or isinstance(cmd, dict)


@pytest.fixture(scope="module")
def core(source: MessageSource) -> TwinCore:
    c = TwinCore(CoreConfig(), load_mechanism(MECH))
    for i in range(3):
        assert _states(c, _batch(source.message(i)))
    return c


COUNTER = iter(range(3, 1 << 30))  # the batches the module's core has seen, in order


@settings(CI, max_examples=60)
@given(rng=RANDOMS)
def test_command_handler_always_replies_and_the_core_keeps_working(rng: random.Random, core: TwinCore,
                                                                   source: MessageSource) -> None:
    for _ in range(rng.randint(1, 4)):
        name, args = command_call(rng)
        reply = core.command(name, args)
        assert set(reply) == {"cmd", "ok", "detail"} and isinstance(reply["ok"], bool)
        assert isinstance(reply["detail"], str) and json.loads(encode(reply)) == reply
    core.command("resume", {})
    assert _states(core, _batch(source.message(next(COUNTER))))


@settings(CI, max_examples=60)
@given(rng=RANDOMS)
def test_core_survives_accepted_hostile_batches(rng: random.Random, core: TwinCore, source: MessageSource) -> None:
    got = parse_sensor(sensor_message(rng, source.message(next(COUNTER))), "sc-01", MAX_BYTES)
    if isinstance(got, SensorBatch):
        assert isinstance(core.step(got), list)
    assert _states(core, _batch(source.message(next(COUNTER))))


@pytest.mark.parametrize("dt", [2.0 ** 63, 1e30, 1e308, 1.5])
def test_an_absurd_sample_interval_is_rejected(dt: float) -> None:
    """The fuzz run's one slow case: a finite but huge dt made the core integrate for seconds per
    batch. dt above 1 s is a schema error (docs/mqtt-contract.md); 1 s itself is accepted."""
    msg = {"v": 1, "asset": "sc-01", "seq": 1, "t0": 0.0, "dt": dt, "n": 1, "ch": {"theta": 0.1}}
    got = parse_sensor(json.dumps(msg).encode(), "sc-01", 1 << 20)
    assert isinstance(got, Invalid) and got.reason == "schema" and "dt" in got.detail
    ok = parse_sensor(json.dumps(msg | {"dt": 1.0}).encode(), "sc-01", 1 << 20)
    assert isinstance(ok, SensorBatch) and ok.dt == 1.0
