"""Engine balance: shaking forces, rocking couples and their spectra by engine order for a
single cylinder, a boxer twin and an inline four (3000 rpm, gravity off), plus the inline four's
crankshaft torque with gas forces in the firing order 1-3-4-2.

Each cylinder's force on the frame is the sum of its main-bearing and cylinder-wall reactions;
the rocking couples take each cylinder's force at its position z along the crankshaft
(r × F = (−Σ z·Fy, Σ z·Fx)). Writes engines.png and engine_torque.png.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
from _common import figure, load, output_folder, report, save

import mbsd_twin as mt
from mbsd_twin.model.model import Load
from mbsd_twin.solvers import shaking as sh

OMEGA = 100 * math.pi                    # 3000 rpm
R, L = 0.04, 0.14
M_REC = 0.35 + 0.5 * 0.045 / 0.14
Z = {"engine_single_cylinder.toml": {"": 0.0}, "engine_boxer.toml": {"_1": -0.05, "_2": 0.05},
     "engine_inline_four.toml": {"_1": -0.135, "_2": -0.045, "_3": 0.045, "_4": 0.135}}
FIRING = {"_1": 0.0, "_3": 180.0, "_4": 360.0, "_2": 540.0}   # crank angle of each cylinder's firing TDC


def zero_if_cancelled(ax: object, values: np.ndarray, scale: float) -> None:
    """Show a signal that cancels to round-off as the flat zero it is (not magnified noise)."""
    if np.abs(values).max() < 1e-9 * scale:
        ax.set_ylim(-0.05 * scale, 0.05 * scale)  # type: ignore[attr-defined]
        ax.text(0.5, 0.5, "cancels (< 1e-9 of m_rec r ω²)", transform=ax.transAxes,  # type: ignore[attr-defined]
                ha="center")


def revolution(n: int = 360, turns: int = 1) -> np.ndarray:
    return np.arange(n * turns) / n / (OMEGA / (2 * math.pi))


def balance(name: str) -> dict[str, np.ndarray]:
    mech = load(name)
    res = mt.inverse_dynamics(mech, revolution())
    planes = [(z, sh.frame_force(mech, res, [f"main_bearing{k}", f"cylinder{k}"])) for k, z in Z[name].items()]
    return {"force": sum(f for _, f in planes), "couple": sh.rocking_couple(planes),
            "inertia": sh.inertia_force(mech, res)}


def gas_profile(fire_deg: float, peak: float = 30e3) -> mt.FunctionProfile:
    """Gas force [N]: a bump peaking 15° after the firing TDC, width 25°, repeating every 720°."""
    w = OMEGA * 180 / math.pi          # deg/s

    def fn(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = (np.mod(w * t - fire_deg - 15.0 + 360.0, 720.0) - 360.0) / 25.0
        f = peak * np.exp(-x * x)
        d1 = f * (-2 * x) * w / 25.0
        d2 = f * (4 * x * x - 2) * (w / 25.0) ** 2
        return f, d1, d2

    return mt.FunctionProfile(fn)


def gas_torque() -> tuple[np.ndarray, np.ndarray]:
    mech = load("engine_inline_four.toml")
    gas = tuple(Load(f"gas{k}", "force", (f"piston{k}",), direction=(0.0, -1.0), profile=gas_profile(a))
                for k, a in FIRING.items())
    mech = dataclasses.replace(mech, loads=gas)
    t = revolution(360, 2)
    res = mt.inverse_dynamics(mech, t)
    torque = -sum(res[f"crankshaft_{k}.effort"] for k in range(1, 5))   # delivered by the engine
    return np.degrees(OMEGA * t), torque


def main(out: Path) -> dict[str, float]:
    fig, ax = figure(3, 3, (15, 10))
    numbers: dict[str, float] = {}
    deg = np.degrees(OMEGA * revolution())
    F0 = M_REC * R * OMEGA**2
    for row, name in enumerate(Z):
        b = balance(name)
        short = name.removeprefix("engine_").removesuffix(".toml")
        ax[row][0].plot(deg, b["force"][:, 0] / 1e3, label="Fx")
        ax[row][0].plot(deg, b["force"][:, 1] / 1e3, label="Fy")
        ax[row][0].legend()
        ax[row][0].set(xlabel="crank angle [deg]", ylabel="kN", title=f"{short}: shaking force on the frame")
        zero_if_cancelled(ax[row][0], b["force"] / 1e3, F0 / 1e3)
        zero_if_cancelled(ax[row][1], b["couple"], F0 * 0.1)
        ax[row][1].plot(deg, b["couple"][:, 0], label="Mx")
        ax[row][1].plot(deg, b["couple"][:, 1], label="My")
        ax[row][1].legend()
        ax[row][1].set(xlabel="crank angle [deg]", ylabel="N·m", title="rocking couple")
        for comp, label in ((b["force"][:, 1], "|Fy|"), (b["force"][:, 0], "|Fx|")):
            orders, amp = sh.order_spectrum(comp)
            ax[row][2].bar(orders[1:9] + (0.15 if label == "|Fx|" else -0.15), amp[1:9] / F0, width=0.3, label=label)
        ax[row][2].legend()
        ax[row][2].set(xlabel="engine order", ylabel="amplitude / (m_rec r ω²)", title="force spectrum",
                       ylim=(0.0, max(1.2, float(ax[row][2].get_ylim()[1]))))
        axis = 1 if "boxer" not in name else 0
        for k in (1, 2):
            numbers[f"{short}_force_order{k}"] = sh.order_amplitude(b["force"][:, axis], k) / F0
            numbers[f"{short}_couple_order{k}"] = max(sh.order_amplitude(b["couple"][:, c], k) for c in (0, 1)) / F0
        numbers[f"{short}_inertia_check"] = float(np.abs(b["force"] - b["inertia"]).max() / F0)
    save(fig, out, "engines.png")
    cycle, torque = gas_torque()
    orders, amp = sh.order_spectrum(torque, revolutions=2)
    fig, ax = figure(1, 2, (12, 4))
    ax[0][0].plot(cycle, torque)
    ax[0][0].set(xlabel="crank angle [deg]", ylabel="torque [N·m]", title="inline four, firing order 1-3-4-2")
    ax[0][1].bar(orders[:17], amp[:17], width=0.3)
    ax[0][1].set(xlabel="engine order", ylabel="amplitude [N·m]", title="torque spectrum (mean at order 0)")
    save(fig, out, "engine_torque.png")
    numbers.update({"torque_mean": float(amp[0]), "torque_order2": float(amp[4]),
                    "torque_half_orders": float(max(amp[1], amp[2], amp[3], amp[5], amp[6], amp[7]))})
    return report(numbers)


if __name__ == "__main__":
    main(output_folder())
