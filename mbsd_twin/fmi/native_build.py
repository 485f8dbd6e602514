"""The host-independent FMUs (FMI 2.0 and 3.0): a native library (C, compiled with gcc at build time)
that runs the model in a worker process, so that hosts without Python — C/C++ FMI tools — can load it.

    from mbsd_twin.fmi.build import build_fmu
    build_fmu(None, "dist/SliderCrank.fmu", host_independent=True)
    from mbsd_twin.fmi.fmi3 import build_fmu3
    build_fmu3(None, "dist/SliderCrank3.fmu", host_independent=True)

The FMU is the PythonFMU (pythonfmu3) FMU of the same mechanism (same modelDescription.xml, resources
and documentation) with PythonFMU's binaries, sources and Python files replaced by

- ``binaries/linux64/<modelIdentifier>.so`` (FMI 3.0: ``binaries/x86_64-linux/``): the version's
  ``native_fmu/*.c`` (:data:`SOURCES`) compiled with the modelDescription's guid
  (``instantiationToken``); it exports the FMI co-simulation functions unprefixed;
- ``resources/mbsd_twin_python.txt``: the interpreter that starts the worker
  (``python -m mbsd_twin.fmi.worker``), by default the one running the build; the environment
  variable ``MBSD_TWIN_FMU_PYTHON`` overrides it when the FMU is loaded, and when neither is an
  executable file (a relocated FMU) the first ``python3`` on PATH that imports mbsd_twin is used
  (``native_fmu/shim_python.c``).

The worker (:mod:`mbsd_twin.fmi.worker`) needs mbsd-twin installed for that interpreter;
``native_fmu/`` also holds the FMI 2.0 and 3.0 headers (Modelica Association, 2-clause BSD licence).
A file ``resources/mbsd_twin_timeout.txt`` (seconds), or the environment variable
``MBSD_TWIN_FMU_TIMEOUT``, bounds the wait for each reply of the worker (fmu/README.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

from .. import __version__

SOURCE_DIR = Path(__file__).with_name("native_fmu")
COMMON_SOURCES = ("shim_core.c", "shim_python.c", "worker_link.c", "worker_frames.c", "worker_shm.c", "live_registry.c")
SOURCES = {"2.0": ("fmi2_shim.c", "fmi2_misc.c", *COMMON_SOURCES),
           "3.0": ("fmi3_shim.c", "fmi3_misc.c", *COMMON_SOURCES)}
PLATFORM_DIR = {"2.0": "binaries/linux64", "3.0": "binaries/x86_64-linux"}
PYTHON_FILE = "mbsd_twin_python.txt"
PYTHON_ENV = "MBSD_TWIN_FMU_PYTHON"
# Files of the PythonFMU (pythonfmu3) FMU that the host-independent FMU does not need.
_DROPPED_PREFIXES = ("binaries/", "sources/", "resources/pythonfmu/", "resources/pythonfmu3/",
                     "resources/slavemodule.txt", "resources/mbsd_twin_fmu.py", "resources/mbsd_twin_fmu3.py",
                     "resources/mbsd_twin_fmu_cause.py")
_DOC_OLD = "It runs in the importing process's Python interpreter, which must have mbsd-twin installed."
_DOC_NEW = ("Host-independent: its native library runs the model in a Python worker process, which must have "
            "mbsd-twin installed (see resources/mbsd_twin_python.txt and the environment variable "
            f"{PYTHON_ENV}).")


class NativeBuildError(RuntimeError):
    """The native library could not be built (no gcc, a compiler error)."""


def compile_library(guid: str, dest: Path, compiler: str | None = None, fmi_version: str = "2.0") -> Path:
    """Compile the FMU's shared library (FMI ``fmi_version``) for this guid into ``dest`` (a ``.so`` path)."""
    cc = compiler or os.environ.get("CC") or shutil.which("gcc")
    if not cc:
        raise NativeBuildError("a host-independent FMU is compiled with gcc, which was not found "
                               "(install gcc, e.g. apt-get install gcc, or set CC)")
    if not guid or not all(c.isalnum() or c in "{}-" for c in guid):
        raise NativeBuildError(f"unexpected guid {guid!r} in modelDescription.xml")
    # -z nodelete: the library stays mapped after the host's dlclose (a freed instance's reaper thread
    # may still run in it)
    cmd = [cc, "-shared", "-fPIC", "-O2", "-std=gnu11", "-fvisibility=hidden", "-pthread", "-Wall", "-Wextra",
           "-Wl,-z,nodelete", f'-DMBSD_GUID="{guid}"', f'-DMBSD_TWIN_VERSION="{__version__}"', "-o",
           str(dest),
           *(str(SOURCE_DIR / s) for s in SOURCES[fmi_version])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise NativeBuildError(f"compiling the FMU's library failed ({' '.join(cmd)}):\n{proc.stderr}")
    return dest


def make_host_independent(fmu: Path, python: str | None = None) -> Path:
    """Turn the PythonFMU FMU ``fmu`` into the host-independent one, in place. ``python``: the
    interpreter recorded for the worker (default: ``sys.executable``)."""
    interpreter = str(python or sys.executable)
    if "\n" in interpreter or not interpreter:
        raise ValueError(f"bad interpreter path {interpreter!r}")
    with zipfile.ZipFile(fmu) as zf:
        md = ET.fromstring(zf.read("modelDescription.xml"))
        cs = md.find("CoSimulation")
        if cs is None:
            raise ValueError(f"{fmu} has no CoSimulation element")
        version = md.get("fmiVersion", "2.0")
        if version not in SOURCES:
            raise ValueError(f"{fmu}: FMI version {version!r}; a host-independent FMU is FMI 2.0 or 3.0")
        ident, guid = cs.get("modelIdentifier", ""), md.get("guid" if version == "2.0" else "instantiationToken", "")
        with tempfile.TemporaryDirectory(prefix="mbsd_native_") as tmpd:
            lib = compile_library(guid, Path(tmpd) / f"{ident}.so", fmi_version=version)
            tmp = fmu.with_suffix(".tmp")
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
                for info in zf.infolist():
                    if info.filename.startswith(_DROPPED_PREFIXES):
                        continue
                    data = zf.read(info.filename)
                    if info.filename == "documentation/index.html":
                        data = data.decode("utf-8").replace(_DOC_OLD, _DOC_NEW).encode("utf-8")
                    dst.writestr(info.filename, data)
                dst.write(lib, f"{PLATFORM_DIR[version]}/{ident}.so")
                dst.writestr(f"resources/{PYTHON_FILE}", interpreter + "\n")
    tmp.replace(fmu)
    return fmu
