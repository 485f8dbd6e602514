"""The slider-crank FMI 3.0 FMU (pythonfmu3): standard checks, agreement with the native Simulator,
FMU state, error paths and instances. As in test_fmu.py every FMU run happens in a subprocess that
ends with ``os._exit`` after printing its result.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pythonfmu3")
pytest.importorskip("fmpy")

from fmu_harness import finish, importer, run_script  # noqa: E402

from mbsd_twin.fmi.build import build_fmu  # noqa: E402
from mbsd_twin.fmi.fmi3 import build_fmu3  # noqa: E402
from mbsd_twin.fmi.importers import output_names  # noqa: E402
from mbsd_twin.fmi.inputs import communication_points, parse_profile  # noqa: E402
from mbsd_twin.fmi.native import run_native  # noqa: E402
from mbsd_twin.fmi.validation import check_fmu, fmu_mechanism  # noqa: E402

STOP, FINE = 5.0, 1e-3
TORQUE = "pwc:2:1:-1:2:3:3.5:0"
FORCE = "step:2.5:0:-20"
INPUTS = {"motor_torque": TORQUE, "piston_force": FORCE}


@pytest.fixture(scope="module")
def fmu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fmu3(None, tmp_path_factory.mktemp("fmu3") / "SliderCrank.fmu")


@pytest.fixture(scope="module")
def runs(fmu: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, np.ndarray]]:
    tmp = tmp_path_factory.mktemp("runs3")
    procs = {h: (importer(fmu, tmp / f"fmpy_{h}.npz", STOP, h, INPUTS), tmp / f"fmpy_{h}.npz") for h in (FINE, 0.1)}
    profiles = {"motor_torque": parse_profile(TORQUE), "piston_force": parse_profile(FORCE)}
    native = run_native(fmu_mechanism(fmu), communication_points(0.0, STOP, FINE), profiles, output_names(fmu))
    return {"native": native, **{f"fmpy_{h}": finish(p, out) for h, (p, out) in procs.items()}}


def test_is_fmi3_with_the_fmi2_variables(fmu: Path, tmp_path: Path) -> None:
    from fmpy import read_model_description

    md3 = read_model_description(str(fmu))
    md2 = read_model_description(str(build_fmu(None, tmp_path / "SliderCrank2.fmu")))
    assert md3.fmiVersion == "3.0"
    with zipfile.ZipFile(fmu) as zf:
        xml = zf.read("modelDescription.xml").decode()
    assert 'canGetAndSetFMUState="true"' in xml and 'canSerializeFMUState="true"' in xml
    v3 = {v.name: (v.causality, v.variability, v.unit, v.start) for v in md3.modelVariables if v.name != "time"}
    v2 = {v.name: (v.causality, v.variability, v.unit, v.start) for v in md2.modelVariables}
    assert v3 == v2
    assert [v.causality for v in md3.modelVariables if v.name == "time"] == ["independent"]
    with zipfile.ZipFile(fmu) as zf:
        names = zf.namelist()
    assert "binaries/x86_64-linux/SliderCrank.so" in names and "resources/mechanism.toml" in names


def test_fmpy_validate_and_fmutool_check_pass(fmu: Path) -> None:
    assert check_fmu(fmu) == []
    proc = subprocess.run([str(Path(sys.executable).with_name("fmutool")), "-input", str(fmu), "-check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = proc.stdout + proc.stderr
    assert "compliant with FMI-3.0" in log and "No semantic error" in log


def test_fmpy_1ms_agrees_with_native_to_1e9(runs: dict[str, dict[str, np.ndarray]]) -> None:
    fmpy_run, native = runs[f"fmpy_{FINE}"], runs["native"]
    assert len(fmpy_run["time"]) == len(native["time"]) == 5001
    np.testing.assert_array_equal(fmpy_run["time"], native["time"])
    for name in native:
        scale = float(np.abs(native[name]).max())
        err = float(np.abs(fmpy_run[name] - native[name]).max())
        assert err <= 1e-9 * scale + 1e-300, f"{name}: max error {err:.3g}, scale {scale:.3g}"
    assert abs(native["crank.omega"]).max() > 10.0


def test_coarse_communication_step_agrees_within_solver_tolerance(runs: dict[str, dict[str, np.ndarray]]) -> None:
    coarse, native = runs["fmpy_0.1"], runs["native"]
    ref = {n: v[::100] for n, v in native.items()}
    np.testing.assert_allclose(coarse["time"], ref["time"], rtol=0, atol=1e-12)
    for name in ref:
        if name.startswith("energy."):
            scale = max(float(np.abs(v).max()) for k, v in ref.items() if k.startswith("energy."))
        elif name.startswith("constraints."):
            scale = 1e-3
        else:
            scale = float(np.abs(ref[name]).max())
        err = float(np.abs(coarse[name] - ref[name]).max())
        assert err <= 10 * 1e-8 * scale, f"{name}: {err:.3g}"


PRELUDE = """
import json, os
from fmpy import read_model_description, extract
from fmpy.fmi3 import FMU3Slave
from fmpy.fmi1 import FMICallException
fmu = {fmu!r}
md = read_model_description(fmu); d = extract(fmu)
vr = {{v.name: v.valueReference for v in md.modelVariables}}
outs = [vr[v.name] for v in md.modelVariables if v.causality == "output"]
def new(name, init=True, **params):
    s = FMU3Slave(guid=md.guid, unzipDirectory=d, modelIdentifier=md.coSimulation.modelIdentifier,
                  instanceName=name)
    s.instantiate(loggingOn=True); s.enterInitializationMode(startTime=0.0)
    for k, v in params.items():
        s.setFloat64([vr[k.replace("__", ".")]], [v])
    if init:
        s.exitInitializationMode()
    return s
def run(s, t, n, torque):
    rows = []
    for k in range(n):
        s.setFloat64([vr["motor_torque"]], [torque])
        s.doStep(t + k * 1e-3, 1e-3)
        rows.append(list(s.getFloat64(outs)))
    return rows
"""

STATE_SCRIPT = PRELUDE + """
a = new("a")
run(a, 0.0, 100, 3.0)
state = a.getFMUState()
first = run(a, 0.1, 50, -2.0)
a.setFloat64([vr["motor_torque"]], [99.0])
a.setFMUState(state)
restored_input = a.getFloat64([vr["motor_torque"]])[0]
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
print(json.dumps(dict(first=first, again=again, after_deserialize=after_deserialize,
                      other_instance=other_instance, restored_input=restored_input, size=len(blob))))
os._exit(0)
"""


def test_state_get_set_and_serialize_are_bit_identical(fmu: Path, tmp_path: Path) -> None:
    r = run_script(tmp_path, STATE_SCRIPT, fmu=str(fmu))
    assert r["first"] == r["again"]
    assert r["first"] == r["after_deserialize"]
    assert r["first"] == r["other_instance"]
    assert r["restored_input"] == 3.0
    assert r["size"] > 500


ERROR_SCRIPT = PRELUDE + """
out = {{}}
bad = new("bad", init=False, guide__p1_y=1.0)
try:
    bad.exitInitializationMode(); out["init"] = "ok"
except FMICallException as e:
    out["init"] = e.status
print("---", flush=True)
s = new("s")
s.setFloat64([vr["motor_torque"]], [2.0]); s.doStep(0.0, 1e-3)
state = s.getFMUState()
s.setFloat64([vr["motor_torque"]], [1e300])
try:
    s.doStep(1e-3, 1e-3); out["step"] = "ok"
except FMICallException as e:
    out["step"] = e.status
s.setFMUState(state)
s.doStep(1e-3, 1e-3)
out["after_rollback"] = s.getFloat64([vr["crank.theta"]])[0]
s.terminate(); s.freeInstance()
print(json.dumps(out))
os._exit(0)
"""


def test_error_paths(fmu: Path, tmp_path: Path) -> None:
    r = run_script(tmp_path, ERROR_SCRIPT, fmu=str(fmu))
    bad_log, step_log = r["log"].split("---")
    assert r["init"] == 4  # fmi3Fatal: pythonfmu3 turns every Python exception into it
    assert "parameter guide.p1_y = 1.0 rejected" in bad_log and "cannot be assembled" in bad_log
    assert r["step"] == 2  # fmi3Discard
    assert "discarded" in step_log
    assert np.isfinite(r["after_rollback"])


INSTANCES_SCRIPT = PRELUDE + """
def run2(pairs, n=30):
    for k in range(n):
        for s, torque in pairs:
            s.setFloat64([vr["motor_torque"]], [torque]); s.doStep(k * 1e-3, 1e-3)
    return [s.getFloat64([vr["crank.theta"], vr["crank.omega"]]) for s, _ in pairs]
alone = new("alone"); ref = run2([(alone, 2.0)])[0]; alone.terminate(); alone.freeInstance()
a, b, c = new("a"), new("b", crank__mass=3.0), new("c")
res = run2([(a, 2.0), (b, 2.0), (c, -1.0)])
for s in (a, b, c):
    s.terminate(); s.freeInstance()
again = new("again"); ref2 = run2([(again, 2.0)])[0]
reactions = [vr["main_bearing.fx"], vr["main_bearing.fy"], vr["crank.theta"]]
r0 = again.getFloat64(reactions)
again.setFloat64([vr["motor_torque"]], [50.0])
r1 = again.getFloat64(reactions)
again.terminate(); again.freeInstance()
print(json.dumps(dict(ref=ref, res=res, ref2=ref2, r0=r0, r1=r1)))
os._exit(0)
"""


def test_instances_are_independent_and_reinstantiable(fmu: Path, tmp_path: Path) -> None:
    r = run_script(tmp_path, INSTANCES_SCRIPT, fmu=str(fmu))
    assert r["res"][0] == r["ref"] == r["ref2"]
    assert r["res"][1] != r["ref"] and r["res"][2] != r["ref"]
    (fx0, fy0, th0), (fx1, fy1, th1) = r["r0"], r["r1"]
    assert th1 == th0 and (fx1, fy1) != (fx0, fy0)


def test_cli_builds_checks_and_validates_another_mechanism(tmp_path: Path) -> None:
    mech = Path(__file__).resolve().parents[1] / "examples" / "mechanisms" / "four_bar.toml"
    exe = str(Path(sys.executable).with_name("mbsd-twin"))
    build = subprocess.run([exe, "fmu", "build", str(mech), "-o", str(tmp_path), "--fmi-version", "3", "--check"],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout + build.stderr
    assert "fmpy validate and fmutool -check passed" in build.stdout
    (fmu,) = tmp_path.glob("*.fmu")
    val = subprocess.run([exe, "fmu", "validate", str(fmu), "--stop-time", "0.5", "--no-checks"],
                         capture_output=True, text=True, timeout=600)
    assert val.returncode == 0 and "PASS" in val.stdout, val.stdout + val.stderr
