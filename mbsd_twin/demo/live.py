"""The demo's terminal view: rates, lag, residual RMS, alarms and invalid-message counters.

On a terminal it is a rich live table redrawn four times a second; otherwise (a pipe, a log, CI) a
plain status line every ``every`` seconds.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

from ..dashboard.store import Store


@dataclass
class Snapshot:
    """What the view shows, computed from the service's health and the demo's rows."""

    elapsed: float
    duration: float
    rig_sent: int
    health: dict[str, Any]
    rate: float  # sensor messages per second received by the twin
    resid_rms: dict[str, float]
    alarms_raised: int
    alarms_active: list[str]

    def lines(self) -> list[tuple[str, str]]:
        h, c = self.health, self.health.get("counters", {})
        ms = h.get("solver_ms_per_batch", {})
        inv = c.get("invalid", {})
        rms = ", ".join(f"{k} {v:.3g}" for k, v in self.resid_rms.items())
        return [
            ("time", f"{self.elapsed:5.1f} / {self.duration:g} s"),
            ("rig messages sent / twin received", f"{self.rig_sent} / {c.get('received', 0)}"),
            ("rate [messages/s]", f"{self.rate:.1f}"),
            ("lag [s] / queue / hold", f"{h.get('lag_s', 0.0):.3f} / {h.get('queue_depth', 0)} / {h.get('hold', '-')}"),
            ("solver ms per batch p50 / p99",
             f"{ms.get('p50', 0):.2f} / {ms.get('p99', 0):.2f}"),
            ("residual RMS (last 2 s)", rms or "-"),
            ("alarms raised / active", f"{self.alarms_raised} / {', '.join(self.alarms_active) or 'none'}"),
            ("invalid messages", f"{sum(inv.values())} " + (str(dict(sorted(inv.items()))) if inv else "")),
            ("gap / late / duplicate / reordered",
             " / ".join(str(c.get(k, 0)) for k in ("gap", "late", "duplicate", "reordered"))),
            ("re-syncs", ", ".join(f"{k} {v}" for k, v in sorted(c.get("resync", {}).items())) or "0"),
        ]


def residual_rms(store: Store, seconds: float = 2.0) -> dict[str, float]:
    """RMS of every residual column over the last ``seconds`` of rig time."""
    if not store.columns:
        return {}
    t = store.column("t")
    if not t:
        return {}
    k0 = next((i for i in range(len(t) - 1, -1, -1) if t[i] < t[-1] - seconds), -1) + 1
    out = {}
    for col in store.columns:
        if col.startswith("resid."):
            v = [x for x in store.column(col)[k0:] if math.isfinite(x)]
            out[col[6:]] = math.sqrt(sum(x * x for x in v) / len(v)) if v else math.nan
    return out


class LiveView:
    """``update(snapshot)`` as often as convenient; ``close()`` at the end."""

    def __init__(self, mode: str = "auto", stream: TextIO | None = None, every: float = 5.0) -> None:
        self.stream = stream or sys.stdout
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.mode = ("rich" if tty else "plain") if mode == "auto" else mode
        self.every, self.last = every, -math.inf
        self.live: Any = None
        if self.mode == "rich":
            try:
                from rich.console import Console
                from rich.live import Live
            except ImportError:
                self.mode = "plain"
            else:
                self.live = Live(console=Console(file=self.stream), refresh_per_second=4, transient=False)
                self.live.start()

    def update(self, snap: Snapshot) -> None:
        if self.mode == "rich" and self.live is not None:
            self.live.update(self._table(snap))
        elif self.mode == "plain" and time.monotonic() - self.last >= self.every:
            self.last = time.monotonic()
            d = dict(snap.lines())
            self.stream.write(f"[{d['time']}] rate {d['rate [messages/s]']}/s, lag/queue/hold "
                              f"{d['lag [s] / queue / hold']}, residual RMS {d['residual RMS (last 2 s)']}, "
                              f"alarms {d['alarms raised / active']}, invalid {d['invalid messages']}\n")
            self.stream.flush()

    def _table(self, snap: Snapshot) -> Any:
        from rich.markup import escape
        from rich.table import Table

        t = Table(title="mbsd-twin demo: twin vs synthetic rig", show_header=False, min_width=70)
        t.add_column(style="bold cyan")
        t.add_column()
        for k, v in snap.lines():
            t.add_row(escape(k), escape(v))  # "[s]" is text here, not markup
        return t

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
