"""FMI 3.0 co-simulation FMU of a mechanism, built with ``pythonfmu3``.

Same variables as the FMI 2.0 FMU (:mod:`mbsd_twin.fmi.variables`: one scalar ``Float64`` per
input, output and parameter, plus the independent variable ``time``), same behaviour
(:mod:`mbsd_twin.fmi.slave`): ``do_step`` advances the persistent Simulator with the inputs held,
a :class:`~mbsd_twin.SolverFailure` returns fmi3Discard, the FMU state is the Simulator's full
state (``Simulator.get_state``) as JSON bytes.

pythonfmu3 writes the variables without units, types or explicit ``initial``, and start values with
16 digits; :func:`postprocess3` rewrites ``modelDescription.xml`` from the variable table (units,
declared types, exact start values, ``ModelStructure`` with the direct dependencies on the inputs).

    from mbsd_twin.fmi.fmi3 import build_fmu3
    build_fmu3(None, "dist/SliderCrank.fmu")
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pythonfmu3 import DefaultExperiment, Float64, Fmi3Causality, Fmi3Slave, Fmi3Status, Fmi3StepResult, Fmi3Variability

from .modeldescription import assemble, naming_convention, unit_definitions
from .slave_logic import FMI3_STATE_FORMAT as STATE_FORMAT
from .slave_logic import STEP_TIME_LIMIT, Getter, Setter, SlaveLogic, engine_notices
from .units import DECLARED_TYPES, declared_type
from .variables import FmuVariable

ENTRY_MODULE = "mbsd_twin_fmu3"
# pythonfmu3 finds the slave class by a regular expression over the script text: the class
# statement itself must name Fmi3Slave.
ENTRY_SCRIPT = '''"""pythonfmu3 entry script of every mbsd-twin FMI 3.0 FMU (copied into the FMU's resources).

The slave is :class:`mbsd_twin.fmi.fmi3.MechanismSlave3`; it runs in the importing process's Python
interpreter, where mbsd-twin must be installed (see fmu/README.md). When mbsd-twin cannot be
imported here, the stand-in class of ``mbsd_twin_fmu_cause.py`` (beside this file) makes the
instantiation fail with the cause in the host's log.
"""

from pythonfmu3 import Fmi3Slave

try:
    from mbsd_twin.fmi.fmi3 import MechanismSlave3
except Exception as exc:  # mbsd-twin missing or broken in this interpreter
    from mbsd_twin_fmu_cause import unavailable

    MechanismSlave3 = unavailable(exc)


class MbsdTwinFmu3(MechanismSlave3, Fmi3Slave):
    """The FMU's slave class: the mechanism comes from the FMU's resources."""
'''
FMU_OPTIONS = {"canHandleVariableCommunicationStepSize": True, "canGetAndSetFMUState": True,
               "canSerializeFMUState": True, "canBeInstantiatedOnlyOncePerProcess": False,
               "needsExecutionTool": True}
TIME = FmuVariable("time", "independent", "continuous", "s", "simulation time")
_CAUSALITY = {"input": Fmi3Causality.input, "output": Fmi3Causality.output,
              "parameter": Fmi3Causality.parameter, "independent": Fmi3Causality.independent}
_VARIABILITY = {"continuous": Fmi3Variability.continuous, "fixed": Fmi3Variability.fixed,
                "tunable": Fmi3Variability.tunable}
# Children of <fmiModelDescription> in schema order (FMI 3.0).
FMI3_ORDER = ("ModelExchange", "CoSimulation", "ScheduledExecution", "UnitDefinitions", "TypeDefinitions",
          "LogCategories", "DefaultExperiment", "Annotations", "ModelVariables", "ModelStructure")


class MechanismSlave3(SlaveLogic, Fmi3Slave):
    """FMI 3.0 co-simulation slave of the mechanism in the FMU's resources (behaviour: SlaveLogic)."""

    STATUS_ERROR = Fmi3Status.error
    STATUS_DISCARD = Fmi3Status.discard
    STATUS_BAD_STEP = Fmi3Status.error
    STATE_FORMAT = STATE_FORMAT
    get_float64 = SlaveLogic._get_values  # fmi3GetFloat64 / fmi3SetFloat64 in bulk, not variable by variable
    set_float64 = SlaveLogic._set_values

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        with engine_notices(self.log, Fmi3Status.warning):
            meta = self._load(self.resources)
        self._describe(meta, DefaultExperiment)
        self.register_variable(Float64("time", causality=Fmi3Causality.independent,
                                       variability=Fmi3Variability.continuous, description=TIME.description,
                                       getter=lambda: self._sim.time if self._initialized else self._start_time),
                               nested=False)
        self._register_all(_float64)

    def setup_experiment(self, start_time: float) -> None:
        self._start_time = float(start_time)

    def do_step(self, current_time: float, step_size: float) -> Fmi3StepResult:
        refused = self._step(current_time, step_size)
        return Fmi3StepResult(status=Fmi3Status.ok if refused is None else refused)


def _float64(v: FmuVariable, getter: Getter, setter: Setter) -> Float64:
    return Float64(v.name, start=v.start, causality=_CAUSALITY[v.causality], variability=_VARIABILITY[v.variability],
                   description=v.description, getter=getter, setter=setter, unit=v.unit)


# ------------------------------------------------------------------ modelDescription post-processing
def float64_type_definitions(units: Sequence[str]) -> ET.Element | None:
    node = ET.Element("TypeDefinitions")
    for unit in units:
        if unit in DECLARED_TYPES:
            name, quantity = DECLARED_TYPES[unit]
            ET.SubElement(node, "Float64Type", {"name": name, "quantity": quantity, "unit": unit})
    return node if len(node) else None


def fix_float64(fv: ET.Element, var: FmuVariable) -> None:
    if fv.tag != "Float64":
        raise ValueError(f"variable {var.name!r} is not a Float64")
    vr = fv.get("valueReference")
    fv.attrib.clear()
    fv.set("name", var.name)
    fv.set("valueReference", str(vr))
    if var.description:
        fv.set("description", var.description)
    fv.set("causality", var.causality)
    fv.set("variability", var.variability)
    if var.causality in ("output", "parameter"):
        fv.set("initial", var.initial)
    dtype = declared_type(var.unit)
    if dtype:
        fv.set("declaredType", dtype)
    fv.set("unit", var.unit)
    if var.causality in ("input", "parameter") and var.start is not None:
        fv.set("start", repr(float(var.start)))


def _model_structure(variables: Sequence[FmuVariable], refs: dict[str, str]) -> ET.Element:
    node = ET.Element("ModelStructure")
    inputs = [refs[v.name] for v in variables if v.causality == "input"]
    outputs = [v for v in variables if v.causality == "output"]
    for v in outputs:
        deps = inputs if v.feedthrough else []
        ET.SubElement(node, "Output", {"valueReference": refs[v.name], "dependencies": " ".join(deps),
                                       "dependenciesKind": " ".join("dependent" for _ in deps)})
    for v in outputs:
        ET.SubElement(node, "InitialUnknown", {"valueReference": refs[v.name], "dependencies": "",
                                               "dependenciesKind": ""})
    return node


def postprocess3(xml: bytes, variables: Sequence[FmuVariable]) -> bytes:
    """pythonfmu3's modelDescription ``xml`` rewritten from the variable table (``time`` first,
    then ``variables`` in registration order): units, declared types, explicit causality,
    variability and ``initial``, exact start values, ``ModelStructure``."""
    root = ET.fromstring(xml)
    mv = root.find("ModelVariables")
    if mv is None:
        raise ValueError("modelDescription.xml has no ModelVariables")
    table = [TIME, *variables]
    fvs = list(mv)
    if [fv.get("name") for fv in fvs] != [v.name for v in table]:
        raise ValueError("modelDescription.xml variables do not match the FMU variable table")
    for fv, var in zip(fvs, table, strict=True):
        fix_float64(fv, var)
    refs = {fv.get("name", ""): fv.get("valueReference", "") for fv in fvs}
    root.set("variableNamingConvention", naming_convention([v.name for v in table]))
    units = sorted({v.unit for v in table})
    extra = {"UnitDefinitions": unit_definitions(units), "TypeDefinitions": float64_type_definitions(units),
             "ModelStructure": _model_structure(variables, refs)}
    return assemble(root, extra, FMI3_ORDER)


# ----------------------------------------------------------------------------------- build
def _fmi3_builder() -> Any:
    from pythonfmu3 import FmuBuilder

    return FmuBuilder


def build_fmu3(mechanism: str | Path | None, dest: str | Path, outputs: Sequence[str] | None = None,
               model_name: str | None = None, stop_time: float | None = None,
               step_size: float | None = None, *, step_time_limit: float = STEP_TIME_LIMIT,
               host_independent: bool = False, python: str | None = None) -> Path:
    """Build the FMI 3.0 co-simulation FMU of ``mechanism`` (``None``: the bundled slider crank)
    into ``dest`` (a ``.fmu`` file, or a folder: ``<Model>-fmi3.fmu`` there, beside the FMI 2.0 FMU's
    ``<Model>.fmu``); same arguments as :func:`~mbsd_twin.fmi.build.build_fmu`
    (``host_independent``: the native library and worker process instead of pythonfmu3's library)."""
    from .build import Flavour, build_with, finish_host_independent

    if python is not None and not host_independent:
        raise ValueError("python= is the worker interpreter of a host-independent FMU (host_independent=True)")
    flavour = Flavour(", FMI 3.0", _fmi3_builder, ENTRY_MODULE, ENTRY_SCRIPT, postprocess3, FMU_OPTIONS,
                      {"fmi_version": "3.0"}, file_tail="-fmi3")
    path = build_with(flavour, mechanism, dest, outputs, model_name, stop_time, step_size, step_time_limit)
    return finish_host_independent(path, python) if host_independent else path
