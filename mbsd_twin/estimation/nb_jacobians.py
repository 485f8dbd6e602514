"""The linearisation's small dense arithmetic, compiled and written out as loops (as :mod:`.nb_kalman`
does for the update): the Jacobians from the finite-difference runs' differences, and how far two
linearisations differ. Through numpy — some thirty calls on 4×4 … 8×8 arrays, three ``einsum`` —
this cost more than the compiled runs themselves (about 60 against 40 µs per refresh), and the
refreshes follow the crank's travel: at 38 rad/s one sample in six refreshes."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .nb_kalman import _inverse


@njit(cache=True)
def assemble(D, delta, n, d, angular, b_src, noise_var):  # noqa: ANN001, ANN201
    """(F, H, B, Q) from ``D`` (perturbed − nominal [z, ż, y], one row per perturbation of size
    ``delta``; the first ``n`` rows move the n state components): transition
    F (rows 2d.. the identity: the unknowns' random walk), measurement Jacobian H = G·F⁻¹ (angular
    rows of y wrapped), the inputs' effects B (row k: the state column ``b_src[k]`` of F when ≥ 0,
    else perturbation −1 − ``b_src[k]``'s [z, ż] per unit) and their process noise
    Q = Σₖ ``noise_var[k]``·Bₖ·Bₖᵀ."""
    m = D.shape[1] - 2 * d
    F = np.eye(n)
    for j in range(n):
        for i in range(2 * d):
            F[i, j] = D[j, i] / delta[j]
    G = np.empty((m, n))
    for j in range(n):
        for i in range(m):
            v = D[j, 2 * d + i]
            if angular[i]:
                v = np.remainder(v + math.pi, 2.0 * math.pi) - math.pi
            G[i, j] = v / delta[j]
    B = np.zeros((b_src.shape[0], n))
    Q = np.zeros((n, n))
    for k in range(b_src.shape[0]):
        s = b_src[k]
        for i in range(2 * d):
            B[k, i] = F[i, s] if s >= 0 else D[-1 - s, i] / delta[-1 - s]
        if noise_var[k] > 0.0:
            for i in range(n):
                for j in range(n):
                    Q[i, j] += noise_var[k] * (B[k, i] * B[k, j])
    Fi = _inverse(F)
    H = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            acc = 0.0
            for k in range(n):
                acc += G[i, k] * Fi[k, j]
            H[i, j] = acc
    return F, H, B, Q


@njit(cache=True)
def change(H_old, H_new, F_old, F_new, P, r):  # noqa: ANN001, ANN201
    """How far two linearisations differ, applied to the state's uncertainty P: the larger of
    maxᵢ √(ΔHᵢ·P·ΔHᵢᵀ)/rᵢ (the measurement Jacobian's change, in σ of each measured channel) and
    maxᵢ √((ΔF·P·ΔFᵀ)ᵢᵢ/(F·P·Fᵀ)ᵢᵢ) (the transition's change, in σ of each propagated state
    component)."""
    n = P.shape[0]
    worst = 0.0
    for i in range(H_new.shape[0]):
        q = 0.0
        for j in range(n):
            a = H_new[i, j] - H_old[i, j]
            if a != 0.0:
                for k in range(n):
                    q += a * P[j, k] * (H_new[i, k] - H_old[i, k])
        worst = max(worst, math.sqrt(max(q, 0.0)) / r[i])
    for i in range(n):
        q, p = 0.0, 0.0
        for j in range(n):
            a, f = F_new[i, j] - F_old[i, j], F_new[i, j]
            for k in range(n):
                q += a * P[j, k] * (F_new[i, k] - F_old[i, k])
                p += f * P[j, k] * F_new[i, k]
        worst = max(worst, math.sqrt(max(q, 0.0) / max(p, 1e-300)))
    return worst


@njit(cache=True)
def fd_steps(P, scale, fixed):  # noqa: ANN001, ANN201
    """The finite-difference runs' steps: ``scale`` × each state component's σ (√diag P, at least
    1e-300 before the root and 1e-9 after: ``StateEstimator._deltas``), then the ``fixed`` ones."""
    n = P.shape[0]
    out = np.empty(n + fixed.shape[0])
    for i in range(n):
        out[i] = scale * max(math.sqrt(max(P[i, i], 1e-300)), 1e-9)
    out[n:] = fixed
    return out
