"""A twin that must compile its kernels says so (issue #31 item 3): ``starting`` with the reason on
its retained status topic until its own ``online`` birth replaces it, through a real mosquitto."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from test_fleet import wait_for

from mbsd_twin.rig.client import connect
from mbsd_twin.twin.config.file import load_config
from mbsd_twin.twin.service import TwinService
from mbsd_twin.twin.starting import StartingStatus, compile_reason, kernels_to_compile

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "dt/v1/a1/twin/status"
PROBE = "from mbsd_twin.twin.starting import kernels_to_compile; print('|'.join(kernels_to_compile()))"


class Watch:
    """Every message on the twin's status topic, with its retain flag."""

    def __init__(self, url: str, name: str) -> None:
        self.seen: list[tuple[dict[str, Any], bool]] = []
        self.lock = threading.Lock()
        self.client = connect(url, name)
        self.client.on_message = self._on
        self.client.subscribe(TOPIC, 1)

    def _on(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.seen.append((json.loads(msg.payload), bool(msg.retain)))

    def states(self) -> list[str]:
        with self.lock:
            return [m["state"] for m, _ in self.seen]

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def _config(broker: Any) -> Any:
    return load_config(None, env={}, overrides={"broker": {"url": broker.url, "protocol": broker.protocol},
                                                "core": {"asset": "a1"}})


def test_kernels_to_compile_reads_numbas_cache(tmp_path: Path) -> None:
    """This session warmed the cache: nothing to compile; a process on an empty cache folder must
    compile both (found without compiling anything)."""
    assert kernels_to_compile() == []
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().split("|") == ["the engine's kernels", "the state estimator's kernels"]


def test_starting_until_the_twin_is_online(broker: Any) -> None:
    cfg = _config(broker)
    watch = Watch(broker.url, "watch-starting")
    reason = compile_reason(["the engine's kernels"])
    try:
        with StartingStatus(cfg, reason):
            wait_for("the starting status", lambda: watch.states() == ["starting"], 20)
            late = Watch(broker.url, "late-starting")  # a dashboard that connects meanwhile: retained
            wait_for("the retained starting status", lambda: late.states() == ["starting"], 20)
            late.close()
            svc = TwinService(cfg)
        msg = watch.seen[0][0]
        assert msg["reason"] == reason and "compiling the engine's kernels into numba's disk cache" in reason
        with svc:
            wait_for("the twin's birth", lambda: watch.states()[-1:] == ["online"], 20)
        # nothing between: the clean disconnect of the starting client sends no will
        assert watch.states()[:2] == ["starting", "online"], watch.states()
    finally:
        watch.close()


def test_a_start_that_fails_leaves_offline(broker: Any) -> None:
    cfg = _config(broker)
    watch = Watch(broker.url, "watch-failed")
    try:
        with pytest.raises(RuntimeError, match="build failed"), StartingStatus(cfg, "compiling"):
            wait_for("the starting status", lambda: watch.states() == ["starting"], 20)
            raise RuntimeError("build failed")
        wait_for(f"offline {watch.seen}", lambda: watch.states() == ["starting", "offline"], 20)
        late = Watch(broker.url, "late-failed")
        wait_for("the retained offline", lambda: late.states() == ["offline"], 20)
        late.close()
    finally:
        watch.close()


@pytest.mark.slow
def test_twin_serve_on_a_fresh_install_says_starting(broker: Any, tmp_path: Path) -> None:
    """``twin serve`` with an empty numba cache (a fresh install): ``starting`` with the reason
    while it compiles (a minute or more), then its ``online`` birth."""
    watch = Watch(broker.url, "watch-serve")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_CACHE_DIR": str(tmp_path / "cache"),
           "MBSD_TWIN_CONFIG": ""}
    proc = subprocess.Popen([sys.executable, "-m", "mbsd_twin.cli", "twin", "serve", "--broker", broker.url,
                             "--asset", "a1"], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        wait_for("the starting status", lambda: watch.states()[:1] == ["starting"], 60)
        assert "compiling the engine's kernels and the state estimator's kernels" in watch.seen[0][0]["reason"]
        wait_for("the twin's birth", lambda: "online" in watch.states(), 900)
        assert watch.states()[:2] == ["starting", "online"], watch.states()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        watch.close()
    assert proc.returncode == 0, err.decode()[-2000:]
