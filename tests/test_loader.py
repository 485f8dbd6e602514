"""Mechanism files: the shipped examples load, and every kind of mistake is reported with its
location and a useful message (all of them at once)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mbsd_twin.errors import MechanismError
from mbsd_twin.model.loader import load_mechanism, loads_mechanism
from mbsd_twin.model.model import Body, Driver, Joint, Load, Mechanism
from mbsd_twin.model.profiles import Constant, ConstantSpeed, Harmonic, Polynomial, Table
from mbsd_twin.model.validation import validate_mechanism

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "mechanisms"
SLIDER_CRANK = EXAMPLES / "slider_crank_driven.toml"


def broken(tmp_path: Path, text: str, name: str = "broken.toml") -> MechanismError:
    """Write ``text`` to a file, load it and return the MechanismError it must raise."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(MechanismError) as info:
        load_mechanism(path)
    assert info.value.source == str(path)
    return info.value


def edited(old: str, new: str, count: int = 1) -> str:
    """The slider-crank file with ``old`` replaced by ``new`` (which must be there)."""
    text = SLIDER_CRANK.read_text(encoding="utf-8")
    assert old in text, old
    return text.replace(old, new, count)


def messages(err: MechanismError) -> list[str]:
    return [str(p) for p in err.problems]


# --- the shipped examples --------------------------------------------------------------------

def test_slider_crank_example_loads() -> None:
    m = load_mechanism(SLIDER_CRANK)
    assert m.name == "slider-crank"
    assert m.source == str(SLIDER_CRANK)
    assert [b.name for b in m.bodies] == ["crank", "rod", "piston"]
    assert m.body("rod").mass == 2.0 and m.body("rod").inertia == 0.015
    assert m.body("crank").cg == (0.05, 0.0)
    assert m.gravity == (0.0, -9.81)
    assert [j.type for j in m.joints] == ["revolute", "revolute", "revolute", "prismatic"]
    assert m.joint("crank_pin").points == ((0.1, 0.0), (0.0, 0.0))
    assert m.joint("guide").axis == (1.0, 0.0)
    (motor,) = m.drivers
    assert motor.type == "angle" and motor.bodies == ("crank",)
    assert motor.profile == ConstantSpeed(speed=2 * math.pi, start=0.0)
    assert m.loads == ()


@pytest.mark.parametrize(("file", "n_bodies", "n_joints", "n_drivers"), [
    ("pendulum.toml", 1, 1, 0),
    ("double_pendulum.toml", 2, 2, 0),
    ("four_bar.toml", 3, 4, 0),
    ("four_bar_driven.toml", 3, 4, 1),
    ("scotch_yoke.toml", 2, 3, 1),
    ("slider_crank_driven.toml", 3, 4, 1),
])
def test_every_example_loads(file: str, n_bodies: int, n_joints: int, n_drivers: int) -> None:
    text = (EXAMPLES / file).read_text(encoding="utf-8")
    assert text.startswith("#") or file == "slider_crank_driven.toml"  # a comment block describes it
    m = load_mechanism(EXAMPLES / file)
    assert (len(m.bodies), len(m.joints), len(m.drivers)) == (n_bodies, n_joints, n_drivers)
    assert validate_mechanism(m) == []


def test_example_numbers() -> None:
    pendulum = load_mechanism(EXAMPLES / "pendulum.toml")
    bar = pendulum.body("bar")
    assert (bar.mass, bar.cg, bar.angle) == (1.0, (0.5, 0.0), 0.0)
    assert bar.inertia == pytest.approx(1.0 / 12.0)

    four_bar = load_mechanism(EXAMPLES / "four_bar_driven.toml")
    crank, coupler, rocker = four_bar.bodies
    assert crank.inertia == pytest.approx(0.8**2 / 12) and coupler.inertia == pytest.approx(2.0**2 / 12)
    assert rocker.position == (2.0, 0.0)
    # the guess closes the loop: A + b e(θ3) == O4 + c e(θ4), with the coupler above ground
    a_pt = (0.8 * math.cos(crank.angle), 0.8 * math.sin(crank.angle))
    assert coupler.position == pytest.approx(a_pt, abs=1e-5)
    b_from_coupler = (a_pt[0] + 2.0 * math.cos(coupler.angle), a_pt[1] + 2.0 * math.sin(coupler.angle))
    b_from_rocker = (2.0 + math.cos(rocker.angle), math.sin(rocker.angle))
    assert b_from_coupler == pytest.approx(b_from_rocker, abs=1e-5)
    assert b_from_rocker[1] > 0
    assert four_bar.drivers[0].profile == ConstantSpeed(speed=2 * math.pi, start=math.radians(10))

    yoke = load_mechanism(EXAMPLES / "scotch_yoke.toml")
    slot = yoke.joint("slot")
    assert (slot.type, slot.bodies, slot.axis) == ("point_on_line", ("yoke", "crank"), (0.0, 1.0))
    assert yoke.joint("slide").axis == (1.0, 0.0)


def test_loads_mechanism_from_string_and_defaults() -> None:
    m = loads_mechanism('format = "mbsd-twin/1"\nname = "tiny"\n'
                        '[[bodies]]\nname = "b"\nmass = 2\ninertia = 1\n')
    assert m.source == "<string>"
    assert m.gravity == (0.0, -9.81)
    (b,) = m.bodies
    assert b == Body("b", 2.0, 1.0) and isinstance(b.mass, float)  # integers become floats


def test_loads_section_maps_onto_load_dataclass() -> None:
    text = SLIDER_CRANK.read_text(encoding="utf-8") + """
[[loads]]
name = "gas"
type = "force"
body = "piston"
point = [0.01, 0.0]
direction = [-1.0, 0.0]
input = "gas_force"
unit = "N"
description = "gas force"

[[loads]]
name = "brake"
type = "torque"
body = "crank"
reaction_body = "ground"
profile = { kind = "table", times = [0, 1, 2], values = [0, 5, 0] }

[[loads]]
name = "spring"
type = "spring_damper"
bodies = ["ground", "piston"]
points = [[0.6, 0.0], [0.0, 0.0]]
stiffness = 2000
damping = 5
"""
    m = loads_mechanism(text)
    gas, brake, spring = m.loads
    assert gas.bodies == ("piston",) and gas.points == ((0.01, 0.0),)
    assert (gas.input, gas.unit, gas.direction, gas.frame) == ("gas_force", "N", (-1.0, 0.0), "world")
    assert brake.bodies == ("crank", "ground") and isinstance(brake.profile, Table)
    assert (spring.stiffness, spring.damping, spring.free_length) == (2000.0, 5.0, None)
    assert m.input_names == ("gas_force",)


# --- one mistake at a time -------------------------------------------------------------------

def test_unknown_key_suggests_the_closest(tmp_path: Path) -> None:
    err = broken(tmp_path, edited("inertia = 0.015", "inertai = 0.015"))
    msgs = messages(err)
    assert any("bodies[1] (rod).inertai: unknown key 'inertai'; did you mean 'inertia'?" in m for m in msgs)
    assert any("bodies[1] (rod).inertia: missing required key 'inertia'" in m for m in msgs)
    assert all(m.startswith(f"{tmp_path / 'broken.toml'}: ") for m in msgs)


def test_key_of_another_joint_type(tmp_path: Path) -> None:
    err = broken(tmp_path, edited('points = [[0.3, 0.0], [0.0, 0.0]]',
                                  'points = [[0.3, 0.0], [0.0, 0.0]]\nratio = 2.0'))
    (p,) = err.problems
    assert p.location.endswith("joints[2] (wrist_pin).ratio")
    assert "does not apply to revolute joints" in p.message and "gear" in p.message


def test_missing_key(tmp_path: Path) -> None:
    err = broken(tmp_path, edited("mass = 1.5\n", ""))
    (p,) = err.problems
    assert p.location.endswith("bodies[2] (piston).mass")
    assert p.message == "missing required key 'mass'"


def test_missing_axis_of_prismatic_joint(tmp_path: Path) -> None:
    err = broken(tmp_path, edited("axis = [1.0, 0.0]", ""))
    (p,) = err.problems
    assert p.location.endswith("joints[3] (guide).axis") and "missing required key 'axis'" in p.message


def test_string_where_a_number_is_expected(tmp_path: Path) -> None:
    err = broken(tmp_path, edited("mass = 2.0", 'mass = "heavy"'))
    (p,) = err.problems
    assert p.location.endswith("bodies[1] (rod).mass")
    assert p.message == "expected a number, got string 'heavy'"


def test_boolean_is_not_a_number(tmp_path: Path) -> None:
    err = broken(tmp_path, edited("inertia = 0.015", "inertia = true"))
    assert "expected a number, got boolean true" in str(err)


def test_wrong_vector_length(tmp_path: Path) -> None:
    err = broken(tmp_path, edited("cg = [0.15, 0.0]", "cg = [0.15, 0.0, 0.0]"))
    (p,) = err.problems
    assert p.location.endswith("bodies[1] (rod).cg") and "expected [x, y] (2 numbers)" in p.message


def test_nan_mass(tmp_path: Path) -> None:
    err = broken(tmp_path, edited("mass = 2.0", "mass = nan"))
    (p,) = err.problems
    assert p.location.endswith("bodies[1] (rod).mass")
    assert "mass must be a finite number > 0, got nan" in p.message


def test_negative_inertia(tmp_path: Path) -> None:
    err = broken(tmp_path, edited("inertia = 0.015", "inertia = -0.015"))
    (p,) = err.problems
    assert p.location.endswith("bodies[1] (rod).inertia") and "got -0.015" in p.message


def test_duplicate_names(tmp_path: Path) -> None:
    text = edited('name = "rod"', 'name = "crank"').replace('name = "guide"', 'name = "motor"')
    err = broken(tmp_path, text)
    msgs = "\n".join(messages(err))
    assert "bodies[1] (crank).name: duplicate name 'crank' (also used by bodies[0] (crank))" in msgs
    assert "drivers[0] (motor).name: duplicate name 'motor' (also used by joints[3] (motor))" in msgs


def test_body_called_ground_is_rejected(tmp_path: Path) -> None:
    err = broken(tmp_path, edited('name = "piston"', 'name = "ground"'))
    assert any("bodies[2] (ground).name" in m and "reserved" in m for m in messages(err))


def test_unknown_body_reference(tmp_path: Path) -> None:
    err = broken(tmp_path, edited('bodies = ["rod", "piston"]', 'bodies = ["rod", "pistn"]'))
    (p,) = err.problems
    assert p.location.endswith("joints[2] (wrist_pin).bodies")
    assert "unknown body 'pistn'" in p.message and "did you mean 'piston'?" in p.message


def test_driver_body_reference_is_located_at_body_key(tmp_path: Path) -> None:
    err = broken(tmp_path, edited('body = "crank"', 'body = "ground"'))
    (p,) = err.problems
    assert p.location.endswith("drivers[0] (motor).body") and "cannot act on 'ground'" in p.message


def test_zero_axis(tmp_path: Path) -> None:
    err = broken(tmp_path, edited("axis = [1.0, 0.0]", "axis = [0, 0]"))
    (p,) = err.problems
    assert p.location.endswith("joints[3] (guide).axis")
    assert p.message == "axis must be a non-zero vector, got [0.0, 0.0]"


def test_unknown_joint_type_lists_valid_types(tmp_path: Path) -> None:
    err = broken(tmp_path, edited('type = "prismatic"', 'type = "slider"'))
    (p,) = err.problems
    assert p.location.endswith("joints[3] (guide).type")
    assert "unknown joint type 'slider'" in p.message
    assert "revolute, prismatic, point_on_line, gear, fixed" in p.message


def test_unknown_profile_kind(tmp_path: Path) -> None:
    err = broken(tmp_path, edited('kind = "constant_speed"', 'kind = "constant_sped"'))
    (p,) = err.problems
    assert p.location.endswith("drivers[0] (motor).profile.kind")
    assert "unknown profile kind 'constant_sped'" in p.message
    assert "did you mean 'constant_speed'?" in p.message and "harmonic" in p.message


def test_bad_table_profile(tmp_path: Path) -> None:
    err = broken(tmp_path, edited('{ kind = "constant_speed", speed = 6.283185307179586, start = 0.0 }',
                                  '{ kind = "table", times = [0.0, 2.0, 1.0], values = [0.0, 1.0] }'))
    msgs = "\n".join(messages(err))
    assert "drivers[0] (motor).profile.times: times must be strictly increasing" in msgs
    assert "equal lengths, got 3 and 2" in msgs


def test_toml_syntax_error_reports_line_and_column(tmp_path: Path) -> None:
    text = edited("mass = 2.0", "mass = ")
    line = text.splitlines().index("mass = ") + 1
    err = broken(tmp_path, text)
    (p,) = err.problems
    assert "TOML syntax error" in p.message
    assert p.location == f"{tmp_path / 'broken.toml'}: line {line}, column 8"
    assert "broken.toml" in str(err)


def test_bad_format_string(tmp_path: Path) -> None:
    err = broken(tmp_path, edited('format = "mbsd-twin/1"', 'format = "mbsd-twin/2"'))
    (p,) = err.problems
    assert p.location.endswith(": format")
    assert p.message == "unsupported format 'mbsd-twin/2'; expected 'mbsd-twin/1'"


def test_at_most_one_magnitude_source(tmp_path: Path) -> None:
    text = SLIDER_CRANK.read_text(encoding="utf-8") + (
        '\n[[loads]]\nname = "push"\ntype = "force"\nbody = "piston"\nvalue = 3.0\ninput = "F"\n')
    (p,) = broken(tmp_path, text).problems
    assert p.location.endswith("loads[0] (push).input")
    assert "at most one of value, profile and input" in p.message


def test_generalized_load_is_api_only(tmp_path: Path) -> None:
    text = SLIDER_CRANK.read_text(encoding="utf-8") + '\n[[loads]]\nname = "q"\ntype = "generalized"\n'
    (p,) = broken(tmp_path, text).problems
    assert p.location.endswith("loads[0] (q).type") and "Python API" in p.message


# --- many mistakes at once -------------------------------------------------------------------

def test_many_problems_reported_in_one_error(tmp_path: Path) -> None:
    text = (edited("mass = 2.0", 'mass = "heavy"')
            .replace("inertia = 1.0e-3", "inertia = -1.0e-3")
            .replace("axis = [1.0, 0.0]", "axis = [0.0, 0.0]")
            .replace('type = "revolute"\nbodies = ["rod", "piston"]',
                     'type = "hinge"\nbodies = ["rod", "piston"]')
            .replace('kind = "constant_speed"', 'kind = "ramp"')
            .replace("cg = [0.05, 0.0]", "cgg = [0.05, 0.0]"))
    err = broken(tmp_path, text)
    assert len(err.problems) >= 3
    where = [p.location.split(": ", 1)[1] for p in err.problems]
    assert sorted(where) == sorted(["bodies[1] (rod).mass", "bodies[2] (piston).inertia",
                                    "joints[3] (guide).axis", "joints[2] (wrist_pin).type",
                                    "drivers[0] (motor).profile.kind", "bodies[0] (crank).cgg"])
    assert str(err).startswith(f"{tmp_path / 'broken.toml'}: 6 problems in the mechanism description")


def test_empty_file_lists_all_missing_top_level_keys() -> None:
    with pytest.raises(MechanismError) as info:
        loads_mechanism("", source="empty.toml")
    assert [p.location for p in info.value.problems] == ["empty.toml: format", "empty.toml: name",
                                                         "empty.toml: bodies"]


# --- validate_mechanism on Python-built mechanisms -------------------------------------------

def _mechanism(**changes: object) -> Mechanism:
    parts: dict[str, object] = {
        "name": "api",
        "bodies": (Body("crank", 1.0, 1e-3, cg=(0.05, 0.0)), Body("slider", 1.0, 1e-3)),
        "joints": (Joint("pivot", "revolute", ("ground", "crank")),
                   Joint("slot", "point_on_line", ("slider", "crank"), ((0.0, 0.0), (0.1, 0.0)),
                         axis=(0.0, 1.0)),
                   Joint("rail", "prismatic", ("ground", "slider"), axis=(1.0, 0.0), viscous_friction=0.5)),
        "drivers": (Driver("motor", "angle", ("crank",), ConstantSpeed(6.0)),),
        "loads": (Load("drag", "force", ("slider",), input="drag_force"),
                  Load("wobble", "torque", ("crank",), profile=Harmonic(1.0, 2.0))),
    }
    parts.update(changes)
    return Mechanism(**parts)  # type: ignore[arg-type]


def test_validate_python_built_mechanism_ok() -> None:
    assert validate_mechanism(_mechanism()) == []


def test_validate_python_built_mechanism_reports_everything() -> None:
    mech = _mechanism(
        bodies=(Body("crank", float("inf"), 0.0), Body("crank", -1.0, 1e-3, position=(0.0, float("nan")))),
        joints=(Joint("pivot", "revolute", ("ground", "ground")),
                Joint("gear", "gear", ("crank", "ground"), ratio=0.0, viscous_friction=1.0),
                Joint("motor", "weld", ("crank", "ground"))),
        drivers=(Driver("motor", "coordinate", ("crank",), Polynomial(()), coordinate="z"),
                 Driver("d", "distance", ("crank",), Constant(1.0))),
        loads=(Load("f", "force", ("nobody",), profile=Constant(1.0), input="1bad", direction=(0.0, 0.0)),
               Load("k", "spring_damper", ("crank", "ground"), stiffness=-1.0, free_length=-0.1),
               Load("q", "generalized", ("crank",))),
        gravity=(0.0, float("nan")),
    )
    text = "\n".join(str(p) for p in validate_mechanism(mech))
    for expected in [
        "gravity: gravity must be a finite vector, got [0.0, nan]",
        "bodies[0] (crank).mass: mass must be a finite number > 0, got inf",
        "bodies[0] (crank).inertia: inertia must be a finite number > 0, got 0.0",
        "bodies[1] (crank).name: duplicate name 'crank'",
        "bodies[1] (crank).mass: mass must be a finite number > 0, got -1.0",
        "bodies[1] (crank).position: position must be a finite vector",
        "joints[0] (pivot).bodies: revolute joint must connect two different bodies",
        "joints[1] (gear).ratio: ratio must be a finite, non-zero number, got 0.0",
        "joints[1] (gear).viscous_friction: viscous_friction applies only to revolute and prismatic",
        "joints[2] (motor).type: unknown joint type 'weld'",
        "drivers[0] (motor).name: duplicate name 'motor' (also used by joints[2] (motor))",
        "drivers[0] (motor).coordinate: unknown coordinate 'z'",
        "drivers[0] (motor).profile.coefficients: needs at least 1 coefficient",
        "drivers[1] (d).bodies: distance driver needs exactly 2 bodies",
        "loads[0] (f).bodies: unknown body 'nobody'",
        "loads[0] (f).input: give at most one of profile and input",
        "loads[0] (f).input: input name must be an identifier",
        "loads[0] (f).direction: direction must be a non-zero vector, got [0.0, 0.0]",
        "loads[1] (k).stiffness: stiffness must be a finite number >= 0, got -1.0",
        "loads[1] (k).free_length: free_length must be a finite number >= 0, got -0.1",
        "loads[2] (q).function: a generalized load needs a callable function",
    ]:
        assert expected in text, f"missing: {expected}\n--- got:\n{text}"


def test_validate_profiles_built_in_python() -> None:
    drivers = (Driver("m1", "angle", ("crank",), Harmonic(1.0, float("nan"))),
               Driver("m2", "angle", ("slider",), Polynomial((1.0, float("inf")))))
    text = "\n".join(str(p) for p in validate_mechanism(_mechanism(drivers=drivers)))
    assert "drivers[0] (m1).profile.frequency: frequency must be a finite number >= 0, got nan" in text
    assert ("drivers[1] (m2).profile.coefficients: coefficients must contain only finite numbers, "
            "got inf") in text


def test_initial_velocities_of_bodies() -> None:
    text = edited("angle = 0.0                       # rad, initial guess",
                  "angle = 0.0\nvelocity = [0.0, 0.3]\nomega = 6.283185307179586")
    crank = loads_mechanism(text).body("crank")
    assert crank.velocity == (0.0, 0.3) and crank.omega == pytest.approx(2 * math.pi)
    with pytest.raises(MechanismError, match=r"bodies\[0\] \(crank\)\.omega: omega must be a finite number"):
        loads_mechanism(text.replace("omega = 6.283185307179586", "omega = inf"))
