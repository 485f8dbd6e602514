"""The twin service on the other brokers and links it must work with: the embedded amqtt broker
(MQTT 3.1.1, in a subprocess), mosquitto with a password file (right and wrong credentials) and a
mosquitto TLS listener with a CA and server certificate made in tmp_path (openssl CLI).

The mosquitto tests open a second, anonymous plain listener for the rig and the collector, so that
only the twin's own link is under test."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import MOSQUITTO, Broker, free_port
from test_twin_broker import MECH, Collector, _wait

from mbsd_twin import load_mechanism
from mbsd_twin.rig.client import Rig
from mbsd_twin.rig.synthetic import RigConfig, Trajectory
from mbsd_twin.twin.config.file import load_config
from mbsd_twin.twin.config.sections import TwinConfig
from mbsd_twin.twin.service import TwinService

needs_mosquitto = pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed")
PASSWORD = "pa55-w0rd-tw1n"


@pytest.fixture(scope="module")
def traj() -> Trajectory:
    tr = Trajectory(load_mechanism(MECH), RigConfig())
    tr.samples(0, 4000)
    return tr


def _config(url: str, protocol: int = 5, **broker: Any) -> TwinConfig:
    return load_config(None, env={}, overrides={"broker": {"url": url, "protocol": protocol, **broker},
                                                "service": {"mechanism": MECH},
                                                "core": {"resync_bounds": {"theta": 0.01}}})


def _stream_and_check(svc: TwinService, rig_url: str, traj: Trajectory, seconds: float, protocol: int = 5) -> None:
    """Stream ``seconds`` from the rig (through ``rig_url``); the twin's states arrive and track."""
    col = Collector(rig_url, protocol == 5)
    try:
        assert _wait(svc.connected.is_set, 10), svc.last_error
        Rig(svc.mech, RigConfig(), rig_url, traj=traj, protocol=protocol).run(seconds)
        n_batches = int(seconds * 50)
        # every batch answered with a state, or shed by the overload policy (a loaded machine: hold
        # levels coalesce a backlog, counted in dropped_overload)
        assert _wait(lambda: len(col.get("twin/state")) + svc.counts["dropped_overload"] >= n_batches, 30), \
            (len(col.get("twin/state")), svc.counts["dropped_overload"])
    finally:
        col.close()
    states, res = col.get("twin/state"), col.get("twin/residuals")
    seqs = [m["seq"] for m in states]
    assert all(b > a for a, b in zip(seqs, seqs[1:], strict=False))
    theta = np.concatenate([r["ch"]["theta"] for r in res])
    assert float(np.sqrt(np.mean(theta**2))) < 0.01
    assert any(m["state"] == "online" for m in col.get("twin/status"))
    assert svc.health()["counters"]["gap"] == 0


# ------------------------------------------------------------------- amqtt
def test_service_on_the_embedded_amqtt_broker(tmp_path: Path, traj: Trajectory) -> None:
    """The fallback broker, run explicitly (not only where mosquitto is missing): MQTT 3.1.1."""
    broker = Broker(tmp_path, kind="amqtt")
    broker.start()
    try:
        with TwinService(_config(broker.url, protocol=4)) as svc:
            _stream_and_check(svc, broker.url, traj, 2.5, protocol=4)
            counters = svc.health()["counters"]
    finally:
        broker.stop()
    assert counters["received"] >= 125 and counters["dropped_overload"] == 0 and counters["rig_online"] == 1


# ---------------------------------------------------------------- password
def password_file(path: Path, user: str, password: str) -> Path:
    """A mosquitto password file: mosquitto_passwd when installed, else the same PBKDF2-SHA512 format
    ($7$, 101 iterations, 12-byte salt) written here."""
    tool = shutil.which("mosquitto_passwd")
    if tool:
        subprocess.run([tool, "-b", "-c", str(path), user, password], check=True, capture_output=True)
    else:
        salt = os.urandom(12)
        digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 101, 64)
        path.write_text(f"{user}:$7$101${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}\n")
    return path


@pytest.fixture
def auth_broker(tmp_path: Path) -> Any:
    if MOSQUITTO is None:
        pytest.skip("mosquitto is not installed")
    pw = password_file(tmp_path / "passwd", "twin", PASSWORD)
    plain = free_port()
    b = Broker(tmp_path, conf=f"per_listener_settings true\nallow_anonymous false\npassword_file {pw}\n"
                              f"listener {plain} 127.0.0.1\nallow_anonymous true\n")
    b.plain_url = f"mqtt://127.0.0.1:{plain}"  # type: ignore[attr-defined]
    b.start()
    yield b
    b.stop()


@needs_mosquitto
def test_password_right_credentials(auth_broker: Any, traj: Trajectory) -> None:
    with TwinService(_config(auth_broker.url, username="twin", password=PASSWORD)) as svc:
        _stream_and_check(svc, auth_broker.plain_url, traj, 1.5)
        assert svc.health()["counters"].get("auth_failed", 0) == 0


@needs_mosquitto
@pytest.mark.parametrize("protocol", [5, 4])
def test_password_wrong_credentials(auth_broker: Any, caplog: pytest.LogCaptureFixture, protocol: int) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "not-" + PASSWORD
    cfg = _config(auth_broker.url, protocol=protocol, username="twin", password=wrong, reconnect_min=1, reconnect_max=1)
    with TwinService(cfg) as svc:
        assert _wait(lambda: svc.counts["auth_failed"] >= 2, 6)  # logged once, counted per attempt: it retries
        health = json.dumps(svc.health())
        assert not svc.connected.is_set()
    print(svc.last_error)
    assert "authentication failed" in svc.last_error and "'twin'" in svc.last_error
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and "authentication failed" in r.getMessage()]
    assert len(errors) == 1  # once a minute, not per attempt
    assert wrong not in caplog.text and wrong not in health and PASSWORD not in caplog.text


@needs_mosquitto
def test_password_fixed_on_the_broker_connects(auth_broker: Any, tmp_path: Path) -> None:
    """Refused first; once the broker accepts the credentials (password file changed, SIGHUP) the
    retrying service connects without a restart."""
    cfg = _config(auth_broker.url, username="twin", password="rotated", reconnect_min=1, reconnect_max=1)
    with TwinService(cfg) as svc:
        assert _wait(lambda: svc.counts["auth_failed"] >= 1, 5)
        password_file(tmp_path / "passwd", "twin", "rotated")
        auth_broker.proc.send_signal(signal.SIGHUP)  # mosquitto reloads its password file
        assert _wait(svc.connected.is_set, 6)
        assert svc.health()["connection"]["connects"] == 1


@needs_mosquitto
def test_password_wrong_from_the_command_line(auth_broker: Any, tmp_path: Path) -> None:
    """``twin serve`` with the password in the environment: a clear error on stderr, never the password;
    it keeps retrying (a fixed password file makes it connect) and stops cleanly on SIGTERM."""
    toml = tmp_path / "twin.toml"
    toml.write_text(f'[broker]\nurl = "{auth_broker.url}"\nusername = "twin"\n'
                    f'[service]\nmechanism = "{os.path.abspath(MECH)}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("MBSD_TWIN_")}
    env["MBSD_TWIN_PASSWORD"] = "wr0ng-s3cret"
    proc = subprocess.Popen([sys.executable, "-m", "mbsd_twin.cli", "twin", "serve", "--config", str(toml)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        lines = []
        t_end = time.monotonic() + 20
        while time.monotonic() < t_end:
            line = proc.stderr.readline()  # type: ignore[union-attr]
            lines.append(line)
            if "authentication failed" in line or not line:
                break
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    text = "".join(lines) + out + err
    print(text)
    assert any("ERROR" in ln and "authentication failed" in ln and "user 'twin'" in ln for ln in lines)
    assert "wr0ng-s3cret" not in text and proc.returncode == 0


# --------------------------------------------------------------------- TLS
def make_ca(folder: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA (certificate, key) with openssl."""
    crt, key = folder / f"{name}.crt", folder / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", key, "-out", crt, "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return crt, key


def make_server_cert(folder: Path, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    """A server certificate for 127.0.0.1 / localhost signed by ``ca``."""
    crt, key, csr, ext = (folder / n for n in ("server.crt", "server.key", "server.csr", "server.ext"))
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
             "-out", csr, "-subj", "/CN=127.0.0.1")
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                   "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
                   "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
    _openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial", "-out", crt,
             "-days", "2", "-extfile", ext)
    return crt, key


def _openssl(*args: Any) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


@pytest.fixture
def tls_broker(tmp_path: Path) -> Any:
    if MOSQUITTO is None or shutil.which("openssl") is None:
        pytest.skip("needs mosquitto and the openssl command")
    ca = make_ca(tmp_path, "test-ca")
    crt, key = make_server_cert(tmp_path, ca)
    plain = free_port()
    b = Broker(tmp_path, scheme="mqtts", conf=f"cafile {ca[0]}\ncertfile {crt}\nkeyfile {key}\n"
                                              f"allow_anonymous true\nlistener {plain} 127.0.0.1\n")
    b.plain_url, b.ca = f"mqtt://127.0.0.1:{plain}", ca[0]  # type: ignore[attr-defined]
    b.start()
    yield b
    b.stop()


def test_tls_with_ca_file(tls_broker: Any, traj: Trajectory) -> None:
    with TwinService(_config(tls_broker.url, tls_ca=str(tls_broker.ca))) as svc:
        _stream_and_check(svc, tls_broker.plain_url, traj, 1.5)
        assert svc.client.socket().version().startswith("TLS")  # type: ignore[union-attr]


def test_tls_with_another_ca_fails_clearly(tls_broker: Any, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    wrong_ca, _ = make_ca(other, "other-ca")
    with TwinService(_config(tls_broker.url, tls_ca=str(wrong_ca), reconnect_min=1, reconnect_max=1)) as svc:
        assert _wait(lambda: svc.counts["tls_failed"] >= 1, 5)
        assert not svc.connected.is_set()
    print(svc.last_error)
    assert "did not verify" in svc.last_error and "other-ca.crt" in svc.last_error
