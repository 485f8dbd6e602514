"""Execution backends behind one interface: :meth:`Backend.run` maps a picklable function over
items and yields ``(index, item, result)`` as each one finishes, in completion order. The items are
taken from their iterator lazily: at most ``in_flight`` are submitted and not yet finished (default
twice the workers), so a campaign of many tasks never holds them all, nor their futures.

- :class:`PoolBackend`: a local ``concurrent.futures.ProcessPoolExecutor`` (spawned workers, no Ray).
- :class:`RayBackend`: Ray tasks on a cluster (``ray.init(address=...)``; ``"auto"`` finds a local
  one). The cluster's workers must import this ``mbsd_twin`` (install it, or start the nodes with
  ``PYTHONPATH`` pointing at it).

A task that dies (worker crash, lost node) yields ``{"ok": False, "error": ...}`` like a task that
failed by itself: one failure never ends the campaign. A task's wall-clock budget is enforced inside
the task (:func:`~.tasks.wall_budget`); the Ray backend also cancels (force) a task still running
``GRACE_S`` after its ``budget`` (counted from its submission) and reports the overrun as its error.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Protocol

Result = dict[str, Any]
Done = tuple[int, Any, Result]
GRACE_S = 30.0  # s past a task's budget before the Ray backend cancels it


def lost(exc: BaseException) -> Result:
    """The result of a task whose worker never returned one."""
    return {"ok": False, "figures": {}, "error": f"worker lost: {type(exc).__name__}: {exc}", "wall": math.nan}


def overrun(budget: float, wall: float) -> Result:
    """The result of a task cancelled by the backend after its budget."""
    return {"ok": False, "figures": {}, "wall": wall,
            "error": f"TaskTimeout: the task ran past its wall-clock budget, task_timeout = {budget:g} s "
                     f"(cancelled after {wall:.0f} s)"}


class Backend(Protocol):
    name: str
    workers: int

    def run(self, fn: Callable[[Any], Result], items: Iterable[Any], in_flight: int = 0,
            budget: float = math.inf) -> Iterator[Done]: ...

    def close(self) -> None: ...


class PoolBackend:
    """``workers`` spawned processes (default: the CPU count)."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self.name = f"process pool ({self.workers} workers)"

    def run(self, fn: Callable[[Any], Result], items: Iterable[Any], in_flight: int = 0,
            budget: float = math.inf) -> Iterator[Done]:
        limit = in_flight or 2 * self.workers
        todo = enumerate(items)
        with ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            pending: dict[Future[Result], tuple[int, Any]] = {}
            while True:
                while len(pending) < limit and (nxt := next(todo, None)) is not None:
                    pending[pool.submit(fn, nxt[1])] = nxt
                if not pending:
                    return
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    k, it = pending.pop(fut)
                    try:
                        yield k, it, fut.result()
                    except Exception as exc:  # BrokenProcessPool: a worker died
                        yield k, it, lost(exc)

    def close(self) -> None:
        pass


class RayBackend:
    """Ray tasks (one CPU each) on the cluster at ``address``; ``workers`` caps the tasks in flight
    (default: as many as the cluster schedules)."""

    def __init__(self, address: str, workers: int | None = None) -> None:
        import ray

        self.ray = ray
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = workers or max(cpus, 1)
        self.name = f"Ray at {address} ({len(ray.nodes())} nodes, {cpus} CPUs, {self.workers} in flight)"

    def run(self, fn: Callable[[Any], Result], items: Iterable[Any], in_flight: int = 0,
            budget: float = math.inf) -> Iterator[Done]:
        remote = self.ray.remote(num_cpus=1, max_retries=0)(fn)
        limit = in_flight or self.workers
        todo = enumerate(items)
        pending: dict[Any, tuple[int, Any, float]] = {}
        while True:
            while len(pending) < limit and (nxt := next(todo, None)) is not None:
                pending[remote.remote(nxt[1])] = (*nxt, time.monotonic())
            if not pending:
                return
            wait_s = max(0.1, min(s for *_, s in pending.values()) + budget + GRACE_S - time.monotonic()) \
                if math.isfinite(budget) else None
            done, _ = self.ray.wait(list(pending), num_returns=1, timeout=wait_s)
            if not done:
                yield from self._cancel_overdue(pending, budget)
                continue
            k, it, _ = pending.pop(done[0])
            try:
                yield k, it, self.ray.get(done[0])
            except Exception as exc:  # RayTaskError / WorkerCrashedError / node lost
                yield k, it, lost(exc)

    def _cancel_overdue(self, pending: dict[Any, tuple[int, Any, float]], budget: float) -> Iterator[Done]:
        now = time.monotonic()
        for ref in [r for r, (_, _, s) in pending.items() if now - s > budget + GRACE_S]:
            k, it, started = pending.pop(ref)
            self.ray.cancel(ref, force=True)
            yield k, it, overrun(budget, now - started)

    def close(self) -> None:
        self.ray.shutdown()


def make_backend(ray_address: str | None, workers: int | None) -> Backend:
    """Ray when an address (or ``auto``) is given, else the local process pool."""
    if workers is not None and workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    return RayBackend(ray_address, workers) if ray_address else PoolBackend(workers)
