"""The local backend's shared processes (``[fleet] twins_per_process`` > 1): each holds up to that
many assets (:func:`~.host.run_group`). A new asset joins the first process with room and the same
``[fleet]`` settings, else a new process starts; a removed asset leaves its process (the others
keep running; the last one out ends it). A process that dies is started again with all its assets
(:class:`~..restarts.Restarts`), each resuming from its own checkpoint."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..config import AssetSpec, FleetSettings
from ..restarts import Restarts, revive
from .groups import Groups
from .host import run_group

log = logging.getLogger("mbsd_twin.fleet")

STOP_WAIT = 15.0  # s the fleet waits for a shared process to stop one of its twins (history flush, checkpoint)


def end_process(proc: Any, what: str) -> None:
    """SIGTERM (graceful: ``offline`` statuses, last checkpoints), SIGKILL after 10 s."""
    t0 = time.monotonic()
    proc.terminate()
    proc.join(10.0)
    if proc.is_alive():
        log.error("%s (pid %s) did not stop within 10 s of SIGTERM: killed", what, proc.pid)
        proc.kill()
        proc.join(2.0)
    log.info("%s stopped (exit code %s, %.1f s)", what, proc.exitcode, time.monotonic() - t0)


@dataclass
class _Group:
    name: str
    settings: FleetSettings
    specs: dict[str, AssetSpec]
    r: Restarts
    proc: Any = None
    conn: Any = None  # the fleet's end of the pipe to the process
    dead: dict[str, bool] = field(default_factory=dict)  # its twins it reports dead (True: given up)


class Pool(Groups[_Group]):
    def __init__(self, ctx: Any) -> None:
        super().__init__()
        self.ctx = ctx

    def _spawn(self, g: _Group) -> str:
        if g.conn is not None:
            g.conn.close()
        g.conn, child = self.ctx.Pipe()
        g.proc = self.ctx.Process(target=run_group, args=(g.name, list(g.specs.values()), g.settings, child),
                                  name=g.name)
        g.proc.start()
        child.close()
        g.dead = {}
        return f"pid {g.proc.pid}, twins {', '.join(g.specs)}"

    def start(self, spec: AssetSpec, settings: FleetSettings) -> None:
        g = self._with_room(settings, lambda g: not g.r.given_up)
        if g is None:
            self.serial += 1
            g = _Group(f"twins-{self.serial}", settings, {spec.id: spec},
                       Restarts(settings.restart_delay, settings.max_restarts))
            self._spawn(g)
            self.groups.append(g)
            log.info("twin %s started in a new shared process %s (pid %s)", spec.id, g.name, g.proc.pid)
            return
        g.specs[spec.id] = spec
        if g.proc.is_alive():  # else its restart starts it with the others
            self._send(g, ("add", spec, settings))
        log.info("twin %s added to the shared process %s (pid %s)", spec.id, g.name, g.proc.pid)

    def stop(self, asset: str) -> None:
        g = self._of(asset)
        if g is None:
            return
        del g.specs[asset]
        g.dead.pop(asset, None)
        if not g.specs:  # the last one out: the process ends (graceful)
            self.groups.remove(g)
            end_process(g.proc, f"shared process {g.name} (twin {asset})")
            g.conn.close()
            return
        if not g.proc.is_alive() or not self._send(g, ("remove", asset)):
            return  # dead: restarted without it
        t_end = time.monotonic() + STOP_WAIT
        while time.monotonic() < t_end and g.proc.is_alive():
            if self._receive(g, 0.1) == ("removed", asset):
                log.info("twin %s stopped in the shared process %s", asset, g.name)
                return
        # busy (e.g. building another twin): the request stays queued, and the pipe keeps the order —
        # a changed asset's new twin is added after its old one is removed
        log.warning("twin %s not stopped yet after %.0f s in the shared process %s: it stops when the process "
                    "gets to it", asset, STOP_WAIT, g.name)

    def _send(self, g: _Group, msg: tuple[Any, ...]) -> bool:
        try:
            g.conn.send(msg)
            return True
        except OSError as exc:  # the process just died: check() restarts it with its assets
            log.warning("shared process %s: %s not sent (%s)", g.name, msg[:2], exc)
            return False

    def _receive(self, g: _Group, timeout: float) -> tuple[Any, ...] | None:
        """One message of the process (its twins' deaths noted), None when there is none."""
        try:
            if not g.conn.poll(timeout):
                return None
            msg: tuple[Any, ...] = g.conn.recv()
        except (EOFError, OSError):  # the process died
            time.sleep(timeout)
            return None
        if msg[0] == "dead" and msg[1] in g.specs:
            g.dead[msg[1]] = msg[2]
        elif msg[0] == "alive":
            g.dead.pop(msg[1], None)
        return msg

    def check(self, now: float) -> None:
        for g in self.groups:
            while g.proc.is_alive() and self._receive(g, 0.0) is not None:
                pass
            if not g.proc.is_alive():
                revive(g.r, now, f"shared process {g.name}",
                       f"pid {g.proc.pid}, exit code {g.proc.exitcode}, twins {', '.join(g.specs)}",
                       partial(self._spawn, g))

    def dead(self) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for g in self.groups:
            out.update({a: g.r.given_up for a in g.specs} if not g.proc.is_alive() else g.dead)
        return out

    def pid(self, asset: str) -> int | None:
        g = self._of(asset)
        return g.proc.pid if g is not None and g.proc.is_alive() else None

    def status(self) -> dict[str, Any]:
        return {a: {"pid": g.proc.pid, "alive": g.proc.is_alive() and a not in g.dead, "restarts": g.r.restarts,
                    "process": g.name} for g in self.groups for a in g.specs}

    def close(self) -> None:
        for g in self.groups:  # every process told at once; each stops its twins gracefully
            g.proc.terminate()
        for g in self.groups:
            end_process(g.proc, f"shared process {g.name}")
        self.groups.clear()
