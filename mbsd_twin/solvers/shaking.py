"""Shaking forces, rocking couples and order spectra of machines, from inverse-dynamics results.

- ``frame_force(mech, res, joints)``: the force the listed joints exert on ``ground`` [N], world
  axes (a joint's ``fx, fy`` act on its second body; on ground it is the opposite when ground is
  the first body).
- ``inertia_force(mech, res, bodies)``: −Σ m·a_G of the bodies [N]: with gravity off and no
  external loads this is the same shaking force, from the kinematics alone.
- ``rocking_couple(planes)``: forces (Fx, Fy) acting in parallel planes at positions z along the
  crankshaft give the couple r × F = (−Σ z·Fy, Σ z·Fx) about the world x and y axes [N·m].
- ``order_spectrum(signal, revolutions)``: amplitudes of engine orders 0, 1/rev, 2/rev, … of a
  signal sampled uniformly over exactly ``revolutions`` crank turns (endpoint excluded):
  a_k·cos(k φ + ϕ_k) → a_k at order k.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..model.model import GROUND, Mechanism

F = NDArray[Any]


def frame_force(mech: Mechanism, res: Mapping[str, F], joints: Sequence[str] | None = None) -> F:
    """(N, 2) force on ground from the named joints (default: every joint touching ground)."""
    names = joints if joints is not None else [j.name for j in mech.joints if GROUND in j.bodies]
    total = np.zeros((len(res[f"{names[0]}.fx"]), 2))
    for name in names:
        j = mech.joint(name)
        if GROUND not in j.bodies:
            raise ValueError(f"joint {name!r} does not connect to ground")
        sign = -1.0 if j.bodies[0] == GROUND else 1.0
        total += sign * np.column_stack([res[f"{name}.fx"], res[f"{name}.fy"]])
    return total


def inertia_force(mech: Mechanism, res: Mapping[str, F], bodies: Sequence[str] | None = None) -> F:
    """(N, 2) −Σ m·a_G, with a_G = a_ref + α·R90·A·cg − ω²·A·cg from the result's columns."""
    names = bodies if bodies is not None else [b.name for b in mech.bodies]
    total = np.zeros((len(res[f"{names[0]}.ax"]), 2))
    for name in names:
        b = mech.body(name)
        th, w, al = res[f"{name}.theta"], res[f"{name}.omega"], res[f"{name}.alpha"]
        gx = np.cos(th) * b.cg[0] - np.sin(th) * b.cg[1]
        gy = np.sin(th) * b.cg[0] + np.cos(th) * b.cg[1]
        total[:, 0] -= b.mass * (res[f"{name}.ax"] - al * gy - w**2 * gx)
        total[:, 1] -= b.mass * (res[f"{name}.ay"] + al * gx - w**2 * gy)
    return total


def rocking_couple(planes: Sequence[tuple[float, F]]) -> F:
    """(N, 2) couple about world x and y of in-plane forces (N, 2) acting at positions z [m]."""
    return np.asarray(sum(np.column_stack([-z * f[:, 1], z * f[:, 0]]) for z, f in planes))


def order_spectrum(signal: F, revolutions: int = 1) -> tuple[F, F]:
    """(orders, amplitudes) of a signal sampled uniformly over ``revolutions`` turns."""
    x = np.asarray(signal, float)
    n = len(x)
    X = np.fft.rfft(x) / n
    amp = np.abs(X) * 2.0
    amp[0] /= 2.0
    if n % 2 == 0:
        amp[-1] /= 2.0
    return np.arange(len(X)) / revolutions, amp


def order_amplitude(signal: F, order: float, revolutions: int = 1) -> float:
    orders, amp = order_spectrum(signal, revolutions)
    k = int(round(order * revolutions))
    if abs(orders[k] - order) > 1e-12:
        raise ValueError(f"order {order} is not resolved by {revolutions} revolution(s)")
    return float(amp[k])
