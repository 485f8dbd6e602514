"""Chaplygin sleigh (knife-edge, nonholonomic): the path, the blade speed and spin against the
reduced equations u' = a ω², (I + m a²) ω' = −m a u ω, and the lateral blade force (the
constraint's multiplier). Writes chaplygin_sleigh.png.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.integrate as si
from _common import figure, load, output_folder, report, save

import mbsd_twin as mt

A, M, INERTIA = 0.15, 2.0, 0.05


def main(out: Path) -> dict[str, float]:
    res = mt.simulate(load("chaplygin_sleigh.toml"), 6.0, 0.02, options=mt.SolverOptions(rtol=1e-10, atol=1e-12))
    th = res["sleigh.theta"]
    u = res["sleigh.vx"] * np.cos(th) + res["sleigh.vy"] * np.sin(th)
    lateral = -res["blade.fx"] * np.sin(th) + res["blade.fy"] * np.cos(th)
    ref = si.solve_ivp(lambda _t, y: [A * y[1] ** 2, -M * A * y[0] * y[1] / (INERTIA + M * A * A)],
                       (0.0, 6.0), [0.4, 3.0], rtol=1e-12, atol=1e-13, dense_output=True)
    u_ref, w_ref = ref.sol(res.time)
    fig, ax = figure(1, 3, (15, 4.5))
    ax[0][0].plot(res["sleigh.x"], res["sleigh.y"])
    ax[0][0].set(aspect="equal", xlabel="x [m]", ylabel="y [m]", title="path of the centre of mass")
    ax[0][1].plot(res.time, u, label="u (blade speed) [m/s]")
    ax[0][1].plot(res.time, res["sleigh.omega"], label="ω [rad/s]")
    ax[0][1].plot(res.time, u_ref, "k:", res.time, w_ref, "k:", label="reduced equations")
    ax[0][1].legend()
    ax[0][1].set(xlabel="time [s]")
    ax[0][2].plot(res.time, lateral)
    ax[0][2].set(xlabel="time [s]", ylabel="lateral blade force [N]", title="knife-edge multiplier")
    save(fig, out, "chaplygin_sleigh.png")
    return report({"u_error": float(np.abs(u - u_ref).max()),
                   "omega_error": float(np.abs(res["sleigh.omega"] - w_ref).max()),
                   "u_final": float(u[-1]), "energy_drift": float(np.ptp(res["energy.kinetic"]))})


if __name__ == "__main__":
    main(output_folder())
