"""The twin core's fast per-batch path (mbsd_twin/twin/batchpath.py) against the reference path
(``TwinCore(..., reference=True)``: the per-sample Python it replaces): every output message,
topic and text, bit-identical, and the same counters, on the field rig's streams (tests/field_rig.py)
healthy, with the step faults of tests/test_twin_field.py (whose alarms and diagnoses are among the
messages compared), through a lossy, jittered link, across commands, at holds 1, 5 and 20."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest
from test_twin_field import FAULTS, bursty_loss, jittered, stream

import mbsd_twin as mt
from mbsd_twin.estimation import batch as filter_batch
from mbsd_twin.twin.config.sections import CoreConfig
from mbsd_twin.twin.core import TwinCore
from mbsd_twin.twin.protocol import SensorBatch, encode, parse_sensor

MECH = "examples/mechanisms/slider_crank.toml"


def outputs(msgs: list[dict[str, Any]], hold: int, reference: bool, cfg: CoreConfig | None = None,
            commands: dict[int, tuple[str, dict[str, Any]]] | None = None,
            keep: Any = None) -> tuple[list[tuple[str, str, int, bool]], dict[str, Any]]:
    """Every output message of the messages through one core (``commands``: message index → a
    command applied before it), and the core's counters."""
    core = TwinCore(cfg or CoreConfig(), mt.load_mechanism(MECH), reference=reference)
    out = []
    for i, m in enumerate(msgs):
        if keep is not None and not keep[i]:
            continue
        if commands and i in commands:
            reply = core.command(*commands[i])
            out.append(("reply", encode(reply), 0, False))
        batch = parse_sensor(encode(m).encode(), m["asset"], 1 << 22)
        assert isinstance(batch, SensorBatch)
        out += [(o.topic, o.payload, o.qos, o.retain) for o in core.step(batch, hold)]
    return out, core.stats


def assert_same(msgs: list[dict[str, Any]], hold: int, **kw: Any) -> list[tuple[str, str, int, bool]]:
    fast, fast_stats = outputs(msgs, hold, False, **kw)
    ref, ref_stats = outputs(msgs, hold, True, **kw)
    assert len(fast) == len(ref)
    for a, b in zip(fast, ref, strict=True):
        assert a == b
    assert fast_stats == ref_stats
    return fast


def raised(out: list[tuple[str, str, int, bool]]) -> list[str]:
    return [json.loads(p)["alarm"] for t, p, _, _ in out if t.endswith("/alarms") and '"raised"' in p]


@pytest.mark.parametrize("hold", [1, 5, 20])
def test_healthy_stream_bit_identical(hold: int) -> None:
    msgs, _ = stream(38.0, 3.0)
    out = assert_same(msgs, hold)
    assert raised(out) == []


CASES = [(name, 1) for name in FAULTS] + [(name, h) for name in ("bearing_friction", "rod_mass", "encoder_offset")
                                          for h in (5, 20)]


@pytest.mark.parametrize(("name", "hold"), CASES)
def test_fault_stream_bit_identical_with_its_alarms(name: str, hold: int) -> None:
    """The alarms, their sizes and onsets, the divergences and the diagnosis are among the messages."""
    msgs, _ = stream(38.0, 4.0, FAULTS[name][0])
    out = assert_same(msgs, hold)
    assert raised(out), name


@pytest.mark.parametrize("hold", [1, 5, 20])
def test_lossy_jittered_link_bit_identical(hold: int) -> None:
    """Gaps predicted through, their first corrections gated, the batch after a gap at every sample."""
    msgs, _ = stream(100.0, 4.0)
    keep = bursty_loss(len(msgs), 0.2, 4.0, seed=3)
    assert_same(jittered(msgs, 0.005, seed=7), hold, keep=keep)


def test_commands_and_open_loop_bit_identical() -> None:
    """A set_param rebuilds the filter (the rows' indices are worked out again), a reset, a pause;
    and the open-loop tracker, whose rows stay the reference's."""
    msgs, _ = stream(38.0, 3.0, FAULTS["piston_mass"][0])
    commands = {40: ("set_param", {"name": "piston.mass", "value": 0.33}), 80: ("reset", {}),
                100: ("pause", {}), 105: ("resume", {})}
    assert_same(msgs, 1, commands=commands)
    assert_same(msgs, 5, cfg=CoreConfig(estimator="open_loop"))


@pytest.mark.parametrize(("name", "cfg"), [("rod_mass", CoreConfig()), ("piston_mass", CoreConfig(jacobian_every=3))])
def test_mid_batch_hand_backs_bit_identical(name: str, cfg: CoreConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch kernel's runs (hold 1) cut at random samples — a cut of 0 samples hands the sample
    to the per-sample path — on top of its own hand-backs (Jacobians due, a parameter written, a
    change or divergence test near its threshold): the outputs stay the reference's, with the
    fault's alarms, however the batch is split between the two paths."""
    rng, real, seen = random.Random(5), filter_batch.run, Counter()

    def cut(est: Any, inp: filter_batch.Inputs, Y: Any, k0: int, at: Any, mirror: Any) -> Any:
        end = k0 + rng.randrange(0, len(inp.ts) - k0 + 1)
        done = real(est, inp._replace(ts=inp.ts[:end]), Y, k0, at, mirror)
        if done is not None:
            seen["runs"] += 1
            seen["samples"] += len(done.innovations)
            seen["cut"] += end < len(inp.ts) and not done.handed_back
            seen["handed_back"] += done.handed_back
        return done

    monkeypatch.setattr(filter_batch, "run", cut)
    msgs, _ = stream(38.0, 4.0, FAULTS[name][0])
    out = assert_same(msgs, 1, cfg=cfg)
    assert raised(out), name
    n = sum(len(m["ch"]["theta"]) for m in msgs)
    assert seen["cut"] > 20 and seen["handed_back"] > 20, seen
    assert 0.2 * n < seen["samples"] < 0.9 * n, (seen, n)  # both paths take a good share of the samples
