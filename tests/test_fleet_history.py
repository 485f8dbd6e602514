"""Node loss with history (issue #19): a fleet of four slider-crank twins on a real two-node Ray
cluster (SPREAD: two per node), each writing its history — and the fleet its checkpoints — to a
PostgreSQL test database, fed by simulated rigs through a real mosquitto. The worker node's raylet
is killed: its two twins are back within 10 s (measured), the restart with its gap is an event row
in the history and a birth on the status topic, and every rig sample outside the recorded gap is
stored, once (the only duplicates: the overlap while the orphaned actor still runs beside its
successor). The head node's twins have no gap at all. The twins run at hold level 1 only with a
deep queue (a coarser hold, the default's answer to overload, thins the outputs by design) — and,
in the ``defaults`` variant, with the default hold levels (1, 5, 20) and queue: then every sample
missing outside the gap must lie in a batch of a coarser hold (the history's ``hold`` events) or
in a batch the twin dropped (counted), stored as that hold outputs it (tests/test_history_holds.py)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
import pytest
from conftest import Broker
from test_fleet import (  # noqa: F401  (ray_cluster: the two-node cluster fixture)
    Observer,
    _ours,
    _ppid,
    ray_cluster,
    serve,
    stop,
    wait_for,
    write,
)
from test_history import pg_db  # noqa: F401  (fixture)
from test_history_holds import account

from mbsd_twin.fleet.feed import FleetFeeder
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism
from mbsd_twin.storage.history.pg import PostgresStore

ASSETS = ["n1", "n2", "n3", "n4"]
RATE, BATCH = 200.0, 20  # per rig: 10 messages/s (1 kHz starves four twins plus Ray on this 2-core machine)

RESTART_S = 60.0  # a twin on a killed node back, and answering, within this [s] (generous for load)


@pytest.fixture
def pg_name(pg_db: tuple[str, Any]) -> str:  # noqa: F811
    """The name of a throw-away database on the local server (test_history's fixture)."""
    return pg_db[1][1]


class TimedObserver(Observer):
    """The fleet test's observer, also keeping the arrival time of every birth and state message."""

    def __init__(self, url: str) -> None:
        self.arrivals: dict[str, list[tuple[float, str]]] = {}
        super().__init__(url)

    def _on(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        asset, leaf = msg.topic.split("/")[2], msg.topic.split("/")[-1]
        with self.lock:
            self.arrivals.setdefault(asset, []).append((time.time(), leaf))
        super()._on(client, userdata, msg)

    def first_state_after(self, asset: str, t: float) -> float | None:
        with self.lock:
            return next((w for w, leaf in self.arrivals.get(asset, []) if leaf == "state" and w > t), None)


def fleet_text(broker: str, store: str, twin_toml: Path, spool: Path) -> str:
    out = (f'[fleet]\nbroker = "{broker}"\nconfig = "{twin_toml}"\nstore = "{store}"\ncheckpoint_interval = 1.0\n'
           'watch_interval = 0.5\nray_num_cpus = 0.25\nray_strategy = "SPREAD"\n')
    for a in ASSETS:
        out += (f'\n[[asset]]\nid = "{a}"\n[asset.overrides.service]\nhealth_interval = 0.5\n'
                f'[asset.overrides.history]\nspool_dir = "{spool / a}"\n')
    return out


def sample_ids(t: np.ndarray) -> np.ndarray:
    """Rig sample times → sample numbers (the feeder's rig time is seq·BATCH/RATE + k/RATE)."""
    return np.rint(np.asarray(t) * RATE).astype(np.int64)


def ranges(ids: set[int]) -> list[tuple[int, int]]:
    """Sample numbers as (first, last) runs, for a readable failure."""
    out: list[tuple[int, int]] = []
    for i in sorted(ids):
        if out and i == out[-1][1] + 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out[:20]


def holds_of(events: list[Any]) -> list[tuple[float, dict[str, Any]]]:
    return sorted(((t, json.loads(b)) for kind, t, _, b in events if kind == "hold"), key=lambda h: h[0])


def unexplained(missing: set[int], count: Counter[int], holds: list[tuple[float, dict[str, Any]]]) -> set[int]:
    """The missing samples neither in a batch of a coarser hold nor in a batch of which nothing is stored."""
    starts, levels = [h[0] for h in holds], [h[1]["to"] for h in holds]
    stored_batches = {i // BATCH for i in count}

    def coarse(b: int) -> bool:
        at = int(np.searchsorted(starts, b * BATCH / RATE + 0.5 / RATE, side="right")) - 1
        return at >= 0 and levels[at] > 1
    return {i for i in missing if i // BATCH in stored_batches and not coarse(i // BATCH)}


def accounted(seqs: list[int], t: np.ndarray, events: list[Any]) -> dict[str, Any]:
    """A surviving twin with the default hold levels: the batches ``seqs`` sent within its stored span
    hold the samples of their recorded hold or none, and those with none are its counted drops."""
    ids = sample_ids(t)
    seqs = [q for q in seqs if ids.min() <= q * BATCH and q * BATCH + BATCH - 1 <= ids.max()]
    holds = holds_of(events)
    fig = account([q * BATCH / RATE for q in seqs], BATCH, 1 / RATE,
                  t[(ids >= seqs[0] * BATCH) & (ids < seqs[-1] * BATCH + BATCH)], holds)
    health = [json.loads(b) for kind, _, _, b in events if kind == "health"]
    assert fig["empty"] == health[-1]["counters"]["dropped_overload"], (fig, health[-1]["counters"])
    return {**fig, "holds": [(h[0], h[1]["to"]) for h in holds]}


# every sample through the filter and into the outputs: no coarser hold level (it thins the outputs to every
# h-th sample by design) and a queue that lags rather than drops on this loaded machine; or the defaults
SERVICE = {"hold1": "[service]\nhold_levels = [1]\nqueue_size = 1000\n", "defaults": ""}


# every sample of four real-time twins asserted: it needs the machine to itself (beside the parallel suite
# a restarted twin lagged into coalescing its backlog); make test-slow runs it after the suite, in CI too
@pytest.mark.slow
@pytest.mark.parametrize("service", list(SERVICE))
def test_node_loss_gap_is_recorded_and_nothing_else_is_lost(tmp_path: Path, broker: Broker, pg_name: str,
                                                            ray_cluster: dict[str, Any],  # noqa: F811
                                                            service: str) -> None:
    dsn = f"host=127.0.0.1 port=5432 user=postgres dbname={pg_name}"
    twin_toml = tmp_path / "twin.toml"
    twin_toml.write_text(f'[history]\nbackend = "postgresql"\ndsn = "{dsn}"\n{SERVICE[service]}')
    fleet = tmp_path / "fleet.toml"
    write(fleet, fleet_text(broker.url, f"postgresql://postgres@127.0.0.1:5432/{pg_name}", twin_toml,
                            tmp_path / "spool"))
    feeder = FleetFeeder(load_mechanism(bundled_slider_crank()), broker.url, ASSETS, rate=RATE, batch=BATCH,
                         duration=10.0).start()
    obs = TimedObserver(broker.url)
    proc = serve(fleet, tmp_path / "fleet.log", "--ray", ray_cluster["address"])
    figures: dict[str, Any] = {}
    try:
        for a in ASSETS:
            wait_for(f"{a} birth and state", lambda a=a: obs.births(a) and obs.states.get(a, 0) > 5, 150)
        raylet = next(p for p in _ours(ray_cluster["temp"]) if b"raylet" in Path(f"/proc/{p}/cmdline").read_bytes()
                      and f"node_manager_port={ray_cluster['worker_nm_port']}".encode()
                      in Path(f"/proc/{p}/cmdline").read_bytes())
        on_worker = [a for a in ASSETS if _ppid(obs.births(a)[-1]["pid"]) == raylet]
        assert len(on_worker) == 2, f"SPREAD placed {on_worker} on the second node"
        on_head = [a for a in ASSETS if a not in on_worker]
        first = {a: obs.births(a)[-1] for a in ASSETS}
        time.sleep(5.0)  # history and checkpoints with data in them
        os.kill(raylet, signal.SIGKILL)
        t_kill = time.time()
        back: dict[str, dict[str, Any]] = {}
        for a in on_worker:
            # the 10 s of the fleet's target are a figure of benchmarks (printed below), not a bound
            # of this test: a loaded machine delays Ray's failure detection and the restart
            back[a] = wait_for(f"{a} back", lambda a=a: len(obs.births(a)) > 1 and obs.births(a)[-1], RESTART_S)
        for a in on_worker:
            born = next(w for w, leaf in reversed(obs.arrivals[a]) if leaf == "status")
            t_state = wait_for(f"{a} state after its restart", lambda a=a, b=born: obs.first_state_after(a, b),
                               RESTART_S - (time.time() - t_kill))
            figures[a] = {"birth_s": round(born - t_kill, 2), "state_s": round(t_state - t_kill, 2)}
            assert t_state - t_kill < RESTART_S, figures
            r = back[a]["restarted_from_checkpoint"]
            assert back[a]["instance"] != first[a]["instance"] and _ppid(back[a]["pid"]) != raylet
            assert 0 < r["gap_s"] < RESTART_S and r["rig_time"] is not None
        for a in on_head:
            assert obs.births(a) == [first[a]]  # untouched
        time.sleep(6.0)  # the restarted twins running on (the orphans gone)
    finally:
        feeder.stop()
        time.sleep(2.0)  # the last batches through the twins
        stop(proc)  # graceful: every history writer drains
        obs.close()
    log = (tmp_path / "fleet.log").read_text()
    assert proc.returncode == 0, log[-3000:]

    store = PostgresStore(dsn)
    try:
        for a in ASSETS:
            sent = {seq * BATCH + k for seq in feeder.sent_at[a] for k in range(BATCH)}
            t, _, _ = store.query(a, "state.theta", -np.inf, np.inf)
            ids = sample_ids(t)
            count = Counter(ids.tolist())
            lo, hi = int(ids.min()), int(ids.max())
            want = {i for i in sent if lo <= i <= hi}
            events = store.events(a)
            restarts = [json.loads(b) for kind, _, _, b in events if kind == "status"
                        and json.loads(b).get("state") == "restarted"]
            holds = holds_of(events)
            if a in on_head:
                assert not restarts
                if service == "defaults":
                    figures[a] = accounted(sorted(feeder.sent_at[a]), np.asarray(t), events)
                    continue
                assert want == set(count), f"{a}: {len(want - set(count))} samples missing: {ranges(want - set(count))}"
                assert max(count.values()) == 1, f"{a}: duplicated samples"
                figures[a] = {"samples": len(count), "missing": 0, "duplicated": 0}
                continue
            assert len(restarts) == 1, restarts
            rc = restarts[0]["restarted_from_checkpoint"]
            assert rc["gap_s"] == back[a]["restarted_from_checkpoint"]["gap_s"]
            # the gap in rig time: from the newest sample stored before the restart (recorded in the
            # restart row; the dead twin's unwritten history queue went with it, so this is up to a
            # batch_interval before the checkpoint's rig time) to the restarted twin's first sample (its
            # filter re-initialises there: the first resync event after the restart row)
            assert restarts[0]["history_last_t"] is not None
            wall_restart = next(w for kind, _, w, b in events if kind == "status" and '"restarted"' in b)
            gap_end = min(tt for kind, tt, w, _ in events if kind == "resync" and w >= wall_restart)
            g0, g1 = int(np.floor(restarts[0]["history_last_t"] * RATE)), int(np.rint(gap_end * RATE))
            outside = {i for i in want if not g0 <= i <= g1}
            missing = unexplained(outside - set(count), count, holds) if service == "defaults" else outside - set(count)
            assert not missing, f"{a}: {len(missing)} missing outside the gap [{g0}, {g1}]: {ranges(missing)}"
            dup = sorted(i for i, c in count.items() if c > 1)
            # the overlap: the orphaned actor (its raylet gone) still runs beside its successor for a moment
            assert all(i >= g1 for i in dup), f"{a}: duplicates before the restart: {dup[:20]}"
            overlap = (dup[-1] - g1 + 1) / RATE if dup else 0.0
            assert overlap < 5.0
            figures[a].update({"gap_rig_s": round((g1 - g0) / RATE, 2), "gap_s": rc["gap_s"],
                               "history_behind_checkpoint_s": round(rc["rig_time"] - g0 / RATE, 3),
                               "lost_in_gap": len({i for i in want if g0 <= i <= g1} - set(count)),
                               "overlap_s": round(overlap, 2),
                               "missing_outside_gap": len(outside - set(count)), "holds": len(holds),
                               "duplicated": len(dup), "samples": len(count)})
    finally:
        store.close()
    print(f"node loss figures ({service}):", json.dumps(figures))
