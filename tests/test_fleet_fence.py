"""Fencing an older instance of a fleet twin (issue #19: after a Ray node loss the orphaned actor
runs on beside its successor for a moment; issue #30: no message of an outsider fences a twin).
Two fleet members of the same asset in this process, through a real mosquitto, with one SQLite
history and one checkpoint store (SQLite or PostgreSQL): the newer one takes the asset's lease in
the store; the older one, hinted by the newer birth and at its next checkpoint, finds it lost and
stops at once — no more outputs, history rows or checkpoints, a clean disconnect (its ``offline``
will does not replace the newer birth), then its process exit (here: recorded). A forged birth,
retained or not, from the future or plausible, fences nobody."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
import pytest
from conftest import Broker
from test_fleet import wait_for
from test_history import pg_db  # noqa: F401  (fixture)

from mbsd_twin.fleet.config import AssetSpec, FleetSettings
from mbsd_twin.fleet.feed import FleetFeeder
from mbsd_twin.fleet.fence import EXIT_SUPERSEDED
from mbsd_twin.fleet.member import Member
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism
from mbsd_twin.rig.client import connect
from mbsd_twin.storage.checkpoint.store import Checkpoint, CheckpointStore, LeaseLost
from mbsd_twin.storage.history.stores import SqliteStore

RATE = 200.0


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "cp.sqlite")
        return
    _, (admin, name) = request.getfixturevalue("pg_db")
    yield f"postgresql://postgres@127.0.0.1:5432/{name}"


def test_a_newer_instance_fences_the_older_one(tmp_path: Path, broker: Broker, store_url: str) -> None:
    db = tmp_path / "h.sqlite"
    settings = FleetSettings(broker=broker.url, store=store_url, checkpoint_interval=0.5)
    spec = AssetSpec("a1", overrides={"history": {"path": str(db), "batch_interval": 0.2},
                                      "service": {"health_interval": 0.5}})
    status: list[dict[str, Any]] = []
    lock = threading.Lock()
    watch = connect(broker.url, "fence-watch")

    def on(client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        with lock:
            status.append(json.loads(msg.payload))
    watch.on_message = on
    watch.subscribe("dt/v1/a1/twin/status", 1)
    feeder = FleetFeeder(load_mechanism(bundled_slider_crank()), broker.url, ["a1"], rate=RATE, batch=10,
                         duration=10.0).start()
    a = Member(spec, settings)
    exits: list[int] = []
    a.on_exit = exits.append  # in a fleet: os._exit, and its supervisor starts it again
    b: Member | None = None
    try:
        a.start()
        wait_for("the first twin's outputs and a checkpoint", lambda: a.svc.core.stats["batches"] > 20
                 and a.svc.counts["checkpoints"] > 1, 60)
        b = Member(spec, settings)  # takes the lease, resumes from the checkpoint, as Ray's restarted actor does
        assert (a.fence.generation, b.fence.generation) == (1, 2)
        b.start()
        wait_for("the first twin fenced, its process ended", lambda: exits, 10)
        assert exits == [EXIT_SUPERSEDED] and a.svc.superseded and b.resumed.get("restarted_from_checkpoint")
        assert b.svc.instance in a.svc.superseded and "generation 2" in a.svc.superseded
        saved = a.svc.counts["checkpoints"]
        # both running on: without the fence the first would store every sample twice
        wait_for("checkpoints of the second twin", lambda: b.svc.counts["checkpoints"] > 4,  # type: ignore[union-attr]
                 20)
        assert a.svc.counts["checkpoints"] == saved and a.svc.core.stats["batches"] > 0
        a.stop()
        b_batches = b.svc.core.stats["batches"]
        b.stop()
        offline = {"state": "offline", "instance": b.svc.instance}
        wait_for("the second twin's offline", lambda: status[-1] == offline, 5)
    finally:
        for m in (a, b):
            if m is not None and not m.svc.stopping.is_set():
                m.stop()
        feeder.stop()
        watch.loop_stop()
        watch.disconnect()
    with lock:
        seen = [(s["state"], s["instance"]) for s in status]
    born = seen.index(("online", b.svc.instance))
    assert ("offline", a.svc.instance) not in seen[born:], seen  # nothing of the first one after that birth
    assert seen[-1] == ("offline", b.svc.instance), seen  # the second one's own graceful stop

    store = SqliteStore(str(db), create=False)
    t, _, _ = store.query("a1", "state.theta", -np.inf, np.inf)
    ck = CheckpointStore(settings.store).load("a1")
    lease = CheckpointStore(settings.store).holder("a1")
    assert lease is not None and (lease.generation, lease.instance) == (2, b.svc.instance)
    store.close()
    ids = np.rint(np.asarray(t) * RATE).astype(np.int64)
    assert len(np.unique(ids)) == len(ids), "samples stored twice"
    assert b_batches > 20 and len(ids) > 10 * (a.svc.core.stats["batches"] + b_batches) * 0.9
    assert ck is not None and json.loads(ck.state)["core"]["last_seq"] == b.svc.core.last_seq  # the second's


def test_an_unreachable_checkpoint_store_is_no_restart(tmp_path: Path, broker: Broker) -> None:
    """A twin whose checkpoint store refuses connections starts fresh, says why in its birth, and its
    history row says the store was unavailable — not that the twin restarted (a fleet test once
    counted such a row, from a schema race on a new database, as a restart of a healthy twin)."""
    from conftest import free_port

    db = tmp_path / "h.sqlite"
    settings = FleetSettings(broker=broker.url, store=f"postgresql://u@127.0.0.1:{free_port()}/db?connect_timeout=1",
                             checkpoint_interval=60.0)
    spec = AssetSpec("a1", overrides={"history": {"path": str(db), "batch_interval": 0.2}})
    t0 = time.monotonic()
    m = Member(spec, settings)
    took = time.monotonic() - t0
    m.start()
    wait_for("connected", m.svc.connected.is_set, 30)
    m.stop()
    assert not m.found and "127.0.0.1" in m.resumed["checkpoint_rejected"] and took >= 1.0  # tried 3 times
    rows = [json.loads(b) for kind, _, _, b in SqliteStore(str(db)).events("a1") if kind == "status"]
    assert [r["state"] for r in rows] == ["checkpoint_unavailable"], rows
    assert rows[0]["history_last_t"] is None and "127.0.0.1" in rows[0]["checkpoint_rejected"]


FORGED = {"state": "online", "instance": "x", "pid": 1, "started_at": 9999999999}


class States:
    """Arrival times (monotonic) of the twin's state messages and every message on its status topic."""

    def __init__(self, url: str, asset: str, auth: tuple[str, str] | None = None) -> None:
        self.t: list[float] = []
        self.lock = threading.Lock()
        self.client = connect(url, f"states-{asset}-{time.monotonic_ns()}", auth=auth)
        self.client.on_message = self._on
        self.client.subscribe(f"dt/v1/{asset}/twin/state", 0)

    def _on(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.t.append(time.monotonic())

    def between(self, t0: float, t1: float) -> int:
        with self.lock:
            return sum(t0 <= t < t1 for t in self.t)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def sent_between(feeder: FleetFeeder, asset: str, t0: float, t1: float) -> int:
    return sum(t0 <= t < t1 for t in list(feeder.sent_at[asset].values()))


def send(url: str, topic: str, bodies: list[tuple[dict[str, Any], bool]], auth: tuple[str, str] | None = None,
         qos: int = 1) -> None:
    """Publish ``bodies`` ((body, retain) pairs) on ``topic`` from one new connection, then disconnect.
    A broker that drops the connection for a refused message (mosquitto does, for a retained one
    its ACL denies) ends the rest of them: that is the broker refusing, as wanted."""
    c = connect(url, f"mallory-{time.monotonic_ns()}", auth=auth)
    c.reconnect_delay_set(60, 60)  # once dropped, stays dropped
    try:
        for body, retain in bodies:
            info = c.publish(topic, json.dumps(body), qos=qos, retain=retain)
            if qos and info.rc == mqtt.MQTT_ERR_SUCCESS:
                t_end = time.monotonic() + 5
                while not info.is_published() and c.is_connected() and time.monotonic() < t_end:
                    time.sleep(0.01)
    finally:
        c.disconnect()
        c.loop_stop()


def forge(url: str, topic: str, auth: tuple[str, str] | None = None) -> None:
    """The forged births of issue #30 on ``topic``: retained and not, from the far future and
    plausible (started now, after the twin), a burst of 200 with fresh instance ids; each kind from
    a connection of its own."""
    send(url, topic, [(FORGED, True)], auth)
    send(url, topic, [(FORGED, False)], auth)
    send(url, topic, [({**FORGED, "instance": "y", "started_at": time.time()}, False)], auth)
    send(url, topic, [({**FORGED, "instance": f"z{i}", "started_at": time.time()}, False) for i in range(200)], auth,
         qos=0)
    send(url, topic, [(FORGED, False)], auth)


def test_a_forged_birth_fences_nobody(tmp_path: Path, broker: Broker) -> None:
    """Issue #30: ``{"state":"online","instance":"x","pid":1,"started_at":9999999999}`` on the
    twin's status topic, retained or not, and plausible ones with fresh instance ids: the store
    says the twin holds the lease, so it keeps publishing (>= 95 % of its states in the next 10 s),
    never ends its process; a twin restarted under the retained forgery is not fenced either."""
    settings = FleetSettings(broker=broker.url, store=str(tmp_path / "cp.sqlite"), checkpoint_interval=0.5)
    spec = AssetSpec("a1", overrides={"service": {"health_interval": 0.5}})
    feeder = FleetFeeder(load_mechanism(bundled_slider_crank()), broker.url, ["a1"], rate=RATE, batch=10,
                         duration=10.0).start()
    states = States(broker.url, "a1")
    exits: list[int] = []
    members: list[Member] = []
    try:
        for round_ in range(2):  # the second: a restart with the retained forgery on the topic
            if round_ == 1:  # (the graceful stop's retained offline replaced it)
                send(broker.url, "dt/v1/a1/twin/status", [(FORGED, True)])
            m = Member(spec, settings)
            m.on_exit = exits.append
            members.append(m)
            m.start()
            wait_for("the twin's states", lambda m=m: m.svc.core.stats["batches"] > 20, 60)
            if round_ == 0:
                forge(broker.url, "dt/v1/a1/twin/status")
            t0 = time.monotonic()
            wait_for("10 s of states", lambda t0=t0: time.monotonic() > t0 + 10.5, 15)
            sent, got = sent_between(feeder, "a1", t0, t0 + 10), states.between(t0 + 0.2, t0 + 10.2)
            assert got >= 0.95 * sent and sent > 150, (round_, got, sent)
            assert not m.svc.superseded and exits == [] and m.fence.generation == round_ + 1
            assert m.svc.counts["fence_ignored"] >= 1, dict(m.svc.counts)
            m.stop()
    finally:
        for m in members:
            if not m.svc.stopping.is_set():
                m.stop()
        feeder.stop()
        states.close()


def test_leases_taken_together_get_distinct_generations(store_url: str) -> None:
    """Eight instances of one asset take its lease at the same moment, each with its own connection
    (on a new database: the tables are created on the way): eight distinct generations, 1 to 8, the
    last taker holds it; a checkpoint of any other generation is refused, the holder's written."""
    got: list[tuple[int, str]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def take(i: int) -> None:
        s = CheckpointStore(store_url)
        try:
            start.wait(30)
            got.append((s.acquire("a1", f"i{i}", 1000 + i, None, 1000.0 + i), f"i{i}"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            s.close()
    threads = [threading.Thread(target=take, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert errors == [] and sorted(g for g, _ in got) == list(range(1, 9)), (errors, got)
    store = CheckpointStore(store_url)
    holder = store.holder("a1")
    assert holder is not None and (holder.generation, holder.instance) == max(got)
    with pytest.raises(LeaseLost) as e:
        store.save(Checkpoint("a1", 1.0, None, "h", b"old"), 7)
    assert "generation 7" in str(e.value) and holder.instance in str(e.value) and store.load("a1") is None
    store.save(Checkpoint("a1", 2.0, None, "h", b"new"), 8)
    assert store.load("a1").state == b"new"  # type: ignore[union-attr]
    store.close()
