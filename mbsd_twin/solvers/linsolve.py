"""Batched solves with the constraint Jacobian Cq (B, m, n).

For a square, full-rank Cq (a DOF-0 mechanism without redundant constraints) one batched inverse
serves the velocity, acceleration and multiplier solves and gives the 1-norm condition number for
free. With redundant constraints (m > n, rank n) the Moore–Penrose pseudo-inverse gives the
least-squares velocities/accelerations and the minimum-norm multipliers, since
pinv(Cqᵀ) = pinv(Cq)ᵀ.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

F = NDArray[Any]
SPARSE_MIN = 300  # coordinates (100 bodies) from which an underdetermined Newton step is solved sparse


class JacobianSolver:
    """Solves Cq·x = b and Cqᵀ·y = c for a batch of Jacobians."""

    def __init__(self, Cq: F) -> None:
        self.Cq = Cq
        self.square = Cq.shape[-1] == Cq.shape[-2]
        if self.square:
            self.inv = np.linalg.inv(Cq)
            self.cond = np.abs(Cq).sum(axis=-2).max(axis=-1) * np.abs(self.inv).sum(axis=-2).max(axis=-1)
        else:
            u, s, vt = np.linalg.svd(Cq, full_matrices=False)
            smax = s[..., :1]
            keep = s > 1e-10 * smax
            sinv = np.where(keep, 1.0 / np.where(keep, s, 1.0), 0.0)
            self.inv = np.einsum("bji,bj,bkj->bik", vt, sinv, u)
            smin = np.where(keep, s, np.inf).min(axis=-1)
            self.cond = s[..., 0] / smin

    def solve(self, b: F) -> F:
        """x (B, n) with Cq·x = b (least squares if overdetermined)."""
        return np.einsum("bij,bj->bi", self.inv, b)

    def solve_transpose(self, c: F) -> F:
        """y (B, m) with Cqᵀ·y = c (minimum norm if underdetermined)."""
        return np.einsum("bji,bj->bi", self.inv, c)


def sparse_min_norm(A: F, c: F) -> F | None:
    """The minimum-norm x with A·x = c for a sparse A of full row rank, by a sparse LU of the
    saddle-point system [[I, Aᵀ], [A, 0]]·[x; y] = [0; c]; None when that fails or leaves a
    residual above 1e-10·|c| (dependent rows: the caller takes the pseudo-inverse)."""
    m, n = A.shape
    S = sp.csr_array(A)
    K = sp.block_array([[sp.eye_array(n), S.T], [S, None]], format="csc")
    try:
        x = spla.splu(K).solve(np.concatenate([np.zeros(n), c]))[:n]
    except RuntimeError:  # exactly singular
        return None
    if not np.isfinite(x).all() or np.linalg.norm(S @ x - c) > 1e-10 * max(float(np.linalg.norm(c)), 1e-300):
        return None
    return x


def newton_step(Cq: F, C: F, square: bool) -> F:
    """Δq with Cq·Δq = −C: exact for a square system, minimum-norm least squares otherwise (for
    an underdetermined system of SPARSE_MIN coordinates or more by a sparse solve, see
    :func:`sparse_min_norm`, where the pseudo-inverse's dense SVD is cubic in their number)."""
    if square:
        return np.linalg.solve(Cq, -C[..., None])[..., 0]
    m, n = Cq.shape[-2:]
    if n < SPARSE_MIN or m >= n:
        return -np.einsum("bij,bj->bi", np.linalg.pinv(Cq, rcond=1e-10), C)
    out = np.empty(Cq.shape[:-2] + (n,))
    for b in range(len(Cq)):
        x = sparse_min_norm(Cq[b], -C[b])
        out[b] = x if x is not None else -np.linalg.pinv(Cq[b], rcond=1e-10) @ C[b]
    return out
