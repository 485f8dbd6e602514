"""The host-independent FMI 2.0 FMU: a native library (C, compiled with gcc at build time) that runs
the model in a worker process, so that hosts without Python — C/C++ FMI tools — can load it.

    from mbsd_twin.fmi.build import build_fmu
    build_fmu(None, "dist/SliderCrank.fmu", host_independent=True)

The FMU is the PythonFMU FMU of the same mechanism (same modelDescription.xml, resources and
documentation) with PythonFMU's binaries and Python files replaced by

- ``binaries/linux64/<modelIdentifier>.so``: ``native_fmu/*.c`` compiled with the
  modelDescription's guid; it exports the FMI 2.0 co-simulation functions unprefixed;
- ``resources/mbsd_twin_python.txt``: the interpreter that starts the worker
  (``python -m mbsd_twin.fmi.worker``), by default the one running the build; the environment
  variable ``MBSD_TWIN_FMU_PYTHON`` overrides it when the FMU is loaded.

The worker (:mod:`mbsd_twin.fmi.worker`) needs mbsd-twin installed for that interpreter;
``native_fmu/`` also holds the FMI 2.0 headers (Modelica Association, 2-clause BSD licence).
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

SOURCE_DIR = Path(__file__).with_name("native_fmu")
SOURCES = ("fmi2_shim.c", "fmi2_misc.c", "worker_link.c")
PYTHON_FILE = "mbsd_twin_python.txt"
PYTHON_ENV = "MBSD_TWIN_FMU_PYTHON"
# Files of the PythonFMU FMU that the host-independent FMU does not need.
_DROPPED_PREFIXES = ("binaries/", "resources/pythonfmu/", "resources/slavemodule.txt", "resources/mbsd_twin_fmu.py")
_DOC_OLD = "It runs in the importing process's Python interpreter, which must have mbsd-twin installed."
_DOC_NEW = ("Host-independent: its native library runs the model in a Python worker process, which must have "
            "mbsd-twin installed (see resources/mbsd_twin_python.txt and the environment variable "
            f"{PYTHON_ENV}).")


class NativeBuildError(RuntimeError):
    """The native library could not be built (no gcc, a compiler error)."""


def compile_library(guid: str, dest: Path, compiler: str | None = None) -> Path:
    """Compile the FMU's shared library for this guid into ``dest`` (a ``.so`` path)."""
    cc = compiler or os.environ.get("CC") or shutil.which("gcc")
    if not cc:
        raise NativeBuildError("a host-independent FMU is compiled with gcc, which was not found "
                               "(install gcc, e.g. apt-get install gcc, or set CC)")
    if not guid or not all(c.isalnum() or c in "{}-" for c in guid):
        raise NativeBuildError(f"unexpected guid {guid!r} in modelDescription.xml")
    cmd = [cc, "-shared", "-fPIC", "-O2", "-std=gnu11", "-fvisibility=hidden", "-Wall", "-Wextra",
           f'-DMBSD_GUID="{guid}"', "-o", str(dest), *(str(SOURCE_DIR / s) for s in SOURCES)]
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
        ident, guid = cs.get("modelIdentifier", ""), md.get("guid", "")
        with tempfile.TemporaryDirectory(prefix="mbsd_native_") as tmpd:
            lib = compile_library(guid, Path(tmpd) / f"{ident}.so")
            tmp = fmu.with_suffix(".tmp")
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
                for info in zf.infolist():
                    if info.filename.startswith(_DROPPED_PREFIXES):
                        continue
                    data = zf.read(info.filename)
                    if info.filename == "documentation/index.html":
                        data = data.decode("utf-8").replace(_DOC_OLD, _DOC_NEW).encode("utf-8")
                    dst.writestr(info.filename, data)
                dst.write(lib, f"binaries/linux64/{ident}.so")
                dst.writestr(f"resources/{PYTHON_FILE}", interpreter + "\n")
    tmp.replace(fmu)
    return fmu
