"""Double pendulum (two 1 m, 1 kg bars) released horizontal: chaotic motion, its phase portrait
(angle against rate for each bar) and the conserved energy.

Writes double_pendulum.png. Checks: at release θ1'' = −9g/(7L), θ2'' = +3g/(7L) (from the 2×2
mass matrix in the example file); the total energy stays constant (no friction, no driver).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from _common import figure, load, output_folder, report, save

import mbsd_twin as mt


def main(out: Path) -> dict[str, float]:
    res = mt.simulate(load("double_pendulum.toml"), 6.0, 0.005, options=mt.SolverOptions(rtol=1e-10, atol=1e-12))
    fig, ax = figure(1, 3, (15, 4.5))
    for bar in ("upper", "lower"):
        wrapped = np.degrees(np.angle(np.exp(1j * res[f"{bar}.theta"])))
        ax[0][0].plot(res.time, wrapped, label=bar)
        ax[0][1].plot(wrapped, res[f"{bar}.omega"], ".", ms=1.5, label=bar)
    ax[0][0].legend()
    ax[0][0].set(xlabel="time [s]", ylabel="angle [deg]", title="bar angles")
    ax[0][1].legend()
    ax[0][1].set(xlabel="angle [deg]", ylabel="rate [rad/s]", title="phase portrait")
    ax[0][2].plot(res.time, res["energy.total"] - res["energy.total"][0])
    ax[0][2].set(xlabel="time [s]", ylabel="E − E0 [J]", title="energy conservation")
    save(fig, out, "double_pendulum.png")
    return report({"alpha1_0": float(res["upper.alpha"][0]), "alpha2_0": float(res["lower.alpha"][0]),
                   "energy_drift": float(np.ptp(res["energy.total"])),
                   "omega_max": float(np.abs(res["lower.omega"]).max())})


if __name__ == "__main__":
    main(output_folder())
