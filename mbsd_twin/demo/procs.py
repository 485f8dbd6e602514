"""Child processes that never outlive the demo, and the embedded MQTT broker (amqtt).

Children are started in their own session (a Ctrl-C in the terminal reaches only the demo, which
then stops them in order) and, on Linux, with a parent-death signal, so that even a demo killed
with SIGKILL leaves no broker behind.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc_name = ctypes.util.find_library("c")
    if libc_name and sys.platform.startswith("linux"):
        ctypes.CDLL(libc_name, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``cmd`` with stdout and stderr to ``log``, in its own session, killed with its parent."""
    with open(log, "ab") as fh:
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=_die_with_parent)


def stop(proc: subprocess.Popen[bytes] | None, timeout: float = 5.0) -> int | None:
    """SIGTERM, then SIGKILL after ``timeout``; the exit code (None when there was no process)."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    return proc.returncode


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


AMQTT_CONFIG = """listeners:
  default:
    type: tcp
    bind: {host}:{port}
plugins:
  amqtt.plugins.authentication.AnonymousAuthPlugin:
    allow_anonymous: true
"""


class EmbeddedBroker:
    """An amqtt broker (MQTT 3.1.1) in a child process on a free loopback port.

    ``with EmbeddedBroker() as b: b.url`` — stopped (and its temporary folder removed) on exit."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 15.0) -> None:
        self.host, self.port = host, port or free_port(host)
        self.url = f"mqtt://{host}:{self.port}"
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="mbsd_broker_")
        self.log = Path(self._tmp.name) / "amqtt.log"

    def start(self) -> EmbeddedBroker:
        conf = Path(self._tmp.name) / "amqtt.yaml"
        conf.write_text(AMQTT_CONFIG.format(host=self.host, port=self.port), encoding="utf-8")
        self.proc = spawn([sys.executable, "-m", "amqtt.scripts.broker_script", "-c", str(conf)], self.log)
        t_end = time.monotonic() + self.start_timeout
        while time.monotonic() < t_end:
            if port_open(self.host, self.port):
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        tail = self.log.read_text(encoding="utf-8", errors="replace")[-800:] if self.log.exists() else ""
        self.stop()
        raise RuntimeError(f"the embedded amqtt broker did not start on {self.url}:\n{tail}")

    def stop(self) -> None:
        stop(self.proc)
        self.proc = None
        self._tmp.cleanup()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def alive(pid: int) -> bool:
    """True when process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
