"""An FMU that cannot start says why, in one line, without the host's debug logging (issue #18).

Every flavour (PythonFMU FMI 2.0, pythonfmu3 FMI 3.0, host-independent FMI 2.0 and 3.0) is
instantiated by fmpy's ``simulate_fmu`` with its defaults (``debug_logging=False``):

- in a fresh environment without mbsd-twin: a venv made here whose only packages are the test
  venv's site-packages folder listed in a ``.pth`` file — fmpy and numpy import, mbsd-twin (an
  editable install, itself a ``.pth`` hook that a listed folder does not run) does not;
- with mbsd-twin installed but another release series recorded in the FMU at build time.

FMI 3.0 and the host-independent FMUs log the cause through the FMI logger; PythonFMU 0.7 (FMI 2.0)
drops every log message unless debug logging is on, so its cause is on the host's stderr (and in
its FMI log with debug logging on).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("fmpy")
pytest.importorskip("pythonfmu3")
if not shutil.which("gcc"):
    pytest.skip("gcc is needed to build the host-independent FMUs", allow_module_level=True)

from fmu_harness import REPO, shared_fmu, wrapper_python  # noqa: E402

from mbsd_twin import __version__  # noqa: E402

FLAVOURS = ("pythonfmu", "pythonfmu3", "native", "native3")
HOST = """
import os, sys
from fmpy import simulate_fmu
try:
    simulate_fmu(sys.argv[1], stop_time=0.002, output_interval=0.001)
    print("RESULT ok")
except Exception as e:
    print("RESULT failed:", type(e).__name__, e)
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
"""


@pytest.fixture(scope="module")
def fmus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("startup")
    return {"pythonfmu": shared_fmu(tmp_path_factory, "pythonfmu2", tmp / "a" / "SliderCrank.fmu"),
            "pythonfmu3": shared_fmu(tmp_path_factory, "pythonfmu3", tmp / "b" / "SliderCrank.fmu"),
            "native": shared_fmu(tmp_path_factory, "native2", tmp / "c" / "SliderCrank.fmu"),
            "native3": shared_fmu(tmp_path_factory, "native3", tmp / "d" / "SliderCrank.fmu")}


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv's interpreter that sees the test venv's packages (fmpy, numpy …) but not mbsd-twin."""
    env = tmp_path_factory.mktemp("env") / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "host_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run([str(python), "-c", "import fmpy, numpy\nimport mbsd_twin"], capture_output=True,
                           text=True, cwd=env, env={"PATH": "/usr/bin:/bin"})
    assert "No module named 'mbsd_twin'" in probe.stderr, probe.stderr  # fmpy and numpy did import
    return python


def _host(python: Path, fmu: Path, env: dict[str, str], cwd: Path) -> str:
    """fmpy's simulate_fmu on ``fmu`` in ``python``, default logging; everything it printed."""
    script = cwd / "host.py"
    script.write_text(HOST)
    proc = subprocess.run([str(python), str(script), str(fmu)], capture_output=True, text=True, timeout=600,
                          cwd=cwd, env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), **env})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def _with_version(fmu: Path, version: str, dest: Path) -> Path:
    """A copy of ``fmu`` that says it was built with mbsd-twin ``version``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(fmu) as src, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "resources/mbsd_twin_fmu.json":
                meta = json.loads(data)
                meta["mbsd_twin_version"] = version
                data = json.dumps(meta).encode()
            out.writestr(info, data)
    return dest


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_fresh_environment_without_mbsd_twin_logs_the_cause(fmus: dict[str, Path], fresh_python: Path,
                                                           tmp_path: Path, flavour: str) -> None:
    log = _host(fresh_python, fmus[flavour], {"MBSD_TWIN_FMU_PYTHON": str(fresh_python)}, tmp_path)
    assert "RESULT failed" in log and "RESULT ok" not in log, log
    assert "No module named 'mbsd_twin'" in log, log
    if flavour.startswith("native"):  # the worker could not start: the library's error message
        assert "the mbsd-twin worker could not start" in log, log
        assert f"python -m pip install mbsd_twin-{__version__}-py3-none-any.whl" in log, log
        assert "[ERROR]" in log, log  # through the FMI logger
    else:  # the stand-in slave of the FMU's entry script: one line, the interpreter and the fix
        line = next(ln for ln in log.splitlines() if "cannot import mbsd-twin" in ln)
        assert f"mbsd-twin FMU SliderCrank cannot start: the Python interpreter running it ({fresh_python}" in line
        assert "(ModuleNotFoundError: No module named 'mbsd_twin')" in line
        assert f"python -m pip install mbsd_twin-{__version__}-py3-none-any.whl" in line
        assert ("[FATAL]" in log) == (flavour == "pythonfmu3"), log  # FMI 3.0: through the FMI logger


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_other_recorded_mbsd_twin_version_fails_with_both_versions(fmus: dict[str, Path], tmp_path: Path,
                                                                  flavour: str) -> None:
    old = _with_version(fmus[flavour], "0.0.3", tmp_path / "old" / "SliderCrank.fmu")
    env = {"PYTHONPATH": str(REPO), "MBSD_TWIN_FMU_PYTHON": str(wrapper_python(tmp_path))}
    log = _host(Path(sys.executable), old, env, tmp_path)
    assert "RESULT failed" in log, log
    expected = (f"mbsd-twin FMU SliderCrank cannot start: this FMU was built with mbsd-twin 0.0.3 but the Python "
                f"running it has mbsd-twin {__version__}")
    assert expected in log and "python -m pip install mbsd_twin-0.0.3-py3-none-any.whl" in log, log
    assert "Traceback" not in log, log  # the cause, not a stack
    if flavour != "pythonfmu":
        assert "[FATAL]" in log or "[ERROR]" in log, log  # through the FMI logger


def test_same_series_other_patch_version_starts(fmus: dict[str, Path], tmp_path: Path) -> None:
    major, minor, *_ = __version__.split(".")
    patched = _with_version(fmus["pythonfmu3"], f"{major}.{minor}.99", tmp_path / "p" / "SliderCrank.fmu")
    log = _host(Path(sys.executable), patched, {"PYTHONPATH": str(REPO)}, tmp_path)
    assert "RESULT ok" in log, log


NOTICE_AT_ONCE = "import mbsd_twin.compiled.nb_cache as c; c.NOTICE_AFTER = 0.0"  # every load "takes long"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_first_instantiation_announces_the_compile_without_debug_logging(fmus: dict[str, Path], tmp_path: Path,
                                                                         flavour: str) -> None:
    """The compile notice of a first run after an install (``nb_cache.compile_notice``: logged when
    loading the kernels takes longer than NOTICE_AFTER, 2 s) reaches the host. A real cold compile
    takes minutes here, so the threshold is 0 s in the process that builds the Simulator (the host
    for the PythonFMU flavours, the worker for the host-independent ones): the notice fires on a
    load from the warm cache, through the same path."""
    worker = tmp_path / "python-notice"
    worker.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -c "{NOTICE_AT_ONCE}; import sys; '
                      'from mbsd_twin.fmi.worker import main; sys.exit(main(sys.argv[1:]))" "$3"\n')
    worker.chmod(0o755)
    host = tmp_path / "notice_host.py"
    host.write_text(NOTICE_AT_ONCE + "\n" + HOST)
    proc = subprocess.run([sys.executable, str(host), str(fmus[flavour])], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                                          "PYTHONPATH": str(REPO), "MBSD_TWIN_FMU_PYTHON": str(worker)})
    assert proc.returncode == 0 and "RESULT ok" in proc.stdout, proc.stdout + proc.stderr
    notice = "mbsd-twin: compiling the engine's kernels into numba's disk cache"
    if flavour == "pythonfmu":  # PythonFMU 0.7 passes no log message on without debug logging: stderr
        assert notice in proc.stderr and "[WARNING]" not in proc.stdout, proc.stdout + proc.stderr
    else:  # the FMI logger, as a warning (the native library while it waits for the worker)
        assert f"[WARNING] {notice}" in proc.stdout, proc.stdout + proc.stderr
