"""What the fleet believes of the messages on its twins' status topics (docs/fleet.md, "Fleet
status"): anyone who may publish there could claim to be a twin, so a birth counts only when the
checkpoint store's lease (:mod:`.fence`) names its instance — the instance the fleet started
took that lease — and, for the local backend, the lease's pid is the fleet's own child; every field
copied into the fleet status is type-checked and bounded. A will counts only on Ray (the local
backend sees its processes die itself) and only for the current instance.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable
from typing import Any

from ..storage.checkpoint.store import CheckpointStore, Lease
from ..twin.redaction import redact

log = logging.getLogger("mbsd_twin.fleet")

MAX_PAYLOAD = 4096  # bytes: a twin's birth is about 500; anything larger is not one
MAX_PENDING = 16  # births of distinct instances kept per asset until the store is asked
INSTANCE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def number(v: Any, low: float = 0.0, high: float = 1e12) -> float | None:
    """``v`` when it is a finite number in [low, high] (not a bool), else None."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not low <= v <= high:
        return None
    return float(v)


def parse(payload: bytes) -> dict[str, Any] | None:
    """A status message as a dict with a ``state`` and a well-formed ``instance``; None for anything
    else (too long, not JSON, not an object, fields of other types)."""
    if len(payload) > MAX_PAYLOAD:
        return None
    try:
        body = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("state") not in ("online", "offline"):
        return None
    inst = body.get("instance")
    return body if isinstance(inst, str) and INSTANCE.match(inst) else None


def trusted_birth(lease: Lease, body: dict[str, Any]) -> dict[str, Any]:
    """The fields of a confirmed birth the fleet status copies: who it is from the lease (written by
    the twin that took it), what came of its checkpoint from the birth (checked, bounded)."""
    cp = body.get("restarted_from_checkpoint")
    rej = body.get("checkpoint_rejected")
    return {"instance": lease.instance, "pid": lease.pid, "node_id": lease.node, "started_at": lease.taken_at,
            "gap_s": number(cp.get("gap_s"), 0.0, 1e9) if isinstance(cp, dict) else None,
            "checkpoint_rejected": redact(rej[:500])[:500] if isinstance(rej, str) else None}


class Witness:
    """Births waiting for the store's word (``offer`` from the network callbacks, ``confirm`` from
    the fleet's loop: one look at the store per asset with births waiting). ``pid_of(asset)``: the
    pid of the fleet's own process of the asset (local backend), None when it cannot tell (Ray)."""

    def __init__(self, store: str, pid_of: Callable[[str], int | None] | None, counts: dict[str, int]) -> None:
        self.store = CheckpointStore(store)
        self.pid_of = pid_of
        self.counts = counts
        self.pending: dict[str, dict[str, dict[str, Any]]] = {}  # asset → instance → its first birth
        self.problem = ""

    def offer(self, asset: str, body: dict[str, Any]) -> None:
        births = self.pending.setdefault(asset, {})
        if body["instance"] in births:  # the first of an instance's births: a copy with other fields is not it
            self.counts["births_ignored"] += 1
            return
        births[body["instance"]] = body
        while len(births) > MAX_PENDING:  # a flood of invented instances: the oldest go unheard
            births.pop(next(iter(births)))
            self.counts["births_ignored"] += 1

    def confirm(self, t_start: Callable[[str], float | None]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
        """asset → (its confirmed birth, the fields to copy); the other births waiting are dropped
        (counted). ``t_start(asset)``: when the fleet (re)started it (an older lease is stale)."""
        out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        try:
            for asset, births in list(self.pending.items()):
                lease = self._holder(asset)
                if lease is None:
                    continue  # the store unreachable: asked again at the next turn
                del self.pending[asset]
                body = births.pop(lease.instance, None)
                self.counts["births_ignored"] += len(births)
                since = t_start(asset)
                mine = self.pid_of(asset) if self.pid_of else lease.pid
                if body is None or since is None or lease.taken_at < since or mine != lease.pid:
                    self.counts["births_ignored"] += body is not None
                    continue
                out[asset] = (body, trusted_birth(lease, body))
        finally:
            self.store.close()  # no connection open while the local backend forks a twin
        return out

    def _holder(self, asset: str) -> Lease | None:
        try:
            lease = self.store.holder(asset)
        except Exception as exc:
            if str(exc) != self.problem:
                log.warning("fleet status: births of %s not confirmed yet, the checkpoint store cannot tell: %s",
                            asset, redact(str(exc), self.store.url))
            self.problem = str(exc)
            return None
        if lease is None:  # no lease taken: nobody's birth is confirmed
            self.counts["births_ignored"] += len(self.pending.pop(asset, {}))
        return lease
