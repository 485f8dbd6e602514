"""The broker-free heart of the twin: sensor batches and commands in, output messages out.

Deterministic: the same batches (with the same ``hold``) and commands give bit-identical output
texts, which is what recording and replay rely on. Wall-clock figures (solver time) are kept in
``stats`` only, never in the outputs.

Open loop: sample k's measured inputs are held (zero-order hold) over [t_k, t_k+1). With ``hold``
h > 1 the solver advances h samples at a time with the inputs averaged over the block and the
outputs are produced at every h-th sample (aligned to the batch's last sample) — the degraded
mode of docs/mqtt-contract.md.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dynamics import SolverFailure, SolverOptions
from ..errors import MbsdError
from ..model import Mechanism
from .alarms import Alarms
from .config import CoreConfig
from .estimator import TorqueEstimator
from .model import ModelRunner, wrap_angle
from .protocol import VERSION, SensorBatch, Topics, encode


@dataclass(frozen=True)
class Out:
    topic: str
    payload: str
    qos: int = 0
    retain: bool = False


Recorder = Callable[[dict[str, Any]], None]


class TwinCore:
    def __init__(self, cfg: CoreConfig, mech: Mechanism, record: Recorder | None = None) -> None:
        self.cfg, self.topics, self.record = cfg, Topics(cfg.base), record
        body = cfg.compare[cfg.resync_angle].split(".")[0]
        opts = SolverOptions(method=cfg.solver_method, rtol=cfg.solver_rtol, atol=cfg.solver_atol)
        self.runner = ModelRunner(mech, body, opts)
        self.runner.resync(0.0, mech.body(body).angle, mech.body(body).omega)  # validates the model
        outs = set(self.runner.outputs())
        missing = [p for p in (*cfg.compare.values(), *cfg.state_extra, *cfg.virtual) if p not in outs]
        if missing:
            raise ValueError(f"unknown model outputs in the channel mapping: {', '.join(missing)}")
        self.virtual = cfg.virtual or tuple(n for n in sorted(outs) if n.endswith((".fx", ".fy", ".mz")))
        self.estimator: TorqueEstimator | None = None
        self.estimate_name = f"{cfg.torque_estimate}.estimate"
        if cfg.torque_estimate:
            self.estimator = TorqueEstimator(mech, body, cfg.torque_estimate, cfg.estimate_window,
                                             cfg.resync_angle, cfg.resync_speed, cfg.inputs)
        self.alarms = Alarms(cfg.alarms, cfg.alarm_max_events_per_minute)
        self.pending: str | None = "start"
        self.paused = False
        self.last_t: float | None = None
        self.prev_inputs: dict[str, float] = {}
        self.last_meas: dict[str, float] = {}
        self.last_seq = -1
        self.out_seq: Counter[str] = Counter()
        self.next_latest: float | None = None
        self.latest: dict[str, Any] = {}
        self.stats: dict[str, Any] = {"resync": Counter(), "solver_failure": 0, "batches": 0, "samples": 0,
                                      "missing_channels": 0, "paused_drops": 0, "estimate_failure": 0}
        self.step_ms: deque[float] = deque(maxlen=500)

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
        t_start = time.perf_counter()
        outs = self._run(batch, max(1, hold))
        self.step_ms.append(1e3 * (time.perf_counter() - t_start))
        self.stats["batches"] += 1
        self.stats["samples"] += batch.n
        if self.record:
            for o in outs:
                self.record({"k": "out", "t": o.topic, "p": o.payload})
        return outs

    def _sample(self, batch: SensorBatch, k: int) -> dict[str, float]:
        return {c: v[k] for c, v in batch.ch.items()}

    def _resync(self, batch: SensorBatch, k: int, reason: str) -> None:
        """Re-initialise at sample k from least-squares fits over the batch (angle: quadratic,
        speed: linear), which average the sensor noise out of the new initial state."""
        tk = np.arange(batch.n, dtype=float) - k
        theta = np.unwrap(np.asarray(batch.ch[self.cfg.resync_angle]))
        omega = np.asarray(batch.ch[self.cfg.resync_speed])
        angle = float(np.polyfit(tk, theta, 2)[-1]) if batch.n >= 5 else float(theta[k])
        speed = float(np.polyfit(tk, omega, 1)[-1]) if batch.n >= 3 else float(omega[k])
        self.runner.resync(batch.time(k), angle, speed)
        self.stats["resync"][reason] += 1

    def _run(self, batch: SensorBatch, hold: int) -> list[Out]:
        cur = self._begin(batch)
        ends = list(range((batch.n - 1) % hold, batch.n, hold))
        estimates = self._estimate(batch, ends)
        ext = {c: [self.prev_inputs.get(c, v[0]), *v] for c, v in batch.ch.items() if c in self.cfg.inputs}
        rows: list[tuple[dict[str, float], dict[str, float], dict[str, float]]] = []
        events: list[dict[str, Any]] = []
        resyncs = 0
        for i, b in enumerate(ends):
            applied = {port: math.fsum(ext[c][cur + 1:b + 1]) / (b - cur) if b > cur else ext[c][b + 1]
                       for c, port in self.cfg.inputs.items()}
            if b > cur:
                self._advance(batch, b, applied)
                cur = b
            row = self._compare(batch, b, applied)
            if estimates is not None:
                row[2][self.estimate_name] = estimates[i]
            rows.append(row)
            events += self.alarms.update(batch.time(b), {"state": row[0], "residual": row[1], "virtual": row[2],
                                                         "meas": self._sample(batch, b)})
            if any(abs(row[1][c]) > bound for c, bound in self.cfg.resync_bounds.items() if c in row[1]):
                self._resync(batch, b, "bound")
                resyncs += 1
        self.last_t = batch.time(batch.n - 1)
        self.prev_inputs = {c: v[-1] for c, v in batch.ch.items() if c in self.cfg.inputs}
        self.last_meas = self._sample(batch, batch.n - 1) | {"_t": self.last_t}
        self.last_seq = batch.seq
        return self._messages(batch, hold, ends, rows, events, resyncs)

    def _begin(self, batch: SensorBatch) -> int:
        """Re-synchronise at the batch's first sample when due (pending reason, discontinuity); the
        index of the sample the model state is at (−1: the end of the previous batch)."""
        contiguous = self.last_t is not None and abs(batch.t0 - self.last_t - batch.dt) < 0.5 * batch.dt
        if not contiguous and self.estimator is not None:
            self.estimator.reset()
        if self.pending or not contiguous:
            self._resync(batch, 0, self.pending or "gap")
            self.pending = None
            return 0
        return -1

    def _advance(self, batch: SensorBatch, b: int, applied: dict[str, float]) -> None:
        try:
            self.runner.advance(batch.time(b), applied)
        except (SolverFailure, MbsdError, FloatingPointError):
            self.stats["solver_failure"] += 1
            self._resync(batch, b, "solver_failure")

    def _estimate(self, batch: SensorBatch, ends: list[int]) -> list[float] | None:
        """The torque estimate at the output samples (None, counted, when it cannot be computed)."""
        if self.estimator is None:
            return None
        try:
            return self.estimator.estimate(batch, ends, self.runner.outputs())
        except (MbsdError, FloatingPointError, np.linalg.LinAlgError):
            self.stats["estimate_failure"] += 1
            self.estimator.reset()
            return None

    def _compare(self, batch: SensorBatch, k: int, applied: dict[str, float]
                 ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        o = self.runner.outputs()
        state = {c: o[p] for c, p in self.cfg.compare.items()} | {p: o[p] for p in self.cfg.state_extra}
        resid = {}
        for c, p in self.cfg.compare.items():
            if c in batch.ch:
                r = batch.ch[c][k] - o[p]
                resid[c] = wrap_angle(r) if p.endswith(".theta") else r
        virtual = {p: o[p] for p in self.virtual} | applied
        return state, resid, virtual

    def _msg(self, leaf: str, batch: SensorBatch, hold: int, ends: list[int], ch: dict[str, list[float]],
             **extra: Any) -> Out:
        self.out_seq[leaf] += 1
        body = {"v": VERSION, "asset": self.cfg.asset, "seq": self.out_seq[leaf],
                "src_seq": [batch.seq, batch.seq], "t0": batch.time(ends[0]), "dt": batch.dt * hold,
                "n": len(ends), "ch": ch, **extra}
        return Out(self.topics.twin(leaf), encode(body))

    def _messages(self, batch: SensorBatch, hold: int, ends: list[int], rows: list[Any],
                  events: list[dict[str, Any]], resyncs: int) -> list[Out]:
        def columns(i: int) -> dict[str, list[float]]:
            return {k: [r[i][k] for r in rows] for k in rows[0][i]}
        outs = [self._msg("state", batch, hold, ends, columns(0), stride=hold),
                self._msg("residuals", batch, hold, ends, columns(1), stride=hold, resyncs=resyncs),
                self._msg("virtual", batch, hold, ends, columns(2), stride=hold)]
        for ev in events:
            self.out_seq["alarms"] += 1
            outs.append(Out(self.topics.twin("alarms"), encode({"v": VERSION, "asset": self.cfg.asset,
                                                                "seq": self.out_seq["alarms"], **ev}), qos=1))
        t_last = batch.time(batch.n - 1)
        self.latest = {"v": VERSION, "asset": self.cfg.asset, "t": t_last, "src_seq": batch.seq,
                       "state": rows[-1][0], "residuals": rows[-1][1], "virtual": rows[-1][2],
                       "alarms_active": self.alarms.active()}
        if self.next_latest is None or t_last >= self.next_latest:
            self.next_latest = t_last + self.cfg.latest_interval
            outs.append(Out(self.topics.twin("latest"), encode(self.latest), qos=1, retain=True))
        return outs

    # ----------------------------------------------------------------- commands
    def command(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """Apply a command; the reply body (``ok``, ``detail``)."""
        if self.record:
            self.record({"k": "cmd", "name": name, "args": args})
        try:
            detail = self._command(name, args)
            return {"cmd": name, "ok": True, "detail": detail}
        except (ValueError, TypeError, KeyError, MbsdError) as exc:
            return {"cmd": name, "ok": False, "detail": str(exc).splitlines()[0][:200]}

    def _command(self, name: str, args: dict[str, Any]) -> str:
        if name == "reset":
            return self._resync_latest("reset")
        if name == "set_param":
            pname, value = args["name"], args["value"]
            if not isinstance(pname, str) or isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError("set_param needs {\"name\": str, \"value\": number}")
            self.runner.set_param(pname, float(value))
            if self.estimator is not None and not pname.startswith("solver."):
                self.estimator.rebuild(self.runner.mechanism())
            return f"{pname} = {float(value)!r}; " + self._resync_latest("set_param")
        if name == "pause":
            self.paused = True
            return "paused: sensor batches are dropped until resume"
        if name == "resume":
            self.paused, self.pending = False, "resume"
            return "resumed: re-synchronising at the next batch"
        raise ValueError(f"unknown command {name!r}; commands: reset, set_param, pause, resume")

    def rig_restart(self) -> None:
        """A new rig session (birth with another session id): re-synchronise at its first batch."""
        if self.record:
            self.record({"k": "restart"})
        self.pending = "rig_restart"

    def _resync_latest(self, reason: str) -> str:
        if not self.last_meas:
            self.pending = reason
            return "no measurement yet: re-synchronising at the next batch"
        m = self.last_meas
        self.runner.resync(m["_t"], m[self.cfg.resync_angle], m[self.cfg.resync_speed])
        self.stats["resync"][reason] += 1
        return f"re-synchronised at rig time {m['_t']!r} (seq {self.last_seq})"
