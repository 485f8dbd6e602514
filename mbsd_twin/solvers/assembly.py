"""Position assembly: the configuration nearest the guess that satisfies C(q, t) = 0, with pinned
coordinates held, and the diagnosis of a failure.

The first assembly from the mechanism's own guess (``q_guess=None``) holds the coordinates the
bodies ``pin`` and fixes the System's reference pose (``System.set_reference_pose``: the default
spring free lengths and angles). When Newton stops short, the residual left is split into the part
some motion of the free coordinates could still reduce (its projection on the range of the
Jacobian) and the part none can (the rest): mostly irreducible means the constraints conflict
(inconsistent or overconstrained near the pose found; the rows carrying it are named), otherwise
the guess was too far for the iterations allowed (the closest pose and the worst row are shown).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.optimize
from numpy.typing import NDArray

from ..errors import AssemblyError
from ..physics.system import System
from . import linsolve
from .newton import KinematicsOptions, length_scale, solve_positions, solve_positions_lu, solve_positions_sparse

F = NDArray[Any]
Idx = NDArray[np.intp]
IRREDUCIBLE = 0.5  # share of the residual norm no motion can reduce from which the rows conflict
CONFLICT_SHARE = 0.05  # rows carrying at least this share of the largest irreducible residual
CANNOT = "the mechanism cannot be assembled"


def assemble(system: System, q_guess: F | None = None, t: float = 0.0,
             opts: KinematicsOptions | None = None) -> F:
    """The configuration nearest the guess (minimum-norm Newton) that satisfies C(q, t) = 0.

    Without ``q_guess`` the bodies' initial poses are the guess, their pinned coordinates are held
    and, the first time, the result becomes the System's reference pose."""
    opts = opts or KinematicsOptions()
    initial = q_guess is None
    guess = system.q0 if initial else np.asarray(q_guess, float)
    free = free_coordinates(system) if initial and system.pinned.size else None
    q, res, it = _newton(system, guess, t, opts, free)
    if res > opts.tol * max(1.0, length_scale(system)):
        raise assembly_failure(system, q, t, it, opts, free)
    if initial and system.reference_pose is None:
        system.set_reference_pose(q)
    return q


def free_coordinates(system: System) -> Idx:
    """The coordinates the initial assembly moves: all but the pinned ones."""
    return np.setdiff1d(np.arange(system.n_coord), system.pinned).astype(np.intp)


def _newton(system: System, guess: F, t: float, opts: KinematicsOptions, free: Idx | None) -> tuple[F, float, int]:
    cols = np.arange(system.n_coord) if free is None else free
    if system.n_constraints < len(cols) >= linsolve.SPARSE_MIN:  # large and underdetermined: sparse
        return solve_positions_sparse(system, guess, t, opts, free)
    if system.n_constraints == len(cols) >= linsolve.SPARSE_MIN:  # large and square: sparse LU
        out = solve_positions_lu(system, guess, t, opts, free)
        if out is not None:
            return out
    A = system.jacobian(guess, t)[:, cols]
    square = A.shape[0] == A.shape[1] and np.linalg.matrix_rank(A) == A.shape[1]
    q, res, it, _, _ = solve_positions(system, guess[None, :], np.array([t]), opts, square, free)
    return q[0], float(res[0]), it


def least_squares_pose(system: System, q: F, t: float, free: Idx | None = None) -> F:
    """The pose nearest q that minimises |C(q, t)|² over the free coordinates (trust-region least
    squares from q): the closest a pose can come when the constraints conflict."""
    cols = np.arange(system.n_coord) if free is None else free
    x = q.copy()

    def residual(z: F) -> F:
        x[cols] = z
        return system.constraints(x, t)

    def jacobian(z: F) -> F:
        x[cols] = z
        return system.jacobian(x, t)[:, cols]

    out = q.copy()
    if not np.isfinite(q).all() or not np.isfinite(system.constraints(q, t)).all():
        return out
    try:
        sol = scipy.optimize.least_squares(residual, q[cols], jac=jacobian, method="trf", xtol=1e-15,
                                           ftol=1e-15, gtol=1e-15, max_nfev=200)
    except (ValueError, np.linalg.LinAlgError):  # non-finite values on the way: keep Newton's pose
        return out
    if np.linalg.norm(sol.fun) < np.linalg.norm(system.constraints(q, t)):
        out[cols] = sol.x
    return out


def irreducible_residual(system: System, q: F, t: float, free: Idx | None = None) -> tuple[F, F]:
    """C at q and its part r = C − A·A⁺·C that no motion of the free coordinates reduces to first
    order (A = Cq on those columns): r ≈ C at a least-squares pose of conflicting constraints."""
    C = system.constraints(q, t)
    A = system.jacobian(q, t)
    if free is not None:
        A = A[:, free]
    return C, C - A @ (np.linalg.pinv(A, rcond=1e-9) @ C)


def _owners(system: System, rows: Any) -> list[str]:
    return list(dict.fromkeys(system.constraint_owners[int(r)] for r in rows))


def _pinned_names(system: System) -> list[str]:
    return [system.coordinate_names[int(c)] for c in system.pinned]


def assembly_failure(system: System, q: F, t: float, iterations: int, opts: KinematicsOptions,
                     free: Idx | None) -> AssemblyError:
    """An :class:`AssemblyError` saying why: conflicting constraints (named), pinned coordinates
    that cannot be held (named), or a guess too far (the closest pose and the worst row)."""
    tol = opts.tol * max(1.0, length_scale(system))
    best = least_squares_pose(system, q, t, free)
    C, r = irreducible_residual(system, best, t, free)
    if np.abs(C).max(initial=0.0) > 1e3 * tol and np.linalg.norm(r) >= IRREDUCIBLE * np.linalg.norm(C):
        if free is not None:
            released, res, _ = _newton(system, best, t, opts, None)
            if res <= tol:
                return _pin_error(system, best, released, t, iterations)
        rows = np.flatnonzero(np.abs(r) >= CONFLICT_SHARE * np.abs(r).max())
        names = _owners(system, rows)
        what = (f"{CANNOT}: the constraints are inconsistent (overconstrained) near the guess: "
                f"{', '.join(names)} conflict — no motion reduces their residual further (closest pose: "
                f"{pose_text(system, best)})")
        return located_error(system, best, t, iterations, what, cause="inconsistent", conflicting=names)
    what = (f"{CANNOT}: the initial guess is too far from an assembled pose: Newton stopped at "
            f"{pose_text(system, q)}; a least-squares descent from there reaches max |C| = "
            f"{np.abs(C).max(initial=0.0):.3g} at {pose_text(system, best)} (give positions and angles "
            f"closer to an assembly)")
    return located_error(system, q, t, iterations, what, cause="too_far")


def _pin_error(system: System, q: F, released: F, t: float, iterations: int) -> AssemblyError:
    names = _pinned_names(system)
    moved = [f"{n} = {released[c]:.6g} {coordinate_unit(n)} (pinned at {q[c]:.6g})"
             for n, c in zip(names, system.pinned, strict=True) if abs(released[c] - q[c]) > 1e-9]
    what = (f"{CANNOT}: the constraints cannot be met with the pinned coordinate(s) {', '.join(names)} "
            f"held at their given values; released, the mechanism assembles with "
            f"{'; '.join(moved) or 'the same values'}")
    return located_error(system, q, t, iterations, what, cause="pinned", conflicting=names)


def located_error(system: System, q: F, t: float, iterations: int, what: str, **kw: Any) -> AssemblyError:
    """An AssemblyError at q with the three worst constraints by largest |C| of their rows."""
    C = np.abs(system.constraints(q, t))
    worst: dict[str, float] = {}
    for name, r in zip(system.constraint_names, C, strict=True):
        worst[name] = max(worst.get(name, 0.0), float(r))
    top = sorted(worst.items(), key=lambda kv: -kv[1])[:3]
    return AssemblyError(f"{system.mechanism.source}: {what}", residual=float(C.max(initial=0.0)),
                         iterations=iterations, time=t, worst=top, **kw)


def coordinate_unit(name: str) -> str:
    return "rad" if name.endswith(".theta") else "m" if name.endswith((".x", ".y")) else ""


def pose_rows(system: System, q: F) -> list[tuple[str, float, float, float]]:
    """(body, x [m], y [m], θ [rad]) of every body at q."""
    return [(b, float(q[3 * k]), float(q[3 * k + 1]), float(q[3 * k + 2])) for k, b in enumerate(system.body_names)]


def pose_text(system: System, q: F) -> str:
    return "; ".join(f"{b} x={x:.6g} m, y={y:.6g} m, theta={th:.6g} rad" for b, x, y, th in pose_rows(system, q))
