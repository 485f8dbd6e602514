"""Fencing a fleet twin (docs/fleet.md, "Fencing"): which instance of an asset may publish is
decided by the checkpoint store's lease (:meth:`.CheckpointStore.acquire`), never by a message.

- At its start a twin takes the asset's lease: a generation one higher than the last holder's.
- Its checkpoints are written only while it holds that generation (checked in the same transaction).
  A lost lease — a newer instance took it, e.g. Ray's restarted actor while this orphan still runs —
  fences it off: it stops publishing, disconnects cleanly (no ``offline`` will over the newer
  birth) and its process exits with :data:`EXIT_SUPERSEDED`, so a supervisor that still wants it
  starts it again (as a new, newest holder).
- A birth of another instance on the twin's own status topic is only a hint to look at the store
  at once (at most once per :data:`CHECK_EVERY` s; hints in between: the worker looks then).
  Retained births, births started before this instance or further than :data:`MAX_SKEW` s in the
  future, and births the store does not confirm are ignored (counted in the twin's health:
  ``fence_hints``, ``fence_ignored``).
- A store unreachable at the start: the twin runs without a lease and takes it later, but only if
  no instance started after it holds it by then (``only_if_newer``).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..storage.checkpoint.store import CheckpointStore, LeaseLost
from ..twin.redaction import redact

log = logging.getLogger("mbsd_twin.fleet")

EXIT_SUPERSEDED = 75  # EX_TEMPFAIL: a newer instance holds the asset's lease; this process stopped publishing
MAX_SKEW = 30.0  # s: a birth that says it started further in the future than this is ignored
CHECK_EVERY = 1.0  # s: at most one look at the store per second on births of other instances


class Fence:
    """The lease of one twin (``svc``: its :class:`~.service.TwinService`) in ``store``;
    ``on_exit(code)`` ends the process once the twin is fenced off."""

    def __init__(self, svc: Any, store: CheckpointStore, asset: str, node: str | None,
                 on_exit: Callable[[int], None], retry: float) -> None:
        self.svc, self.store, self.asset, self.node = svc, store, asset, node
        self.on_exit = on_exit
        self.retry = retry  # s between attempts to take a lease not taken at the start
        self.started_at = time.time()
        self.generation: int | None = None
        self.requested = False  # a birth of another instance asked for a look at the store
        self.next_check = 0.0
        self.next_take = 0.0
        self.lock = threading.Lock()

    def take(self, late: bool = False) -> None:
        """Take the asset's lease (``OSError`` when the store is unreachable); ``late``: only if no
        instance that started after this one holds it (:class:`LeaseLost` otherwise)."""
        self.generation = self.store.acquire(self.asset, self.svc.instance, os.getpid(), self.node,
                                             self.started_at, only_if_newer=late)
        self.svc.birth_extra["generation"] = self.generation
        log.info("%s: lease taken, generation %d (instance %s)", self.asset, self.generation, self.svc.instance)

    def birth(self, st: dict[str, Any], retained: bool) -> None:
        """A message on the twin's own status topic (network thread): an ``online`` birth of another
        instance, not retained, that started after this one and not in the future, is a hint."""
        if st.get("state") != "online" or st.get("instance") == self.svc.instance:
            return
        theirs = st.get("started_at")
        if retained or isinstance(theirs, bool) or not isinstance(theirs, int | float) or not math.isfinite(theirs) \
                or not self.started_at < theirs <= time.time() + MAX_SKEW:
            self.svc.counts["fence_ignored"] += 1
            return
        self.svc.counts["fence_hints"] += 1
        now = time.monotonic()
        if now >= self.next_check:  # at once, before the next batch: no sample published by both instances
            self.next_check = now + CHECK_EVERY
            self.check()
        else:
            self.requested = True  # the worker looks when CHECK_EVERY has passed

    def tick(self, now: float) -> None:
        """Worker thread, between batches: a late lease, or the store's word on a hint."""
        if self.svc.superseded:
            return
        if self.generation is None and now >= self.next_take:
            self.next_take = now + self.retry
            try:
                self.take(late=True)
            except LeaseLost as exc:
                self.lost(exc)
            except Exception as exc:  # still unreachable: the twin runs on, tried again later
                self.svc.rlog.warning("lease", "%s: lease not taken yet: %s", self.asset,
                                      redact(str(exc), self.store.url))
        elif self.requested and now >= self.next_check:
            self.requested, self.next_check = False, now + CHECK_EVERY
            self.check()

    def check(self) -> None:
        """Ask the store who holds the lease: fenced off when a newer generation does."""
        self.svc.counts["fence_checks"] += 1
        try:
            holder = self.store.holder(self.asset)
        except Exception as exc:  # unreachable or a bad row: not fenced by a store that cannot tell
            self.requested = True
            self.svc.rlog.warning("lease check", "%s: the lease cannot be checked: %s", self.asset,
                                  redact(str(exc), self.store.url))
            return
        if self.generation is not None and (holder is None or holder.generation != self.generation):
            self.lost(LeaseLost(self.asset, self.generation, holder))
            return
        self.svc.counts["fence_ignored"] += 1
        self.svc.rlog.warning("fence ignored", "%s: a birth of another instance, not the lease holder's: "
                              "ignored (the store says generation %s is this one)", self.asset, self.generation)

    def lost(self, exc: LeaseLost) -> None:
        """Fenced off: stop publishing, disconnect cleanly, exit (:data:`EXIT_SUPERSEDED`) — from a
        thread of its own (this may run in the network thread, which must send the DISCONNECT)."""
        with self.lock:
            if self.svc.superseded:
                return
            self.svc.supersede(str(exc))
        threading.Thread(target=self._exit, name="twin-fenced", daemon=True).start()

    def _exit(self) -> None:
        t_end = time.monotonic() + 3.0  # the DISCONNECT out before the process ends (else the will fires)
        while self.svc.connected.is_set() and time.monotonic() < t_end:
            time.sleep(0.02)
        self.on_exit(EXIT_SUPERSEDED)
