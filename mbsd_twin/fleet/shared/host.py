"""The twins of one shared fleet process (:class:`Host`) and that process's main loop
(:func:`run_group`).

The twins share the process — its compiled code (numba/LLVM), the engine's modules, the
interpreter — and nothing else: each is a :class:`~..member.Member` with its own
:class:`~mbsd_twin.twin.service.TwinService` (own MQTT connection and retained will, worker
thread, queue, history writer), its own lease (fencing) and checkpoints. A twin that fails — its
worker thread died, or it was fenced off by a newer instance, or it could not be built — is
stopped alone (no last checkpoint: its core may be mid-batch; an ``offline`` status unless it was
fenced off) and started again from its asset's last checkpoint after ``restart_delay``
(:class:`~..restarts.Restarts`); the other twins of the process do not notice.

The fleet talks to the process over a pipe: ``("add", spec, settings)``, ``("remove", asset)``;
the process answers ``("removed", asset)`` and reports ``("dead", asset, given_up)`` /
``("alive", asset)`` for the fleet status.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ...twin.heap import freeze_startup
from ..config import AssetSpec, FleetSettings
from ..member import Member
from ..restarts import Restarts, revive

log = logging.getLogger("mbsd_twin.fleet")


@dataclass
class _Slot:
    spec: AssetSpec
    settings: FleetSettings
    r: Restarts
    member: Member | None = None
    exit_code: int | None = None  # the running member asked to end (EXIT_WORKER_DIED, EXIT_SUPERSEDED)
    reported: str = ""  # the last state reported to the fleet ("dead", "failed", "alive")


class Host:
    """The assets' twins of this process; ``poll`` from the process's main thread (restarts happen
    there, never in a twin's own threads). ``report(msg)``: tells the fleet of deaths and returns."""

    def __init__(self, report: Callable[[tuple[Any, ...]], None],
                 make: Callable[[AssetSpec, FleetSettings], Member] = Member) -> None:
        self.report, self.make = report, make
        self.slots: dict[str, _Slot] = {}
        self.lock = threading.Lock()

    def add(self, spec: AssetSpec, settings: FleetSettings) -> None:
        if spec.id in self.slots:  # the fleet never adds twice; a changed asset is removed first
            self.remove(spec.id)
        slot = _Slot(spec, settings, Restarts(settings.restart_delay, settings.max_restarts))
        self.slots[spec.id] = slot
        self._start(slot, time.monotonic())

    def _start(self, slot: _Slot, now: float) -> str:
        """Build and start the slot's twin: how it went, for the log (a failure is its death)."""
        try:
            m = self.make(slot.spec, slot.settings)
        except Exception:  # e.g. its mechanism file vanished: a death of this twin alone
            log.exception("%s: the twin could not be built", slot.spec.id)
            slot.r.died(now)
            self._report(slot, "dead")
            return "could not be built"
        m.on_exit = lambda code: self._exited(slot, m, code)
        m.svc.worker.name = f"twin-worker-{slot.spec.id}"  # the process's log lines say whose
        slot.member = m
        try:
            m.start()
        except Exception:
            log.exception("%s: the twin could not be started", slot.spec.id)
            self._halt(slot, save=False)
            slot.r.died(now)
            self._report(slot, "dead")
            return "could not be started"
        self._report(slot, "alive")
        return f"instance {m.svc.instance}"

    def _exited(self, slot: _Slot, m: Member, code: int) -> None:
        """A member's ``on_exit`` (its own threads): the main thread stops and restarts it."""
        with self.lock:
            if slot.member is m:
                slot.exit_code = code

    def _halt(self, slot: _Slot, save: bool) -> None:
        m, slot.member = slot.member, None
        if m is None:
            return
        try:
            m.stop(save=save)
        except Exception:  # it is gone from this host all the same
            log.exception("%s: the twin did not stop cleanly", slot.spec.id)

    def _report(self, slot: _Slot, state: str) -> None:
        if state != slot.reported:
            slot.reported = state
            self.report(("alive", slot.spec.id) if state == "alive" else ("dead", slot.spec.id, state == "failed"))

    def poll(self, now: float) -> None:
        """Stop the twins that asked to end; start the dead ones that are due again."""
        for aid, slot in list(self.slots.items()):
            with self.lock:
                code, slot.exit_code = slot.exit_code, None
            if code is not None and slot.member is not None:
                log.error("%s: the twin ended (status %d); stopped, restarted alone from its checkpoint", aid, code)
                self._halt(slot, save=False)
                slot.r.died(now)
                self._report(slot, "dead")
            if slot.member is None:
                revive(slot.r, now, f"twin {aid} (in this process)", "not running", partial(self._start, slot, now))
                if slot.r.given_up:
                    self._report(slot, "failed")

    def remove(self, asset: str) -> None:
        """Stop the asset's twin gracefully (``offline`` status, a last checkpoint)."""
        slot = self.slots.pop(asset, None)
        if slot is not None:
            self._halt(slot, save=True)

    def close(self) -> None:
        """Stop every twin gracefully, all at once (each stop mostly waits: its worker, its last
        publications, its history flush), within the fleet's 10 s before SIGKILL."""
        threads = [threading.Thread(target=self.remove, args=(aid,), name=f"stop-{aid}") for aid in list(self.slots)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def run_group(name: str, specs: list[AssetSpec], settings: FleetSettings, conn: Any) -> None:
    """The entry point of a shared fleet process: its twins until SIGTERM/SIGINT, the fleet's
    requests from ``conn`` (a pipe end) in between."""
    logging.basicConfig(level=logging.INFO, force=True,  # forked: not the fleet's format
                        format=f"%(asctime)s %(levelname)s [{name} %(threadName)s] %(name)s: %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    host = Host(conn.send)
    for spec in specs:
        host.add(spec, settings)
    freeze_startup()  # once, after the first twins (heap.py); twins added later are collected as usual
    while not stop.is_set():
        try:
            if conn.poll(0.2):
                _request(host, conn.recv(), conn)
        except (EOFError, OSError):  # the fleet is gone: stop the twins
            log.error("%s: the fleet's pipe closed; stopping", name)
            break
        host.poll(time.monotonic())
    host.close()


def _request(host: Host, msg: tuple[Any, ...], conn: Any) -> None:
    if msg[0] == "add":
        host.add(msg[1], msg[2])
    elif msg[0] == "remove":
        host.remove(msg[1])
        conn.send(("removed", msg[1]))
