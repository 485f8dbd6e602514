"""The unit of work of a campaign: one :class:`Task` (a sweep's grid point, one FMU-vs-native
comparison, one recording's calibration) run by :func:`run_task` — the same function in a process
pool worker and in a Ray task. It never raises: a failure, or a run past the task's wall-clock
budget (``task_timeout``), is returned as the result's ``error``. :func:`expand` makes the tasks
lazily, one at a time, as the backend submits them."""

from __future__ import annotations

import contextlib
import itertools
import math
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .. import Simulator, load_mechanism
from .config import CalibrateJob, Campaign, FmuJob, Job, SweepJob, check_size


@dataclass(frozen=True)
class Task:
    job: Job
    index: int  # position within the job
    point: dict[str, Any]  # sweep: grid values; calibrate: {"recording": path}; fmu: {}
    budget: float = math.inf  # s of wall-clock time (the campaign's task_timeout)

    @property
    def label(self) -> str:
        args = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={Path(str(v)).name}"
                         for k, v in self.point.items())
        return f"{self.job.name}[{self.index}]" + (f" {args}" if args else "")


def expand(campaign: Campaign) -> Iterator[Task]:
    """Every task of every job, in campaign order, made one at a time (a sweep's grid points by
    ``itertools.product``, never as a list); the campaign's size is checked first
    (:func:`~.config.check_size`)."""
    check_size(campaign)
    budget = campaign.limits.task_timeout
    for job in campaign.jobs:
        points: Iterator[dict[str, Any]]
        if isinstance(job, SweepJob):
            names = list(job.grid)
            points = (dict(zip(names, vals, strict=True)) for vals in itertools.product(*job.grid.values()))
        elif isinstance(job, CalibrateJob):
            points = ({"recording": str(r)} for r in job.recordings)
        else:
            points = iter([{}])
        yield from (Task(job, k, p, budget) for k, p in enumerate(points))


class TaskTimeout(BaseException):
    """A task ran past its wall-clock budget (the campaign's ``task_timeout``). A BaseException, so
    that no ``except Exception`` in the task's own code swallows it."""


@contextlib.contextmanager
def wall_budget(seconds: float) -> Iterator[None]:
    """Raise :class:`TaskTimeout` in the running code after ``seconds`` of wall-clock time (SIGALRM
    through ``setitimer``: in the main thread, where pool workers and Ray tasks run; elsewhere, or
    with an infinite budget, nothing — the Ray backend's cancellation is the backstop)."""
    if not math.isfinite(seconds) or threading.current_thread() is not threading.main_thread():
        yield
        return

    def overrun(signum: int, frame: Any) -> None:
        raise TaskTimeout(f"the task ran past its wall-clock budget, task_timeout = {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, overrun)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_task(task: Task) -> dict[str, Any]:
    """``{"ok", "figures", "error", "wall"}`` of one task (``error`` holds the traceback's last
    lines when the task raised, or the budget when it ran past ``task.budget``)."""
    t0 = time.perf_counter()
    try:
        with wall_budget(task.budget):
            ok, figures = RUNNERS[task.job.kind](task)
        error = ""
    except TaskTimeout as exc:
        ok, figures, error = False, {}, f"TaskTimeout: {exc}"
    except Exception as exc:
        ok, figures = False, {}
        tail = traceback.format_exc().strip().splitlines()[-3:]
        error = f"{type(exc).__name__}: {exc}" + ("" if len(tail) < 2 else f" ({tail[0].strip()})")
    return {"ok": ok, "figures": figures, "error": error, "wall": time.perf_counter() - t0}


def statistics(y: NDArray[np.float64], t: NDArray[np.float64], names: tuple[str, ...]) -> dict[str, float]:
    """``min max mean rms final`` of a sampled signal and ``period``: the mean spacing of its
    upward crossings of the mid-range (max + min)/2, linearly interpolated (NaN with fewer than two)."""
    mid = 0.5 * (float(y.max()) + float(y.min()))
    k = np.flatnonzero((y[:-1] < mid) & (y[1:] >= mid))
    cross = t[k] + (mid - y[k]) * (t[k + 1] - t[k]) / (y[k + 1] - y[k])
    every = {"min": float(y.min()), "max": float(y.max()), "mean": float(y.mean()),
             "rms": float(np.sqrt(np.mean(y ** 2))), "final": float(y[-1]),
             "period": float(np.mean(np.diff(cross))) if len(cross) > 1 else math.nan}
    return {n: every[n] for n in names}


def _sweep(task: Task) -> tuple[bool, dict[str, Any]]:
    job = task.job
    assert isinstance(job, SweepJob)
    sim = Simulator(load_mechanism(job.mechanism))
    inputs = {p.name for p in sim.input_ports}
    for name, value in {**job.fixed, **task.point}.items():
        if name in inputs:
            sim.set_input(name, value)
        else:
            sim.set_parameter(name, value)
    n = int(math.ceil(job.duration / job.output_interval - 1e-9))
    t = np.minimum(np.arange(n + 1) * job.output_interval, job.duration)
    rows = np.empty((n + 1, len(job.outputs)))
    rows[0] = [sim.get_output(o) for o in job.outputs]
    for k in range(1, n + 1):
        sim.advance_to(float(t[k]))
        rows[k] = [sim.get_output(o) for o in job.outputs]
    figures = {f"{o}.{s}": v for j, o in enumerate(job.outputs)
               for s, v in statistics(rows[:, j], t, job.statistics).items()}
    return bool(np.isfinite(rows).all()), figures


def _fmu(task: Task) -> tuple[bool, dict[str, Any]]:
    from ..fmi.validation import validate

    job = task.job
    assert isinstance(job, FmuJob)
    if job.fmi_version == "3":
        from ..fmi.fmi3 import build_fmu3 as build
    else:
        from ..fmi.build import build_fmu as build
    with tempfile.TemporaryDirectory(prefix="mbsd-campaign-") as tmp:
        t0 = time.perf_counter()
        fmu = build(job.mechanism, tmp, stop_time=job.stop_time, step_size=job.step)
        built = time.perf_counter() - t0
        rep = validate(fmu, stop_time=job.stop_time, step=job.step, inputs=job.inputs, parameters=job.parameters,
                       rtol=job.rtol, atol=job.atol, checks=job.checks)
    worst = max(rep.errors, key=lambda e: e.max_abs / e.band if e.band > 0 else math.inf, default=None)
    figures: dict[str, Any] = {
        "outputs": len(rep.errors), "in_band": sum(e.ok for e in rep.errors),
        "worst_output": worst.name if worst else "", "worst_max_abs": worst.max_abs if worst else math.nan,
        "worst_band": worst.band if worst else math.nan, "build_s": built,
        **{f"{k}_s": v for k, v in rep.seconds.items()},
    }
    if rep.problems or rep.message:
        figures["problems"] = "; ".join([*rep.problems, rep.message] if rep.message else rep.problems)
    return rep.ok, figures


def _calibrate(task: Task) -> tuple[bool, dict[str, Any]]:
    from ..twin.calibration import calibrate_recording

    job = task.job
    assert isinstance(job, CalibrateJob)
    cal, _ = calibrate_recording(str(task.point["recording"]), job.params, channels=job.channels,
                                 segment=job.segment, stride=job.stride, hold=job.hold)
    figures: dict[str, Any] = {}
    ok = cal.success
    for n, v, e in zip(cal.names, cal.values.tolist(), cal.stderr.tolist(), strict=True):
        figures[n] = v
        figures[f"{n}.stderr"] = e
        if n in job.expected:
            ok = ok and abs(v - job.expected[n]) <= job.rtol * abs(job.expected[n])
    figures["reduced_chi2"] = cal.reduced_chi2
    return ok, figures


RUNNERS = {"sweep": _sweep, "fmu_vs_native": _fmu, "calibrate": _calibrate}
