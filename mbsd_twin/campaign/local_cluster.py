"""A small local Ray cluster for tests and benchmarks: ``nodes`` nodes of ``cpus`` CPUs each, on
free ports, in a temp dir of its own (``/tmp/ray_<prefix>...``), no dashboard. Stopping it kills only
its own processes — the ``ray start --block`` parents and every process whose command line holds its
temp dir — never a bare ``ray stop``, which would end every Ray cluster of the machine.

    with LocalRayCluster(nodes=2) as address:
        RayBackend(address) ...
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

MARKER = "MBSD_LOCAL_RAY_CLUSTER"  # in every cluster process's environment: its temp dir
AGENT_PORTS = ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--metrics-export-port",
               "--runtime-env-agent-port", "--node-manager-port", "--object-manager-port")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pids_holding(tag: str) -> list[int]:
    """PIDs of the processes whose command line or environment contains ``tag`` (Linux ``/proc``;
    Ray's agents rename their command line, but keep the environment they were started with)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if any(tag.encode() in (d / f).read_bytes() for f in ("cmdline", "environ")):
                    out.append(int(d.name))
            except OSError:
                pass
    return out


class LocalRayCluster:
    """Start with ``start()`` (or ``with``): returns the head's ``NODE_IP:PORT``; ``stop()``."""

    def __init__(self, nodes: int = 2, cpus: int = 1, prefix: str = "mbsd_", timeout: float = 120.0,
                 env: dict[str, str] | None = None) -> None:
        self.nodes, self.cpus, self.timeout = nodes, cpus, timeout
        self.prefix = prefix
        # a loaded machine starts a raylet slowly: Ray's default wait (10 s) let the second node time out
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_raylet_start_wait_time_s": "180", **(env or {})}
        self.temp = ""
        self.address = ""
        self.log: Path | None = None
        self.procs: list[subprocess.Popen[bytes]] = []

    def _node(self, args: list[str]) -> None:
        ray = str(Path(sys.executable).with_name("ray"))
        ports = [x for p in AGENT_PORTS for x in (p, str(free_port()))]
        assert self.log is not None
        with self.log.open("ab") as log:
            self.procs.append(subprocess.Popen(
                [ray, "start", "--block", "--num-cpus", str(self.cpus), *args,
                 *ports], env={**self.env, MARKER: self.temp}, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True))

    def start(self) -> str:
        import ray

        self.temp = tempfile.mkdtemp(prefix=f"ray_{self.prefix}", dir="/tmp")
        self.log = Path(self.temp) / "ray-start.log"
        port = free_port()
        self.address = f"{ray.util.get_node_ip_address()}:{port}"
        deadline = time.monotonic() + self.timeout
        try:
            self._node(["--head", "--port", str(port), "--include-dashboard=false", "--temp-dir", self.temp])
            while not (Path(self.temp) / "session_latest").exists():
                if self.procs[0].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Ray head in {self.temp} did not start: {self.log.read_text()[-2000:]}")
                time.sleep(0.5)
            for _ in range(self.nodes - 1):
                self._node(["--address", self.address])
            ray.init(address=self.address, logging_level=logging.ERROR, log_to_driver=False)
            try:
                while len([n for n in ray.nodes() if n["Alive"]]) < self.nodes and time.monotonic() < deadline:
                    time.sleep(0.5)
                alive = len([n for n in ray.nodes() if n["Alive"]])
            finally:
                ray.shutdown()
            if alive < self.nodes:
                raise RuntimeError(f"Ray cluster in {self.temp}: {alive} of {self.nodes} nodes up "
                                   f"after {self.timeout:g} s")
        except BaseException:
            self.stop()
            raise
        return self.address

    def stop(self) -> None:
        for proc in self.procs[::-1]:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if self.temp:
            for pid in pids_holding(self.temp):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            shutil.rmtree(self.temp, ignore_errors=True)
        self.procs = []

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
