"""Structural check, kinematic sweep and inverse dynamics of a mechanism."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import DOFError, MechanismError, Problem
from ..model.model import Mechanism
from ..model.plausibility import numerical
from ..physics.outputs import (
    kinematic_columns,
    kinematic_specs,
    reaction_columns,
    reaction_columns_from,
    reaction_specs,
)
from ..physics.system import System, compile_mechanism
from .assembly import pose_rows
from .kinematics import KinematicsOptions, Sweep, _singularity_warnings, assemble, rank_info, sweep
from .results import TIME_SPEC, Result
from .sparse_sweep import SparseSweep, sparse_sweep
from .sparse_sweep import applies as sparse_applies

F = NDArray[Any]


class RedundancyWarning(UserWarning):
    """The mechanism has redundant constraints: the split of reactions between them is not unique."""


@dataclass
class CheckReport:
    """What ``mbsd-twin check`` prints: sizes, rank, DOF, redundancy and the assembled pose."""

    name: str
    n_bodies: int
    n_coord: int
    n_constraints: int
    rank: int
    dof: int
    redundant: int
    redundant_constraints: list[str]
    assembly_residual: float
    condition_number: float
    q: F
    warnings: list[str] = field(default_factory=list)
    pose: list[tuple[str, float, float, float]] = field(default_factory=list)  # body, x [m], y [m], θ [rad]
    pinned: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"mechanism      {self.name}",
                 f"bodies         {self.n_bodies} (+ ground)",
                 f"coordinates    {self.n_coord}" + (f" (pinned in the assembly: {', '.join(self.pinned)})"
                                                     if self.pinned else ""),
                 f"constraints    {self.n_constraints} (rank {self.rank})",
                 f"DOF            {self.dof} (coordinates − rank of the constraint Jacobian)",
                 f"redundant      {self.redundant}" + (f" ({', '.join(self.redundant_constraints)})"
                                                       if self.redundant else ""),
                 f"assembly       max |C| = {self.assembly_residual:.3e}",
                 f"condition      {self.condition_number:.3e}"]
        if self.pose:
            lines.append(f"pose           {'body':<14} {'x [m]':>13} {'y [m]':>13} {'theta [rad]':>13}")
            lines += [f"               {b:<14} {_tidy(x):13.6g} {_tidy(y):13.6g} {_tidy(th):13.6g}"
                      for b, x, y, th in self.pose]
        lines += [f"warning        {w}" for w in self.warnings]
        return "\n".join(lines)


def _tidy(x: float) -> float:
    """Round-off (|x| < 1e-12) shown as 0 in the printed pose."""
    return 0.0 if abs(x) < 1e-12 else x


def _as_system(mech: Mechanism | System) -> System:
    return mech if isinstance(mech, System) else compile_mechanism(mech)


def redundancy_message(system: System, names: list[str]) -> str:
    return (f"{len(names)} redundant constraint equation(s) ({', '.join(names)}): the mechanism "
            "still solves (positions and velocities in least squares, multipliers as the "
            "minimum-norm solution) but the split of reactions between redundant joints is not unique")


def check(mech: Mechanism | System, t: float = 0.0, opts: KinematicsOptions | None = None) -> CheckReport:
    """Assemble at time ``t`` and report DOF = n_coord − rank(Cq) and redundant constraints.

    Raises :class:`AssemblyError` when the mechanism does not assemble."""
    system = _as_system(mech)
    opts = opts or KinematicsOptions()
    with numerical(system.mechanism, "the assembly"):
        q = assemble(system, None, t, opts)
        info = rank_info(system, q, t, opts.rank_tol)
    names = [system.constraint_names[r] for r in info.redundant_rows]
    warns = [redundancy_message(system, names)] if names else []
    cond = info.condition
    if cond > opts.cond_warn:
        warns.append(f"near-singular configuration at t={t:g} s: condition number {cond:.3g}")
    res = float(np.abs(system.constraints(q, t)).max(initial=0.0))
    return CheckReport(system.mechanism.name, system.n_body, system.n_coord, system.n_constraints,
                       info.rank, info.dof, len(names), names, res, cond, q, warns, pose_rows(system, q),
                       [system.coordinate_names[int(c)] for c in system.pinned])


def _require_dof0(system: System, what: str, opts: KinematicsOptions) -> list[str]:
    mech = system.mechanism
    velocity_level = [Problem(f"joints[{k}] ({j.name}).type",
                              f"{what} needs position-level (holonomic) constraints; a knife_edge joint "
                              "constrains velocities only: use forward dynamics (simulate / Simulator)")
                      for k, j in enumerate(mech.joints) if j.type == "knife_edge"]
    if velocity_level:
        raise MechanismError(velocity_level, source=mech.source)
    with numerical(mech, "the assembly"):
        q = assemble(system, None, 0.0, opts)
        info = rank_info(system, q, 0.0, opts.rank_tol)
    if info.dof != 0:
        raise DOFError(f"{system.mechanism.source}: {what} needs a mechanism with 0 degrees of freedom "
                       f"(drivers prescribing every free motion); this one has DOF = {info.dof} "
                       f"({system.n_coord} coordinates, constraint rank {info.rank})",
                       dof=info.dof, required=0)
    if info.redundant_rows:
        msg = redundancy_message(system, [system.constraint_names[r] for r in info.redundant_rows])
        warnings.warn(msg, RedundancyWarning, stacklevel=3)
        return [msg]
    return []


ProgressFn = Callable[[float], None]
BLOCK = 20_000


def _blocked_sweep(system: System, t: F, opts: KinematicsOptions, progress: ProgressFn | None) -> Sweep:
    """Sweep in blocks of ``BLOCK`` points; each block restarts from the last configuration of the
    block before (that point is solved again and dropped), and reports the fraction done."""
    t = np.asarray(t, float)
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"times must be a non-empty 1-D array, got shape {t.shape}")
    parts: list[Sweep] = []
    q_guess = None
    for start in range(0, len(t), BLOCK):
        lo = max(start - 1, 0)
        part = sweep(system, t[lo:start + BLOCK], q_guess, opts)
        parts.append(part if start == 0 else
                     Sweep(*(getattr(part, k)[1:] for k in _SWEEP_ARRAYS), warnings=part.warnings))  # type: ignore[misc]
        q_guess = part.q[-1]
        if progress is not None:
            progress(min(1.0, (start + BLOCK) / len(t)))
    if len(parts) == 1:
        return parts[0]
    return Sweep(*(np.concatenate([getattr(p, k) for p in parts]) for k in _SWEEP_ARRAYS),  # type: ignore[misc, arg-type]
                 warnings=[w for p in parts for w in p.warnings])


_SWEEP_ARRAYS = ("t", "q", "v", "a", "jinv", "cond", "Cq")


def _sparse_as_sweep(system: System, t: F, opts: KinematicsOptions, progress: ProgressFn | None,
                     out: list[SparseSweep] | None = None) -> Sweep:
    """The sparse sweep's q, v, a and conditions as a :class:`Sweep` (no inverse Jacobians, no Cq);
    the sparse sweep itself appended to ``out``."""
    ss = sparse_sweep(system, t, opts, progress=progress)
    sw = Sweep(ss.t, ss.q, ss.v, ss.a, np.empty(0), ss.cond, np.empty(0), ss.warnings)
    _singularity_warnings(sw, opts.cond_warn)
    if out is not None:
        out.append(ss)
    return sw


def kinematics(mech: Mechanism | System, t: F, opts: KinematicsOptions | None = None,
               progress: ProgressFn | None = None) -> Result:
    """Positions, velocities and accelerations of a DOF-0 mechanism at the times ``t`` [s]."""
    system = _as_system(mech)
    opts = opts or KinematicsOptions()
    warns = _require_dof0(system, "kinematic analysis", opts)
    sw = _sparse_as_sweep(system, t, opts, progress) if sparse_applies(system) else \
        _blocked_sweep(system, t, opts, progress)
    cols = {"time": sw.t, **kinematic_columns(system, sw.q, sw.v, sw.a)}
    specs = [TIME_SPEC, *kinematic_specs(system)]
    return Result(specs, np.column_stack([cols[s.name] for s in specs]), "kinematics",
                  system.mechanism.source, warns + sw.warnings)


def multipliers(system: System, t: F, q: F, v: F, a: F, jinv: F,
                inputs: dict[str, float] | None = None) -> F:
    """λ (B, m) from Cqᵀ·λ = Q − M·a, with ``jinv`` (B, n, m) the (pseudo-)inverse Jacobians of the
    sweep (minimum-norm λ with redundant constraints)."""
    rhs = system.forces_batch(q, v, t, inputs) - np.einsum("bij,bj->bi", system.mass_matrix_batch(q), a)
    return np.einsum("bji,bj->bi", jinv, rhs)


def inverse_dynamics(mech: Mechanism | System, t: F, opts: KinematicsOptions | None = None,
                     progress: ProgressFn | None = None) -> Result:
    """Kinematics plus joint reactions and driver efforts from M·a + Cqᵀ·λ = Q at the times ``t``.

    With redundant constraints the multipliers are the minimum-norm solution (a warning says the
    split between redundant joints is not unique); driver efforts stay unique."""
    system = _as_system(mech)
    opts = opts or KinematicsOptions()
    warns = _require_dof0(system, "inverse dynamics", opts)
    if sparse_applies(system):  # large: one sparse LU per point (sparse_sweep.py)
        out: list[SparseSweep] = []
        sw = _sparse_as_sweep(system, t, opts, progress, out)
        ss = out[0]
        reactions = reaction_columns_from(system, ss.q, list(ss.g.transpose(1, 0, 2)), ss.lam)
    else:
        sw = _blocked_sweep(system, t, opts, progress)
        lam = multipliers(system, sw.t, sw.q, sw.v, sw.a, sw.jinv)
        reactions = reaction_columns(system, sw.q, sw.Cq, lam)
    cols = {"time": sw.t, **kinematic_columns(system, sw.q, sw.v, sw.a), **reactions}
    specs = [TIME_SPEC, *kinematic_specs(system), *reaction_specs(system)]
    return Result(specs, np.column_stack([cols[s.name] for s in specs]), "inverse dynamics",
                  system.mechanism.source, warns + sw.warnings)
