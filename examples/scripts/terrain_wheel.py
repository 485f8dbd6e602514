"""Terrain and wheel with a suspended mass (quarter car): a round wheel rolling over a bump and a
dip, and an octagonal wheel vaulting from face to vertex, both driven by a 60 N·m torque.

Penalty contact (Hertz + tanh friction) between the wheel and a C2 spline terrain. Writes
terrain_wheel.png. On the flat start the round wheel rolls with a creep slip: closed forms
a = τ / (R (m_w + m_b) + I/R) and slip = −v_lim·atanh(m a / (μ (m_w + m_b) g)).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from _common import figure, load, output_folder, report, save

import mbsd_twin as mt

T_END = 1.3


def run(name: str) -> mt.Result:
    mech = load(name)
    return mt.simulate(mech, T_END, 0.01)  # contact outputs are result columns


def main(out: Path) -> dict[str, float]:
    round_, octa = run("terrain_wheel.toml"), run("terrain_wheel_polygonal.toml")
    terrain = load("terrain_wheel.toml").loads[-1].contact.surface
    profile = terrain.curve(np.linspace(0.0, terrain.length, 2000))[0]
    profile = profile[(profile[:, 0] > -0.5) & (profile[:, 0] < 3.0)]
    fig, ax = figure(3, 1, (10, 9))
    ax[0][0].plot(profile[:, 0], profile[:, 1], "k", label="terrain")
    for res, label in ((round_, "round"), (octa, "octagon")):
        ax[0][0].plot(res["wheel.x"], res["wheel.y"] - 0.3, label=f"{label}: hub − 0.3 m")
        ax[0][0].plot(res["body.x"], res["body.y"] - 0.7, "--", label=f"{label}: body − 0.7 m")
        ax[1][0].plot(res.time, res["tyre.normal_force"], label=label)
        ax[2][0].plot(res.time, res["tyre.slip_velocity"], label=label)
    ax[0][0].legend(fontsize=7)
    ax[0][0].set(xlabel="x [m]", ylabel="height [m]", title="quarter car over a bump and a dip")
    ax[1][0].legend()
    ax[1][0].set(xlabel="time [s]", ylabel="normal force [N]")
    ax[2][0].legend()
    ax[2][0].set(xlabel="time [s]", ylabel="slip velocity [m/s]")
    save(fig, out, "terrain_wheel.png")
    flat = (round_.time > 0.05) & (round_.time < 0.25)
    early = octa.time < 0.5
    return report({"round_acceleration": float(np.polyfit(round_.time[flat], round_["body.vx"][flat], 1)[0]),
                   "round_slip": float(np.mean(round_["tyre.slip_velocity"][flat])),
                   "round_airborne": float(np.mean(round_["tyre.normal_force"] == 0.0) * T_END),
                   "round_peak_force": float(round_["tyre.normal_force"].max()),
                   "round_balance_error": float(np.abs(round_["energy.balance_error"]).max()),
                   "octagon_hub_min": float(octa["wheel.y"][early].min()),
                   "octagon_hub_max": float(octa["wheel.y"][early].max()),
                   "octagon_distance": float(octa["wheel.x"][-1])})


if __name__ == "__main__":
    main(output_folder())
