"""After a change alarm, which single change explains it: the twin's face of
:mod:`mbsd_twin.estimation.isolation`.

The diagnosis keeps the sensor batches and the filter's checkpoints (taken after every batch for
recovery anyway) of the last ``HISTORY`` s. The first change alarm raised after a quiet
spell asks for an isolation; once ``isolation_window`` s of rig time have passed since the onset,
the model is replayed from the last checkpoint before the onset through the window's measured
inputs, and every hypothesis of the bank (each physical parameter, input bias and sensor offset)
is scored by its GLR. The result is published on ``twin/diagnosis``: the candidates with their
fitted size, σ and probability, and how much of the residual the best one explains.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from ..estimation.holds import interval_steps
from ..estimation.isolation import Isolation, Sample, isolate
from .config.sections import CoreConfig
from .protocol import SensorBatch

HISTORY = 1.0  # s of batches and checkpoints kept
LEAD = 0.005  # s: the window starts at the last checkpoint at least this long before the onset
TOP = 5  # candidates published


class Diagnosis:
    """``keep`` after every good batch, ``request`` at a raised alarm, ``due`` at the end of each
    batch (the diagnosis message body, or None)."""

    def __init__(self, cfg: CoreConfig) -> None:
        self.cfg = cfg
        self.batches: deque[SensorBatch] = deque()
        self.checkpoints: deque[tuple[float, tuple[Any, ...]]] = deque()  # (rig time at the batch's end, cp)
        self.pending: dict[str, Any] | None = None
        self.quiet_until = -1.0  # no new request before this rig time (one isolation per fault)
        self.done = 0
        self.failed = 0

    def keep(self, batch: SensorBatch, checkpoint: tuple[Any, ...] | None) -> None:
        t_end = batch.time(batch.n - 1)
        if checkpoint is None or (self.checkpoints and self.checkpoints[-1][1][0] is not checkpoint[0]):
            self.batches.clear()  # no filter (open loop), or a rebuilt one: the old checkpoints are another model's
            self.checkpoints.clear()
            if checkpoint is None:
                return
        self.batches.append(batch)
        self.checkpoints.append((t_end, checkpoint))
        while self.batches and self.batches[0].time(self.batches[0].n - 1) < t_end - HISTORY:
            self.batches.popleft()
        while self.checkpoints and self.checkpoints[0][0] < t_end - HISTORY:
            self.checkpoints.popleft()

    def request(self, events: Sequence[dict[str, Any]]) -> None:
        """The first raised change alarm of a fault asks for an isolation (a drift alarm names its
        unknown already, and its onset lies seconds back: no step hypothesis fits a slow ramp)."""
        if self.cfg.isolation_window <= 0 or self.pending is not None:
            return
        for ev in events:
            if ev.get("event") == "raised" and ev.get("source") == "change" and ev["t"] >= self.quiet_until:
                onset = float(ev.get("onset", ev["t"]))
                self.pending = {"alarm": ev["alarm"], "t_alarm": float(ev["t"]), "onset": onset,
                                "due": max(onset, float(ev["t"])) + self.cfg.isolation_window}
                return

    def due(self, t_now: float) -> dict[str, Any] | None:
        p = self.pending
        if p is None or t_now < p["due"]:
            return None
        self.pending = None
        self.quiet_until = t_now + HISTORY
        try:
            body = self._isolate(p, t_now)
        except Exception as exc:  # a diagnosis never stops the twin: it is reported as not possible
            self.failed += 1
            return {**_head(p), "candidates": [], "problem": f"isolation failed: {type(exc).__name__}: {exc}"}
        self.done += "problem" not in body
        return body

    def _isolate(self, p: dict[str, Any], t_now: float) -> dict[str, Any]:
        start = next((c for c in reversed(self.checkpoints) if c[0] <= p["onset"] - LEAD), None)
        if start is None:
            return {**_head(p), "candidates": [], "problem": "no filter checkpoint before the onset is kept"}
        t_start, (est, snap, est_state, own) = start
        samples = self._samples(t_start, t_now, own["t_offset"])
        if len(samples) < 2:
            return {**_head(p), "candidates": [], "problem": "too few samples in the window"}
        biases = {port: float(est_state["x"][i]) for port, i in est.bias.items()}
        res = isolate(est, snap, biases, samples, p["onset"] - own["t_offset"])
        return {**_head(p), "window": [t_start, samples[-1].t + own["t_offset"]], **_result(res)}

    def _samples(self, t_start: float, t_end: float, t_offset: float) -> list[Sample]:
        """The window's samples after ``t_start`` up to ``t_end`` (rig times), in estimator time."""
        c = self.cfg
        holds = {port: c.input_hold.get(ch, "foh") for ch, port in c.inputs.items()}
        meas = {ch: p for ch, p in c.compare.items() if ch in c.noise}
        out: list[Sample] = []
        prev: tuple[float, dict[str, float]] | None = None
        for b in self.batches:
            for k in range(b.n):
                t = b.time(k)
                u = {port: b.ch[ch][k] for ch, port in c.inputs.items()}
                if abs(t - t_start) < 0.5 * b.dt:
                    prev = (t, u)  # the checkpoint's sample: where the replay starts
                if prev is None or t <= prev[0]:
                    continue
                if t > t_end + 0.5 * b.dt:
                    return out
                steps = [(te - t_offset, v) for te, v in interval_steps(prev[0], t, prev[1], u, holds)]
                out.append(Sample(t - t_offset, steps, u, {o: b.ch[ch][k] for ch, o in meas.items() if ch in b.ch}))
                prev = (t, u)
        return out


def _head(p: dict[str, Any]) -> dict[str, Any]:
    return {"alarm": p["alarm"], "t": p["t_alarm"], "onset": p["onset"]}


def _result(res: Isolation) -> dict[str, Any]:
    return {"samples": res.samples, "chi2": res.chi2, "explained": res.explained, "dispersion": res.dispersion,
            "candidates": [{"name": c.name, "kind": c.kind, "size": c.size, "sd": c.sd, "glr": c.glr,
                            "probability": c.probability} for c in res.candidates[:TOP]]}
