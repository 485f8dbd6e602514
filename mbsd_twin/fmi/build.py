"""Build an FMI 2.0 co-simulation FMU of a mechanism with PythonFMU, then post-process it.

    from mbsd_twin.fmi.build import build_fmu
    build_fmu(None, "dist/SliderCrank.fmu")            # the bundled slider crank
    build_fmu("my_mechanism.toml", "dist/My.fmu")

The FMU holds the entry script (:data:`ENTRY_SCRIPT`, the same text as ``fmu/mbsd_twin_fmu.py``),
the mechanism file (``resources/mechanism.toml``), ``resources/mbsd_twin_fmu.json`` and the
generated variable table (``documentation/``). It does not hold mbsd-twin: the importing process's
interpreter must have it installed.
"""

from __future__ import annotations

import html
import json
import math
import re
import shutil
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import FmuWarning
from ..model.loader import bundled_slider_crank, load_mechanism
from ..simulation.simulator import Simulator
from . import fmu_cause
from .modeldescription import postprocess
from .slave_logic import META_FILE, STEP_TIME_LIMIT
from .variables import GENERIC_OUTPUTS, SLIDER_CRANK_OUTPUTS, FmuVariable, fmu_variables, markdown_table

ENTRY_MODULE = "mbsd_twin_fmu"
ENTRY_SCRIPT = '''"""PythonFMU entry script of every mbsd-twin FMU (copied into the FMU's resources).

The slave is :class:`mbsd_twin.fmi.slave.MechanismSlave`; it runs in the importing process's Python
interpreter, where mbsd-twin must be installed (see fmu/README.md). Build with
``mbsd-twin fmu build [MECHANISM.toml] -o dist/Model.fmu``.

PythonFMU 0.7.0 runs this file again at every instantiation and releases one reference to this
module's globals each time without having taken it (``findClass`` decrefs the borrowed
``PyModule_GetDict``): without the line below, the second instance in a process crashes. Each run
keeps one reference, which balances that release.

When mbsd-twin cannot be imported here, the stand-in class of ``mbsd_twin_fmu_cause.py`` (beside
this file) makes the instantiation fail with the cause on stderr (and in the host's FMI log when
debug logging is on: PythonFMU 0.7 logs nothing otherwise).
"""

try:
    from mbsd_twin.fmi.slave import MechanismSlave
except Exception as exc:  # mbsd-twin missing or broken in this interpreter
    from mbsd_twin_fmu_cause import unavailable
    from pythonfmu import Fmi2Slave

    MechanismSlave = unavailable(exc, Fmi2Slave, echo=True)

globals().setdefault("_pythonfmu_refs", []).append(globals())


class MbsdTwinFmu(MechanismSlave):
    """The FMU's slave class: the mechanism comes from the FMU's resources."""
'''
FMU_OPTIONS = {"canHandleVariableCommunicationStepSize": True, "canGetAndSetFMUstate": True,
               "canSerializeFMUstate": True, "canBeInstantiatedOnlyOncePerProcess": False,
               "canInterpolateInputs": False, "needsExecutionTool": True}
DEFAULT_EXPERIMENT = {"start": 0.0, "stop": 5.0, "step": 0.001}


def model_identifier(name: str) -> str:
    """``slider-crank`` → ``SliderCrank``: a C identifier for the FMU's model and binary."""
    parts = [p for p in re.split(r"[^A-Za-z0-9]+", name) if p]
    ident = "".join(p[:1].upper() + p[1:] for p in parts) or "Mechanism"
    return ident if ident[0].isalpha() else "M" + ident


@dataclass(frozen=True)
class Flavour:
    """What differs between the FMI versions' builds: the PythonFMU package's builder, the entry
    script, the modelDescription post-processor, the FMU options and the tail of the default file
    name (``dest`` a folder: ``<Model><file_tail>.fmu``, so that the FMI 2.0 and 3.0 FMUs of a model
    built into one folder are two files)."""

    label: str
    builder: Callable[[], Any]
    entry_module: str
    entry_script: str
    postprocess: Callable[[bytes, Sequence[FmuVariable]], bytes]
    options: Mapping[str, Any]
    meta: Mapping[str, str]
    file_tail: str = ""


def _fmi2_builder() -> Any:
    from pythonfmu import FmuBuilder

    return FmuBuilder


def _stage(tmp: Path, mech_path: Path, meta: Mapping[str, object], flavour: Flavour) -> tuple[Path, list[Path]]:
    script = tmp / f"{flavour.entry_module}.py"
    script.write_text(flavour.entry_script, encoding="utf-8")
    files = [tmp / "mechanism.toml", tmp / META_FILE, tmp / fmu_cause.RESOURCE_NAME]
    shutil.copyfile(mech_path, files[0])
    shutil.copyfile(fmu_cause.__file__, files[2])
    files[1].write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return script, files


def _documentation(folder: Path, title: str, table_md: str) -> None:
    folder.mkdir()
    (folder / "variables.md").write_text(f"# {title}: FMU variables\n\n{table_md}", encoding="utf-8")
    rows = [line.strip("|").split(" | ") for line in table_md.splitlines()[2:]]
    cells = "\n".join("<tr>" + "".join(f"<td>{html.escape(c.strip().strip('`'))}</td>" for c in r) + "</tr>"
                      for r in rows)
    (folder / "index.html").write_text(
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head><body>"
        f"<h1>{html.escape(title)}</h1><p>Co-simulation FMU built by mbsd-twin {__version__}. It runs in the "
        "importing process's Python interpreter, which must have mbsd-twin installed.</p>"
        "<table border='1'><tr><th>name</th><th>causality</th><th>variability</th><th>unit</th><th>start</th>"
        f"<th>description</th></tr>\n{cells}</table></body></html>\n", encoding="utf-8")


def _rewrite_model_description(fmu: Path, xml: bytes) -> None:
    tmp = fmu.with_suffix(".tmp")
    with zipfile.ZipFile(fmu) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = xml if info.filename == "modelDescription.xml" else src.read(info.filename)
            dst.writestr(info.filename, data)
    tmp.replace(fmu)


def build_fmu(mechanism: str | Path | None, dest: str | Path, outputs: Sequence[str] | None = None,
              model_name: str | None = None, stop_time: float | None = None,
              step_size: float | None = None, *, step_time_limit: float = STEP_TIME_LIMIT,
              host_independent: bool = False, python: str | None = None) -> Path:
    """Build the FMI 2.0 FMU of ``mechanism`` (``None``: the bundled slider crank) into ``dest`` (a
    ``.fmu`` file, replaced if it exists, or a folder: ``<Model>.fmu`` there) and return its path.
    ``outputs``: glob patterns over the output names (see :mod:`mbsd_twin.fmi.variables`).
    ``step_time_limit``: s of wall-clock time one doStep may take before it is discarded (the host
    is never left waiting on a runaway integration).

    ``host_independent``: a native library (compiled with gcc) that runs the model in a worker
    process started with the interpreter ``python`` (default: this one), instead of PythonFMU's,
    which runs it in the host's own interpreter (:mod:`mbsd_twin.fmi.native_build`)."""
    if python is not None and not host_independent:
        raise ValueError("python= is the worker interpreter of a host-independent FMU (host_independent=True)")
    path = build_with(FMI2, mechanism, dest, outputs, model_name, stop_time, step_size, step_time_limit)
    return finish_host_independent(path, python) if host_independent else path


def finish_host_independent(path: Path, python: str | None) -> Path:
    """Turn the freshly built PythonFMU FMU at ``path`` into the host-independent one (either FMI
    version); on failure no FMU is left at ``path``."""
    from .native_build import make_host_independent

    try:
        return make_host_independent(path, python)
    except BaseException:
        path.unlink(missing_ok=True)  # never leave a PythonFMU FMU where a host-independent one was asked for
        raise


def build_with(flavour: Flavour, mechanism: str | Path | None, dest: str | Path, outputs: Sequence[str] | None,
               model_name: str | None, stop_time: float | None, step_size: float | None,
               step_time_limit: float = STEP_TIME_LIMIT) -> Path:
    """The build shared by every FMI version: stage the mechanism and metadata, run PythonFMU's
    builder, post-process modelDescription.xml, copy the FMU into place."""
    mech_path = Path(mechanism) if mechanism is not None else bundled_slider_crank()
    patterns = list(outputs or (SLIDER_CRANK_OUTPUTS if mechanism is None else GENERIC_OUTPUTS))
    mech = load_mechanism(mech_path)
    name = model_name or model_identifier(mech.name)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"model name {name!r} must be a C identifier")
    if not (isinstance(step_time_limit, int | float) and 0 < step_time_limit < math.inf):
        raise ValueError(f"step_time_limit must be a positive number of seconds, got {step_time_limit!r}")
    sim = Simulator(mech)
    if not sim.input_ports:
        warnings.warn(f"{mech_path}: {mech.name!r} has no input (no load with an `input` key), so the FMU has no "
                      "input variable and a co-simulation cannot drive it; give a force or torque load "
                      "`input = \"name\"` to make one", FmuWarning, stacklevel=3)
    table = fmu_variables(sim, patterns)
    experiment = {"start": DEFAULT_EXPERIMENT["start"], "stop": stop_time or DEFAULT_EXPERIMENT["stop"],
                  "step": step_size or DEFAULT_EXPERIMENT["step"]}
    meta = {"mechanism": "mechanism.toml", "model_name": name, "outputs": patterns,
            "mbsd_twin_version": __version__, "default_experiment": experiment, **flavour.meta,
            "step_time_limit": float(step_time_limit),
            "description": f"{mech.name}: planar multibody co-simulation model (mbsd-twin {__version__}"
                           f"{flavour.label})"}
    dest = Path(dest)
    target = dest if dest.suffix == ".fmu" else dest / f"{name}{flavour.file_tail}.fmu"
    target.parent.mkdir(parents=True, exist_ok=True)
    saved_path, saved_module = list(sys.path), sys.modules.pop(flavour.entry_module, None)
    with tempfile.TemporaryDirectory(prefix="mbsd_fmu_") as tmpd:
        tmp = Path(tmpd)
        (tmp / "src").mkdir()
        script, files = _stage(tmp / "src", mech_path, meta, flavour)
        _documentation(tmp / "doc", f"{name} ({mech.name}{flavour.label})", markdown_table(table))
        try:
            built = flavour.builder().build_FMU(script, dest=tmp / "out", project_files=files,
                                                documentation_folder=tmp / "doc", **flavour.options)
        finally:  # PythonFMU imports the entry script: leave sys.path and sys.modules as they were
            sys.path[:] = saved_path
            sys.modules.pop(flavour.entry_module, None)
            if saved_module is not None:
                sys.modules[flavour.entry_module] = saved_module
        with zipfile.ZipFile(built) as zf:
            xml = zf.read("modelDescription.xml")
        _rewrite_model_description(Path(built), flavour.postprocess(xml, table))
        shutil.copyfile(built, target)
    return target


FMI2 = Flavour("", _fmi2_builder, ENTRY_MODULE, ENTRY_SCRIPT, postprocess, FMU_OPTIONS, {})
