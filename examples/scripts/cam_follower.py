"""Cam and oscillating roller follower (cam joint): follower motion, contact force, cam torque.

The cam (polar profile r(φ) = 0.05 + 0.008 cos φ + 0.003 cos 2φ m) turns at 1 rev/s; a torsional
spring presses the follower's roller on it. Writes cam_follower.png: the cam and follower at four
cam angles, the follower angle and speed, and the contact force along the common normal (it must
stay positive — compressive — or a real roller would lift off) with the cam torque.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from _common import figure, load, output_folder, report, save
from matplotlib.patches import Circle as Disc

import mbsd_twin as mt
from mbsd_twin.model.surfaces import Polar
from mbsd_twin.solvers.kinematics import sweep

PIVOT, ARM, RHO = np.array([0.11, 0.06]), 0.07, 0.012


def main(out: Path) -> dict[str, float]:
    mech = load("cam_follower.toml")
    system = mt.compile_mechanism(mech)
    t = np.linspace(0.0, 1.0, 361)
    res = mt.inverse_dynamics(system, t)
    q = sweep(system, t).q
    psi, roller = q[:, 5], q[:, 7]
    centre = PIVOT + ARM * np.column_stack([np.cos(psi), np.sin(psi)])
    normal = -np.column_stack([np.cos(psi + roller), np.sin(psi + roller)])   # contact → roller centre
    force = np.column_stack([res["contact.fx"], res["contact.fy"]])
    fn = (force * normal).sum(axis=1)
    cam = Polar(fourier=(0.05, 0.008, 0.0, 0.003, 0.0))
    phi = np.linspace(0, 2 * math.pi, 361)
    profile = cam.curve(phi)[0]
    fig, ax = figure(1, 3, (15, 4.5))
    for k in (0, 90, 180, 270):
        th = q[k, 2]
        c, s = math.cos(th), math.sin(th)
        line = ax[0][0].plot(c * profile[:, 0] - s * profile[:, 1], s * profile[:, 0] + c * profile[:, 1], lw=1)
        col = line[0].get_color()
        ax[0][0].plot([PIVOT[0], centre[k, 0]], [PIVOT[1], centre[k, 1]], color=col)
        ax[0][0].add_patch(Disc(tuple(centre[k]), RHO, fill=False, color=col))
    ax[0][0].set(aspect="equal", xlabel="x [m]", ylabel="y [m]", title="cam at 0°, 90°, 180°, 270°")
    deg = np.degrees(q[:, 2])
    ax[0][1].plot(deg, np.degrees(psi - psi[0]), label="follower angle − start [deg]")
    ax[0][1].plot(deg, res["follower.omega"], label="follower speed [rad/s]")
    ax[0][1].legend()
    ax[0][1].set(xlabel="cam angle [deg]", title="follower motion")
    ax[0][2].plot(deg, fn, label="contact normal force [N]")
    ax[0][2].plot(deg, res["motor.effort"] * 100, label="cam torque × 100 [N·m]")
    ax[0][2].legend()
    ax[0][2].set(xlabel="cam angle [deg]", title="forces")
    save(fig, out, "cam_follower.png")
    return report({"follower_swing": float(np.ptp(psi)), "normal_force_min": float(fn.min()),
                   "normal_force_max": float(fn.max()),
                   "tangential_force_max": float(np.abs(force[:, 0] * normal[:, 1] - force[:, 1] * normal[:, 0]).max()),
                   "mean_cam_torque": float(np.mean(res["motor.effort"][:-1]))})


if __name__ == "__main__":
    main(output_folder())
