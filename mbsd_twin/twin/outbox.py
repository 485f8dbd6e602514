"""The twin core's output messages (docs/mqtt-contract.md): per batch the state, residuals,
virtual-sensor and estimates messages of its output samples, its alarm events, the retained
``latest`` summary; and the diagnosis of an alarm."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .batchpath import columns as same_keys_columns
from .protocol import VERSION, SensorBatch, encode

TwinCore = Any  # a .core.TwinCore (which imports this module: no import back)
Row = dict[str, dict[str, float]]  # a tracker's output row (.tracking.Row)


@dataclass(frozen=True)
class Out:
    topic: str
    payload: str
    qos: int = 0
    retain: bool = False


def numbered(core: TwinCore, leaf: str, body: dict[str, Any], qos: int = 0) -> Out:
    """A message on ``twin/<leaf>`` with the asset and the leaf's next sequence number."""
    core.out_seq[leaf] += 1
    return Out(core.topics.twin(leaf), encode({"v": VERSION, "asset": core.cfg.asset, "seq": core.out_seq[leaf],
                                               **body}), qos=qos)


def _batch_msg(core: TwinCore, leaf: str, batch: SensorBatch, hold: int, ends: list[int],
               ch: dict[str, list[float | None]], **extra: Any) -> Out:
    return numbered(core, leaf, {"src_seq": [batch.seq, batch.seq], "t0": batch.time(ends[0]),
                                 "dt": batch.dt * hold, "n": len(ends), "ch": ch, **extra})


def batch_messages(core: TwinCore, batch: SensorBatch, hold: int, ends: list[int], rows: list[Row],
                   events: list[dict[str, Any]], resyncs: int) -> list[Out]:
    """The messages of one batch's output ``rows`` (samples ``ends``) and alarm ``events``."""
    def columns(part: str) -> dict[str, list[float | None]]:
        fast = None if core.reference else same_keys_columns(rows, part)
        if fast is not None:
            return fast
        keys = dict.fromkeys(k for r in rows for k in r[part])  # a row right after a start has no residuals
        return {k: [finite(r[part].get(k)) for r in rows] for k in keys}
    change = {"hold_change": {"from": core.hold, "to": hold, "t": batch.t0}} if hold != core.hold else {}
    core.hold = hold
    outs = [_batch_msg(core, "state", batch, hold, ends, columns("state"), stride=hold),
            _batch_msg(core, "residuals", batch, hold, ends, columns("residual"), stride=hold, resyncs=resyncs,
                       **({"resync_events": core.batch_resync_events} if resyncs else {}), **change),
            _batch_msg(core, "virtual", batch, hold, ends, columns("virtual"), stride=hold)]
    if rows[-1]["filter"]:
        outs.append(_batch_msg(core, "estimates", batch, hold, ends, columns("filter"), stride=hold))
    outs += [numbered(core, "alarms", ev, qos=1) for ev in events]
    t_last = batch.time(batch.n - 1)
    core.latest = {"v": VERSION, "asset": core.cfg.asset, "t": t_last, "src_seq": batch.seq,
                   "state": rows[-1]["state"], "residuals": rows[-1]["residual"],
                   "virtual": rows[-1]["virtual"], "estimates": clean(rows[-1]["filter"]),
                   "alarms_active": core.alarms.active() + (core.changes.active() if core.changes else [])}
    if core.next_latest is None or t_last >= core.next_latest:
        core.next_latest = t_last + core.cfg.latest_interval
        outs.append(Out(core.topics.twin("latest"), encode(core.latest), qos=1, retain=True))
    return outs


def finite(x: float | None) -> float | None:
    """JSON has no NaN: a missing or undefined value is null."""
    return x if x is not None and math.isfinite(x) else None


def clean(d: dict[str, float]) -> dict[str, float | None]:
    return {k: finite(v) for k, v in d.items()}
