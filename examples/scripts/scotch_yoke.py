"""Scotch yoke: simple-harmonic motion of the yoke and the motor torque, against closed forms.

Writes scotch_yoke.png. x = r cos θ, ẍ = −r ω² cos θ (pure first harmonic: no secondary as in a
slider crank), τ = m_yoke r² ω² sin θ cos θ + m_crank g c cos θ (example file).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from _common import figure, load, output_folder, report, save

import mbsd_twin as mt


def main(out: Path) -> dict[str, float]:
    t = np.linspace(0.0, 1.0, 361)
    res = mt.inverse_dynamics(load("scotch_yoke.toml"), t)
    th, r, w = res["crank.theta"], 0.1, 2 * math.pi
    tau = 1.2 * r**2 * w**2 * np.sin(th) * np.cos(th) + 0.5 * 9.81 * 0.03 * np.cos(th)
    fig, ax = figure(1, 2, (11, 4))
    ax[0][0].plot(np.degrees(th), res["yoke.x"], label="x [m]")
    ax[0][0].plot(np.degrees(th), res["yoke.ax"] / w**2, label="ax / ω² [m]")
    ax[0][0].legend()
    ax[0][0].set(xlabel="crank angle [deg]", title="yoke motion")
    ax[0][1].plot(np.degrees(th), res["motor.effort"], label="mbsd-twin")
    ax[0][1].plot(np.degrees(th), tau, "--", label="closed form")
    ax[0][1].legend()
    ax[0][1].set(xlabel="crank angle [deg]", ylabel="motor torque [N·m]")
    save(fig, out, "scotch_yoke.png")
    return report({"x_error": float(np.abs(res["yoke.x"] - r * np.cos(th)).max()),
                   "torque_error": float(np.abs(res["motor.effort"] - tau).max())})


if __name__ == "__main__":
    main(output_folder())
