"""A twin's state as bytes that survive its process: :func:`capture` / :func:`apply` of a
:class:`~mbsd_twin.twin.core.TwinCore`, and :class:`Checkpointer` (a worker tick of the service that saves one
every ``interval`` seconds to a :class:`~.store.CheckpointStore`).

What is kept (JSON, floats exact): the Simulator's state (``Simulator.get_state``: continues
bit-identically), the filter's estimate ``x`` and covariance ``P`` with the values applied to the
model and its current linearisation, the parameters set by command, the tracker's time origin, the
core's last sample, inputs, output sequence numbers, NIS window and pause flag, and (format 2) the
change tests' CUSUM sums with the change and threshold alarms' timers, so a partly accumulated
change alarms at the same sample as without the restart, and the stream's time base
(:mod:`mbsd_twin.twin.timebase`: its anchor, jitter figures, pending clock-step candidates, the gap gate's state):
the motion, residuals, estimates, change statistics and alarms continue bit-identically
(tests/test_checkpoint.py); format 3 adds the drift tests of the augmented unknowns (block sums,
baseline, CUSUM) and the windows of their rates of change. A format-2 checkpoint still loads (its
drift tests and rate windows start fresh, its alarms are change alarms); a format-1 checkpoint
(before 2026-11-25) too: its change tests and alarm timers start fresh (logged). After a
restart the first batch is usually more than ``[core] max_gap`` after the checkpoint, so the filter
re-initialises its motion from the measurements (``resync`` reason ``gap``; the change tests re-arm
after ``change_settle`` samples, as after any re-initialisation that keeps the unknowns) and keeps
what it had learnt: the augmented unknowns (e.g. ``piston.mass``, input biases).

A row is checked whole before anything of it is applied (:mod:`.check`): a corrupt or
tampered one is refused naming the key, and the twin starts fresh.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import numpy as np

from ...estimation.records import Linearisation, Prediction
from ...twin.alarms import ChangeAlarms
from ...twin.core import TwinCore
from ...twin.tracking import EkfTracker
from .check import EST as _EST
from .check import checked
from .store import Checkpoint, CheckpointStore, LeaseLost

log = logging.getLogger("mbsd_twin.checkpoint")

FORMAT = "mbsd-twin-checkpoint/3"  # 3: with the drift tests and rate windows; 2: change tests and alarm timers
FORMATS = (FORMAT, "mbsd-twin-checkpoint/2", "mbsd-twin-checkpoint/1")  # what apply reads
_CORE = ("started", "pending", "last_t", "prev_inputs", "last_meas", "last_seq", "paused", "good_params",
         "next_latest", "nis_sum", "hold")
_RECORDS = {"Prediction": Prediction, "Linearisation": Linearisation}


def _plain(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return {"__ndarray__": v.tolist(), "dtype": str(v.dtype), "shape": list(v.shape)}
    if type(v).__name__ in _RECORDS:
        return {"__record__": type(v).__name__, **{f.name: _plain(getattr(v, f.name)) for f in fields(v)}}
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _value(v: Any) -> Any:
    if isinstance(v, dict) and "__ndarray__" in v:
        return np.array(v["__ndarray__"], dtype=v["dtype"]).reshape(v["shape"])
    if isinstance(v, dict) and v.get("__record__") in _RECORDS:
        return _RECORDS[v["__record__"]](**{k: _value(x) for k, x in v.items() if k != "__record__"})
    if isinstance(v, dict):
        return {k: _value(x) for k, x in v.items()}
    return v


def capture(core: TwinCore) -> bytes:
    """The core's state (call in the thread that runs the core, between batches)."""
    data: dict[str, Any] = {"format": FORMAT, "core": {k: getattr(core, k) for k in _CORE},
                            "out_seq": dict(core.out_seq), "nis": list(core.nis), "alarms": core.alarms.snapshot(),
                            "changes": core.changes.snapshot() if core.changes is not None else None,
                            "timing": core.timebase.snapshot() | {"gap_pending": core.gaps.pending}}
    tr = core.tracker
    if isinstance(tr, EkfTracker):
        data["t_offset"] = tr.t_offset
        data["sim"] = tr.est.sim.get_state().decode()
        data["est"] = {k: _plain(getattr(tr.est, k)) for k in _EST}
    return json.dumps(data).encode()


def apply(core: TwinCore, blob: bytes) -> None:
    """Put a :func:`capture` back into a freshly built core of the same configuration. The row is
    checked whole first (:func:`.check.checked`: known keys only, each of its type,
    finite, of this filter's shapes); one that does not fit raises :class:`CheckpointError` (a
    ``ValueError`` naming the key) with the core unchanged — then build a fresh core (a failure
    while applying a checked row may leave it half restored)."""
    try:
        data = json.loads(blob.decode())
    except (UnicodeDecodeError, ValueError):
        data = None
    data = checked(core, data, FORMATS)
    c = data["core"]
    for name, value in c["good_params"].items():
        core.tracker.set_param(name, value)
    tr = core.tracker
    if isinstance(tr, EkfTracker):
        tr.est.sim.set_state(data["sim"].encode())  # refuses a state of another mechanism
        for k in _EST:
            setattr(tr.est, k, _value(data["est"][k]))
        tr.t_offset = data["t_offset"]
        core.good = tr.checkpoint()
    changes = _changes(core, data)
    for k in _CORE:
        setattr(core, k, c[k])
    core.out_seq.update(data["out_seq"])
    core.nis.extend((v, k) for v, k in data["nis"])
    core.changes = changes
    if "timing" in data:  # the stream's time base (since 2026-11-27; before: anchored at the next batch)
        core.timebase.restore(data["timing"])
        core.gaps.pending = data["timing"]["gap_pending"]
    if "alarms" in data:
        core.alarms.restore(data["alarms"])
    else:
        log.info("%s checkpoint: no change tests or alarm timers in it; they start fresh", data["format"])


def _changes(core: TwinCore, data: dict[str, Any]) -> ChangeAlarms | None:
    """The change alarms of a checkpoint, rebuilt with its sample rate (None: none yet, or a format-1
    checkpoint — then built fresh at the next batch); ``ValueError`` when its tests do not fit."""
    snap = data.get("changes")
    if snap is None:
        return None
    changes = ChangeAlarms(core.cfg, float(snap["rate"]), core.tracker)
    changes.restore(snap)
    return changes


class Checkpointer:
    """A worker tick (``TwinService.ticks``): every ``interval`` s the state of the core (``core()``:
    the service's current one) to ``store``. A failed save is counted (``checkpoint_failed``, its
    reason in ``last_error``) and retried at the next interval: the twin keeps running."""

    def __init__(self, core: Callable[[], TwinCore], store: CheckpointStore, asset: str, config_hash: str,
                 interval: float, counts: Counter[str]) -> None:
        self.core, self.store, self.asset, self.config_hash = core, store, asset, config_hash
        self.interval = interval
        self.next = time.monotonic() + interval
        self.counts = counts  # the service's counters (in its health): checkpoints, checkpoint_failed
        self.last_error = ""
        self.generation: int | None = None  # the asset's lease this instance holds (None: saves unconditionally)
        self.on_lease_lost: Callable[[LeaseLost], None] = lambda exc: None

    def __call__(self, now: float) -> None:
        if now < self.next:
            return
        self.next = now + self.interval
        self.save()

    def save(self) -> None:
        """One checkpoint; with a ``generation`` (the asset's lease, fleet/member.py) only while this
        instance holds it: a lost lease calls ``on_lease_lost`` and writes nothing."""
        core = self.core()
        try:
            self.store.save(Checkpoint(self.asset, time.time(), core.last_t, self.config_hash, capture(core)),
                            self.generation)
            self.counts["checkpoints"] += 1
        except LeaseLost as exc:
            self.on_lease_lost(exc)
        except Exception as exc:  # a full disk or a lost database connection never stops the twin
            self.counts["checkpoint_failed"] += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
