"""Secrets (issue 30 item 3): a password is refused in every URL the configuration takes, the error
naming the key and never the password; one that reaches a running twin all the same (a fleet built
in code, an older twin) is masked in every message, log line, birth, fleet status and history row;
fleet twins read the broker password from their own environment (``[fleet] password_env``), never
from an argument or a command line. Through a real mosquitto with passwords."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from conftest import free_port
from paho.mqtt.enums import CallbackAPIVersion
from test_fleet import wait_for
from test_twin_security import PASSWORD, auth_broker  # noqa: F401 - the fixture

from mbsd_twin.fleet.config import AssetSpec, FleetError, FleetSettings, load_fleet
from mbsd_twin.fleet.member import Member
from mbsd_twin.fleet.status import FleetStatus
from mbsd_twin.fleet.trust import trusted_birth
from mbsd_twin.storage.checkpoint.store import Lease
from mbsd_twin.storage.history.stores import SqliteStore
from mbsd_twin.twin.config.file import load_config
from mbsd_twin.twin.config.sections import BrokerConfig, ConfigError
from mbsd_twin.twin.redaction import redact

ROOT = Path(__file__).resolve().parents[1]
SECRET = "s3cret-Pw_42"


def _problems(call: Any) -> str:
    with pytest.raises((ConfigError, FleetError)) as e:
        call()
    assert SECRET not in str(e.value) and SECRET.replace("_", "%5F") not in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("url", [f"mqtt://127.0.0.1:1883?password={SECRET}", f"mqtt://twin:{SECRET}@127.0.0.1:1883"])
def test_a_password_in_the_broker_url_is_refused(url: str) -> None:
    text = _problems(lambda: load_config(None, env={}, overrides={"broker": {"url": url}}))
    assert "[broker] url must not carry credentials" in text


@pytest.mark.parametrize("dsn", [f"host=db dbname=twin user=twin password={SECRET}",
                                 f"postgresql://twin@db/twin?password={SECRET}",
                                 f"postgresql://twin@db/twin?sslpassword={SECRET}",
                                 f"postgresql://twin:{SECRET}@db/twin"])
def test_a_password_in_the_history_dsn_is_refused(dsn: str) -> None:
    text = _problems(lambda: load_config(None, env={}, overrides={"history": {"backend": "postgresql", "dsn": dsn}}))
    assert "[history] dsn must not carry a password (not shown)" in text


def _fleet(tmp_path: Path, fleet: str, asset: str = "") -> Path:
    p = tmp_path / "fleet.toml"
    p.write_text(f'[fleet]\n{fleet}\n\n[[asset]]\nid = "a1"\n{asset}\n')
    return p


@pytest.mark.parametrize("store", [f"postgresql://twin@db:5432/twin?password={SECRET}",
                                   f"postgresql://twin:{SECRET}@db:5432/twin",
                                   f"postgresql:///twin?host=db&user=twin&password={SECRET}"])
def test_a_password_in_the_fleet_store_is_refused(tmp_path: Path, store: str) -> None:
    text = _problems(lambda: load_fleet(str(_fleet(tmp_path, f'store = "{store}"'))))
    assert "[fleet] store must not carry a password (not shown); give it in PGPASSWORD or ~/.pgpass" in text
    assert load_fleet(str(_fleet(tmp_path, 'store = "postgresql://twin@db:5432/twin"'))).settings.store


def test_a_password_in_the_fleet_broker_or_an_assets_overrides_is_refused(tmp_path: Path) -> None:
    text = _problems(lambda: load_fleet(str(_fleet(tmp_path, f'broker = "mqtt://twin:{SECRET}@127.0.0.1:1883"'))))
    assert "[fleet] broker must not carry a password (not shown); give it in the environment variable " \
           "MBSD_TWIN_PASSWORD (password_env)" in text
    text = _problems(lambda: load_fleet(str(_fleet(tmp_path, "", f'[asset.overrides.broker]\npassword = "{SECRET}"'))))
    assert "[[asset]] 'a1' overrides.broker.password: not taken from the fleet file (not shown)" in text
    text = _problems(lambda: load_fleet(str(_fleet(tmp_path, 'password_env = "NOT A NAME"'))))
    assert "[fleet] password_env: an environment variable name, got 'NOT A NAME'" in text


def test_redact_masks_every_form() -> None:
    url = f"postgresql://u:{SECRET.replace('_', '%5F')}@h/db?password={SECRET}&sslpassword=x{SECRET}"
    out = redact(f"error at {url}; libpq: password={SECRET} 'pwd = {SECRET}' decoded {SECRET}", url)
    assert SECRET not in out and "%5F" not in out
    assert out.startswith("error at postgresql://u:***@h/db?password=***&sslpassword=***; libpq: password=***")


def test_the_fleet_password_comes_from_the_twins_own_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the fleet hands a Ray actor or a local child (the asset and the fleet settings) holds no
    password; the twin reads it where it runs, from the variable ``password_env`` names."""
    settings = FleetSettings(broker="mqtt://127.0.0.1:1883", password_env="PLANT_MQTT_PASSWORD")
    spec = AssetSpec("a1", overrides={"broker": {"username": "twin"}})
    monkeypatch.delenv("MBSD_TWIN_PASSWORD", raising=False)
    monkeypatch.setenv("PLANT_MQTT_PASSWORD", SECRET)
    assert spec.twin_config(settings).broker.password == SECRET
    assert SECRET.encode() not in pickle.dumps((spec, settings))  # RayBackend.start's arguments
    monkeypatch.setenv("MBSD_TWIN_PASSWORD", "other")
    assert spec.twin_config(FleetSettings()).broker.password == "other"  # the default variable
    monkeypatch.delenv("PLANT_MQTT_PASSWORD")
    assert spec.twin_config(settings).broker.password == ""


def _observer(url: str, topics: list[str]) -> tuple[mqtt.Client, list[tuple[str, dict[str, Any]]]]:
    got: list[tuple[str, dict[str, Any]]] = []
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"secret-watch-{os.getpid()}-{len(topics)}")
    c.on_message = lambda cl, u, m: got.append((m.topic, json.loads(m.payload)))
    c.connect("127.0.0.1", int(url.rsplit(":", 1)[1]))
    c.subscribe([(t, 1) for t in topics])
    c.loop_start()
    return c, got


def _cmdlines(pid: int) -> list[str]:
    """The command lines of ``pid`` and of all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            out.append(Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace"))
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        todo += [int(k) for k in kids]
    return out


def test_fleet_twins_log_in_with_the_password_of_their_environment(tmp_path: Path, auth_broker: Any  # noqa: F811
                                                                   ) -> None:
    """A local fleet on a broker that asks for passwords: the twins and the fleet's status client log in
    with the password of ``password_env`` (before, fleet twins could get it only from a file); it is
    on no command line of the fleet's processes."""
    (tmp_path / "twin.toml").write_text('[broker]\nusername = "twin"\n[service]\nhealth_interval = 0.5\n')
    fleet = _fleet(tmp_path, f'broker = "{auth_broker.url}"\nconfig = "twin.toml"\npassword_env = "PLANT_MQTT_PW"\n'
                             'watch_interval = 0.3\nstatus_interval = 0.5')
    watch, got = _observer(auth_broker.plain_url, ["dt/v1/a1/twin/status", "dt/v1/fleet/status"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("MBSD_TWIN_")}
    env |= {"PYTHONPATH": str(ROOT), "PLANT_MQTT_PW": PASSWORD}
    log = tmp_path / "fleet.log"
    proc = subprocess.Popen([sys.executable, "-m", "mbsd_twin.cli", "fleet", "serve", str(fleet)], env=env,
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, cwd=tmp_path)  # noqa: SIM115
    try:
        wait_for("the twin's birth", lambda: any(t.endswith("twin/status") and b.get("state") == "online"
                                                 for t, b in got), 60)
        wait_for("the fleet status: running", lambda: any(t == "dt/v1/fleet/status" and b.get("assets", {}).get(
            "a1", {}).get("state") == "running" for t, b in got), 30)
        assert not any(PASSWORD in c for c in _cmdlines(proc.pid))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        watch.loop_stop()
        watch.disconnect()
    text = log.read_text()
    assert "authentication failed" not in text and PASSWORD not in text


def test_a_store_password_never_leaves_the_twin(tmp_path: Path, auth_broker: Any,  # noqa: F811
                                                caplog: pytest.LogCaptureFixture) -> None:
    """A fleet twin given a store URL with a password (built in code: the fleet file refuses it) and
    an unreachable store: its birth, its log and its history row say why it started fresh, with the
    password masked (before: in all of them and the fleet status). The fleet status does not believe
    a birth the store cannot confirm (issue #30; the twin holds no lease): it shows none of it, and
    what it would copy of a confirmed one is masked."""
    caplog.set_level(logging.INFO)
    store = f"postgresql://twin@127.0.0.1:{free_port()}/db?password={SECRET}&connect_timeout=1"
    settings = FleetSettings(broker=auth_broker.plain_url, store=store, checkpoint_interval=60.0)
    db = tmp_path / "h.sqlite"
    spec = AssetSpec("a1", overrides={"history": {"path": str(db), "batch_interval": 0.2}})
    status = FleetStatus(BrokerConfig(url=auth_broker.plain_url), "dt/v1/fleet/status", "local", 0.3, "fleet.toml",
                         str(tmp_path / "fleet-store.sqlite"), None)
    status.watch("a1", "dt/v1/a1/twin/status")
    watch, got = _observer(auth_broker.plain_url, ["dt/v1/a1/twin/status", "dt/v1/fleet/status"])
    done = threading.Event()

    def fleet_loop() -> None:  # the fleet's main loop does this between its polls
        while not done.is_set():
            status.loop(0.1)
            status.tick(time.monotonic())
    loop = threading.Thread(target=fleet_loop)
    loop.start()
    m = Member(spec, settings)
    try:
        m.start()
        wait_for("the fleet status after the twin's birth, not believed", lambda: any(
            t == "dt/v1/fleet/status" and b.get("counts", {}).get("births_ignored") for t, b in got), 30)
    finally:
        m.stop()
        done.set()
        loop.join(10)
        status.close()
        watch.loop_stop()
        watch.disconnect()
    birth = next(b for t, b in got if t.endswith("twin/status") and b.get("state") == "online")
    fleets = [b for t, b in got if t == "dt/v1/fleet/status"]
    assert all(b["assets"]["a1"]["state"] in ("starting", "stopped") for b in fleets), fleets
    copied = trusted_birth(Lease("a1", 1, birth["instance"], birth["pid"], None, birth["started_at"]), birth)
    assert "password=***" in copied["checkpoint_rejected"] and SECRET not in json.dumps(copied)
    rows = [json.loads(b) for kind, _, _, b in SqliteStore(str(db)).events("a1") if kind == "status"]
    assert SECRET not in json.dumps(fleets)
    for where, text in (("birth", json.dumps(birth)), ("fleet status's copy", json.dumps(copied)),
                        ("history row", json.dumps(rows)), ("log", caplog.text)):
        assert SECRET not in text, where
        assert "twin@127.0.0.1" in text and "password=***" in text, (where, text[-2000:])


def test_ray_twins_take_the_password_from_their_nodes_environment(tmp_path: Path, auth_broker: Any  # noqa: F811
                                                                  ) -> None:
    """On a real Ray node started with the password in its environment (as ``ray start`` would be
    by its systemd unit), the twin actor logs in with it although the fleet process (the Ray driver)
    has no password at all: it is read where the twin runs, never handed over by the driver; no
    process of the node or of the fleet has it on its command line."""
    from test_fleet import ENV, RAY, _ours, _ports

    temp = f"/tmp/ray_sec_{os.getpid()}_{free_port()}"
    port = free_port()
    node_env = {**ENV, "PLANT_MQTT_PW": PASSWORD, "RAY_raylet_start_wait_time_s": "60"}
    (tmp_path / "twin.toml").write_text('[broker]\nusername = "twin"\n')
    fleet = _fleet(tmp_path, f'broker = "{auth_broker.url}"\nconfig = "twin.toml"\npassword_env = "PLANT_MQTT_PW"\n'
                             "ray_num_cpus = 0.5")
    watch, got = _observer(auth_broker.plain_url, ["dt/v1/a1/twin/status"])
    proc = None
    try:
        r = subprocess.run([str(RAY), "start", "--head", "--port", str(port), "--include-dashboard=false",
                            "--node-ip-address", "127.0.0.1", *_ports(), "--temp-dir", temp, "--disable-usage-stats"],
                           env=node_env, capture_output=True, timeout=120, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        driver_env = {k: v for k, v in ENV.items() if k not in ("PLANT_MQTT_PW", "MBSD_TWIN_PASSWORD")}
        proc = subprocess.Popen([sys.executable, "-m", "mbsd_twin.cli", "fleet", "serve", str(fleet), "--ray",
                                 f"127.0.0.1:{port}"], env=driver_env, stdout=open(tmp_path / "fleet.log", "wb"),  # noqa: SIM115
                                stderr=subprocess.STDOUT, cwd=tmp_path)
        wait_for("the Ray twin's birth", lambda: any(b.get("state") == "online" for _, b in got), 150)
        cmdlines = [c for p in [*_ours(temp), proc.pid] for c in _cmdlines(p)]
        assert len(cmdlines) > 3 and not any(PASSWORD in c for c in cmdlines)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        for sig in (signal.SIGTERM, signal.SIGKILL):  # only this cluster's processes, never a bare `ray stop`
            for pid in _ours(temp):
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            time.sleep(2.0)
        watch.loop_stop()
        watch.disconnect()
