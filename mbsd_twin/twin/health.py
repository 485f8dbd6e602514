"""The twin's health message (docs/mqtt-contract.md, "Health message"), built from the service's
counters, the core's statistics and the sinks' states."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

TwinService = Any  # a .service.TwinService (which imports this module: no import back)


def health_message(svc: TwinService) -> dict[str, Any]:
    st = svc.core.stats
    ms = np.array(svc.core.step_ms or [0.0])
    lat = np.array(svc.latency_ms or [0.0])
    down = [] if svc.t_disconnect is None else [time.monotonic() - svc.t_disconnect]
    return {"v": 1, "asset": svc.cfg.core.asset, "connected": svc.connected.is_set(),
            "uptime_s": time.monotonic() - svc.t_started,
            "lag_s": svc.lag, "queue_depth": len(svc.batches), "queue_size": svc.cfg.service.queue_size,
            "hold": svc.cfg.service.hold_levels[svc.overload.level], "paused": svc.core.paused,
            "reorder_wait_s": svc.intake.reorder_figures(), "broker_rtt_ms": svc.rtt.figures(),
            "warnings": warnings(svc),
            "counters": {"dropped_overload": 0, "coalesced": 0, "publish_failed": 0, "rig_restart": 0,
                         "degrade": 0, "reorder_waited": 0, **dict(svc.counts),
                         **svc.seq.counts, "invalid": dict(svc.invalid + st["invalid"]),
                         "recovered": {"step": 0, "command": 0, "work": 0, **dict(st["recovered"])},
                         "resync": dict(st["resync"]), "solver_failure": st["solver_failure"],
                         "batches": st["batches"], "samples": st["samples"],
                         "missing_channels": st["missing_channels"], "gap_predicted": st["gap_predicted"],
                         "timing": svc.core.timebase.figures(),
                         "diagnosis": {"done": svc.core.diagnosis.done, "failed": svc.core.diagnosis.failed},
                         "alarm_suppressed": svc.core.alarms.suppressed
                         + (svc.core.changes.suppressed if svc.core.changes else 0),
                         "commands": dict(svc.commands.counts)},
            "solver_ms_per_batch": {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99))},
            "sinks": sinks(svc),
            "latency_ms": {"p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99))},
            "connection": {"connects": svc.connects, "outages": len(svc.outages) + len(down),
                           "last_error": svc.last_error,
                           "last_outage_s": (down or svc.outages or [0.0])[-1],
                           "outage_total_s": float(sum(svc.outages) + sum(down))}}


def sinks(svc: TwinService) -> dict[str, Any]:
    out: dict[str, Any] = {"recording": svc.recorder.status()} if svc.recorder else {}
    if svc.history is not None:
        out["history"] = h = svc.history.status()
        svc.metrics.history_figures(h)
    return out


def warnings(svc: TwinService) -> list[str]:
    """What the operator should fix (each a sentence with its figure and the fix); [] when nothing."""
    s = svc.cfg.service
    overloaded = svc.overload.level > 0 or len(svc.batches) > 1 or svc.lag > s.lag_low
    nagle = svc.rtt.warning(overloaded)
    return [w for w in (nagle, svc.core.read.warning()) if w]
