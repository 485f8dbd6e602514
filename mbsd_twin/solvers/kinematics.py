"""Kinematic analysis: assembly (position), velocity and acceleration; rank and DOF.

Position analysis is a damped Newton–Raphson (backtracking on the residual norm, ``newton.py``),
batched over many time points; the initial assembly is ``assembly.py``. A sweep over an array of
times is solved in chunks: each chunk starts from a second-order Taylor predictor of the last
solved point, so the solution follows the assembly branch of the initial guess; a chunk whose
solutions stray from the predictor by more than ``branch_jump`` (scaled coordinates) is split,
and a single point that still strays is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import AssemblyError
from ..physics.system import System
from .assembly import assemble, located_error
from .linsolve import JacobianSolver
from .newton import KinematicsOptions, RankInfo, coordinate_scale, length_scale, rank_info, solve_positions

__all__ = ["KinematicsOptions", "RankInfo", "Sweep", "assemble", "length_scale", "rank_info", "solve_positions",
           "sweep", "velocity_acceleration"]

F = NDArray[Any]


@dataclass
class Sweep:
    """q, v, a (N, n) at times t (N,); ``jinv`` (N, n, m) the (pseudo-)inverse Jacobian of every
    point (for the multiplier solve), ``cond`` its condition number, ``Cq`` (N, m, n) the
    Jacobians; warnings."""

    t: F
    q: F
    v: F
    a: F
    jinv: F
    cond: F
    Cq: F
    warnings: list[str] = field(default_factory=list)


def velocity_acceleration(system: System, q: F, t: F, Cq: F | None = None, Ct: F | None = None,
                          need_inverse: bool = True) -> tuple[F, F, JacobianSolver | None]:
    """v = Cq⁺·(−Ct), a = Cq⁺·γ for a DOF-0 batch (Cq, Ct evaluated here if not given). Without
    ``need_inverse`` a square system is solved by LU and no solver object is returned."""
    if Cq is None or Ct is None:
        _, Cq, Ct = system.evaluate_batch(q, t)
        assert Cq is not None
    if not need_inverse and Cq.shape[1] == Cq.shape[2]:
        v = np.linalg.solve(Cq, -Ct[..., None])[..., 0]
        a = np.linalg.solve(Cq, system.gamma_batch(q, v, t)[..., None])[..., 0]
        return v, a, None
    solver = JacobianSolver(Cq)
    v = solver.solve(-Ct)
    a = solver.solve(system.gamma_batch(q, v, t))
    return v, a, solver


def sweep(system: System, t: F, q_guess: F | None = None,
          opts: KinematicsOptions | None = None) -> Sweep:
    """Positions, velocities and accelerations of a DOF-0 mechanism at every time in ``t``.

    Long sweeps are solved on two levels: every ``coarse``-th point by the chunked continuation,
    then all points at once from a quintic Hermite predictor through the coarse solutions (q, v, a
    at both ends of each interval), which Newton corrects in one or two iterations. If any point
    strays from its predictor, the whole sweep falls back to the chunked continuation."""
    opts = opts or KinematicsOptions()
    t = np.asarray(t, dtype=float)
    if t.ndim != 1 or len(t) == 0 or not np.isfinite(t).all() or (np.diff(t) <= 0).any():
        raise ValueError("times must be a non-empty 1-D array of finite, strictly increasing values")
    q0 = assemble(system, q_guess, float(t[0]), opts)
    coarse = np.unique(np.r_[np.arange(0, len(t), opts.coarse), len(t) - 1])
    if len(coarse) == len(t):
        return _finish(_chunked(system, t, q0, opts), opts)
    try:
        cs = _chunked(system, t[coarse], q0, opts, keep=False)
    except AssemblyError:  # coarse steps too long to follow: continue point by point instead
        return _finish(_chunked(system, t, q0, opts), opts)
    pred = _hermite(t, t[coarse], cs.q, cs.v, cs.a)
    square = system.n_constraints == system.n_coord
    q, res, _, Cq, Ct = solve_positions(system, pred, t, opts, square)
    tol = opts.tol * max(1.0, length_scale(system))
    if (res > tol).any() or (np.abs((q - pred) * coordinate_scale(system)).max(axis=1) > opts.branch_jump).any():
        return _finish(_chunked(system, t, q0, opts), opts)
    v, a, s = velocity_acceleration(system, q, t, Cq, Ct)
    assert s is not None
    return _finish(Sweep(t, q, v, a, s.inv, s.cond, Cq), opts)


def _hermite(t: F, tc: F, qc: F, vc: F, ac: F) -> F:
    """Quintic Hermite interpolation of q through (q, v, a) given at the coarse times ``tc``."""
    k = np.clip(np.searchsorted(tc, t, side="right") - 1, 0, len(tc) - 2)
    h = (tc[k + 1] - tc[k])[:, None]
    x = ((t - tc[k]) / h[:, 0])[:, None]
    x2, x3 = x * x, x * x * x
    x4, x5 = x3 * x, x3 * x2
    h00 = 1 - 10 * x3 + 15 * x4 - 6 * x5
    h10 = x - 6 * x3 + 8 * x4 - 3 * x5
    h20 = 0.5 * (x2 - 3 * x3 + 3 * x4 - x5)
    h01 = 10 * x3 - 15 * x4 + 6 * x5
    h11 = -4 * x3 + 7 * x4 - 3 * x5
    h21 = 0.5 * (x3 - 2 * x4 + x5)
    return (h00 * qc[k] + h10 * h * vc[k] + h20 * h * h * ac[k]
            + h01 * qc[k + 1] + h11 * h * vc[k + 1] + h21 * h * h * ac[k + 1])


def _chunked(system: System, t: F, q0: F, opts: KinematicsOptions, keep: bool = True) -> Sweep:
    """Continuation in chunks from the assembled ``q0`` at ``t[0]`` (see the module docstring).
    Without ``keep`` only q, v, a are filled (no inverse Jacobians, Jacobians or conditions)."""
    N, n = len(t), system.n_coord
    square = system.n_constraints == n
    Q, V, A, cond = np.empty((N, n)), np.empty((N, n)), np.empty((N, n)), np.empty(N)
    m = system.n_constraints
    jinv, Jq = (np.empty((N, n, m)), np.empty((N, m, n))) if keep else (np.empty((0, n, m)), np.empty((0, m, n)))
    Q[0] = q0
    _, Cq0, Ct0 = system.evaluate_batch(q0[None, :], t[:1])
    assert Cq0 is not None
    V[:1], A[:1], s0 = velocity_acceleration(system, q0[None, :], t[:1], Cq0, Ct0, keep)
    if keep and s0 is not None:
        cond[0], jinv[0], Jq[0] = s0.cond[0], s0.inv[0], Cq0[0]
    scale = coordinate_scale(system)
    tol = opts.tol * max(1.0, length_scale(system))
    i, chunk = 1, opts.chunk
    while i < N:
        j = min(N, i + chunk)
        dt = (t[i:j] - t[i - 1])[:, None]
        pred = Q[i - 1] + V[i - 1] * dt + 0.5 * A[i - 1] * dt**2
        q, res, it, Cq, Ct = solve_positions(system, pred, t[i:j], opts, square)
        bad = (res > tol) | (np.abs((q - pred) * scale).max(axis=1) > opts.branch_jump)
        if bad.any():
            if chunk > 1:
                chunk = max(1, chunk // 4)
                continue
            what = ("no solution near the previous configuration (a lock-up, or the end of the "
                    "mechanism's range of motion)") if res[0] > tol else \
                "the solution jumped away from the assembly branch (a singular configuration)"
            raise located_error(system, q[0], float(t[i]), it, what)
        Q[i:j] = q
        V[i:j], A[i:j], s = velocity_acceleration(system, q, t[i:j], Cq, Ct, keep)
        if keep and s is not None:
            cond[i:j], jinv[i:j], Jq[i:j] = s.cond, s.inv, Cq
        i, chunk = j, min(2 * chunk, opts.max_chunk)
    return Sweep(t, Q, V, A, jinv, cond, Jq)


def _finish(sw: Sweep, opts: KinematicsOptions) -> Sweep:
    _singularity_warnings(sw, opts.cond_warn)
    return sw


def _singularity_warnings(sw: Sweep, limit: float) -> None:
    hot = np.flatnonzero(sw.cond > limit)
    if hot.size:
        k = int(hot[np.argmax(sw.cond[hot])])
        sw.warnings.append(
            f"near-singular configuration (toggle position): Jacobian condition number "
            f"{sw.cond[k]:.3g} at t={sw.t[k]:.6g} s ({hot.size} of {len(sw.t)} points above {limit:.0e})")
