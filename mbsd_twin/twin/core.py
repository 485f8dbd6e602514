"""The broker-free heart of the twin: sensor batches and commands in, output messages out.

Deterministic: the same batches (with the same ``hold``) and commands give bit-identical output
texts, which is what recording and replay rely on. Wall-clock figures (solver time) are kept in
``stats`` only, never in the outputs.

Per output sample the tracker (:mod:`.tracking`: the Kalman filter by default, or the open-loop
model) is driven by the inputs reconstructed between samples (:mod:`mbsd_twin.estimation.holds`,
first-order hold unless ``input_hold`` says otherwise). With ``hold`` h > 1 it is corrected, and
publishes, only at every h-th sample (aligned to the batch's last) — the degraded mode of
docs/mqtt-contract.md; the model is still driven by every input sample in between. Batches are
placed in time by the stream's time base (:mod:`.timebase`: ``seq`` and regular samples; the rig
clock's jitter and steps are no gaps), short gaps predicted through (:class:`.timebase.GapGuard`);
the filter re-initialises from the measurements only at a start, a gap it cannot predict through,
a rig restart, a command, or divergence (mean NIS above its χ² bound over ``divergence_window``).
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import MbsdError, PortError
from ..estimation.change import nis_bound
from ..estimation.holds import Step, interval_steps
from ..model.model import Mechanism
from ..simulation.work import WorkLimitExceeded, work_limit
from ..solvers.dynamics import SolverFailure
from .alarms import Alarms, ChangeAlarms
from .batchpath import BatchArrays, BatchView, batch_view, filter_run, not_ahead
from .config.sections import CoreConfig
from .diagnosis import Diagnosis
from .gaps import GapGuard
from .guard import batch_step_limit, check_param, out_of_range, problem_text
from .mechanism_check import check_names
from .outbox import Out, batch_messages, numbered
from .plausible import plausible_limits
from .protocol import SensorBatch, Topics
from .timebase import TimeBase
from .tracking import EkfTracker, Row, make_tracker

Recorder = Callable[[dict[str, Any]], None]


LONG_SETTLE = ("start", "divergence", "solver_failure", "set_param", "recovery")  # unknowns back to prior


class TwinCore:
    def __init__(self, cfg: CoreConfig, mech: Mechanism, record: Recorder | None = None,
                 reference: bool = False) -> None:
        self.cfg, self.topics, self.record = cfg, Topics(cfg.base), record
        self.mech = mech
        self.reference = reference  # the per-sample Python path :mod:`.batchpath` is tested against
        self.view: BatchView | None = None
        self.batch_arrays: BatchArrays | None = None  # the batch kernel's arrays of the batch (batchpath)
        self.ahead: deque[tuple[Row, Any]] = deque()  # samples the batch kernel ran, not yet taken up
        check_names(cfg, mech)  # every [core] name the mechanism lacks, in one ConfigError
        self.tracker = make_tracker(cfg, mech, not reference)
        self.good_params: dict[str, float] = {}  # set_param values applied and run successfully
        self.read = plausible_limits(cfg, mech)  # channel → plausible |value| (guard.out_of_range)
        self.last_problem = ""  # the last rejected batch's or recovered failure's problem text
        self.good: tuple[Any, ...] | None = None  # the tracker's checkpoint after the last good batch
        self.failed_in_row = 0
        self.alarms = Alarms(cfg.alarms, cfg.alarm_max_events_per_minute)
        self.changes: ChangeAlarms | None = None  # built at the first batch (its rate tunes the CUSUM)
        self.nis: deque[tuple[float, int]] = deque()
        self.nis_sum = [0.0, 0.0]  # NIS and degrees of freedom summed over the window
        self.nis_bounds: dict[int, float] = {}  # χ² bound by total degrees of freedom
        self.pending: str | None = "start"
        self.started = False
        self.paused = False
        self.last_t: float | None = None
        self.prev_inputs: dict[str, float] = {}
        self.last_meas: dict[str, float] = {}
        self.last_seq = -1
        self.hold = 1  # the solver hold (samples per step) of the last batch with outputs
        self.out_seq: Counter[str] = Counter()
        self.next_latest: float | None = None
        self.latest: dict[str, Any] = {}
        self.batch_resyncs = 0  # (re)initialisations in the batch being processed
        self.batch_resync_events: list[dict[str, Any]] = []  # their rig time and reason
        self.stats: dict[str, Any] = {"resync": Counter(), "solver_failure": 0, "batches": 0, "samples": 0,
                                      "missing_channels": 0, "paused_drops": 0, "gap_predicted": 0,
                                      "invalid": Counter(), "recovered": Counter()}
        self.step_ms: deque[float] = deque(maxlen=500)
        self.diagnosis = Diagnosis(cfg)
        self.timebase = TimeBase(cfg)
        self.gaps = GapGuard(cfg, self.timebase.counts)

    # ------------------------------------------------------------------ batches
    def step(self, batch: SensorBatch, hold: int = 1) -> list[Out]:
        """Drive the model through one batch; the output messages."""
        if self.record:
            self.record({"k": "in", "hold": hold, "p": batch.raw})
        need = set(self.cfg.inputs) | {self.cfg.resync_angle, self.cfg.resync_speed}
        if not need <= set(batch.ch):
            self.stats["missing_channels"] += 1
            return []
        if self.paused:
            self.stats["paused_drops"] += 1
            return []
        bad = out_of_range(self.cfg, batch, self.read)
        if bad:
            self.stats["invalid"]["range"] += 1
            self.last_problem = bad
            return []
        t_start = time.perf_counter()
        try:
            with work_limit(batch_step_limit(self.cfg, batch)) as work:  # solver work bounded (guard.py)
                outs = self._run(batch, max(1, hold))
                self.good = self.tracker.checkpoint() if isinstance(self.tracker, EkfTracker) else None
                outs += self._diagnosed(batch)
                work.check()  # also when a diagnosis swallowed the refusal
            self.failed_in_row = 0
        except Exception as exc:  # never out of the core: the model returns to its last good state
            self._recover("work" if isinstance(exc, WorkLimitExceeded) else "step", exc)
            return []
        self.step_ms.append(1e3 * (time.perf_counter() - t_start))
        self.stats["batches"] += 1
        self.stats["samples"] += batch.n
        if self.record:
            for o in outs:
                self.record({"k": "out", "t": o.topic, "p": o.payload})
        return outs

    def _sample(self, batch: SensorBatch, k: int) -> dict[str, float]:
        if not self.reference:
            return batch_view(self, batch.ch).meas[k]
        return {c: v[k] for c, v in batch.ch.items()}

    def _inputs_at(self, batch: SensorBatch, k: int) -> dict[str, float]:
        if not self.reference:
            return batch_view(self, batch.ch).inputs[k]
        return {port: batch.ch[c][k] for c, port in self.cfg.inputs.items()}

    def _start(self, batch: SensorBatch, k: int, reason: str) -> None:
        """(Re)initialise the tracker from the measurements at sample k."""
        not_ahead(self)
        self.tracker.start(batch.time(k), self._sample(batch, k), self._inputs_at(batch, k), not self.started,
                           reason in ("divergence", "solver_failure"))
        self.started = True
        self.batch_resyncs += 1
        self.batch_resync_events.append({"t": batch.time(k), "reason": reason})
        self.nis.clear()
        self.nis_sum = [0.0, 0.0]
        self.gaps.pending = False
        self._rearm(batch.time(k), reason)
        self.stats["resync"][reason] += 1

    def _rearm(self, t: float, reason: str) -> None:
        """Change tests re-armed ``change_settle`` samples after a re-initialisation at ``t`` that
        kept the unknowns, ``divergence_window`` after one that put them back to their prior."""
        if self.changes is not None:
            short = reason not in LONG_SETTLE
            self.changes.reset(t if short else None, self.cfg.change_settle / self.changes.rate if short else None)

    def _run(self, batch: SensorBatch, hold: int) -> list[Out]:
        if self.changes is None:
            self.changes = ChangeAlarms(self.cfg, 1.0 / batch.dt, self.tracker, not self.reference)
        self.batch_resyncs, self.batch_resync_events = 0, []
        batch, cur = self._begin(batch)
        if cur < 0 and self.gaps.pending:  # the batch after a gap predicted through: every sample corrected,
            hold = 1  # whatever the hold (100 rad/s, 20 % bursty loss at hold 20: 3 false alarms in 30 s without)
        ends = list(range((batch.n - 1) % hold, batch.n, hold))
        rows: list[Row] = []
        events: list[dict[str, Any]] = []
        for b in ends:
            at = self._inputs_at(batch, b)
            meas = self._sample(batch, b)
            if not self.ahead and b == cur + 1 and hold == 1 and not self.reference:
                self.ahead = filter_run(self, batch, b, batch_view(self, batch.ch).inputs)
            if self.ahead:
                (row, inn), cur = self.ahead.popleft(), b
            elif b > cur:
                row, inn = self._advance(batch, cur, b, at, meas)
                cur = b
            else:
                row, inn = self.tracker.row(at, meas, None), None
            rows.append(row)
            t = batch.time(b)
            est = self.changes.observe(t, row["filter"]) if inn is not None else {}  # before the thresholds
            events += self.alarms.update(t, {"state": row["state"], "residual": row["residual"],
                                             "virtual": row["virtual"], "meas": meas, "estimate": est})
            inn = self.gaps.gated(inn)  # the first correction after a gap is no statistic
            if inn is not None:
                events += self._changes(t, inn)
                row["filter"].update(self.changes.statistics())
            if self._diverged(inn, batch, hold) or self.tracker.out_of_bounds(row):
                events += self.changes.diverged(t, inn)
                self._start(batch, b, "divergence" if inn is not None else "bound")
                self.changes.hold(t)  # a fault that keeps the filter diverging keeps its alarm raised
        events += self.changes.clear_quiet(batch.time(batch.n - 1))
        self.last_t = batch.time(batch.n - 1)
        self.prev_inputs = self._inputs_at(batch, batch.n - 1)
        self.gaps.history.add(batch)
        self.last_meas = self._sample(batch, batch.n - 1) | {"_t": self.last_t}
        self.last_seq = batch.seq
        self.diagnosis.request(events)
        return batch_messages(self, batch, hold, ends, rows, events, self.batch_resyncs)

    def _diagnosed(self, batch: SensorBatch) -> list[Out]:
        """The diagnosis of the last raised alarm once its window has passed (:mod:`.diagnosis`)."""
        self.diagnosis.keep(batch, self.good)
        body = self.diagnosis.due(batch.time(batch.n - 1))
        if body is None:
            return []
        return [numbered(self, "diagnosis", body, qos=1)]

    def _steps(self, batch: SensorBatch, cur: int, b: int) -> list[Step]:
        """The held input steps from sample ``cur`` (−1: the previous batch's last) to ``b``: each
        sample interval's hold (two steps for a first-order hold), also across a block of several
        samples (a coarser hold level: the model still sees every input sample; only the
        corrections and outputs are thinned)."""
        holds = {port: self.cfg.input_hold.get(c, "foh") for c, port in self.cfg.inputs.items()}
        t_prev = batch.time(cur) if cur >= 0 else self.last_t
        u_prev = self._inputs_at(batch, cur) if cur >= 0 else self.prev_inputs
        assert t_prev is not None
        steps: list[Step] = []
        for k in range(cur + 1, b + 1):
            u_k = self._inputs_at(batch, k)
            steps += interval_steps(t_prev, batch.time(k), u_prev, u_k, holds)
            t_prev, u_prev = batch.time(k), u_k
        return steps

    def _changes(self, t: float, inn: Any) -> list[dict[str, Any]]:
        """Change alarms at ``t``; an augmented unknown that changed is re-opened in the filter."""
        assert self.changes is not None
        events = self.changes.update(t, inn)
        if isinstance(self.tracker, EkfTracker):
            for name in self.changes.crossed:
                if name in self.changes.aug:
                    not_ahead(self)
                    self.tracker.est.release(name)
        return events

    def _diverged(self, inn: Any, batch: SensorBatch, hold: int) -> bool:
        """Mean NIS over the last ``divergence_window`` above its χ² bound (running sums)."""
        if inn is None:
            return False
        self.nis.append((inn.nis, len(inn.names)))
        self.nis_sum[0] += inn.nis
        self.nis_sum[1] += len(inn.names)
        n = max(1, round(self.cfg.divergence_window / (batch.dt * hold)))
        while len(self.nis) > n:
            v, k = self.nis.popleft()
            self.nis_sum[0] -= v
            self.nis_sum[1] -= k
        if len(self.nis) < n:
            return False
        dof = int(self.nis_sum[1])
        if dof not in self.nis_bounds:
            self.nis_bounds[dof] = nis_bound(dof, self.cfg.divergence_probability)
        return self.nis_sum[0] > self.nis_bounds[dof]

    def _begin(self, batch: SensorBatch) -> tuple[SensorBatch, int]:
        """The batch on the stream's time base (:mod:`.timebase`), initialised at its first sample
        when due (pending reason, a gap too long or too far to predict through); the index of the
        sample the model is at (−1: the previous batch's last sample, also across a short gap)."""
        place = self.timebase.place(batch)
        if place.t0 != batch.t0:
            batch = replace(batch, t0=place.t0)
        if place.shift:
            self._relabel(place.shift)
        if self.pending:
            self._start(batch, 0, self.pending)
            self.pending = None
            return batch, 0
        gap = batch.t0 - self.last_t if self.last_t is not None else math.inf
        if abs(gap - batch.dt) < 0.5 * batch.dt:
            return batch, -1
        if isinstance(self.tracker, EkfTracker) and self.gaps.predictable(gap):
            self.stats["gap_predicted"] += 1
            return batch, -1
        self._start(batch, 0, "gap")
        return batch, 0

    def _relabel(self, shift: float) -> None:
        """The rig's clock moved by ``shift`` s: rig times kept move with it; the motion continues."""
        self.last_t = None if self.last_t is None else self.last_t + shift
        self.next_latest = None if self.next_latest is None else self.next_latest + shift
        if "_t" in self.last_meas:
            self.last_meas["_t"] += shift
        self.tracker.shift_time(shift)
        self.gaps.history.shift(shift)

    def _advance(self, batch: SensorBatch, cur: int, b: int, at: dict[str, float], meas: dict[str, float]
                 ) -> tuple[Row, Any]:
        """One prediction and correction from sample ``cur`` to ``b`` (across a gap with the
        gap's process noise: the inputs are unknown in between, :mod:`.gaps`)."""
        gap = batch.t0 - self.last_t if cur < 0 and self.last_t is not None else 0.0
        try:
            row, inn = self.tracker.step(self._steps(batch, cur, b), at, meas,
                                         self.gaps.noise(gap) if gap > 1.5 * batch.dt else None)
        except (SolverFailure, MbsdError, FloatingPointError, np.linalg.LinAlgError):
            self.stats["solver_failure"] += 1
            self._start(batch, b, "solver_failure")
            return self.tracker.row(at, meas, None), None
        tr = self.tracker
        if self.gaps.pending and isinstance(tr, EkfTracker) and self.gaps.failed(inn, tr.gap_spread()):
            tr.undo_gap_correction()
            self._start(batch, b, "gap")
            return self.tracker.row(at, meas, None), None
        return row, inn

    # ----------------------------------------------------------------- commands
    def command(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """Apply a command; the reply body (``ok``, ``detail``)."""
        if self.record:
            self.record({"k": "cmd", "name": name, "args": args})
        try:
            detail = self._command(name, args)
            if self.good is not None and isinstance(self.tracker, EkfTracker):
                self.good = self.tracker.checkpoint()  # the command's changes are part of the good state
            return {"cmd": name, "ok": True, "detail": detail}
        except Exception as exc:  # nothing raises out of a command
            return {"cmd": name, "ok": False, "detail": problem_text(exc)}

    def _command(self, name: str, args: dict[str, Any]) -> str:
        if name == "reset":
            return self._guarded("reset", lambda: self._resync_latest("reset"))
        if name == "set_param":
            pname, value = args["name"], args["value"]
            if not isinstance(pname, str) or isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError("set_param needs {\"name\": str, \"value\": number}")
            check_param(self.cfg, self.mech, pname, float(value))

            def apply() -> str:
                self.tracker.set_param(pname, float(value))
                return f"{pname} = {float(value)!r}; " + self._resync_latest("set_param")
            detail = self._guarded(f"set_param {pname} = {float(value)!r}", apply)
            self.good_params[pname] = float(value)
            return detail
        if name == "pause":
            self.paused = True
            return "paused: sensor batches are dropped until resume"
        if name == "resume":
            self.paused, self.pending = False, "resume"
            return "resumed: re-synchronising at the next batch"
        raise ValueError(f"unknown command {name!r}; commands: reset, set_param, pause, resume")

    def _guarded(self, what: str, apply: Callable[[], str]) -> str:
        """Run a command's change of the model; when it fails (other than an unknown name, which
        changes nothing) the model is restored and the problem raised with a note saying so."""
        try:
            return apply()
        except PortError:
            raise
        except Exception as exc:
            self._recover("command", exc)
            raise ValueError(f"{what} failed: {problem_text(exc)}; the model was restored with the last good "
                             "parameters and re-initialises at the next batch") from exc

    def _recover(self, where: str, exc: BaseException) -> None:
        """Return the tracker to its checkpoint after the last good batch (filter state x, P and the
        Simulator's state; the next batch predicts through the failed one like through a gap). When
        there is none (no batch yet, open loop), or the failure repeats, rebuild it from the mechanism
        file with the last good parameters and re-initialise at the next batch (``resync.recovery``)."""
        self.stats["recovered"][where] += 1
        self.ahead.clear()  # samples the batch kernel ran in the failed batch
        self.last_problem = problem_text(exc)
        self.failed_in_row += 1
        if self.good is not None and self.failed_in_row == 1:
            try:
                self.tracker.restore(self.good)  # type: ignore[union-attr]
                return
            except Exception as again:
                self.last_problem += f"; restoring the checkpoint failed too: {problem_text(again)}"
        self.tracker = make_tracker(self.cfg, self.mech, not self.reference)
        for name, value in self.good_params.items():
            self.tracker.set_param(name, value)
        self.nis.clear()
        self.nis_sum = [0.0, 0.0]
        self.gaps.pending = False
        if self.changes is not None:
            self.changes.reset()
        self.pending = "recovery"

    def rig_restart(self) -> None:
        """A new rig session (birth with another session id): re-synchronise at its first batch."""
        if self.record:
            self.record({"k": "restart"})
        self.pending = "rig_restart"
        self.timebase.reset()

    def _resync_latest(self, reason: str) -> str:
        if not self.last_meas:
            self.pending = reason
            return "no measurement yet: re-synchronising at the next batch"
        m = self.last_meas
        self.tracker.start(m["_t"], m, self.prev_inputs, False)
        self.nis.clear()
        self.nis_sum = [0.0, 0.0]
        self.gaps.pending = False
        self._rearm(m["_t"], reason)
        self.stats["resync"][reason] += 1
        return f"re-synchronised at rig time {m['_t']!r} (seq {self.last_seq})"

