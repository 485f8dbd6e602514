"""Four-bar crank-rocker: coupler curve, rocker angle and input torque of the driven linkage,
and the free linkage swinging under gravity (the seed's 0.8/2.0/1.0/2.0 m four-bar).

Writes four_bar.png. Closed form of the rocker's extreme positions: crank and coupler aligned,
|O2 B| = b ± a, so with the ground link d the rocker angle at O4 satisfies
cos ∠O2O4B = (c² + d² − (b ± a)²) / (2 c d).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from _common import figure, load, output_folder, report, save

import mbsd_twin as mt


def main(out: Path) -> dict[str, float]:
    driven = load("four_bar_driven.toml")
    t = np.linspace(0.0, 1.0, 3601)
    inv = mt.inverse_dynamics(driven, t)
    # coupler point: the coupler's mid-point
    cx = inv["coupler.x"] + np.cos(inv["coupler.theta"]) * 1.0
    cy = inv["coupler.y"] + np.sin(inv["coupler.theta"]) * 1.0
    free = mt.simulate(load("four_bar.toml"), 2.0, 0.01)
    fig, ax = figure(2, 2, (11, 7))
    ax[0][0].plot(cx, cy)
    ax[0][0].set(aspect="equal", xlabel="x [m]", ylabel="y [m]", title="coupler mid-point curve")
    ax[0][1].plot(np.degrees(inv["crank.theta"]), np.degrees(inv["rocker.theta"]))
    ax[0][1].set(xlabel="crank angle [deg]", ylabel="rocker angle [deg]", title="rocker")
    ax[1][0].plot(np.degrees(inv["crank.theta"]), inv["motor.effort"])
    ax[1][0].set(xlabel="crank angle [deg]", ylabel="motor torque [N·m]", title="inverse dynamics")
    ax[1][1].plot(free.time, np.degrees(free["crank.theta"]))
    ax[1][1].set(xlabel="time [s]", ylabel="crank angle [deg]", title="free swing under gravity")
    save(fig, out, "four_bar.png")
    return report({"rocker_min": float(inv["rocker.theta"].min()), "rocker_max": float(inv["rocker.theta"].max()),
                   "free_energy_drift": float(np.ptp(free["energy.total"])),
                   "free_status": float(free.status)})


if __name__ == "__main__":
    main(output_folder())
