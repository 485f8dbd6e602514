"""Why an mbsd-twin FMU cannot start, in one line for the host's log (standard library only).

This file is also copied into every PythonFMU / pythonfmu3 FMU's resources as
``mbsd_twin_fmu_cause.py``: the entry script imports it when ``import mbsd_twin`` fails in the
host's interpreter, and the stand-in slave class it returns makes the instantiation fail with
that cause. A failing import of the entry script itself is not reported (PythonFMU 0.7 returns NULL
silently, pythonfmu3 0.3 crashes the host), hence the stand-in; an exception raised while the slave
is constructed is logged (see :func:`unavailable`).

:func:`version_problem` is the check of the mbsd-twin version recorded in the FMU at build time
against the one installed (both flavours: :class:`~mbsd_twin.fmi.slave_logic.SlaveLogic` runs it
when it loads the FMU's resources).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

META_FILE = "mbsd_twin_fmu.json"
RESOURCE_NAME = "mbsd_twin_fmu_cause.py"  # this file's name inside the FMU's resources


SHIP_DOC = "fmu/README.md, section Ship an FMU to another machine"  # no quotes: the message is shown as a repr


def wheel_name(version: str) -> str:
    """The file name of mbsd-twin ``version``'s wheel (``pip wheel . -w dist`` in its checkout)."""
    return f"mbsd_twin-{version}-py3-none-any.whl"


def _series(version: str) -> tuple[str, ...]:
    """The release series (major, minor) of a version string such as ``0.1.0``."""
    return tuple(version.split(".")[:2])


def version_problem(built: str | None, installed: str) -> str | None:
    """Why mbsd-twin ``installed`` cannot run an FMU built with ``built`` (another release series,
    major.minor: the mechanism file format and the FMU's variables may differ), or None."""
    if not built or _series(built) == _series(installed):
        return None
    return (f"this FMU was built with mbsd-twin {built} but the Python running it has mbsd-twin {installed} "
            f"({sys.executable}); install the matching version there (python -m pip install {wheel_name(built)}, "
            f"the wheel of mbsd-twin {built}: {SHIP_DOC}) or rebuild the FMU with mbsd-twin {installed} "
            "(mbsd-twin fmu build)")


def _built_with(resources: str | None) -> tuple[str, str]:
    """(model name, mbsd-twin version) recorded in the FMU's metadata, '?' where unreadable."""
    try:
        meta = json.loads((Path(resources or ".") / META_FILE).read_text(encoding="utf-8"))
        return str(meta.get("model_name", "?")), str(meta.get("mbsd_twin_version", "?"))
    except (OSError, ValueError, AttributeError):
        return "?", "?"


def missing_message(resources: str | None, exc: BaseException) -> str:
    """One line: the FMU, the interpreter that could not import mbsd-twin, the error, the fix."""
    model, built = _built_with(resources)
    known = built != "?"
    wheel, what = wheel_name(built if known else "*"), f"mbsd-twin {built}" if known else "mbsd-twin"
    python = f"{sys.executable or '?'}, Python {sys.version.split()[0]}, prefix {sys.prefix}"
    return (f"mbsd-twin FMU {model} cannot start: the Python interpreter running it ({python}) cannot import "
            f"mbsd-twin ({type(exc).__name__}: {exc}); install {what} there (python -m pip install "
            f"{wheel}, the wheel of the version this FMU was built with: {SHIP_DOC}) or build the "
            "standalone FMU (mbsd-twin fmu build --standalone), which needs no Python")


def unavailable(exc: BaseException, base: type = object, echo: bool = False) -> type:
    """The stand-in for the slave class when ``import mbsd_twin`` failed with ``exc`` (a subclass
    of ``base``: PythonFMU 0.7 looks for a subclass of its ``Fmi2Slave``): constructing it raises
    RuntimeError with :func:`missing_message`, and the instantiation fails. pythonfmu3 (FMI 3.0)
    logs that message through the host's logger (fmi3Fatal) whatever the debug setting; PythonFMU
    0.7 (FMI 2.0) drops every log message unless the host turned debug logging on, so with
    ``echo`` the message is also written to the host process's stderr."""

    def init(self: Any, **kwargs: Any) -> None:
        message = missing_message(kwargs.get("resources"), exc)
        if echo:
            print(message, file=sys.stderr, flush=True)
        raise RuntimeError(message)

    def do_step(self: Any, *args: Any) -> bool:  # abstract in PythonFMU's slave classes
        return False

    return type("Unavailable", (base,), {"__init__": init, "do_step": do_step})
