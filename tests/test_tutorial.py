"""docs/tutorial.md stays true: its file snippets build the shipped quick_return.toml, the numbers
`check` prints match the tutorial's text and the closed forms (DOF = 3·bodies − constraints, the
lever angle atan2(d, r)), the gear variation turns the pinion at −3 times the crank, the fmpy snippet
runs, and the docs' claims about spring defaults, `initial_velocity`, prismatic friction and which
input an output row reflects hold. (Its shell commands run in tests/test_docs_commands.py.)"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import mbsd_twin as mt
from mbsd_twin.cli import main as cli_main
from mbsd_twin.errors import MechanismError

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8")
FILE = ROOT / "examples" / "mechanisms" / "quick_return.toml"
R, D, L = 0.05, 0.15, 0.3  # crank radius, O2–O4 distance, lever length [m]
O4, S = np.array([0.0, -D]), np.array([0.2, 0.15])  # lever pivot, spring anchor


def section(n: int) -> str:
    return TUTORIAL.split(f"\n## {n}. ", 1)[1].split("\n## ", 1)[0]


def fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def test_snippets_build_the_shipped_file() -> None:
    snippets = tomllib.loads("\n".join(fenced(section(2), "toml")))
    shipped = tomllib.loads(FILE.read_text(encoding="utf-8"))
    assert snippets == shipped


def test_check_prints_the_tutorial_numbers(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli_main(["check", str(FILE), "--plot", str(tmp_path / "pose.png")]) == 0
    printed = capsys.readouterr().out.splitlines()
    shown = fenced(section(3), "text")[0].splitlines()
    skip = ("assembly", "condition", "plot")  # round-off and the path differ from run to run
    assert [ln for ln in printed if not ln.startswith(skip)] == [ln for ln in shown if not ln.startswith(skip)]
    assert (tmp_path / "pose.png").stat().st_size > 5_000
    # independent derivation: 3 coordinates per body, 2 equations per revolute or prismatic joint
    data = tomllib.loads(FILE.read_text(encoding="utf-8"))
    dof = 3 * len(data["bodies"]) - 2 * len(data["joints"])
    assert f"DOF            {dof} (coordinates − rank of the constraint Jacobian)" in printed and dof == 1
    rep = mt.check(mt.load_mechanism(FILE))
    pose = {b: (x, y, th) for b, x, y, th in rep.pose}
    assert rep.dof == dof and not rep.redundant
    assert pose["crank"][2] == 0.0                                  # pinned
    assert pose["block"][:2] == pytest.approx((R, 0.0), abs=1e-12)   # A = r (cos 0, sin 0)
    theta4 = math.atan2(D, R)
    assert pose["lever"] == pytest.approx((0.0, -D, theta4), abs=1e-12)
    assert pose["block"][2] == pytest.approx(theta4, abs=1e-12)
    assert "1.2490458" in TUTORIAL and f"{theta4:.7f}" == "1.2490458"


def test_tutorial_closed_form_numbers() -> None:
    theta4 = math.atan2(D, R)
    tip = O4 + L * np.array([math.cos(theta4), math.sin(theta4)])
    beta = math.asin(R / D)
    numbers = {"s": math.hypot(R, D), "tip_x": tip[0], "tip_y": tip[1], "free": float(np.linalg.norm(S - tip)),
               "low": math.pi / 2 - beta, "high": math.pi / 2 + beta,
               "ratio": (math.pi + 2 * beta) / (math.pi - 2 * beta)}
    for value, text in ((numbers["s"], "0.1581139"), (numbers["tip_x"], "0.0948683"), (numbers["tip_y"], "0.1346050"),
                        (numbers["free"], "0.1062529"), (numbers["low"], "1.2309594"), (numbers["high"], "1.9106332")):
        assert f"{value:.7f}" == text and text in TUTORIAL
    assert f"{numbers['ratio']:.3f}" == "1.552" and "1.552" in TUTORIAL


def test_spring_starts_unloaded_at_the_assembled_length() -> None:
    sim = mt.Simulator(mt.load_mechanism(FILE))
    assert sim.get_output("energy.elastic") == 0.0
    sim.set_input("motor_torque", 0.5)
    sim.advance_to(0.2)
    th = sim.get_output("lever.theta")
    tip = O4 + L * np.array([math.cos(th), math.sin(th)])
    stretch = float(np.linalg.norm(S - tip)) - 0.10625287962632810  # free length = |S − T| assembled
    assert sim.get_output("energy.elastic") == pytest.approx(0.5 * 40.0 * stretch**2, rel=1e-9, abs=1e-15)


def test_initial_velocity_is_not_a_file_key() -> None:
    text = FILE.read_text(encoding="utf-8")
    for bad in (text.replace('name = "crank"', 'name = "crank"\ninitial_velocity = "check"', 1),
                'initial_velocity = "project"\n' + text):
        with pytest.raises(MechanismError, match="unknown key 'initial_velocity'"):
            mt.loads_mechanism(bad)


def test_slot_friction_dissipates_c_sdot_squared() -> None:
    """docs: the prismatic joint's friction dissipates c·ṡ², ṡ the block's sliding speed along the
    slot relative to the lever; with the bearing (0.02·ω²) and the spring's damper (0.5·L̇²) that is
    the whole dissipated power, and the energy balance closes."""
    dt = 1e-4
    res = mt.simulate(mt.load_mechanism(FILE), 0.6, dt, inputs={"motor_torque": 0.5})
    A = np.column_stack([res["block.x"], res["block.y"]])
    vA = np.column_stack([res["block.vx"], res["block.vy"]])
    rel = A - O4
    sdot = np.einsum("ij,ij->i", rel, vA) / np.linalg.norm(rel, axis=1)
    th, w = res["lever.theta"], res["lever.omega"]
    arm = L * np.column_stack([np.cos(th), np.sin(th)])
    vT = w[:, None] * np.column_stack([-arm[:, 1], arm[:, 0]])
    d = O4 + arm - S
    Ldot = np.einsum("ij,ij->i", d, vT) / np.linalg.norm(d, axis=1)
    power = 0.02 * res["crank.omega"] ** 2 + 2.0 * sdot**2 + 0.5 * Ldot**2
    rate = np.gradient(res["energy.dissipated"], dt)
    k = slice(5, -5)
    assert np.max(np.abs(rate[k] - power[k])) < 1e-4 * np.max(power)
    assert np.max(np.abs(res["energy.balance_error"])) < 1e-7


def test_output_rows_reflect_the_input_held_before_them() -> None:
    """docs/simulator.md: row k of simulate() reflects the input sampled at t_(k-1); set_input acts on
    accelerations and reactions at once, not on positions."""
    mech = mt.load_mechanism(FILE)
    res = mt.simulate(mech, 0.15, 0.05, inputs={"motor_torque": lambda t: 0.0 if t < 0.099 else 1.0})
    sim = mt.Simulator(mech)
    sim.advance_to(0.1)
    held, theta = sim.get_output("crank.alpha"), sim.get_output("crank.theta")
    row = int(np.argmin(np.abs(res.time - 0.1)))
    assert res["crank.alpha"][row] == pytest.approx(held, rel=1e-9, abs=1e-12)
    sim.set_input("motor_torque", 1.0)
    assert sim.get_output("crank.theta") == theta
    assert abs(sim.get_output("crank.alpha") - held) > 1.0  # 1 N·m on the crank's small inertia


def test_gear_variation_turns_the_pinion_three_times_the_other_way() -> None:
    snippet = fenced(section(7), "toml")[0]
    text = FILE.read_text(encoding="utf-8").replace('body = "crank"\ninput', 'body = "pinion"\ninput')
    mech = mt.loads_mechanism(text + "\n" + snippet)
    rep = mt.check(mech)
    assert rep.dof == 3 * 4 - (4 * 2 + 2 + 1) == 1 and not rep.redundant
    res = mt.simulate(mech, 0.3, 0.01, inputs={"motor_torque": 0.2})
    wp, wc = res["pinion.omega"], res["crank.omega"]
    assert np.max(np.abs(wc)) > 1.0
    np.testing.assert_allclose(wp, -3.0 * wc, rtol=1e-7, atol=1e-9)
    assert "mesh.mz" in res.columns


def test_fmpy_snippet_runs(tmp_path: Path) -> None:
    pytest.importorskip("fmpy")
    from mbsd_twin.fmi.build import build_fmu

    fmu = build_fmu(FILE, tmp_path)
    code = fenced(section(5), "python")[0].replace("out/tutorial/QuickReturn.fmu", str(fmu))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    # PythonFMU 0.7 may abort the process at exit after the output was printed (fmu/README.md)
    m = re.search(r"lever between ([\d.]+) and ([\d.]+) rad", proc.stdout)
    assert m, proc.stderr[-2000:]
    beta = math.asin(R / D)
    assert float(m.group(1)) == pytest.approx(math.pi / 2 - beta, abs=2e-4)
    assert float(m.group(2)) == pytest.approx(math.pi / 2 + beta, abs=2e-4)


def test_quick_return_ratio_at_constant_crank_speed() -> None:
    """Section 1: at a constant crank speed the strokes take the crank angles π ± 2·asin(r/d)."""
    driver = ('\n[[drivers]]\nname = "drive"\ntype = "angle"\nbody = "crank"\n'
              'profile = { kind = "constant_speed", speed = 6.283185307179586 }\n')  # 1 rev/s
    mech = mt.loads_mechanism(FILE.read_text(encoding="utf-8") + driver)
    t = np.linspace(0.0, 2.0, 20001)
    res = mt.kinematics(mech, t)
    w = res["lever.omega"]
    turns = t[1:][np.diff(np.sign(w)) != 0]  # lever reversals
    strokes = np.diff(turns)
    beta = math.asin(R / D)
    slow, quick = (math.pi + 2 * beta) / (2 * math.pi), (math.pi - 2 * beta) / (2 * math.pi)  # s at 1 rev/s
    assert len(strokes) >= 3
    for k, dt in enumerate(strokes):
        assert dt == pytest.approx(slow if w[np.searchsorted(t, turns[k]) + 1] > 0 else quick, abs=2e-4)
    assert np.max(strokes) / np.min(strokes) == pytest.approx(1.552, abs=1e-3)
