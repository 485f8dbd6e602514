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

import sys
from typing import Any

from pythonfmu import DefaultExperiment, Fmi2Causality, Fmi2Initial, Fmi2Slave, Fmi2Variability, Real
from pythonfmu.enums import Fmi2Status

from .native import FmuInitError
from .slave_logic import FMI2_STATE_FORMAT, META_FILE, Getter, Setter, SlaveLogic, engine_notices
from .variables import FmuVariable

__all__ = ["META_FILE", "STATE_FORMAT", "MechanismSlave"]

STATE_FORMAT = FMI2_STATE_FORMAT
_CAUSALITY = {"input": Fmi2Causality.input, "output": Fmi2Causality.output, "parameter": Fmi2Causality.parameter}
_INITIAL = {"output": Fmi2Initial.calculated, "parameter": Fmi2Initial.exact}  # inputs: none allowed
_VARIABILITY = {"continuous": Fmi2Variability.continuous, "fixed": Fmi2Variability.fixed,
                "tunable": Fmi2Variability.tunable}


class MechanismSlave(SlaveLogic, Fmi2Slave):
    """FMI 2.0 co-simulation slave of the mechanism in the FMU's resources (behaviour: SlaveLogic)."""

    STATUS_ERROR = Fmi2Status.error
    STATUS_DISCARD = Fmi2Status.discard
    STATUS_BAD_STEP = Fmi2Status.discard  # PythonFMU 2 knows only ok / discard from do_step
    STATE_FORMAT = STATE_FORMAT
    get_real = SlaveLogic._get_values  # fmi2GetReal / fmi2SetReal in bulk, not variable by variable
    set_real = SlaveLogic._set_values

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        try:
            with engine_notices(self.log, Fmi2Status.warning):
                meta = self._load(self.resources)
        except FmuInitError as exc:  # another mbsd-twin version: PythonFMU 0.7 logs it with debug logging only
            print(exc, file=sys.stderr, flush=True)
            raise
        self._describe(meta, DefaultExperiment)
        self._register_all(_real)

    def setup_experiment(self, start_time: float, stop_time: float | None = None,
                         tolerance: float | None = None) -> None:
        self._start_time = float(start_time)

    def do_step(self, current_time: float, step_size: float) -> bool:
        return self._step(current_time, step_size) is None


def _real(v: FmuVariable, getter: Getter, setter: Setter) -> Real:
    return Real(v.name, start=v.start, causality=_CAUSALITY[v.causality], variability=_VARIABILITY[v.variability],
                initial=_INITIAL.get(v.causality), description=v.description, getter=getter, setter=setter)
