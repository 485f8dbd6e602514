"""FMU building blocks without running an FMU: units, input profiles, the communication grid, the
variable table, the post-processed modelDescription and the docs generated from the ports."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from mbsd_twin import Simulator, load_mechanism
from mbsd_twin.errors import FmuWarning
from mbsd_twin.fmi.inputs import communication_points, parse_assignment, parse_profile
from mbsd_twin.fmi.units import UnitError, declared_type, parse_unit
from mbsd_twin.fmi.variables import SLIDER_CRANK_OUTPUTS, fmu_variables, markdown_table

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("unit", "exps"), [
    ("N.m", {"kg": 1, "m": 2, "s": -2}), ("m/s2", {"m": 1, "s": -2}), ("kg.m2", {"kg": 1, "m": 2}),
    ("N.m.s/rad", {"kg": 1, "m": 2, "s": -1, "rad": -1}), ("rad/s", {"rad": 1, "s": -1}), ("1", {}),
    ("J", {"kg": 1, "m": 2, "s": -2}), ("N/m", {"kg": 1, "s": -2}),
])
def test_units_to_si_base_exponents(unit: str, exps: dict[str, int]) -> None:
    assert parse_unit(unit).exponents == exps


@pytest.mark.parametrize("bad", ["Nm", "m//s", "furlong", "m/", ""])
def test_bad_units_are_rejected(bad: str) -> None:
    with pytest.raises(UnitError):
        parse_unit(bad)


def test_declared_types() -> None:
    assert (declared_type("rad"), declared_type("N.m"), declared_type("N")) == ("Angle", "Torque", "Force")


def test_profiles() -> None:
    assert parse_profile("2.5")(7.0) == 2.5
    step = parse_profile("step:0.5:1:3")
    assert (step(0.49), step(0.5), step(0.5 - 1e-13), step(2.0)) == (1.0, 3.0, 3.0, 3.0)
    pwc = parse_profile("pwc:2:1:-1:2:3")
    assert [pwc(t) for t in (0.0, 0.999, 1.0, 1.5, 2.0, 9.0)] == [2, 2, -1, -1, 3, 3]
    ramp = parse_profile("ramp:1:2:0:10")
    assert (ramp(0.5), ramp(1.5), ramp(3.0)) == (0.0, 5.0, 10.0)
    sine = parse_profile("sine:2:0.5:1")
    assert sine(0.5) == pytest.approx(3.0)
    for p in (step, pwc, ramp, sine, parse_profile("-4")):
        assert parse_profile(p.spec) == parse_profile(p.spec) and parse_profile(p.spec).args == p.args
    assert parse_assignment("motor_torque=step:1:0:2")[0] == "motor_torque"


@pytest.mark.parametrize("bad", ["step:1:2", "pwc:1:2", "pwc:0:2:1:1:3", "ramp:2:1:0:1", "warp:1", "1+1",
                                 "step:nan:1:2", "x"])
def test_bad_profiles_say_what_is_expected(bad: str) -> None:
    with pytest.raises(ValueError, match="input profile"):
        parse_profile(bad)


def test_communication_points_follow_fmpy() -> None:
    t = communication_points(0.0, 5.0, 1e-3)
    assert len(t) == 5001 and t[0] == 0.0 and t[-1] == 5.0
    assert t[1234] == 0.0 + 1234 * 1e-3
    short = communication_points(0.0, 1.05, 0.1)     # last step shortened to end at stop
    assert len(short) == 12 and short[-1] == 1.05 and short[-2] == pytest.approx(1.0)


def test_slider_crank_variables() -> None:
    sim = Simulator(load_mechanism(ROOT / "examples/mechanisms/slider_crank.toml"))
    table = {v.name: v for v in fmu_variables(sim, SLIDER_CRANK_OUTPUTS)}
    inputs = [(v.name, v.unit) for v in table.values() if v.causality == "input"]
    assert inputs == [("motor_torque", "N.m"), ("piston_force", "N")]
    outputs = [n for n, v in table.items() if v.causality == "output"]
    assert outputs[:4] == ["crank.theta", "crank.omega", "piston.x", "piston.vx"]
    for j in ("main_bearing", "crank_pin", "wrist_pin"):
        assert {f"{j}.fx", f"{j}.fy"} <= set(outputs)
    assert {"guide.fx", "guide.fy", "guide.mz", "energy.total", "energy.balance_error",
            "constraints.position_residual"} <= set(outputs)
    assert table["solver.rtol"].variability == "tunable" and table["solver.max_step"].start == 0.0
    assert table["crank.mass"].variability == "fixed" and table["crank.mass"].start == 1.0
    assert table["main_bearing.viscous_friction"].start == 0.05
    assert table["main_bearing.fx"].feedthrough and not table["crank.theta"].feedthrough


@pytest.mark.parametrize("backend", ["numpy", "auto"])
def test_set_input_gives_direct_feedthrough(backend: str) -> None:
    from mbsd_twin import SolverOptions

    mech = load_mechanism(ROOT / "examples/mechanisms/slider_crank.toml")
    sim = Simulator(mech, SolverOptions(backend=backend))
    sim.advance_to(0.01)
    before = sim.outputs()
    sim.set_input("motor_torque", 5.0)
    state = sim.get_state()
    after = sim.outputs()
    assert after["crank.alpha"] != before["crank.alpha"] and after["main_bearing.fy"] != before["main_bearing.fy"]
    assert after["crank.theta"] == before["crank.theta"] and sim.time == 0.01
    fresh = Simulator(mech, SolverOptions(backend=backend))
    fresh.set_state(state)
    fresh.advance_to(0.02)
    sim.advance_to(0.02)
    assert sim.outputs() == fresh.outputs()  # reading outputs does not change the integration


def test_generic_output_rule() -> None:
    sim = Simulator(load_mechanism(ROOT / "examples/mechanisms/double_pendulum.toml"))
    outs = [v.name for v in fmu_variables(sim) if v.causality == "output"]
    for body in ("upper", "lower"):
        assert {f"{body}.x", f"{body}.y", f"{body}.vx", f"{body}.vy", f"{body}.theta", f"{body}.omega"} <= set(outs)
    assert not any(n.endswith((".ax", ".ay", ".alpha")) for n in outs)
    assert "energy.total" in outs and "constraints.position_residual" in outs


@pytest.fixture(scope="module")
def generic_fmu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("pythonfmu")
    from mbsd_twin.fmi.build import build_fmu

    with pytest.warns(FmuWarning, match="has no input"):  # an FMU no co-simulation can drive: said at build
        return build_fmu(ROOT / "examples/mechanisms/double_pendulum.toml", tmp_path_factory.mktemp("g"))


def test_generic_mechanism_fmu_passes_the_checks(generic_fmu: Path) -> None:
    pytest.importorskip("fmpy")
    from mbsd_twin.fmi.validation import check_fmu

    assert generic_fmu.name == "DoublePendulum.fmu"
    assert check_fmu(generic_fmu) == []


def test_model_description_units_initial_and_structure(generic_fmu: Path) -> None:
    with zipfile.ZipFile(generic_fmu) as zf:
        root = ET.fromstring(zf.read("modelDescription.xml"))
        assert "resources/mechanism.toml" in zf.namelist()
    units = {u.get("name") for u in root.iter("Unit")}
    types = {t.get("name") for t in root.iter("SimpleType")}
    svs = root.find("ModelVariables").findall("ScalarVariable")  # type: ignore[union-attr]
    for sv in svs:
        real = sv.find("Real")
        assert real is not None and real.get("unit") in units, sv.get("name")
        assert sv.get("variability") in ("continuous", "fixed", "tunable")
        assert real.get("declaredType") is None or real.get("declaredType") in types
        if sv.get("causality") == "output":
            assert sv.get("initial") == "calculated" and real.get("start") is None
        elif sv.get("causality") == "parameter":
            assert sv.get("initial") == "exact" and math.isfinite(float(real.get("start", "nan")))
        else:
            assert sv.get("initial") is None and real.get("start") is not None
    index = {k + 1 for k, sv in enumerate(svs) if sv.get("causality") == "output"}
    structure = root.find("ModelStructure")
    assert structure is not None
    for section in ("Outputs", "InitialUnknowns"):
        listed = {int(u.get("index", "0")) for u in structure.find(section).iter("Unknown")}  # type: ignore[union-attr]
        assert listed == index
    cs = root.find("CoSimulation")
    assert cs is not None
    for flag in ("canHandleVariableCommunicationStepSize", "canGetAndSetFMUstate", "canSerializeFMUstate"):
        assert cs.get(flag) == "true"
    assert cs.get("canBeInstantiatedOnlyOncePerProcess") == "false"


def test_entry_script_in_fmu_folder_is_the_one_the_builder_ships() -> None:
    pytest.importorskip("pythonfmu")
    from mbsd_twin.fmi.build import ENTRY_SCRIPT, bundled_slider_crank, model_identifier

    assert (ROOT / "fmu/mbsd_twin_fmu.py").read_text() == ENTRY_SCRIPT
    assert bundled_slider_crank().read_text() == (ROOT / "examples/mechanisms/slider_crank.toml").read_text()
    assert model_identifier("slider-crank") == "SliderCrank" and model_identifier("4 bar") == "M4Bar"


def test_readme_variable_table_is_generated_from_the_ports() -> None:
    sim = Simulator(load_mechanism(ROOT / "examples/mechanisms/slider_crank.toml"))
    table = markdown_table(fmu_variables(sim, SLIDER_CRANK_OUTPUTS))
    assert table in (ROOT / "fmu/README.md").read_text(), "regenerate the table in fmu/README.md"
