"""Hostile mechanism files (issue #15, item 6): size, nesting and dotted-key limits before the TOML
parser, extreme numbers as located errors, numerical failures naming a culprit, plausibility
warnings, and the wall-clock / step budget of ``simulate``."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import mbsd_twin.solvers.analysis as analysis
from mbsd_twin.cli import main
from mbsd_twin.errors import MechanismError, PlausibilityWarning
from mbsd_twin.model import toml_guard
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism, loads_mechanism
from mbsd_twin.simulation.simulate import simulate
from mbsd_twin.solvers.analysis import check
from mbsd_twin.solvers.dynamics import SolverOptions

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "mechanisms"
BASE = bundled_slider_crank().read_text(encoding="utf-8")


def error(text: str, source: str = "f.toml") -> MechanismError:
    with pytest.raises(MechanismError) as info:
        loads_mechanism(text, source)
    return info.value


def edited(old: str, new: str, text: str = BASE) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


@pytest.mark.parametrize("tail", ["x = " + "{a = " * 2000 + "1" + "}" * 2000,
                                  "x = " + "[" * 2000 + "]" * 2000])
def test_deep_nesting_is_a_located_error_not_a_recursion_error(tail: str) -> None:
    err = error(BASE + "\n" + tail + "\n")
    assert len(err.problems) == 1
    assert err.problems[0].location.startswith("f.toml: line 80, column ")
    assert "nested more than 32 deep" in err.problems[0].message


@pytest.mark.parametrize("text", [BASE + "\n[" + ".".join(["a"] * 50_000) + "]\n",
                                  edited('name = "slider-crank"', "a" + ".a" * 50_000 + " = 1")])
def test_a_50k_part_dotted_key_is_rejected_at_once(text: str) -> None:
    t0 = time.perf_counter()
    err = error(text)
    assert time.perf_counter() - t0 < 1.0  # tomllib alone takes > 10 s
    assert "dotted key or table header with more than 32 parts" in str(err)
    assert "line " in err.problems[0].location


def test_legal_nesting_and_strings_with_brackets_still_load() -> None:
    text = edited('description = "motor', 'description = "[[[[[[{{{{{{.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a'
                  '.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a # motor')
    assert loads_mechanism(text).loads[0].description.startswith("[[[[[[{{{{{{")


def test_file_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    path.write_text(BASE + "#" * toml_guard.MAX_BYTES, encoding="utf-8")
    with pytest.raises(MechanismError, match=r"file too large: \d+ bytes \(limit 2097152 bytes\)") as info:
        load_mechanism(path)
    assert info.value.problems[0].location == str(path)
    assert "file too large" in str(error(BASE + "#" * toml_guard.MAX_BYTES))


def test_too_many_elements_in_a_section() -> None:
    text = BASE + '\n[[drivers]]\nname = "d"\n' * (toml_guard.MAX_ELEMENTS + 1)
    assert "drivers: 1001 elements (limit 1000)" in str(error(text))


def test_huge_integers_are_located() -> None:
    err = error(edited("mass = 1.0 ", "mass = 9" + "9" * 400 + " "))
    assert err.problems[0].location == "f.toml: bodies[0] (crank).mass"
    assert "finite" in err.problems[0].message
    err = error(edited("mass = 1.0 ", "mass = 9" + "9" * 5000 + " "))
    assert err.problems[0].location == "f.toml: line 13, column 8"


def test_a_spline_point_at_1e30_is_a_located_error() -> None:
    terrain = (EXAMPLES / "terrain_wheel.toml").read_text(encoding="utf-8")
    err = error(edited("[0.2, 0.0]", "[1e30, 0.0]", terrain), "tw.toml")
    assert [p.location for p in err.problems] == ["tw.toml: loads[2] (tyre).surface.points"]
    assert "no curve can be built through these values" in err.problems[0].message


def test_a_denormal_or_huge_axis_is_a_located_error() -> None:
    for axis in ("[5e-324, 0.0]", "[1e200, 1e200]"):
        err = error(edited("axis = [1.0, 0.0]", f"axis = {axis}"))
        assert err.problems[0].location == "f.toml: joints[3] (guide).axis"
        assert "direction of length between 1e-150 and 1e150" in err.problems[0].message


def test_long_values_are_shortened_in_messages() -> None:
    err = error(edited('name = "crank"', "name = " + repr(list(range(10_000)))))
    assert len(str(err)) < 1000 and "(10000 items)" in str(err)


def test_plausibility_warnings_name_the_value() -> None:
    with pytest.warns(PlausibilityWarning) as rec:
        loads_mechanism(edited("mass = 1.0 ", "mass = 1e30 "), "f.toml")
    assert [str(w.message) for w in rec] == [
        "f.toml: bodies[0] (crank).mass: 1e+30 kg is implausibly large for a mass (typical up to 1000 kg)"]
    with pytest.warns(PlausibilityWarning, match=r"bodies\[0\] \(crank\).cg\[0\]: 5e-324 is a subnormal"):
        loads_mechanism(edited("cg = [0.05, 0.0]", "cg = [5e-324, 0.0]"), "f.toml")


def test_likely_unit_slips_are_warned_with_their_location() -> None:
    """An angle written in degrees (10 for 10°) and a length written in millimetres (300 for
    0.3 m) are valid numbers, so they pass validation; the loader warns about both, naming where."""
    text = edited("angle = 0.0                       # rad, initial guess", "angle = 10.0")
    with pytest.warns(PlausibilityWarning) as rec:
        loads_mechanism(text, "f.toml")
    assert [str(w.message) for w in rec] == [
        "f.toml: bodies[0] (crank).angle: 10.0 rad is more than a full turn (573°): degrees written for radians? "
        "(angles are in radians)"]
    with pytest.warns(PlausibilityWarning) as rec:
        loads_mechanism(edited("points = [[0.3, 0.0], [0.0, 0.0]]", "points = [[300.0, 0.0], [0.0, 0.0]]"),
                        "f.toml")
    msgs = [str(w.message) for w in rec]
    assert len(msgs) == 1 and "points[0][0]: 300.0 m is" in msgs[0] and "times the median length" in msgs[0]
    assert "millimetres written for metres?" in msgs[0]
    for ok in ("angle = 6.0", "angle = -6.0"):  # less than a full turn: no warning
        with warnings.catch_warnings():
            warnings.simplefilter("error", PlausibilityWarning)
            loads_mechanism(edited("angle = 0.0                       # rad, initial guess", ok), "f.toml")


def test_the_examples_have_no_plausibility_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlausibilityWarning)
        for path in sorted(EXAMPLES.glob("*.toml")):
            load_mechanism(path)


def test_a_linalg_error_names_the_most_extreme_value(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.warns(PlausibilityWarning):
        mech = loads_mechanism(edited("inertia = 0.015", "inertia = 1e-290"), "f.toml")

    def svd_fails(*args: object, **kw: object) -> None:
        raise np.linalg.LinAlgError("SVD did not converge")
    monkeypatch.setattr(analysis, "assemble", svd_fails)
    with pytest.raises(MechanismError) as info:
        check(mech)
    (p,) = info.value.problems
    assert p.location == "f.toml: bodies[1] (rod).inertia"
    assert "the assembly failed numerically (LinAlgError: SVD did not converge)" in p.message
    assert "1e-290" in p.message


def test_simulate_time_limit_ends_the_run_with_a_clear_message() -> None:
    mech = load_mechanism(EXAMPLES / "slider_crank.toml")
    res = simulate(mech, 100.0, 0.01, inputs={"motor_torque": 2.0}, time_limit=0.2)
    assert res.status == -1 and res.time[-1] < 100.0
    assert res.message.startswith("wall-clock limit of 0.2 s reached at t=")
    with pytest.raises(ValueError, match="time_limit must be a positive number"):
        simulate(mech, 1.0, 0.01, time_limit=0.0)


def test_cli_simulate_budget_and_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    heavy = tmp_path / "heavy.toml"
    heavy.write_text(edited("mass = 1.0 ", "mass = 1e30 "), encoding="utf-8")
    code = main(["simulate", str(heavy), "--t-end", "1", "--max-steps", "2000", "--time-limit", "30",
                 "-o", str(tmp_path / "out.csv")])
    err = capsys.readouterr().err
    assert code == 1
    assert f"mbsd-twin simulate: warning: {heavy}: bodies[0] (crank).mass: 1e+30 kg is implausibly large" in err
    assert "too many internal steps" in err and "--max-steps 2000 per output interval" in err
    code = main(["simulate", str(EXAMPLES / "slider_crank.toml"), "--t-end", "100", "--set", "motor_torque=2",
                 "--time-limit", "0.3", "-o", str(tmp_path / "out2.csv")])
    assert code == 1 and "wall-clock limit of 0.3 s reached" in capsys.readouterr().err


def test_time_limit_interrupts_the_numpy_path_inside_an_output_interval() -> None:
    """The cam on the numpy path over one 50 s output interval: the step budget does not bound one
    scipy step (it may reject trial steps for minutes on absurd values); the wall-clock limit,
    checked at every right-hand-side evaluation, ends the run inside the interval."""
    mech = load_mechanism(EXAMPLES / "cam_follower.toml")
    t0 = time.perf_counter()
    res = simulate(mech, 100.0, 50.0, time_limit=0.5, options=SolverOptions(backend="numpy"))
    assert time.perf_counter() - t0 < 3.0
    assert res.status == -1 and res.message.startswith("wall-clock limit of 0.5 s reached at t=")
    assert len(res) == 1  # stopped inside the first 50 s interval, not at its end
