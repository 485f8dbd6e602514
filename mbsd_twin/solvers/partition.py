"""Coordinate partitioning: how well a set of free coordinates parameterises the constraint manifold,
and the best such set at a configuration (the ODE form of a mechanism, ``simulation/ode_form.py``).

The measure. Scale the coordinates to be dimensionless (lengths by the mechanism's length scale ℓ,
angles as they are: ``newton.coordinate_scale``), so the constraint Jacobian's rows A (m, n) act on
q̂ = q·scale. Let N (n, f) be an orthonormal basis of the null space of A·diag(1/scale): the
directions, in scaled coordinates, in which the mechanism can move (f degrees of freedom). The free
coordinates F fix the motion when the rows N[F] (f, f) are invertible, and the dependent
coordinates follow from them with the gain A_d⁻¹·A_f, whose size is 1/σ_min(N[F]) up to the
scaling. The **conditioning of the partition** is

    c(F) = σ_min(N[F]) ∈ [0, 1]

— the cosine of the largest angle between the tangent space and the subspace the free coordinates
span; 1 when the free coordinates are the tangent space's own axes, 0 at a singularity of the
partition (the chosen coordinate passes a dead point: a crank-rocker's rocker angle at the rocker's
extreme position, where it no longer determines the crank). It does not depend on how the rows are
scaled or combined (the null space does not), nor on the bodies' masses. For one degree of freedom
c is the largest scaled component of the unit tangent |N[k]|, at least 1/√n for the best k.

The choice. QR with column pivoting on N[candidates]ᵀ picks, among the candidate coordinates, f
with the largest independent components of the tangent space: greedily the coordinate the motion
moves most, then the one most independent of it, … — the classical choice of Wehage and Haug's
partitioning (there by LU with full pivoting of A), here on the null space so that only body
coordinates are candidates (a cam's surface parameters always stay dependent).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg
from numpy.typing import NDArray

F = NDArray[Any]
THRESHOLD = 0.01  # re-partition below this conditioning: the dependent coordinates move 100 times the free ones
HYSTERESIS = 2.0  # ... when the best choice is at least this much better


def tangent_basis(A: F, scale: F, dof: int) -> F:
    """An orthonormal basis (n, dof) of the null space of A·diag(1/scale): the scaled directions of
    motion. ``dof`` = n − rank A (the partition's size, fixed for the mechanism)."""
    n = A.shape[1]
    if dof == 0:
        return np.zeros((n, 0))
    if A.shape[0] == 0:
        return np.eye(n)[:, :dof]
    _, _, vt = np.linalg.svd(A / scale[None, :], full_matrices=True)
    return np.asarray(vt[n - dof:].T)


def conditioning(N: F, free: NDArray[np.intp]) -> float:
    """c(F) = σ_min(N[F]) of the module's definition (1.0 without degrees of freedom)."""
    if N.shape[1] == 0:
        return 1.0
    return float(np.linalg.svd(N[free], compute_uv=False)[-1])


def best_free(N: F, candidates: NDArray[np.intp]) -> NDArray[np.intp]:
    """The f free coordinates (sorted as in ``candidates``) picked by QR with column pivoting on
    N[candidates]ᵀ: the best-conditioned partition the greedy choice finds."""
    f = N.shape[1]
    if f == 0:
        return np.zeros(0, dtype=np.intp)
    _, _, piv = scipy.linalg.qr(N[candidates].T, pivoting=True, mode="economic")
    picked = set(piv[:f].tolist())
    return np.array([c for k, c in enumerate(candidates) if k in picked], dtype=np.intp)
