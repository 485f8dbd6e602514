"""Issue #30, items 1 and 2, on a real mosquitto with a local fleet (``mbsd-twin fleet serve``, one
process per asset): no message of an outsider silences a twin or changes the fleet status.

- On an open broker: forged births (retained and not, from the future, plausible ones with fresh
  instance ids, a copy of the running twin's birth with other fields, one of 200 kB) and forged
  wills of the running instance: the twin keeps publishing (>= 95 % of its states in the next
  10 s), the fleet status's assets are unchanged, and what it ignored is counted.
- Behind the ACL that ``mbsd-twin fleet acl`` generates (one login per asset, a fleet login, the
  passwords derived from one secret): the fleet status is delivered; another asset's twin login
  cannot publish on this asset's status topic (the broker refuses it), nor can an anonymous client
  connect; the forged births change nothing either.
- A fleet whose login may not publish its status logs the refusal once and counts it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from conftest import MOSQUITTO, Broker
from paho.mqtt.enums import CallbackAPIVersion
from test_fleet import ENV, ROOT, FleetWatch, Observer, fleet_text, serve, stop, wait_for, write
from test_fleet_fence import FORGED, States, forge, send, sent_between

from mbsd_twin.fleet.acl import mosquitto_hash
from mbsd_twin.fleet.config import load_fleet, login_password
from mbsd_twin.fleet.feed import FleetFeeder
from mbsd_twin.fleet.fence import EXIT_SUPERSEDED
from mbsd_twin.fleet.member import Member
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism
from mbsd_twin.rig.client import connect

SECRET = "fl33t-s3cret"
OTHERS = {"rig": "r1g-pw", "viewer": "v1ewer-pw"}  # the test's rig and observer logins
EXTRA_ACL = ("\nuser rig\ntopic write dt/v1/+/meas/#\n\nuser viewer\ntopic read dt/v1/#\n")


def running(fw: FleetWatch, assets: list[str]) -> dict[str, Any] | None:
    return fw.find(lambda m: m.get("state") == "online" and all(
        fw.asset(m, a).get("state") == "running" for a in assets))


def last(fw: FleetWatch) -> dict[str, Any]:
    with fw.lock:
        return fw.msgs[-1]


def attack(url: str, asset: str, obs: Observer, auth: tuple[str, str] | None) -> None:
    """Every forgery on ``asset``'s status topic: births (forge), a copy of the running twin's birth
    with other fields, a 200 kB one, and its will, retained and not."""
    topic = f"dt/v1/{asset}/twin/status"
    forge(url, topic, auth)
    real = obs.births(asset)[-1]
    for body, retain in (({**real, "pid": 1, "node_id": "evil", "restarted_from_checkpoint": {"gap_s": "x"}}, False),
                         ({**real, "checkpoint_rejected": "x" * 200_000}, False),
                         ({"state": "offline", "instance": real["instance"]}, False),
                         ({"state": "offline", "instance": real["instance"]}, True)):
        send(url, topic, [(body, retain)], auth)


def states_kept(feeder: FleetFeeder, states: States, asset: str, t0: float) -> tuple[int, int]:
    wait_for("10 s of states", lambda: time.monotonic() > t0 + 10.5, 15)
    return states.between(t0 + 0.2, t0 + 10.2), sent_between(feeder, asset, t0, t0 + 10)


def unchanged(fw: FleetWatch, before: dict[str, Any], t_after: float) -> dict[str, Any]:
    """The first fleet status published after ``t_after`` (wall time): its assets as ``before``'s."""
    after = wait_for("a fleet status after the attack", lambda: fw.find(lambda m: m["t"] > t_after), 10)
    assert after["assets"] == before["assets"], (before["assets"], after["assets"])
    return after


def test_forgeries_on_an_open_broker_change_nothing(tmp_path: Path, broker: Broker) -> None:
    fleet = tmp_path / "fleet.toml"
    write(fleet, fleet_text(broker.url, ["a1", "a2"], "status_interval = 1.0\n"))
    feeder = FleetFeeder(load_mechanism(bundled_slider_crank()), broker.url, ["a1", "a2"], rate=200.0, batch=10,
                         duration=10.0).start()
    obs, fw, states = Observer(broker.url), FleetWatch(broker.url), States(broker.url, "a1")
    proc = serve(fleet, tmp_path / "fleet.log")
    try:
        wait_for("a1, a2 running", lambda: running(fw, ["a1", "a2"]) and obs.states.get("a1", 0) > 20, 90)
        before = last(fw)
        t0 = time.monotonic()
        attack(broker.url, "a1", obs, None)
        got, sent = states_kept(feeder, states, "a1", t0)
        assert got >= 0.95 * sent and sent > 150, (got, sent)
        after = unchanged(fw, before, time.time())
        c = after["counts"]
        assert c["births_ignored"] >= 200 and c["wills_ignored"] >= 2 and c["messages_ignored"] >= 1, c
        assert Path(f"/proc/{before['assets']['a1']['pid']}").exists()  # the same twin process throughout
    finally:
        stop(proc)
        feeder.stop()
        for x in (obs, fw, states):
            x.close()
    log = (tmp_path / "fleet.log").read_text()
    assert "superseded" not in log and "died" not in log, log[-3000:]


def acl_broker(tmp_path: Path) -> Broker:
    """mosquitto (not started) with no anonymous access, its ACL and password file those that
    :func:`generate` writes."""
    return Broker(tmp_path, conf=f"allow_anonymous false\npassword_file {tmp_path / 'passwd'}\n"
                                 f"acl_file {tmp_path / 'acl'}\n")


def generate(tmp_path: Path, fleet: Path) -> None:
    """The ACL and password lines ``mbsd-twin fleet acl`` writes for ``fleet`` (the secret in the
    command's environment, never an argument), plus the test's rig and viewer."""
    env = {**ENV, "MBSD_TWIN_PASSWORD": SECRET}
    run = [sys.executable, "-m", "mbsd_twin.cli", "fleet", "acl", str(fleet)]
    acl = subprocess.run(run, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
    pw = subprocess.run([*run, "--passwords"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
                        check=True).stdout
    assert SECRET not in pw and "user twin-a1" in acl and "user fleet" in acl
    (tmp_path / "acl").write_text(acl + EXTRA_ACL)
    (tmp_path / "passwd").write_text(pw + "".join(f"{u}:{mosquitto_hash(p)}\n" for u, p in OTHERS.items()))


def serve_with_secret(fleet: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "mbsd_twin.cli", "fleet", "serve", str(fleet)],
                            env={**ENV, "MBSD_TWIN_PASSWORD": SECRET}, stdout=open(log, "wb"),  # noqa: SIM115
                            stderr=subprocess.STDOUT, cwd=ROOT)


def login(user: str) -> tuple[str, str]:
    return (user, OTHERS.get(user) or login_password(SECRET, user))


def refused_publish(url: str, auth: tuple[str, str], topic: str) -> int:
    """The reason code of the broker's PUBACK for a QoS 1 publication of ``auth`` on ``topic``."""
    acks: list[int] = []
    c = connect(url, f"pub-{time.monotonic_ns()}", auth=auth)
    c.on_publish = lambda client, userdata, mid, rc, props: acks.append(rc.value)
    c.publish(topic, json.dumps(FORGED), qos=1).wait_for_publish(5)
    wait_for("the PUBACK", lambda: acks, 5)
    c.disconnect()
    c.loop_stop()
    return acks[0]


@pytest.mark.skipif(MOSQUITTO is None, reason="needs mosquitto (ACL, password file)")
def test_fleet_behind_its_generated_acl(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    acl = acl_broker(tmp_path)
    extra = 'status_interval = 1.0\ntwin_username = "twin-{asset}"\nfleet_username = "fleet"\n'
    write(fleet, fleet_text(acl.url, ["a1", "a2"], extra))
    generate(tmp_path, fleet)
    acl.start()
    feeder = FleetFeeder(load_mechanism(bundled_slider_crank()), acl.url, ["a1", "a2"], rate=200.0, batch=10,
                         duration=10.0, auth=login("rig")).start()
    viewer = login("viewer")
    obs, fw, states = Observer(acl.url, viewer), FleetWatch(acl.url, auth=viewer), States(acl.url, "a1", viewer)
    proc = serve_with_secret(fleet, tmp_path / "fleet.log")
    try:
        wait_for("a1, a2 running in the delivered fleet status", lambda: running(fw, ["a1", "a2"])
                 and obs.states.get("a1", 0) > 20 and obs.states.get("a2", 0) > 20, 90)
        before = last(fw)
        assert refused_publish(acl.url, login("twin-a2"), "dt/v1/a1/twin/status") == 0x87  # not authorized
        anon = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        codes: list[Any] = []
        anon.on_connect = lambda c, u, f, rc, p=None: codes.append(rc)
        anon.connect("127.0.0.1", acl.port)
        anon.loop_start()
        wait_for("the broker's CONNACK to an anonymous client", lambda: codes, 5)
        anon.loop_stop()
        assert codes[0].is_failure
        t0 = time.monotonic()
        attack(acl.url, "a1", obs, login("twin-a2"))  # another asset's twin login
        got, sent = states_kept(feeder, states, "a1", t0)
        assert got >= 0.95 * sent and sent > 150, (got, sent)
        after = unchanged(fw, before, time.time())
        assert after["counts"]["publish_refused"] == 0 and Path(f"/proc/{before['assets']['a1']['pid']}").exists()
    finally:
        stop(proc)
        feeder.stop()
        for x in (obs, fw, states):
            x.close()
        acl.stop()
    assert proc.returncode == 0, (tmp_path / "fleet.log").read_text()[-3000:]


@pytest.mark.skipif(MOSQUITTO is None, reason="needs mosquitto (ACL, password file)")
def test_a_refused_fleet_status_is_logged_once_and_counted(tmp_path: Path) -> None:
    """The fleet logs in as a user without write access to its status topic (the shipped ACL before
    issue #30 had none): the broker refuses every publication (MQTT 5 reason code); the fleet says
    so once in its log and counts them."""
    fleet = tmp_path / "fleet.toml"
    acl = acl_broker(tmp_path)
    extra = 'status_interval = 0.5\ntwin_username = "twin-{asset}"\nfleet_username = "fleet"\n'
    write(fleet, fleet_text(acl.url, ["a1"], extra))
    generate(tmp_path, fleet)
    text = (tmp_path / "acl").read_text().replace("topic write dt/v1/fleet/status", "topic read dt/v1/fleet/status")
    (tmp_path / "acl").write_text(text)
    acl.start()
    proc = serve_with_secret(fleet, tmp_path / "fleet.log")
    log = tmp_path / "fleet.log"
    try:
        wait_for("the refusal in the log", lambda: "refused the publication" in log.read_text(), 60)
        t_end = time.monotonic() + 3.0  # six more publications, refused as well
        wait_for("3 s more", lambda: time.monotonic() > t_end, 10)
    finally:
        stop(proc)
        acl.stop()
    assert log.read_text().count("refused the publication") == 1, log.read_text()[-3000:]


def test_a_fenced_fleet_twin_exits_and_its_fleet_starts_it_again(tmp_path: Path, broker: Broker) -> None:
    """The store's lease, not a message, fences; a fenced twin's process exits (status 75) and the
    local fleet starts it again, which takes the lease back: a newer instance of ``a1`` started
    beside the fleet (a Member in this process, as Ray's restarted actor would be) fences the
    fleet's twin off, then is fenced off itself by the twin the fleet restarted."""
    fleet = tmp_path / "fleet.toml"
    write(fleet, fleet_text(broker.url, ["a1"], "status_interval = 1.0\n"))
    feeder = FleetFeeder(load_mechanism(bundled_slider_crank()), broker.url, ["a1"], rate=200.0, batch=10,
                         duration=10.0).start()
    fw = FleetWatch(broker.url)
    proc = serve(fleet, tmp_path / "fleet.log")
    newer: Member | None = None
    exits: list[int] = []
    try:
        first = wait_for("a1 running", lambda: running(fw, ["a1"]), 90)["assets"]["a1"]
        cfg = load_fleet(str(fleet))
        newer = Member(cfg.assets[0], cfg.settings)
        newer.on_exit = exits.append
        newer.start()
        back = wait_for("a1 running again, restarted", lambda: fw.find(
            lambda m: fw.asset(m, "a1").get("restarts") == 1 and fw.asset(m, "a1").get("state") == "running"), 60)
        wait_for("the newer instance fenced off by the restarted one", lambda: exits, 30)
        a1 = back["assets"]["a1"]
        assert exits == [EXIT_SUPERSEDED] and newer.svc.superseded and a1["pid"] != first["pid"]
        assert newer.fence.generation == 2 and a1["instance"] not in (first["instance"], newer.svc.instance)
        assert f"exit code {EXIT_SUPERSEDED}" in (tmp_path / "fleet.log").read_text()
    finally:
        if newer is not None:
            newer.stop()
        stop(proc)
        feeder.stop()
        fw.close()


def test_the_shipped_acl_has_the_generated_fleet_blocks(tmp_path: Path) -> None:
    """services/mosquitto.acl lists the fleet user and one twin login per asset of
    examples/fleet/fleet.toml exactly as ``mbsd-twin fleet acl`` writes them."""
    example = (ROOT / "examples" / "fleet" / "fleet.toml").read_text()
    fleet = tmp_path / "fleet.toml"
    logins = '[fleet]\ntwin_username = "twin-{asset}"\nfleet_username = "fleet"\n'
    fleet.write_text(example.replace("[fleet]\n", logins))
    r = subprocess.run([sys.executable, "-m", "mbsd_twin.cli", "fleet", "acl", str(fleet)], env=ENV, cwd=ROOT,
                       capture_output=True, text=True, timeout=60, check=True)
    generated = "\n".join(ln for ln in r.stdout.splitlines() if not ln.startswith("# generated"))
    shipped = (ROOT / "services" / "mosquitto.acl").read_text()
    assert generated in shipped and "user twin-sc-02" in generated and "user fleet" in generated


def test_fleet_acl_passwords_need_the_secret_and_the_logins(tmp_path: Path) -> None:
    """``fleet acl --passwords`` without the secret in its environment, or for a fleet without its
    own logins: exit status 2, the message naming the variable or the keys, nothing printed."""
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[fleet]\npassword_env = "PLANT_PW"\n[[asset]]\nid = "a1"\n')
    run = [sys.executable, "-m", "mbsd_twin.cli", "fleet", "acl", str(fleet), "--passwords"]
    env = {k: v for k, v in ENV.items() if k != "PLANT_PW"}
    r = subprocess.run(run, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "PLANT_PW" in r.stderr and r.stdout == "" and "Traceback" not in r.stderr
    r = subprocess.run(run, env={**env, "PLANT_PW": SECRET}, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "twin_username" in r.stderr and r.stdout == "" and SECRET not in r.stderr
