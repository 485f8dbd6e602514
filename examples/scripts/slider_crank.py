"""Slider-crank: kinematics and inverse dynamics of the driven crank (1 rev/s), and forward
dynamics of the free crank under a constant motor torque.

Writes slider_crank.png. Closed forms (r = 0.1 m, l = 0.3 m, θ = crank angle):
piston x = r cos θ + sqrt(l² − r² sin² θ): stroke 2r = 0.2 m between l − r and l + r.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from _common import figure, load, output_folder, report, save

import mbsd_twin as mt


def main(out: Path) -> dict[str, float]:
    driven = load("slider_crank_driven.toml")
    t = np.linspace(0.0, 1.0, 361)
    inv = mt.inverse_dynamics(driven, t)
    theta = np.degrees(inv["crank.theta"])
    free = load("slider_crank.toml")
    fwd = mt.simulate(free, 1.5, 0.005, inputs={"motor_torque": 1.5, "piston_force": 0.0})
    fig, ax = figure(2, 2, (11, 7))
    ax[0][0].plot(theta, inv["piston.x"])
    ax[0][0].set(xlabel="crank angle [deg]", ylabel="piston x [m]", title="kinematics (1 rev/s)")
    ax[0][1].plot(theta, inv["piston.vx"], label="vx [m/s]")
    ax[0][1].plot(theta, inv["piston.ax"] / 10, label="ax / 10 [m/s²]")
    ax[0][1].legend()
    ax[0][1].set(xlabel="crank angle [deg]", title="piston velocity and acceleration")
    ax[1][0].plot(theta, inv["motor.effort"], label="motor torque [N·m]")
    ax[1][0].plot(theta, inv["main_bearing.fx"], label="main bearing fx [N]")
    ax[1][0].plot(theta, inv["main_bearing.fy"], label="main bearing fy [N]")
    ax[1][0].legend()
    ax[1][0].set(xlabel="crank angle [deg]", title="inverse dynamics")
    ax[1][1].plot(fwd.time, fwd["crank.omega"])
    ax[1][1].set(xlabel="time [s]", ylabel="crank speed [rad/s]", title="forward dynamics, 1.5 N·m motor")
    save(fig, out, "slider_crank.png")
    return report({"piston_x_max": float(inv["piston.x"].max()), "piston_x_min": float(inv["piston.x"].min()),
                   "motor_torque_rms": float(np.sqrt(np.mean(inv["motor.effort"][:-1] ** 2))),
                   "forward_final_omega": float(fwd["crank.omega"][-1]),
                   "forward_balance_error": float(np.abs(fwd["energy.balance_error"]).max()),
                   "forward_status": float(fwd.status)})


if __name__ == "__main__":
    main(output_folder())
