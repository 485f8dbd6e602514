"""A real MQTT broker for the twin tests: mosquitto on a free loopback port, started and stopped by
the fixture (restartable on the same port). Where mosquitto is absent the amqtt broker (MQTT 3.1.1
only) runs in a subprocess instead — never a silent skip."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.hookimpl(trylast=True)  # after the terminal reporter's own configure
def pytest_configure(config: pytest.Config) -> None:
    """A line per finished test file (tests/progress.py) where the run reports: not in an xdist
    worker, and not when the terminal reporter is off."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not hasattr(config, "workerinput"):
        from progress import FileProgress

        config.pluginmanager.register(FileProgress(reporter), "mbsd-file-progress")


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that starts a Ray cluster is ``slow`` (``make test-slow`` runs them one at a time)
    and in one xdist group (should they run in parallel after all): beside the parallel suite
    on a slow 2-core machine a cluster's nodes, starved, failed their tasks or their failure
    detection (the Ray campaign and fleet tests failed in a CI run there and passed alone); several
    clusters at once, each killing and restarting nodes, starved each other's."""
    for item in items:
        name = item.name.split("[")[0]
        if "ray_cluster" in getattr(item, "fixturenames", ()) or re.search(r"(^|_)ray(_|$)", name):
            item.add_marker(pytest.mark.xdist_group("ray"))
            item.add_marker(pytest.mark.slow)


MOSQUITTO = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if os.path.exists("/usr/sbin/mosquitto") else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    """``url``, ``start()``, ``stop()``, ``kind`` ("mosquitto" or "amqtt"), ``mqtt5``, ``protocol``.

    ``kind`` forces a broker (default: mosquitto when installed). ``conf`` replaces the mosquitto
    configuration after the first line (``listener PORT 127.0.0.1``); ``scheme`` "mqtts" for a TLS
    listener; ``nodelay`` False leaves out ``set_tcp_nodelay true`` (mosquitto's default: Nagle on)."""

    def __init__(self, workdir: Path, kind: str | None = None, conf: str = "", scheme: str = "mqtt",
                 nodelay: bool = True) -> None:
        self.port = free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.kind = kind or ("mosquitto" if MOSQUITTO else "amqtt")
        self.mqtt5 = self.kind == "mosquitto"
        self.protocol = 5 if self.mqtt5 else 4
        self.conf = conf or "allow_anonymous true\n"
        self.workdir = workdir
        self.nodelay = nodelay
        self.proc: subprocess.Popen[bytes] | None = None

    def _command(self) -> list[str]:
        if self.kind == "mosquitto":
            assert MOSQUITTO, "mosquitto is not installed"
            conf = self.workdir / f"mosquitto-{self.port}.conf"
            root = "user root\n" if os.geteuid() == 0 else ""  # as root: keep access to files in tmp_path
            # max_queued_messages 0: the broker never drops messages for a client that reads slowly
            # (its default, 1,000 queued, dropped the twin's and the observers' messages when other
            # jobs starved the test's processes); what the twin itself sheds is what the tests measure
            conf.write_text(f"listener {self.port} 127.0.0.1\n{self.conf}"
                            f"persistence false\n{'set_tcp_nodelay true' if self.nodelay else ''}\n"
                            f"max_queued_messages 0\n{root}")
            return [str(MOSQUITTO), "-c", str(conf)]
        conf = self.workdir / "amqtt.yaml"
        conf.write_text(f"listeners:\n  default:\n    type: tcp\n    bind: 127.0.0.1:{self.port}\n"
                        "plugins:\n  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
                        "    allow_anonymous: true\n")
        return [sys.executable, "-m", "amqtt.scripts.broker_script", "-c", str(conf)]

    def start(self) -> None:
        log = open(self.workdir / f"{self.kind}-{self.port}.log", "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT)
        t_end = time.monotonic() + 10
        while time.monotonic() < t_end:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError(f"{self.kind} did not start on port {self.port}; see {self.workdir}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels() -> None:
    """Fill numba's disk cache before any test starts a process of its own (CLI, FMU importers,
    twin service): compiling from a cold cache takes longer than those processes' timeouts, and
    loading a warm one about a second. ``make`` does the same right after installing."""
    from mbsd_twin.warmup import warm

    warm()
