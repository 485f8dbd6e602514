"""What the FMU tests share: fmpy runs and host scripts in subprocesses (a PythonFMU FMU runs in the
importer's interpreter and can abort it at exit, NTNU-IHB/PythonFMU#228, so every FMU runs in a
process of its own whose script ends with ``os._exit`` after printing its result), and, for the
host-independent FMUs, the C hosts compiled with gcc and the worker interpreter that imports this
checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

import mbsd_twin

REPO = Path(mbsd_twin.__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def importer(fmu: Path, out: Path, stop: float, step: float, inputs: dict[str, str],
             kind: str = "fmpy") -> subprocess.Popen[str]:
    """``python -m mbsd_twin.fmi.importers KIND FMU`` in a subprocess, results into ``out`` (npz)."""
    cmd = [sys.executable, "-m", "mbsd_twin.fmi.importers", kind, str(fmu), "--stop", repr(stop), "--step",
           repr(step), *(f"--input={name}={profile}" for name, profile in inputs.items()), "--out", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen[str], out: Path) -> dict[str, np.ndarray]:
    """Wait for an :func:`importer` run; its results by output name (and ``time``)."""
    log, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0 and out.exists(), log
    with np.load(out) as data:
        return {k: np.array(data[k]) for k in data.files}


def run_script(tmp_path: Path, text: str, env: dict[str, str] | None = None, **kw: object) -> dict[str, Any]:
    """Run ``text`` (dedented; formatted with ``kw`` if any) in a Python subprocess that must exit 0
    and print a JSON object last; that object, with ``log``: everything the process printed."""
    path = tmp_path / "scenario.py"
    text = textwrap.dedent(text)
    path.write_text(text.format(**kw) if kw else text)
    proc = subprocess.run([sys.executable, "-W", "ignore", str(path)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["log"] = proc.stdout + proc.stderr
    return result


def compile_c_host(tmp: Path, source: str, include: Path) -> Path:
    """``tests/<source>`` compiled with gcc against the FMI headers in ``include``."""
    exe = tmp / Path(source).stem
    proc = subprocess.run(["gcc", "-O1", "-Wall", "-Werror", f"-I{include}", "-o", str(exe), str(TESTS / source),
                           "-ldl"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return exe


def wrapper_python(tmp: Path) -> Path:
    """An interpreter for MBSD_TWIN_FMU_PYTHON that imports this checkout's mbsd_twin."""
    path = tmp / "python-for-worker"
    path.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" "$@"\n')
    path.chmod(0o755)
    return path


def clean_env(tmp: Path) -> dict[str, str]:
    """A host environment without Python's variables or LD_PRELOAD: the worker's interpreter comes
    from MBSD_TWIN_FMU_PYTHON (a wrapper that puts this checkout on its path)."""
    return {"PATH": "/usr/bin:/bin", "MBSD_TWIN_FMU_PYTHON": str(wrapper_python(tmp))}


def unpack(fmu: Path, dest: Path) -> Path:
    with zipfile.ZipFile(fmu) as zf:
        zf.extractall(dest)
    return dest


def children_code() -> str:
    """Python source of ``children()``: the pids of this process's children, and ``leftover()``: those
    still there (alive or zombies) after waiting up to 10 s for a freed instance's worker to be
    reaped in the background (for host scripts; a value for :func:`run_script`'s formatting, so its
    braces are single)."""
    return textwrap.dedent("""
        def children():
            pids = set()
            for task in os.listdir("/proc/self/task"):
                try:
                    with open(f"/proc/self/task/{task}/children") as f:
                        pids |= {int(p) for p in f.read().split()}
                except FileNotFoundError:  # a thread that ended meanwhile (e.g. a worker's reaper)
                    pass
            return pids
        def leftover():
            import time as _time
            end = _time.monotonic() + 10
            while children() and _time.monotonic() < end:
                _time.sleep(0.01)
            return sorted(children())
        """)


SHARED_KINDS = ("pythonfmu2", "pythonfmu3", "native2", "native3", "standalone2", "standalone3")


def _build_kind(kind: str, dest: Path) -> Path:
    from mbsd_twin.fmi.build import build_fmu
    from mbsd_twin.fmi.fmi3 import build_fmu3
    from mbsd_twin.fmi.standalone import build_standalone

    build = build_fmu3 if kind.endswith("3") else build_fmu
    if kind.startswith("standalone"):
        return build_standalone(None, dest, fmi_version=kind[-1])
    return build(None, dest, host_independent=kind.startswith("native"))


def _run_folder(factory: Any) -> Path:
    """A folder of this test run that every xdist worker of it sees (the workers' temporary folders
    are siblings in it); without xdist the run's own temporary folder."""
    base = Path(factory.getbasetemp())
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def run_once(factory: Any, name: str, build: Any, dest: Path) -> Path:
    """``build(path)`` (it writes the file ``path`` and returns it) done once per test run under
    ``name`` — the first module that asks builds, under a lock that the run's other xdist workers
    wait on (each worker would otherwise build it again) — and the result copied to ``dest``: each
    module its own file, so that one that unpacks, edits or locks it touches no other module's.
    ``factory``: pytest's ``tmp_path_factory``."""
    import fcntl
    import shutil

    folder = _run_folder(factory) / "built-once" / name
    folder.mkdir(parents=True, exist_ok=True)
    built = folder / dest.name
    with open(folder / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built.exists():
            Path(build(folder / "building" / dest.name)).replace(built)
    dest.parent.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy2(built, dest))


def shared_fmu(factory: Any, kind: str, dest: Path) -> Path:
    """The bundled slider crank's FMU of ``kind`` (:data:`SHARED_KINDS`: PythonFMU, host-independent
    or standalone; FMI 2 or 3), built once per test run with the call a module would make
    (:func:`run_once`) and copied to ``dest``."""
    assert kind in SHARED_KINDS, kind
    return run_once(factory, kind, lambda path: _build_kind(kind, path), dest)
