"""A line per finished test file in pytest's terminal output, with its test count and wall time, so
that a quiet ``-q`` run (dots only, from parallel workers) shows which files are done, how long
each took and which of their tests failed, as it goes; registered by conftest.py in the process
that reports (the xdist controller, or the single process without xdist)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest


class FileProgress:
    def __init__(self, reporter: Any) -> None:
        self.reporter = reporter
        self.total: Counter[str] = Counter()
        self.left: Counter[str] = Counter()
        self.first: dict[str, float] = {}
        self.failed: Counter[str] = Counter()
        self.names: dict[str, list[str]] = {}

    def _expect(self, nodeids: list[str]) -> None:
        if not self.total:  # every xdist worker collects the same ids: the first one counts
            self.total = Counter(i.split("::")[0] for i in nodeids)
            self.left = self.total.copy()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._expect([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self._expect(ids)

    @pytest.hookimpl(trylast=True)  # after the terminal reporter's dot
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        f = report.nodeid.split("::")[0]
        self.first.setdefault(f, time.monotonic())
        if report.failed:
            self.failed[f] += 1
            self.names.setdefault(f, []).append(report.nodeid.split("::", 1)[1])
        if report.when != "teardown" or self.left[f] <= 0:
            return
        self.left[f] -= 1
        if self.left[f] == 0:
            if getattr(self.reporter._tw, "width_of_current_line", 0):  # after a run of dots
                self.reporter.write("\n")
            bad = f", {self.failed[f]} FAILED: {', '.join(self.names[f])}" if self.failed[f] else ""
            took = time.monotonic() - self.first[f]
            self.reporter.write_line(f"  {f}: {self.total[f]} tests done in {took:.0f} s{bad}")
