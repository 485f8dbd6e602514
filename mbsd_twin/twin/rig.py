"""A synthetic slider-crank rig: the engine's model with a hidden parameter mismatch, sensor noise
and injected faults, streamed as sensor messages of the contract.

The trajectory is computed with the engine (a :class:`~mbsd_twin.Simulator` on its compiled DOP853
path, advanced knot by knot, the motor torque held per knot); samples between knots are cubic
Hermite interpolated (angle from angle and speed, speed from speed and acceleration, forces
linearly). The torque steps at the knots, and so do the acceleration and the bearing force: each
interval is interpolated from the values just after its start knot (new torque) to those just
before its end knot (old torque), so the samples are consistent with the torque of their interval
(the ``tau_m`` of :meth:`Trajectory.samples` is the true torque behind the motion).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..dynamics import SolverOptions
from ..model import Mechanism
from ..ports import apply_parameters
from ..simulator import Simulator
from .protocol import encode

FAULT_KINDS = ("drop", "duplicate", "reorder", "late", "json", "types", "nan", "missing", "oversize", "version")
INVALID_REASON = {"json": "json", "types": "schema", "nan": "non_finite", "missing": "schema",
                  "oversize": "oversize", "version": "version"}


@dataclass(frozen=True)
class RigConfig:
    asset: str = "sc-01"
    prefix: str = "dt/v1"
    rate: float = 1000.0  # samples/s
    batch: int = 20  # samples per message
    mismatch: dict[str, float] = field(default_factory=lambda: {"piston.mass": 1.53})
    noise: dict[str, float] = field(default_factory=lambda: {
        "theta": 2e-3, "omega": 0.01, "tau_m": 0.002, "f_x": 0.5, "f_y": 0.5})
    speed: float = 10.0  # rad/s: the motor's speed set-point
    speed_amp: float = 2.0  # rad/s: set-point modulation amplitude
    speed_freq: float = 0.5  # Hz
    gain: float = 0.5  # N.m.s/rad: speed controller gain (plus friction feed-forward)
    knot: float = 0.01  # s: torque held and trajectory computed per knot
    seed: int = 0


class Trajectory:
    """The rig's true signals at the sample rate (time from 0)."""

    def __init__(self, mech: Mechanism, cfg: RigConfig) -> None:
        self.cfg = cfg
        hidden = apply_parameters(mech, cfg.mismatch) if cfg.mismatch else mech
        self.sim = Simulator(hidden, SolverOptions(method="DOP853", rtol=1e-8, atol=1e-10))
        self.friction = hidden.joint("main_bearing").viscous_friction
        self.knots: list[dict[str, float]] = [self._knot(0.0)]

    def _tau(self, t: float, omega: float) -> float:
        """A speed controller: friction feed-forward plus proportional feedback (held per knot)."""
        c = self.cfg
        ref = c.speed + c.speed_amp * math.sin(2 * math.pi * c.speed_freq * t)
        return self.friction * ref + c.gain * (ref - omega)

    def _knot(self, t: float) -> dict[str, float]:
        """State at knot time ``t``: the left limits (torque of the interval before) and, after the
        new torque is applied, the right limits ``*_r`` of the quantities it steps."""
        o = self.sim.outputs()
        k = {"t": t, "theta": o["crank.theta"], "omega": o["crank.omega"], "alpha": o["crank.alpha"],
             "f_x": o["main_bearing.fx"], "f_y": o["main_bearing.fy"], "tau": self._tau(t, o["crank.omega"])}
        self.sim.set_input("motor_torque", k["tau"])
        o = self.sim.outputs()
        return k | {"alpha_r": o["crank.alpha"], "f_x_r": o["main_bearing.fx"], "f_y_r": o["main_bearing.fy"]}

    def _extend(self, t_end: float) -> None:
        while self.knots[-1]["t"] < t_end:
            k = self.knots[-1]
            self.sim.set_input("motor_torque", k["tau"])
            t = len(self.knots) * self.cfg.knot
            self.sim.advance_to(t)
            self.knots.append(self._knot(t))

    def with_rate(self, rate: float, batch: int) -> Trajectory:
        """The same motion (shared knots) sampled at another rate and batch size."""
        other = copy.copy(self)
        other.cfg = dataclasses.replace(self.cfg, rate=rate, batch=batch)
        return other

    def samples(self, k0: int, n: int) -> dict[str, np.ndarray]:
        """True values of samples k0 .. k0+n−1 (computing knots as needed)."""
        c = self.cfg
        t = (k0 + np.arange(n)) / c.rate
        self._extend(float(t[-1]) + c.knot)
        i = np.minimum((t / c.knot + 1e-9).astype(int), len(self.knots) - 2)
        a = {key: np.array([self.knots[j][key] for j in i]) for key in self.knots[0]}
        b = {key: np.array([self.knots[j + 1][key] for j in i]) for key in self.knots[0]}
        h = c.knot
        s = (t - a["t"]) / h

        def hermite(y0: Any, y1: Any, d0: Any, d1: Any) -> Any:
            h00, h10, h01, h11 = 2 * s**3 - 3 * s**2 + 1, s**3 - 2 * s**2 + s, -2 * s**3 + 3 * s**2, s**3 - s**2
            return h00 * y0 + h10 * h * d0 + h01 * y1 + h11 * h * d1
        return {"theta": hermite(a["theta"], b["theta"], a["omega"], b["omega"]),
                "omega": hermite(a["omega"], b["omega"], a["alpha_r"], b["alpha"]),
                "tau_m": a["tau"], "f_x": a["f_x_r"] + s * (b["f_x"] - a["f_x_r"]),
                "f_y": a["f_y_r"] + s * (b["f_y"] - a["f_y_r"])}


class MessageSource:
    """Noisy sensor messages in seq order: ``message(i)`` is batch i (seq ``seq0 + i``)."""

    def __init__(self, traj: Trajectory, epoch: float, seq0: int = 0) -> None:
        self.traj, self.epoch, self.seq0 = traj, epoch, seq0
        self.rng = np.random.default_rng(traj.cfg.seed)

    def message(self, i: int) -> dict[str, Any]:
        c = self.traj.cfg
        true = self.traj.samples(i * c.batch, c.batch)
        ch = {name: [float(x) for x in v + self.rng.normal(0.0, c.noise.get(name, 0.0), len(v))]
              for name, v in true.items()}
        return {"v": 1, "asset": c.asset, "seq": self.seq0 + i, "t0": self.epoch + i * c.batch / c.rate,
                "dt": 1.0 / c.rate, "n": c.batch, "ch": ch}


def _invalid(kind: str, msg: dict[str, Any]) -> bytes:
    m = json.loads(json.dumps(msg))
    if kind == "json":
        return encode(m).encode()[:-7]
    if kind == "types":
        m["ch"]["theta"][0] = "0.1"
    elif kind == "nan":
        m["ch"]["omega"][1] = math.nan
        return json.dumps(m).encode()  # allow_nan: the literal NaN
    elif kind == "missing":
        del m["t0"]
    elif kind == "oversize":
        m["pad"] = "x" * (1 << 20)
    elif kind == "version":
        m["v"] = 99
    return encode(m).encode()


def plan_faults(n_messages: int, rate: float, window: int, seed: int) -> dict[int, str]:
    """Message index → fault kind, spaced so that faults never interact (>= window + 6 apart)."""
    rng = random.Random(seed)
    gap = window + 6
    out: dict[int, str] = {}
    i = gap
    while i < n_messages - gap:
        if rng.random() < rate * gap:
            out[i] = FAULT_KINDS[len(out) % len(FAULT_KINDS)] if len(out) < len(FAULT_KINDS) \
                else rng.choice(FAULT_KINDS)
            i += gap
        else:
            i += 1
    return out


def expected_counts(plan: dict[int, str]) -> dict[str, Any]:
    kinds = list(plan.values())
    invalid: dict[str, int] = {}
    for k in kinds:
        if k in INVALID_REASON:
            invalid[INVALID_REASON[k]] = invalid.get(INVALID_REASON[k], 0) + 1
    return {"gap": kinds.count("drop") + kinds.count("late"), "late": kinds.count("late"),
            "duplicate": kinds.count("duplicate"), "reordered": kinds.count("reorder"), "invalid": invalid}


def schedule(n_messages: int, plan: dict[int, str], window: int) -> list[tuple[int, str]]:
    """The send order: (message index, how) with how in ok / dup / a fault kind for invalid extras."""
    order: list[tuple[int, str]] = []
    late: dict[int, int] = {}  # position to insert at → index
    skip: set[int] = set()
    for i in range(n_messages):
        if i in skip:
            continue
        kind = plan.get(i)
        if kind == "drop":
            pass
        elif kind == "duplicate":
            order += [(i, "ok"), (i, "dup")]
        elif kind == "reorder":
            order += [(i + 1, "ok"), (i, "ok")]
            skip.add(i + 1)
        elif kind == "late":
            late[i + window + 3] = i
        elif kind in INVALID_REASON:
            order += [(i, kind), (i, "ok")]
        else:
            order.append((i, "ok"))
        if i in late:
            order.append((late.pop(i), "ok"))
    return order


def payload(src: MessageSource, i: int, how: str, cache: dict[int, dict[str, Any]]) -> bytes:
    if i not in cache:
        cache.clear() if len(cache) > 64 else None
        cache[i] = src.message(i)
    msg = cache[i]
    return encode(msg).encode() if how in ("ok", "dup") else _invalid(how, msg)
