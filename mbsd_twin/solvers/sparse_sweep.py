"""Kinematic sweep and inverse dynamics of a large DOF-0 mechanism with sparse Jacobians.

From ``SPARSE_MIN`` coordinates on, a square Jacobian (as many independent constraint rows as
coordinates: no redundant rows) is never formed dense: point after point, Newton's steps, the
velocities, the accelerations and the multipliers are solved with one sparse LU of Cq each
(``splu``; Cqᵀ·λ = Q − M·a by the same factors transposed), M·a is formed per body and the joint
reactions are reduced from the rows of Cq scaled by λ. The work per point is about linear in the
number of bodies, where the dense sweep (:mod:`.kinematics`, the batched inverses of
:class:`.linsolve.JacobianSolver`) is cubic in it and holds an (n, n) inverse per point.

Each point starts from the second-order Taylor predictor of the one before; a point that does not
converge or whose solution strays from its predictor by more than ``branch_jump`` (scaled
coordinates) is an error, as in the dense sweep. The Jacobian's 1-norm condition number (the
dense sweep's, here estimated by ``onenormest``) feeds the same near-singularity warning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from ..physics.system import System
from . import linsolve
from .assembly import assemble, located_error
from .newton import KinematicsOptions, coordinate_scale, length_scale, solve_positions_lu

F = NDArray[Any]


def applies(system: System) -> bool:
    """A large square system (the DOF-0 check has already refused other ranks)."""
    return system.n_coord >= linsolve.SPARSE_MIN and system.n_constraints == system.n_coord


@dataclass
class SparseSweep:
    """q, v, a (N, n) and λ (N, m) at times t (N,); ``g`` (N, n_joints, 3) the generalised
    constraint force −Cqᵀλ of each joint's rows on the columns of its reported body; ``cond``
    the Jacobian's estimated 1-norm condition number per point; warnings."""

    t: F
    q: F
    v: F
    a: F
    lam: F
    g: F
    cond: F
    warnings: list[str] = field(default_factory=list)


def mass_times(system: System, q: F, a: F) -> F:
    """M(q)·a (B, n) per body, without the (n, n) mass matrix (``System.mass_matrix_batch``'s blocks)."""
    bx, by, _, _ = system._cg_terms(q)
    nb = system.n_body
    out = np.zeros_like(a)
    ax, ay, al = a[:, 0:3 * nb:3], a[:, 1:3 * nb:3], a[:, 2:3 * nb:3]
    m = system.mass
    out[:, 0:3 * nb:3] = m * ax + m * bx * al
    out[:, 1:3 * nb:3] = m * ay + m * by * al
    out[:, 2:3 * nb:3] = m * bx * ax + m * by * ay + (system.inertia + m * (system.cg**2).sum(axis=1)) * al
    return out


class _JointReduction:
    """Sums of λ-scaled Jacobian rows per joint, read at the three columns of its reported body
    (the second body, or the first when the second is ground: ``outputs._reaction_on_second``)."""

    def __init__(self, system: System) -> None:
        n, joints = system.n_coord, system.joints
        rows = [(k, r) for k, j in enumerate(joints) for r in j.rows]
        kk = np.array([k for k, _ in rows], dtype=np.intp)
        rr = np.array([r for _, r in rows], dtype=np.intp)
        self.P = sp.csr_array((np.ones(len(rows)), (kk, rr)), shape=(len(joints), system.n_constraints))
        col = np.array([j.col_j if j.col_j < n else j.col_i for j in joints], dtype=np.intp)
        self.cols = col[:, None] + np.arange(3)
        self.ids = np.repeat(np.arange(len(joints)), 3).reshape(-1, 3)

    def __call__(self, J: Any, lam: F) -> F:
        if not len(self.ids):
            return np.zeros((0, 3))
        G = sp.csr_array(self.P @ (sp.diags_array(lam) @ J))
        return -np.asarray(G[self.ids.ravel(), self.cols.ravel()]).reshape(-1, 3)


ProgressFn = Callable[[float], None]


def sparse_sweep(system: System, t: F, opts: KinematicsOptions, inputs: dict[str, float] | None = None,
                 progress: ProgressFn | None = None) -> SparseSweep:
    """q, v, a, λ and the joints' constraint forces at every time in ``t`` (see the module docstring)."""
    t = np.asarray(t, float)
    if t.ndim != 1 or t.size == 0 or not np.isfinite(t).all() or (np.diff(t) <= 0).any():
        raise ValueError("times must be a non-empty 1-D array of finite, strictly increasing values")
    N, n = len(t), system.n_coord
    Q, V, A, L = (np.empty((N, n)) for _ in range(4))
    G, cond = np.empty((N, len(system.joints), 3)), np.empty(N)
    reduce, scale = _JointReduction(system), coordinate_scale(system)
    tol = opts.tol * max(1.0, length_scale(system))
    for i, ti in enumerate(t.tolist()):
        if i == 0:
            pred = assemble(system, None, ti, opts)
        else:
            dt = ti - t[i - 1]
            pred = Q[i - 1] + V[i - 1] * dt + 0.5 * A[i - 1] * dt**2
        out = solve_positions_lu(system, pred, ti, opts)
        q, res, it = out if out is not None else (pred, np.inf, 0)
        if res > tol or np.abs((q - pred) * scale).max() > opts.branch_jump:
            what = ("no solution near the previous configuration (a lock-up, or the end of the "
                    "mechanism's range of motion)") if res > tol else \
                "the solution jumped away from the assembly branch (a singular configuration)"
            raise located_error(system, q, ti, it, what)
        Q[i] = q
        V[i], A[i], L[i], G[i], cond[i] = _point(system, q, ti, reduce, inputs)
        if progress is not None and (i + 1) % 1000 == 0:
            progress((i + 1) / N)
    if progress is not None:
        progress(1.0)
    return SparseSweep(t, Q, V, A, L, G, cond)


def _point(system: System, q: F, t: float, reduce: _JointReduction,
           inputs: dict[str, float] | None) -> tuple[F, F, F, F, float]:
    """v, a, λ, the joints' constraint forces and the condition estimate at one solved point."""
    J = system.evaluate_sparse(q, t)[1]
    lu = spla.splu(sp.csc_array(J))
    tb = np.array([t])
    v = lu.solve(-system.ct(q, t))
    a = lu.solve(system.gamma_batch(q[None, :], v[None, :], tb)[0])
    rhs = system.forces_batch(q[None, :], v[None, :], tb, inputs)[0] - mass_times(system, q[None, :], a[None, :])[0]
    lam = lu.solve(rhs, trans="T")
    inv = spla.LinearOperator(J.shape, matvec=lu.solve, rmatvec=lambda x: lu.solve(x, trans="T"), dtype=float)
    cond = float(spla.norm(J, 1) * spla.onenormest(inv))
    return v, a, lam, reduce(J, lam), cond
