"""Pantograph (scale 3): the stylus is driven round a circle; the tracer draws it at 1/3 scale.

Writes pantograph.png. Closed form: T = S / k for every position (O, T, S collinear).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from _common import figure, load, output_folder, report, save

import mbsd_twin as mt


def main(out: Path) -> dict[str, float]:
    res = mt.kinematics(load("pantograph.toml"), np.linspace(0.0, 1.0, 241))
    sx = res["arm3.x"] + 0.75 * np.cos(res["arm3.theta"])
    sy = res["arm3.y"] + 0.75 * np.sin(res["arm3.theta"])
    tx = res["arm2.x"] + 0.25 * np.cos(res["arm2.theta"])
    ty = res["arm2.y"] + 0.25 * np.sin(res["arm2.theta"])
    fig, ax = figure(1, 1, (6, 6))
    a = ax[0][0]
    for k in (0, 60, 120, 180):
        pts = [(0, 0), (res["arm3.x"][k], res["arm3.y"][k]), (sx[k], sy[k])]
        a.plot(*zip(*pts, strict=True), "-", color="0.6", lw=1)
        rx = res["arm3.x"][k] + 0.25 * np.cos(res["arm3.theta"][k])
        ry = res["arm3.y"][k] + 0.25 * np.sin(res["arm3.theta"][k])
        a.plot([res["arm2.x"][k], tx[k], rx], [res["arm2.y"][k], ty[k], ry], "-", color="0.6", lw=1)
    a.plot(sx, sy, label="stylus S")
    a.plot(tx, ty, label="tracer T")
    a.plot(sx / 3, sy / 3, "--", label="S / 3")
    a.legend()
    a.set(aspect="equal", xlabel="x [m]", ylabel="y [m]", title="pantograph, scale 3")
    save(fig, out, "pantograph.png")
    return report({"scale_error": float(max(np.abs(3 * tx - sx).max(), np.abs(3 * ty - sy).max())),
                   "stylus_radius": float(np.hypot(sx - sx.mean(), sy - sy.mean()).mean())})


if __name__ == "__main__":
    main(output_folder())
