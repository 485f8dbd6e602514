"""The fleet on a Ray cluster (``fleet serve --ray ADDRESS``): each asset a Ray actor running its
twin (:class:`~.member.Member`) in the actor's process. Ray restarts an actor whose process
or node died (``max_restarts``, ``max_task_retries`` from ``[fleet]``), on another node when its
node is gone; the new actor resumes from the asset's last checkpoint, so the checkpoint store must
be reachable from every node (PostgreSQL, or a SQLite file on a shared path). With ``[fleet]
twins_per_process`` > 1 a group actor holds several assets' twins instead (:mod:`.shared.actors`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from .config import AssetSpec, FleetSettings
from .shared.actors import RayGroups

log = logging.getLogger("mbsd_twin.fleet")


class TwinActor:
    """The actor body: the twin starts in ``__init__`` (also when Ray restarts the actor)."""

    def __init__(self, spec: AssetSpec, settings: FleetSettings) -> None:
        import ray

        from .member import Member

        logging.basicConfig(level=logging.INFO,
                            format=f"%(asctime)s %(levelname)s [{spec.id}] %(name)s: %(message)s")
        self.member = Member(spec, settings, {"node_id": ray.get_runtime_context().get_node_id()})
        self.member.start()

    def status(self) -> dict[str, Any]:
        import ray

        return {**self.member.status(), "node_id": ray.get_runtime_context().get_node_id()}

    def stop(self) -> None:
        self.member.stop()


class RayBackend:
    """Actors named ``mbsd-twin-<asset>`` in ``namespace``; ``address`` as for ``ray.init``."""

    name = "ray"

    def __init__(self, address: str, namespace: str = "mbsd-twin-fleet") -> None:
        import ray

        self.ray = ray
        if not ray.is_initialized():
            ray.init(address=address, namespace=namespace, log_to_driver=True)
        self.actors: dict[str, Any] = {}
        self.groups = RayGroups(ray)  # twins_per_process > 1: a group actor holds several

    def start(self, spec: AssetSpec, settings: FleetSettings) -> None:
        if settings.twins_per_process > 1:
            self.groups.start(spec, settings)
            return
        cls = self.ray.remote(TwinActor)
        self.actors[spec.id] = cls.options(
            name=f"mbsd-twin-{spec.id}", max_restarts=settings.max_restarts,
            max_task_retries=settings.max_task_retries, num_cpus=settings.ray_num_cpus,
            scheduling_strategy=settings.ray_strategy, max_concurrency=2).remote(spec, settings)

    def stop(self, asset: str) -> None:
        if asset in self.groups:
            self.groups.stop(asset)
            return
        a = self.actors.pop(asset, None)
        if a is None:
            return
        try:
            self.ray.get(a.stop.remote(), timeout=15)
        except Exception as exc:  # a dead or unreachable actor: killed below all the same
            log.warning("twin %s did not stop gracefully: %s", asset, exc)
        self.ray.kill(a, no_restart=True)

    def check(self) -> None:
        """Ray restarts actors itself; a restarted group actor is sent its assets again."""
        self.groups.check(time.monotonic())

    def dead(self) -> dict[str, bool]:
        """Not asked of Ray (a call per actor would block the fleet's loop): the fleet status learns
        of a restart from the twin's will and its new birth."""
        return {}

    def pid(self, asset: str) -> int | None:
        """Not known without a call to the actor: births are confirmed by the store's lease alone."""
        return None

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for aid, a in self.actors.items():
            try:
                out[aid] = self.ray.get(a.status.remote(), timeout=timeout)
            except Exception as exc:  # restarting, or its node just died
                out[aid] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        return {**out, **self.groups.status(timeout)}

    def close(self) -> None:
        self.groups.close()
        for aid in list(self.actors):
            self.stop(aid)
