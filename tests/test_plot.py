"""``mbsd-twin plot`` and ``mbsd-twin animate``: CSV reading, figures, the mechanism sketch, GIF and MP4."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import mbsd_twin as mt
from mbsd_twin.cli import main
from mbsd_twin.viz import animate as an
from mbsd_twin.viz.plotting import read_csv

MECH = "examples/mechanisms/slider_crank.toml"


@pytest.fixture(scope="module")
def sim_csv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, mt.Result]:
    res = mt.simulate(mt.load_mechanism(MECH), 1.0, 0.01, inputs={"motor_torque": 2.0})
    path = tmp_path_factory.mktemp("plot") / "sim.csv"
    res.to_csv(path)
    return path, res


def _colored(img: Image.Image, rgb: tuple[int, int, int], tol: int = 40) -> int:
    a = np.asarray(img.convert("RGB")).astype(int)
    return int((np.abs(a - np.array(rgb)).sum(axis=2) < tol).sum())


def test_read_csv_round_trip(sim_csv: tuple[Path, mt.Result]) -> None:
    path, res = sim_csv
    tab = read_csv(path)
    assert tab.columns == res.columns and len(tab) == len(res) == 101
    assert tab.unit("crank.theta") == "rad" and tab.unit("main_bearing.fx") == "N" and tab.unit("time") == "s"
    np.testing.assert_array_equal(tab["crank.theta"], res["crank.theta"])  # %.17g round-trips exactly
    assert tab.select(["*.fx"]) == ["main_bearing.fx", "crank_pin.fx", "wrist_pin.fx", "guide.fx"]
    assert any(c.startswith("<joint>.fx/.fy [N]") for c in tab.comments)


def test_plot_cli(sim_csv: tuple[Path, mt.Result], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = sim_csv
    png = tmp_path / "fig.png"
    assert main(["plot", str(path), "--columns", "crank.theta,main_bearing.*", "-o", str(png)]) == 0
    img = Image.open(png)
    assert img.size == (990, 638)  # 9 x (2.6 * 2 panels + 0.6) in at 110 dpi: one panel per unit (rad, N)
    assert _colored(img, (31, 119, 180)) > 500  # the first line colour (tab:blue) is drawn
    assert "written:" in capsys.readouterr().out
    assert main(["plot", str(path), "-o", str(tmp_path / "default.svg")]) == 0
    assert (tmp_path / "default.svg").read_text().count("<svg") == 1


def test_plot_cli_errors(sim_csv: tuple[Path, mt.Result], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = sim_csv
    assert main(["plot", str(path), "--columns", "nope", "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "no column matches 'nope'" in err and "crank.theta" in err
    bad = tmp_path / "bad.csv"
    bad.write_text("# comment first\n1,2\n")
    assert main(["plot", str(bad), "-o", str(tmp_path / "x.png")]) == 2
    assert "header row" in capsys.readouterr().err


def test_sketch_of_the_slider_crank() -> None:
    sk = an.Sketch.from_mechanism(mt.load_mechanism(MECH))
    shapes = {s.body: s for s in sk.shapes}
    assert shapes["crank"].kind == "bar" and shapes["crank"].points == ((0.0, 0.0), (0.1, 0.0))
    assert shapes["rod"].kind == "bar" and shapes["rod"].points == ((0.0, 0.0), (0.3, 0.0))
    assert shapes["piston"].kind == "block"
    assert sk.pivots == ((0.0, 0.0),) and len(sk.guides) == 1
    w = sk.world({"crank": (0.0, 0.0, math.pi / 2), "rod": (0.0, 0.1, -0.3), "piston": (0.3, 0.0, 0.0)})
    crank = next(b for b in w["bodies"] if b["body"] == "crank")
    np.testing.assert_allclose(crank["pts"][1], [0.0, 0.1], atol=1e-15)
    joints = {j[0]: j[1:] for j in w["joints"]}
    np.testing.assert_allclose(joints["wrist_pin"], [0.3, 0.0])


def test_animate_gif(sim_csv: tuple[Path, mt.Result], tmp_path: Path) -> None:
    path, res = sim_csv
    gif = tmp_path / "anim.gif"
    rc = main(["animate", MECH, str(path), "-o", str(gif), "--fps", "10", "--t-end", "0.5",
               "--trace", "rod:0.15,0", "--forces", "main_bearing"])
    assert rc == 0
    im = Image.open(gif)
    assert im.n_frames == 6 and im.size == (576, 432)
    frames = []
    for k in (0, 5):
        im.seek(k)
        frames.append(np.asarray(im.convert("RGB")).astype(int))
    assert np.abs(frames[0] - frames[1]).sum(axis=2).astype(bool).sum() > 500  # the mechanism moved
    im.seek(5)
    assert _colored(im.convert("RGB"), (220, 20, 60), 60) > 20  # the crimson force arrow


def test_animate_mp4(sim_csv: tuple[Path, mt.Result], tmp_path: Path) -> None:
    assert an.ffmpeg_path(), "the test extra installs imageio-ffmpeg, which ships ffmpeg"
    path, _ = sim_csv
    mp4 = tmp_path / "anim.mp4"
    assert main(["animate", MECH, str(path), "-o", str(mp4), "--fps", "10", "--t-end", "0.3"]) == 0
    data = mp4.read_bytes()
    assert data[4:8] == b"ftyp" and len(data) > 1000


def test_animate_without_ffmpeg(sim_csv: tuple[Path, mt.Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(an, "ffmpeg_path", lambda: None)
    path, _ = sim_csv
    assert main(["animate", MECH, str(path), "-o", str(tmp_path / "a.mp4")]) == 2
    assert "writing MP4 needs ffmpeg" in capsys.readouterr().err
    assert not (tmp_path / "a.mp4").exists()


def test_animate_option_errors(sim_csv: tuple[Path, mt.Result], tmp_path: Path) -> None:
    path, _ = sim_csv
    tab = read_csv(path)
    with pytest.raises(an.AnimationError, match="outside the result"):
        an.frame_times(tab["time"], an.AnimationOptions(t_start=5.0))
    with pytest.raises(an.AnimationError, match="exceed --max-frames"):
        an.frame_times(tab["time"], an.AnimationOptions(fps=1000, max_frames=100))
    with pytest.raises(an.AnimationError, match="no reaction columns nope"):
        an.animate(mt.load_mechanism(MECH), tab, tmp_path / "a.gif", an.AnimationOptions(forces=("nope",)))
    with pytest.raises(an.AnimationError, match="BODY or BODY:X,Y"):
        an.parse_trace("rod:1")
    with pytest.raises(an.AnimationError, match="unknown animation format"):
        an.animate(mt.load_mechanism(MECH), tab, tmp_path / "a.avi")
    np.testing.assert_allclose(an.frame_times(tab["time"], an.AnimationOptions(fps=4, speed=0.5))[:3], [0, 0.125, 0.25])
