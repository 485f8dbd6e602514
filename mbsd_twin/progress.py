"""Progress of long commands on stderr (simulate, inverse, ``twin calibrate``, the rig; campaigns
have their own count-based bar in :mod:`mbsd_twin.campaign.runner`).

Modes (the commands' ``--progress`` / ``--no-progress``):

* ``auto`` (the default): a rich progress bar when stderr is a terminal, nothing otherwise, so
  pipes, logs and scripts get no escape codes;
* ``always``: the rich bar on a terminal, else one plain line per tenth of the work
  (``simulate: 30 % after 2.4 s``), or every 2 s when the total is not known — for logs of long
  runs;
* ``never``: nothing.

A :class:`Progress` is called with the fraction done (0…1), or ``None`` when the total is not known
(calibration: its notes say how far it is), and a short note."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

MODES = ("auto", "always", "never")
PLAIN_EVERY = 2.0  # s between plain lines when the total is not known


class Progress:
    """A progress display for one piece of work (module docstring); a context manager, also usable
    as a plain ``fraction -> None`` callback."""

    def __init__(self, label: str, mode: str = "auto", stream: TextIO | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"progress mode {mode!r}: use one of {', '.join(MODES)}")
        self.stream = stream or sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.kind = "rich" if tty and mode != "never" else "plain" if mode == "always" else "off"
        self.label, self.t0 = label, time.perf_counter()
        self.tenths = -1  # plain: the last tenth printed
        self.next_line = 0.0  # plain, total unknown: elapsed time [s] of the next line
        self.bar: Any = None
        self.task: Any = None

    def _rich(self, known: bool) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        self.bar = RichProgress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                                TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[note]}"),
                                console=Console(file=self.stream), transient=False)
        self.bar.start()
        self.task = self.bar.add_task(self.label, total=1.0 if known else None, note="")

    def __call__(self, fraction: float | None, note: str = "") -> None:
        if self.kind == "rich":
            if self.bar is None:
                self._rich(fraction is not None)
            self.bar.update(self.task, completed=fraction or 0.0, note=note)
            if fraction is not None and fraction >= 1.0:
                self.close()
        elif self.kind == "plain":
            self._plain(fraction, note)

    def _plain(self, fraction: float | None, note: str) -> None:
        elapsed = time.perf_counter() - self.t0
        if fraction is None:  # no total: a line at most every PLAIN_EVERY seconds
            if elapsed < self.next_line:
                return
            self.next_line = elapsed + PLAIN_EVERY
            self.stream.write(f"{self.label}: {note} ({elapsed:.1f} s)\n")
        else:
            tenth = int(10 * min(max(fraction, 0.0), 1.0) + 1e-9)
            if tenth <= self.tenths:
                return
            self.tenths = tenth
            self.stream.write(f"{self.label}: {10 * tenth:3d} % after {elapsed:.1f} s{' ' + note if note else ''}\n")
        self.stream.flush()

    def close(self) -> None:
        """Stop drawing (the bar stays on the terminal as it ends)."""
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        self.kind = "off" if self.kind == "rich" else self.kind

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def add_progress_flags(p: argparse.ArgumentParser) -> None:
    """``--progress`` (always) / ``--no-progress`` (never) into ``args.progress`` (default auto)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--progress", dest="progress", action="store_const", const="always", default="auto",
                   help="show progress on stderr also when it is not a terminal: one line per tenth "
                        "(default: a bar on a terminal only)")
    g.add_argument("--no-progress", dest="progress", action="store_const", const="never",
                   help="no progress display, also on a terminal")
