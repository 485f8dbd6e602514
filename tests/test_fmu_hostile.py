"""Hostile FMU inputs (issue #15): NaN / inf / ±1e308 inputs and zero, negative, non-finite or
vanishing step sizes give fmi2Discard (FMI 2.0: PythonFMU's do_step knows only ok and discard) or
fmi3Error / fmi3Discard, never a hang or a crash of the host; the instance keeps working after
(directly when the step changed nothing, after ``setFMUstate`` when a failed integration stopped
part-way, as the standard has the master do). The real FMUs run in fmpy in a subprocess; a
property-based test drives the slave classes in-process with arbitrary floats.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pythonfmu")
pytest.importorskip("pythonfmu3")
pytest.importorskip("fmpy")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mbsd_twin.fmi.build import build_fmu  # noqa: E402
from mbsd_twin.fmi.fmi3 import MechanismSlave3  # noqa: E402
from mbsd_twin.fmi.slave import MechanismSlave  # noqa: E402
from mbsd_twin.fmi.variables import SLIDER_CRANK_OUTPUTS  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from fmu_harness import shared_fmu  # noqa: E402
from test_fmu_slave import INPUTS, Api, _resources  # noqa: E402

HOSTILE_INPUTS = [math.nan, math.inf, -math.inf, 1e308, -1e308]
HOSTILE_STEPS = [0.0, -1e-3, math.nan, math.inf, -math.inf, 5e-324]

SCRIPT = """
import json, math, os
from fmpy import read_model_description, extract
from fmpy.fmi1 import FMICallException
fmu = {fmu!r}; fmi3 = {fmi3!r}; nan, inf = math.nan, math.inf
md = read_model_description(fmu); d = extract(fmu)
vr = {{v.name: v.valueReference for v in md.modelVariables}}
if fmi3:
    from fmpy.fmi3 import FMU3Slave as Slave
else:
    from fmpy.fmi2 import FMU2Slave as Slave
s = Slave(guid=md.guid, unzipDirectory=d, modelIdentifier=md.coSimulation.modelIdentifier, instanceName="h")
s.instantiate(loggingOn=True)
if fmi3:
    s.enterInitializationMode(startTime=0.0)
    put, get = s.setFloat64, s.getFloat64
    get_state, set_state = s.getFMUState, s.setFMUState
else:
    s.setupExperiment(startTime=0.0); s.enterInitializationMode()
    put, get = s.setReal, s.getReal
    get_state, set_state = s.getFMUstate, s.setFMUstate
s.exitInitializationMode()
ins = [vr["motor_torque"], vr["piston_force"]]
t, h = 0.0, 1e-3
def status(call):
    try:
        call(); return 0
    except FMICallException as e:
        return int(e.status)
def valid_step():
    global t
    put(ins, [2.0, 0.0])
    st = status(lambda: s.doStep(t, h)) if not fmi3 else status(lambda: s.doStep(t, h))
    if st == 0:
        t += h
    return st
out = dict(inputs=[], steps=[])
for k in range(3):
    assert valid_step() == 0
for value in {inputs!r}:
    for slot in range(2):
        state = get_state()
        vals = [2.0, 0.0]; vals[slot] = value
        put(ins, vals)
        st = status(lambda: s.doStep(t, h))
        after = valid_step()
        if after != 0:  # a failed integration may stop part-way: roll back, as the standard says
            set_state(state)
            after = valid_step()
        out["inputs"].append([repr(value), slot, st, after, get([vr["crank.theta"]])[0]])
        s.freeFMUstate(state) if not fmi3 else s.freeFMUState(state)
for size in {steps!r}:
    st = status(lambda: s.doStep(t, size))
    out["steps"].append([repr(size), st, valid_step()])
s.terminate(); s.freeInstance()
print(json.dumps(out))
os._exit(0)
"""


@pytest.fixture(scope="module", params=["fmi2", "fmi3"])
def fmu(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bool]:
    fmi3 = request.param == "fmi3"
    dest = tmp_path_factory.mktemp(request.param) / "SliderCrank.fmu"
    return shared_fmu(tmp_path_factory, "pythonfmu3" if fmi3 else "pythonfmu2", dest), fmi3


def test_hostile_inputs_and_step_sizes_in_fmpy(fmu: tuple[Path, bool], tmp_path: Path) -> None:
    path, fmi3 = fmu
    script = tmp_path / "hostile.py"
    script.write_text(textwrap.dedent(SCRIPT).format(fmu=str(path), fmi3=fmi3, inputs=HOSTILE_INPUTS,
                                                     steps=HOSTILE_STEPS))
    proc = subprocess.run([sys.executable, "-W", "ignore", str(script)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    discard, error = 2, 3
    for value, slot, status, after, theta in r["inputs"]:
        assert status == discard, (value, slot, status)      # refused, never ok, fatal or a hang
        assert after == 0 and math.isfinite(theta)   # and the instance goes on
    for size, status, after in r["steps"]:
        assert status == (error if fmi3 else discard), (size, status)
        assert after == 0, size
    assert "doStep refused (the FMU stays at t=" in proc.stdout


SLAVES: dict[type, tuple[Api, bytes]] = {}  # one initialised slave per class and its initial state


def _slave(cls: type, tmp_path_factory: pytest.TempPathFactory) -> Api:
    if cls not in SLAVES:
        api = Api(cls, _resources(tmp_path_factory.mktemp("res"), list(SLIDER_CRANK_OUTPUTS)))
        api.s.log = lambda *a, **k: None
        api.init()
        SLAVES[cls] = api, api.s._get_fmu_state()
    api, state = SLAVES[cls]
    api.s._set_fmu_state(state)
    return api


@settings(max_examples=50, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate])  # no shrinking: a step can take seconds
@given(data=st.data())
def test_slave_survives_arbitrary_inputs_and_steps(data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
                                                   ) -> None:
    """Any floats as inputs and step sizes: the slave returns ok or a refusal, its outputs stay
    finite once the inputs are valid again, and a valid step works after (from where a refused
    step left the FMU)."""
    cls = data.draw(st.sampled_from([MechanismSlave, MechanismSlave3]))
    api = _slave(cls, tmp_path_factory)
    floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(HOSTILE_INPUTS)
    steps = st.floats(min_value=-1.0, max_value=1e-2) | st.sampled_from(HOSTILE_STEPS)
    for _ in range(data.draw(st.integers(1, 4))):
        before, t = api.s._get_fmu_state(), api.s._sim.time
        api.set(list(INPUTS), [data.draw(floats), data.draw(floats)])
        refused: Any = api.s._step(t, data.draw(steps))
        assert refused in (None, cls.STATUS_DISCARD, cls.STATUS_BAD_STEP)
        assert len(api.get(api.outputs)) == len(api.outputs)
        if refused is not None and api.s._sim.time != t:
            api.s._set_fmu_state(before)  # stopped part-way: the master rolls back
        elif refused is None:
            api.s._set_fmu_state(before)  # an accepted huge input may have thrown the mechanism anywhere
        api.set(list(INPUTS), [1.0, 0.0])
        assert all(math.isfinite(x) for x in api.get(api.outputs))
        assert api.s._step(api.s._sim.time, 1e-3) is None
        assert all(math.isfinite(x) for x in api.get(api.outputs))


@pytest.mark.parametrize("cls", [MechanismSlave, MechanismSlave3])
def test_a_runaway_step_is_discarded_at_the_step_time_limit(cls: type, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A mechanism on the numpy path (the polygonal wheel on terrain, its Simulators built with
    ``backend="numpy"``, which the FMU does not expose: about 28 s of wall clock per simulated
    second) asked for a 5 s step with a 0.5 s step time limit: the step returns Discard after
    about 0.5 s, naming the limit, and the instance then steps on from its state before."""
    from dataclasses import replace

    from mbsd_twin import Simulator, SolverOptions
    from mbsd_twin.fmi import native, slave_logic

    solver_options = native.solver_options

    def numpy_options(tunable: Any) -> SolverOptions:
        return replace(solver_options(tunable), backend="numpy")

    monkeypatch.setattr(native, "solver_options", numpy_options)
    monkeypatch.setattr(slave_logic, "Simulator", lambda mech: Simulator(mech, SolverOptions(backend="numpy")))
    mech = Path(__file__).parents[1] / "examples" / "mechanisms" / "terrain_wheel_polygonal.toml"
    res = _resources(tmp_path, ["*"])
    (res / "mechanism.toml").write_bytes(mech.read_bytes())
    meta = json.loads((res / "mbsd_twin_fmu.json").read_text())
    (res / "mbsd_twin_fmu.json").write_text(json.dumps(meta | {"step_time_limit": 0.5}))
    api = Api(cls, res)
    api.init()
    assert api.s._sim.backend == "numpy"
    state = api.s._get_fmu_state()
    t0 = time.perf_counter()
    assert not api.step(0.0, 5.0)
    elapsed = time.perf_counter() - t0
    assert 0.5 <= elapsed < 2.0, elapsed
    assert any("step time limit of 0.5 s" in m.msg for m in api.s.log_queue)
    api.s._set_fmu_state(state)
    assert api.step(0.0, 1e-3)


def test_build_records_the_step_time_limit(tmp_path: Path) -> None:
    import zipfile

    path = build_fmu(None, tmp_path / "S.fmu", step_time_limit=2.5)
    with zipfile.ZipFile(path) as z:
        meta = json.loads(z.read("resources/mbsd_twin_fmu.json"))
    assert meta["step_time_limit"] == 2.5
    with pytest.raises(ValueError, match="step_time_limit must be a positive number of seconds, got 0"):
        build_fmu(None, tmp_path / "T.fmu", step_time_limit=0)
