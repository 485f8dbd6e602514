"""Hardening of the host-independent FMUs (FMI 2.0 and 3.0), issue #29 item 4: C hosts compiled here
with gcc (tests/fmi2_harden_host.c, tests/fmi3_harden_host.c) and fmpy hosts in subprocesses.

- every FMI function called with NULL or with a freed instance returns Error (3), no crash;
- fmi2FreeInstance / fmi3FreeInstance return within 1 ms and the worker is reaped in the background
  while the host lives on (its pid disappears from /proc: no zombie);
- a worker that cannot start or dies, and the compile notice, reach stderr with a silent logger;
- inputs and parameters are read back from the library without the worker (stopped with SIGSTOP),
  after a set, a reset and a state restore;
- a relocated FMU whose recorded interpreter is gone finds python3 on PATH; without one the
  error names the three places;
- generationTool names mbsd-twin and its version in every flavour (fmpy's reader);
- the pythonfmu3 flavour fails tests/fmi3_host.c (its fmi3DoStep leaves eventHandlingNeeded and
  earlyReturn unwritten), which fmu/README.md documents.
"""

from __future__ import annotations

import re
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import tomllib
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

import pytest

pytest.importorskip("pythonfmu")
pytest.importorskip("pythonfmu3")
pytest.importorskip("fmpy")
if not shutil.which("gcc"):
    pytest.skip("gcc is needed to build the host-independent FMU", allow_module_level=True)

from fmu_harness import REPO, clean_env, compile_c_host, run_script, shared_fmu, unpack  # noqa: E402

from mbsd_twin.fmi.build import build_fmu  # noqa: E402
from mbsd_twin.fmi.fmi3 import build_fmu3  # noqa: E402
from mbsd_twin.fmi.native_build import SOURCE_DIR  # noqa: E402

LIB = {"2": "binaries/linux64/SliderCrank.so", "3": "binaries/x86_64-linux/SliderCrank.so"}
# How many functions that take an instance each library exports (fmi*FreeInstance apart; FMI 2.0:
# co-simulation only, FMI 3.0: all).
N_FUNCTIONS = {"2": 30, "3": 70}


@pytest.fixture(scope="module")
def fmus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("fmus")
    return {"2": shared_fmu(tmp_path_factory, "native2", tmp / "n2" / "SliderCrank.fmu"),
            "3": shared_fmu(tmp_path_factory, "native3", tmp / "n3" / "SliderCrank.fmu")}


@pytest.fixture(scope="module")
def standalone_fmus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("standalone")
    return {v: shared_fmu(tmp_path_factory, f"standalone{v}", tmp / f"s{v}" / "SliderCrank.fmu") for v in ("2", "3")}


def _host_cmd(tmp: Path, fmu: Path, fmi: str, mode: str, *extra: str, where: str = "unpacked") -> list[str]:
    """The C host's command line on ``fmu`` unpacked into ``tmp/where``."""
    return _host_cmd_in(tmp, unpack(fmu, tmp / where), fmi, mode, *extra)


def _host_cmd_in(tmp: Path, d: Path, fmi: str, mode: str, *extra: str) -> list[str]:
    """The C host's command line on the FMU unpacked in ``d``."""
    with (d / "modelDescription.xml").open("rb") as f:
        md = ET.parse(f).getroot()
    token = md.get("guid" if fmi == "2" else "instantiationToken", "")
    res = (d / "resources").as_uri() if fmi == "2" else str(d / "resources")
    exe = compile_c_host(tmp, f"fmi{fmi}_harden_host.c", SOURCE_DIR)
    return [str(exe), str(d / LIB[fmi]), res, token, mode, *extra]


def _run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # no crash
    return proc


def _entry_points(lib: Path, fmi: str) -> set[str]:
    """The functions the library exports (nm) whose type in fmi<N>FunctionTypes.h takes an instance
    as its first argument, fmi<N>FreeInstance apart."""
    types = (SOURCE_DIR / f"fmi{fmi}FunctionTypes.h").read_text()
    first = {name for name, arg in re.findall(r"typedef\s+\w+\s*\*?\s*(\w+)TYPE\s*\(\s*(\w+)", types)
             if arg == ("fmi2Component" if fmi == "2" else "fmi3Instance")}
    exported = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout.split()
    return {name for name in exported if name in first} - {f"fmi{fmi}FreeInstance"}


def _null_and_freed(tmp_path: Path, fmu: Path, fmi: str) -> dict[str, str]:
    """Run the C host's "null" mode on ``fmu``: every function that takes an instance, with NULL and
    then with a freed instance, returns Error (3) and nothing crashes. The host's other lines."""
    cmd = _host_cmd(tmp_path, fmu, fmi, "null")
    entry_points = _entry_points(Path(cmd[1]), fmi)
    assert len(entry_points) == N_FUNCTIONS[fmi]
    proc = _run(cmd, clean_env(tmp_path))
    lines = [line.split() for line in proc.stdout.splitlines() if not line.startswith("log ")]
    for phase in ("null", "freed"):
        calls = {name: int(status) for p, name, status in (x for x in lines if len(x) == 3) if p == phase}
        assert set(calls) == entry_points  # every one
        assert set(calls.values()) == {3}, calls  # fmi2Error / fmi3Error, from every function
    values = {x[0]: x[1] for x in lines if len(x) == 2}
    assert values["instantiate"] == "ok"
    assert float(values["free_us"]) <= 1000.0  # fmi*FreeInstance returns at once
    return values


@pytest.mark.parametrize("fmi", ["2", "3"])
def test_null_and_freed_instances_are_errors_and_free_returns_at_once(fmus: dict[str, Path], tmp_path: Path,
                                                                     fmi: str) -> None:
    values = _null_and_freed(tmp_path, fmus[fmi], fmi)
    assert "reaped_ms" in values, values  # the worker's pid is gone while the host lives on: no zombie
    assert not Path(f"/proc/{values['worker']}").exists()


@pytest.mark.parametrize("fmi", ["2", "3"])
def test_standalone_null_and_freed_instances_are_errors(standalone_fmus: dict[str, Path], tmp_path: Path,
                                                        fmi: str) -> None:
    """The standalone library checks its registry of live instances (native_fmu/live_registry.c) too:
    before it, a freed instance was read after free (any non-NULL pointer counted as live)."""
    values = _null_and_freed(tmp_path, standalone_fmus[fmi], fmi)
    assert values["worker"] == "-1"  # no child process at all


def _compile_notice_python(tmp: Path) -> Path:
    """An interpreter that says what the worker says while numba compiles (a first run), then runs
    the worker: the library must pass the line on."""
    path = tmp / "python-compiling"
    path.write_text("#!/bin/sh\necho \"mbsd-twin: compiling the engine's kernels into numba's disk cache (test)\" >&2\n"
                    f'PYTHONPATH="{REPO}" exec "{sys.executable}" "$@"\n')
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("fmi", ["2", "3"])
def test_start_failure_death_and_compile_notice_reach_stderr(fmus: dict[str, Path], tmp_path: Path,
                                                             fmi: str) -> None:
    env = {**clean_env(tmp_path), "MBSD_TWIN_FMU_PYTHON": "/bin/false"}
    proc = _run(_host_cmd(tmp_path, fmus[fmi], fmi, "quiet"), env)
    assert proc.stdout.strip() == "instantiate null"
    assert "mbsd-twin FMU: the mbsd-twin worker could not start (interpreter from $MBSD_TWIN_FMU_PYTHON: " \
           "/bin/false -m mbsd_twin.fmi.worker; exit status 1)" in proc.stderr
    env["MBSD_TWIN_FMU_PYTHON"] = str(_compile_notice_python(tmp_path))
    proc = _run(_host_cmd(tmp_path, fmus[fmi], fmi, "quiet", *(["0"] if fmi == "2" else []), where="again"), env)
    assert "mbsd-twin FMU: mbsd-twin: compiling the engine's kernels into numba's disk cache (test)" in proc.stderr
    if fmi == "2":  # the worker killed before the 6th step
        assert proc.stdout.split() == ["instantiate", "ok", "step", "3"]
        assert "is gone (killed by signal 9) during fmi2DoStep" in proc.stderr


HOST = """
import json, os, signal, time
from fmpy import read_model_description, extract
fmu, fmi = {fmu!r}, {fmi!r}
md = read_model_description(fmu); d = extract(fmu)
with open(os.path.join(d, "resources", "mbsd_twin_timeout.txt"), "w") as f:
    f.write("3\\n")  # a round trip to a stopped worker would fail after 3 s
vr = {{v.name: v.valueReference for v in md.modelVariables}}
start = {{v.name: float(v.start) for v in md.modelVariables if v.start is not None}}
names = ["motor_torque", "crank.mass", "solver.rtol"]
if fmi == "2":
    from fmpy.fmi2 import FMU2Slave as Slave
else:
    from fmpy.fmi3 import FMU3Slave as Slave
s = Slave(guid=md.guid, unzipDirectory=d, modelIdentifier=md.coSimulation.modelIdentifier, instanceName="c")
s.instantiate()
if fmi == "2":
    s.setupExperiment(startTime=0.0); s.enterInitializationMode()
    get, put, get_state, set_state = s.getReal, s.setReal, s.getFMUstate, s.setFMUstate
else:
    s.enterInitializationMode(startTime=0.0)
    get, put, get_state, set_state = s.getFloat64, s.setFloat64, s.getFMUState, s.setFMUState
put([vr["crank.mass"]], [1.5]); put([vr["motor_torque"]], [2.5])
s.exitInitializationMode()
pid = int(open(f"/proc/self/task/{{os.getpid()}}/children").read().split()[0])
def frozen_read():
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        values = list(get([vr[n] for n in names]))
    finally:
        took = time.monotonic() - t0
        os.kill(pid, signal.SIGCONT)
    return dict(values=values, took=took)
out = dict(start=[start[n] for n in names], init=frozen_read())
put([vr["solver.rtol"]], [1e-6])  # tunable: a round trip, then known here
for k in range(5):
    s.doStep(k * 1e-3, 1e-3)
out["set"] = frozen_read()
state = get_state()
put([vr["motor_torque"]], [-4.0]); put([vr["solver.rtol"]], [1e-7])
out["changed"] = frozen_read()
set_state(state)
out["restored"] = frozen_read()
s.reset()
out["reset"] = frozen_read()
s.freeInstance()
print(json.dumps(out))
os._exit(0)
"""


@pytest.mark.parametrize("fmi", ["2", "3"])
def test_inputs_and_parameters_are_read_back_without_the_worker(fmus: dict[str, Path], tmp_path: Path,
                                                                fmi: str) -> None:
    r = run_script(tmp_path, HOST, env=clean_env(tmp_path), fmu=str(fmus[fmi]), fmi=fmi)
    assert r["start"] == [0.0, 1.0, 1e-8]  # the modelDescription's start values
    expected = {"init": [2.5, 1.5, 1e-8], "set": [2.5, 1.5, 1e-6], "changed": [-4.0, 1.5, 1e-7],
                "restored": [2.5, 1.5, 1e-6],  # what the state holds
                "reset": r["start"]}
    for phase, values in expected.items():
        assert r[phase]["values"] == values, phase
        assert r[phase]["took"] < 1.0, phase  # served by the library: the stopped worker was not asked


def test_relocated_fmu_finds_python3_on_path_and_else_names_the_three_places(fmus: dict[str, Path],
                                                                             tmp_path: Path) -> None:
    moved = tmp_path / "moved elsewhere"
    unpack(fmus["2"], tmp_path / "unpacked").rename(moved)
    cmd = _host_cmd_in(tmp_path, moved, "2", "start")
    (moved / "resources" / "mbsd_twin_python.txt").write_text("/nonexistent/python3\n")
    venv_bin = str(Path(sys.executable).parent)
    assert (Path(venv_bin) / "python3").exists()
    env = {"PATH": f"{venv_bin}:/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    proc = _run(cmd, env)
    assert "instantiate ok" in proc.stdout and "steps 0 0 0 0 0" in proc.stdout, proc.stdout + proc.stderr
    assert (f"using the python3 found on PATH: {venv_bin}/python3 ($MBSD_TWIN_FMU_PYTHON is not set; "
            "resources/mbsd_twin_python.txt records /nonexistent/python3, not an executable file)") in proc.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _run(cmd, {"PATH": str(empty)})
    assert "instantiate null" in proc.stdout
    why = ("no Python interpreter found (1. $MBSD_TWIN_FMU_PYTHON is not set; 2. resources/mbsd_twin_python.txt "
           f"records /nonexistent/python3, not an executable file; 3. there is no python3 on PATH ({empty}))")
    assert why in proc.stdout and why in proc.stderr  # the host's log, and stderr
    if Path("/usr/bin/python3").exists():  # a python3 on PATH without mbsd-twin (numpy, ...)
        proc = _run(cmd, {"PATH": "/usr/bin"})
        assert "3. no python3 on PATH can import mbsd_twin (tried /usr/bin/python3)" in proc.stderr


def test_generation_tool_names_mbsd_twin_in_every_flavour(tmp_path: Path) -> None:
    from fmpy import read_model_description

    own = f"mbsd-twin {tomllib.loads((REPO / 'pyproject.toml').read_text())['project']['version']}"
    built = {"pythonfmu": build_fmu(None, tmp_path / "a" / "M.fmu"),
             "pythonfmu3": build_fmu3(None, tmp_path / "b" / "M.fmu"),
             "native2": build_fmu(None, tmp_path / "c" / "M.fmu", host_independent=True),
             "native3": build_fmu3(None, tmp_path / "d" / "M.fmu", host_independent=True)}
    tools = {k: read_model_description(str(v)).generationTool for k, v in built.items()}
    assert tools["pythonfmu"] == tools["native2"] == f"{own} (PythonFMU {version('pythonfmu')})"
    for kind in ("pythonfmu3", "native3"):
        assert tools[kind].startswith(f"{own} (") and "pythonfmu" in tools[kind].lower(), tools


def test_pythonfmu3_flavour_leaves_do_step_flags_unwritten_in_a_c_host(tmp_path: Path) -> None:
    """A pythonfmu3 0.3.4 limitation, documented in fmu/README.md (FMI 3.0): tests/fmi3_host.c
    presets eventHandlingNeeded, terminateSimulation and earlyReturn to true and fails when one is
    still true after fmi3DoStep. If this test fails because the host succeeds, pythonfmu3 writes
    them now: update the README."""
    libpython = Path(str(sysconfig.get_config_var("LIBDIR")), str(sysconfig.get_config_var("LDLIBRARY")))
    if not libpython.name.endswith(".so") or not libpython.exists():
        pytest.skip("no shared libpython to preload (the pythonfmu3 binary does not link it)")
    d = unpack(build_fmu3(None, tmp_path / "p3" / "SliderCrank.fmu"), tmp_path / "unpacked")
    md = ET.parse(d / "modelDescription.xml").getroot()
    vr = {sv.get("name"): sv.get("valueReference", "") for sv in md.iter("Float64")}
    exe = compile_c_host(tmp_path, "fmi3_host.c", SOURCE_DIR)
    cmd = [str(exe), str(d / LIB["3"]), f"{d / 'resources'}/", md.get("instantiationToken", ""), "3", "0.001",
           vr["motor_torque"], "0.5", vr["crank.theta"]]
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(libpython),
           "PYTHONPATH": ":".join([str(REPO), *site.getsitepackages()])}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    # the step's status OK, terminate written, the rest not: exit 6 — or, seen once beside a second full test
    # run, a segmentation fault in the embedded interpreter's teardown after the verdict below was printed
    assert proc.returncode in (6, -signal.SIGSEGV), proc.stdout + proc.stderr
    assert ("step 0 failed: status 0, eventHandlingNeeded 1, terminateSimulation 0, earlyReturn 1, "
            "lastSuccessfulTime 0.001") in proc.stderr
    assert proc.stdout.split()[0] == "0"  # it got as far as the first step: instantiated, initialised
