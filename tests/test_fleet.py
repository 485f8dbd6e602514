"""The fleet (issue #19 item 2): ``mbsd-twin fleet serve`` through a real mosquitto, each asset fed
by a simulated rig — locally (one process per asset: hot add/remove by editing the file, a bad edit
ignored, a killed twin back from its checkpoint) and on a real two-node Ray cluster (the node
holding an actor killed: the actor comes back on the other node from its checkpoint)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from conftest import Broker, free_port

from mbsd_twin.fleet.config import FleetError, load_fleet
from mbsd_twin.fleet.feed import FleetFeeder
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism
from mbsd_twin.rig.client import connect
from mbsd_twin.storage.checkpoint.store import CheckpointStore

ROOT = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).with_name("ray")
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_NUM_THREADS": "1"}


def fleet_text(broker: str, assets: list[str], extra: str = "") -> str:
    out = (f'[fleet]\nbroker = "{broker}"\ncheckpoint_interval = 1.0\nwatch_interval = 0.3\n'
           f'restart_delay = 0.2\n{extra}\n')
    for a in assets:
        out += f'\n[[asset]]\nid = "{a}"\n[asset.overrides.service]\nhealth_interval = 0.5\n'
    return out


def write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    st = os.stat(path)  # a new mtime even within the file system's timestamp granularity
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))


class Observer:
    """The twins' status (every birth/will, in order), last health and state counts per asset."""

    def __init__(self, url: str, auth: tuple[str, str] | None = None) -> None:
        self.status: dict[str, list[dict[str, Any]]] = {}
        self.health: dict[str, dict[str, Any]] = {}
        self.states: dict[str, int] = {}
        self.lock = threading.Lock()
        self.client = connect(url, f"fleet-observer-{os.getpid()}", auth=auth)
        self.client.on_message = self._on
        self.client.subscribe([("dt/v1/+/twin/status", 1), ("dt/v1/+/twin/health", 0), ("dt/v1/+/twin/state", 0)])

    def _on(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        asset, leaf = msg.topic.split("/")[2], msg.topic.split("/")[-1]
        body = json.loads(msg.payload)
        with self.lock:
            if leaf == "status":
                self.status.setdefault(asset, []).append(body)
            elif leaf == "health":
                self.health[asset] = body
            else:
                self.states[asset] = self.states.get(asset, 0) + 1

    def births(self, asset: str) -> list[dict[str, Any]]:
        with self.lock:
            return [s for s in self.status.get(asset, []) if s.get("state") == "online"]

    def last_status(self, asset: str) -> dict[str, Any]:
        with self.lock:
            return (self.status.get(asset) or [{}])[-1]

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def wait_for(what: str, cond: Callable[[], Any], timeout: float) -> Any:
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture
def feeder(broker: Broker) -> Iterator[FleetFeeder]:
    f = FleetFeeder(load_mechanism(bundled_slider_crank()), broker.url, ["a1", "a2"], rate=200.0, batch=10,
                    duration=10.0).start()
    try:
        yield f
    finally:
        f.stop()


def serve(fleet: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "mbsd_twin.cli", "fleet", "serve", str(fleet), *extra],
                            env=ENV, stdout=open(log, "wb"), stderr=subprocess.STDOUT, cwd=ROOT)  # noqa: SIM115


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_fleet_file_is_validated_whole(tmp_path: Path) -> None:
    p = tmp_path / "fleet.toml"
    p.write_text('[fleet]\ncheckpoint_interval = -1\nbogus = 1\n[[asset]]\nid = "a/1"\n'
                 '[[asset]]\nid = "b"\nmechanism = "missing.toml"\n[[asset]]\nid = "c"\n'
                 '[asset.overrides.service]\nqueue_size = "big"\n')
    with pytest.raises(FleetError) as e:
        load_fleet(str(p))
    text = str(e.value)
    assert str(p) in text and "checkpoint_interval" in text and "'bogus'" in text and "'a/1'" in text
    assert "missing.toml" in text and "queue_size" in text and "'big'" in text


def test_fleet_serve_refuses_a_bad_file(tmp_path: Path) -> None:
    p = tmp_path / "fleet.toml"
    p.write_text('[[asset]]\nid = "a"\nmechanism = "nowhere.toml"\n')
    r = subprocess.run([sys.executable, "-m", "mbsd_twin.cli", "fleet", "serve", str(p)], env=ENV, cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "nowhere.toml" in r.stderr and str(p) in r.stderr


def test_local_fleet(tmp_path: Path, broker: Broker, feeder: FleetFeeder) -> None:
    fleet = tmp_path / "fleet.toml"
    write(fleet, fleet_text(broker.url, ["a1", "a2"]))
    obs, fw = Observer(broker.url), FleetWatch(broker.url)
    proc = serve(fleet, tmp_path / "fleet.log")
    try:
        for a in ("a1", "a2"):
            wait_for(f"{a} birth, state and health", lambda a=a: obs.births(a) and obs.states.get(a, 0) > 5
                     and a in obs.health, 90)  # health comes every health_interval: after the first states
        a1 = obs.births("a1")[-1]
        up = obs.health["a1"]["uptime_s"]

        feeder.set_assets(["a1", "a2", "a3"])  # hot add
        write(fleet, fleet_text(broker.url, ["a1", "a2", "a3"]))
        wait_for("a3 birth and state", lambda: obs.births("a3") and obs.states.get("a3", 0) > 5, 30)
        write(fleet, fleet_text(broker.url, ["a1", "a2", "a3"]) + '\n[[asset]]\nid = "bad/id"\n')  # bad edit
        wait_for("the bad edit reported", lambda: "fleet file edit ignored" in (tmp_path / "fleet.log").read_text(), 10)
        write(fleet, fleet_text(broker.url, ["a1", "a3"]))  # hot remove
        wait_for("a2 offline", lambda: obs.last_status("a2").get("state") == "offline", 20)
        assert obs.births("a1") == [a1] and obs.health["a1"]["uptime_s"] > up  # a1 untouched throughout
        assert obs.last_status("a3").get("state") == "online"

        time.sleep(1.5)  # a checkpoint with batches in it
        os.kill(a1["pid"], signal.SIGKILL)
        t_kill = time.time()
        back = wait_for("a1 back", lambda: len(obs.births("a1")) > 1 and obs.births("a1")[-1], 10)
        n = obs.states.get("a1", 0)
        wait_for("a1 state again", lambda: obs.states.get("a1", 0) > n + 3, 10)
        r = back["restarted_from_checkpoint"]
        assert back["pid"] != a1["pid"] and r["rig_time"] is not None
        assert t_kill - 3.0 < r["saved_at"] < t_kill and 0 < r["gap_s"] < 10
    finally:
        stop(proc)
        obs.close()
    assert proc.returncode == 0, (tmp_path / "fleet.log").read_text()[-3000:]
    last = wait_for("the fleet's offline status", lambda: fw.find(lambda m: m["state"] == "offline"), 5)
    fw.close()  # a graceful stop: offline, with every asset stopped (the will has no assets)
    assert {a: x["state"] for a, x in last["assets"].items()} == {"a1": "stopped", "a2": "stopped", "a3": "stopped"}
    store = CheckpointStore(str(tmp_path / "fleet-checkpoints.sqlite"))
    assert store.load("a1") is not None and store.load("a3") is not None
    store.close()


class FleetWatch:
    """Every message of the fleet's retained status topic, in order."""

    def __init__(self, url: str, topic: str = "dt/v1/fleet/status", auth: tuple[str, str] | None = None) -> None:
        self.msgs: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.client = connect(url, f"fleet-status-{os.getpid()}", auth=auth)
        self.client.on_message = self._on
        self.client.subscribe(topic, 1)

    def _on(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.msgs.append(json.loads(msg.payload))

    def find(self, cond: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        with self.lock:
            return next((m for m in self.msgs if cond(m)), None)

    def asset(self, m: dict[str, Any], a: str) -> dict[str, Any]:
        return m.get("assets", {}).get(a, {})

    def republished(self, interval: float) -> None:
        """With nothing changing, the next two publications are the same, ``interval`` s apart."""
        n = len(self.msgs)
        wait_for("two re-publications", lambda: len(self.msgs) >= n + 2, 3 * interval + 2)
        with self.lock:
            a, b = self.msgs[n:n + 2]
        assert a["assets"] == b["assets"] and b["seq"] == a["seq"] + 1
        assert interval - 0.5 < b["t"] - a["t"] < interval + 1.5  # the fleet polls every 0.3 s here

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def test_fleet_status_topic(tmp_path: Path, broker: Broker, feeder: FleetFeeder) -> None:
    """The fleet's own retained status: an asset added by an edit is listed (starting, then running
    with its twin's pid); a SIGKILLed twin shows restarting, then running with restarts = 1 and the
    gap its new birth reports; a removed one stopped; unchanged, it is re-published every
    status_interval; a killed fleet process leaves its will (offline)."""
    fleet = tmp_path / "fleet.toml"
    extra = "status_interval = 2.0\n"
    write(fleet, fleet_text(broker.url, ["a1"], extra))
    obs, fw = Observer(broker.url), FleetWatch(broker.url)
    proc = serve(fleet, tmp_path / "fleet.log")
    pids: list[int] = []
    try:
        running = wait_for("a1 running in the fleet status", lambda: fw.find(
            lambda m: fw.asset(m, "a1").get("state") == "running"), 90)
        a1 = obs.births("a1")[-1]
        assert running["state"] == "online" and running["pid"] == proc.pid and running["backend"] == "local"
        assert fw.asset(running, "a1") | {"since": 0} == {
            "state": "running", "backend": "local", "since": 0, "restarts": 0, "last_restart": None, "gap_s": None,
            "checkpoint_rejected": None, "pid": a1["pid"], "node_id": None, "instance": a1["instance"]}

        write(fleet, fleet_text(broker.url, ["a1", "a2"], extra))  # hot add
        n0 = len(fw.msgs)
        wait_for("a2 running", lambda: fw.find(lambda m: fw.asset(m, "a2").get("state") == "running"), 30)
        with fw.lock:
            a2_states = [fw.asset(m, "a2").get("state") for m in fw.msgs[n0:]]
        assert a2_states[0] == "starting" and "running" in a2_states
        assert fw.asset(fw.msgs[-1], "a2")["pid"] == obs.births("a2")[-1]["pid"]
        pids += [a1["pid"], obs.births("a2")[-1]["pid"]]

        time.sleep(1.5)  # a checkpoint with batches in it
        n1 = len(fw.msgs)
        os.kill(a1["pid"], signal.SIGKILL)
        back = wait_for("a1 running again", lambda: fw.find(
            lambda m: fw.asset(m, "a1").get("restarts") == 1 and fw.asset(m, "a1").get("state") == "running"), 30)
        with fw.lock:
            seen = [(fw.asset(m, "a1")["state"], fw.asset(m, "a1")["restarts"]) for m in fw.msgs[n1:]]
        assert fw.asset(fw.msgs[n1 - 1], "a1")["state"] == "running"
        assert seen.index(("restarting", 1)) < seen.index(("running", 1)), seen
        born = obs.births("a1")[-1]
        pids.append(born["pid"])
        r = fw.asset(back, "a1")
        assert r["pid"] == born["pid"] != a1["pid"] and r["instance"] == born["instance"]
        assert r["last_restart"] == born["started_at"] and r["gap_s"] == born["restarted_from_checkpoint"]["gap_s"]
        assert fw.asset(back, "a2")["state"] == "running" and fw.asset(back, "a2")["restarts"] == 0

        write(fleet, fleet_text(broker.url, ["a1"], extra))  # hot remove
        gone = wait_for("a2 stopped", lambda: fw.find(lambda m: fw.asset(m, "a2").get("state") == "stopped"), 30)
        assert fw.asset(gone, "a1")["state"] == "running"
        fw.republished(2.0)

        proc.kill()  # the fleet process dies: the broker publishes its will
        will = wait_for("the fleet's will", lambda: fw.find(lambda m: m["state"] == "offline"), 10)
        assert will["pid"] == proc.pid and will["started_at"] == running["started_at"] and "assets" not in will
    finally:
        stop(proc)
        for pid in pids:  # the twins the killed fleet left behind
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        obs.close()
        fw.close()


# ------------------------------------------------------------------------------------------- Ray
def _ours(tag: str) -> list[int]:
    """PIDs of the processes whose command line names ``tag`` (our cluster's temp dir)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                if tag.encode() in Path(f"/proc/{d}/cmdline").read_bytes():
                    pids.append(int(d))
            except OSError:
                pass
    return pids


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


PORT_FLAGS = ("--node-manager-port", "--object-manager-port", "--metrics-export-port", "--runtime-env-agent-port",
              "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port")


def _ports() -> list[str]:
    """A node's ports: free ones, none inside its worker port range (ray start refuses that)."""
    lo = free_port() // 100 * 100 % 50000 + 10000
    ports: list[int] = []
    while len(ports) < len(PORT_FLAGS):
        p = free_port()
        if not lo <= p <= lo + 99 and p not in ports:
            ports.append(p)
    return ["--num-cpus", "1", *[x for f, p in zip(PORT_FLAGS, ports, strict=True) for x in (f, str(p))],
            "--min-worker-port", str(lo), "--max-worker-port", str(lo + 99)]


@pytest.fixture
def ray_cluster() -> Iterator[dict[str, Any]]:
    temp = f"/tmp/ray_h19c_{os.getpid()}_{free_port()}"
    env = {**ENV, "RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "500",
           "RAY_health_check_failure_threshold": "3",  # a dead node noticed in about 2 s (default 15+ s)
           "RAY_raylet_start_wait_time_s": "60"}  # node registration on this loaded machine
    port = free_port()
    head = ["--head", "--port", str(port), "--include-dashboard=false", "--node-ip-address", "127.0.0.1"]
    worker_args = _ports()
    try:
        for args in (head + _ports(), ["--address", f"127.0.0.1:{port}", "--node-ip-address", "127.0.0.1",
                                       *worker_args]):
            r = subprocess.run([str(RAY), "start", *args, "--temp-dir", temp, "--disable-usage-stats"], env=env,
                               capture_output=True, timeout=120, text=True)
            assert r.returncode == 0, f"ray start {' '.join(args)} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}"
        yield {"address": f"127.0.0.1:{port}", "temp": temp, "worker_nm_port": worker_args[3]}
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):  # only our cluster's processes, never a bare `ray stop`
            for pid in _ours(temp):
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            time.sleep(2.0)


def test_ray_fleet_survives_node_loss(tmp_path: Path, broker: Broker, feeder: FleetFeeder,
                                      ray_cluster: dict[str, Any]) -> None:
    fleet = tmp_path / "fleet.toml"
    write(fleet, fleet_text(broker.url, ["a1", "a2"], 'ray_num_cpus = 0.5\nray_strategy = "SPREAD"\n'))
    obs, fw = Observer(broker.url), FleetWatch(broker.url)
    proc = serve(fleet, tmp_path / "fleet.log", "--ray", ray_cluster["address"])
    try:
        for a in ("a1", "a2"):
            wait_for(f"{a} birth and state", lambda a=a: obs.births(a) and obs.states.get(a, 0) > 5, 150)
        worker_raylet = next(p for p in _ours(ray_cluster["temp"]) if b"raylet" in Path(f"/proc/{p}/cmdline")
                             .read_bytes() and f"node_manager_port={ray_cluster['worker_nm_port']}".encode()
                             in Path(f"/proc/{p}/cmdline").read_bytes())
        on_worker = [a for a in ("a1", "a2") if _ppid(obs.births(a)[-1]["pid"]) == worker_raylet]
        assert on_worker, "SPREAD placed no twin on the second node"
        victim = on_worker[0]
        time.sleep(1.5)  # a checkpoint with batches in it
        first = obs.births(victim)[-1]
        before = fw.find(lambda m: all(fw.asset(m, a).get("state") == "running" for a in ("a1", "a2")))
        assert before and before["backend"] == "ray" and fw.asset(before, victim)["node_id"] == first["node_id"]
        assert fw.asset(before, "a1")["node_id"] != fw.asset(before, "a2")["node_id"]  # SPREAD: one per node
        os.kill(worker_raylet, signal.SIGKILL)
        t_kill = time.time()
        # within 60 s, not the fleet target's 10 (a benchmark figure): load delays Ray's failure detection
        back = wait_for(f"{victim} back on the head node", lambda: len(obs.births(victim)) > 1
                        and obs.births(victim)[-1], 60)
        print(f"{victim} back {time.time() - t_kill:.1f} s after its node was killed")
        r = back["restarted_from_checkpoint"]
        assert back["pid"] != first["pid"] and _ppid(back["pid"]) != worker_raylet
        # the old actor runs on (and checkpoints) until it notices its raylet is gone, then exits
        assert t_kill - 3.0 < r["saved_at"] < back["started_at"] and 0 < r["gap_s"] < 60
        wait_for("the orphaned actor's exit", lambda: not Path(f"/proc/{first['pid']}").exists(), 15)
        n = obs.states.get(victim, 0)
        wait_for(f"{victim} state again", lambda: obs.states.get(victim, 0) > n + 3, 15)
        st = wait_for("the restart in the fleet status", lambda: fw.find(
            lambda m: fw.asset(m, victim).get("restarts") == 1 and fw.asset(m, victim).get("state") == "running"), 5)
        v = fw.asset(st, victim)
        assert v["node_id"] == back["node_id"] != first["node_id"] and v["pid"] == back["pid"]
        assert v["gap_s"] == r["gap_s"] and v["last_restart"] == back["started_at"]
    finally:
        stop(proc)
        obs.close()
        fw.close()
