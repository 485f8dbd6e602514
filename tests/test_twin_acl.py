"""The shipped broker access control (services/mosquitto-secure.conf with services/mosquitto.acl) on a
real mosquitto: only the operator's commands reach the twin (docs/mqtt-contract.md, "Access
control")."""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from conftest import MOSQUITTO, Broker, free_port
from paho.mqtt.enums import CallbackAPIVersion
from test_twin_broker import BASE, MECH, _wait
from test_twin_commands import _props
from test_twin_security import make_ca, make_server_cert, password_file

from mbsd_twin import load_mechanism
from mbsd_twin.rig.client import Rig
from mbsd_twin.rig.synthetic import RigConfig, Trajectory
from mbsd_twin.twin.config.file import load_config
from mbsd_twin.twin.service import TwinService

ROOT = Path(__file__).resolve().parents[1]
USERS = {"twin": "tw1n-pw", "rig": "r1g-pw", "operator": "0perator-pw", "viewer": "v1ewer-pw",
         "mallory": "m4llory-pw"}  # mallory: a valid login without any ACL rule


@pytest.fixture(scope="module")
def traj() -> Trajectory:
    tr = Trajectory(load_mechanism(MECH), RigConfig())
    tr.samples(0, 5000)
    return tr


class Client:
    """A paho MQTT 5 client (optionally with credentials and TLS) that keeps every message it
    receives and the reason code of every acknowledged publish."""

    def __init__(self, url: str, user: str = "", ca: Path | None = None, subscribe: str = "") -> None:
        self.msgs: list[tuple[str, bytes]] = []
        self.acks: list[int] = []
        self.lock = threading.Lock()
        self.c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"{user or 'anon'}-{uuid.uuid4().hex[:6]}",
                             protocol=mqtt.MQTTv5)
        if user:
            self.c.username_pw_set(user, USERS[user])
        if ca:
            self.c.tls_set(ca_certs=str(ca))
        self.c.on_connect = lambda c, *a: c.subscribe(subscribe, qos=1) if subscribe else None
        self.c.on_message = self._on
        self.c.on_publish = lambda c, u, mid, rc, props: self.acks.append(rc.value)
        host, port = url.split("://")[1].split(":")
        self.c.connect(host, int(port))
        self.c.loop_start()
        assert _wait(self.c.is_connected, 5), f"{user} could not connect"
        time.sleep(0.2)  # the subscription is in place

    def _on(self, c: Any, u: Any, m: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.msgs.append((m.topic, bytes(m.payload)))

    def got(self, topic: str) -> list[Any]:
        with self.lock:
            return [json.loads(p) for t, p in self.msgs if t == topic]

    def publish(self, topic: str, body: bytes | str, **kw: Any) -> None:
        self.c.publish(topic, body, qos=1, **kw).wait_for_publish(5)

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def _passwords(folder: Path) -> Path:
    lines = [password_file(folder / f"pw-{u}", u, p).read_text().strip() for u, p in USERS.items()]
    (folder / "passwd").write_text("\n".join(lines) + "\n")
    return folder / "passwd"


@pytest.fixture
def acl_broker(tmp_path: Path) -> Any:
    """services/mosquitto-secure.conf with services/mosquitto.acl as shipped; only its file paths and
    port are replaced (persistence off). The fixture's first listener (plain, loopback) is under the
    same global password file and ACL."""
    if MOSQUITTO is None or shutil.which("openssl") is None:
        pytest.skip("needs mosquitto and the openssl command")
    ca = make_ca(tmp_path, "test-ca")
    crt, key = make_server_cert(tmp_path, ca)
    tls = free_port()
    conf = (ROOT / "services" / "mosquitto-secure.conf").read_text()
    for old, new in (("/etc/mosquitto/passwd", _passwords(tmp_path)), ("/etc/mosquitto/acl", ROOT / "services" /
                     "mosquitto.acl"), ("/etc/mosquitto/certs/ca.crt", ca[0]), ("/etc/mosquitto/certs/server.crt", crt),
                     ("/etc/mosquitto/certs/server.key", key), ("listener 8883", f"listener {tls} 127.0.0.1")):
        assert old in conf
        conf = conf.replace(old, str(new))
    conf = "\n".join(ln for ln in conf.splitlines() if not ln.startswith("persistence")) + "\n"
    b = Broker(tmp_path, conf=conf)
    b.tls_url, b.ca = f"mqtts://127.0.0.1:{tls}", ca[0]  # type: ignore[attr-defined]
    b.start()
    yield b
    b.stop()


@pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed")
def test_acl_only_the_operator_commands_the_twin(acl_broker: Any, traj: Trajectory) -> None:
    """With the shipped ACL: cmd/pause from a user without rules, from the rig, the viewer and the
    twin's own login never reaches the twin (it keeps producing states, not paused, no command
    received) and nobody else reads commands; the operator's pause (over TLS) pauses it."""
    b = acl_broker
    cfg = load_config(None, env={}, overrides={
        "broker": {"url": b.tls_url, "tls_ca": str(b.ca), "username": "twin", "password": USERS["twin"]},
        "service": {"mechanism": MECH}, "commands": {"enabled": ["status", "pause", "resume"]}})
    with TwinService(cfg) as svc:
        assert _wait(svc.connected.is_set, 5), svc.last_error
        operator = Client(b.tls_url, "operator", b.ca, subscribe=f"{BASE}/#")
        others = {u: Client(b.url, u, subscribe=f"{BASE}/twin/cmd/#") for u in ("mallory", "rig", "viewer")}
        others["twin"] = Client(b.url, "twin")  # the twin's own login (it reads cmd: not subscribed here)
        rig_client = Client(b.url, "rig")
        anon = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        anon.connect("127.0.0.1", b.port)
        anon.loop_start()
        anonymous_connected = _wait(anon.is_connected, 1.5)
        anon.loop_stop()
        rig = Rig(svc.mech, RigConfig(), b.url, traj=traj)
        th = threading.Thread(target=rig.run, args=(4.0,), kwargs={"client": rig_client.c})
        th.start()
        assert _wait(lambda: len(operator.got(f"{BASE}/twin/state")) >= 20, 5)
        for c in others.values():
            c.publish(f"{BASE}/twin/cmd/pause", b"{}")
        time.sleep(1.0)
        n0 = len(operator.got(f"{BASE}/twin/state"))
        time.sleep(0.5)
        n1 = len(operator.got(f"{BASE}/twin/state"))
        before = (svc.core.paused, svc.commands.counts["received"])
        operator.c.publish(f"{BASE}/twin/cmd/pause", b"{}", qos=1, properties=_props(f"{BASE}/twin/reply/operator"))
        assert _wait(lambda: operator.got(f"{BASE}/twin/reply/operator"), 5)
        paused = svc.core.paused
        time.sleep(0.3)
        n2 = len(operator.got(f"{BASE}/twin/state"))
        time.sleep(0.7)
        n3 = len(operator.got(f"{BASE}/twin/state"))
        th.join()
        for c in [operator, rig_client, *others.values()]:
            c.close()
    reply = operator.got(f"{BASE}/twin/reply/operator")[0]
    print(f"states {n0} -> {n1} (others' pause), {n2} -> {n3} (operator's); acks of the others' publishes "
          f"{ {u: c.acks for u, c in others.items()} }; reply {reply}")
    assert not anonymous_connected
    assert before == (False, 0) and n1 - n0 >= 10  # 50 batches/s: still producing
    assert reply["ok"] and reply["cmd"] == "pause" and paused and n3 == n2
    assert all(not [t for t, _ in c.msgs if "/cmd/" in t] for c in others.values())  # nobody else reads cmd
    assert all(c.acks == [135] for c in others.values())  # mosquitto answers "Not authorized" (MQTT 5)
    assert svc.commands.counts["received"] == 1 and svc.commands.counts["run"] == 1


@pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed")
def test_dashboard_controls_go_through_the_acl(acl_broker: Any) -> None:
    """The dashboard's reset control relays the command as the user typed into the page, over TLS
    to the shipped ACL: the viewer's (a valid login without cmd rights) never reaches the twin and
    gets no reply, a wrong password is refused by the broker, the operator's runs — counted by the
    twin's command gate like any other command."""
    from test_dashboard import _post

    b = acl_broker
    port = free_port()
    cfg = load_config(None, env={}, overrides={
        "broker": {"url": b.tls_url, "tls_ca": str(b.ca), "username": "twin", "password": USERS["twin"]},
        "service": {"mechanism": MECH}, "commands": {"enabled": ["status", "reset"]}, "metrics": {"port": port}})
    addr = f"127.0.0.1:{port}"
    with TwinService(cfg) as svc:
        assert _wait(svc.connected.is_set, 5), svc.last_error
        code, viewer = _post(addr, "/dashboard/api/cmd/reset", {"username": "viewer", "password": USERS["viewer"]})
        assert code == 502 and "no reply from the twin" in viewer["detail"] and "user 'viewer'" in viewer["detail"]
        code, wrong = _post(addr, "/dashboard/api/cmd/reset", {"username": "operator", "password": "nope"})
        assert code == 502 and "authentication failed" in wrong["detail"] and "nope" not in wrong["detail"]
        assert svc.commands.counts["received"] == 0
        code, op = _post(addr, "/dashboard/api/cmd/reset", {"username": "operator", "password": USERS["operator"]})
        assert code == 200 and op["ok"] is True and op["cmd"] == "reset", op
        assert svc.commands.counts["received"] == 1 and svc.commands.counts["run"] == 1


def test_acl_file_grants_the_twin_no_cmd_write() -> None:
    """The shipped ACL as text: the twin's write rules stay one level under twin/ (and reply/#), so
    they never match twin/cmd/<name>; only the operator writes cmd."""
    rules: dict[str, list[str]] = {}
    user = ""
    for ln in (ROOT / "services" / "mosquitto.acl").read_text().splitlines():
        if ln.startswith("user "):
            user = ln.split()[1]
        elif ln.startswith("topic "):
            rules.setdefault(user, []).append(ln)
    writers = [u for u, rs in rules.items() if any(r.split()[1] in ("write", "readwrite") and "/cmd/" in r
                                                   for r in rs)]
    assert writers == ["operator"] and "" not in rules
    assert f"topic write {BASE}/twin/+" in rules["twin"] and f"topic read {BASE}/twin/cmd/+" in rules["twin"]
