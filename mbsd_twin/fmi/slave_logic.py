"""What the FMI 2.0 and FMI 3.0 slaves share, independent of PythonFMU's version-specific classes.

:class:`SlaveLogic` holds the Simulator, the held inputs, the fixed and tunable parameter values and
the life cycle: fixed parameters are collected until ``exitInitializationMode``, where the
Simulator is built at the experiment's start time (an invalid value raises there, with a message
naming the parameter); a step advances the persistent Simulator with the inputs held and a
:class:`~mbsd_twin.SolverFailure` becomes a discarded step with the reason logged; the FMU state is
the Simulator's full state, so rollback is bit-identical. A subclass mixes it with a PythonFMU slave
class and sets ``STATUS_ERROR``, ``STATUS_DISCARD`` and ``STATE_FORMAT``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..dynamics import SolverFailure
from ..errors import MbsdError, PortError
from ..loader import load_mechanism
from ..simulator import Simulator
from .native import build_simulator
from .variables import FmuVariable, fmu_variables

META_FILE = "mbsd_twin_fmu.json"
Getter = Callable[[], float]
Setter = Callable[[float], None] | None


class SlaveLogic:
    """Version-independent behaviour of an mbsd-twin co-simulation slave."""

    STATUS_ERROR: Any
    STATUS_DISCARD: Any
    STATE_FORMAT: str
    log: Callable[..., None]  # provided by the PythonFMU slave class

    def _load(self, resources: str | None) -> dict[str, Any]:
        """Read the FMU's resources; set up the Simulator and the variable table; the metadata."""
        res = Path(resources or ".")
        meta: dict[str, Any] = json.loads((res / META_FILE).read_text(encoding="utf-8"))
        self._mech = load_mechanism(res / meta["mechanism"])
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
        return meta

    def _describe(self, meta: dict[str, Any], experiment: Callable[..., Any]) -> None:
        """Model name, description, author, version and DefaultExperiment from the metadata
        (``experiment`` is the PythonFMU version's DefaultExperiment class)."""
        self.modelName = meta["model_name"]
        self.description = str(meta.get("description") or f"{self._mech.name}: planar multibody model (mbsd-twin)")
        self.author = "mbsd-twin"
        self.version = meta.get("mbsd_twin_version")
        exp = meta.get("default_experiment", {})
        self.default_experiment = experiment(start_time=exp.get("start", 0.0), stop_time=exp.get("stop"),
                                             step_size=exp.get("step"))

    # ------------------------------------------------------------- variables
    def _accessors(self, v: FmuVariable) -> tuple[Getter, Setter]:
        name = v.name
        if v.causality == "input":
            return (lambda: self._inputs[name]), (lambda x: self._set_input(name, x))
        if v.causality == "output":
            return (lambda: self._output(name)), None
        if v.variability == "tunable":
            return (lambda: self._tunable[name]), (lambda x: self._set_tunable(name, x))
        return (lambda: self._fixed.get(name, self._defaults[name])), (lambda x: self._set_fixed(name, x))

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
                self.log(str(exc), self.STATUS_ERROR)
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
    def exit_initialization_mode(self) -> None:
        changed = {n: v for n, v in self._fixed.items() if v != self._defaults[n]}
        try:
            self._sim = build_simulator(self._mech, changed, self._tunable, self._start_time, self._inputs,
                                        base=self._sim)
        except MbsdError as exc:
            self.log(str(exc), self.STATUS_ERROR)
            raise
        self._initialized = True
        self._dirty = True

    def _step(self, current_time: float, step_size: float) -> Any:
        """Advance to ``current_time + step_size``: None when done, else the status (error or
        discard) of a refused step, whose reason is logged."""
        if not self._initialized:
            self.log("doStep called before the FMU was initialised", self.STATUS_ERROR)
            return self.STATUS_ERROR
        t = self._sim.time
        if abs(current_time - t) > 1e-9 * max(1.0, abs(t)):
            self.log(f"doStep from t={current_time!r} s but the FMU is at t={t!r} s", self.STATUS_DISCARD)
            return self.STATUS_DISCARD
        try:
            self._push_inputs()
            self._sim.advance_to(current_time + step_size)
        except (SolverFailure, PortError) as exc:
            self.log(f"doStep from t={current_time!r} s by {step_size!r} s discarded: {exc}", self.STATUS_DISCARD)
            self._dirty = True
            return self.STATUS_DISCARD
        self._dirty = False
        return None

    # ----------------------------------------------------------------- state
    def _get_fmu_state(self) -> bytes:
        data = {"format": self.STATE_FORMAT, "sim": self._sim.get_state().decode(), "inputs": self._inputs,
                "fixed": self._fixed, "tunable": self._tunable, "start_time": self._start_time,
                "initialized": self._initialized}
        return json.dumps(data).encode()

    def _set_fmu_state(self, state: bytes) -> None:
        try:
            data = json.loads(bytes(state).decode())
            ok = data.get("format") == self.STATE_FORMAT
        except (UnicodeDecodeError, ValueError, AttributeError, TypeError):
            ok = False
        if not ok:
            self.log(f"not a {self.STATE_FORMAT} state", self.STATUS_ERROR)
            raise ValueError(f"not a {self.STATE_FORMAT} state")
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
