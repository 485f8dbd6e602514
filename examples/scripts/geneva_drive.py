"""Geneva drive (4 slots): the full cycle — engagement (pin in slot) and dwell (wheel locked).

The engaged phase is the mechanism of geneva_drive.toml (the slot is a point_on_line joint). The
slot line is infinite, so the sweep runs over a whole crank turn; the pin is really in the slot
only while |pin − W| ≤ R = sqrt(d² − r²), and outside that window the wheel is held still.
Writes geneva_drive.png; returns the engaged and dwell crank angles and the index angle.
Closed form: engaged π − 2π/n = 90°, dwell π + 2π/n = 270°, index 2π/n = 90°.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from _common import figure, load, output_folder, report, save

import mbsd_twin as mt

R_PIN, D = 0.05, 0.05 / math.sin(math.pi / 4)


def crossings(x: np.ndarray, y: np.ndarray, level: float) -> list[float]:
    """x where y crosses ``level`` (linear interpolation between samples)."""
    s = y - level
    k = np.flatnonzero(np.sign(s[:-1]) != np.sign(s[1:]))
    return [float(x[i] - s[i] * (x[i + 1] - x[i]) / (s[i + 1] - s[i])) for i in k]


def main(out: Path) -> dict[str, float]:
    t = np.linspace(0.0, 1.0, 7201)          # crank from −45° over a full turn
    res = mt.kinematics(load("geneva_drive.toml"), t)
    crank = res["crank.theta"]
    pin = np.column_stack([R_PIN * np.cos(crank), R_PIN * np.sin(crank)])
    dist = np.hypot(pin[:, 0] - D, pin[:, 1])
    slot_length = math.sqrt(D**2 - R_PIN**2)
    enter, leave = crossings(crank, dist, slot_length + 1e-12)[:2] if dist[0] > slot_length \
        else (float(crank[0]), crossings(crank, dist, slot_length)[0])
    engaged = (crank >= enter) & (crank <= leave)
    wheel = np.unwrap(res["wheel.theta"])
    w_enter, w_leave = (float(np.interp(a, crank, wheel)) for a in (enter, leave))
    # full cycle: the wheel follows the slot while engaged and is locked at its exit angle after
    held = np.where(engaged, wheel, np.where(crank > leave, w_leave, w_enter))
    fig, ax = figure(1, 2, (12, 4.5))
    ax[0][0].plot(np.degrees(crank), np.degrees(held - w_enter))
    ax[0][0].axvspan(math.degrees(enter), math.degrees(leave), alpha=0.15, label="pin in slot")
    ax[0][0].legend()
    ax[0][0].set(xlabel="crank angle [deg]", ylabel="wheel rotation [deg]", title="index and dwell")
    ax[0][1].plot(np.degrees(crank[engaged]), res["wheel.omega"][engaged] / (2 * math.pi))
    ax[0][1].set(xlabel="crank angle [deg]", ylabel="wheel speed / crank speed", title="engaged phase")
    save(fig, out, "geneva_drive.png")
    return report({"engaged_angle": math.degrees(leave - enter), "dwell_angle": 360.0 - math.degrees(leave - enter),
                   "index_angle": abs(math.degrees(w_leave - w_enter)),
                   "speed_ratio_peak": float(np.abs(res["wheel.omega"][engaged]).max() / (2 * math.pi)),
                   "speed_ratio_at_entry": float(abs(np.interp(enter, crank, res["wheel.omega"])) / (2 * math.pi))})


if __name__ == "__main__":
    main(output_folder())
