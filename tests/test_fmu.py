"""The slider-crank FMU: standard checks, agreement with the native Simulator, FMU state, error paths
and instances. Every FMU is run in a subprocess (PythonFMU runs in the importer's interpreter and
can abort it at exit, NTNU-IHB/PythonFMU#228); the scripts end with ``os._exit`` after printing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pythonfmu")
pytest.importorskip("fmpy")

from fmu_harness import finish, importer, run_script, shared_fmu  # noqa: E402

from mbsd_twin.fmi.importers import output_names  # noqa: E402
from mbsd_twin.fmi.inputs import communication_points, parse_profile  # noqa: E402
from mbsd_twin.fmi.native import run_native  # noqa: E402
from mbsd_twin.fmi.validation import check_fmu, fmu_mechanism  # noqa: E402

STOP, FINE = 5.0, 1e-3
TORQUE = "pwc:2:1:-1:2:3:3.5:0"          # piecewise-constant motor torque [N·m], switches on the 0.1 s grid
FORCE = "step:2.5:0:-20"                 # piston force [N]
INPUTS = {"motor_torque": TORQUE, "piston_force": FORCE}


@pytest.fixture(scope="module")
def fmu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_fmu(tmp_path_factory, "pythonfmu2", tmp_path_factory.mktemp("fmu") / "SliderCrank.fmu")


@pytest.fixture(scope="module")
def runs(fmu: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, np.ndarray]]:
    """fmpy at 1 ms, 10 ms and 0.1 s (subprocesses, in parallel) and the native run at 1 ms."""
    tmp = tmp_path_factory.mktemp("runs")
    procs = {h: (importer(fmu, tmp / f"fmpy_{h}.npz", STOP, h, INPUTS), tmp / f"fmpy_{h}.npz")
             for h in (FINE, 1e-2, 0.1)}
    profiles = {"motor_torque": parse_profile(TORQUE), "piston_force": parse_profile(FORCE)}
    native = run_native(fmu_mechanism(fmu), communication_points(0.0, STOP, FINE), profiles, output_names(fmu))
    return {"native": native, **{f"fmpy_{h}": finish(p, out) for h, (p, out) in procs.items()}}


def _band_scale(name: str, ref: dict[str, np.ndarray]) -> float:
    """Scale of an output for relative bands: its own peak; energies share the largest energy peak;
    the position residual (≈ 0) is measured against 1 mm."""
    if name.startswith("energy."):
        return max(float(np.abs(v).max()) for k, v in ref.items() if k.startswith("energy."))
    if name.startswith("constraints."):
        return 1e-3
    return float(np.abs(ref[name]).max())


def test_fmpy_validate_and_fmutool_check_pass(fmu: Path) -> None:
    assert check_fmu(fmu) == []
    proc = subprocess.run([str(Path(sys.executable).with_name("fmutool")), "-input", str(fmu), "-check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No semantic error" in proc.stdout + proc.stderr


def test_fmpy_1ms_agrees_with_native_to_1e9(runs: dict[str, dict[str, np.ndarray]]) -> None:
    fmpy_run, native = runs[f"fmpy_{FINE}"], runs["native"]
    assert len(fmpy_run["time"]) == len(native["time"]) == 5001
    np.testing.assert_array_equal(fmpy_run["time"], native["time"])
    for name in native:
        scale = float(np.abs(native[name]).max())
        err = float(np.abs(fmpy_run[name] - native[name]).max())
        assert err <= 1e-9 * scale + 1e-300, f"{name}: max error {err:.3g}, scale {scale:.3g}"
    assert abs(native["crank.omega"]).max() > 10.0  # the run does something


@pytest.mark.parametrize("step", [1e-2, 0.1])
def test_coarser_communication_steps_agree_within_solver_tolerance(
        runs: dict[str, dict[str, np.ndarray]], step: float) -> None:
    coarse, native = runs[f"fmpy_{step}"], runs["native"]
    k = round(step / FINE)
    ref = {n: v[::k] for n, v in native.items()}
    np.testing.assert_allclose(coarse["time"], ref["time"], rtol=0, atol=1e-12)
    rtol = 1e-8  # SolverOptions().rtol, the FMU's default solver.rtol
    for name in ref:
        err = float(np.abs(coarse[name] - ref[name]).max())
        assert err <= 10 * rtol * _band_scale(name, ref), f"{name}: {err:.3g} at step {step}"


STATE_SCRIPT = """
import json, os
from fmpy import read_model_description, extract
from fmpy.fmi2 import FMU2Slave
fmu = {fmu!r}
md = read_model_description(fmu); d = extract(fmu)
vr = {{v.name: v.valueReference for v in md.modelVariables}}
outs = [vr[v.name] for v in md.modelVariables if v.causality == "output"]
def new(name):
    s = FMU2Slave(guid=md.guid, unzipDirectory=d, modelIdentifier=md.coSimulation.modelIdentifier,
                  instanceName=name)
    s.instantiate(); s.setupExperiment(startTime=0.0); s.enterInitializationMode(); s.exitInitializationMode()
    return s
def run(s, t, n, torque):
    rows = []
    for k in range(n):
        s.setReal([vr["motor_torque"]], [torque])
        s.doStep(t + k * 1e-3, 1e-3)
        rows.append(list(s.getReal(outs)))
    return rows
a = new("a")
run(a, 0.0, 100, 3.0)
state = a.getFMUstate()
first = run(a, 0.1, 50, -2.0)
a.setReal([vr["motor_torque"]], [99.0])
a.setFMUstate(state)
restored_input = a.getReal([vr["motor_torque"]])[0]
again = run(a, 0.1, 50, -2.0)
blob = a.serializeFMUstate(state)
a.freeFMUstate(state)
run(a, 0.15, 10, 5.0)
a.setFMUstate(a.deSerializeFMUstate(bytes(blob)))
after_deserialize = run(a, 0.1, 50, -2.0)
b = new("b")
b.setFMUstate(b.deSerializeFMUstate(bytes(blob)))
other_instance = run(b, 0.1, 50, -2.0)
for s in (a, b):
    s.terminate(); s.freeInstance()
print(json.dumps(dict(first=first, again=again, after_deserialize=after_deserialize,
                      other_instance=other_instance, restored_input=restored_input, size=len(blob))))
os._exit(0)
"""


def test_state_get_set_and_serialize_are_bit_identical(fmu: Path, tmp_path: Path) -> None:
    r = run_script(tmp_path, STATE_SCRIPT, fmu=str(fmu))
    assert r["first"] == r["again"]                 # get, advance, set, advance again
    assert r["first"] == r["after_deserialize"]     # serialize / deserialize
    assert r["first"] == r["other_instance"]        # deserialized into a second instance
    assert r["restored_input"] == 3.0               # the state includes the inputs (99 was set after)
    assert r["size"] > 500                          # the full solver state, not just the variables


ERROR_SCRIPT = """
import json, os
from fmpy import read_model_description, extract
from fmpy.fmi2 import FMU2Slave
from fmpy.fmi1 import FMICallException
fmu = {fmu!r}
md = read_model_description(fmu); d = extract(fmu)
vr = {{v.name: v.valueReference for v in md.modelVariables}}
def new(name, **params):
    s = FMU2Slave(guid=md.guid, unzipDirectory=d, modelIdentifier=md.coSimulation.modelIdentifier,
                  instanceName=name)
    s.instantiate(loggingOn=True); s.setupExperiment(startTime=0.0); s.enterInitializationMode()
    for k, v in params.items():
        s.setReal([vr[k.replace("__", ".")]], [v])
    return s
out = {{}}
bad = new("bad", guide__p1_y=1.0)           # the guide 1 m above the crank: out of reach
try:
    bad.exitInitializationMode(); out["init"] = "ok"
except FMICallException as e:
    out["init"] = e.status
print("---", flush=True)
rtol = new("rtol", solver__rtol=-1.0)
try:
    rtol.exitInitializationMode(); out["rtol"] = "ok"
except FMICallException as e:
    out["rtol"] = e.status
print("---", flush=True)
s = new("s"); s.exitInitializationMode()
s.setReal([vr["motor_torque"]], [2.0]); s.doStep(0.0, 1e-3)
state = s.getFMUstate()
s.setReal([vr["motor_torque"]], [1e300])
try:
    s.doStep(1e-3, 1e-3); out["step"] = "ok"
except FMICallException as e:
    out["step"] = e.status
s.setFMUstate(state)
s.doStep(1e-3, 1e-3)
out["after_rollback"] = s.getReal([vr["crank.theta"]])[0]
s.terminate(); s.freeInstance()
print(json.dumps(out))
os._exit(0)
"""


def test_error_paths(fmu: Path, tmp_path: Path) -> None:
    r = run_script(tmp_path, ERROR_SCRIPT, fmu=str(fmu))
    bad_log, rtol_log, step_log = r["log"].split("---")
    # Unassemblable parameter: initialisation fails (PythonFMU turns every Python exception into
    # fmi2Fatal) and the logged message names the parameter and the reason.
    assert r["init"] == 4
    assert "parameter guide.p1_y = 1.0 rejected" in bad_log and "cannot be assembled" in bad_log
    assert r["rtol"] == 4 and "rtol must be a positive number" in rtol_log
    # A numerical failure inside doStep is fmi2Discard (2), not a crash; rollback recovers.
    assert r["step"] == 2
    assert "[DISCARD]" in step_log and "discarded" in step_log
    assert np.isfinite(r["after_rollback"])


INSTANCES_SCRIPT = """
import json, os
from fmpy import read_model_description, extract
from fmpy.fmi2 import FMU2Slave
fmu = {fmu!r}
md = read_model_description(fmu); d = extract(fmu)
vr = {{v.name: v.valueReference for v in md.modelVariables}}
def new(name, mass=None):
    s = FMU2Slave(guid=md.guid, unzipDirectory=d, modelIdentifier=md.coSimulation.modelIdentifier,
                  instanceName=name)
    s.instantiate(); s.setupExperiment(startTime=0.0); s.enterInitializationMode()
    if mass is not None:
        s.setReal([vr["crank.mass"]], [mass])
    s.exitInitializationMode()
    return s
def run(pairs, n=30):  # interleaved: every instance steps before the next communication point
    for k in range(n):
        for s, torque in pairs:
            s.setReal([vr["motor_torque"]], [torque]); s.doStep(k * 1e-3, 1e-3)
    return [s.getReal([vr["crank.theta"], vr["crank.omega"]]) for s, _ in pairs]
alone = new("alone"); ref = run([(alone, 2.0)])[0]; alone.terminate(); alone.freeInstance()
a, b, c = new("a"), new("b", mass=3.0), new("c")
res = run([(a, 2.0), (b, 2.0), (c, -1.0)])
for s in (a, b, c):
    s.terminate(); s.freeInstance()
again = new("again"); ref2 = run([(again, 2.0)])[0]
reactions = [vr["main_bearing.fx"], vr["main_bearing.fy"], vr["crank.theta"]]
r0 = again.getReal(reactions)
again.setReal([vr["motor_torque"]], [50.0])
r1 = again.getReal(reactions)   # same instant, new input: reactions change, the angle does not
again.terminate(); again.freeInstance()
print(json.dumps(dict(ref=ref, res=res, ref2=ref2, r0=r0, r1=r1)))
os._exit(0)
"""


def test_instances_are_independent_and_reinstantiable(fmu: Path, tmp_path: Path) -> None:
    r = run_script(tmp_path, INSTANCES_SCRIPT, fmu=str(fmu))
    assert r["res"][0] == r["ref"] == r["ref2"]  # interleaved instances do not disturb each other
    assert r["res"][1] != r["ref"] and r["res"][2] != r["ref"]
    (fx0, fy0, th0), (fx1, fy1, th1) = r["r0"], r["r1"]
    assert th1 == th0 and (fx1, fy1) != (fx0, fy0)  # direct feedthrough, as the ModelStructure says
