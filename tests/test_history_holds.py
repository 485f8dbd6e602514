"""History completeness under overload (issue #19): every change of the solver's hold level is an
event row of the history (kind ``hold``, ``t`` = the first rig sample of the first batch at the new
level), so what is missing from a twin's stored samples can be accounted for sample by sample.

A real twin (rig → mosquitto → TwinService, default hold levels 1, 5, 20) with a SQLite history
gets a backlog: 1 s of a 1 kHz rig in real time, then 3 s of batches at once, then 5 s in real
time again. For every batch the rig sent, the stored ``state.theta`` samples must be exactly those
a hold of h outputs — every h-th sample aligned to the batch's last one (docs/mqtt-contract.md),
h the level of the hold events at the batch's first sample — or none for a batch the twin counted
as dropped; no sample is stored twice."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_twin_broker import _config, _wait

from mbsd_twin import load_mechanism
from mbsd_twin.model.loader import bundled_slider_crank
from mbsd_twin.rig.client import connect
from mbsd_twin.rig.synthetic import RigConfig, stream
from mbsd_twin.storage.history.stores import SqliteStore
from mbsd_twin.twin.protocol import Topics, encode
from mbsd_twin.twin.service import TwinService

N, RATE = 20, 1000.0  # samples per batch, samples/s
PACED, BURST, AFTER = 50, 150, 250  # batches: in real time, at once, in real time


@pytest.fixture(scope="module")
def messages() -> list[dict[str, Any]]:
    return stream(load_mechanism(bundled_slider_crank()), RigConfig(rate=RATE, batch=N), (PACED + BURST + AFTER) * N
                  / RATE)


def _feed(url: str, msgs: list[dict[str, Any]]) -> None:
    c = connect(url, "holds-rig")
    topic = Topics("dt/v1/sc-01").sensors
    t0 = time.monotonic()
    for i, m in enumerate(msgs):
        if not PACED <= i < PACED + BURST:  # the burst: a backlog of 3 s arriving at once
            delay = t0 + (i if i < PACED else i - BURST) * N / RATE - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        c.publish(topic, encode(m), qos=1)
    c.loop_stop()
    c.disconnect()


def _run(broker: Any, tmp_path: Path, msgs: list[dict[str, Any]], service: dict[str, Any]) -> tuple[Any, ...]:
    db = tmp_path / "h.sqlite"
    cfg = _config(broker, tmp_path, history={"path": str(db), "batch_interval": 0.2},
                  service={"health_interval": 0.5, **service})
    assert cfg.service.hold_levels == (1, 5, 20)  # the defaults
    with TwinService(cfg) as svc:
        assert _wait(svc.connected.is_set, 5)
        _feed(broker.url, msgs)
        assert _wait(lambda: not svc.batches, 30)
        time.sleep(0.5)
        counts = dict(svc.counts)
    store = SqliteStore(str(db), create=False)
    t, _, _ = store.query("sc-01", "state.theta", -math.inf, math.inf)
    holds = [(ts, json.loads(body)) for kind, ts, _, body in store.events("sc-01") if kind == "hold"]
    store.close()
    return np.asarray(t), sorted(holds, key=lambda h: h[0]), counts


def account(t0s: list[float], n: int, dt: float, t: np.ndarray, holds: list[tuple[float, dict[str, Any]]]
            ) -> dict[str, int]:
    """Check each sent batch (first sample at ``t0s[i]``, ``n`` samples ``dt`` apart) against the
    stored sample times ``t`` and the ``hold`` events: its stored samples are every h-th, aligned to
    its last sample (h: the level of the last hold event at or before its first sample), or none;
    no sample twice. The figures: batches, ``empty`` (nothing stored), ``coarse_batches`` (h > 1),
    ``missing`` samples and ``missing_in_coarse``."""
    t0s_arr = np.asarray(t0s)
    i = np.searchsorted(t0s_arr, t + 0.5 * dt, side="right") - 1  # the batch of every stored sample
    k = np.rint((t - t0s_arr[i]) / dt).astype(int)  # its place in the batch
    assert np.all((k >= 0) & (k < n)) and np.allclose(t, t0s_arr[i] + k * dt, rtol=0, atol=1e-9)
    assert len(set(zip(i.tolist(), k.tolist(), strict=True))) == len(t), "samples stored twice"
    per_batch: dict[int, set[int]] = {}
    for b, j in zip(i.tolist(), k.tolist(), strict=True):
        per_batch.setdefault(b, set()).add(j)
    starts, levels = [h[0] for h in holds], [h[1]["to"] for h in holds]
    fig = {"batches": len(t0s), "empty": 0, "coarse_batches": 0, "missing": 0, "missing_in_coarse": 0}
    for b, t0 in enumerate(t0s):
        at = np.searchsorted(starts, t0 + 0.5 * dt, side="right") - 1
        h = levels[at] if at >= 0 else 1
        got = per_batch.get(b, set())
        fig["missing"] += n - len(got)
        if not got:
            fig["empty"] += 1
            continue
        assert got == set(range((n - 1) % h, n, h)), (b, t0, h, sorted(got))
        if h > 1:
            fig["coarse_batches"] += 1
            fig["missing_in_coarse"] += n - len(got)
    return fig


def _account(msgs: list[dict[str, Any]], t: np.ndarray, holds: list[tuple[float, dict[str, Any]]],
             dropped: int) -> dict[str, int]:
    fig = account([m["t0"] for m in msgs], N, msgs[0]["dt"], t, holds)
    assert fig["empty"] == dropped  # the batches with nothing stored are those the twin counted as dropped
    return fig


# slow: a real-time twin asserted to drop no batch; beside the parallel suite on a slow 2-core
# machine it dropped some (this stop's CI run)
@pytest.mark.slow
def test_without_drops_every_missing_sample_lies_in_a_coarse_hold_interval(broker: Any, tmp_path: Path,
                                                                           messages: list[dict[str, Any]]) -> None:
    """No coalescing, no full queue (max_lag, flood_lag 60 s, queue 1000): the backlog is worked off
    at coarser holds; each missing sample lies inside a recorded coarse-hold interval and every
    sample outside those intervals is stored exactly once. ``lag_high`` 0.1 s: at the default 0.25 s
    a twin of 84 µs per sample works the 3,000-sample burst off at hold 1 (0.25 s; at 95 µs it
    degraded), and the test would test nothing."""
    t, holds, counts = _run(broker, tmp_path, messages, {"max_lag": 60.0, "flood_lag": 60.0, "queue_size": 1000,
                                                         "lag_low_batches": 25, "lag_high": 0.1})
    fig = _account(messages, t, holds, counts.get("dropped_overload", 0))
    print("holds", [(ts, h["from"], h["to"]) for ts, h in holds], "figures", fig, "degrades", counts.get("degrade"))
    assert counts.get("dropped_overload", 0) == 0 and fig["empty"] == 0
    assert [h["to"] for _, h in holds][:2] == [5, 20] and holds[-1][1]["to"] == 1  # degraded, then recovered
    assert counts["degrade"] == sum(h["to"] > h["from"] for _, h in holds)
    assert fig["missing"] == fig["missing_in_coarse"] > 0


def test_with_default_service_settings_missing_samples_are_holds_or_counted_drops(
        broker: Any, tmp_path: Path, messages: list[dict[str, Any]]) -> None:
    """The default service settings (queue 50, max_lag 0.5 s): the backlog is partly dropped
    (coalesced, or pushed out of the full queue: ``dropped_overload``) and partly worked off at
    coarser holds. Every missing sample is in a dropped batch or a coarse-hold batch, sample by sample."""
    t, holds, counts = _run(broker, tmp_path, messages, {"lag_low_batches": 25})
    fig = _account(messages, t, holds, counts.get("dropped_overload", 0))
    print("holds", [(ts, h["from"], h["to"]) for ts, h in holds], "figures", fig, "counts",
          {k: counts.get(k) for k in ("dropped_overload", "coalesced", "degrade")})
    assert fig["missing"] == fig["missing_in_coarse"] + N * fig["empty"]
    assert fig["empty"] > 0 and holds  # this backlog is beyond what the default queue holds
