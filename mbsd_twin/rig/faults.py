"""Physical and sensor faults of the synthetic rig, injected at a known time.

Kinds (``RigFault.kind``) and their ``target``:

- ``mass``: a model parameter (``piston.mass``, ``crank.inertia``, ``main_bearing.viscous_friction``,
  …) multiplied by ``size`` (``scale=True``) or set to ``size``. The hidden Simulator is rebuilt with
  the new value and continues from the same state (every body coordinate and velocity imposed).
- ``friction``: an added joint friction torque −size·tanh(ω_rel/omega_s) [N·m] opposing the relative
  rotation of a revolute joint, an unmeasured torque load (evaluated at the start of each integration
  sub-step and held over it). With ``ramp`` > 0 [s] its size grows linearly from 0 at onset to
  ``size`` at onset + ramp (a slowly growing friction: wear, a drying bearing), evaluated at each
  sub-step's midpoint (the exact mean of the ramp over the sub-step).
- ``load_pulses``: unmeasured force pulses of ``size`` [N] on a body, ``width`` s long every ``period``
  s from onset, along the axis of the prismatic joint guiding the body from ground (else world x),
  applied through its centre of mass; each sub-step gets the exact mean of the pulse train over it.
- ``input_bias``: ``size`` added to an input port of the hidden model from onset on (an unmeasured
  torque or force offset: a channel reading that port still reports the commanded value).
- ``encoder_offset``: ``size`` added to a measured channel from onset on (a sensor bias).
- ``drift``: ``size``·(t − onset) added to a measured channel from onset on (``size`` per s).
- ``stuck``: a measured channel frozen at its (noise-free) value at onset; noise is still added.
- ``dropout``: the sensor messages whose first sample lies in [onset, onset + ``width``) are not
  sent (target ``sensors``); the twin counts them as gaps.

Channel targets are the rig's channel names (:attr:`.synthetic.RigConfig.channels`), checked with the
mechanism by :func:`check_faults`.

A fault takes effect at the first sample at or after ``onset`` (its ``sample``); sensor noise is
added after the sensor faults. CLI specs (:func:`parse_fault`): ``mass@2.0:piston.mass*1.2``,
``mass@2.0:piston.mass=1.8``, ``friction@3.0:main_bearing=0.3``, ``friction@3.0:main_bearing=0.3,10`` (N·m, ramp s),
``encoder_offset@4.0:theta+0.02``,
``load_pulses@5.0:piston=20,0.03,0.5`` (N, width s, period s), ``stuck@6.0:omega``,
``input_bias@3.0:motor_torque+0.3``, ``drift@2.0:theta+0.001`` (per s), ``dropout@4.0:sensors=0.5`` (s).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..model.model import Load, Mechanism
from ..simulation.ports import apply_parameters, model_parameters

CHANNELS = {"theta": "crank.theta", "omega": "crank.omega", "f_x": "main_bearing.fx", "f_y": "main_bearing.fy",
            "tau_m": "motor_torque"}  # rig channel → hidden-model output (tau_m: the motor's input port)
MODEL_KINDS = ("mass", "friction", "load_pulses")  # the hidden Simulator is rebuilt at onset
LOAD_KINDS = ("friction", "load_pulses")  # an unmeasured load driven by input fault_input(i)
INPUT_KINDS = ("input_bias",)
SENSOR_KINDS = ("encoder_offset", "drift", "stuck")
MESSAGE_KINDS = ("dropout",)
KINDS = MODEL_KINDS + INPUT_KINDS + SENSOR_KINDS + MESSAGE_KINDS
_SPEC = re.compile(r"^(?P<kind>\w+)@(?P<onset>[^:]+):(?P<target>[A-Za-z_][\w.]*)(?P<op>[*=+-])?(?P<value>.*)$")


@dataclass(frozen=True)
class RigFault:
    """A fault injected at rig time ``onset`` [s from the stream's start] (see the module doc)."""

    kind: str
    onset: float
    target: str
    size: float = 0.0
    scale: bool = False  # mass: multiply the parameter by size (else set it to size)
    width: float = 0.03  # load_pulses: pulse length [s]; dropout: its duration [s]
    period: float = 0.5  # load_pulses: pulse period [s]
    omega_s: float = 1e-3  # friction: smoothing speed of tanh [rad/s]
    ramp: float = 0.0  # friction: s from onset over which the torque grows linearly from 0 to size (0: a step)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown rig fault kind {self.kind!r}; kinds are: {', '.join(KINDS)}")
        for name in ("onset", "size", "width", "period", "omega_s", "ramp"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"rig fault {self.kind}: {name} must be finite, got {getattr(self, name)!r}")
        if self.onset < 0:
            raise ValueError(f"rig fault {self.kind}: onset must be >= 0 s, got {self.onset!r}")
        if self.kind == "load_pulses" and not 0 < self.width <= self.period:
            raise ValueError(f"rig fault load_pulses: need 0 < width <= period, got width {self.width!r}, "
                             f"period {self.period!r}")
        if self.kind == "friction" and self.omega_s <= 0:
            raise ValueError(f"rig fault friction: omega_s must be > 0, got {self.omega_s!r}")
        if self.ramp < 0 or (self.ramp > 0 and self.kind != "friction"):
            raise ValueError(f"rig fault {self.kind}: ramp must be >= 0 s and is a friction option, got {self.ramp!r}")
        if self.kind == "dropout" and not (self.width > 0 and self.target == "sensors"):
            raise ValueError(f"rig fault dropout: need target 'sensors' and width > 0 s, got {self.target!r}, "
                             f"width {self.width!r}")

    def sample(self, rate: float) -> int:
        """Index of the first sample at or after the onset."""
        return math.ceil(self.onset * rate - 1e-6)

    def describe(self, rate: float) -> dict[str, Any]:
        """The manifest entry: every field plus the sample index and rig time it takes effect at."""
        k = self.sample(rate)
        return dataclasses.asdict(self) | {"sample": k, "effective": k / rate, "spec": self.spec()}

    def spec(self) -> str:
        """The CLI form (:func:`parse_fault` reads it back)."""
        head = f"{self.kind}@{self.onset!r}:{self.target}"
        if self.kind == "mass":
            return f"{head}{'*' if self.scale else '='}{self.size!r}"
        if self.kind == "friction":
            return f"{head}={self.size!r}" + (f",{self.ramp!r}" if self.ramp > 0 else "")
        if self.kind in ("encoder_offset", "input_bias", "drift"):
            return f"{head}{self.size:+}"
        if self.kind == "dropout":
            return f"{head}={self.width!r}"
        if self.kind == "load_pulses":
            return f"{head}={self.size!r},{self.width!r},{self.period!r}"
        return head

    def pulse_mean(self, a: float, b: float) -> float:
        """load_pulses: the mean force over [a, b] (b > a; the pulse train starts at ``t_on``)."""
        t_on, on = self.onset, 0.0
        j = max(0, math.floor((a - t_on) / self.period))
        while t_on + j * self.period < b:
            lo = t_on + j * self.period
            on += max(0.0, min(b, lo + self.width) - max(a, lo))
            j += 1
        return self.size * on / (b - a)

    def pulse_at(self, t: float) -> float:
        """load_pulses: the force at ``t`` (pulses on over [start, start + width))."""
        if t < self.onset:
            return 0.0
        return self.size if (t - self.onset) % self.period < self.width else 0.0

    def friction_torque(self, omega_rel: float, t: float) -> float:
        """The friction torque at relative speed ``omega_rel`` and rig time ``t`` (>= onset)."""
        grown = min(1.0, max(0.0, (t - self.onset) / self.ramp)) if self.ramp > 0 else 1.0
        return -self.size * grown * math.tanh(omega_rel / self.omega_s)


def _number(spec: str, text: str, what: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"bad rig fault spec {spec!r}: {what} {text!r} is not a number") from None
    if not math.isfinite(v):
        raise ValueError(f"bad rig fault spec {spec!r}: {what} {text!r} is not finite")
    return v


_FORMS = {"mass": "mass@T:PARAM*FACTOR or mass@T:PARAM=VALUE",
          "friction": "friction@T:JOINT=N.m or friction@T:JOINT=N.m,RAMP_S",
          "encoder_offset": "encoder_offset@T:CHANNEL+OFFSET (or -OFFSET)", "stuck": "stuck@T:CHANNEL",
          "load_pulses": "load_pulses@T:BODY=N,WIDTH,PERIOD", "input_bias": "input_bias@T:PORT+VALUE (or -VALUE)",
          "drift": "drift@T:CHANNEL+RATE (or -RATE; per s)", "dropout": "dropout@T:sensors=SECONDS"}


def parse_fault(spec: str) -> RigFault:
    """A :class:`RigFault` from its CLI form (see the module doc); ValueError naming the bad spec."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise ValueError(f"bad rig fault spec {spec!r}: expected KIND@ONSET:TARGET..., e.g. "
                         f"mass@2.0:piston.mass*1.2; kinds: {', '.join(KINDS)}")
    kind, op, value = m["kind"], m["op"] or "", m["value"]
    if kind not in KINDS:
        raise ValueError(f"bad rig fault spec {spec!r}: unknown kind {kind!r}; kinds are: {', '.join(KINDS)}")
    allowed = {"mass": "*=", "friction": "=", "encoder_offset": "+-", "load_pulses": "=", "stuck": "",
               "input_bias": "+-", "drift": "+-", "dropout": "="}[kind]
    if (op or "") not in allowed or (op == "" and kind != "stuck") or (kind == "stuck" and value):
        raise ValueError(f"bad rig fault spec {spec!r}: the form is {_FORMS[kind]}")
    onset = _number(spec, m["onset"], "onset")
    args: dict[str, Any] = {}
    if kind == "load_pulses":
        parts = value.split(",")
        if len(parts) != 3:
            raise ValueError(f"bad rig fault spec {spec!r}: the form is {_FORMS[kind]}")
        args = {k: _number(spec, p, k) for k, p in zip(("size", "width", "period"), parts, strict=True)}
    elif kind == "friction" and "," in value:
        parts = value.split(",")
        if len(parts) != 2:
            raise ValueError(f"bad rig fault spec {spec!r}: the form is {_FORMS[kind]}")
        args = {k: _number(spec, p, k) for k, p in zip(("size", "ramp"), parts, strict=True)}
    elif kind == "dropout":
        args = {"width": _number(spec, value, "duration")}
    elif kind != "stuck":
        args = {"size": _number(spec, (op if op == "-" else "") + value, "value"), "scale": op == "*"}
    try:
        return RigFault(kind, onset, m["target"], **args)
    except ValueError as exc:
        raise ValueError(f"bad rig fault spec {spec!r}: {exc}") from None


def check_faults(mech: Mechanism, faults: tuple[RigFault, ...], channels: Iterable[str] = CHANNELS) -> None:
    """ValueError naming the first fault whose target the mechanism (or the rig's ``channels``) does
    not have."""
    names = list(channels)
    for f in faults:
        bad = None
        if f.kind == "mass":
            bad = None if f.target in model_parameters(mech) else f"unknown parameter {f.target!r}"
        elif f.kind == "friction":
            joints = [j.name for j in mech.joints if j.type == "revolute"]
            bad = None if f.target in joints else f"no revolute joint {f.target!r} (revolute: {', '.join(joints)})"
        elif f.kind == "load_pulses":
            bodies = [b.name for b in mech.bodies]
            bad = None if f.target in bodies else f"no body {f.target!r} (bodies: {', '.join(bodies)})"
        elif f.kind == "input_bias":
            ports = list(mech.input_names)
            bad = None if f.target in ports else \
                f"no input port {f.target!r} (input ports: {', '.join(ports) or 'none'})"
        elif f.kind in SENSOR_KINDS and f.target not in names:
            bad = f"unknown channel {f.target!r}; the rig's channels are: {', '.join(names)}"
        if bad:
            raise ValueError(f"rig fault {f.spec()!r}: {bad}")


def fault_input(i: int) -> str:
    """The hidden model's input port of fault number ``i`` (friction, load_pulses)."""
    return f"_rig_fault_{i}"


def fault_load(mech: Mechanism, i: int, f: RigFault) -> Load:
    """The unmeasured load of a friction or load_pulses fault, driven by input :func:`fault_input`."""
    if f.kind == "friction":
        b0, b1 = mech.joint(f.target).bodies
        return Load(f"_rig_fault_{i}", "torque", (b1, b0), input=fault_input(i), unit="N.m",
                    description=f"rig fault: friction torque in {f.target}")
    axis = next((j.axis for j in mech.joints if j.type == "prismatic" and j.bodies == ("ground", f.target)
                 and j.axis is not None), (1.0, 0.0))
    return Load(f"_rig_fault_{i}", "force", (f.target,), points=(mech.body(f.target).cg,), direction=axis,
                frame="world", input=fault_input(i), unit="N", description=f"rig fault: force pulses on {f.target}")


def hidden_mechanism(base: Mechanism, params: dict[str, float], faults: tuple[RigFault, ...],
                     active: set[int]) -> Mechanism:
    """The rig's true mechanism: ``base`` with ``params`` and the loads of the active model faults."""
    mech = apply_parameters(base, params) if params else base
    loads = tuple(fault_load(base, i, faults[i]) for i in sorted(active) if faults[i].kind in LOAD_KINDS)
    return dataclasses.replace(mech, loads=mech.loads + loads) if loads else mech
