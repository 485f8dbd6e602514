"""The host-independent FMI 3.0 FMU (``build_fmu3(..., host_independent=True)``): the FMI 3.0 C library
(native_fmu/fmi3_shim.c) over the same worker as the FMI 2.0 one. Checked against the pythonfmu3 FMU
of the same mechanism and the native Simulator (bit for bit), in fmpy and in a C host compiled here
with gcc that runs without Python; fmpy's validation and fmutool -check; FMU state; a discarded
step; a killed and a hung worker. Python hosts run in subprocesses (fmu_harness)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pythonfmu3")
pytest.importorskip("fmpy")
if not shutil.which("gcc"):
    pytest.skip("gcc is needed to build the host-independent FMU", allow_module_level=True)

from fmu_harness import children_code, clean_env, compile_c_host, finish, importer, run_script, unpack  # noqa: E402

from mbsd_twin.fmi.fmi3 import build_fmu3  # noqa: E402
from mbsd_twin.fmi.importers import output_names  # noqa: E402
from mbsd_twin.fmi.inputs import communication_points, parse_profile  # noqa: E402
from mbsd_twin.fmi.native import run_native  # noqa: E402
from mbsd_twin.fmi.native_build import SOURCE_DIR  # noqa: E402
from mbsd_twin.fmi.validation import check_fmu, fmu_mechanism  # noqa: E402

STOP, STEP = 1.0, 1e-3
SWITCH = 0.5005                      # torque 2 N·m, then -1 N·m from the first point at or after 0.5005 s
TORQUE = f"pwc:2:{SWITCH}:-1"


@pytest.fixture(scope="module")
def fmus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("fmus3")
    return {"pythonfmu3": build_fmu3(None, tmp / "py" / "SliderCrank.fmu"),
            "native3": build_fmu3(None, tmp / "native" / "SliderCrank.fmu", host_independent=True)}


@pytest.fixture(scope="module")
def runs(fmus: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, np.ndarray]]:
    tmp = tmp_path_factory.mktemp("runs3")
    procs = {k: importer(fmu, tmp / f"{k}.npz", STOP, STEP, {"motor_torque": TORQUE}) for k, fmu in fmus.items()}
    native = run_native(fmu_mechanism(fmus["native3"]), communication_points(0.0, STOP, STEP),
                        {"motor_torque": parse_profile(TORQUE)}, output_names(fmus["native3"]))
    return {"native": native, **{k: finish(p, tmp / f"{k}.npz") for k, p in procs.items()}}


def _model_description(fmu: Path) -> ET.Element:
    with zipfile.ZipFile(fmu) as zf:
        return ET.fromstring(zf.read("modelDescription.xml"))


def test_contents_and_model_description_match_the_pythonfmu3_flavour(fmus: dict[str, Path]) -> None:
    py, native = (_model_description(fmus[k]) for k in ("pythonfmu3", "native3"))
    for root in (py, native):  # differ by build: the token and the time stamp
        del root.attrib["instantiationToken"], root.attrib["generationDateAndTime"]
    assert ET.tostring(py) == ET.tostring(native)
    with zipfile.ZipFile(fmus["native3"]) as zf:
        names = set(zf.namelist())
        assert zf.read("resources/mbsd_twin_python.txt").decode().strip() == sys.executable
    assert "binaries/x86_64-linux/SliderCrank.so" in names
    assert not any(n.startswith(("resources/pythonfmu3/", "binaries/x86_64-windows/", "sources/")) for n in names)
    assert {"resources/mechanism.toml", "resources/mbsd_twin_fmu.json"} <= names


def test_fmpy_validate_and_fmutool_check_report_no_problem(fmus: dict[str, Path]) -> None:
    from fmpy.validation import validate_fmu

    assert validate_fmu(str(fmus["native3"])) == []
    assert check_fmu(fmus["native3"]) == []  # fmpy validate and fmutool -check
    proc = subprocess.run([str(Path(sys.executable).with_name("fmutool")), "-input", str(fmus["native3"]), "-check"],
                          capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "compliant with FMI-3.0" in log and "No semantic error" in log, log


def test_fmpy_results_equal_pythonfmu3_and_native_bit_for_bit(runs: dict[str, dict[str, np.ndarray]]) -> None:
    native3, py3, native = runs["native3"], runs["pythonfmu3"], runs["native"]
    assert sorted(py3) == sorted(native3) == sorted(native) and len(native3["time"]) == 1001
    for name in native:
        np.testing.assert_array_equal(native3[name], py3[name], err_msg=name)
        np.testing.assert_array_equal(native3[name], native[name], err_msg=name)
    omega = native3["crank.omega"]
    assert omega[500] > 5.0 and omega[-1] < omega[500]  # spun up by +2 N·m, slowed by -1 N·m


def test_c_host_without_python_equals_fmpy(fmus: dict[str, Path], runs: dict[str, dict[str, np.ndarray]],
                                           tmp_path: Path) -> None:
    unpacked = unpack(fmus["native3"], tmp_path / "unpacked fmu #3")
    md = _model_description(fmus["native3"])
    variables = md.find("ModelVariables")
    assert variables is not None
    vr = {sv.get("name"): sv.get("valueReference", "") for sv in variables}
    outputs = [sv.get("name", "") for sv in variables if sv.get("causality") == "output"]
    lib = unpacked / "binaries" / "x86_64-linux" / "SliderCrank.so"
    assert "libpython" not in subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    cmd = [str(compile_c_host(tmp_path, "fmi3_host.c", SOURCE_DIR)), str(lib), f"{unpacked / 'resources'}/",
           md.get("instantiationToken", ""), str(round(STOP / STEP)), repr(STEP), vr["motor_torque"], repr(SWITCH),
           *(vr[n] for n in outputs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=clean_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "libpython mapped: 0"
    rows = np.array([[float(x) for x in line.split()] for line in lines[:-1]])
    ref = runs["native3"]
    np.testing.assert_array_equal(rows[:, 0], ref["time"])
    for k, name in enumerate(outputs):
        np.testing.assert_array_equal(rows[:, k + 1], ref[name], err_msg=name)


PRELUDE = """
import json, os, signal, time
from fmpy import read_model_description, extract
from fmpy.fmi3 import FMU3Slave
from fmpy.fmi1 import FMICallException
fmu = {fmu!r}
md = read_model_description(fmu); d = extract(fmu)
vr = {{v.name: v.valueReference for v in md.modelVariables}}
outs = [vr[v.name] for v in md.modelVariables if v.causality == "output"]
{children}
def new(name):
    s = FMU3Slave(guid=md.guid, unzipDirectory=d, modelIdentifier=md.coSimulation.modelIdentifier,
                  instanceName=name)
    s.instantiate(loggingOn=True); s.enterInitializationMode(startTime=0.0); s.exitInitializationMode()
    return s
def run(s, t, n, torque):
    rows = []
    for k in range(n):
        s.setFloat64([vr["motor_torque"]], [torque])
        s.doStep(t + k * 1e-3, 1e-3)
        rows.append(list(s.getFloat64(outs)))
    return rows
def status(fn, *args):
    try:
        fn(*args); return 0
    except FMICallException as e:
        return e.status
"""


def _host(tmp_path: Path, fmu: Path, body: str) -> dict:  # type: ignore[type-arg]
    prelude = PRELUDE.format(fmu=str(fmu), children=children_code())
    return run_script(tmp_path, prelude + textwrap.dedent(body))


@pytest.mark.parametrize("kind", ["pythonfmu3", "native3"])
def test_state_rollback_and_serialization_are_bit_identical(fmus: dict[str, Path], tmp_path: Path,
                                                            kind: str) -> None:
    r = _host(tmp_path, fmus[kind], """
        a = new("a")
        run(a, 0.0, 100, 3.0)
        state = a.getFMUState()
        first = run(a, 0.1, 50, -2.0)
        a.setFloat64([vr["motor_torque"]], [99.0])
        a.setFMUState(state)
        restored = a.getFloat64([vr["motor_torque"], vr["time"]])
        again = run(a, 0.1, 50, -2.0)
        blob = a.serializeFMUState(state)
        a.freeFMUState(state)
        run(a, 0.15, 10, 5.0)
        a.setFMUState(a.deserializeFMUState(bytes(blob)))
        after_deserialize = run(a, 0.1, 50, -2.0)
        b = new("b")
        b.setFMUState(b.deserializeFMUState(bytes(blob)))
        other_instance = run(b, 0.1, 50, -2.0)
        for s in (a, b):
            s.terminate(); s.freeInstance()
        print(json.dumps(dict(first=first, again=again, after_deserialize=after_deserialize, restored=restored,
                              other_instance=other_instance, blob=bytes(blob).decode())))
        os._exit(0)
        """)
    assert r["first"] == r["again"] == r["after_deserialize"] == r["other_instance"]
    assert r["restored"][0] == 3.0 and abs(r["restored"][1] - 0.1) < 1e-12  # input and time of the state
    assert '"format": "mbsd-twin-fmu3-state/1"' in r["blob"]  # the pythonfmu3 FMU's state format


def test_solver_failure_discards_the_step_and_rollback_recovers(fmus: dict[str, Path], tmp_path: Path) -> None:
    r = _host(tmp_path, fmus["native3"], """
        s = new("s")
        run(s, 0.0, 1, 2.0)
        state = s.getFMUState()
        s.setFloat64([vr["motor_torque"]], [1e300])
        step = status(s.doStep, 1e-3, 1e-3)
        s.setFMUState(state)
        after = run(s, 1e-3, 5, 2.0)
        ref = new("ref"); expected = run(ref, 0.0, 6, 2.0)[1:]
        bad = status(s.doStep, 6e-3, -1.0)
        print(json.dumps(dict(step=step, same=after == expected, bad=bad)))
        os._exit(0)
        """)
    assert r["step"] == 2 and "discarded" in r["log"]  # fmi3Discard, the reason logged
    assert r["same"]                                  # rolled back: as if the failed step never happened
    assert r["bad"] == 3                              # a negative step size: fmi3Error (as pythonfmu3)


def test_killed_or_hung_worker_makes_the_call_fail_and_the_host_survives(fmus: dict[str, Path],
                                                                         tmp_path: Path) -> None:
    r = _host(tmp_path, fmus["native3"], """
        os.environ["MBSD_TWIN_FMU_TIMEOUT"] = "1.5"
        killed, hung = new("killed"), new("hung")
        run(killed, 0.0, 5, 2.0); run(hung, 0.0, 5, 2.0)
        pid_killed, pid_hung = sorted(children())
        pages = ["memfd:mbsd-twin-fmu" in open(f"/proc/{pid}/maps").read() for pid in (pid_killed, pid_hung)]
        os.kill(pid_killed, signal.SIGKILL)
        os.kill(pid_hung, signal.SIGSTOP)
        st_killed = status(run, killed, 5e-3, 1, 2.0)
        t0 = time.monotonic()
        st_hung = status(run, hung, 5e-3, 1, 2.0)
        waited = time.monotonic() - t0
        again = [status(s.getFloat64, outs) for s in (killed, hung)]
        for s in (killed, hung):
            s.freeInstance()
        fresh = new("fresh"); rows = run(fresh, 0.0, 5, 2.0); fresh.terminate(); fresh.freeInstance()
        print(json.dumps(dict(st=[st_killed, st_hung], again=again, waited=waited, pids=[pid_killed, pid_hung],
                              n=len(rows), pages=pages, left=leftover())))
        os._exit(0)
        """)
    assert r["st"] == [3, 3] and r["again"] == [3, 3]  # fmi3Error, then every call on those instances
    assert 1.5 <= r["waited"] < 1.5 + 5.0
    assert r["pages"] == [True, True]  # both workers map the shared page: the steps go through it
    killed, hung = r["pids"]
    assert f"worker process (pid {killed}) is gone (killed by signal 9) during fmi3DoStep" in r["log"]
    assert f"worker process (pid {hung}) did not answer fmi3DoStep within 1.5 s: it was killed" in r["log"]
    assert r["n"] == 5 and r["left"] == []


def test_cli_builds_the_fmi3_host_independent_fmu(tmp_path: Path) -> None:
    cli = [sys.executable, "-c", "import sys; from mbsd_twin.cli import main; sys.exit(main())"]
    proc = subprocess.run([*cli, "fmu", "build", "-o", str(tmp_path), "--fmi-version", "3", "--host-independent",
                           "--python", "/opt/some/python"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"FMU written: {tmp_path / 'SliderCrank-fmi3.fmu'}" in proc.stdout  # a folder: the FMI 3.0 file name
    with zipfile.ZipFile(tmp_path / "SliderCrank-fmi3.fmu") as zf:
        assert zf.read("resources/mbsd_twin_python.txt") == b"/opt/some/python\n"
        assert "binaries/x86_64-linux/SliderCrank.so" in zf.namelist()
        assert b'fmiVersion="3.0"' in zf.read("modelDescription.xml")
