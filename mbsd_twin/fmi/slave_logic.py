"""What the FMI 2.0 and FMI 3.0 slaves share, independent of PythonFMU's version-specific classes.

:class:`SlaveLogic` holds the Simulator, the held inputs, the fixed and tunable parameter values and
the life cycle: fixed parameters are collected until ``exitInitializationMode``, where the
Simulator is built at the experiment's start time (an invalid value raises there, with a message
naming the parameter); a step advances the persistent Simulator with the inputs held and a
:class:`~mbsd_twin.SolverFailure` becomes a discarded step with the reason logged; the FMU state is
the Simulator's full state, so rollback is bit-identical. A subclass mixes it with a PythonFMU slave
class, sets ``STATUS_ERROR``, ``STATUS_DISCARD`` and ``STATE_FORMAT``, registers the variables with
:meth:`SlaveLogic._register_all` and serves the host's bulk get/set calls (``fmi2GetReal``,
``fmi3GetFloat64`` …) with :meth:`SlaveLogic._get_values` and :meth:`SlaveLogic._set_values`.

Per communication step a master typically sets every input, steps and reads every output. That
path avoids PythonFMU's per-variable dispatch: value references map to an input slot or an output
position once; the outputs come from ONE ``Simulator.output_vector()`` call per instant, kept as a
list until the time, the state, an input or a parameter changes; inputs are handed to the
Simulator only when one changed (the Simulator keeps them across steps). A new input is felt at
once by the feed-through outputs (accelerations, reactions), before the next step.

A doStep is bounded in wall-clock time (``step_time_limit`` in the metadata, set at build time,
default :data:`STEP_TIME_LIMIT`): a runaway integration on the numpy path returns Discard with the
reason logged instead of leaving the host waiting (the compiled path is bounded by its step budget).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..errors import MbsdError, PortError
from ..model.loader import load_mechanism
from ..simulation.simulator import Simulator
from ..solvers.dynamics import WALL_CLOCK, SolverFailure, wall_clock_limit
from . import fmu_cause
from .fmu_cause import version_problem
from .native import FmuInitError, build_simulator
from .variables import FmuVariable, fmu_variables

META_FILE = fmu_cause.META_FILE
FMI2_STATE_FORMAT = "mbsd-twin-fmu-state/1"  # the FMI 2.0 slaves' state (PythonFMU and worker)
FMI3_STATE_FORMAT = "mbsd-twin-fmu3-state/1"  # the FMI 3.0 slaves' state (pythonfmu3 and worker)
STEP_TIME_LIMIT = 10.0  # s of wall-clock time one doStep may take (default of the build option)
Getter = Callable[[], float]
Setter = Callable[[float], None] | None


def _step_problem(current_time: float, step_size: float) -> str | None:
    """Why (current_time, step_size) cannot be a communication step, or None."""
    if not (math.isfinite(current_time) and math.isfinite(step_size)):
        return f"time and step size must be finite, got {current_time!r} s and {step_size!r} s"
    if not step_size > 0.0:
        return f"the step size must be positive, got {step_size!r} s"
    end = current_time + step_size
    if not math.isfinite(end) or end == current_time:
        return f"a step of {step_size!r} s from t={current_time!r} s does not reach a new finite time"
    return None


class _ToHostLog(logging.Handler):
    """Passes the engine's log records (logger ``mbsd_twin``) to the slave's FMI log with
    ``status``, and to stderr as well when nothing else would have printed them."""

    def __init__(self, log: Callable[..., None], status: Any, echo: bool) -> None:
        super().__init__(logging.WARNING)
        self._log, self._status, self._echo = log, status, echo

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        self._log(text, self._status)
        if self._echo:
            print(text, file=sys.stderr, flush=True)


@contextlib.contextmanager
def engine_notices(log: Callable[..., None], status: Any) -> Iterator[None]:
    """Within the block the engine's notices — the compile notice of a first run after an install
    (``compiled.nb_cache.compile_notice``) — go to the host's FMI log (``log``, a PythonFMU slave's,
    with ``status``: a warning, shown without debug logging where the PythonFMU version passes
    messages on; pythonfmu3 delivers them with the next FMI call) and still to stderr."""
    engine = logging.getLogger("mbsd_twin")
    handler = _ToHostLog(log, status, echo=not engine.hasHandlers())
    engine.addHandler(handler)
    try:
        yield
    finally:
        engine.removeHandler(handler)


class SlaveLogic:
    """Version-independent behaviour of an mbsd-twin co-simulation slave."""

    STATUS_ERROR: Any
    STATUS_DISCARD: Any
    STATUS_BAD_STEP: Any  # a doStep with a non-finite, zero or negative step size (nothing changes)
    STATE_FORMAT: str
    log: Callable[..., None]  # provided by the PythonFMU slave class
    vars: dict[int, Any]  # PythonFMU's registered variables by value reference
    register_variable: Callable[..., None]

    def _load(self, resources: str | None) -> dict[str, Any]:
        """Read the FMU's resources; set up the Simulator and the variable table; the metadata."""
        res = Path(resources or ".")
        meta: dict[str, Any] = json.loads((res / META_FILE).read_text(encoding="utf-8"))
        mismatch = version_problem(meta.get("mbsd_twin_version"), __version__)
        if mismatch:
            raise FmuInitError(f"mbsd-twin FMU {meta.get('model_name', '?')} cannot start: {mismatch}")
        self._mech = load_mechanism(res / meta["mechanism"])
        self._sim = Simulator(self._mech)
        self._table = fmu_variables(self._sim, meta["outputs"])
        self._defaults = {v.name: float(v.start) for v in self._table if v.causality == "parameter"
                          and v.start is not None}
        self._fixed: dict[str, float] = {}
        self._tunable = {v.name: float(v.start or 0.0) for v in self._table if v.variability == "tunable"}
        self._in_names = [v.name for v in self._table if v.causality == "input"]
        self._in_values = [float(v.start or 0.0) for v in self._table if v.causality == "input"]
        self._out_names = [v.name for v in self._table if v.causality == "output"]
        self._start_time = 0.0
        self._step_limit = float(meta.get("step_time_limit", STEP_TIME_LIMIT))
        self._initialized = False
        self._dirty = False  # held inputs not yet handed to the Simulator
        self._bind_outputs()
        return meta

    def _bind_outputs(self) -> None:
        """Where the FMU's outputs sit in ``Simulator.output_vector()`` (None: all of them, in order)."""
        index = {name: k for k, name in enumerate(self._sim.output_names())}
        pos = [index[name] for name in self._out_names]
        self._out_pick = None if pos == list(range(len(index))) else np.array(pos, dtype=np.intp)
        self._outs: list[float] | None = None  # the outputs at the current instant, once computed

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
    def _register_all(self, make: Callable[[FmuVariable, Getter, Setter], Any]) -> None:
        """Register every variable of the table (``make`` builds the PythonFMU variable from the
        table entry, its getter and its setter) and index inputs and outputs by value reference."""
        self._vr_in: dict[int, int] = {}
        self._vr_out: dict[int, int] = {}
        # each name's first position (list.index per variable was quadratic: 15,000 outputs of a
        # 1,000-link chain)
        self._in_pos = {name: k for k, name in reversed(list(enumerate(self._in_names)))}
        self._out_pos = {name: k for k, name in reversed(list(enumerate(self._out_names)))}
        for v in self._table:
            var = make(v, *self._accessors(v))
            self.register_variable(var, nested=False)
            if v.causality == "input":
                self._vr_in[var.value_reference] = len(self._vr_in)
            elif v.causality == "output":
                self._vr_out[var.value_reference] = len(self._vr_out)
        self._in_vrs = list(self._vr_in)
        self._out_vrs = list(self._vr_out)

    def _accessors(self, v: FmuVariable) -> tuple[Getter, Setter]:
        name = v.name
        if v.causality == "input":
            k = self._in_pos[name]
            return (lambda: self._in_values[k]), (lambda x: self._set_input(k, x))
        if v.causality == "output":
            k = self._out_pos[name]
            return (lambda: self._outputs()[k]), None
        if v.variability == "tunable":
            return (lambda: self._tunable[name]), (lambda x: self._set_tunable(name, x))
        return (lambda: self._fixed.get(name, self._defaults[name])), (lambda x: self._set_fixed(name, x))

    def _get_values(self, vrs: Sequence[int]) -> list[float]:
        """The host's bulk read (``fmi2GetReal``, ``fmi3GetFloat64``): every output at once in
        registration order is one list copy; anything else goes variable by variable (a value
        reference that is not registered raises KeyError, as in PythonFMU)."""
        if vrs == self._out_vrs:
            return self._outputs()[:]
        values = []
        for vr in vrs:
            k = self._vr_out.get(vr)
            values.append(self._outputs()[k] if k is not None else float(self.vars[vr].getter()))
        return values

    def _set_values(self, vrs: Sequence[int], values: Sequence[float]) -> None:
        """The host's bulk write (``fmi2SetReal``, ``fmi3SetFloat64``; scalars only): every input
        at once in registration order is one list comparison; anything else goes through the
        variable's setter (outputs have none: TypeError, as in PythonFMU)."""
        if vrs == self._in_vrs:
            new = [float(x) for x in values]
            if new != self._in_values:
                self._in_values = new
                self._dirty = True
                self._outs = None
            return
        for vr, x in zip(vrs, values, strict=True):
            k = self._vr_in.get(vr)
            if k is None:
                self.vars[vr].setter(x)
            else:
                self._set_input(k, x)

    def _set_input(self, k: int, value: float) -> None:
        value = float(value)
        if value != self._in_values[k]:
            self._in_values[k] = value
            self._dirty = True
            self._outs = None

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
            self._outs = None
        self._tunable[name] = value

    def _push_inputs(self) -> None:
        """Hand the held inputs to the Simulator if one changed (raises PortError for a
        non-finite value; the inputs then stay pending)."""
        if self._dirty:
            for name, value in zip(self._in_names, self._in_values, strict=True):
                self._sim.set_input(name, value)
            self._dirty = False

    def _outputs(self) -> list[float]:
        """The FMU's outputs at the current instant (with the held inputs), from one
        ``Simulator.output_vector()`` call, kept until the time, the state, an input or a parameter
        changes. Every output is NaN while an input is invalid (non-finite)."""
        outs = self._outs
        if outs is None:
            try:
                self._push_inputs()
            except PortError:
                return [math.nan] * len(self._out_names)
            vec = self._sim.output_vector()
            outs = self._outs = (vec if self._out_pick is None else vec[self._out_pick]).tolist()
        return outs

    # ------------------------------------------------------------ life cycle
    def exit_initialization_mode(self) -> None:
        changed = {n: v for n, v in self._fixed.items() if v != self._defaults[n]}
        try:
            self._sim = build_simulator(self._mech, changed, self._tunable, self._start_time,
                                        dict(zip(self._in_names, self._in_values, strict=True)), base=self._sim)
        except MbsdError as exc:
            self.log(str(exc), self.STATUS_ERROR)
            raise
        self._initialized = True
        self._dirty = True
        self._bind_outputs()

    def _step(self, current_time: float, step_size: float) -> Any:
        """Advance to ``current_time + step_size``: None when done, else the status (error or
        discard) of a refused step, whose reason is logged."""
        if not self._initialized:
            self.log("doStep called before the FMU was initialised", self.STATUS_ERROR)
            return self.STATUS_ERROR
        bad = _step_problem(current_time, step_size)
        if bad:
            self.log(f"doStep refused (the FMU stays at t={self._sim.time!r} s): {bad}", self.STATUS_BAD_STEP)
            return self.STATUS_BAD_STEP
        t = self._sim.time
        if abs(current_time - t) > 1e-9 * max(1.0, abs(t)):
            self.log(f"doStep from t={current_time!r} s but the FMU is at t={t!r} s", self.STATUS_DISCARD)
            return self.STATUS_DISCARD
        self._outs = None
        try:
            self._push_inputs()
            if self._sim.backend == "numpy":  # the compiled path is bounded by its step budget
                with wall_clock_limit(self._step_limit):
                    self._sim.advance_to(current_time + step_size)
            else:
                self._sim.advance_to(current_time + step_size)
        except (SolverFailure, PortError) as exc:
            why = f"it took longer than the FMU's step time limit of {self._step_limit:g} s (wall clock; " \
                  "build option --step-time-limit)" if WALL_CLOCK in str(exc) else str(exc)
            self.log(f"doStep from t={current_time!r} s by {step_size!r} s discarded: {why}", self.STATUS_DISCARD)
            self._dirty = True
            return self.STATUS_DISCARD
        return None

    # ----------------------------------------------------------------- state
    def _get_fmu_state(self) -> bytes:
        data = {"format": self.STATE_FORMAT, "sim": self._sim.get_state().decode(),
                "inputs": dict(zip(self._in_names, self._in_values, strict=True)),
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
        self._in_values = [float(data["inputs"][name]) for name in self._in_names]
        self._fixed = {k: float(v) for k, v in data["fixed"].items()}
        self._tunable = {k: float(v) for k, v in data["tunable"].items()}
        self._start_time = float(data["start_time"])
        self._initialized = bool(data["initialized"])
        self._dirty = True
        self._outs = None

    @staticmethod
    def _fmu_state_to_bytes(state: bytes) -> bytes:
        return bytes(state)

    @staticmethod
    def _fmu_state_from_bytes(state: bytes) -> bytes:
        return bytes(state)
