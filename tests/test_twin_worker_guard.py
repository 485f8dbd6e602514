"""The twin's worker never dies mute (issue 30 item 5), through a real mosquitto. Faults are injected
where no real input reaches any more (the tampered checkpoint that used to is refused now,
tests/test_checkpoint_tamper.py): a health message that cannot be built is counted, reported in a
minimal health message, and the twin keeps publishing; a worker thread that dies all the same (a
``SystemExit`` raised inside it, which ``threading`` swallows silently) makes ``twin serve`` exit
with status 70 after its graceful stop, and a fleet twin's process exit at once with 70 (its will
published), so that a supervisor restarts it."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from conftest import Broker
from test_fleet import wait_for

from mbsd_twin.fleet.config import AssetSpec, FleetSettings
from mbsd_twin.fleet.feed import FleetFeeder
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism
from mbsd_twin.rig.client import connect
from mbsd_twin.twin.config.file import load_config
from mbsd_twin.twin.service import TwinService

ROOT = Path(__file__).resolve().parents[1]
MECH = load_mechanism(bundled_slider_crank())


class Watch:
    """Every message on the asset's twin topics, by leaf."""

    def __init__(self, url: str, asset: str) -> None:
        self.seen: dict[str, list[dict[str, Any]]] = {}
        self.lock = threading.Lock()
        self.client = connect(url, f"guard-watch-{asset}-{os.getpid()}")
        self.client.on_message = self._on
        self.client.subscribe(f"dt/v1/{asset}/twin/#", 1)

    def _on(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.seen.setdefault(msg.topic.rsplit("/", 1)[1], []).append(json.loads(msg.payload))

    def get(self, leaf: str) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.seen.get(leaf, []))

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


@pytest.fixture
def feed(broker: Broker) -> Iterator[FleetFeeder]:
    f = FleetFeeder(MECH, broker.url, ["g1"], rate=500.0, batch=10, duration=10.0).start()
    yield f
    f.stop()


def test_a_failing_health_message_is_counted_reported_and_the_twin_goes_on(broker: Broker,
                                                                            feed: FleetFeeder) -> None:
    cfg = load_config(None, env={}, overrides={"broker": {"url": broker.url}, "core": {"asset": "g1"},
                                               "service": {"health_interval": 0.2}})
    svc = TwinService(cfg)
    real, calls = svc.health, [0]

    def health() -> dict[str, Any]:  # the injected fault: the first three health messages fail
        calls[0] += 1
        if calls[0] <= 3:
            raise TypeError("string indices must be integers, not 'str'")
        return real()
    svc.health = health  # type: ignore[method-assign]
    watch = Watch(broker.url, "g1")
    try:
        with svc:
            wait_for("health after the failures", lambda: any("error" not in h for h in watch.get("health")), 30)
            n = len(watch.get("state"))
            wait_for("100 more states", lambda: len(watch.get("state")) >= n + 100, 30)
            assert svc.worker.is_alive()
    finally:
        watch.close()
    hs = watch.get("health")
    bad = [h for h in hs if "error" in h]
    assert len(bad) == 3 and all("TypeError: string indices" in h["error"] and h["degraded"] for h in bad)
    assert bad[-1]["counters"]["health_failed"] == 3
    good = next(h for h in hs if "error" not in h)
    assert good["counters"]["health_failed"] == 3 and good["counters"]["internal_error"] == 3


KILL_WORKER = """
import sys
from mbsd_twin.twin import service
from mbsd_twin.cli import main
real = service.TwinService.__init__
def init(self, cfg):
    real(self, cfg)
    def tick(now):  # the injected fault: the worker thread dies after 50 batches
        if self.core.stats["batches"] >= 50:
            raise SystemExit(3)
    self.ticks.append(tick)
service.TwinService.__init__ = init
sys.exit(main(sys.argv[1:]))
"""


def test_a_dead_worker_makes_twin_serve_exit_nonzero(broker: Broker, feed: FleetFeeder, tmp_path: Path) -> None:
    watch = Watch(broker.url, "g1")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MBSD_TWIN_")} | {"PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", KILL_WORKER, "twin", "serve", "--broker", broker.url, "--asset",
                             "g1"], env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        watch.close()
    assert proc.returncode == 70, err[-2000:]
    assert "worker thread (twin-worker) died" in err
    assert watch.get("status")[-1]["state"] == "offline" and len(watch.get("state")) >= 40


def _fleet_child(spec: AssetSpec, settings: FleetSettings) -> None:
    """``run_process`` (a local fleet twin's entry point) with the injected fault of the test above."""
    from mbsd_twin.fleet import member as fleet_member

    real = fleet_member.Member.start

    def start(self: Any) -> None:
        def tick(now: float) -> None:
            if self.svc.core.stats["batches"] >= 50:
                raise SystemExit(3)
        self.svc.ticks.append(tick)
        real(self)
    fleet_member.Member.start = start  # type: ignore[method-assign]
    fleet_member.run_process(spec, settings)


def test_a_dead_worker_ends_a_fleet_twins_process(broker: Broker, feed: FleetFeeder, tmp_path: Path) -> None:
    """The fleet's local backend would restart it (tests/test_fleet.py restarts a killed twin)."""
    settings = FleetSettings(broker=broker.url, store=str(tmp_path / "cp.sqlite"), checkpoint_interval=60.0)
    watch = Watch(broker.url, "g1")
    child = mp.get_context("fork").Process(target=_fleet_child, args=(AssetSpec("g1"), settings))
    child.start()
    try:
        child.join(60)
        assert child.exitcode == 70
        births = [s for s in watch.get("status") if s.get("state") == "online"]
        will = {"state": "offline", "instance": births[-1]["instance"]}
        wait_for("its will", lambda: watch.get("status")[-1] == will, 10)
        assert len(watch.get("state")) >= 40
    finally:
        if child.is_alive():
            child.kill()
            child.join(5)
        watch.close()
