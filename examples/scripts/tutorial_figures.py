"""The figures of docs/tutorial.md (the quick-return mechanism, ``quick_return.toml``).

    python examples/scripts/tutorial_figures.py docs/figures

writes ``tutorial_sketch.png`` (the sketch, drawn from the file's guesses, with bodies, joints and
points labelled), ``tutorial_pose.png`` (the assembled pose, the drawing of ``mbsd-twin check
--plot``), ``tutorial_simulate.png`` (the drawing of ``mbsd-twin plot`` of a 2 s run at 0.5 N·m)
and ``tutorial_frame.png`` (the last frame of the ``mbsd-twin animate`` animation of that run, with
the lever tip's trace and the crank-pin reaction) and prints the key numbers.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from _common import figure, load, output_folder, report, save
from matplotlib.patches import Circle

import mbsd_twin as mt
from mbsd_twin.viz.animate import AnimationOptions, build_scene
from mbsd_twin.viz.plotting import plot_csv, read_csv
from mbsd_twin.viz.pose import plot_pose

TORQUE = 0.5  # N·m, the motor torque of the tutorial's run
T_END = 2.0  # s
R, D, L = 0.05, 0.15, 0.3  # crank radius, O2–O4 distance, lever length [m]


def _zigzag(p: np.ndarray, q: np.ndarray, n: int = 8, w: float = 0.008) -> np.ndarray:
    """A spring drawn as a zigzag from p to q."""
    u = (q - p) / np.linalg.norm(q - p)
    v = np.array([-u[1], u[0]])
    s = np.linspace(0.0, 1.0, 2 * n + 3)
    off = np.zeros_like(s)
    off[2:-2] = w * np.where(np.arange(len(s) - 4) % 2 == 0, 1.0, -1.0)
    return p + np.outer(s, q - p) + np.outer(off, v)


def sketch(mech: mt.Mechanism, out: Path) -> Path:
    """The designer's sketch: every body at its *guess* (``position``, ``angle``), labelled."""
    b = {x.name: x for x in mech.bodies}

    def at(body: str, p: tuple[float, float]) -> np.ndarray:
        if body == "ground":
            return np.array(p, float)
        x, y = b[body].position
        c, s = math.cos(b[body].angle), math.sin(b[body].angle)
        return np.array([x + c * p[0] - s * p[1], y + s * p[0] + c * p[1]])

    fig, axes = figure(1, 1, (6.4, 5.6))
    ax = axes[0][0]
    o2, o4 = at("ground", (0.0, 0.0)), at("ground", (0.0, -D))
    a, tip = at("crank", (R, 0.0)), at("lever", (L, 0.0))
    anchor = np.array(next(ld for ld in mech.loads if ld.name == "return_spring").points[0])
    ax.add_patch(Circle(tuple(o2), R, fill=False, ls=":", color="0.5"))
    ax.plot(*zip(o4, tip, strict=True), color="tab:green", lw=5, alpha=0.6, solid_capstyle="round")
    ax.plot(*zip(o2, a, strict=True), color="tab:blue", lw=4, solid_capstyle="round")
    u = (tip - o4) / np.linalg.norm(tip - o4)
    v = np.array([-u[1], u[0]])
    box = np.array([a + 0.015 * u + 0.01 * v, a - 0.015 * u + 0.01 * v, a - 0.015 * u - 0.01 * v,
                    a + 0.015 * u - 0.01 * v, a + 0.015 * u + 0.01 * v])
    ax.fill(box[:, 0], box[:, 1], fc="tab:orange", alpha=0.5, ec="tab:orange", lw=2)
    ax.plot(*_zigzag(anchor, tip).T, color="tab:red", lw=1.2)
    for p in (o2, o4, anchor):
        ax.plot(*p, "^", color="0.3", ms=12, zorder=4)
    ax.plot(*np.array([o2, a, o4]).T, "o", mfc="white", mec="black", ms=7, zorder=5)
    ax.annotate("", xy=o4 + 0.06 * u, xytext=o4, arrowprops={"arrowstyle": "->", "color": "tab:green"})
    ax.text(*(o4 + 0.065 * u + np.array([0.004, -0.012])), "lever x axis\n(slot axis [1, 0])", fontsize=7,
            color="tab:green")

    def label(p: np.ndarray, text: str, dx: float, dy: float, **kw: Any) -> None:
        ax.annotate(text, xy=p, xytext=(p[0] + dx, p[1] + dy), fontsize=8,
                    arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.8}, **kw)

    label(o2, "O2 = (0, 0)\nmain_bearing (ground, crank)", -0.16, 0.05)
    label(a, "A = (0.05, 0): crank pin\ncrank_pin (crank, block)\nslot (lever, block)", 0.06, -0.06)
    label(o4, "O4 = (0, −0.15)\nlever_pivot (ground, lever)", 0.05, -0.02)
    label(tip, "T: lever tip, (0.3, 0) in the lever frame", -0.2, 0.06)
    label(anchor, "S = (0.2, 0.15): spring anchor", -0.05, 0.05)
    ax.text(*(o2 + np.array([0.0, -0.025])), "crank, r = 0.05", fontsize=8, color="tab:blue")
    ax.text(*(a + np.array([0.012, 0.012])), "block", fontsize=8, color="tab:orange")
    ax.text(*(o4 + 0.22 * u + np.array([0.01, -0.01])), "lever, L = 0.3", fontsize=8, color="tab:green")
    ax.text(*(0.5 * (anchor + tip) + np.array([-0.02, 0.022])), "return_spring", fontsize=8, color="tab:red")
    ax.set_aspect("equal")
    ax.set_xlim(-0.22, 0.32)
    ax.set_ylim(-0.2, 0.25)
    ax.grid(True, alpha=0.25)
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    ax.set_title("quick-return mechanism: the sketch (bodies at their guesses)", fontsize=10)
    return save(fig, out, "tutorial_sketch.png")


def frame(mech: mt.Mechanism, csv: Path, out: Path) -> Path:
    """The last frame of ``mbsd-twin animate quick_return.toml RUN.csv --t-start 1 --trace lever:0.3,0
    --forces crank_pin``."""
    opts = AnimationOptions(t_start=1.0, traces=("lever:0.3,0",), forces=("crank_pin",))
    scene = build_scene(mech, read_csv(csv), opts)
    scene.ax.set_title(f"{mech.name}: last frame of the animation", fontsize=10)
    dest = out / "tutorial_frame.png"
    scene.save(dest, 90, len(scene.times) - 1)
    return dest


def main(out: Path) -> dict[str, float]:
    mech = load("quick_return.toml")
    sketch(mech, out)
    rep = mt.check(mech)
    plot_pose(mech, rep.pose, out / "tutorial_pose.png", dpi=90)
    res = mt.simulate(mech, T_END, 0.002, inputs={"motor_torque": TORQUE})
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "run.csv"
        res.to_csv(str(csv))
        plot_csv(csv, out / "tutorial_simulate.png", ["crank.omega", "lever.theta", "slot.fx", "slot.fy"],
                 title="quick_return.toml, motor_torque = 0.5 N·m")
        frame(mech, csv, out)
    late = res.time >= 1.0  # past the start-up: the crank turns fully from about 0.3 s on
    pose = {name: (x, y, th) for name, x, y, th in rep.pose}
    return report({
        "dof": float(rep.dof),
        "lever_theta0": pose["lever"][2],
        "lever_min": float(np.min(res["lever.theta"][late])),
        "lever_max": float(np.max(res["lever.theta"][late])),
        "crank_turns": float(res["crank.theta"][-1] / (2 * math.pi)),
        "balance_error": float(abs(res["energy.balance_error"]).max()),
        "status": float(res.status),
    })


if __name__ == "__main__":
    main(output_folder())
