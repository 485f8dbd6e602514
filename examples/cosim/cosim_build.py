"""Build the co-simulation example: two small FMI 2.0 co-simulation FMUs written in C (a PI speed
controller and a speed set-point profile, compiled here with gcc), the host-independent slider-crank
FMU of mbsd-twin, and the SSP 1.0 file that connects them (``SystemStructure.ssd`` zipped with the
three FMUs into ``SpeedControl.ssp``).

    profile.speed         -> controller.speed_setpoint
    mechanism.crank.omega -> controller.speed
    controller.torque     -> mechanism.motor_torque

The variable tables below are the one description of the C FMUs: they write each
``modelDescription.xml`` (through mbsd-twin's own post-processor: units, declared types, model
structure) and the header ``model_vars.h`` the C model is compiled with (value references, start
values, causalities, guid).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import uuid
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mbsd_twin.fmi.build import build_fmu
from mbsd_twin.fmi.modeldescription import postprocess
from mbsd_twin.fmi.native_build import SOURCE_DIR as FMI2_HEADERS
from mbsd_twin.fmi.units import parse_unit
from mbsd_twin.fmi.variables import FmuVariable

HERE = Path(__file__).resolve().parent
C_SOURCES = HERE / "fmu_src"
SLIDER_CRANK = HERE.parent / "mechanisms" / "slider_crank.toml"
SSP_NAME = "SpeedControl"
# the name of every component's parameter set in the .ssd: libcosim applies each component's inline
# values whatever their name; Ecos applies the one named set system-wide (`ecos simulate
# --parameterSet settings`, `EcosSimulation.init(parameter_set="settings")`)
PARAMETER_SET = "settings"


@dataclass(frozen=True)
class CModel:
    """An FMU written in C: ``fmu_src/<source>`` + the generic slave ``fmu_src/fmi2_cs.c`` (and
    ``fmi2_misc.c`` of mbsd-twin's host-independent FMU)."""

    identifier: str
    source: str
    description: str
    variables: tuple[FmuVariable, ...]


def _var(name: str, causality: str, unit: str, description: str, start: float | None = None) -> FmuVariable:
    variability = "fixed" if causality == "parameter" else "continuous"
    return FmuVariable(name, causality, variability, unit, description, start)


PI_CONTROLLER = CModel("PIController", "pi_controller.c", "PI speed controller sampled at the communication step, "
                       "with a torque limit and anti-windup (integral held while the limit is driven into)", (
    _var("speed_setpoint", "input", "rad/s", "speed set-point", 0.0),
    _var("speed", "input", "rad/s", "measured speed", 0.0),
    _var("torque", "output", "N.m", "torque command: kp*e + ki*integral(e), limited to +-torque_max; "
         "computed at each step from the inputs held over it (no direct feedthrough)"),
    _var("kp", "parameter", "N.m.s/rad", "proportional gain", 4.0),
    _var("ki", "parameter", "N.m/rad", "integral gain", 40.0),
    _var("torque_max", "parameter", "N.m", "torque limit (symmetric)", 20.0),
))

SPEED_PROFILE = CModel("SpeedProfile", "speed_profile.c", "speed set-point: 0, a linear ramp to ramp_speed, "
                       "then step_speed from step_time on", (
    _var("speed", "output", "rad/s", "speed set-point at the FMU's time"),
    _var("ramp_start", "parameter", "s", "start of the ramp", 0.2),
    _var("ramp_end", "parameter", "s", "end of the ramp", 1.0),
    _var("ramp_speed", "parameter", "rad/s", "speed at the end of the ramp", 20.0),
    _var("step_time", "parameter", "s", "time of the step", 2.0),
    _var("step_speed", "parameter", "rad/s", "speed from step_time on", 30.0),
))


@dataclass(frozen=True)
class Settings:
    """The example's experiment: controller gains, set-point profile, stop time and the
    communication step (a whole number of nanoseconds: libcosim counts time in ns)."""

    controller: dict[str, float] = field(default_factory=lambda: {"kp": 4.0, "ki": 40.0, "torque_max": 20.0})
    profile: dict[str, float] = field(default_factory=lambda: {
        "ramp_start": 0.2, "ramp_end": 1.0, "ramp_speed": 20.0, "step_time": 2.0, "step_speed": 30.0})
    stop: float = 3.0
    step: float = 1e-3


def guid(model: CModel) -> str:
    """Deterministic guid: a hash of the variable table and the C sources."""
    digest = hashlib.sha256(repr([asdict(v) for v in model.variables]).encode())
    for path in (C_SOURCES / "model.h", C_SOURCES / "fmi2_cs.c", FMI2_HEADERS / "fmi2_misc.c",
                 C_SOURCES / model.source):
        digest.update(path.read_bytes())
    return "{" + str(uuid.UUID(bytes=digest.digest()[:16], version=5)) + "}"


def model_vars_header(model: CModel, model_guid: str) -> str:
    lines = [f'#define MODEL_IDENTIFIER "{model.identifier}"', f'#define MODEL_GUID "{model_guid}"',
             f"#define MODEL_N_VARS {len(model.variables)}"]
    lines += [f"#define VR_{v.name.upper()} {k}" for k, v in enumerate(model.variables)]
    starts = ", ".join(repr(float(v.start or 0.0)) for v in model.variables)
    lines += [f"#define MODEL_START {{{starts}}}",
              f'#define MODEL_CAUSALITY "{"".join(v.causality[0] for v in model.variables)}"']
    return "\n".join(lines) + "\n"


def model_description(model: CModel, model_guid: str, settings: Settings) -> bytes:
    root = ET.Element("fmiModelDescription", {
        "fmiVersion": "2.0", "modelName": model.identifier, "guid": model_guid, "description": model.description,
        "generationTool": "examples/cosim/cosim_build.py", "numberOfEventIndicators": "0"})
    ET.SubElement(root, "CoSimulation", {
        "modelIdentifier": model.identifier, "canHandleVariableCommunicationStepSize": "true",
        "canNotUseMemoryManagementFunctions": "true", "canGetAndSetFMUstate": "false",
        "canSerializeFMUstate": "false"})
    ET.SubElement(root, "DefaultExperiment", {"startTime": "0.0", "stopTime": repr(settings.stop),
                                               "stepSize": repr(settings.step)})
    mv = ET.SubElement(root, "ModelVariables")
    for k, v in enumerate(model.variables):
        sv = ET.SubElement(mv, "ScalarVariable", {"name": v.name, "valueReference": str(k)})
        ET.SubElement(sv, "Real")
    return postprocess(ET.tostring(root), list(model.variables))


def build_c_fmu(model: CModel, dest_dir: Path, settings: Settings, cc: str = "gcc") -> Path:
    """Compile ``model`` with gcc and pack ``dest_dir/<identifier>.fmu``."""
    model_guid = guid(model)
    dest_dir.mkdir(parents=True, exist_ok=True)
    fmu = dest_dir / f"{model.identifier}.fmu"
    with tempfile.TemporaryDirectory(prefix="cosim_build_") as tmp:
        (Path(tmp) / "model_vars.h").write_text(model_vars_header(model, model_guid))
        lib = Path(tmp) / f"{model.identifier}.so"
        cmd = [cc, "-shared", "-fPIC", "-O2", "-std=c11", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror",
               f"-I{tmp}", f"-I{C_SOURCES}", f"-I{FMI2_HEADERS}", "-o", str(lib), str(C_SOURCES / "fmi2_cs.c"),
               str(FMI2_HEADERS / "fmi2_misc.c"), str(C_SOURCES / model.source), "-lm"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"compiling {model.identifier} failed ({' '.join(cmd)}):\n{proc.stderr}")
        with zipfile.ZipFile(fmu, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("modelDescription.xml", model_description(model, model_guid, settings))
            zf.write(lib, f"binaries/linux64/{model.identifier}.so")
    return fmu


def build_fmus(dest_dir: Path, settings: Settings, python: str | None = None,
               standalone: bool = False) -> dict[str, Path]:
    """The three FMUs by component name: profile, controller, mechanism (host-independent, or
    ``standalone``: the engine compiled into the FMU's library, no Python at run time)."""
    plant = dest_dir / "SliderCrank.fmu"
    if standalone:
        from mbsd_twin.fmi.standalone import build_standalone

        mechanism = build_standalone(SLIDER_CRANK, plant, model_name="SliderCrank", stop_time=settings.stop,
                                     step_size=settings.step)
    else:
        mechanism = build_fmu(SLIDER_CRANK, plant, model_name="SliderCrank", stop_time=settings.stop,
                              step_size=settings.step, host_independent=True, python=python)
    return {"profile": build_c_fmu(SPEED_PROFILE, dest_dir, settings),
            "controller": build_c_fmu(PI_CONTROLLER, dest_dir, settings),
            "mechanism": mechanism}


CONNECTIONS = (("profile", "speed", "controller", "speed_setpoint"),
               ("mechanism", "crank.omega", "controller", "speed"),
               ("controller", "torque", "mechanism", "motor_torque"))
NS = {"ssd": "http://ssp-standard.org/SSP1/SystemStructureDescription",
      "ssc": "http://ssp-standard.org/SSP1/SystemStructureCommon",
      "ssv": "http://ssp-standard.org/SSP1/SystemStructureParameterValues",
      "osp": "http://opensimulationplatform.com/SSP/OSPAnnotations"}
for _prefix, _uri in NS.items():
    ET.register_namespace(_prefix, _uri)


def _q(tag: str) -> str:
    prefix, name = tag.split(":")
    return f"{{{NS[prefix]}}}{name}"


def _connectors(fmu: Path) -> list[tuple[str, str, str]]:
    """(name, kind, unit) of every input and output of an FMU."""
    with zipfile.ZipFile(fmu) as zf:
        md = ET.fromstring(zf.read("modelDescription.xml"))
    return [(sv.get("name", ""), sv.get("causality", ""), sv.find("Real").get("unit", ""))  # type: ignore[union-attr]
            for sv in md.iter("ScalarVariable") if sv.get("causality") in ("input", "output")]


def _component(elements: ET.Element, name: str, fmu: Path, parameters: dict[str, float]) -> set[str]:
    comp = ET.SubElement(elements, _q("ssd:Component"), {
        "name": name, "type": "application/x-fmu-sharedlibrary", "source": f"resources/{fmu.name}"})
    connectors = ET.SubElement(comp, _q("ssd:Connectors"))
    units = set()
    for cname, kind, unit in _connectors(fmu):
        conn = ET.SubElement(connectors, _q("ssd:Connector"), {"name": cname, "kind": kind})
        ET.SubElement(conn, _q("ssc:Real"), {"unit": unit})
        units.add(unit)
    if parameters:
        binding = ET.SubElement(ET.SubElement(comp, _q("ssd:ParameterBindings")), _q("ssd:ParameterBinding"))
        pset = ET.SubElement(ET.SubElement(binding, _q("ssd:ParameterValues")), _q("ssv:ParameterSet"),
                             {"version": "1.0", "name": PARAMETER_SET})
        params = ET.SubElement(pset, _q("ssv:Parameters"))
        for pname, value in parameters.items():
            ET.SubElement(ET.SubElement(params, _q("ssv:Parameter"), {"name": pname}), _q("ssv:Real"),
                          {"value": repr(float(value))})
    return units


def system_structure(fmus: dict[str, Path], settings: Settings) -> bytes:
    """``SystemStructure.ssd`` (SSP 1.0): the components with their connectors and parameter
    values, the connections, the units, and the default experiment with OSP's fixed-step
    algorithm annotation (libcosim reads the communication step from it)."""
    root = ET.Element(_q("ssd:SystemStructureDescription"), {"name": SSP_NAME, "version": "1.0"})
    system = ET.SubElement(root, _q("ssd:System"), {"name": SSP_NAME, "description": "PI speed control of the "
                                                     "slider crank: controller and mechanism connected both ways"})
    elements = ET.SubElement(system, _q("ssd:Elements"))
    params = {"profile": settings.profile, "controller": settings.controller, "mechanism": {}}
    units = set().union(*(_component(elements, name, fmus[name], params[name]) for name in fmus))
    connections = ET.SubElement(system, _q("ssd:Connections"))
    for start, start_c, end, end_c in CONNECTIONS:
        ET.SubElement(connections, _q("ssd:Connection"), {"startElement": start, "startConnector": start_c,
                                                          "endElement": end, "endConnector": end_c})
    unit_node = ET.SubElement(root, _q("ssd:Units"))
    for unit in sorted(units):
        ET.SubElement(ET.SubElement(unit_node, _q("ssc:Unit"), {"name": unit}), _q("ssc:BaseUnit"),
                      {k: str(e) for k, e in parse_unit(unit).exponents.items()})
    experiment = ET.SubElement(root, _q("ssd:DefaultExperiment"), {"startTime": "0.0", "stopTime": repr(settings.stop)})
    annotation = ET.SubElement(ET.SubElement(experiment, _q("ssd:Annotations")), _q("ssc:Annotation"),
                               {"type": "com.opensimulationplatform"})
    ET.SubElement(ET.SubElement(annotation, _q("osp:Algorithm")), _q("osp:FixedStepAlgorithm"),
                  {"baseStepSize": repr(settings.step)})
    ET.indent(root, space="  ")
    return ET.tostring(root, encoding="UTF-8", xml_declaration=True)


def build_ssp(dest: Path, settings: Settings | None = None, python: str | None = None,
              standalone: bool = False) -> Path:
    """Build the FMUs and ``dest`` (``SpeedControl.ssp``): ``SystemStructure.ssd`` and
    ``resources/<FMU>.fmu``. ``python``: the worker interpreter recorded in the slider-crank FMU;
    ``standalone``: the standalone slider-crank FMU instead of the host-independent one."""
    settings = settings or Settings()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cosim_fmus_") as tmp:
        fmus = build_fmus(Path(tmp), settings, python, standalone)
        with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("SystemStructure.ssd", system_structure(fmus, settings))
            for fmu in fmus.values():
                zf.write(fmu, f"resources/{fmu.name}")
    return dest


def extract_ssp(ssp: Path, dest: Path) -> Path:
    """Unpack ``ssp`` into ``dest`` and every FMU in it next to itself (``resources/X.fmu`` ->
    ``resources/X/``), the layout the C host reads."""
    shutil.rmtree(dest, ignore_errors=True)
    with zipfile.ZipFile(ssp) as zf:
        zf.extractall(dest)
    for fmu in (dest / "resources").glob("*.fmu"):
        with zipfile.ZipFile(fmu) as zf:
            zf.extractall(fmu.with_suffix(""))
    return dest
