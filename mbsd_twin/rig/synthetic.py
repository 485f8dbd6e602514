"""A synthetic rig of any mechanism: the engine's model with a hidden parameter mismatch, faults
injected at known times (:mod:`.faults`) and sensor noise, streamed as sensor messages of the
contract. ``RigConfig.channels`` says which model outputs (or input ports) are published under which
channel names; the defaults are the packaged slider crank's (:mod:`.file` reads a rig TOML file).

The driven input (``drive``, default ``motor_torque``; none for a mechanism without inputs) is
continuous: a command is computed every ``knot`` s (a multiple of the sample period) — a speed
controller on the output ``drive_speed`` (default ``crank.omega``), or with ``drive_speed = ""`` the
open-loop torque ``torque + torque_amp·sin(2π·speed_freq·t)`` — and the actuator ramps linearly from
the previous command to the new one across the knot interval (rate-limited). The hidden
:class:`~mbsd_twin.Simulator` (compiled DOP853) is integrated sample by sample, ``substeps``
sub-intervals per sample, each driven by the exact mean of the ramp over it (so the impulse is
exact); the true state and outputs are recorded at every sample time t_k = k/rate, with the inputs
set to their values at that instant (``tau_m`` is the ramp's value there). Model faults rebuild
the hidden Simulator at their onset sample and continue from the same state; sensor faults act on
the measured values; noise is added last (:class:`MessageSource`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model.model import Mechanism
from ..simulation.ports import model_parameters
from ..simulation.simulator import Simulator
from ..solvers.dynamics import SolverOptions
from .faults import (
    CHANNELS,
    INPUT_KINDS,
    LOAD_KINDS,
    MODEL_KINDS,
    SENSOR_KINDS,
    RigFault,
    check_faults,
    fault_input,
    hidden_mechanism,
)

__all__ = ["MessageSource", "RigConfig", "Trajectory", "fault_manifest", "stream"]


@dataclass(frozen=True)
class RigConfig:
    """The synthetic rig (docs/connect-your-rig.md, "A synthetic rig for your mechanism"); the
    defaults are the packaged slider crank's rig."""

    asset: str = "sc-01"
    prefix: str = "dt/v1"
    rate: float = 1000.0  # samples/s
    batch: int = 20  # samples per message
    channels: dict[str, str] = field(default_factory=lambda: dict(CHANNELS))  # channel → model output or input
    mismatch: dict[str, float] = field(default_factory=lambda: {"piston.mass": 1.53})
    noise: dict[str, float] = field(default_factory=lambda: {
        "theta": 1e-3, "omega": 0.01, "tau_m": 0.002, "f_x": 0.5, "f_y": 0.5})
    drive: str = "motor_torque"  # the input port the rig's controller writes; "": none (a free mechanism)
    drive_speed: str = "crank.omega"  # output the speed controller follows; "": open-loop torque
    friction_joint: str = "main_bearing"  # its viscous friction is fed forward by the speed controller; "": none
    speed: float = 10.0  # rad/s: the motor's speed set-point
    speed_amp: float = 2.0  # rad/s: set-point modulation amplitude
    speed_freq: float = 0.5  # Hz: set-point (or open-loop torque) modulation frequency
    gain: float = 0.5  # N.m.s/rad: speed controller gain (plus friction feed-forward)
    torque: float = 0.0  # open loop (drive_speed ""): mean drive value [the drive's unit]
    torque_amp: float = 1.0  # open loop: modulation amplitude [the drive's unit]
    knot: float = 0.01  # s: controller period (a multiple of the sample period); torque ramps across it
    seed: int = 0
    faults: tuple[RigFault, ...] = ()
    substeps: int = 4  # integration sub-intervals per sample (>= 2 to match the ramp's first moment)
    rtol: float = 1e-9  # hidden Simulator's DOP853 tolerances
    atol: float = 1e-11

    def samples_per_knot(self) -> int:
        spk = self.knot * self.rate
        if not (spk >= 1 - 1e-9 and abs(spk - round(spk)) < 1e-6):
            raise ValueError(f"RigConfig.knot = {self.knot!r} s must be a whole number (>= 1) of sample "
                             f"periods 1/rate = {1 / self.rate!r} s")
        if self.substeps < 1:
            raise ValueError(f"RigConfig.substeps must be >= 1, got {self.substeps!r}")
        return round(spk)

    def check(self, mech: Mechanism, outputs: list[str]) -> None:
        """ValueError naming the first channel, noise entry, drive or fault that ``mech`` (with its
        output ports ``outputs``) cannot serve."""
        if self.drive and self.drive not in mech.input_names:
            raise ValueError(f"rig drive {self.drive!r}: no such input port of {mech.name!r} (input ports: "
                             f"{', '.join(mech.input_names) or 'none'}; use drive = \"\" for none)")
        known = set(outputs) | ({self.drive} if self.drive else set())
        for ch, port in self.channels.items():
            if port not in known:
                raise ValueError(f"rig channel {ch!r} = {port!r}: neither an output of {mech.name!r} nor the "
                                 f"driven input (drive = {self.drive!r}); outputs: {', '.join(outputs[:12])}, ...")
        for ch in self.noise:
            if ch not in self.channels:
                raise ValueError(f"rig noise.{ch}: not a rig channel; channels are: {', '.join(self.channels)}")
        if self.drive and self.drive_speed and self.drive_speed not in known:
            raise ValueError(f"rig drive_speed {self.drive_speed!r}: no such model output of {mech.name!r}")
        if self.friction_joint and self.friction_joint not in [j.name for j in mech.joints]:
            raise ValueError(f"rig friction_joint {self.friction_joint!r}: no such joint in {mech.name!r}")
        check_faults(mech, self.faults, self.channels)


class _Run:
    """The integration shared by every :meth:`Trajectory.with_rate` copy at the same rate."""

    def __init__(self, mech: Mechanism, cfg: RigConfig) -> None:
        self.base, self.cfg, self.spk = mech, cfg, cfg.samples_per_knot()
        self.options = SolverOptions(method="DOP853", rtol=cfg.rtol, atol=cfg.atol)
        known = model_parameters(mech)
        for name in cfg.mismatch:
            if name not in known:
                raise ValueError(f"rig mismatch {name!r}: no such parameter of {mech.name!r} (e.g. "
                                 f"{', '.join(list(known)[:6])}; an empty mismatch: the rig is the model)")
        self.params, self.active = dict(cfg.mismatch), set[int]()
        self.param_log: list[tuple[int, dict[str, float]]] = [(0, dict(self.params))]
        self.sim = Simulator(hidden_mechanism(mech, self.params, cfg.faults, self.active), self.options)
        self.names = self.sim.output_names()
        cfg.check(mech, self.names)
        joint = self.sim.mechanism.joint(cfg.friction_joint) if cfg.friction_joint else None
        self.friction = joint.viscous_friction if joint is not None else 0.0
        self.biases = [(f.sample(cfg.rate), f.target, f.size) for f in cfg.faults if f.kind in INPUT_KINDS]
        self.rows: list[np.ndarray] = []  # per sample: outputs, drive value, fault inputs
        self.ramp = (0.0, math.nan, math.nan)  # (knot time, torque there, command reached a knot later)
        self.onsets = {i: f.sample(cfg.rate) for i, f in enumerate(cfg.faults) if f.kind in MODEL_KINDS}

    def command(self, t: float) -> float:
        """The speed controller (friction feed-forward plus proportional feedback) or, without
        ``drive_speed``, the open-loop torque."""
        c = self.cfg
        wave = math.sin(2 * math.pi * c.speed_freq * t)
        if not c.drive_speed:
            return c.torque + c.torque_amp * wave
        ref = c.speed + c.speed_amp * wave
        return self.friction * ref + c.gain * (ref - self.sim.get_output(c.drive_speed))

    def tau(self, t: float) -> float:
        t0, a, b = self.ramp
        return a + (b - a) * (t - t0) / self.cfg.knot

    def omega_rel(self, joint: str) -> float:
        b0, b1 = self.sim.mechanism.joint(joint).bodies
        return sum(s * self.sim.get_output(f"{b}.omega") for s, b in ((-1.0, b0), (1.0, b1)) if b != "ground")

    def fault_inputs(self, a: float, b: float | None) -> list[float]:
        """Each fault's load input: at instant ``a`` (``b`` None) or over the sub-step [a, b]."""
        out = []
        for i, f in enumerate(self.cfg.faults):
            if i not in self.active or f.kind not in LOAD_KINDS:
                out.append(0.0)
            elif f.kind == "friction":
                out.append(f.friction_torque(self.omega_rel(f.target), a if b is None else 0.5 * (a + b)))
            else:
                out.append(f.pulse_at(a) if b is None else f.pulse_mean(a, b))
        return out

    def set_inputs(self, k: int, tau: float, faults: list[float]) -> None:
        """The inputs over sample k's interval: the drive (plus the input biases in effect, which the
        drive's channel does not see) and the fault loads."""
        ports = {self.cfg.drive: tau} if self.cfg.drive else {}
        for k_on, port, size in self.biases:
            if k >= k_on:
                ports[port] = ports.get(port, 0.0) + size
        for port, value in ports.items():
            self.sim.set_input(port, value)
        for i in self.active:
            if self.cfg.faults[i].kind in LOAD_KINDS:
                self.sim.set_input(fault_input(i), faults[i])

    def apply_onsets(self, k: int, t: float) -> None:
        """Model faults starting at sample ``k``: the hidden Simulator continues from the same state."""
        new = {i for i, k_on in self.onsets.items() if k_on == k}
        if not new:
            return
        for i in sorted(new):
            f = self.cfg.faults[i]
            if f.kind == "mass":
                value = self.params.get(f.target, model_parameters(self.base)[f.target][0].value)
                self.params[f.target] = value * f.size if f.scale else f.size
        self.active |= new
        self.param_log.append((k, dict(self.params)))
        old = self.sim
        pos = {f"{b}.{c}": old.get_output(f"{b}.{c}") for b in old.system.body_names for c in ("x", "y", "theta")}
        vel = {f"{b}.{c}": old.get_output(f"{b}.{c}") for b in old.system.body_names for c in ("vx", "vy", "omega")}
        self.sim = Simulator(hidden_mechanism(self.base, self.params, self.cfg.faults, self.active), self.options, t0=t)
        self.sim.set_configuration(pos, vel, time=t)

    def extend(self, n: int) -> None:
        """Integrate until samples 0 .. n−1 are recorded."""
        c = self.cfg
        while len(self.rows) < n:
            k = len(self.rows)
            t = k / c.rate
            self.apply_onsets(k, t)
            if k % self.spk == 0:
                cmd = self.command(t) if c.drive else 0.0
                start = cmd if math.isnan(self.ramp[2]) else self.ramp[2]
                self.ramp = (t, start, cmd)
            tau, faults = self.tau(t), self.fault_inputs(t, None)
            self.set_inputs(k, tau, faults)
            self.rows.append(np.concatenate([self.sim.output_vector(), [tau], faults]))
            self.advance_sample(k)

    def advance_sample(self, k: int) -> None:
        """Sample k → k+1 in ``substeps`` sub-intervals. The torque of sub-interval i is the ramp at
        its midpoint m_i stretched about the sample's midpoint m: τ(m) + γ·τ'·(m_i − m) with
        γ = N²/(N² − 1), so that over the sample both the impulse ∫τ dt and its first moment
        ∫(t_end − t)·τ dt equal the ramp's (the velocity and the position the ramp gives, to leading
        order); the fault loads get their exact mean over each sub-interval."""
        c, n = self.cfg, self.cfg.substeps
        gamma = n * n / (n * n - 1) if n > 1 else 1.0
        slope, mid = (self.ramp[2] - self.ramp[1]) / c.knot, (k + 0.5) / c.rate
        for i in range(n):
            a, b = (k * n + i) / (c.rate * n), (k * n + i + 1) / (c.rate * n)
            self.set_inputs(k, self.tau(mid) + gamma * slope * (0.5 * (a + b) - mid), self.fault_inputs(a, b))
            self.sim.advance_to(b)

    def params_at(self, k: int) -> dict[str, float]:
        return next(p for k_on, p in reversed(self.param_log) if k_on <= k)


class Trajectory:
    """The rig's true signals at the sample rate (time from 0), computed on demand."""

    def __init__(self, mech: Mechanism, cfg: RigConfig) -> None:
        self.cfg = cfg
        self._run = _Run(mech, cfg)

    def with_rate(self, rate: float, batch: int) -> Trajectory:
        """The same rig at another batch size (sharing the computed motion) or rate (computed anew: the
        integration follows the sample grid)."""
        if rate == self.cfg.rate:
            other = copy.copy(self)
            other.cfg = dataclasses.replace(self.cfg, batch=batch)
            return other
        return Trajectory(self._run.base, dataclasses.replace(self.cfg, rate=rate, batch=batch))

    def parameters(self, t: float) -> dict[str, float]:
        """The hidden model's changed parameters (mismatch and mass faults) in effect at rig time ``t``."""
        return dict(self._run.params_at(math.floor(t * self.cfg.rate + 1e-6)))

    def truth(self, k0: int, n: int) -> dict[str, np.ndarray]:
        """Samples k0 .. k0+n−1 without noise or sensor faults: ``t`` [s], the channels (``channels``:
        theta, omega, tau_m, f_x, f_y by default), every output of the hidden model by name
        (``piston.x``, ``crank.alpha``, …), the drive as commanded (``motor_torque``; an input bias
        acts on top of it), each model fault's unmeasured load input (``_rig_fault_<i>``, i its index in
        ``faults``), and ``param:<name>`` for every mismatched or faulted parameter. The energy
        integrals (``energy.dissipated``, ``energy.input_work``, …) restart at each model fault's onset
        (the hidden Simulator is rebuilt there); kinetic and potential energies are absolute."""
        r = self._run
        r.extend(k0 + n)
        rows = np.array(r.rows[k0:k0 + n]).reshape(n, -1)
        out = {"t": (k0 + np.arange(n)) / self.cfg.rate}
        out |= {name: rows[:, j] for j, name in enumerate(r.names)}
        if self.cfg.drive:
            out[self.cfg.drive] = rows[:, len(r.names)]
        for i, f in enumerate(self.cfg.faults):
            if f.kind in LOAD_KINDS:
                out[fault_input(i)] = rows[:, len(r.names) + 1 + i]
        out |= {ch: out[src] for ch, src in self.cfg.channels.items()}
        names = {*self.cfg.mismatch, *(f.target for f in self.cfg.faults if f.kind == "mass")}
        base = model_parameters(r.base)
        for name in sorted(names):
            out[f"param:{name}"] = np.array([r.params_at(k).get(name, base[name][0].value)
                                             for k in range(k0, k0 + n)])
        return out

    def samples(self, k0: int, n: int) -> dict[str, np.ndarray]:
        """What the sensors read (before noise) at samples k0 .. k0+n−1: the true channel values with
        the sensor faults (encoder_offset, drift, stuck) applied."""
        sensor = [f for f in self.cfg.faults if f.kind in SENSOR_KINDS]
        lo = min([k0, *(f.sample(self.cfg.rate) for f in sensor if f.kind == "stuck")])
        true = self.truth(lo, k0 + n - lo)
        ch = {name: true[name].copy() for name in self.cfg.channels}
        k = lo + np.arange(k0 + n - lo)
        for f in sensor:
            on = k >= f.sample(self.cfg.rate)
            if f.kind == "encoder_offset":
                ch[f.target][on] += f.size
            elif f.kind == "drift":
                ch[f.target][on] += f.size * (k[on] / self.cfg.rate - f.onset)
            elif on.any():
                ch[f.target][on] = ch[f.target][on][0]
        return {name: v[k0 - lo:] for name, v in ch.items()}


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


def stream(mech: Mechanism | Trajectory, cfg: RigConfig | None = None, duration: float = 1.0,
           epoch: float = 0.0) -> list[dict[str, Any]]:
    """The sensor messages of ``duration`` s (no broker, no message-level faults), in seq order:
    ``stream(mech, cfg, 2.0)``, or ``stream(traj, duration=2.0)`` to reuse a trajectory's truth."""
    traj = mech if isinstance(mech, Trajectory) else Trajectory(mech, cfg or RigConfig())
    src = MessageSource(traj, epoch)
    return [src.message(i) for i in range(int(duration * traj.cfg.rate / traj.cfg.batch + 1e-9))]


def fault_manifest(cfg: RigConfig) -> list[dict[str, Any]]:
    """The injected rig faults with their onset (requested), sample and effective rig time."""
    return [f.describe(cfg.rate) for f in cfg.faults]
