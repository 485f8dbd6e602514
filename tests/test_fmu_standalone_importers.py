"""The standalone FMU (``mbsd-twin fmu build --standalone``) in the co-simulation engines other than
fmpy and the C hosts of tests/test_fmu_standalone.py, against the native Simulator (``run_native``):

- OSP libcosim (libcosimpy, FMI 2.0 only: libcosim has no FMI 3.0 importer);
- Ecos (ecospy 0.7: its Python API over libecosc, and its ``ecos`` command line), FMI 2.0 and 3.0,
  two instances of the FMU in one simulation, and a reset of the simulation;
- the SSP speed-control example (examples/cosim) with the standalone plant, in libcosim and in Ecos,
  against the same system with the host-independent plant.

Every run is a real importer loading the real FMU (in a subprocess: a crash is a failure, not a lost
test session). Tolerance: 1e-9 of each output's range over the run (1e-3 for an output that hardly
moves); the Ecos command line writes its CSV with 6 decimals, so its check is at that resolution.
"""

from __future__ import annotations

import csv
import shutil
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pythonfmu")
pytest.importorskip("pythonfmu3")
fmpy = pytest.importorskip("fmpy")
if not shutil.which("gcc"):
    pytest.skip("gcc is needed to build the standalone FMU", allow_module_level=True)

import libcosimpy  # noqa: E402,F401  (test extra: a missing importer is a failure, not a skip)
from fmu_harness import REPO, run_script, shared_fmu, wrapper_python  # noqa: E402

from mbsd_twin.fmi.importers import run_isolated  # noqa: E402
from mbsd_twin.fmi.inputs import parse_assignment  # noqa: E402
from mbsd_twin.fmi.native import run_native  # noqa: E402
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism  # noqa: E402

COSIM = REPO / "examples" / "cosim"
INPUTS = dict(parse_assignment(s) for s in ("motor_torque=pwc:2:0.3:-1:0.6:3", "piston_force=step:0.5:0:-20"))
STOP, STEP = 1.0, 1e-3


def ecos_cli(tmp: Path) -> Path:
    """The ``ecos`` binary of the ecospy wheel, copied to ``tmp`` with its run bit (the wheel ships it
    without one). ecospy is part of the test extra: a missing one is a failure."""
    import ecospy

    src = Path(ecospy.__file__).resolve().parent / "binaries" / "ecos"
    exe = tmp / "ecos"
    shutil.copy2(src, exe)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


@pytest.fixture(scope="module")
def fmus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("standalone")
    return {v: shared_fmu(tmp_path_factory, f"standalone{v}", tmp / f"fmi{v}" / "SliderCrank.fmu") for v in ("2", "3")}


def _outputs(fmu: Path) -> list[str]:
    md = fmpy.read_model_description(str(fmu))
    return [v.name for v in md.modelVariables if v.causality == "output"]


def _band(ref: np.ndarray, rel: float = 1e-9) -> float:
    return rel * max(float(np.ptp(ref)), 1e-3)


def _assert_close(run: dict[str, np.ndarray], ref: dict[str, np.ndarray], names: list[str], what: str,
                  rel: float = 1e-9, absolute: float = 0.0) -> None:
    """Each output within ``rel`` of its range (+ ``absolute``); the energy terms within ``rel`` of the
    largest energy range (a term that stays near 0, as the drivers' work without drivers, is noise
    of the time grid's last bit: libcosim counts nanoseconds), the residual within ``rel`` of 1 mm."""
    energy = max((float(np.ptp(ref[n])) for n in names if n.startswith("energy.")), default=0.0)
    for name in names:
        err = float(np.max(np.abs(run[name] - ref[name])))
        band = _band(ref[name], rel) if not name.startswith("energy.") else rel * max(energy, 1e-3)
        assert err <= band + absolute, f"{what}: {name} differs by {err:.3g} (band {band:.3g})"


def test_libcosim_runs_the_standalone_fmu_as_the_simulator(fmus: dict[str, Path]) -> None:
    outputs = _outputs(fmus["2"])
    run = run_isolated("libcosim", fmus["2"], STOP, STEP, inputs=INPUTS, timeout=600)
    assert len(run["time"]) == round(STOP / STEP) and run["time"][-1] == pytest.approx(STOP, abs=1e-12)
    times = np.concatenate([[0.0], run["time"]])
    ref = run_native(load_mechanism(bundled_slider_crank()), times, dict(INPUTS), outputs)
    _assert_close(run, {k: v[1:] for k, v in ref.items()}, outputs, "libcosim")
    assert np.abs(ref["crank.omega"]).max() > 1.0


ECOSPY = """
import json, os, sys
from ecospy import EcosLib, EcosSimulation, EcosSimulationStructure
sys.path.insert(0, {repo!r})
from mbsd_twin.fmi.inputs import parse_assignment
EcosLib.set_log_level("warn")
fmu, names, stop, step = {fmu!r}, {names!r}, {stop!r}, {step!r}
torque = parse_assignment("motor_torque=pwc:2:0.3:-1:0.6:3")[1]
structure = EcosSimulationStructure()
structure.add_model("a", fmu)
structure.add_model("b", fmu)
sim = EcosSimulation(structure=structure, step_size=step)

def run():
    sim.set_real("b::crank.mass", 2.5)   # a fixed parameter: before initialisation
    sim.set_real("b::motor_torque", -1.5)
    sim.set_real("a::motor_torque", torque(0.0))
    assert sim.init(), EcosLib.get_last_error()
    rows = []
    for _ in range(round(stop / step)):
        t = sim.get_time()
        sim.set_real("a::motor_torque", torque(t))  # sampled at the start of the step, held over it
        sim.step()
        rows.append([t, sim.get_time(), *(sim.get_real(f"{{i}}::{{n}}") for i in "ab" for n in names)])
    return rows

first = run()
sim.reset()
second = run()
sim.terminate()
sim.free()
print(json.dumps({{"first": first, "second": second}}))
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.parametrize("version", ["2", "3"])
def test_ecospy_two_instances_and_a_reset_match_the_simulator(fmus: dict[str, Path], tmp_path: Path,
                                                              version: str) -> None:
    outputs = _outputs(fmus[version])
    res = run_script(tmp_path, ECOSPY, repo=str(REPO), fmu=str(fmus[version]), names=outputs, stop=STOP, step=STEP)
    first, second = np.array(res["first"]), np.array(res["second"])
    np.testing.assert_array_equal(second, first)  # the reset run repeats the first bit for bit
    n = len(outputs)
    times = np.concatenate([[0.0], first[:, 1]])
    np.testing.assert_array_equal(first[:, 0], times[:-1])  # each step starts where the last ended
    assert times[-1] == pytest.approx(STOP, abs=1e-9)
    mech = load_mechanism(bundled_slider_crank())
    ref_a = run_native(mech, times, {"motor_torque": INPUTS["motor_torque"]}, outputs)
    ref_b = run_native(mech, times, {"motor_torque": lambda t: -1.5}, outputs, parameters={"crank.mass": 2.5})
    a = {name: first[:, 2 + k] for k, name in enumerate(outputs)}
    b = {name: first[:, 2 + n + k] for k, name in enumerate(outputs)}
    _assert_close(a, {k: v[1:] for k, v in ref_a.items()}, outputs, f"ecospy FMI {version}, instance a")
    _assert_close(b, {k: v[1:] for k, v in ref_b.items()}, outputs, f"ecospy FMI {version}, instance b")
    assert abs(a["crank.theta"][-1] - b["crank.theta"][-1]) > 0.1  # two instances, two different runs


def _two_instance_ssp(fmu: Path, dest: Path) -> Path:
    """An SSP 1.0 file with two components of ``fmu``, not connected, each with its parameter values
    in the set "settings": ``a`` drives the crank with 2 N·m, ``b`` is heavier and driven with
    -1.5 N·m (an input's start value set as a parameter value, as the SSP allows)."""
    ssd, ssv = ("http://ssp-standard.org/SSP1/SystemStructure" + s for s in ("Description", "ParameterValues"))
    ET.register_namespace("ssd", ssd)  # Ecos reads the elements by their usual prefixes
    ET.register_namespace("ssv", ssv)
    root = ET.Element(f"{{{ssd}}}SystemStructureDescription", {"name": "Two", "version": "1.0"})
    system = ET.SubElement(root, f"{{{ssd}}}System", {"name": "Two"})
    elements = ET.SubElement(system, f"{{{ssd}}}Elements")
    for name, values in (("a", {"motor_torque": 2.0}), ("b", {"motor_torque": -1.5, "crank.mass": 2.5})):
        comp = ET.SubElement(elements, f"{{{ssd}}}Component", {
            "name": name, "type": "application/x-fmu-sharedlibrary", "source": f"resources/{fmu.name}"})
        binding = ET.SubElement(ET.SubElement(comp, f"{{{ssd}}}ParameterBindings"), f"{{{ssd}}}ParameterBinding")
        pset = ET.SubElement(ET.SubElement(binding, f"{{{ssd}}}ParameterValues"), f"{{{ssv}}}ParameterSet",
                             {"version": "1.0", "name": "settings"})
        params = ET.SubElement(pset, f"{{{ssv}}}Parameters")
        for pname, value in values.items():
            ET.SubElement(ET.SubElement(params, f"{{{ssv}}}Parameter", {"name": pname}), f"{{{ssv}}}Real",
                          {"value": repr(value)})
    with zipfile.ZipFile(dest, "w") as zf:
        zf.writestr("SystemStructure.ssd", ET.tostring(root, encoding="UTF-8", xml_declaration=True))
        zf.write(fmu, f"resources/{fmu.name}")
    return dest


def _read_ecos_csv(path: Path) -> dict[str, np.ndarray]:
    with path.open() as f:
        rows = list(csv.reader(f, skipinitialspace=True))
    values = np.array(rows[1:], dtype=float)
    names = [h.strip().removesuffix("[REAL]") for h in rows[0]]
    return {name: values[:, k] for k, name in enumerate(names)}


@pytest.mark.parametrize("version", ["2", "3"])
def test_ecos_command_line_runs_the_fmu_and_two_instances(fmus: dict[str, Path], tmp_path: Path,
                                                          version: str) -> None:
    exe = ecos_cli(tmp_path)
    outputs = _outputs(fmus[version])
    mech = load_mechanism(bundled_slider_crank())
    # the FMU alone (its inputs at their start value 0: gravity and the joint friction act), then an
    # SSP with two instances of it
    single, two = tmp_path / "single", tmp_path / "two"
    for folder, path, extra in ((single, fmus[version], []),
                                (two, _two_instance_ssp(fmus[version], tmp_path / "Two.ssp"),
                                 ["--parameterSet", "settings"])):
        folder.mkdir()
        proc = subprocess.run([str(exe), "simulate", "--path", str(path), "--stepSize", repr(STEP), "--stopTime",
                               repr(STOP), "-l", "warn", *extra], cwd=folder, capture_output=True, text=True,
                              timeout=600, env={"PATH": "/usr/bin:/bin"})
        assert proc.returncode == 0, proc.stdout + proc.stderr
    (csv_single,) = single.glob("*.csv")
    (csv_two,) = two.glob("*.csv")
    run = _read_ecos_csv(csv_single)
    times = run["time"]
    # from t = 0, every 1 ms; ecos adds the step up (t += h) and ends at 0.999 s: 0.999000…01 + 0.001 > 1
    assert times[0] == 0.0 and np.allclose(np.diff(times), STEP, rtol=0, atol=1e-9)
    assert times[-1] >= STOP - STEP - 1e-9
    # the CSV holds 6 decimals: the check is at that resolution (5e-7 absolute, rounding of the time
    # column aside); ecospy above checks the same engine to 1e-9
    ref = run_native(mech, times, {}, outputs)
    _assert_close({n: run[f"instance::{n}"] for n in outputs}, ref, outputs, f"ecos CLI FMI {version}",
                  absolute=6e-7)
    assert np.ptp(ref["crank.theta"]) > 0.5  # the crank swings under gravity
    run = _read_ecos_csv(csv_two)
    np.testing.assert_array_equal(run["time"], times)
    for inst, torque, params in (("a", 2.0, {}), ("b", -1.5, {"crank.mass": 2.5})):
        ref = run_native(mech, times, {"motor_torque": lambda t, x=torque: x}, outputs, parameters=params)
        _assert_close({n: run[f"{inst}::{n}"] for n in outputs}, ref, outputs,
                      f"ecos CLI FMI {version}, SSP instance {inst}", absolute=6e-7)


ECOS_SSP = """
import json, os, sys
from ecospy import EcosLib, EcosSimulation
EcosLib.set_log_level("warn")
ssp, stop, step = {ssp!r}, {stop!r}, {step!r}
sim = EcosSimulation(ssp_path=ssp, step_size=step)
assert sim.init(parameter_set="settings"), EcosLib.get_last_error()  # the .ssd's values
names = ["profile::speed", "mechanism::crank.omega", "controller::torque"]
rows = []
for _ in range(round(stop / step)):
    sim.step()
    rows.append([sim.get_time(), *(sim.get_real(n) for n in names)])
sim.terminate()
sim.free()
print(json.dumps({{"rows": rows}}))
sys.stdout.flush()
os._exit(0)
"""

LIBCOSIM_SSP = """
import json, os, sys
from pathlib import Path
import numpy as np
sys.path.insert(0, {cosim!r})
from speed_control import run_libcosim
np.savez({out!r}, **run_libcosim(Path({ssp!r})))
print(json.dumps({{}}))
sys.stdout.flush()
os._exit(0)
"""


def test_speed_control_ssp_with_the_standalone_plant_in_libcosim_and_ecos(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/cosim's SSP system with the standalone slider crank: libcosim and Ecos give the same
    closed loop as with the host-independent plant (the example's flavour, checked against an
    independent derivation in tests/test_cosim_example.py), each master in a process of its own."""
    sys.path.insert(0, str(COSIM))
    try:
        from cosim_build import Settings, build_ssp
        from speed_control import SETPOINT, SPEED, TORQUE
    finally:
        sys.path.remove(str(COSIM))
    settings = Settings(controller={"kp": 3.0, "ki": 30.0, "torque_max": 15.0},  # as tests/test_cosim_example.py
                        profile={"ramp_start": 0.1, "ramp_end": 0.6, "ramp_speed": 15.0, "step_time": 1.5,
                                 "step_speed": 25.0}, stop=2.5, step=1e-3)
    monkeypatch.setenv("MBSD_TWIN_FMU_PYTHON", str(wrapper_python(tmp_path)))  # the host-independent worker
    flavours = ("standalone", "host-independent")
    ssp = {f: build_ssp(tmp_path / f / "SpeedControl.ssp", settings, standalone=f == "standalone") for f in flavours}
    lc, ec = {}, {}
    for f in flavours:
        out = tmp_path / f / "libcosim.npz"
        run_script(tmp_path / f, LIBCOSIM_SSP, cosim=str(COSIM), out=str(out), ssp=str(ssp[f]))
        with np.load(out) as data:
            lc[f] = {k: np.array(data[k]) for k in data.files}
        rows = run_script(tmp_path / f, ECOS_SSP, ssp=str(ssp[f]), stop=settings.stop, step=settings.step)["rows"]
        ec[f] = np.array(rows)
    with zipfile.ZipFile(ssp["standalone"]) as zf:
        zf.extract("resources/SliderCrank.fmu", tmp_path / "x")
    with zipfile.ZipFile(tmp_path / "x" / "resources" / "SliderCrank.fmu") as zf:
        assert not [n for n in zf.namelist() if n.endswith(".py")]  # the standalone plant indeed
    n = round(settings.stop / settings.step)
    names = [SETPOINT, SPEED, TORQUE]
    for f in flavours:
        assert len(lc[f]["time"]) == n and ec[f].shape == (n, 4)
        np.testing.assert_allclose(ec[f][:, 0], lc[f]["time"], rtol=0, atol=1e-9)
    for k, name in enumerate(names):
        # each master: the standalone plant gives the host-independent plant's closed loop
        for master, a, b in (("libcosim", lc["standalone"][name], lc["host-independent"][name]),
                             ("Ecos", ec["standalone"][:, k + 1], ec["host-independent"][:, k + 1])):
            err = float(np.max(np.abs(a - b)))
            assert err <= _band(b), f"{master}: {name}, standalone vs host-independent plant: {err:.3g}"
        # and the two masters agree: Ecos adds the step up (t += h), libcosim counts nanoseconds, so the
        # plant's step ends differ in the last bit, which the loop carries to a few 1e-9 of the range
        err = float(np.max(np.abs(ec["standalone"][:, k + 1] - lc["standalone"][name])))
        assert err <= _band(lc["standalone"][name], 1e-6), f"Ecos vs libcosim: {name} differs by {err:.3g}"
    assert np.max(np.abs(lc["standalone"][TORQUE])) == settings.controller["torque_max"]  # the loop is at work
    assert lc["standalone"][SETPOINT][-1] == settings.profile["step_speed"]  # the .ssd's values reached it
