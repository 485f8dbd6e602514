"""Execution backends behind one interface: :meth:`Backend.run` maps a picklable function over
items and yields ``(index, result)`` as each one finishes, in completion order.

- :class:`PoolBackend`: a local ``concurrent.futures.ProcessPoolExecutor`` (spawned workers, no Ray).
- :class:`RayBackend`: Ray tasks on a cluster (``ray.init(address=...)``; ``"auto"`` finds a local
  one). The cluster's workers must import this ``mbsd_twin`` (install it, or start the nodes with
  ``PYTHONPATH`` pointing at it).

A task that dies (worker crash, lost node) yields ``{"ok": False, "error": ...}`` like a task that
failed by itself: one failure never ends the campaign.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Any, Protocol

Result = dict[str, Any]


def lost(exc: BaseException) -> Result:
    """The result of a task whose worker never returned one."""
    return {"ok": False, "figures": {}, "error": f"worker lost: {type(exc).__name__}: {exc}", "wall": math.nan}


class Backend(Protocol):
    name: str

    def run(self, fn: Callable[[Any], Result], items: Sequence[Any]) -> Iterator[tuple[int, Result]]: ...

    def close(self) -> None: ...


class PoolBackend:
    """``workers`` spawned processes (default: the CPU count)."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self.name = f"process pool ({self.workers} workers)"

    def run(self, fn: Callable[[Any], Result], items: Sequence[Any]) -> Iterator[tuple[int, Result]]:
        with ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures: dict[Future[Result], int] = {pool.submit(fn, it): k for k, it in enumerate(items)}
            for fut in as_completed(futures):
                try:
                    yield futures[fut], fut.result()
                except Exception as exc:  # BrokenProcessPool: a worker died
                    yield futures[fut], lost(exc)

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

    def run(self, fn: Callable[[Any], Result], items: Sequence[Any]) -> Iterator[tuple[int, Result]]:
        remote = self.ray.remote(num_cpus=1, max_retries=0)(fn)
        todo = list(enumerate(items))[::-1]
        pending: dict[Any, int] = {}
        while todo or pending:
            while todo and len(pending) < self.workers:
                k, it = todo.pop()
                pending[remote.remote(it)] = k
            done, _ = self.ray.wait(list(pending), num_returns=1)
            k = pending.pop(done[0])
            try:
                yield k, self.ray.get(done[0])
            except Exception as exc:  # RayTaskError / WorkerCrashedError / node lost
                yield k, lost(exc)

    def close(self) -> None:
        self.ray.shutdown()


def make_backend(ray_address: str | None, workers: int | None) -> Backend:
    """Ray when an address (or ``auto``) is given, else the local process pool."""
    if workers is not None and workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    return RayBackend(ray_address, workers) if ray_address else PoolBackend(workers)
