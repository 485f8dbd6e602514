"""Damped Newton–Raphson on the position constraints, batched over configurations, with the
solver settings and the rank analysis of the constraint Jacobian (shared by the assembly and the
kinematic sweeps)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from ..physics.system import System
from . import linsolve
from .linsolve import newton_step, sparse_min_norm
from .sparse_rank import pivot_columns

F = NDArray[Any]


@dataclass(frozen=True)
class KinematicsOptions:
    """Settings of the position solver and the sweep.

    tol: converged when max|C| <= tol·max(1, length scale) [m or rad]. max_iter: Newton
    iterations per point. chunk / max_chunk: first and largest number of time points solved
    together. branch_jump: largest accepted distance of a solution from its predictor, in
    coordinates scaled by the mechanism's length scale (angles in rad). cond_warn: Jacobian
    condition number above which a configuration is reported as near-singular. rank_tol:
    singular values below rank_tol·σ_max count as zero. coarse: stride of the coarse level of
    long sweeps.
    """

    tol: float = 1e-12
    max_iter: int = 30
    chunk: int = 32
    max_chunk: int = 512
    branch_jump: float = 0.1
    cond_warn: float = 1e8
    rank_tol: float = 1e-9
    coarse: int = 8


@dataclass
class RankInfo:
    rank: int
    dof: int
    redundant_rows: list[int]
    singular_values: F  # all of them (dense), or (largest, smallest) from the sparse path
    sparse: bool = False

    @property
    def condition(self) -> float:
        """Largest over smallest non-zero singular value of Cq (0 without constraints)."""
        if not self.rank:
            return 0.0
        s = self.singular_values
        return float(s[0] / (s[-1] if self.sparse else s[self.rank - 1]))


_MAX_SPARSE_REDUNDANT = 50  # dependent rows up to which their singular values are found by Lanczos


def length_scale(system: System) -> float:
    m = system.mechanism
    pts = [abs(c) for j in m.joints for p in j.points for c in p]
    pts += [abs(c) for b in m.bodies for c in b.position]
    return max([1e-3, *pts])


def coordinate_scale(system: System) -> F:
    """Per-coordinate scale: 1/L for body positions, 1 for angles and extra coordinates."""
    L = length_scale(system)
    scale = np.ones(system.n_coord)
    scale[: 3 * system.n_body] = np.tile([1.0 / L, 1.0 / L, 1.0], system.n_body)
    return scale


def rank_info(system: System, q: F, t: float, rank_tol: float = 1e-9) -> RankInfo:
    """Rank of Cq by SVD; redundant rows by QR with column pivoting on Cqᵀ. From ``SPARSE_MIN``
    coordinates on (no shipped mechanism is that large) Lanczos (shift-invert) on Cq·Cqᵀ gives the
    largest and the smallest singular value: within 1e8 of each other (far above ``rank_tol``),
    Cq has full row rank. Otherwise one sparse elimination of Cqᵀ with its columns in row order
    (:func:`pivot_columns`) picks the independent rows and calls the others, later rows dependent
    on earlier ones, redundant, and Lanczos confirms that rank: as many singular values as
    dependent rows at round-off (below 1e-7·σ_max, the resolution of Cq·Cqᵀ) and the next within
    1e8 of σ_max. Otherwise, or with more than ``_MAX_SPARSE_REDUNDANT`` dependent rows, the
    dense factorisations decide."""
    if system.n_coord >= linsolve.SPARSE_MIN and system.n_constraints > 0:
        info = _sparse_rank_info(system, q, t, rank_tol)
        if info is not None:
            return info
    Cq = system.jacobian(q, t)
    m, n = Cq.shape
    if m == 0:
        return RankInfo(0, n, [], np.zeros(0))
    s = np.linalg.svd(Cq, compute_uv=False)
    rank = int((s > rank_tol * max(s[0], 1e-300)).sum())
    _, _, piv = scipy.linalg.qr(Cq.T, pivoting=True, mode="economic")
    return RankInfo(rank, n - rank, sorted(int(p) for p in piv[rank:]), s)


def _sparse_rank_info(system: System, q: F, t: float, rank_tol: float) -> RankInfo | None:
    J = sp.csr_array(system.evaluate_sparse(q, t)[1])
    m, n = J.shape
    if m < 2:  # Lanczos needs two rows at least
        return None
    K = sp.csc_array(J @ J.T)
    try:
        big = float(spla.eigsh(K, k=1, which="LA", return_eigenvectors=False)[0])
        shift = -1e-10 * big  # below every eigenvalue, above K's round-off: K − shift·I is definite
        small = float(spla.eigsh(K, k=1, sigma=shift, which="LM", return_eigenvectors=False)[0])
        if m <= n and big > 0.0 and big < 1e16 * small:  # full row rank: no elimination needed
            return RankInfo(m, n - m, [], np.sqrt(np.array([big, small])), sparse=True)
        independent = pivot_columns(J.T, range(m), rank_tol)
        rank = len(independent)
        if not 0 < m - rank <= _MAX_SPARSE_REDUNDANT or m - rank + 1 >= m:
            return None
        low = np.sort(spla.eigsh(K, k=m - rank + 1, sigma=shift, which="LM", return_eigenvectors=False))
    except (RuntimeError, ValueError, spla.ArpackError):
        return None
    small = float(low[m - rank])
    if not (big > 0.0 and big < 1e16 * small and (low[: m - rank] < 1e-14 * big).all()):
        return None
    independent_rows = set(independent)
    redundant = [r for r in range(m) if r not in independent_rows]
    return RankInfo(rank, n - rank, redundant, np.sqrt(np.array([big, small])), sparse=True)


def redundant_rows(system: System, q: F, t: float, rank_tol: float = 1e-9) -> list[int]:
    """The redundant rows of :func:`rank_info`, without its dense factorisations when one sparse
    elimination of Cq already finds its rank equal to its rows (a chain, a tree, most mechanisms)."""
    Cq = system.evaluate_sparse(q, t)[1]
    if Cq.shape[0] and len(pivot_columns(Cq, range(Cq.shape[1]), rank_tol)) == Cq.shape[0]:
        return []
    return rank_info(system, q, t, rank_tol).redundant_rows


def solve_positions(system: System, q_guess: F, t: F, opts: KinematicsOptions,
                    square: bool, free: NDArray[np.intp] | None = None) -> tuple[F, F, int, F, F]:
    """Damped Newton on a batch: q (B, n), max|C| per point (B,), iterations used, and Cq, Ct at
    the returned q. With ``free`` only those coordinates move (the others are held)."""
    q = np.array(q_guess, dtype=float)
    tol = opts.tol * max(1.0, length_scale(system))
    C, Cq, Ct = system.evaluate_batch(q, t)
    assert Cq is not None
    res = np.abs(C).max(axis=1) if C.shape[1] else np.zeros(len(q))
    it = 0
    while it < opts.max_iter and (res > tol).any():
        it += 1
        act = np.flatnonzero(res > tol)
        whole = len(act) == len(q)  # every point: no copy of the (B, m, n) Jacobians
        Cq_act = Cq if whole else Cq[act]
        if free is None:
            dq = newton_step(Cq_act, C[act], square)
        else:
            dq = np.zeros((len(act), q.shape[1]))
            dq[:, free] = newton_step(Cq_act[:, :, free], C[act], square)
        qa, ta, ra = q[act], t[act], res[act]
        alpha = np.ones(len(qa))
        for _ in range(12):  # backtracking: accept where the residual decreased
            trial = qa + alpha[:, None] * dq
            Ca, Cqa, Cta = system.evaluate_batch(trial, ta)
            rt = np.abs(Ca).max(axis=1)
            ok = (rt < ra) | (rt <= tol)
            if ok.all():
                break
            alpha = np.where(ok, alpha, 0.5 * alpha)
        q[act], C[act], res[act], Ct[act] = trial, Ca, rt, Cta
        assert Cqa is not None
        if whole:
            Cq = Cqa
        else:
            Cq[act] = Cqa
    return q, res, it, Cq, Ct


def solve_positions_sparse(system: System, q_guess: F, t: float, opts: KinematicsOptions,
                           free: NDArray[np.intp] | None = None) -> tuple[F, float, int]:
    """:func:`solve_positions` at one point of an underdetermined system with sparse Jacobians
    (``System.evaluate_sparse``) and minimum-norm steps by :func:`sparse_min_norm` (the
    pseudo-inverse where it declines): q, max|C| and the iterations used."""
    q = np.array(q_guess, dtype=float)
    tol = opts.tol * max(1.0, length_scale(system))
    C, J = system.evaluate_sparse(q, t)
    res, it = float(np.abs(C).max(initial=0.0)), 0
    while it < opts.max_iter and res > tol:
        it += 1
        A = J if free is None else J[:, free]
        step = sparse_min_norm(A, -C)
        if step is None:
            step = -np.linalg.pinv(A.toarray(), rcond=1e-10) @ C
        dq = step if free is None else np.zeros_like(q)
        if free is not None:
            dq[free] = step
        alpha = 1.0
        for _ in range(12):  # backtracking: accept where the residual decreased
            trial = q + alpha * dq
            Ct = system.constraints(trial, t)
            rt = float(np.abs(Ct).max(initial=0.0))
            if rt < res or rt <= tol:
                break
            alpha *= 0.5
        q, res = trial, rt
        C, J = system.evaluate_sparse(q, t)
    return q, res, it



def solve_positions_lu(system: System, q_guess: F, t: float, opts: KinematicsOptions,
                       free: NDArray[np.intp] | None = None) -> tuple[F, float, int] | None:
    """Damped Newton at one point of a square system (as many rows as moving coordinates) with
    sparse LU steps (``splu``): q, max|C| and the iterations used; None when a Jacobian is exactly
    singular (the caller takes the dense path). :func:`solve_positions`' square steps without
    the dense (m, n) Jacobian."""
    q = np.array(q_guess, dtype=float)
    tol = opts.tol * max(1.0, length_scale(system))
    C, J = system.evaluate_sparse(q, t)
    res, it = float(np.abs(C).max(initial=0.0)), 0
    while it < opts.max_iter and res > tol:
        it += 1
        try:
            step = spla.splu(sp.csc_array(J if free is None else sp.csr_array(J)[:, free])).solve(-C)
        except RuntimeError:  # exactly singular
            return None
        dq = step if free is None else np.zeros_like(q)
        if free is not None:
            dq[free] = step
        alpha, trial, rt = 1.0, q, res
        for _ in range(12):  # backtracking: accept where the residual decreased
            trial = q + alpha * dq
            rt = float(np.abs(system.constraints(trial, t)).max(initial=0.0))
            if rt < res or rt <= tol:
                break
            alpha *= 0.5
        q, res = trial, rt
        C, J = system.evaluate_sparse(q, t)
    return q, res, it
