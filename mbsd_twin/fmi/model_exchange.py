"""The start of the Model Exchange FMU (issue #34): the version-independent ME behaviour over the
ODE form, shaped as the FMI calls, with value references. Not yet exposed by any FMU flavour: the
host-independent flavour's C shim and worker are to serve their ME entry points with it
(docs/ode-form.md, "The Model Exchange FMU (not yet built)").

Variables: the co-simulation table (``variables.fmu_variables``: inputs, outputs, parameters), then
the continuous states ``ode.x[k]`` — the free coordinates, then the free speeds, then the three
energy integrals; which coordinates they are changes at a re-partition, so they are not named after
them — then their derivatives ``der(ode.x[k])``. The value reference of a variable is its position
in :attr:`ModelExchange.variables`.

Life cycle: parameters (fixed, tunable and the ``*_start`` values) are set on the Simulator until
:meth:`exit_initialization_mode`, which takes its state as the ODE form's; then :meth:`set_time`,
:meth:`set_continuous_states`, :meth:`get_derivatives`, :meth:`get_real` (outputs at the current
state), :meth:`completed_integrator_step` (True: enter event mode for a re-partition),
:meth:`update_discrete_states` (the re-partition: the continuous states changed) and
:meth:`get_directional_derivative`. An evaluation whose dependent coordinates cannot be found raises
:class:`~mbsd_twin.AssemblyError` naming the constraints (the FMU returns Error with its message).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..simulation.ode_form import OdeForm
from ..simulation.simulator import Simulator
from .fmi3 import FMI3_ORDER, TIME, fix_float64, float64_type_definitions
from .modeldescription import FMI2_ORDER, assemble, fix_variable, type_definitions, unit_definitions
from .variables import GENERIC_OUTPUTS, FmuVariable, fmu_variables

F = NDArray[Any]
STATE = "ode.x[{k}]"
DERIVATIVE = "der(ode.x[{k}])"
ME_STATE_FORMAT = "mbsd-twin-me-state/1"


def me_variables(sim: Simulator, output_patterns: Sequence[str] = GENERIC_OUTPUTS) -> list[FmuVariable]:
    """The co-simulation table, then the ODE form's states and their derivatives."""
    ode = OdeForm(sim)
    states = [FmuVariable(STATE.format(k=k), "local", "continuous", "", f"continuous state {k}: now {name}")
              for k, name in enumerate(ode.state_names)]
    ders = [FmuVariable(DERIVATIVE.format(k=k), "local", "continuous", "", f"time derivative of ode.x[{k}]")
            for k in range(ode.n_states)]
    return [*fmu_variables(sim, output_patterns), *states, *ders]


class ModelExchange:
    """One Model Exchange instance of a Simulator's mechanism (module docstring). FMI 3.0 puts
    ``time`` at value reference 0 (as the co-simulation FMUs do), the table after it."""

    def __init__(self, sim: Simulator, output_patterns: Sequence[str] = GENERIC_OUTPUTS,
                 fmi_version: str = "2.0") -> None:
        if fmi_version not in ("2.0", "3.0"):
            raise ValueError(f"fmi_version must be '2.0' or '3.0', got {fmi_version!r}")
        self.sim, self.fmi_version = sim, fmi_version
        self.variables = [*([TIME] if fmi_version == "3.0" else []), *me_variables(sim, output_patterns)]
        self._vr = {v.name: k for k, v in enumerate(self.variables)}
        self._inputs = {self._vr[p.name]: p.name for p in sim.input_ports}
        self._states = [k for k, v in enumerate(self.variables) if v.name.startswith("ode.x[")]
        self._ders = [k for k, v in enumerate(self.variables) if v.name.startswith("der(ode.x[")]
        self._state_pos = {vr: k for k, vr in enumerate(self._states)}
        self._der_pos = {vr: k for k, vr in enumerate(self._ders)}
        self._ode: OdeForm | None = None
        self._out_index: dict[str, int] = {}
        self.t, self.x = sim.time, np.zeros(len(self._states))

    def vr(self, name: str) -> int:
        return self._vr[name]

    @property
    def ode(self) -> OdeForm:
        if self._ode is None:
            raise RuntimeError("not initialised: call exit_initialization_mode first")
        return self._ode

    # ------------------------------------------------------------ life cycle
    def exit_initialization_mode(self) -> None:
        """The ODE form at the Simulator's time, state, inputs and parameters."""
        self._ode = OdeForm(self.sim)
        self.t, self.x = self._ode.t0, self._ode.x0.copy()
        self._out_index = {name: k for k, name in enumerate(self._ode.output_names)}

    def set_time(self, t: float) -> None:
        self.t = float(t)

    def set_continuous_states(self, x: Sequence[float]) -> None:
        self.x = np.array(x, dtype=float)

    def get_continuous_states(self) -> F:
        return self.x.copy()

    def get_derivatives(self) -> F:
        return self.ode.derivatives(self.t, self.x)

    def get_nominals_of_continuous_states(self) -> F:
        return np.ones(len(self.x))

    def get_event_indicators(self) -> F:
        return np.zeros(0)

    def completed_integrator_step(self) -> bool:
        """enterEventMode: the partition's conditioning has degraded."""
        return self.ode.completed_step(self.t, self.x)

    def update_discrete_states(self) -> bool:
        """Event mode: re-partition if it is (still) called for; True when the continuous states
        changed (``valuesOfContinuousStatesChanged``, and their nominals with them)."""
        if not self.ode.completed_step(self.t, self.x):
            return False
        self.x = self.ode.repartition(self.t, self.x)
        return True

    # --------------------------------------------------------------- state
    def get_state(self) -> bytes:
        """``GetFMUstate``: time and states, and the ODE form's partition, warm start, inputs and
        cached solution (JSON bytes): :meth:`set_state` continues bit-identically."""
        data = {"format": ME_STATE_FORMAT, "t": self.t, "x": self.x.tolist(), "ode": self.ode.export()}
        return json.dumps(data).encode()

    def set_state(self, blob: bytes) -> None:
        data = json.loads(blob.decode())
        if data.get("format") != ME_STATE_FORMAT or len(data["x"]) != len(self.x):
            raise ValueError(f"not a {ME_STATE_FORMAT} state of this model")
        self.ode.restore(data["ode"])
        for name, value in self.ode.inputs.items():
            self.sim.set_input(name, value)
        self.t, self.x = float(data["t"]), np.array(data["x"], dtype=float)

    # -------------------------------------------------------------- values
    def set_real(self, vrs: Sequence[int], values: Sequence[float]) -> None:
        """Inputs (either mode), parameters (before :meth:`exit_initialization_mode`)."""
        for vr, value in zip(vrs, values, strict=True):
            v = self.variables[vr]
            if vr in self._inputs:
                self.sim.set_input(v.name, value)
                if self._ode is not None:
                    self._ode.set_input(v.name, value)
            elif v.causality == "parameter" and self._ode is None:
                self.sim.set_parameter(v.name, value)
            else:
                raise ValueError(f"{v.name} cannot be set {'now' if v.causality == 'parameter' else ''}".strip())

    def get_real(self, vrs: Sequence[int]) -> list[float]:
        """Inputs, parameters, outputs (at the current t and states), states and derivatives."""
        out: list[float] = []
        ys: F | None = None
        for vr in vrs:
            v = self.variables[vr]
            if v.causality == "independent":
                out.append(self.t)
            elif vr in self._state_pos:
                out.append(float(self.x[self._state_pos[vr]]))
            elif vr in self._der_pos:
                out.append(float(self.get_derivatives()[self._der_pos[vr]]))
            elif v.causality == "output":
                ys = self.ode.outputs(self.t, self.x) if ys is None else ys
                out.append(float(ys[self._out_index[v.name]]))
            elif vr in self._inputs:
                out.append(self.sim.get_input(v.name))
            else:
                out.append(next(float(p.value) for p in self.sim.parameters if p.name == v.name))
        return out

    def get_directional_derivative(self, unknowns: Sequence[int], knowns: Sequence[int],
                                   seed: Sequence[float]) -> list[float]:
        """``fmi2GetDirectionalDerivative`` / ``fmi3GetDirectionalDerivative``: the derivatives of
        the ``unknowns`` (derivatives, outputs) along the ``seed`` of the ``knowns`` (states,
        inputs), by :meth:`OdeForm.directional`."""
        dx, du = np.zeros(len(self.x)), dict[str, float]()
        for vr, s in zip(knowns, seed, strict=True):
            if vr in self._state_pos:
                dx[self._state_pos[vr]] += float(s)
            elif vr in self._inputs:
                du[self._inputs[vr]] = du.get(self._inputs[vr], 0.0) + float(s)
            else:
                raise ValueError(f"{self.variables[vr].name} is not a state or an input")
        dxdot, dy = self.ode.directional(self.t, self.x, dx, du)
        out = []
        for vr in unknowns:
            if vr in self._der_pos:
                out.append(float(dxdot[self._der_pos[vr]]))
            elif self.variables[vr].causality == "output":
                out.append(float(dy[self._out_index[self.variables[vr].name]]))
            else:
                raise ValueError(f"{self.variables[vr].name} is not a derivative or an output")
        return out


def model_description3(me: ModelExchange, model_name: str, token: str) -> bytes:
    """The FMI 3.0 Model Exchange modelDescription.xml of an FMI 3.0 ``me`` (``time`` at value
    reference 0): as :func:`model_description`, with FMI 3.0's Float64 variables, ``derivative``
    naming the state's value reference and ModelStructure's Output, ContinuousStateDerivative and
    InitialUnknown elements."""
    if me.fmi_version != "3.0":
        raise ValueError("model_description3 needs ModelExchange(..., fmi_version='3.0')")
    root = ET.Element("fmiModelDescription", {
        "fmiVersion": "3.0", "modelName": model_name, "instantiationToken": token, "generationTool": "",
        "variableNamingConvention": "structured"})
    ET.SubElement(root, "ModelExchange", {"modelIdentifier": model_name, "providesDirectionalDerivatives": "true",
                                          "needsCompletedIntegratorStep": "true"})
    mv = ET.SubElement(root, "ModelVariables")
    for vr, var in enumerate(me.variables):
        fv = ET.SubElement(mv, "Float64", {"valueReference": str(vr)})
        fix_float64(fv, var)
        if not var.unit:
            fv.attrib.pop("unit")
        if var.causality == "local":
            fv.set("initial", "calculated")
        if vr in me._der_pos:
            fv.set("derivative", str(me._states[me._der_pos[vr]]))
    structure = ET.SubElement(root, "ModelStructure")
    outputs = [vr for vr, v in enumerate(me.variables) if v.causality == "output"]
    for tag, refs in (("Output", outputs), ("ContinuousStateDerivative", me._ders),
                      ("InitialUnknown", sorted([*outputs, *me._states, *me._ders]))):
        for vr in refs:
            ET.SubElement(structure, tag, {"valueReference": str(vr)})
    units = sorted({v.unit for v in me.variables if v.unit})
    extra = {"UnitDefinitions": unit_definitions(units), "TypeDefinitions": float64_type_definitions(units)}
    return assemble(root, extra, FMI3_ORDER)


def model_description(me: ModelExchange, model_name: str, guid: str) -> bytes:
    """The FMI 2.0 Model Exchange modelDescription.xml of ``me``'s variables (value reference =
    position): units and declared types as in the co-simulation FMUs (``modeldescription``), the
    states ``initial="calculated"`` (assembled), each derivative naming its state, no event
    indicators, ``providesDirectionalDerivative``. ModelStructure: every output and derivative
    depends on every state and input (the dependent coordinates couple them all; omitted
    dependencies say so); the outputs, states and derivatives are the initial unknowns."""
    if me.fmi_version != "2.0":
        raise ValueError("model_description needs ModelExchange(..., fmi_version='2.0')")
    root = ET.Element("fmiModelDescription", {
        "fmiVersion": "2.0", "modelName": model_name, "guid": guid, "generationTool": "",
        "variableNamingConvention": "structured", "numberOfEventIndicators": "0"})
    ET.SubElement(root, "ModelExchange", {"modelIdentifier": model_name, "providesDirectionalDerivative": "true",
                                          "completedIntegratorStepNotNeeded": "false"})
    mv = ET.SubElement(root, "ModelVariables")
    for k, var in enumerate(me.variables):
        sv = ET.SubElement(mv, "ScalarVariable", {"name": var.name, "valueReference": str(k)})
        ET.SubElement(sv, "Real")
        fix_variable(sv, var)
        real = sv.find("Real")
        assert real is not None
        if not var.unit:
            real.attrib.pop("unit")
        if var.causality == "local":
            sv.set("initial", "calculated")
        if k in me._der_pos:
            real.set("derivative", str(me._states[me._der_pos[k]] + 1))
    structure = ET.SubElement(root, "ModelStructure")
    outputs = [k for k, v in enumerate(me.variables) if v.causality == "output"]
    for tag, indices in (("Outputs", outputs), ("Derivatives", me._ders),
                         ("InitialUnknowns", sorted([*outputs, *me._states, *me._ders]))):
        node = ET.SubElement(structure, tag)
        for k in indices:
            ET.SubElement(node, "Unknown", {"index": str(k + 1)})
    units = sorted({v.unit for v in me.variables if v.unit})
    extra = {"UnitDefinitions": unit_definitions(units), "TypeDefinitions": type_definitions(units)}
    return assemble(root, extra, FMI2_ORDER)
