"""The Kalman update's small dense algebra, compiled: one call instead of some twenty numpy calls
on 3×3 … 6×6 arrays (each costing more in call overhead than in arithmetic)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def update(P, H, r, nu):  # noqa: ANN001, ANN201 - numba signatures
    """(P⁺, dx, NIS, √diag S, √diag(K·S·Kᵀ)) of the update with measurement Jacobian ``H`` (m × n),
    measurement σ ``r`` (m) and innovation ``nu`` (m); P⁺ in the Joseph form
    (I − K·H)·P·(I − K·H)ᵀ + K·R·Kᵀ, which stays symmetric positive semi-definite."""
    n = P.shape[0]
    PHt = P @ H.T
    S = H @ PHt
    for i in range(r.shape[0]):
        S[i, i] += r[i] * r[i]
    Si = np.linalg.inv(S)
    K = PHt @ Si
    IKH = np.eye(n) - K @ H
    KR = K.copy()
    for j in range(r.shape[0]):
        KR[:, j] *= r[j] * r[j]
    Pn = IKH @ P @ IKH.T + KR @ K.T
    Pn = 0.5 * (Pn + Pn.T)
    dx = K @ nu
    nis = nu @ (Si @ nu)
    KSKt = K @ S @ K.T
    sd = np.sqrt(np.diag(S).copy())
    dx_sd = np.sqrt(np.maximum(np.diag(KSKt).copy(), 0.0))
    return Pn, dx, nis, sd, dx_sd
