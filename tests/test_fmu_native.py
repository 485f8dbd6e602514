"""The host-independent FMI 2.0 FMU (``build_fmu(..., host_independent=True)``): a C library that runs
the model in a worker process. Checked against the PythonFMU FMU of the same mechanism (bit for
bit), in fmpy and in a C host compiled here with gcc that runs without Python; FMU state, a killed
worker, a bad interpreter, fmpy's validation. Python hosts run in subprocesses ending with
``os._exit`` (the PythonFMU FMU can abort a process at exit, NTNU-IHB/PythonFMU#228).

The workers import mbsd_twin from the interpreter the test runs; the clean-environment C host gets
a wrapper interpreter (``MBSD_TWIN_FMU_PYTHON``) that puts this checkout on the worker's path.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pythonfmu")
pytest.importorskip("fmpy")
if not shutil.which("gcc"):
    pytest.skip("gcc is needed to build the host-independent FMU", allow_module_level=True)

from fmu_harness import (  # noqa: E402
    children_code,
    clean_env,
    compile_c_host,
    finish,
    importer,
    run_script,
    shared_fmu,
    unpack,
)

from mbsd_twin import __version__  # noqa: E402
from mbsd_twin.fmi.native_build import SOURCE_DIR  # noqa: E402

STOP, STEP = 1.0, 1e-3
SWITCH = 0.5005                      # torque 2 N·m, then -1 N·m from the first point at or after 0.5005 s
TORQUE = f"pwc:2:{SWITCH}:-1"


@pytest.fixture(scope="module")
def fmus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("fmus")
    return {"pythonfmu": shared_fmu(tmp_path_factory, "pythonfmu2", tmp / "py" / "SliderCrank.fmu"),
            "native": shared_fmu(tmp_path_factory, "native2", tmp / "native" / "SliderCrank.fmu")}


def _fmpy_run(fmu: Path, out: Path) -> dict[str, np.ndarray]:
    return finish(importer(fmu, out, STOP, STEP, {"motor_torque": TORQUE}), out)


@pytest.fixture(scope="module")
def runs(fmus: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, np.ndarray]]:
    tmp = tmp_path_factory.mktemp("runs")
    return {kind: _fmpy_run(fmu, tmp / f"{kind}.npz") for kind, fmu in fmus.items()}


def _model_description(fmu: Path) -> ET.Element:
    with zipfile.ZipFile(fmu) as zf:
        return ET.fromstring(zf.read("modelDescription.xml"))


def test_contents_and_model_description_match_the_pythonfmu_flavour(fmus: dict[str, Path]) -> None:
    py, native = (_model_description(fmus[k]) for k in ("pythonfmu", "native"))
    for root in (py, native):  # differ by build: the guid and the time stamp
        del root.attrib["guid"], root.attrib["generationDateAndTime"]
    assert ET.tostring(py) == ET.tostring(native)
    with zipfile.ZipFile(fmus["native"]) as zf:
        names = set(zf.namelist())
        assert zf.read("resources/mbsd_twin_python.txt").decode().strip() == sys.executable
    assert "binaries/linux64/SliderCrank.so" in names
    assert not any(n.startswith(("resources/pythonfmu/", "binaries/win64/")) for n in names)
    assert {"resources/mechanism.toml", "resources/mbsd_twin_fmu.json"} <= names


def test_fmpy_validate_and_fmutool_check_report_no_problem(fmus: dict[str, Path]) -> None:
    from fmpy.validation import validate_fmu

    from mbsd_twin.fmi.validation import check_fmu

    assert validate_fmu(str(fmus["native"])) == []
    assert check_fmu(fmus["native"]) == []  # fmpy validate and fmutool -check


def test_fmpy_results_equal_the_pythonfmu_flavour_bit_for_bit(runs: dict[str, dict[str, np.ndarray]]) -> None:
    py, native = runs["pythonfmu"], runs["native"]
    assert sorted(py) == sorted(native) and len(native["time"]) == 1001
    for name in py:
        np.testing.assert_array_equal(native[name], py[name], err_msg=name)
    omega = native["crank.omega"]
    assert omega[500] > 5.0 and omega[-1] < omega[500]  # spun up by +2 N·m, slowed by -1 N·m
    work = float(np.abs(native["energy.input_work"]).max())
    assert float(np.abs(native["energy.balance_error"]).max()) < 1e-6 * work  # energy is conserved


@pytest.mark.parametrize("transport", ["shm", "socket"])  # the step through the shared page, or socket messages
def test_c_host_without_python_equals_fmpy(fmus: dict[str, Path], runs: dict[str, dict[str, np.ndarray]],
                                           tmp_path: Path, transport: str) -> None:
    unpacked = unpack(fmus["native"], tmp_path / "unpacked fmu #1")  # the resource URI carries percent escapes
    md = _model_description(fmus["native"])
    variables = md.find("ModelVariables")
    assert variables is not None
    vr = {sv.get("name"): sv.get("valueReference", "") for sv in variables}
    outputs = [sv.get("name", "") for sv in variables if sv.get("causality") == "output"]
    lib = unpacked / "binaries" / "linux64" / "SliderCrank.so"
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    assert "libpython" not in needed
    env = {**clean_env(tmp_path), "MBSD_TWIN_FMU_NO_SHM": "1" if transport == "socket" else "0",
           "MBSD_TWIN_FMU_SPIN_US": "50"}  # spinning, then asleep: both paths of the handshake
    cmd = [str(compile_c_host(tmp_path, "fmi2_host.c", SOURCE_DIR)), str(lib), (unpacked / "resources").as_uri(),
           md.get("guid", ""),
           str(round(STOP / STEP)), repr(STEP), vr["motor_torque"], repr(SWITCH), *(vr[n] for n in outputs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "libpython mapped: 0"
    rows = np.array([[float(x) for x in line.split()] for line in lines[:-1]])
    ref = runs["native"]
    np.testing.assert_array_equal(rows[:, 0], ref["time"])
    for k, name in enumerate(outputs):
        np.testing.assert_array_equal(rows[:, k + 1], ref[name], err_msg=name)


HOST_PRELUDE = """
import json, os, signal, time
from fmpy import read_model_description, extract
from fmpy.fmi2 import FMU2Slave
from fmpy.fmi1 import FMICallException
from fmpy.fmi2 import fmi2LastSuccessfulTime
fmu = {fmu!r}
md = read_model_description(fmu); d = extract(fmu)
vr = {{v.name: v.valueReference for v in md.modelVariables}}
outs = [vr[v.name] for v in md.modelVariables if v.causality == "output"]
{children}def new(name):
    s = FMU2Slave(guid=md.guid, unzipDirectory=d, modelIdentifier=md.coSimulation.modelIdentifier,
                  instanceName=name)
    s.instantiate(loggingOn=True); s.setupExperiment(startTime=0.0); s.enterInitializationMode()
    s.exitInitializationMode()
    return s
def run(s, t, n, torque):
    rows = []
    for k in range(n):
        s.setReal([vr["motor_torque"]], [torque])
        s.doStep(t + k * 1e-3, 1e-3)
        rows.append(list(s.getReal(outs)))
    return rows
"""


def _host(tmp_path: Path, body: str, env: dict[str, str] | None = None, **kw: object) -> dict:  # type: ignore[type-arg]
    prelude = textwrap.dedent(HOST_PRELUDE).format(children=children_code(), **kw)
    return run_script(tmp_path, prelude + textwrap.dedent(body), env)


def test_state_rollback_and_serialization_are_bit_identical(fmus: dict[str, Path], tmp_path: Path) -> None:
    r = _host(tmp_path, """
        a = new("a")
        run(a, 0.0, 100, 3.0)
        state = a.getFMUstate()
        first = run(a, 0.1, 50, -2.0)
        a.setReal([vr["motor_torque"]], [99.0])
        a.setFMUstate(state)
        restored_input = a.getReal([vr["motor_torque"]])[0]
        restored_time = a.getRealStatus(fmi2LastSuccessfulTime)
        again = run(a, 0.1, 50, -2.0)
        blob = a.serializeFMUstate(state)
        a.freeFMUstate(state)
        run(a, 0.15, 10, 5.0)
        a.setFMUstate(a.deSerializeFMUstate(bytes(blob)))
        after_deserialize = run(a, 0.1, 50, -2.0)
        b = new("b")
        b.setFMUstate(b.deSerializeFMUstate(bytes(blob)))
        other_instance = run(b, 0.1, 50, -2.0)
        workers = sorted(children())
        for s in (a, b):
            s.terminate(); s.freeInstance()
        print(json.dumps(dict(first=first, again=again, after_deserialize=after_deserialize, workers=workers,
                              other_instance=other_instance, restored_input=restored_input, size=len(blob),
                              restored_time=restored_time,
                              left=leftover())))
        os._exit(0)
        """, fmu=str(fmus["native"]))
    assert r["first"] == r["again"] == r["after_deserialize"] == r["other_instance"]
    assert r["restored_input"] == 3.0   # the state holds the inputs (99 was set after it was taken)
    assert abs(r["restored_time"] - 0.1) < 1e-12  # fmi2GetRealStatus(fmi2LastSuccessfulTime) after the rollback
    assert r["size"] > 500              # the full solver state
    assert len(r["workers"]) == 2 and r["left"] == []  # one worker per instance, reaped after fmi2FreeInstance


def test_killed_worker_makes_the_next_step_fail_and_the_host_survives(fmus: dict[str, Path], tmp_path: Path) -> None:
    r = _host(tmp_path, """
        s = new("victim")
        run(s, 0.0, 10, 2.0)
        (pid,) = children()
        os.kill(pid, signal.SIGKILL)
        try:
            run(s, 0.01, 1, 2.0); status = "ok"
        except FMICallException as e:
            status = e.status
        try:
            s.getReal(outs); again = "ok"
        except FMICallException as e:
            again = e.status
        s.freeInstance()
        fresh = new("fresh")
        rows = run(fresh, 0.0, 10, 2.0)
        fresh.terminate(); fresh.freeInstance()
        print(json.dumps(dict(status=status, again=again, killed=pid, n=len(rows), left=leftover())))
        os._exit(0)
        """, fmu=str(fmus["native"]))
    assert r["status"] == 3 and r["again"] == 3       # fmi2Error, then every call on that instance
    assert r["n"] == 10 and r["left"] == []           # a new instance works; no worker left behind
    assert f"worker process (pid {r['killed']}) is gone (killed by signal 9) during fmi2DoStep" in r["log"]


def test_hung_worker_is_killed_at_the_reply_bound_and_the_host_survives(fmus: dict[str, Path],
                                                                       tmp_path: Path) -> None:
    r = _host(tmp_path, """
        with open(os.path.join(d, "resources", "mbsd_twin_timeout.txt"), "w") as f:
            f.write("1.5\\n")                 # the bound, in a file beside the FMU's other resources
        s = new("frozen")
        run(s, 0.0, 10, 2.0)
        (pid,) = children()
        page = "memfd:mbsd-twin-fmu" in open(f"/proc/{pid}/maps").read()  # steps through the shared page
        os.kill(pid, signal.SIGSTOP)          # alive but silent
        t0 = time.monotonic()
        try:
            run(s, 0.01, 1, 2.0); status = "ok"
        except FMICallException as e:
            status = e.status
        waited = time.monotonic() - t0
        try:
            s.getReal(outs); again = "ok"
        except FMICallException as e:
            again = e.status
        s.freeInstance()
        os.remove(os.path.join(d, "resources", "mbsd_twin_timeout.txt"))
        fresh = new("fresh")                  # the default bound: step time limit (10 s) + 20 s
        rows = run(fresh, 0.0, 10, 2.0)
        fresh.terminate(); fresh.freeInstance()
        os.environ["MBSD_TWIN_FMU_TIMEOUT"] = "7"
        env = new("env"); env.freeInstance()
        print(json.dumps(dict(status=status, again=again, waited=waited, pid=pid, n=len(rows), page=page,
                              left=leftover())))
        os._exit(0)
        """, fmu=str(fmus["native"]))
    assert r["status"] == 3 and r["again"] == 3      # fmi2Error, then every call on that instance
    assert 1.5 <= r["waited"] < 1.5 + 5.0            # within the bound (plus killing and reaping)
    assert r["page"]                                 # the worker maps the shared page: the step waited on it
    assert f"worker process (pid {r['pid']}) did not answer fmi2DoStep within 1.5 s: it was killed" in r["log"]
    assert not _alive_worker(r["pid"]) and r["left"] == []
    assert r["n"] == 10 and "replies awaited for at most 30 s" in r["log"]
    assert "replies awaited for at most 7 s" in r["log"]    # MBSD_TWIN_FMU_TIMEOUT


def test_host_exit_without_free_ends_the_worker(fmus: dict[str, Path], tmp_path: Path) -> None:
    r = _host(tmp_path, """
        s = new("abandoned")
        run(s, 0.0, 5, 2.0)
        print(json.dumps(dict(workers=sorted(children()))))
        os._exit(0)
        """, fmu=str(fmus["native"]))
    (pid,) = r["workers"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive_worker(pid):
        time.sleep(0.05)
    assert not _alive_worker(pid)  # end of file on its stdin: the worker exits by itself


def _alive_worker(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return b"mbsd_twin.fmi.worker" in cmdline and state != "Z"


@pytest.mark.parametrize("python, expected", [
    ("/nonexistent/python", "1. $MBSD_TWIN_FMU_PYTHON is /nonexistent/python, not an executable file; 2. "
                            "resources/mbsd_twin_python.txt records /nonexistent/recorded, not an executable file"),
    ("/bin/false", "the mbsd-twin worker could not start"),
    pytest.param("/usr/bin/python3", "ModuleNotFoundError", marks=pytest.mark.skipif(
        not Path("/usr/bin/python3").exists(), reason="no system Python")),  # a Python without numpy/mbsd-twin
])
def test_bad_interpreter_fails_instantiation_with_a_clear_message(fmus: dict[str, Path], tmp_path: Path,
                                                                  python: str, expected: str) -> None:
    # the recorded interpreter is gone too, and the python3 on PATH (if any) is the system's, which
    # cannot import mbsd_twin: no place of the three works
    r = _host(tmp_path, """
        with open(os.path.join(d, "resources", "mbsd_twin_python.txt"), "w") as f:
            f.write("/nonexistent/recorded\\n")
        s = FMU2Slave(guid=md.guid, unzipDirectory=d, modelIdentifier=md.coSimulation.modelIdentifier,
                      instanceName="nopython")
        try:
            s.instantiate(loggingOn=True); outcome = "instantiated"
        except Exception as e:
            outcome = type(e).__name__
        print(json.dumps(dict(outcome=outcome, left=leftover())))
        os._exit(0)
        """, env={"MBSD_TWIN_FMU_PYTHON": python, "PATH": "/usr/bin:/bin"}, fmu=str(fmus["native"]))
    assert r["outcome"] != "instantiated" and r["left"] == []
    assert expected in r["log"] and "MBSD_TWIN_FMU_PYTHON" in r["log"]
    assert f"python -m pip install mbsd_twin-{__version__}-py3-none-any.whl" in r["log"]


def test_invalid_parameter_is_an_error_not_fatal_and_reset_recovers(fmus: dict[str, Path], tmp_path: Path) -> None:
    r = _host(tmp_path, """
        s = FMU2Slave(guid=md.guid, unzipDirectory=d, modelIdentifier=md.coSimulation.modelIdentifier,
                      instanceName="bad")
        s.instantiate(loggingOn=True); s.setupExperiment(startTime=0.0); s.enterInitializationMode()
        s.setReal([vr["guide.p1_y"]], [1.0])      # the guide 1 m above the crank: cannot be assembled
        try:
            s.exitInitializationMode(); init = "ok"
        except FMICallException as e:
            init = e.status
        s.reset()                                  # back to the defaults, same worker
        s.setupExperiment(startTime=0.0); s.enterInitializationMode(); s.exitInitializationMode()
        rows = run(s, 0.0, 100, 2.0)
        ref = new("ref")
        print(json.dumps(dict(init=init, same=rows == run(ref, 0.0, 100, 2.0), p1_y=s.getReal([vr["guide.p1_y"]])[0])))
        os._exit(0)
        """, fmu=str(fmus["native"]))
    assert r["init"] == 3                           # fmi2Error (PythonFMU: fmi2Fatal)
    assert "parameter guide.p1_y = 1.0 rejected" in r["log"]
    assert r["same"] and r["p1_y"] == 0.0           # after fmi2Reset: the default again, same results


def test_cli_builds_the_host_independent_fmu_with_the_recorded_interpreter(tmp_path: Path) -> None:
    cli = [sys.executable, "-c", "import sys; from mbsd_twin.cli import main; sys.exit(main())"]
    proc = subprocess.run([*cli, "fmu", "build", "-o", str(tmp_path), "--host-independent", "--python",
                           "/opt/some/python"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with zipfile.ZipFile(tmp_path / "SliderCrank.fmu") as zf:
        assert zf.read("resources/mbsd_twin_python.txt") == b"/opt/some/python\n"
        assert "binaries/linux64/SliderCrank.so" in zf.namelist()
    bad = subprocess.run([*cli, "fmu", "build", "-o", str(tmp_path / "x"), "--python", "/usr/bin/python3"],
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and "--python needs --host-independent" in bad.stderr


def test_instances_step_concurrently_from_threads(fmus: dict[str, Path], tmp_path: Path) -> None:
    r = _host(tmp_path, """
        import threading
        torques = [2.0, -1.5, 0.5]
        slaves = [new(f"t{k}") for k in range(3)]
        results = [None] * 3
        def work(k):
            results[k] = run(slaves[k], 0.0, 200, torques[k])
        threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
        for th in threads: th.start()
        for th in threads: th.join()
        workers = sorted(children())
        alone = []
        for k in range(3):   # the same runs, one after the other, in fresh instances
            s = new(f"s{k}"); alone.append(run(s, 0.0, 200, torques[k])); s.freeInstance()
        for s in slaves: s.freeInstance()
        print(json.dumps(dict(same=results == alone, distinct=len({json.dumps(x[-1]) for x in results}),
                              workers=len(workers), left=leftover())))
        os._exit(0)
        """, fmu=str(fmus["native"]))
    assert r["same"] and r["distinct"] == 3   # each thread's instance gives its own, undisturbed result
    assert r["workers"] == 3 and r["left"] == []
