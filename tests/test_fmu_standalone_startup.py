"""The standalone FMU starts nothing: a C host without Python (tests/standalone_start_host.c) run with
an empty environment (``env -i``: no PATH, no HOME) on the FMU unpacked and then moved to another
folder, under ``strace -f`` watching every way to start a process or a thread (execve, clone, clone3,
fork, vfork). The only one allowed is the host's own execve; a clone of any kind, a thread
(CLONE_THREAD) included, is a failure: the library runs on the caller's thread and starts no worker.

The same host times the start (dlopen → the first step's outputs) and fmi*FreeInstance; the figures
are benchmark figures (benchmarks/bench_fmu.py: targets ≤ 20 ms and ≤ 1 ms); here the bounds are
generous enough not to flake on a loaded machine, and only catch a start that waits for something.
"""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pythonfmu")
pytest.importorskip("pythonfmu3")
if not shutil.which("gcc"):
    pytest.skip("gcc is needed to build the standalone FMU", allow_module_level=True)
STRACE = shutil.which("strace") or ("/usr/bin/strace" if Path("/usr/bin/strace").exists() else None)
if STRACE is None:  # .ci/run installs it (Debian package strace)
    pytest.skip("strace is not installed (apt-get install strace)", allow_module_level=True)

from fmu_harness import compile_c_host, shared_fmu, unpack  # noqa: E402

from mbsd_twin.fmi.native import run_native  # noqa: E402
from mbsd_twin.fmi.native_build import SOURCE_DIR  # noqa: E402
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism  # noqa: E402

STEPS, STEP = 500, 1e-3
PLATFORM = {"2": "linux64", "3": "x86_64-linux"}
TOKEN = {"2": "guid", "3": "instantiationToken"}


@pytest.fixture(scope="module")
def fmus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("standalone")
    return {v: shared_fmu(tmp_path_factory, f"standalone{v}", tmp / f"fmi{v}" / "SliderCrank.fmu") for v in ("2", "3")}


def _host_command(fmu: Path, tmp: Path, version: str) -> list[str]:
    """The host's arguments on ``fmu`` unpacked and moved elsewhere: the theta output first."""
    first = unpack(fmu, tmp / "unpacked")
    root = tmp / "elsewhere" / "fmu"
    root.parent.mkdir()
    first.rename(root)
    md = ET.parse(root / "modelDescription.xml").getroot()
    variables = md.find("ModelVariables")
    assert variables is not None
    vr = {v.get("name", ""): v.get("valueReference", "") for v in variables}
    outs = [vr["crank.theta"]] + [v.get("valueReference", "") for v in variables if v.get("causality") == "output"]
    host = compile_c_host(tmp, "standalone_start_host.c", SOURCE_DIR)
    lib = root / "binaries" / PLATFORM[version] / "SliderCrank.so"
    return [str(host), version, str(lib), md.get(TOKEN[version], ""), str(STEPS), repr(STEP), vr["motor_torque"],
            *outs]


def _figures(stdout: str) -> dict[str, float]:
    return {k: float(v) for k, v in (line.split() for line in stdout.strip().splitlines())}


@pytest.mark.parametrize("version", ["2", "3"])
def test_no_process_or_thread_is_started_and_the_start_is_quick(fmus: dict[str, Path], tmp_path: Path,
                                                                version: str) -> None:
    cmd = _host_command(fmus[version], tmp_path, version)
    trace = tmp_path / "strace.log"
    traced = subprocess.run(["env", "-i", STRACE, "-f", "-qq", "-o", str(trace), "-e",
                             "trace=execve,clone,clone3,fork,vfork", *cmd], capture_output=True, text=True, timeout=300)
    assert traced.returncode == 0, traced.stdout + traced.stderr
    lines = [line for line in trace.read_text().splitlines() if line.strip()]
    calls = [line for line in lines if "(" in line]
    assert len(calls) == 1 and calls[0].split(None, 1)[1].startswith(f'execve("{cmd[0]}"'), lines
    assert "/* 0 vars */" in calls[0] and calls[0].endswith("= 0")  # the host's own exec, empty environment
    assert not [line for line in lines if any(f"{s}(" in line for s in ("clone", "clone3", "fork", "vfork"))]
    assert len({line.split()[0] for line in lines}) == 1  # one task all along: no process, no thread
    # the result is the Simulator's
    theta = _figures(traced.stdout)["theta"]
    times = np.round(np.arange(STEPS + 2) * STEP, 12)
    ref = run_native(load_mechanism(bundled_slider_crank()), times, {"motor_torque": lambda t: 2.0}, ["crank.theta"])
    assert abs(theta - ref["crank.theta"][-1]) <= 1e-9
    # timed without strace: the start and the free, generous bounds (benchmark targets: 20 ms, 1 ms)
    plain = subprocess.run(["env", "-i", *cmd], capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    figures = _figures(plain.stdout)
    assert figures["theta"] == theta
    assert figures["first"] < 500_000.0, figures  # µs: dlopen, instantiate, initialise, first step
    assert figures["free"] < 50_000.0, figures  # µs: fmi*FreeInstance
