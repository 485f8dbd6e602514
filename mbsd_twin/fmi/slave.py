"""The co-simulation slave: a thin PythonFMU class over :class:`mbsd_twin.Simulator`.

The FMU's resources hold the mechanism file and ``mbsd_twin_fmu.json`` (model name, output
patterns, default experiment); the variables come from the Simulator's ports (see
:mod:`mbsd_twin.fmi.variables`).

Life cycle: fixed parameters are collected until ``exitInitializationMode``, where the Simulator is
built at the experiment's start time (an invalid value raises there, with a message naming the
parameter). ``do_step`` advances the persistent Simulator to ``current_time + step_size`` with the
inputs held; a :class:`~mbsd_twin.SolverFailure` returns fmi2Discard with the reason logged. The FMU
state is the Simulator's full state (``Simulator.get_state``), so rollback is bit-identical.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pythonfmu import DefaultExperiment, Fmi2Causality, Fmi2Initial, Fmi2Slave, Fmi2Variability, Real
from pythonfmu.enums import Fmi2Status

from ..dynamics import SolverFailure
from ..errors import MbsdError, PortError
from ..loader import load_mechanism
from ..simulator import Simulator
from .native import build_simulator
from .variables import FmuVariable, fmu_variables

META_FILE = "mbsd_twin_fmu.json"
STATE_FORMAT = "mbsd-twin-fmu-state/1"
_CAUSALITY = {"input": Fmi2Causality.input, "output": Fmi2Causality.output, "parameter": Fmi2Causality.parameter}
_INITIAL = {"output": Fmi2Initial.calculated, "parameter": Fmi2Initial.exact}  # inputs: none allowed
_VARIABILITY = {"continuous": Fmi2Variability.continuous, "fixed": Fmi2Variability.fixed,
                "tunable": Fmi2Variability.tunable}


class MechanismSlave(Fmi2Slave):
    """FMI 2.0 co-simulation slave of the mechanism in the FMU's resources."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        res = Path(self.resources or ".")
        meta = json.loads((res / META_FILE).read_text(encoding="utf-8"))
        self._mech = load_mechanism(res / meta["mechanism"])
        self.modelName = meta["model_name"]
        self.description = meta.get("description") or f"{self._mech.name}: planar multibody model (mbsd-twin)"
        self.author = "mbsd-twin"
        self.version = meta.get("mbsd_twin_version")
        exp = meta.get("default_experiment", {})
        self.default_experiment = DefaultExperiment(start_time=exp.get("start", 0.0), stop_time=exp.get("stop"),
                                                    step_size=exp.get("step"))
        self._sim = Simulator(self._mech)
        self._table = fmu_variables(self._sim, meta["outputs"])
        self._defaults = {v.name: float(v.start) for v in self._table if v.causality == "parameter"
                          and v.start is not None}
        self._fixed: dict[str, float] = {}
        self._tunable = {v.name: float(v.start or 0.0) for v in self._table if v.variability == "tunable"}
        self._inputs = {v.name: float(v.start or 0.0) for v in self._table if v.causality == "input"}
        self._start_time = 0.0
        self._initialized = False
        self._dirty = False
        for v in self._table:
            self._register(v)

    # ------------------------------------------------------------- variables
    def _register(self, v: FmuVariable) -> None:
        name = v.name
        if v.causality == "input":
            getter, setter = (lambda: self._inputs[name]), (lambda x: self._set_input(name, x))
        elif v.causality == "output":
            getter, setter = (lambda: self._output(name)), None
        elif v.variability == "tunable":
            getter, setter = (lambda: self._tunable[name]), (lambda x: self._set_tunable(name, x))
        else:
            getter = lambda: self._fixed.get(name, self._defaults[name])  # noqa: E731
            setter = lambda x: self._set_fixed(name, x)  # noqa: E731
        self.register_variable(
            Real(name, start=v.start, causality=_CAUSALITY[v.causality], variability=_VARIABILITY[v.variability],
                 initial=_INITIAL.get(v.causality),
                 description=v.description, getter=getter, setter=setter),
            nested=False)

    def _set_input(self, name: str, value: float) -> None:
        value = float(value)
        if value != self._inputs[name]:
            self._inputs[name] = value
            self._dirty = True

    def _set_fixed(self, name: str, value: float) -> None:
        if self._initialized:
            raise PortError(f"parameter {name} is fixed: it can only be set before initialisation", name=name)
        self._fixed[name] = float(value)

    def _set_tunable(self, name: str, value: float) -> None:
        value = float(value)
        if self._initialized:
            try:
                self._sim.set_parameter(name, value)
            except MbsdError as exc:
                self.log(str(exc), Fmi2Status.error)
                raise
        self._tunable[name] = value

    def _push_inputs(self) -> None:
        """Hand the held inputs to the Simulator (raises PortError for a non-finite value)."""
        for name, value in self._inputs.items():
            self._sim.set_input(name, value)

    def _output(self, name: str) -> float:
        if self._dirty:
            try:
                self._push_inputs()
            except PortError:
                return math.nan
            self._dirty = False
        return self._sim.get_output(name)

    # ------------------------------------------------------------ life cycle
    def setup_experiment(self, start_time: float, stop_time: float | None = None,
                         tolerance: float | None = None) -> None:
        self._start_time = float(start_time)

    def exit_initialization_mode(self) -> None:
        changed = {n: v for n, v in self._fixed.items() if v != self._defaults[n]}
        try:
            self._sim = build_simulator(self._mech, changed, self._tunable, self._start_time, self._inputs,
                                        base=self._sim)
        except MbsdError as exc:
            self.log(str(exc), Fmi2Status.error)
            raise
        self._initialized = True
        self._dirty = True

    def do_step(self, current_time: float, step_size: float) -> bool:
        if not self._initialized:
            self.log("doStep called before the FMU was initialised", Fmi2Status.error)
            return False
        t = self._sim.time
        if abs(current_time - t) > 1e-9 * max(1.0, abs(t)):
            self.log(f"doStep from t={current_time!r} s but the FMU is at t={t!r} s", Fmi2Status.discard)
            return False
        try:
            self._push_inputs()
            self._sim.advance_to(current_time + step_size)
        except (SolverFailure, PortError) as exc:
            self.log(f"doStep from t={current_time!r} s by {step_size!r} s discarded: {exc}", Fmi2Status.discard)
            self._dirty = True
            return False
        self._dirty = False
        return True

    # ----------------------------------------------------------------- state
    def _get_fmu_state(self) -> bytes:
        data = {"format": STATE_FORMAT, "sim": self._sim.get_state().decode(), "inputs": self._inputs,
                "fixed": self._fixed, "tunable": self._tunable, "start_time": self._start_time,
                "initialized": self._initialized}
        return json.dumps(data).encode()

    def _set_fmu_state(self, state: bytes) -> None:
        try:
            data = json.loads(bytes(state).decode())
            ok = data.get("format") == STATE_FORMAT
        except (UnicodeDecodeError, ValueError, AttributeError, TypeError):
            ok = False
        if not ok:
            self.log(f"not a {STATE_FORMAT} state", Fmi2Status.error)
            raise ValueError(f"not a {STATE_FORMAT} state")
        self._sim.set_state(data["sim"].encode())
        self._inputs = {k: float(v) for k, v in data["inputs"].items()}
        self._fixed = {k: float(v) for k, v in data["fixed"].items()}
        self._tunable = {k: float(v) for k, v in data["tunable"].items()}
        self._start_time = float(data["start_time"])
        self._initialized = bool(data["initialized"])
        self._dirty = True

    @staticmethod
    def _fmu_state_to_bytes(state: bytes) -> bytes:
        return bytes(state)

    @staticmethod
    def _fmu_state_from_bytes(state: bytes) -> bytes:
        return bytes(state)
