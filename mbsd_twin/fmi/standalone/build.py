"""Build the standalone FMU (``mbsd-twin fmu build --standalone``): the FMI 2.0 or 3.0 FMU of the
other flavours (same modelDescription.xml, documentation and mechanism file in the resources) with
one shared library that holds the engine and the mechanism:

- the engine's object code (:mod:`.engine_object`: the compiled stepper's numba kernels, emitted by
  LLVM for this CPU with position-independent code);
- the mechanism's data (:mod:`.model_data`: the compiled Simulator's arrays after construction);
- the C layer ``c/`` (instance, variables, FMU state, numba's allocation) and the FMI version's
  miscellaneous functions from ``native_fmu/``.

The library needs libc and libm only: no Python, no worker process, no file read at run time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from ...model.loader import bundled_slider_crank, load_mechanism
from ..native_build import _DROPPED_PREFIXES, PLATFORM_DIR, SOURCE_DIR, NativeBuildError
from ..variables import GENERIC_OUTPUTS, SLIDER_CRANK_OUTPUTS, fmu_variables
from .engine_object import cpu_check_source, engine_object
from .model_data import c_source, check_mechanism, value_references
from .source_fmu import compiled_files, source_files, with_source_list

C_DIR = Path(__file__).with_name("c")
C_SOURCES = ("sa_core.c", "sa_io.c", "sa_init.c", "sa_state.c", "sa_runtime.c")
FMI_SOURCES = {"2.0": (C_DIR / "sa_fmi2.c", SOURCE_DIR / "fmi2_misc.c"),
               "3.0": (C_DIR / "sa_fmi3.c", SOURCE_DIR / "fmi3_misc.c")}
_DOC_OLD = "It runs in the importing process's Python interpreter, which must have mbsd-twin installed."
_DOC_NEW = ("Standalone: its shared library holds the engine and the mechanism (libc and libm only: no Python, "
            "no worker process).")


def compile_standalone(guid: str, model_c: str, dest: Path, fmi_version: str = "2.0") -> Path:
    """Link the standalone library (FMI ``fmi_version``) for ``guid`` with the model data source
    ``model_c`` into ``dest``."""
    cc = os.environ.get("CC") or shutil.which("gcc")
    if not cc:
        raise NativeBuildError("a standalone FMU is linked with gcc, which was not found (install gcc or set CC)")
    if not guid or not all(c.isalnum() or c in "{}-" for c in guid):
        raise NativeBuildError(f"unexpected guid {guid!r} in modelDescription.xml")
    work = dest.parent
    (work / "engine.o").write_bytes(engine_object())
    (work / "model_data.c").write_text(model_c, encoding="utf-8")
    (work / "engine_cpu.c").write_text(cpu_check_source(), encoding="utf-8")
    sources = [*FMI_SOURCES[fmi_version], *(C_DIR / s for s in C_SOURCES), work / "model_data.c",
               work / "engine_cpu.c"]
    cmd = [cc, "-shared", "-fPIC", "-O3", "-fno-semantic-interposition", "-fno-plt", "-std=gnu11",
           "-fvisibility=hidden", "-Wall", "-Wextra",
           f"-I{C_DIR}", f"-I{SOURCE_DIR}", f'-DMBSD_GUID="{guid}"', "-o", str(dest), *map(str, sources),
           str(work / "engine.o"), "-lm", "-Wl,--no-undefined", "-Wl,--as-needed"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise NativeBuildError(f"linking the standalone FMU's library failed ({' '.join(cmd)}):\n{proc.stderr}")
    return dest


def make_standalone(fmu: Path, mechanism: Path, outputs: Sequence[str], source: bool = False) -> Path:
    """Turn the freshly built PythonFMU FMU ``fmu`` of ``mechanism`` (output patterns ``outputs``)
    into the standalone one (with ``source``: also the source FMU's ``sources/``), in place."""
    sim = check_mechanism(load_mechanism(mechanism))
    table = fmu_variables(sim, outputs)
    with zipfile.ZipFile(fmu) as zf:
        xml = zf.read("modelDescription.xml")
        text = xml.decode("utf-8")
        version = "3.0" if 'fmiVersion="3.0"' in text else "2.0"
        ident = text.split('modelIdentifier="', 1)[1].split('"', 1)[0]
        guid = text.split('guid="' if version == "2.0" else 'instantiationToken="', 1)[1].split('"', 1)[0]
        model_c = c_source(sim, table, value_references(xml))
        text = text.replace('needsExecutionTool="true"', 'needsExecutionTool="false"')
        sources = source_files(version, ident, guid, model_c) if source else {}
        if source and version == "2.0":
            text = with_source_list(text, compiled_files(version))
        xml = text.encode("utf-8")
        with tempfile.TemporaryDirectory(prefix="mbsd_standalone_") as tmpd:
            lib = compile_standalone(guid, model_c, Path(tmpd) / f"{ident}.so", version)
            tmp = fmu.with_suffix(".tmp")
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
                for info in zf.infolist():
                    if info.filename.startswith(_DROPPED_PREFIXES) or info.filename.endswith("mbsd_twin_fmu.json"):
                        continue
                    data = xml if info.filename == "modelDescription.xml" else zf.read(info.filename)
                    if info.filename == "documentation/index.html":
                        data = data.decode("utf-8").replace(_DOC_OLD, _DOC_NEW).encode("utf-8")
                    dst.writestr(info.filename, data)
                dst.write(lib, f"{PLATFORM_DIR[version]}/{ident}.so")
                for name, data in sources.items():
                    dst.writestr(f"sources/{name}", data)
    tmp.replace(fmu)
    return fmu


def build_standalone(mechanism: str | Path | None, dest: str | Path, outputs: Sequence[str] | None = None,
                     model_name: str | None = None, stop_time: float | None = None, step_size: float | None = None,
                     fmi_version: str = "2", source: bool = False) -> Path:
    """Build the standalone FMU (FMI ``fmi_version`` "2" or "3"; with ``source``, the source FMU:
    also ``sources/``, see :mod:`.source_fmu`) of ``mechanism`` (``None``: the bundled slider crank)
    into ``dest`` (a ``.fmu`` file or a folder); on failure no FMU is left."""
    if fmi_version == "3":
        from ..fmi3 import build_fmu3 as build
    else:
        from ..build import build_fmu as build
    mech_path = Path(mechanism) if mechanism is not None else bundled_slider_crank()
    check_mechanism(load_mechanism(mech_path))  # refused before PythonFMU's build
    path = build(mechanism, dest, outputs=outputs, model_name=model_name, stop_time=stop_time, step_size=step_size)
    patterns = list(outputs or (SLIDER_CRANK_OUTPUTS if mechanism is None else GENERIC_OUTPUTS))
    try:
        return make_standalone(path, mech_path, patterns, source)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
