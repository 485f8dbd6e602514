"""CLI faces of the engine core: progress bar only on a terminal, exit codes and messages."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from mbsd_twin.cli import main
from mbsd_twin.progress import Progress

ROOT = Path(__file__).resolve().parents[1]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_on_a_terminal_only() -> None:
    tty, pipe = _Tty(), io.StringIO()
    for stream in (tty, pipe):
        with Progress("inverse", stream=stream) as bar:
            bar(0.5)
            bar(1.0)
    assert "inverse" in tty.getvalue() and "100%" in tty.getvalue()  # rich redraws at 10 Hz: 50 % may not show
    assert pipe.getvalue() == ""


def test_progress_always_writes_a_plain_line_per_tenth_to_a_pipe_and_never_nothing() -> None:
    pipe, quiet = io.StringIO(), _Tty()
    with Progress("simulate", "always", pipe) as bar:
        for k in range(101):
            bar(k / 100)
    lines = pipe.getvalue().splitlines()
    assert [int(line.split()[1]) for line in lines] == list(range(0, 101, 10))
    assert all(line.startswith("simulate: ") and line.endswith(" s") for line in lines)
    with Progress("simulate", "never", quiet) as bar:
        bar(0.5)
    assert quiet.getvalue() == ""
    with pytest.raises(ValueError, match="auto, always, never"):
        Progress("x", "sometimes")


def test_simulate_progress_flag_in_a_pipe(tmp_path: Path) -> None:
    """``simulate --progress`` run as a user would, its stderr a pipe: the lines reach 100 %."""
    import subprocess
    import sys

    out = tmp_path / "r.csv"
    cli = [sys.executable, "-c", "import sys; from mbsd_twin.cli import main; sys.exit(main())"]
    cmd = [*cli, "simulate", str(ROOT / "examples/mechanisms/pendulum.toml"), "--t-end", "0.5", "-o", str(out)]
    with_bar = subprocess.run([*cmd, "--progress"], capture_output=True, text=True, timeout=300)
    without = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert with_bar.returncode == 0 and without.returncode == 0, with_bar.stderr + without.stderr
    lines = [x for x in with_bar.stderr.splitlines() if x.startswith("simulate: ")]
    assert lines and lines[-1].startswith("simulate: 100 % after")
    assert not [x for x in without.stderr.splitlines() if x.startswith("simulate: ")]


def test_check_exits_nonzero_with_the_reason_when_the_mechanism_cannot_assemble(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "examples/mechanisms/slider_crank_driven.toml").read_text()
    # With the crank at 90° its pin is 0.1 m above the guide line: a 0.05 m rod cannot reach it.
    text = text.replace("points = [[0.3, 0.0], [0.0, 0.0]]", "points = [[0.05, 0.0], [0.0, 0.0]]")
    text = text.replace("speed = 6.283185307179586, start = 0.0",
                        "speed = 6.283185307179586, start = 1.5707963267948966")
    bad = tmp_path / "short_rod.toml"
    bad.write_text(text)
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "cannot be assembled" in err and "short_rod.toml" in err and "iterations" in err


def test_inverse_writes_csv_whose_rows_match_the_api(tmp_path: Path) -> None:
    out = tmp_path / "inv.csv"
    assert main(["inverse", str(ROOT / "examples/mechanisms/slider_crank_driven.toml"),
                 "--t-end", "0.5", "--steps", "90", "-o", str(out)]) == 0
    data = np.genfromtxt(out, delimiter=",", names=True, comments="#", deletechars="")
    # a quarter of a turn after the start: crank at 90°, piston at sqrt(l² − r²)
    assert data["time"][-1] == pytest.approx(0.5)
    k = 45  # t = 0.25 s
    assert data["crank.theta"][k] == pytest.approx(np.pi / 2, abs=1e-12)
    assert data["piston.x"][k] == pytest.approx(np.sqrt(0.3**2 - 0.1**2), abs=1e-12)
    assert not list(tmp_path.glob(".inv.csv.*"))  # atomic write left no temporary file


def test_check_prints_pose_dof_and_redundant_rows_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A four-bar with its coupler pin written twice: DOF 0 by rank (9 − 11 would say −2 without
    the rank), 2 redundant rows named, every body's assembled x, y, θ printed with units; --plot
    writes a PNG of the pose."""
    import mbsd_twin as mt

    text = (ROOT / "examples/mechanisms/four_bar_driven.toml").read_text()
    text += ('\n[[joints]]\nname = "coupler_pin_again"\ntype = "revolute"\nbodies = ["coupler", "rocker"]\n'
             "points = [[2.0, 0.0], [1.0, 0.0]]\n")
    path = tmp_path / "four_bar_twice.toml"
    path.write_text(text)
    png = tmp_path / "pose.png"
    assert main(["check", str(path), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "DOF            0 (coordinates − rank of the constraint Jacobian)" in out
    assert "constraints    11 (rank 9)" in out
    redundant = out.split("redundant      2 (")[1].split(")")[0].split(", ")
    assert len(redundant) == 2 and all(r.endswith(("[x]", "[y]")) for r in redundant)
    assert "pose           body                   x [m]         y [m]   theta [rad]" in out
    rep = mt.check(mt.load_mechanism(path))
    printed = {ln.split()[0]: [float(v) for v in ln.split()[1:]] for ln in out.splitlines()
               if ln.startswith(" " * 15) and len(ln.split()) == 4}
    for body, x, y, th in rep.pose:
        np.testing.assert_allclose(printed[body], [x, y, th], rtol=1e-5, atol=1e-9)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot           {png}" in out
