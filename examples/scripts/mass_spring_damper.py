"""Mass-spring-damper: forward dynamics against the closed-form underdamped response.

Writes mass_spring_damper.png. u(t) = 0.1 e^(−ζωn t)(cos ωd t + ζωn/ωd sin ωd t) with
ωn = 10 rad/s, ζ = 0.1 (see the example file).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from _common import figure, load, output_folder, report, save

import mbsd_twin as mt


def main(out: Path) -> dict[str, float]:
    res = mt.simulate(load("mass_spring_damper.toml"), 3.0, 0.01, options=mt.SolverOptions(rtol=1e-10, atol=1e-12))
    wn, zeta = 10.0, 0.1
    wd = wn * math.sqrt(1 - zeta**2)
    t = res.time
    exact = 0.5 + 0.1 * np.exp(-zeta * wn * t) * (np.cos(wd * t) + zeta * wn / wd * np.sin(wd * t))
    fig, ax = figure(2, 1, (8, 6))
    ax[0][0].plot(t, res["block.x"], label="mbsd-twin")
    ax[0][0].plot(t, exact, "--", label="closed form")
    ax[0][0].legend()
    ax[0][0].set(ylabel="x [m]", title="mass-spring-damper (ζ = 0.1)")
    ax[1][0].plot(t, res["energy.total"], label="mechanical")
    ax[1][0].plot(t, res["energy.dissipated"], label="dissipated")
    ax[1][0].plot(t, res["energy.total"] + res["energy.dissipated"], label="sum")
    ax[1][0].legend()
    ax[1][0].set(xlabel="time [s]", ylabel="energy [J]")
    save(fig, out, "mass_spring_damper.png")
    return report({"max_error": float(np.abs(res["block.x"] - exact).max()),
                   "guide_fy_mean": float(np.mean(res["guide.fy"])),
                   "balance_error": float(np.abs(res["energy.balance_error"]).max())})


if __name__ == "__main__":
    main(output_folder())
