"""The twin's command line in subprocesses: ``mbsd-twin rig`` (faults counted by a twin), ``mbsd-twin
twin replay`` (identical / tampered / missing recording), ``mbsd-twin twin serve`` with --config and
environment overrides, and with bad configuration values."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_twin_broker import MECH, _wait

from mbsd_twin.model.loader import bundled_slider_crank
from mbsd_twin.twin.config.file import load_config
from mbsd_twin.twin.service import TwinService


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MBSD_TWIN_")}
    return env | extra


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mbsd_twin.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env or _env(), cwd=cwd)


def test_rig_and_replay_commands(broker: Any, tmp_path: Path) -> None:
    """``rig`` streams 3 s with faults into a recording twin (exit 0, manifest); the twin counts exactly
    the manifest's faults; ``twin replay`` reproduces the recording (exit 0), finds a tampered output
    (exit 1) and reports a missing file (exit 2). Neither the twin nor the rig is given a mechanism
    and the rig runs outside the checkout: both use the slider crank packaged with mbsd-twin."""
    rec, manifest_path = tmp_path / "rec.jsonl", tmp_path / "manifest.json"
    cfg = load_config(None, env={}, overrides={
        "broker": {"url": broker.url, "protocol": broker.protocol}, "service": {"queue_size": 500, "max_lag": 10.0},
        "core": {"resync_bounds": {"theta": 0.01}}, "record": {"path": str(rec)}})
    with TwinService(cfg) as svc:
        assert _wait(svc.connected.is_set, 5)
        run = _cli("rig", "--broker", broker.url, "--protocol", str(broker.protocol), "--duration", "3",
                   "--faults", "0.06", "--seed", "5", "--precompute", "--manifest", str(manifest_path),
                   cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        assert svc.mech_path == str(bundled_slider_crank())
        assert _wait(lambda: not svc.batches and not svc.seq.buffer, 10)
        counters = svc.health()["counters"]
    manifest = json.loads(manifest_path.read_text())
    print(manifest["faults"], counters)
    assert manifest["messages"] == 150 and len(manifest["faults"]) >= 4
    for key in ("gap", "late", "duplicate", "reordered"):
        assert counters[key] == manifest["expected"][key], key
    assert counters["invalid"] == manifest["expected"]["invalid"] and counters["rig_online"] == 1

    out = tmp_path / "replayed.jsonl"
    run = _cli("twin", "replay", str(rec), "-o", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    n = sum(1 for line in rec.read_text().splitlines() if json.loads(line)["k"] == "out")
    assert f"replayed {n} outputs; recorded {n}; mismatches 0" in run.stdout and n > 400
    assert [json.loads(line) for line in out.read_text().splitlines()] == \
        [{"t": r["t"], "p": r["p"]} for r in map(json.loads, rec.read_text().splitlines()) if r["k"] == "out"]

    lines = rec.read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if '/twin/state"' in line and json.loads(line)["k"] == "out")
    bad = json.loads(lines[k])
    bad["p"] = bad["p"].replace('"theta":[', '"theta":[1.0,', 1)
    lines[k] = json.dumps(bad)
    (tmp_path / "tampered.jsonl").write_text("\n".join(lines) + "\n")
    run = _cli("twin", "replay", str(tmp_path / "tampered.jsonl"))
    assert run.returncode == 1 and "mismatches 1 (first: output #0 on dt/v1/sc-01/twin/state)" in run.stdout

    run = _cli("twin", "replay", str(tmp_path / "missing.jsonl"))
    assert run.returncode == 2 and "missing.jsonl" in run.stderr and "Traceback" not in run.stderr


def test_rig_without_a_broker_fails_clearly() -> None:
    from conftest import free_port

    run = _cli("rig", "--broker", f"mqtt://127.0.0.1:{free_port()}", "--duration", "1")
    assert run.returncode == 2 and "the rig cannot connect to mqtt://127.0.0.1:" in run.stderr
    assert "Traceback" not in run.stderr


def test_serve_with_config_and_environment_overrides(broker: Any, tmp_path: Path) -> None:
    """The file names another broker and asset; MBSD_TWIN_BROKER and MBSD_TWIN_ASSET win. SIGTERM:
    offline (retained) and exit 0."""
    toml = tmp_path / "twin.toml"
    toml.write_text(f'[broker]\nurl = "mqtt://127.0.0.1:9"\nprotocol = {broker.protocol}\n'
                    f'[core]\nasset = "from-file"\n[service]\nmechanism = "{os.path.abspath(MECH)}"\n'
                    'health_interval = 0.2\n')
    seen: list[tuple[str, Any]] = []
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    sub = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5 if broker.mqtt5 else mqtt.MQTTv311)
    sub.on_message = lambda c, u, m: seen.append((m.topic, json.loads(m.payload)))
    sub.on_connect = lambda c, *a: c.subscribe("dt/v1/#", qos=1)
    sub.connect("127.0.0.1", broker.port)
    sub.loop_start()
    proc = subprocess.Popen([sys.executable, "-m", "mbsd_twin.cli", "twin", "serve", "--config", str(toml)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(MBSD_TWIN_BROKER=broker.url, MBSD_TWIN_ASSET="sc-07"))
    try:
        assert _wait(lambda: any(t == "dt/v1/sc-07/twin/health" for t, _ in seen), 30), proc.stderr
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
        assert _wait(lambda: seen[-1] == ("dt/v1/sc-07/twin/status", seen[-1][1]), 5)
    finally:
        proc.kill()
        sub.loop_stop()
    print(err)
    status = [b for t, b in seen if t == "dt/v1/sc-07/twin/status"]
    assert proc.returncode == 0 and status[0]["state"] == "online" and status[-1]["state"] == "offline"
    assert not any("from-file" in t for t, _ in seen)
    assert f"serving dt/v1/sc-07 on {broker.url}" in err


@pytest.mark.parametrize("toml,env,expected,secret", [
    ('[service]\nqueue_size = "lots"\n[core]\nsolver_method = "Euler"\nasset = "a/#"\n', {},
     ["[service] queue_size: expected int, got 'lots'", "[core] solver_method must be one of",
      "[core] asset must be a non-empty topic level"], None),
    ("[metrics]\nport = 9108\n", {"MBSD_TWIN_METRICS_PORT": "http", "MBSD_TWIN_PASSWORD": "hunter2"},
     ["[metrics] port (from MBSD_TWIN_METRICS_PORT): expected int, got 'http'"], "hunter2"),
    ('[broker]\nurl = "mqtt://twin:hunter2@127.0.0.1:1883"\npassword = 12345\n', {},
     ["[broker] url must not carry credentials ('mqtt://twin:***@127.0.0.1:1883')",
      "[broker] password: invalid value (not shown: secret)"], "hunter2"),
    ('[broker]\nurl = "mqtt://127.0.0.1:1883"\ntls_ca = "/nonexistent/ca.crt"\n[nope]\nx = 1\n', {},
     ["[broker] tls_ca: no such file '/nonexistent/ca.crt'", "unknown section [nope]"], None),
])
def test_serve_rejects_bad_configuration(tmp_path: Path, toml: str, env: dict[str, str], expected: list[str],
                                         secret: str | None) -> None:
    path = tmp_path / "twin.toml"
    path.write_text(toml)
    t = time.monotonic()
    run = _cli("twin", "serve", "--config", str(path), env=_env(**env))
    print(run.stderr)
    assert run.returncode == 2 and time.monotonic() - t < 30
    assert run.stderr.startswith(f"mbsd-twin twin: error: {path}: {len(expected)} configuration problem(s)")
    for line in expected:
        assert line in run.stderr
    assert "Traceback" not in run.stderr and (secret is None or secret not in run.stderr + run.stdout)
    assert "12345" not in run.stderr
