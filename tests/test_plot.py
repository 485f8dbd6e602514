"""``mbsd-twin plot`` and ``mbsd-twin animate``: CSV reading, figures (units, titles, legends outside), the
mechanism sketch (springs, body names), traces at the output rate, GIF and MP4."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import mbsd_twin as mt
from mbsd_twin.cli import main
from mbsd_twin.viz import animate as an
from mbsd_twin.viz.plotting import pyplot, read_csv, table_figure
from mbsd_twin.viz.pose import pose_scene
from mbsd_twin.viz.sketch import Spring

MECH = "examples/mechanisms/slider_crank.toml"
MSD = "examples/mechanisms/mass_spring_damper.toml"
PENDULUM = "examples/mechanisms/pendulum.toml"


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
    assert img.size == (1210, 649)  # 11 x (2.6 * 2 panels + 0.7) in at 110 dpi: one panel per unit (rad, N)
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


def _legend_outside(fig: Any, ax: Any) -> bool:
    """The axes' legend lies right of its box (drawn once to place it)."""
    fig.canvas.draw()
    return bool(ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1)


def test_table_figure_units_titles_legends(sim_csv: tuple[Path, mt.Result]) -> None:
    path, _ = sim_csv
    fig = table_figure(read_csv(path), ["crank.theta", "main_bearing.fx", "main_bearing.fy"])
    try:
        axes = fig.axes
        assert [a.get_ylabel() for a in axes] == ["angle [rad]", "force [N]"]  # one panel per unit
        assert axes[-1].get_xlabel() == "time [s]" and fig.get_suptitle() == "sim.csv"
        assert [a.get_title(loc="left") for a in axes] == ["crank.theta", "main_bearing.fx, main_bearing.fy"]
        for ax in axes:
            assert _legend_outside(fig, ax)
            assert [t.get_text() for t in ax.get_legend().get_texts()] == [ln.get_label() for ln in ax.get_lines()]
    finally:
        pyplot().close(fig)


def test_check_plot_draws_springs_and_body_names(tmp_path: Path) -> None:
    mech = mt.load_mechanism(MSD)
    scene = pose_scene(mech, mt.check(mech).pose)
    try:
        assert {"block", "spring"} <= {t.get_text() for t in scene.ax.texts}
        (line,) = scene.springs
        assert line.get_label() == "spring (spring-damper)" and scene.legend is not None
        scene.fig.canvas.draw()  # the legend under the drawing, inside the figure
        box, fig_box = scene.legend.get_window_extent(), scene.fig.bbox
        assert box.y1 <= scene.ax.get_window_extent().y0 and box.x0 >= 0 and box.x1 <= fig_box.x1
        x, y = (np.asarray(v, dtype=float) for v in line.get_data())
        # from the wall anchor (0, 0) to the block's point at x = 0.6 m; the spring and the dashpot side
        # by side, 1.3 widths off the axis, each 0.6 widths wide (a width: 0.035 x the sketch's 0.6 m)
        assert np.nanmin(x) == pytest.approx(0.0, abs=1e-12) and np.nanmax(x) == pytest.approx(0.6, abs=1e-12)
        assert np.nanmax(np.abs(y)) == pytest.approx(1.9 * 0.035 * 0.6, rel=1e-12)
    finally:
        scene.close()
    spring = an.Sketch.from_mechanism(mech).world({"block": (0.6, 0.0, 0.0)})["springs"][0]  # as the dashboard gets it
    assert spring["name"] == "spring" and spring["kind"] == "spring_damper" and 0 < spring["label"][0] < 0.6
    assert spring["lines"][0][0] == [0.0, 0.0] and spring["lines"][3][-1] == [0.6, 0.0]  # wall to block
    crank = mt.load_mechanism(MECH)
    pose = mt.check(crank).pose
    scene = pose_scene(crank, pose)
    try:
        names = {t.get_text(): t.get_position() for t in scene.ax.texts}
        assert {"crank", "rod", "piston"} <= set(names)
        at = next(p[1:] for p in pose if p[0] == "crank")
        np.testing.assert_allclose(names["crank"], an.place(at, (0.05, 0.0)), atol=1e-12)  # mid-crank (0.1 m)
    finally:
        scene.close()
    assert main(["check", MSD, "--plot", str(tmp_path / "msd.png")]) == 0
    assert Image.open(tmp_path / "msd.png").size == (640, 480)


def test_rotational_spring_is_drawn_about_its_joint() -> None:
    text = Path(PENDULUM).read_text() + ('\n[[loads]]\nname = "torsion"\ntype = "rotational_spring_damper"\n'
                                         'bodies = ["ground", "bar"]\nstiffness = 5.0\n')
    sk = an.Sketch.from_mechanism(mt.loads_mechanism(text))
    assert sk.springs == (Spring("torsion", "rotational", ("ground", "bar"), ((0.0, 0.0), (0.0, 0.0))),)
    (spiral,) = sk.world({"bar": (0.2, 0.1, 0.0)})["springs"][0]["lines"]
    r = np.hypot(*(np.array(spiral) - [0.2, 0.1]).T)  # about the pivot on the bar, two turns out to 2 widths
    assert r.min() == pytest.approx(0.5 * 0.04 * sk.scale) and r.max() == pytest.approx(2 * 0.04 * sk.scale)


def test_trace_has_every_output_row(sim_csv: tuple[Path, mt.Result]) -> None:
    """--trace draws the path through every result row (0.01 s apart), not through the frames (0.1 s)."""
    path, res = sim_csv
    opts = an.AnimationOptions(fps=10, t_end=0.5, traces=("rod:0.15,0",))
    scene = an.build_scene(mt.load_mechanism(MECH), read_csv(path), opts)
    try:
        assert len(scene.times) == 6
        for frame, rows in ((5, 51), (2, 21)):  # t = 0.5 s: rows 0 .. 50; t = 0.2 s: rows 0 .. 20
            scene.draw(frame)
            x, y = (np.asarray(v) for v in scene.trace_lines[0].get_data())
            assert len(x) == rows
            th = res["rod.theta"][:rows]
            np.testing.assert_allclose(x, res["rod.x"][:rows] + 0.15 * np.cos(th), rtol=0, atol=1e-15)
            np.testing.assert_allclose(y, res["rod.y"][:rows] + 0.15 * np.sin(th), rtol=0, atol=1e-15)
        assert "rod" in {t.get_text() for t in scene.ax.texts}
    finally:
        scene.close()
