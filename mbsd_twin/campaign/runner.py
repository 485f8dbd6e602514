"""Run a campaign: count its tasks, make them lazily as a backend takes them, run them, show progress as they finish
(a rich progress bar on a terminal, one plain line per task otherwise) and write the summary."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from .backends import Backend
from .config import Campaign, check_size
from .report import summarise, write_summary
from .tasks import Task, expand, run_task

Tick = Callable[[Task, dict[str, Any]], None]


class _Plain:
    """One line per finished task (when the stream is not a terminal)."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.done, self.stream = total, 0, stream

    def __enter__(self) -> Tick:
        return self.tick

    def __exit__(self, *exc: object) -> None:
        pass

    def tick(self, task: Task, res: dict[str, Any]) -> None:
        self.done += 1
        verdict = "ok" if res["ok"] else f"FAIL {res['error']}".rstrip()
        print(f"[{self.done}/{self.total}] {task.label}: {verdict} ({res['wall']:.1f} s)", file=self.stream,
              flush=True)


class _Bar:
    """A rich progress bar on the stream (a terminal), with the failures counted."""

    def __init__(self, total: int, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[failed]} failed"),
                                 console=Console(file=stream))
        self.bar = self.progress.add_task("campaign", total=total, failed=0)
        self.failed = 0

    def __enter__(self) -> Tick:
        self.progress.__enter__()
        return self.tick

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def tick(self, task: Task, res: dict[str, Any]) -> None:
        self.failed += not res["ok"]
        if not res["ok"]:
            self.progress.console.print(f"FAIL {task.label}: {res['error']}")
        self.progress.update(self.bar, advance=1, description=task.label[:40], failed=self.failed)


def progress(total: int, stream: TextIO | None = None) -> _Plain | _Bar:
    stream = stream or sys.stderr
    tty = bool(getattr(stream, "isatty", lambda: False)())
    return _Bar(total, stream) if tty else _Plain(total, stream)


def run_campaign(campaign: Campaign, backend: Backend, out: str | Path,
                 stream: TextIO | None = None) -> dict[str, Any]:
    """Run every task of ``campaign`` on ``backend``; write ``summary.json`` and ``summary.md``
    into ``out`` and return the summary. The tasks are counted first (refused above ``max_tasks``:
    :class:`~mbsd_twin.errors.CampaignError`) and made lazily as the backend takes them."""
    total = check_size(campaign)
    done: list[tuple[Task, dict[str, Any]]] = []
    t0 = time.perf_counter()
    with progress(total, stream) as tick:
        for _, task, res in backend.run(run_task, expand(campaign), campaign.limits.max_in_flight,
                                        campaign.limits.task_timeout):
            done.append((task, res))
            tick(task, res)
    summary = summarise(campaign, done, backend.name, time.perf_counter() - t0)
    write_summary(summary, Path(out))
    return summary
