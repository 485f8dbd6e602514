"""The filter's linearisation: the finite-difference runs of its step, the Jacobians assembled
from them, and when to refresh them — by the coordinates' travel under step-size control, with
``jacobian_every`` corrections at the most (docs/twin-estimation.md, "Linearisation that follows
the motion"). Used by both paths of :class:`~.ekf.StateEstimator`: the Python reference
(``StateEstimator._linearise``) and the compiled one (:mod:`.fused`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .records import Linearisation

StateEstimator = Any  # an .ekf.StateEstimator (which imports this module: no import back)
F64 = NDArray[np.float64]
H_CHANGE = 1e-3  # relative change of the prediction interval that calls for new Jacobians


def jacobian_change(old: Linearisation, new: Linearisation, P: F64, r: F64) -> float:
    """How far two linearisations of the filter's step differ, applied to the state's uncertainty P:
    the larger of maxᵢ √(ΔHᵢ·P·ΔHᵢᵀ)/rᵢ (the measurement Jacobian's change, in σ of each measured
    channel) and maxᵢ √((ΔF·P·ΔFᵀ)ᵢᵢ/(F·P·Fᵀ)ᵢᵢ) (the transition's change, in σ of each propagated
    state component)."""
    dH, dF = new.H - old.H, new.F - old.F
    e_h = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", dH, P, dH), 0.0)) / r
    prop = np.einsum("ij,jk,ik->i", new.F, P, new.F)
    e_f = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", dF, P, dF), 0.0) / np.maximum(prop, 1e-300))
    return float(max(e_h.max(), e_f.max()))


def stale(est: StateEstimator, h: float, n_steps: int) -> bool:
    """Whether the next prediction needs new Jacobians: every ``jacobian_every`` predictions, when
    the number of steps or the interval changes (by more than ``H_CHANGE``: sample times given as
    seconds since the epoch carry about 2e-7 s of rounding, which must not count), and when the
    coordinates will have travelled ``next_travel`` from the last linearisation's end point."""
    lin = est.lin
    if lin is None or est.age + 1 >= est.cfg.jacobian_every or abs(lin.h - h) > H_CHANGE * h \
            or lin.n_steps != n_steps:
        return True
    return lin.z is not None and _travel(est, lin.z, h) >= est.next_travel

def _travel(est: StateEstimator, z_lin: F64, h: float) -> float:
    """Distance of the coordinates at the end of the next ``h`` s (extrapolated with the current
    speeds) from ``z_lin`` (rad or m, Euclidean over the coordinates)."""
    d, x = est.d, est.x
    return math.dist((x[:d] + h * x[d:2 * d]).tolist(), z_lin.tolist())  # per sample: no numpy norm's overhead


def adopt(est: StateEstimator, lin: Linearisation, h: float) -> Linearisation:
    """Take a fresh linearisation of the next ``h`` s; schedule the next one by travel.

    Step-size control for the Jacobians: E = maxᵢ √(ΔHᵢ·P·ΔHᵢᵀ)/σᵢ, the change of the
    measurement Jacobian since the last refresh, applied to the state's current uncertainty, in
    σ of each measured channel, grows about linearly with the coordinates' travel s between
    the two. The next refresh comes after the travel s·tol/E (``jacobian_tolerance``, at most
    2·s: a mechanism leaving a quiet stretch of its cycle is caught within two refreshes), so
    the refresh rate follows the motion — dense at a slider crank's dead centres, where the
    bearing forces turn fastest, sparse elsewhere, and the same in crank travel at every speed
    and hold level; ``jacobian_every`` bounds the count in between (a mechanism at rest)."""
    old, tol = est.lin, est.cfg.jacobian_tolerance
    lin.z = est.x[:est.d] + h * est.x[est.d:2 * est.d]
    if old is None or old.z is None or not math.isfinite(tol):
        est.next_travel = 0.0 if math.isfinite(tol) else math.inf  # the rate needs two refreshes
    else:
        s = float(np.linalg.norm(lin.z - old.z))
        e = jacobian_change(old, lin, est.P, est.r)
        if s > 0.0:
            est.next_travel = 2.0 * s if e * 2.0 <= tol else s * tol / e
    est.lin, est.age = lin, 0
    est.refreshes += 1
    return lin


def perturbations(est: StateEstimator, extra: tuple[str, ...] = ()) -> list[tuple[int, Any, float]]:
    """The finite-difference runs of a linearisation, as (kind, target, step): kind 0 moves
    component ``target`` of [z, ż], 1 the parameter named ``target``, 2 the input port
    ``target`` over the interval (an input bias; then each other noisy input, then the ports of
    ``extra`` that neither covers: the inputs whose effect a gap's noise needs)."""
    out: list[tuple[int, Any, float]] = []
    for j, dj in enumerate(est._deltas()):
        aug = est.aug[j - 2 * est.d] if j >= 2 * est.d else None
        out.append((0, j, float(dj)) if aug is None else (1, aug.name, float(dj)) if aug.bias_port is None
                   else (2, aug.bias_port, float(dj)))
    noisy = [(2, port, max(sig, 1e-9)) for port, sig in est.cfg.input_noise.items() if port not in est.bias]
    known = set(est.bias) | set(est.cfg.input_noise)
    return out + noisy + [(2, port, 1e-3) for port in extra if port not in known]


def assembled(est: StateEstimator, h: float, n_steps: int, D: F64, perts: list[tuple[int, Any, float]]
              ) -> Linearisation:
    """The linearisation from the runs' differences ``D`` (perturbed − nominal [z, ż, y], one
    row per perturbation of :func:`perturbations`): transition F, measurement Jacobian
    H = G·F⁻¹, each input's effect B (the state's change per unit offset of the input held over
    the interval) and the process noise of the inputs' sample noise (each interval value is the
    mean of two samples)."""
    d, n = est.d, est.n
    dv = np.array([perts[j][2] for j in range(n)])[:, None]
    F = np.eye(n)
    F[:2 * d, :] = (D[:n, :2 * d] / dv).T
    dy = D[:n, 2 * d:].copy()
    dy[:, est.angular] = np.remainder(dy[:, est.angular] + math.pi, 2.0 * math.pi) - math.pi
    G = (dy / dv).T
    B: dict[str, F64] = {}
    for port, i in est.bias.items():
        B[port] = np.zeros(n)
        B[port][:2 * d] = F[:2 * d, i]
    for p in range(n, len(perts)):
        B[perts[p][1]] = np.zeros(n)
        B[perts[p][1]][:2 * d] = D[p, :2 * d] / perts[p][2]
    Q = np.zeros((n, n))
    for port, sig in est.cfg.input_noise.items():
        Q += 0.5 * sig * sig * np.outer(B[port], B[port])
    return Linearisation(h, n_steps, F, G @ np.linalg.inv(F), Q, B=B)
