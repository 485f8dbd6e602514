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
from numpy.typing import NDArray

F = NDArray[Any]


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


def newton_step(Cq: F, C: F, square: bool) -> F:
    """Δq with Cq·Δq = −C: exact for a square system, minimum-norm least squares otherwise."""
    if square:
        return np.linalg.solve(Cq, -C[..., None])[..., 0]
    return -np.einsum("bij,bj->bi", np.linalg.pinv(Cq, rcond=1e-10), C)
