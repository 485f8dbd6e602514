"""The ``mbsd-twin`` command line, run as a separate process: simulate, check, inverse."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from reference import slider_crank as scr

import mbsd_twin as mt
from mbsd_twin.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "mechanisms"
FREE = EXAMPLES / "slider_crank.toml"
DRIVEN = EXAMPLES / "slider_crank_driven.toml"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the installed console script next to this interpreter (``python -m mbsd_twin.cli`` if
    there is none)."""
    script = Path(sys.executable).with_name("mbsd-twin")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "mbsd_twin.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def header(text: str) -> list[str]:
    for line in text.splitlines():
        if line and not line.startswith("#"):
            return line.split(",")
    raise AssertionError("no header row")


def read_csv(source: str | Path) -> np.ndarray:
    """The reader the CSV comment block documents."""
    if isinstance(source, str):
        source = io.StringIO(source)
    return np.genfromtxt(source, names=True, comments="#", delimiter=",")


def test_simulate_writes_a_csv_matching_the_python_api(tmp_path: Path) -> None:
    out = tmp_path / "OUT.csv"
    proc = cli("simulate", str(FREE), "--t-end", "0.5", "--output-interval", "0.01",
               "--set", "motor_torque=2", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert str(out) in proc.stdout and "energy.balance_error" in proc.stdout

    mech = mt.load_mechanism(FREE)
    api = mt.simulate(mech, 0.5, 0.01, inputs={"motor_torque": 2.0})
    names = header(out.read_text())
    assert names == ["time", *(p.name for p in mt.Simulator(mech).output_ports)]
    assert names == api.columns

    data = read_csv(out)
    assert len(data.dtype.names) == len(names)
    assert data.shape == (51,)
    # genfromtxt drops the dots of the names: "crank.theta" is the field "cranktheta"
    assert "cranktheta" in data.dtype.names
    np.testing.assert_allclose(data["time"], np.linspace(0.0, 0.5, 51), rtol=0, atol=1e-15)
    assert data["cranktheta"][-1] == api["crank.theta"][-1]      # %.17g round-trips exactly
    assert data["cranktheta"][-1] > 4.0
    # the whole table is the API's table
    table = np.column_stack([data[n] for n in data.dtype.names])
    np.testing.assert_array_equal(table, api.data + 0.0)


def test_simulate_rejects_a_bad_set_value(tmp_path: Path) -> None:
    out = tmp_path / "OUT.csv"
    proc = cli("simulate", str(FREE), "--t-end", "0.1", "--set", "motor_torque=two", "-o", str(out))
    assert proc.returncode != 0
    assert "motor_torque=two" in proc.stderr, proc.stderr
    assert not out.exists()

    proc = cli("simulate", str(FREE), "--t-end", "0.1", "--set", "motor_torq=2", "-o", str(out))
    assert proc.returncode != 0
    assert "motor_torq" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not out.exists()


@pytest.mark.parametrize(("path", "dof", "rows"), [(DRIVEN, 0, 9), (FREE, 1, 8)])
def test_check_reports_dof(path: Path, dof: int, rows: int) -> None:
    # 3 bodies × 3 coordinates; 3 revolutes × 2 + prismatic 2 (+ angle driver 1)
    proc = cli("check", str(path))
    assert proc.returncode == 0, proc.stderr
    lines = {ln.split(maxsplit=1)[0]: ln.split(maxsplit=1)[1] for ln in proc.stdout.splitlines() if ln.strip()}
    assert lines["coordinates"] == "9"
    assert lines["constraints"] == f"{rows} (rank {rows})"
    assert lines["DOF"].split()[0] == str(dof)  # "1 (coordinates − rank of the constraint Jacobian)"
    assert lines["redundant"].split()[0] == "0"


def test_inverse_to_stdout_parses() -> None:
    proc = cli("inverse", str(DRIVEN), "--t-end", "1", "--steps", "100", "-o", "-")
    assert proc.returncode == 0, proc.stderr
    assert "motor.effort" in header(proc.stdout)
    data = read_csv(proc.stdout)
    assert data.shape == (101,)
    t = data["time"]
    np.testing.assert_allclose(t, np.linspace(0.0, 1.0, 101), rtol=0, atol=1e-15)
    w = 2.0 * np.pi
    torque = scr.inverse_dynamics(scr.SliderCrank(), w * t, w).torque
    np.testing.assert_allclose(data["motoreffort"], torque, rtol=0, atol=1e-9 * np.abs(torque).max())


def test_simulate_step_control_flags_reach_the_solver(tmp_path: Path) -> None:
    """--error-norm rms and --energy-error-control give the API's result with those options (and
    differ from the default run, which uses neither)."""
    mech = mt.load_mechanism(FREE)
    runs = {}
    for label, flags, opts in (("default", [], mt.SolverOptions()),
                               ("rms+energy", ["--error-norm", "rms", "--energy-error-control"],
                                mt.SolverOptions(error_norm="rms", energy_error_control=True))):
        out = tmp_path / f"{label}.csv"
        assert main(["simulate", str(FREE), "--t-end", "0.3", "--output-interval", "0.1",
                     "--set", "motor_torque=2", *flags, "-o", str(out)]) == 0
        api = mt.simulate(mech, 0.3, 0.1, inputs={"motor_torque": 2.0}, options=opts)
        data = read_csv(out)
        np.testing.assert_array_equal(data["cranktheta"], api["crank.theta"])
        runs[label] = data["cranktheta"][-1]
    assert runs["default"] != runs["rms+energy"]
    assert runs["default"] == pytest.approx(runs["rms+energy"], abs=1e-7)
