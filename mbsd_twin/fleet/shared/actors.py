"""Shared processes on Ray (``fleet serve --ray`` with ``[fleet] twins_per_process`` > 1): each
group of up to N assets is one actor (:class:`GroupActor`, a :class:`~.host.Host` in the actor's
process) and :class:`RayGroups` is the fleet's side.

Ray restarts a dead group actor (its process or node lost, ``max_restarts``) by running its
constructor again with its first arguments — which cannot know the assets added or removed since.
So the actor starts empty and the fleet sends it its assets: at once when it creates the group,
and again whenever it finds the actor holding other assets than it should (it asks every second,
without blocking its loop: a restarted actor is filled within about a second of answering). Each
twin resumes from its own checkpoint; the fleet status learns of the restart from the twins' wills
and births, as for one actor per asset.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..config import AssetSpec, FleetSettings
from ..member import Member
from .groups import Groups
from .host import Host

log = logging.getLogger("mbsd_twin.fleet")

ASK_EVERY = 1.0  # s between the fleet's questions to a group actor: which assets do you hold?


class GroupActor:
    """The actor body: the host's ``poll`` in a thread of its own, the fleet's calls under one lock."""

    def __init__(self, name: str) -> None:
        import ray

        logging.basicConfig(level=logging.INFO, force=True,
                            format=f"%(asctime)s %(levelname)s [{name} %(threadName)s] %(name)s: %(message)s")
        self.node = ray.get_runtime_context().get_node_id()
        self.incarnation = uuid.uuid4().hex[:8]  # a new one after every restart by Ray
        self.host = Host(lambda msg: None, lambda spec, s: Member(spec, s, {"node_id": self.node}))
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        threading.Thread(target=self._loop, name="host-poll", daemon=True).start()

    def _loop(self) -> None:
        while not self.stopping.wait(0.2):
            with self.lock:
                self.host.poll(time.monotonic())

    def members(self) -> tuple[str, list[str]]:
        with self.lock:
            return self.incarnation, sorted(self.host.slots)

    def add(self, spec: AssetSpec, settings: FleetSettings) -> None:
        """Start the asset's twin; the same asset again (a call Ray retried, a re-send): nothing."""
        with self.lock:
            slot = self.host.slots.get(spec.id)
            if slot is None or (slot.spec, slot.settings) != (spec, settings):
                self.host.add(spec, settings)

    def remove(self, asset: str) -> None:
        with self.lock:
            self.host.remove(asset)

    def status(self) -> dict[str, Any]:
        with self.lock:
            return {a: {**(s.member.status() if s.member else {"asset": a, "running": False}), "node_id": self.node}
                    for a, s in self.host.slots.items()}

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            self.host.close()


@dataclass
class _Group:
    name: str
    settings: FleetSettings
    specs: dict[str, AssetSpec]
    actor: Any
    asked: Any = None  # the pending answer of ``members``
    t_ask: float = 0.0
    incarnation: str | None = None  # the actor's, at its last answer
    missing: set[str] = field(default_factory=set)  # assets it lacked then (maybe an add in flight)


class RayGroups(Groups[_Group]):
    """Group actors named ``mbsd-twin-group-K`` (the fleet's namespace)."""

    def __init__(self, ray: Any) -> None:
        super().__init__()
        self.ray = ray

    def start(self, spec: AssetSpec, settings: FleetSettings) -> None:
        g = self._with_room(settings)
        if g is None:
            self.serial += 1
            name = f"mbsd-twin-group-{self.serial}"
            actor = self.ray.remote(GroupActor).options(
                name=name, max_restarts=settings.max_restarts, max_task_retries=settings.max_task_retries,
                num_cpus=settings.ray_num_cpus, scheduling_strategy=settings.ray_strategy,
                max_concurrency=4).remote(name)
            g = _Group(name, settings, {}, actor)
            self.groups.append(g)
        g.specs[spec.id] = spec
        g.actor.add.remote(spec, settings)
        log.info("twin %s sent to the group actor %s", spec.id, g.name)

    def stop(self, asset: str) -> None:
        g = self._of(asset)
        if g is None:
            return
        del g.specs[asset]
        call = g.actor.remove.remote(asset) if g.specs else g.actor.stop.remote()
        try:
            self.ray.get(call, timeout=15)
        except Exception as exc:  # a dead or unreachable actor: the next look sends it what it should hold
            log.warning("twin %s did not stop gracefully in %s: %s", asset, g.name, exc)
        if not g.specs:
            self.groups.remove(g)
            self.ray.kill(g.actor, no_restart=True)

    def check(self, now: float) -> None:
        """Ask each group actor which assets it holds (at most every ``ASK_EVERY`` s, never waiting)
        and send it the missing ones (a restart by Ray) and the removal of others."""
        for g in self.groups:
            if g.asked is None:
                if now >= g.t_ask:
                    g.asked, g.t_ask = g.actor.members.remote(), now + ASK_EVERY
                continue
            ready, _ = self.ray.wait([g.asked], timeout=0)
            if not ready:
                continue
            ref, g.asked = g.asked, None
            try:
                incarnation, held = self.ray.get(ref)
            except Exception:  # restarting, or its node just died: asked again
                continue
            self._resend(g, incarnation, g.specs.keys() - set(held))
            for a in sorted(set(held) - g.specs.keys()):
                g.actor.remove.remote(a)

    def _resend(self, g: _Group, incarnation: str, missing: set[str]) -> None:
        """Send again what a restarted actor (a new incarnation) lacks, or what it lacked at two
        answers in a row (an add still in flight at one answer is not lost)."""
        restarted = g.incarnation not in (None, incarnation)
        again = missing if restarted else missing & g.missing
        for a in sorted(again):
            log.warning("group actor %s lacks twin %s (%s): sent again", g.name, a,
                        f"restarted by Ray, incarnation {g.incarnation} -> {incarnation}" if restarted
                        else "at two looks in a row")
            g.actor.add.remote(g.specs[a], g.settings)
        g.incarnation, g.missing = incarnation, missing - again

    def status(self, timeout: float) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for g in self.groups:
            try:
                out.update(self.ray.get(g.actor.status.remote(), timeout=timeout))
            except Exception as exc:  # restarting, or its node just died
                out.update({a: {"error": f"{type(exc).__name__}: {exc}"[:300]} for a in g.specs})
        return out

    def close(self) -> None:
        for g in list(self.groups):
            for a in list(g.specs):
                self.stop(a)
