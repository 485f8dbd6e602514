"""The standalone FMU (``mbsd-twin fmu build --standalone``): one shared library holding the compiled
engine (the numba kernels the Simulator runs, emitted as an object file) and the mechanism, needing
libc and libm only. Checked in C hosts run with an empty environment from a folder the FMU was moved
to, and in fmpy for every shipped mechanism, against the native Simulator (``run_native``: the same
Simulator the other FMU flavours run, stepped on the same communication points)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import threading
import warnings
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import numpy as np
import pytest

fmpy = pytest.importorskip("fmpy")
pytest.importorskip("pythonfmu")
if not shutil.which("gcc"):
    pytest.skip("gcc is needed to build the standalone FMU", allow_module_level=True)

from fmpy.fmi2 import FMU2Slave, fmi2LastSuccessfulTime  # noqa: E402
from fmu_harness import REPO, compile_c_host, unpack  # noqa: E402

from mbsd_twin.errors import FmuWarning  # noqa: E402
from mbsd_twin.fmi.native import run_native  # noqa: E402
from mbsd_twin.fmi.native_build import SOURCE_DIR  # noqa: E402
from mbsd_twin.fmi.standalone import build_standalone  # noqa: E402
from mbsd_twin.fmi.standalone.model_data import StandaloneUnsupported, check_mechanism  # noqa: E402
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism  # noqa: E402
from mbsd_twin.model.model import Load  # noqa: E402

STOP, STEP, TORQUE = 2.0, 1e-3, 2.0
ALLOWED = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0"}
SHIPPED = sorted((REPO / "examples" / "mechanisms").glob("*.toml")) + sorted(
    (REPO / "mbsd_twin" / "data" / "mechanisms").glob("*.toml"))
CLI = [sys.executable, "-c", "import sys; from mbsd_twin.cli import main; sys.exit(main())"]


@pytest.fixture(scope="module")
def fmus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The bundled slider crank's standalone FMUs, FMI 2.0 and 3.0, built by the CLI."""
    tmp = tmp_path_factory.mktemp("standalone")
    out = {}
    for version in ("2", "3"):
        dest = tmp / f"fmi{version}" / "SliderCrank.fmu"
        proc = subprocess.run([*CLI, "fmu", "build", "--standalone", "--fmi-version", version, "--check", "-o",
                               str(dest)], capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "checks: fmpy validate and fmutool -check passed" in proc.stdout
        out[version] = dest
    return out


def _variables(root: Path) -> tuple[ET.Element, dict[str, str], list[str]]:
    md = ET.parse(root / "modelDescription.xml").getroot()
    variables = md.find("ModelVariables")
    assert variables is not None
    vr = {v.get("name", ""): v.get("valueReference", "") for v in variables}
    return md, vr, [v.get("name", "") for v in variables if v.get("causality") == "output"]


def _native(mechanism: Path, times: np.ndarray, inputs: dict[str, float], outputs: list[str]) -> dict[str, np.ndarray]:
    return run_native(load_mechanism(mechanism), times, {n: (lambda t, x=x: x) for n, x in inputs.items()}, outputs)


def _moved(fmu: Path, tmp_path: Path) -> Path:
    """The FMU unpacked, then moved to another folder (nothing may refer to where it was built or unpacked)."""
    first = unpack(fmu, tmp_path / "unpacked")
    moved = tmp_path / "elsewhere" / "fmu"
    moved.parent.mkdir()
    first.rename(moved)
    return moved


@pytest.mark.parametrize(("version", "platform", "token"), [("2", "linux64", "guid"),
                                                            ("3", "x86_64-linux", "instantiationToken")])
def test_c_host_with_an_empty_environment_matches_the_simulator(fmus: dict[str, Path], tmp_path: Path, version: str,
                                                                 platform: str, token: str) -> None:
    root = _moved(fmus[version], tmp_path)
    md, vr, outputs = _variables(root)
    lib = root / "binaries" / platform / "SliderCrank.so"
    host = compile_c_host(tmp_path, f"fmi{version}_host.c", SOURCE_DIR)
    cmd = ["env", "-i", str(host), str(lib), "", md.get(token, ""), str(round(STOP / STEP)), repr(STEP),
           vr["motor_torque"], repr(10 * STOP), *(vr[n] for n in outputs)]  # the torque stays 2 N·m
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "libpython mapped: 0"
    rows = np.array([[float(x) for x in line.split()] for line in lines[:-1]])
    ref = _native(bundled_slider_crank(), rows[:, 0], {"motor_torque": TORQUE}, outputs)
    theta = outputs.index("crank.theta") + 1
    assert rows[-1, 0] == STOP and abs(rows[-1, theta] - ref["crank.theta"][-1]) <= 1e-9
    assert 50.0 < rows[-1, theta] < 60.0  # 2 N·m spin the crank up: θ(2 s) ≈ 53.58 rad
    for k, name in enumerate(outputs):  # the same kernels on the same CPU: the same numbers
        np.testing.assert_array_equal(rows[:, k + 1], ref[name], err_msg=name)


def test_library_needs_libc_and_libm_only_and_holds_no_python(fmus: dict[str, Path], tmp_path: Path) -> None:
    for version, platform in (("2", "linux64"), ("3", "x86_64-linux")):
        with zipfile.ZipFile(fmus[version]) as zf:
            names = zf.namelist()
            lib = tmp_path / f"{version}.so"
            lib.write_bytes(zf.read(f"binaries/{platform}/SliderCrank.so"))
            assert b'needsExecutionTool="false"' in zf.read("modelDescription.xml")
        assert not [n for n in names if n.endswith((".py", ".txt", ".json")) or "pythonfmu" in n], names
        dynamic = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
        needed = {line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line}
        assert needed <= ALLOWED and "libm.so.6" in needed, needed
        assert "RPATH" not in dynamic and "RUNPATH" not in dynamic
        data = lib.read_bytes()
        assert str(REPO).encode() not in data and sys.prefix.encode() not in data and b"/tmp/" not in data
        assert b"Py_" not in data and b"PyErr" not in data and b"PyGILState" not in data
        exported = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                                  check=True).stdout.split()
        assert all(s.startswith(f"fmi{version}") for s in exported[2::3]), exported


def _fmpy_run(fmu: Path, inputs: dict[str, float], outputs: list[str]) -> np.ndarray:
    return fmpy.simulate_fmu(str(fmu), stop_time=STOP, output_interval=STEP, start_values=inputs, output=outputs)


@pytest.mark.parametrize("mechanism", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fmpy_matches_the_simulator_for_every_shipped_mechanism(mechanism: Path, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FmuWarning)  # a mechanism without inputs
        fmu = build_standalone(mechanism, tmp_path / "M.fmu")
    md = fmpy.read_model_description(str(fmu))
    outputs = [v.name for v in md.modelVariables if v.causality == "output"]
    inputs = {v.name: 1.0 for v in md.modelVariables if v.causality == "input"}
    result = _fmpy_run(fmu, inputs, outputs)
    ref = _native(mechanism, result["time"], inputs, outputs)
    assert result["time"][-1] == STOP
    for name in outputs:
        band = 1e-9 * max(float(np.ptp(ref[name])), 1e-3)
        assert np.max(np.abs(result[name] - ref[name])) <= band, name


def test_fmpy_runs_the_fmi3_fmu_as_the_simulator(fmus: dict[str, Path]) -> None:
    md = fmpy.read_model_description(str(fmus["3"]))
    assert md.fmiVersion == "3.0"
    outputs = [v.name for v in md.modelVariables if v.causality == "output"]
    result = _fmpy_run(fmus["3"], {"motor_torque": TORQUE}, outputs)
    ref = _native(bundled_slider_crank(), result["time"], {"motor_torque": TORQUE}, outputs)
    for name in outputs:
        np.testing.assert_array_equal(result[name], ref[name], err_msg=name)


def _slave(fmu: Path, tmp_path: Path, name: str) -> tuple[FMU2Slave, dict[str, int], list[int]]:
    md = fmpy.read_model_description(str(fmu))
    root = unpack(fmu, tmp_path / f"unpacked-{name}")
    s = FMU2Slave(guid=md.guid, unzipDirectory=str(root), modelIdentifier=md.coSimulation.modelIdentifier,
                  instanceName=name)
    s.instantiate()
    s.setupExperiment(startTime=0.0)
    s.enterInitializationMode()
    s.exitInitializationMode()
    vr = {v.name: v.valueReference for v in md.modelVariables}
    return s, vr, [v.valueReference for v in md.modelVariables if v.causality == "output"]


def _run(s: FMU2Slave, vr: dict[str, int], outs: list[int], t: float, n: int, torque: float) -> list[list[float]]:
    rows = []
    for k in range(n):
        s.setReal([vr["motor_torque"]], [torque])
        s.doStep(t + k * 1e-3, 1e-3)
        rows.append(list(s.getReal(outs)))
    return rows


def test_state_rollback_and_serialization_are_bit_identical(fmus: dict[str, Path], tmp_path: Path) -> None:
    a, vr, outs = _slave(fmus["2"], tmp_path, "a")
    _run(a, vr, outs, 0.0, 100, 3.0)
    state = a.getFMUstate()
    first = _run(a, vr, outs, 0.1, 50, -2.0)
    a.setReal([vr["motor_torque"]], [99.0])
    a.setFMUstate(state)
    assert a.getReal([vr["motor_torque"]])[0] == 3.0  # the state holds the inputs
    assert a.getRealStatus(fmi2LastSuccessfulTime) == pytest.approx(0.1, abs=1e-12)
    assert _run(a, vr, outs, 0.1, 50, -2.0) == first
    blob = a.serializeFMUstate(state)
    a.freeFMUstate(state)
    b, _, _ = _slave(fmus["2"], tmp_path, "b")
    b.setFMUstate(b.deSerializeFMUstate(bytes(blob)))
    assert _run(b, vr, outs, 0.1, 50, -2.0) == first
    b.reset()  # back to the instantiated FMU
    b.setupExperiment(startTime=0.0)
    b.enterInitializationMode()
    b.exitInitializationMode()
    _run(b, vr, outs, 0.0, 100, 3.0)
    assert _run(b, vr, outs, 0.1, 50, -2.0) == first
    # the same steps in the native Simulator: 100 steps at 3 N·m, 50 at -2 N·m
    times = np.round(np.arange(151) * 1e-3, 12)
    torque = {"motor_torque": lambda t: 3.0 if t < 0.0995 else -2.0}
    ref = run_native(load_mechanism(bundled_slider_crank()), times, torque, ["crank.theta"])
    theta = [row[outs.index(vr["crank.theta"])] for row in first]
    assert abs(theta[-1] - ref["crank.theta"][-1]) <= 1e-9
    for s in (a, b):
        s.terminate()
        s.freeInstance()


def test_solver_failure_is_discard_and_a_fixed_parameter_cannot_change(fmus: dict[str, Path], tmp_path: Path) -> None:
    s, vr, outs = _slave(fmus["2"], tmp_path, "c")
    _run(s, vr, outs, 0.0, 10, 2.0)
    state = s.getFMUstate()
    s.setReal([vr["solver.max_step"]], [1e-9])  # 0.1 s in steps of at most 1 ns: over the budget of internal steps
    with pytest.raises(fmpy.fmi1.FMICallException) as failed:
        s.doStep(0.01, 0.1)
    assert failed.value.status == 2  # fmi2Discard
    s.setFMUstate(state)
    s.setReal([vr["solver.max_step"]], [0.0])
    _run(s, vr, outs, 0.01, 5, 2.0)
    with pytest.raises(fmpy.fmi1.FMICallException) as refused:
        s.setReal([vr["crank.mass"]], [2.0])
    assert refused.value.status == 3  # fmi2Error: fixed parameters are set before initialisation only
    s.terminate()
    s.freeInstance()


@pytest.mark.parametrize("params", [{"crank.mass": 2.5, "piston.inertia": 0.01, "main_bearing.viscous_friction": 0.02},
                                    {"rod.cg_x": 0.01, "solver.rtol": 1e-6, "solver.max_step": 2e-3}])
def test_physical_and_solver_parameters_match_the_simulator(fmus: dict[str, Path], params: dict[str, float]) -> None:
    md = fmpy.read_model_description(str(fmus["2"]))
    outputs = [v.name for v in md.modelVariables if v.causality == "output"]
    result = fmpy.simulate_fmu(str(fmus["2"]), stop_time=0.5, output_interval=STEP,
                               start_values={"motor_torque": TORQUE, **params}, output=outputs)
    ref = run_native(load_mechanism(bundled_slider_crank()), result["time"], {"motor_torque": lambda t: TORQUE},
                     outputs, parameters=params)
    default = _native(bundled_slider_crank(), result["time"], {"motor_torque": TORQUE}, ["crank.theta"])
    assert abs(ref["crank.theta"][-1] - default["crank.theta"][-1]) > 1e-6  # the parameters matter
    for name in outputs:
        np.testing.assert_array_equal(result[name], ref[name], err_msg=name)


@pytest.mark.parametrize(("name", "value", "why"), [("crank.mass", -1.0, "must be a finite number > 0"),
                                                    ("crank_pin.viscous_friction", -0.5, "must be a finite number >="),
                                                    ("crank.theta_start", np.inf, "must be a finite number")])
def test_a_parameter_the_library_cannot_take_is_an_error_naming_it(fmus: dict[str, Path], tmp_path: Path, name: str,
                                                                   value: float, why: str,
                                                                   capfd: pytest.CaptureFixture[str]) -> None:
    md = fmpy.read_model_description(str(fmus["2"]))
    s = FMU2Slave(guid=md.guid, unzipDirectory=str(unpack(fmus["2"], tmp_path / "u")),
                  modelIdentifier=md.coSimulation.modelIdentifier, instanceName="p")
    s.instantiate(loggingOn=True)  # fmpy prints the FMU's log messages
    vr = {v.name: v.valueReference for v in md.modelVariables}
    start = next(v.start for v in md.modelVariables if v.name == name)
    s.setupExperiment(startTime=0.0)
    s.enterInitializationMode()
    s.setReal([vr[name]], [float(start)])  # its own value: accepted
    with pytest.raises(fmpy.fmi1.FMICallException) as refused:
        s.setReal([vr[name]], [value])
    assert refused.value.status == 3
    printed = capfd.readouterr().out
    assert name in printed and why in printed, printed
    s.exitInitializationMode()
    s.terminate()
    s.freeInstance()


def test_a_python_callable_is_refused_naming_the_element() -> None:
    mech = load_mechanism(bundled_slider_crank())
    q = Load("extra_drag", "generalized", ("crank",), function=lambda t, q, v: np.zeros(1), coordinates=("crank",))
    with pytest.raises(StandaloneUnsupported, match="extra_drag"):
        check_mechanism(dataclasses.replace(mech, loads=(*mech.loads, q)))


def test_instances_step_concurrently_from_threads(fmus: dict[str, Path], tmp_path: Path) -> None:
    torques = [2.0, -1.5, 0.5]
    slaves = [_slave(fmus["2"], tmp_path, f"t{k}") for k in range(3)]
    results: list[list[list[float]]] = [[] for _ in torques]

    def work(k: int) -> None:
        s, vr, outs = slaves[k]
        results[k] = _run(s, vr, outs, 0.0, 300, torques[k])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for k, torque in enumerate(torques):  # the same runs, one after the other, in fresh instances
        s, vr, outs = _slave(fmus["2"], tmp_path, f"s{k}")
        assert _run(s, vr, outs, 0.0, 300, torque) == results[k]
        s.freeInstance()
    assert len({tuple(r[-1]) for r in results}) == 3
    for s, _, _ in slaves:
        s.freeInstance()
