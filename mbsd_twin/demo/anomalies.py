"""The anomalies of a demo run, each with its explanation, from the twin's own messages.

Taken from what the twin published (:mod:`.timeline`), never guessed from the signals:

- **output gaps** — a jump in the ``src_seq`` of the twin's residual messages: sensor batches it
  published nothing for. Batches the rig never sent or sent too late (its manifest's ``drop`` and
  ``late`` message faults; the twin counts them as ``gap``) are *lost on the way*; the others are
  split by the twin's health counters as it published the output that ends the gap (or, without
  those, its first health message after it), less what earlier gaps took: ``coalesced`` (a backlog
  skipped), ``dropped_overload`` beyond it (the queue was full), rejections (``invalid.range``,
  ``missing_channels``, ``recovered``);
- **hold spans** — the residual messages' ``hold_change``: from a change to a hold above 1 to the
  next change (one output sample in ``hold``);
- **re-initialisations** — the residual messages' ``resync_events`` (rig time and reason);
- **residual spikes** — runs of published residuals at or above a residual alarm's ``high``
  threshold (samples less than ``MERGE`` s apart form one spike), explained by the injected fault
  in effect (taken effect at most ``CAUSE_WINDOW`` s before) and the anomalies just before them
  (within ``NEAR`` s), and whether they raised the alarm.

Times are rig times since the stream's start [s] (the rig's epoch subtracted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..twin.config.sections import AlarmConfig
from ..viz.plotting import Table
from .timeline import skipped

MERGE = 0.1  # s: residual samples above the line closer than this are one spike
NEAR = 0.1  # s: an event this shortly before a spike explains it
CAUSE_WINDOW = 5.0  # s: an injected fault that took effect this long before a spike (or an alarm) explains it
LOST_KINDS = ("drop", "late")  # message faults after which the batch never reaches the twin in time

LABELS = {"coalesced": "backlog coalesced", "queue_full": "queue full, oldest dropped",
          "lost": "lost on the way", "rejected": "rejected by the twin", "gap": "no output, cause not counted",
          "hold": "coarser hold", "reinit": "re-initialisation", "spike": "residual above the alarm line"}
REINIT_WHY = {
    "start": "the filter starts from the first measurements (estimates at their prior)",
    "gap": "a gap too long (or too uncertain) to predict through: restarted from the measurements",
    "divergence": "the filter's mean NIS over divergence_window exceeded its χ² bound (the measurements left "
                  "the model's prediction): restarted from the measurements",
    "bound": "an estimate left its plausible bounds: restarted from the measurements",
    "solver_failure": "the model's solver failed on this step: restarted from the measurements",
    "recovery": "the model was restored after a failed batch",
    "rig_restart": "the rig started a new session",
    "resume": "resumed after a pause command",
}


@dataclass(frozen=True)
class Evidence:
    """What the findings are taken from: the twin's messages (:meth:`.timeline.Timeline.to_dict`),
    the rig's manifest (``epoch``, ``rate``, ``batch``, message ``faults``, ``rig_faults``,
    ``truth``), twin.csv, the twin's alarms and the service settings its explanations quote."""

    events: Mapping[str, Any]
    manifest: Mapping[str, Any]
    table: Table
    alarms: Sequence[AlarmConfig]
    service: Mapping[str, Any]

    @property
    def epoch(self) -> float:
        if "epoch" in self.manifest:
            return float(self.manifest["epoch"])
        return float(self.table["t"][0]) if len(self.table) else 0.0

    @property
    def batch(self) -> int:
        return int(self.manifest.get("batch", 20))

    @property
    def batch_period(self) -> float:
        return self.batch / float(self.manifest.get("rate", 1000.0))

    def rig(self, t: float) -> float:
        """Rig time since the stream's start."""
        return float(t) - self.epoch

    def faults(self) -> list[tuple[float, str]]:
        """The injected rig faults: (rig time they took effect, their spec)."""
        return sorted((float(f["effective"]), str(f["spec"])) for f in self.manifest.get("rig_faults", ()))


@dataclass(frozen=True)
class Anomaly:
    kind: str  # a key of LABELS
    t0: float  # rig time since the stream's start [s]
    t1: float  # = t0 for an instant
    what: str  # what the twin reports
    why: str  # its explanation
    channel: str = ""  # a spike's channel

    @property
    def label(self) -> str:
        return LABELS[self.kind]


def anomalies(ev: Evidence) -> list[Anomaly]:
    """Every anomaly of the run, in time order."""
    found = output_gaps(ev) + hold_spans(ev) + reinits(ev)
    return sorted(found + spikes(ev, found), key=lambda a: (a.t0, a.t1))


def _seqs(s: Sequence[int]) -> str:
    return str(s[0]) if len(s) == 1 else f"{s[0]}–{s[-1]}"


KINDS = ("coalesced", "queue_full", "rejected")  # the skipped batches' causes, in the order they are counted
NAMES = {"coalesced": "coalesced", "queue_full": "dropped with the queue full", "rejected": "rejected",
         "gap": "not counted"}


def _counted(ev: Evidence, nxt: Sequence[Any]) -> dict[str, int]:
    """The skipped batches the twin had counted when it published output ``nxt``: read with it
    (:class:`.timeline.Timeline` with counters), else from the first health message after it."""
    if len(nxt) >= 8:
        return dict(zip(KINDS, (int(x) for x in nxt[5:8]), strict=True))
    health = [h for h in ev.events.get("health", ()) if h.get("t") is not None]
    h = next((h for h in health if h["t"] >= float(nxt[1])), health[-1] if health else None)
    return dict(zip(KINDS, skipped(h["counters"]) if h else (0, 0, 0), strict=True))


def _attribute(m: int, counted: Mapping[str, int], used: dict[str, int]) -> dict[str, int]:
    """``m`` skipped batches split by cause: the counts not yet attributed to earlier gaps, coalesced
    first (a coalesce skips to the batch whose output ends the gap), then the queue's drops, then
    rejections; what no counter covers is ``gap``."""
    parts, left = {}, m
    for k in KINDS:
        take = min(max(0, counted[k] - used[k]), left)
        if take:
            parts[k], used[k], left = take, used[k] + take, left - take
    return parts | ({"gap": left} if left else {})


def output_gaps(ev: Evidence) -> list[Anomaly]:
    """Runs of sensor batches without output (a jump in the residual messages' ``src_seq``)."""
    outs = ev.events.get("outputs", [])
    plan = {int(i): str(k) for i, k in ev.manifest.get("faults", {}).items()}
    seq0, b, s = int(ev.manifest.get("seq0", 0)), ev.batch, ev.service
    why = {"lost": "the rig dropped or delayed them (its injected message faults); the twin counted them as "
                   f"gap and predicted through (a gap over max_gap = {s.get('max_gap', '?')} s re-initialises)",
           "coalesced": f"the twin's backlog would have waited more than max_lag = {s.get('max_lag', '?')} s: it "
                        "skipped to the newest batch (counted dropped_overload and coalesced) and predicted through",
           "queue_full": f"the queue of queue_size = {s.get('queue_size', '?')} batches was full: its oldest batches "
                         "were dropped",
           "rejected": "the twin rejected them (a value out of range, a missing channel or a failed step)",
           "gap": "the twin counted none of them as lost, coalesced, dropped or rejected"}
    found = []
    if outs and int(outs[0][0]) > seq0:
        first = list(range(seq0, int(outs[0][0])))
        found.append(Anomaly("gap", 0.0, ev.rig(outs[0][1]), f"seq {_seqs(first)}: {len(first)} batch(es), "
                             f"{len(first) * b} samples, before the twin's first output", why["gap"]))
    used = dict.fromkeys(KINDS, 0)
    for prev, nxt in zip(outs, outs[1:], strict=False):
        missing = list(range(int(prev[0]) + 1, int(nxt[0])))
        if not missing:
            continue
        t0, t1 = ev.rig(prev[2]), ev.rig(nxt[1])
        lost = [q for q in missing if plan.get(q - seq0) in LOST_KINDS]
        if lost:
            found.append(Anomaly("lost", t0, t1, f"seq {_seqs(lost)}: {len(lost)} batch(es), {len(lost) * b} "
                                 "samples, never arrived in time", why["lost"]))
        rest = [q for q in missing if q not in lost]
        if rest:
            parts = _attribute(len(rest), _counted(ev, nxt), used)
            kind = max(parts, key=lambda k: parts[k])
            split = ", ".join(f"{n} {NAMES[k]}" for k, n in parts.items())
            found.append(Anomaly(kind, t0, t1, f"seq {_seqs(rest)}: {len(rest)} batch(es), {len(rest) * b} "
                                 f"samples, without output ({split}, by the twin's counters)",
                                 "; ".join(why[k] for k in parts)))
    return found


def _calm(s: Mapping[str, Any]) -> str:
    return f"{s.get('lag_low_batches', '?')} calm batches (lag below lag_low = {s.get('lag_low', '?')} s)"


def hold_spans(ev: Evidence) -> list[Anomaly]:
    """Each span the twin solved at a hold above 1, from its ``hold_change`` to the next one."""
    outs = ev.events.get("outputs", [])
    changes = sorted(ev.events.get("hold_changes", []), key=lambda c: float(c["t"]))
    s = ev.service
    found = []
    for k, c in enumerate(changes):
        if int(c["to"]) <= 1:
            continue
        nxt = changes[k + 1] if k + 1 < len(changes) else None
        t_end = float(nxt["t"]) if nxt else float(outs[-1][2]) if outs else float(c["t"])
        lags = [float(h["lag_s"]) for h in ev.events.get("health", ())
                if h.get("t") is not None and h.get("lag_s") is not None and float(c["t"]) <= h["t"] <= t_end]
        until = f"to hold {nxt['to']} at {ev.rig(t_end):.3f} s" if nxt else "until the end"
        if nxt and int(nxt["to"]) < int(c["to"]):
            until += f" after {_calm(s)}"
        what = (f"hold {c['from']} → {c['to']} at {ev.rig(c['t']):.3f} s, {until} ({t_end - float(c['t']):.2f} s): "
                f"one output sample in {c['to']}" + (f"; health lag up to {max(lags):.3f} s" if lags else ""))
        if int(c["to"]) > int(c["from"]):
            why = (f"the twin fell behind (queue lag above lag_high = {s.get('lag_high', '?')} s, the queue more "
                   f"than half of queue_size = {s.get('queue_size', '?')}, or a backlog just coalesced): it "
                   "solves and publishes coarser steps")
        else:
            why = f"{_calm(s)}: one level finer, still coarser than every sample"
        found.append(Anomaly("hold", ev.rig(c["t"]), ev.rig(t_end), what, why))
    return found


def reinits(ev: Evidence) -> list[Anomaly]:
    """Every (re)initialisation of the filter the twin reported."""
    return [Anomaly("reinit", ev.rig(e["t"]), ev.rig(e["t"]), f"re-initialised ({e['reason']})",
                    REINIT_WHY.get(str(e["reason"]), f"reason {e['reason']!r} (see docs/mqtt-contract.md)"))
            for e in ev.events.get("resyncs", [])]


def _runs(t: np.ndarray, above: np.ndarray) -> list[tuple[int, int]]:
    """Index ranges [i, j] of the samples above the line, split where they are MERGE s apart."""
    idx = np.flatnonzero(above)
    if not len(idx):
        return []
    cut = np.flatnonzero(np.diff(t[idx]) > MERGE)
    starts, ends = np.r_[0, cut + 1], np.r_[cut, len(idx) - 1]
    return [(int(idx[a]), int(idx[b])) for a, b in zip(starts, ends, strict=True)]


def _spike_why(ev: Evidence, t0: float, t1: float, al: AlarmConfig, others: Sequence[Anomaly]) -> str:
    causes = [f"the injected fault {spec} took effect at {te:.3f} s" if te >= t0 - NEAR else
              f"the injected fault {spec} in effect since {te:.3f} s" for te, spec in ev.faults()
              if t0 - CAUSE_WINDOW <= te <= t0 + ev.batch_period][-1:]
    causes += [f"the first correction after the {a.label} ({a.t0:.3f}–{a.t1:.3f} s): the model ran on its "
               "prediction across it" for a in others if a.kind != "reinit" and a.t0 < a.t1 and
               t0 - NEAR <= a.t1 <= t0 + 1e-9]
    causes += [f"right after the filter {a.what} at {a.t0:.3f} s"
               for a in others if a.kind == "reinit" and t0 - NEAR <= a.t0 <= t0 + 1e-9]
    raised = [e for e in ev.events.get("alarms", ()) if e.get("alarm") == al.name and e.get("event") == "raised"
              and t0 - 1e-9 <= ev.rig(e["t"]) <= t1 + al.min_duration + ev.batch_period]
    alarm = (f"raised {al.name} at {ev.rig(raised[0]['t']):.3f} s" if raised else
             f"no alarm (above the line for less than min_duration = {al.min_duration:g} s, or already raised)")
    head = "; ".join(causes) if causes else f"no injected fault and no event of the twin in the {NEAR:g} s before it"
    return f"{head}; {alarm}"


def spikes(ev: Evidence, others: Sequence[Anomaly]) -> list[Anomaly]:
    """Runs of published residuals at or above a residual alarm's raise threshold."""
    tab = ev.table
    if not len(tab):
        return []
    t = tab["t"] - ev.epoch
    found = []
    for al in ev.alarms:
        col = f"resid.{al.channel}"
        if al.source != "residual" or col not in tab:
            continue
        r, unit = tab[col], tab.unit(col)
        with np.errstate(invalid="ignore"):
            above = np.abs(r) >= al.high
        for i, j in _runs(t, above):
            k = i + int(np.nanargmax(np.abs(r[i:j + 1])))
            what = (f"{al.channel} residual {r[k]:+.4g} {unit} at {t[k]:.3f} s ({abs(r[k]) / al.high:.1f}× the "
                    f"alarm line {al.high:g} {unit}); {int(above[i:j + 1].sum())} sample(s) above it")
            found.append(Anomaly("spike", float(t[i]), float(t[j]), what,
                                 _spike_why(ev, float(t[i]), float(t[j]), al, others), al.channel))
    return found


def sample_account(ev: Evidence) -> list[tuple[str, int, str]]:
    """Where the rig's samples went: (what, samples, where the figure comes from); the last row
    is the remainder (batches in flight when the stream stopped)."""
    health = ev.events.get("health", [])
    c = health[-1]["counters"] if health else {}
    b, msgs = ev.batch, int(ev.manifest.get("messages", 0))
    solved, out = int(c.get("samples", 0)), len(ev.table)
    f = dict(zip(KINDS, skipped(c), strict=True))
    rows = [("streamed by the rig", msgs * b, f"rig manifest: {msgs} messages × {b} samples"),
            ("published by the twin (twin.csv rows)", out, "its state and residual messages"),
            ("solved but not published (hold > 1)", solved - out, "health counters.samples − published"),
            ("skipped: backlog coalesced", f["coalesced"] * b, "counters.coalesced × batch"),
            ("dropped: queue full", f["queue_full"] * b, "(counters.dropped_overload − coalesced) × batch"),
            ("lost on the way", int(c.get("gap", 0)) * b, "counters.gap × batch"),
            ("rejected by the twin", f["rejected"] * b, "counters.invalid.range, missing_channels, recovered")]
    rest = msgs * b - sum(n for _, n, _ in rows[1:])
    return [*rows, ("not accounted for (in flight at the stop)", rest, "the remainder")]
