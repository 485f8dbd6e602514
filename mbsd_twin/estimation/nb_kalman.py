"""The Kalman update's small dense algebra, compiled and written out as loops: the matrices are
3×3 … 8×8, where each BLAS or LAPACK call and each temporary array costs more than its arithmetic
(the same update through numpy's matmul and inv took about 11 µs, the loops about 1 µs)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _inverse(S):  # noqa: ANN001, ANN202
    """S⁻¹ by Gauss–Jordan elimination with partial pivoting (S: a small symmetric positive definite
    innovation covariance)."""
    m = S.shape[0]
    A = S.copy()
    Si = np.eye(m)
    for c in range(m):
        p = c
        for i in range(c + 1, m):
            if abs(A[i, c]) > abs(A[p, c]):
                p = i
        if p != c:
            for k in range(m):
                A[c, k], A[p, k] = A[p, k], A[c, k]
                Si[c, k], Si[p, k] = Si[p, k], Si[c, k]
        piv = A[c, c]
        for k in range(m):
            A[c, k] /= piv
            Si[c, k] /= piv
        for i in range(m):
            if i != c and A[i, c] != 0.0:
                f = A[i, c]
                for k in range(m):
                    A[i, k] -= f * A[c, k]
                    Si[i, k] -= f * Si[c, k]
    return Si


@njit(cache=True)
def _mul(A, B):  # noqa: ANN001, ANN202
    n, m, p = A.shape[0], A.shape[1], B.shape[1]
    C = np.zeros((n, p))
    for i in range(n):
        for k in range(m):
            a = A[i, k]
            if a != 0.0:
                for j in range(p):
                    C[i, j] += a * B[k, j]
    return C


@njit(cache=True)
def update(P, H, r, nu):  # noqa: ANN001, ANN201 - numba signatures
    """(P⁺, dx, NIS, √diag S, √diag(K·S·Kᵀ)) of the update with measurement Jacobian ``H`` (m × n),
    measurement σ ``r`` (m) and innovation ``nu`` (m); P⁺ in the Joseph form
    (I − K·H)·P·(I − K·H)ᵀ + K·R·Kᵀ, which stays symmetric positive semi-definite."""
    n, m = P.shape[0], r.shape[0]
    PHt = _mul(P, H.T.copy())
    S = _mul(H, PHt)
    for i in range(m):
        S[i, i] += r[i] * r[i]
    Si = _inverse(S)
    K = _mul(PHt, Si)
    IKH = -_mul(K, H)
    for i in range(n):
        IKH[i, i] += 1.0
    KR = K.copy()
    for j in range(m):
        for i in range(n):
            KR[i, j] *= r[j] * r[j]
    Pn = _mul(_mul(IKH, P), IKH.T.copy()) + _mul(KR, K.T.copy())
    for i in range(n):
        for j in range(i + 1, n):
            s = 0.5 * (Pn[i, j] + Pn[j, i])
            Pn[i, j] = Pn[j, i] = s
    dx = np.zeros(n)
    for i in range(n):
        for j in range(m):
            dx[i] += K[i, j] * nu[j]
    Sinu = np.zeros(m)
    for i in range(m):
        for j in range(m):
            Sinu[i] += Si[i, j] * nu[j]
    nis = 0.0
    for i in range(m):
        nis += nu[i] * Sinu[i]
    sd = np.sqrt(np.diag(S).copy())
    dx_sd = np.zeros(n)
    KS = _mul(K, S)
    for i in range(n):
        acc = 0.0
        for j in range(m):
            acc += KS[i, j] * K[i, j]
        dx_sd[i] = np.sqrt(max(acc, 0.0))
    return Pn, dx, nis, sd, dx_sd


@njit(cache=True)
def propagate(F, P, Q_in, Q_acc):  # noqa: ANN001, ANN201
    """The predicted covariance F·P·Fᵀ + Q_in + Q_acc."""
    return _mul(_mul(F, P), F.T.copy()) + Q_in + Q_acc
