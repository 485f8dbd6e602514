"""Four-bar bicycle leg: hip, knee and pedal of a seated cyclist, crank driven at 90 rpm.

Writes bicycle_leg.png: the leg drawn at 8 crank angles, the knee angle and the crank torque
needed to move the passive leg (inverse dynamics, gravity on).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from _common import figure, load, output_folder, report, save

import mbsd_twin as mt


def main(out: Path) -> dict[str, float]:
    mech = load("four_bar_bicycle_leg.toml")
    t = np.linspace(0.0, 2.0 / 3.0, 721)          # one crank turn at 1.5 rev/s
    res = mt.inverse_dynamics(mech, t)
    crank = np.degrees(res["crank.theta"])
    knee = 180.0 - np.degrees(np.mod(res["shank.theta"] - res["thigh.theta"], 2 * np.pi))
    fig, ax = figure(1, 3, (14, 4.5))
    hip = np.array([-0.20, 0.70])
    for k in range(0, 720, 90):
        kx = hip[0] + 0.45 * np.cos(res["thigh.theta"][k])
        ky = hip[1] + 0.45 * np.sin(res["thigh.theta"][k])
        ax[0][0].plot([0, res["shank.x"][k], kx, hip[0]], [0, res["shank.y"][k], ky, hip[1]], "o-", lw=1)
    ax[0][0].set(aspect="equal", xlabel="x [m]", ylabel="y [m]", title="leg every 45° of crank")
    ax[0][1].plot(crank, knee)
    ax[0][1].set(xlabel="crank angle [deg]", ylabel="knee flexion [deg]", title="knee")
    ax[0][2].plot(crank, res["motor.effort"])
    ax[0][2].set(xlabel="crank angle [deg]", ylabel="crank torque [N·m]", title="torque to move the passive leg")
    save(fig, out, "bicycle_leg.png")
    return report({"knee_min": float(knee.min()), "knee_max": float(knee.max()),
                   "thigh_at_0": float(res["thigh.theta"][0]), "thigh_at_90": float(res["thigh.theta"][180]),
                   "torque_peak": float(np.abs(res["motor.effort"]).max())})


if __name__ == "__main__":
    main(output_folder())
