"""Several assets' twins in one fleet process (issue #31 item 2, ``[fleet] twins_per_process``):
through ``mbsd-twin fleet serve`` and a real mosquitto, three assets share one process; one gets bad
data, is fenced off by a newer lease (its failure: it stops and is restarted alone, from its
checkpoint, in the same process), is changed in the fleet file (restarted alone), another is
removed — the third's outputs go on throughout, from its first and only instance. Killing the whole
process sends each asset's own ``offline`` will (one connection per twin) and restarts all of them
from their own checkpoints. The in-process host's restart rules are tested on stand-in members."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from conftest import Broker
from test_fleet import FleetWatch, Observer, fleet_text, ray_cluster, serve, stop, wait_for, write  # noqa: F401

from mbsd_twin.fleet.config import AssetSpec, FleetSettings, load_fleet
from mbsd_twin.fleet.feed import FleetFeeder
from mbsd_twin.fleet.restarts import Restarts
from mbsd_twin.fleet.shared.host import Host, run_group
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism
from mbsd_twin.rig.client import connect
from mbsd_twin.storage.checkpoint.store import CheckpointStore


class StateTimes:
    """Arrival time of every ``twin/state`` message per asset (gaps in an asset's outputs)."""

    def __init__(self, url: str) -> None:
        self.t: dict[str, list[float]] = {}
        self.lock = threading.Lock()
        self.client = connect(url, f"shared-states-{os.getpid()}")
        self.client.on_message = self._on
        self.client.subscribe("dt/v1/+/twin/state", 0)

    def _on(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.t.setdefault(msg.topic.split("/")[2], []).append(time.monotonic())

    def max_gap(self, asset: str, t0: float, t1: float) -> float:
        with self.lock:
            ts = [t0] + [t for t in self.t.get(asset, []) if t0 <= t <= t1] + [t1]
        return max(b - a for a, b in zip(ts, ts[1:], strict=False))

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def shared_text(url: str, assets: list[str], a2_health: float = 0.5) -> str:
    text = fleet_text(url, assets, "twins_per_process = 3")
    return text.replace('id = "a2"\n[asset.overrides.service]\nhealth_interval = 0.5',
                        f'id = "a2"\n[asset.overrides.service]\nhealth_interval = {a2_health}')


def test_assets_sharing_a_process_are_isolated(tmp_path: Path, broker: Broker) -> None:
    fleet = tmp_path / "fleet.toml"
    write(fleet, shared_text(broker.url, ["a1", "a2", "a3"]))
    assets = ["a1", "a2", "a3"]
    feeder = FleetFeeder(load_mechanism(bundled_slider_crank()), broker.url, assets, rate=200.0, batch=10,
                         duration=10.0).start()
    obs, states, rogue = Observer(broker.url), StateTimes(broker.url), connect(broker.url, "shared-rogue")
    fw = FleetWatch(broker.url)
    proc = serve(fleet, tmp_path / "fleet.log")
    store = CheckpointStore(str(tmp_path / "fleet-checkpoints.sqlite"))
    try:
        for a in assets:
            wait_for(f"{a} birth, state and health", lambda a=a: obs.births(a) and obs.states.get(a, 0) > 5
                     and a in obs.health, 120)
        first = {a: obs.births(a)[-1] for a in assets}
        pid = first["a1"]["pid"]
        assert {b["pid"] for b in first.values()} == {pid} and pid != proc.pid  # one process for the three
        assert len({b["instance"] for b in first.values()}) == 3
        wait_for("a checkpoint of a2", lambda: store.load("a2") is not None, 10)
        t0 = time.monotonic()

        for payload in (b"not json", b'{"asset": "a2", "seq": "x"}', json.dumps({"asset": "a1", "seq": 1})):
            rogue.publish("dt/v1/a2/meas/sensors", payload, qos=1)  # bad data, and another asset's message
        wait_for("a2's invalid messages counted", lambda: sum(
            obs.health.get("a2", {}).get("counters", {}).get("invalid", {}).values()) >= 3, 10)

        gen = store.acquire("a2", "intruder", 1, None, time.time())  # a newer instance's lease: a2 fenced off
        back = wait_for("a2 back", lambda: len(obs.births("a2")) > 1 and obs.births("a2")[-1], 20)
        assert back["pid"] == pid and back["generation"] == gen + 1 and back["restarted_from_checkpoint"]
        assert store.holder("a2").instance == back["instance"]  # type: ignore[union-attr]
        wait_for("the fleet status: a2 running again after 1 restart", lambda: fw.find(
            lambda m: fw.asset(m, "a2").get("restarts") == 1 and fw.asset(m, "a2").get("state") == "running"
            and fw.asset(m, "a2").get("instance") == back["instance"] and fw.asset(m, "a2").get("pid") == pid), 10)
        assert not fw.find(lambda m: fw.asset(m, "a1").get("state") not in (None, "starting", "running"))

        write(fleet, shared_text(broker.url, assets, a2_health=0.4))  # a2 changed: restarted alone
        wait_for("a2 reloaded", lambda: len(obs.births("a2")) > 2, 30)
        assert obs.births("a2")[-1]["pid"] == pid
        write(fleet, shared_text(broker.url, ["a1", "a2"], a2_health=0.4))  # a3 removed: it stops alone
        wait_for("a3 offline", lambda: obs.last_status("a3").get("state") == "offline", 20)
        n1, n2 = obs.states.get("a1", 0), obs.states.get("a2", 0)
        wait_for("a1 and a2 outputs after", lambda: obs.states["a1"] > n1 + 5 and obs.states["a2"] > n2 + 5, 10)
        t1 = time.monotonic()
        assert obs.births("a1") == [first["a1"]] and obs.births("a3") == [first["a3"]]
        assert states.max_gap("a1", t0, t1) < 2.0, "a1's outputs paused while the others were disturbed"
        assert sum(obs.health["a1"]["counters"]["invalid"].values()) == 0

        time.sleep(1.5)  # a checkpoint with batches in it
        os.kill(pid, signal.SIGKILL)  # the whole process: every twin in it restarts from its own checkpoint
        for a in ("a1", "a2"):
            wait_for(f"{a}'s own will", lambda a=a: obs.last_status(a).get("state") == "offline"
                     or len(obs.births(a)) > (1 if a == "a1" else 3), 10)
        again = {a: wait_for(f"{a} back", lambda a=a: obs.births(a)[-1]["pid"] != pid and obs.births(a)[-1], 60)
                 for a in ("a1", "a2")}
        assert again["a1"]["pid"] == again["a2"]["pid"]
        for a in ("a1", "a2"):
            with obs.lock:
                seen = [s["state"] for s in obs.status[a]]
            assert seen[-2:] == ["offline", "online"], (a, seen)  # the broker's will for each asset
            assert again[a]["restarted_from_checkpoint"]["rig_time"] is not None
    finally:
        stop(proc)
        feeder.stop()
        for c in (obs, states, fw):
            c.close()
        rogue.loop_stop()
        store.close()
    log = (tmp_path / "fleet.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    store = CheckpointStore(str(tmp_path / "fleet-checkpoints.sqlite"))
    for a in assets:  # each asset its own checkpoint under its own lease
        assert store.load(a) is not None and store.holder(a) is not None
    store.close()


def test_twins_per_process_changed_while_running(tmp_path: Path, broker: Broker) -> None:
    """An edit of twins_per_process restarts every twin (gracefully) in the new layout, each from
    its own last checkpoint."""
    fleet = tmp_path / "fleet.toml"
    write(fleet, fleet_text(broker.url, ["a1", "a2"]))
    feeder = FleetFeeder(load_mechanism(bundled_slider_crank()), broker.url, ["a1", "a2"], rate=200.0, batch=10,
                         duration=10.0).start()
    obs = Observer(broker.url)
    proc = serve(fleet, tmp_path / "fleet.log")
    try:
        for a in ("a1", "a2"):
            wait_for(f"{a} birth, state and health", lambda a=a: obs.births(a) and obs.states.get(a, 0) > 5
                     and a in obs.health, 120)
        assert obs.births("a1")[-1]["pid"] != obs.births("a2")[-1]["pid"]  # a process each
        write(fleet, fleet_text(broker.url, ["a1", "a2"], "twins_per_process = 2"))
        again = {a: wait_for(f"{a} again", lambda a=a: len(obs.births(a)) > 1 and obs.births(a)[-1], 30)
                 for a in ("a1", "a2")}
        assert again["a1"]["pid"] == again["a2"]["pid"]  # one process for both
        for a in ("a1", "a2"):
            with obs.lock:
                seen = [x["state"] for x in obs.status[a]]
            assert seen == ["online", "offline", "online"], (a, seen)
            assert again[a]["restarted_from_checkpoint"]["gap_s"] < 5.0  # its last checkpoint at the stop
        n = obs.states.get("a1", 0)
        wait_for("a1 outputs", lambda: obs.states.get("a1", 0) > n + 5, 10)
    finally:
        stop(proc)
        feeder.stop()
        obs.close()
    assert proc.returncode == 0, (tmp_path / "fleet.log").read_text()[-3000:]


def _group_with_a_dying_worker(specs: list[AssetSpec], settings: FleetSettings, conn: Any) -> None:
    """``run_group`` (a shared fleet process) where g2's first twin's worker thread dies after 30
    batches (an exception its guards do not catch, as in tests/test_twin_worker_guard.py)."""
    from mbsd_twin.fleet import member as fleet_member

    real, first = fleet_member.Member.start, [True]

    def start(self: Any) -> None:
        if self.spec.id == "g2" and first:
            first.clear()
            def tick(now: float) -> None:
                if self.svc.core.stats["batches"] >= 30:
                    raise SystemExit(3)
            self.svc.ticks.append(tick)
        real(self)
    fleet_member.Member.start = start  # type: ignore[method-assign]
    run_group("twins-t", specs, settings, conn)


def test_a_dead_worker_restarts_only_its_twin(tmp_path: Path, broker: Broker) -> None:
    settings = FleetSettings(broker=broker.url, store=str(tmp_path / "cp.sqlite"), checkpoint_interval=0.5,
                             restart_delay=0.2, twins_per_process=2)
    specs = [AssetSpec(a, overrides={"service": {"health_interval": 0.5}}) for a in ("g1", "g2")]
    feeder = FleetFeeder(load_mechanism(bundled_slider_crank()), broker.url, ["g1", "g2"], rate=200.0, batch=10,
                         duration=10.0).start()
    obs, states = Observer(broker.url), StateTimes(broker.url)
    ctx = mp.get_context("fork")
    mine, theirs = ctx.Pipe()
    child = ctx.Process(target=_group_with_a_dying_worker, args=(specs, settings, theirs))
    child.start()
    reports: list[Any] = []
    try:
        for a in ("g1", "g2"):
            wait_for(f"{a} birth", lambda a=a: obs.births(a), 120)
        g1 = obs.births("g1")[-1]
        t0 = time.monotonic()
        back = wait_for("g2 back", lambda: len(obs.births("g2")) > 1 and obs.births("g2")[-1], 60)
        with obs.lock:
            seen = [x["state"] for x in obs.status["g2"]]
        assert seen == ["online", "offline", "online"], seen  # the dead twin's offline, then its successor
        assert back["pid"] == g1["pid"] == child.pid and back["restarted_from_checkpoint"]["rig_time"] > 0
        n = obs.states.get("g2", 0)
        wait_for("g2 outputs again", lambda: obs.states.get("g2", 0) > n + 10, 10)
        assert obs.births("g1") == [g1] and states.max_gap("g1", t0, time.monotonic()) < 2.0
        while mine.poll(0.5):
            reports.append(mine.recv())
        child.terminate()
        child.join(20)
        assert child.exitcode == 0
        for a in ("g1", "g2"):  # their graceful stop at SIGTERM
            wait_for(f"{a} offline", lambda a=a: obs.last_status(a).get("state") == "offline", 5)
    finally:
        if child.is_alive():
            child.kill()
            child.join(5)
        feeder.stop()
        obs.close()
        states.close()
    assert ("dead", "g2", False) in reports and reports[-1] == ("alive", "g2")
    assert [r for r in reports if r[1] == "g1"] == [("alive", "g1")]


def test_ray_group_actors(tmp_path: Path, broker: Broker, ray_cluster: dict[str, Any]) -> None:  # noqa: F811
    """On Ray: two assets in one group actor, a third in a second one; one removed, the others
    untouched; the group actor's process killed: Ray restarts it empty and the fleet sends it its
    (remaining) asset, resumed from its checkpoint — the removed one stays removed."""
    fleet = tmp_path / "fleet.toml"
    extra = 'twins_per_process = 2\nray_num_cpus = 0.5\nray_strategy = "DEFAULT"'
    write(fleet, fleet_text(broker.url, ["a1", "a2"], extra))
    feeder = FleetFeeder(load_mechanism(bundled_slider_crank()), broker.url, ["a1", "a2", "a3"], rate=200.0,
                         batch=10, duration=10.0).start()
    obs = Observer(broker.url)
    proc = serve(fleet, tmp_path / "fleet.log", "--ray", ray_cluster["address"])
    try:
        for a in ("a1", "a2"):
            wait_for(f"{a} birth and state", lambda a=a: obs.births(a) and obs.states.get(a, 0) > 5, 180)
        a1, a2 = obs.births("a1")[-1], obs.births("a2")[-1]
        assert a1["pid"] == a2["pid"] and a1["node_id"] == a2["node_id"]  # one actor
        write(fleet, fleet_text(broker.url, ["a1", "a2", "a3"], extra))
        a3 = wait_for("a3 birth", lambda: obs.births("a3") and obs.births("a3")[-1], 120)
        assert a3["pid"] != a1["pid"]  # the first group is full: a second actor
        write(fleet, fleet_text(broker.url, ["a1", "a3"], extra))
        wait_for("a2 offline", lambda: obs.last_status("a2").get("state") == "offline", 30)
        assert obs.births("a1") == [a1] and obs.births("a3") == [a3]
        time.sleep(1.5)  # a checkpoint with batches in it
        os.kill(a1["pid"], signal.SIGKILL)
        back = wait_for("a1 back", lambda: len(obs.births("a1")) > 1 and obs.births("a1")[-1], 120)
        assert back["pid"] != a1["pid"] and back["restarted_from_checkpoint"]["rig_time"] > 0
        n = obs.states.get("a1", 0)
        wait_for("a1 outputs again", lambda: obs.states.get("a1", 0) > n + 5, 30)
        time.sleep(2.0)  # the fleet's next looks at the restarted actor
        assert obs.births("a3") == [a3] and len(obs.births("a2")) == 1  # a2 not brought back
        log = (tmp_path / "fleet.log").read_text()
        assert "lacks twin a1 (restarted by Ray" in log
    finally:
        stop(proc)
        feeder.stop()
        obs.close()
    assert proc.returncode == 0, (tmp_path / "fleet.log").read_text()[-3000:]


class FakeSvc:
    def __init__(self) -> None:
        self.worker = threading.Thread(target=lambda: None)
        self.instance = "fake"


class FakeMember:
    """Stands in for a Member: records starts and stops (``save``)."""

    def __init__(self, spec: AssetSpec, log: list[tuple[str, str, Any]]) -> None:
        self.spec, self.log, self.svc = spec, log, FakeSvc()
        self.on_exit: Any = None

    def start(self) -> None:
        self.log.append(("start", self.spec.id, None))

    def stop(self, save: bool = True) -> None:
        self.log.append(("stop", self.spec.id, save))


def test_host_restarts_only_the_failed_twin() -> None:
    log: list[tuple[str, str, Any]] = []
    reports: list[tuple[Any, ...]] = []
    broken = {"b": 2}  # b cannot be built twice

    def make(spec: AssetSpec, settings: FleetSettings) -> Any:
        if broken.get(spec.id):
            broken[spec.id] -= 1
            raise OSError("mechanism file vanished")
        return FakeMember(spec, log)

    s = FleetSettings(restart_delay=0.01, max_restarts=3)
    host = Host(reports.append, make)  # type: ignore[arg-type]
    for a in ("a", "b", "c"):
        host.add(AssetSpec(a), s)
    assert log == [("start", "a", None), ("start", "c", None)] and reports[-2:] == [("dead", "b", False),
                                                                                    ("alive", "c")]
    host.slots["a"].member.on_exit(70)  # type: ignore[union-attr]  # a's worker died
    t = time.monotonic()
    host.poll(t)
    assert log[2:] == [("stop", "a", False)]  # no last checkpoint of a core that failed
    for k in range(1, 40):
        host.poll(t + 0.05 * k)
    assert sorted(log[3:]) == [("start", "a", None), ("start", "b", None)]  # b after two failed builds
    assert ("stop", "c", False) not in log and ("dead", "c", False) not in reports
    host.close()
    assert sorted(x for x in log if x[0] == "stop" and x[2]) == [("stop", "a", True), ("stop", "b", True),
                                                                ("stop", "c", True)]


def test_a_twin_that_keeps_failing_is_given_up() -> None:
    reports: list[tuple[Any, ...]] = []
    host = Host(reports.append, lambda spec, s: (_ for _ in ()).throw(OSError("no")))  # type: ignore[arg-type]
    host.add(AssetSpec("x"), FleetSettings(restart_delay=0.01, max_restarts=2))
    for k in range(1, 200):
        host.poll(time.monotonic() + 0.1 * k)
    assert host.slots["x"].r.restarts == 2 and reports[-1] == ("dead", "x", True)


def test_restart_backoff() -> None:
    r = Restarts(delay=1.0, max_restarts=-1, started_at=0.0)
    assert r.died(1.0) and not r.died(1.5)  # a quick death, noticed once
    assert not r.due(1.9) and r.due(2.0)
    r.restarted(2.0)
    assert r.died(3.0) and not r.due(4.9) and r.due(5.0)  # the second quick death in a row: twice the delay
    r.restarted(5.0)
    assert r.died(100.0) and r.due(101.0)  # after a long run: the plain delay again


def test_twins_per_process_is_checked(tmp_path: Path) -> None:
    p = tmp_path / "fleet.toml"
    p.write_text('[fleet]\ntwins_per_process = 0\n[[asset]]\nid = "a"\n')
    try:
        load_fleet(str(p))
    except ValueError as exc:
        assert "twins_per_process: must be >= 1, got 0" in str(exc)
    else:
        raise AssertionError("accepted")
    p.write_text('[fleet]\ntwins_per_process = 4\n[[asset]]\nid = "a"\n')
    assert load_fleet(str(p)).settings.twins_per_process == 4
