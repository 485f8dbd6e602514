"""Banded L·D·Lᵀ factorisation and solve of the Schur complement (``nb_solve``), in place in its
banded lower storage ``Sb[p, d] = S[p, p − d]`` (half-bandwidth ``bw``).

Both are chains of dependent operations, row after row: their cost is latency, not arithmetic.
For ``bw == 3`` — a chain or a tree of revolute joints, and most four-bars and slider cranks —
the rows past the third run through an unrolled loop that keeps the last three solution values
in registers instead of reading back the ones just stored: the same operations in the same order
(bit-identical results), about 1.3× faster for the factorisation and 2× for the substitution on
a 1,000-link chain. Every other band width takes the general loop.
"""

from __future__ import annotations

import numpy as np
from numba import njit

TINY = 1e-300  # a pivot D[i] not above this: S is not positive definite


@njit(cache=True, inline="always")
def _factor_rows(Sb: np.ndarray, bw: int, first: int, last: int) -> bool:
    """Rows ``first`` ≤ i < ``last`` of the factorisation (the rows before already factored)."""
    for i in range(first, last):
        lo = max(0, i - bw)
        for j in range(lo, i):  # u[j] = (L·D)[i, j] into Sb[i, i − j]
            s = Sb[i, i - j]
            for k in range(lo, j):
                s -= Sb[i, i - k] * Sb[j, j - k]
            Sb[i, i - j] = s
        d = Sb[i, 0]
        for k in range(lo, i):  # L[i, k] = u[k] / D[k]; D[i] = S[i, i] − Σ u[k]·L[i, k]
            u = Sb[i, i - k]
            lk = u * Sb[k, 0]
            d -= u * lk
            Sb[i, i - k] = lk
        if not d > TINY:
            return False
        Sb[i, 0] = 1.0 / d
    return True


@njit(cache=True, inline="always")
def _factor3(Sb: np.ndarray) -> bool:
    """:func:`_factor_rows` over every row for ``bw == 3``, unrolled past the third row: the last
    three rows' 1/D and the L entries the next row reads are carried in registers."""
    m = Sb.shape[0]
    if not _factor_rows(Sb, 3, 0, min(m, 3)):
        return False
    if m <= 3:
        return True
    a, b, c = Sb[1, 1], Sb[2, 2], Sb[2, 1]  # L[i−2, i−3], L[i−1, i−3], L[i−1, i−2] for i = 3
    e3, e2, e1 = Sb[0, 0], Sb[1, 0], Sb[2, 0]  # 1/D of rows i−3, i−2, i−1
    for i in range(3, m):
        u3 = Sb[i, 3]
        u2 = Sb[i, 2] - u3 * a
        u1 = Sb[i, 1] - u3 * b
        u1 -= u2 * c
        d = Sb[i, 0]
        l3 = u3 * e3
        d -= u3 * l3
        l2 = u2 * e2
        d -= u2 * l2
        l1 = u1 * e1
        d -= u1 * l1
        Sb[i, 3], Sb[i, 2], Sb[i, 1] = l3, l2, l1
        if not d > TINY:
            return False
        inv = 1.0 / d
        Sb[i, 0] = inv
        a, b, c = c, l2, l1
        e3, e2, e1 = e2, e1, inv
    return True


@njit(cache=True, inline="always")
def band_factor(Sb: np.ndarray, bw: int) -> bool:
    """In-place banded factorisation S = L·D·Lᵀ (L unit lower triangular) of Sb: L below the
    diagonal, 1/D[i] on it. Without Cholesky's square roots and with reciprocals stored, each row
    costs one division on the chain of dependent operations that bounds this small
    factorisation. False if S is not positive definite (singular configuration or redundant
    rows)."""
    if bw == 3:
        return _factor3(Sb)
    return _factor_rows(Sb, bw, 0, Sb.shape[0])


@njit(cache=True, inline="always")
def _forward_rows(Sb: np.ndarray, rhs: np.ndarray, bw: int, first: int, last: int) -> None:
    for i in range(first, last):
        s = rhs[i]
        for k in range(max(0, i - bw), i):
            s -= Sb[i, i - k] * rhs[k]
        rhs[i] = s


@njit(cache=True, inline="always")
def _backward_rows(Sb: np.ndarray, rhs: np.ndarray, bw: int, first: int, last: int) -> None:
    """Rows ``last`` − 1 down to ``first`` of the back substitution (the rows after already done)."""
    m = Sb.shape[0]
    for i in range(last - 1, first - 1, -1):
        s = rhs[i]
        for k in range(i + 1, min(m, i + bw + 1)):
            s -= Sb[k, k - i] * rhs[k]
        rhs[i] = s


@njit(cache=True, inline="always")
def _substitute3(Sb: np.ndarray, rhs: np.ndarray) -> None:
    """:func:`band_substitute` for ``bw == 3`` with at least four rows, the loops unrolled (the
    division by D in the forward loop, the unscaled values carried on)."""
    m = Sb.shape[0]
    _forward_rows(Sb, rhs, 3, 0, 3)
    r3, r2, r1 = rhs[0], rhs[1], rhs[2]
    for i in range(3):
        rhs[i] *= Sb[i, 0]
    for i in range(3, m):
        s = rhs[i] - Sb[i, 3] * r3
        s -= Sb[i, 2] * r2
        s -= Sb[i, 1] * r1
        rhs[i] = s * Sb[i, 0]
        r3, r2, r1 = r2, r1, s
    _backward_rows(Sb, rhs, 3, m - 3, m)
    r1, r2, r3 = rhs[m - 3], rhs[m - 2], rhs[m - 1]
    for i in range(m - 4, -1, -1):
        s = rhs[i] - Sb[i + 1, 1] * r1
        s -= Sb[i + 2, 2] * r2
        s -= Sb[i + 3, 3] * r3
        rhs[i] = s
        r3, r2, r1 = r2, r1, s


@njit(cache=True, inline="always")
def band_substitute(Sb: np.ndarray, rhs: np.ndarray, bw: int) -> None:
    """rhs ← S⁻¹·rhs with the factor :func:`band_factor` left in Sb."""
    m = Sb.shape[0]
    if bw == 3 and m > 3:
        _substitute3(Sb, rhs)
        return
    _forward_rows(Sb, rhs, bw, 0, m)
    for i in range(m):
        rhs[i] *= Sb[i, 0]
    _backward_rows(Sb, rhs, bw, 0, m)


@njit(cache=True, inline="always")
def band_solve(Sb: np.ndarray, rhs: np.ndarray, bw: int) -> bool:
    """In-place banded L·D·Lᵀ factorisation of Sb and solve; ``rhs`` becomes the solution. False if
    S is not positive definite."""
    if not band_factor(Sb, bw):
        return False
    band_substitute(Sb, rhs, bw)
    return True
