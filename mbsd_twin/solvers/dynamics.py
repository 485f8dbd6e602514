"""Forward dynamics: the index-1 saddle-point right-hand side, drift control and a persistent stepper.

State vector y = [q (n), v (n), E_diss, W_in, W_con]: coordinates, velocities, and three energy
integrals — energy dissipated by dampers and friction, work of external loads (inputs, forces,
torques, callables) and work of the constraint forces (the drivers; ideal joints do none).

At every evaluation [[M, Cqᵀ], [Cq, 0]]·[a; λ] = [Q; γ] is solved densely. M may be singular
(massless links) as long as it is positive definite on the null space of Cq. Redundant
constraint rows are dropped (found once at start by QR with column pivoting); their multipliers
are reported as zero.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.integrate as si
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import NDArray

from ..compiled.compiled_model import Unsupported
from ..compiled.fastpath import CompiledStepper
from ..errors import MbsdError, SolverFailure
from ..physics.load_base import LoadTotals
from ..physics.system import System
from .error_norm import ERROR_NORMS, EXPLICIT, controlled_integrals, explicit_method
from .initial_velocity import InitialVelocityReport, changes, inconsistent, violations
from .kinematics import KinematicsOptions, assemble
from .newton import redundant_rows

F = NDArray[Any]

IMPLICIT = {"Radau": si.Radau, "BDF": si.BDF, "LSODA": si.LSODA}
DRIFT = ("none", "baumgarte", "projection")


@dataclass(frozen=True)
class SolverOptions:
    """Forward-dynamics settings.

    method: a scipy ``solve_ivp`` method: DOP853 (default), RK45, RK23, Radau, BDF, LSODA.
    rtol, atol: integrator tolerances (atol in the coordinates' units, m or rad, m/s or rad/s;
    the same atol applies to the energy integrals, in J, when they are error-controlled).
    error_norm: "max" (default: every component's local error within its own tolerance) or "rms"
    (scipy's root mean square over the components); explicit Runge–Kutta methods only, Radau,
    BDF and LSODA keep scipy's norms. See ``error_norm.py``.
    energy_error_control: False (default) controls positions and velocities only, as CVODES does
    for quadratures; True also keeps the energy integrals (dissipated, input and constraint work)
    in the step-size control. The constraint work of a scleronomic mechanism is almost zero and its
    rate is the constraint drift of the trial stages, so True makes the steps smaller than the
    motion needs: on the slider crank at 2 N·m over 10 s, 8,194 instead of 2,506 steps, balance
    error 4e-11 instead of 5e-7 J of 708 J input work (see docs/simulator.md). A mechanism with
    penalty contact always has its dissipated energy controlled (``controlled_integrals``).
    max_step: largest internal step [s] (inf: no limit).
    drift: "projection" (default: after every step, positions by minimum-norm Newton and
    velocities by minimum-norm correction onto the constraints; explicit methods only),
    "baumgarte" (γ − 2α·Ċ − β²·C), or "none".
    baumgarte_alpha, baumgarte_beta [1/s]: Baumgarte parameters.
    projection_tol: position residual the projection drives max|C| below [m or rad].
    initial_velocity: "project" (default: v0 replaced by the nearest consistent velocity, least
    squares, when Cq·v0 + Ct ≠ 0 beyond velocity_tol; ``Simulator.initial_velocity_changes`` lists
    what changed) or "check" (``ConsistencyError`` naming the violated joints and drivers); see
    ``initial_velocity.py``.
    max_steps: most internal steps one ``advance_to`` may take before it fails (a runaway or
    very stiff motion fails with a message instead of hanging).
    backend: "auto" (default: the compiled numba path when the mechanism and options allow it —
    DOP853, no Python callable: a callable profile, load or curve — else numpy),
    "compiled" (error if not possible) or "numpy".
    """

    method: str = "DOP853"
    rtol: float = 1e-8
    atol: float = 1e-10
    error_norm: str = "max"
    energy_error_control: bool = False
    max_step: float = math.inf
    drift: str = "projection"
    baumgarte_alpha: float = 10.0
    baumgarte_beta: float = 10.0
    projection_tol: float = 1e-12
    initial_velocity: str = "project"
    velocity_tol: float = 1e-8
    backend: str = "auto"
    max_steps: int = 200_000

    def problems(self) -> list[str]:
        out = []
        if self.method not in EXPLICIT and self.method not in IMPLICIT:
            out.append(f"method must be one of {', '.join([*EXPLICIT, *IMPLICIT])}, got {self.method!r}")
        if self.error_norm not in ERROR_NORMS:
            out.append(f"error_norm must be one of {', '.join(ERROR_NORMS)}, got {self.error_norm!r}")
        if self.drift not in DRIFT:
            out.append(f"drift must be one of {', '.join(DRIFT)}, got {self.drift!r}")
        if self.drift == "projection" and self.method in IMPLICIT:
            out.append(f"drift='projection' needs an explicit method (DOP853, RK45, RK23); "
                       f"use drift='baumgarte' with {self.method}")
        if not (isinstance(self.max_steps, int) and self.max_steps > 0):
            out.append(f"max_steps must be a positive integer, got {self.max_steps!r}")
        for name in ("rtol", "atol", "max_step", "projection_tol", "velocity_tol"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and v > 0 and not math.isnan(v)):
                out.append(f"{name} must be a positive number, got {v!r}")
        if not isinstance(self.energy_error_control, bool):
            out.append(f"energy_error_control must be true or false, got {self.energy_error_control!r}")
        if self.backend not in ("auto", "compiled", "numpy"):
            out.append(f"backend must be 'auto', 'compiled' or 'numpy', got {self.backend!r}")
        if self.initial_velocity not in ("check", "project"):
            out.append(f"initial_velocity must be 'check' or 'project', got {self.initial_velocity!r}")
        return out


WALL_CLOCK = "wall-clock limit reached"
_DEADLINE: ContextVar[float] = ContextVar("mbsd_twin_deadline", default=math.inf)


@contextmanager
def wall_clock_limit(seconds: float | None) -> Iterator[None]:
    """Integrations inside the block raise :class:`SolverFailure` (message containing
    :data:`WALL_CLOCK`) once ``seconds`` of wall-clock time have passed (None: no limit). The
    numpy path checks at every right-hand-side evaluation; the compiled path, bounded by its step
    budget, only between calls."""
    token = _DEADLINE.set(math.inf if seconds is None else time.perf_counter() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


@dataclass
class Evaluation:
    """Everything known at one (t, y): accelerations, multipliers (all rows) and load totals."""

    a: F
    lam: F
    Cq: F
    loads: LoadTotals


SPARSE_FROM = 60  # coordinates; larger systems use a sparse LU of the saddle-point matrix


def _saddle_solve(M: F, A: F, rhs: F) -> F:
    """Solve [[M, Aᵀ], [A, 0]]·x = rhs, densely for small systems, by sparse LU for large ones
    (M is block diagonal and A has a few entries per row, so the sparse cost grows ~linearly)."""
    n, m = M.shape[0], A.shape[0]
    if n < SPARSE_FROM:
        K = np.zeros((n + m, n + m))
        K[:n, :n], K[:n, n:], K[n:, :n] = M, A.T, A
        return np.linalg.solve(K, rhs)
    Ms, As = sp.csr_array(M), sp.csr_array(A)
    K = sp.block_array([[Ms, As.T], [As, None]], format="csc")
    return np.asarray(spla.spsolve(K, rhs))


def energy_rates(ev: Evaluation, v: F) -> tuple[float, float, float]:
    """The rates [W] of the energy integrals at an evaluation with velocities v: dissipated power,
    power of the external loads and power of the constraint forces −λ·(Cq·v)."""
    return float(ev.loads.dissipation[0]), float(ev.loads.input[0]), float(-ev.lam @ (ev.Cq @ v))


class Dynamics:
    """The right-hand side of one compiled system under given options."""

    def __init__(self, system: System, opts: SolverOptions, t0: float = 0.0) -> None:
        """``t0``: the start time, where the initial assembly (pins, reference pose) happens."""
        self.system, self.opts = system, opts
        self.n = system.n_coord
        q0 = assemble(system, None, t0, KinematicsOptions())
        self._assembled = (t0, q0)  # initial_state(t0) starts from it (the same assembly)
        redundant = redundant_rows(system, q0, t0)
        self.rows = np.array(sorted(set(range(system.n_constraints)) - set(redundant)), dtype=np.intp)
        self.redundant = [system.constraint_names[r] for r in redundant]
        self.initial_report = InitialVelocityReport()  # set by initial_state

    def evaluate(self, t: float, q: F, v: F, inputs: dict[str, float]) -> Evaluation:
        s, n, rows = self.system, self.n, self.rows
        qb, vb, tb = q[None, :], v[None, :], np.array([t])
        C, Cq, Ct = s.evaluate_batch(qb, tb)
        assert Cq is not None
        totals = s.forces_and_power(qb, vb, tb, inputs)
        M = s.mass_matrix_batch(qb)[0]
        gamma = s.gamma_batch(qb, vb, tb)[0]
        if self.opts.drift == "baumgarte":
            al, be = self.opts.baumgarte_alpha, self.opts.baumgarte_beta
            gamma = gamma - 2.0 * al * (Cq[0] @ v + Ct[0]) - be**2 * C[0]
        A = Cq[0][rows]
        rhs = np.concatenate([totals.Q[0], gamma[rows]])
        sol = _saddle_solve(M, A, rhs)
        lam = np.zeros(s.n_constraints)
        lam[rows] = sol[n:]
        return Evaluation(sol[:n], lam, Cq[0], totals)

    def rhs(self, t: float, y: F, inputs: dict[str, float]) -> F:
        n = self.n
        q, v = y[:n], y[n:2 * n]
        ev = self.evaluate(t, q, v, inputs)
        dy = np.empty_like(y)
        dy[:n], dy[n:2 * n] = v, ev.a
        dy[2 * n:2 * n + 3] = energy_rates(ev, v)
        return dy

    def constrained_state(self, t: float, q: F, v: F, fixed_q: NDArray[np.intp], fixed_v: NDArray[np.intp],
                          tol: float = 1e-12) -> tuple[F, F, float]:
        """q, v nearest to the given ones that satisfy the position and velocity constraints with
        the coordinates ``fixed_q`` and velocities ``fixed_v`` held; returns the largest residual
        left (non-zero when the held values contradict the constraints)."""
        s, rows, n = self.system, self.rows, self.n
        free_q = np.setdiff1d(np.arange(n), fixed_q)
        free_v = np.setdiff1d(np.arange(n), fixed_v)
        q, v = q.copy(), v.copy()
        for _ in range(30):
            C, Cq, _ = s.evaluate_batch(q[None, :], np.array([t]))
            c = C[0][rows]
            if np.abs(c).max(initial=0.0) <= tol:
                break
            A = Cq[0][rows][:, free_q]  # type: ignore[index]
            q[free_q] -= np.linalg.lstsq(A, c, rcond=None)[0]
        C, Cq, Ct = s.evaluate_batch(q[None, :], np.array([t]))
        A = Cq[0][rows]  # type: ignore[index]
        r = A @ v + Ct[0][rows]
        v[free_v] -= np.linalg.lstsq(A[:, free_v], r, rcond=None)[0]
        left = max(float(np.abs(C[0][rows]).max(initial=0.0)),
                   float(np.abs(A @ v + Ct[0][rows]).max(initial=0.0)))
        return q, v, left

    def project(self, t: float, q: F, v: F) -> tuple[F, F]:
        """Minimum-norm projection of q onto C(q, t) = 0 and of v onto Cq·v + Ct = 0."""
        s, rows = self.system, self.rows
        tol = self.opts.projection_tol
        for _ in range(8):
            C, Cq, _ = s.evaluate_batch(q[None, :], np.array([t]))
            c = C[0][rows]
            if np.abs(c).max(initial=0.0) <= tol:
                break
            A = Cq[0][rows]  # type: ignore[index]
            q = q - A.T @ np.linalg.solve(A @ A.T, c)
        _, Cq, Ct = s.evaluate_batch(q[None, :], np.array([t]))
        A = Cq[0][rows]  # type: ignore[index]
        v = v - A.T @ np.linalg.solve(A @ A.T, A @ v + Ct[0][rows])
        return q, v

    def make_stepper(self, t0: float, y0: F, inputs: dict[str, float]) -> Stepper:
        """The compiled stepper when the options and mechanism allow it, else the numpy one."""
        if self.opts.backend != "numpy":
            try:
                return CompiledStepper(self, t0, y0, inputs)  # type: ignore[return-value]
            except Unsupported as exc:
                if self.opts.backend == "compiled":
                    raise MbsdError(f"{self.system.mechanism.source}: the compiled backend does not "
                                    f"support {exc}; use backend='auto' or 'numpy'") from exc
        return Stepper(self, t0, y0, inputs)

    def initial_state(self, t0: float = 0.0) -> F:
        """Assembled q0, v0 checked (or projected, see ``initial_velocity.py``; what changed is in
        ``initial_report``), zero energy integrals."""
        s, tol = self.system, self.opts.velocity_tol
        q = self._assembled[1].copy() if t0 == self._assembled[0] else assemble(s, None, t0)
        v0 = s.v0.copy()
        found = violations(s, q, v0, t0, tol)
        self.initial_report = InitialVelocityReport()
        if not found:
            return np.concatenate([q, v0, np.zeros(3)])
        if self.opts.initial_velocity != "project":
            raise inconsistent(s, found)
        q, v = self.project(t0, q, v0)
        left = violations(s, q, v, t0, tol)
        if left:
            raise inconsistent(s, left, projected=True)
        self.initial_report = InitialVelocityReport(tuple(changes(s, v0, v)), tuple(found))
        return np.concatenate([q, v, np.zeros(3)])


class Stepper:
    """A scipy ODE solver kept alive across communication steps.

    Inputs are held constant over each ``advance_to``; when they change, only the derivative at
    the current point is re-evaluated (no restart, no new initial-step search).
    """

    def __init__(self, dyn: Dynamics, t0: float, y0: F, inputs: dict[str, float]) -> None:
        self.dyn, self.opts = dyn, dyn.opts
        self.inputs = dict(inputs)
        self.steps = 0
        self._start(t0, y0)

    def _start(self, t0: float, y0: F) -> None:
        method = self.opts.method
        cls = explicit_method(method, self.opts.error_norm) if method in EXPLICIT else IMPLICIT[method]
        atol = np.full(len(y0), self.opts.atol)
        atol[len(y0) - 3 + controlled_integrals(self.dyn.system, self.opts):] = np.inf  # out of the norm
        self.solver = cls(self._fun, t0, y0, t_bound=t0 + 1e9, rtol=self.opts.rtol, atol=atol,
                          max_step=self.opts.max_step)

    def _fun(self, t: float, y: F) -> F:
        if time.perf_counter() > _DEADLINE.get():  # one scipy step may reject hundreds of trial steps
            raise SolverFailure(f"integration stopped at t={self.t:.9g} s: {WALL_CLOCK}", time=self.t)
        return self.dyn.rhs(t, y, self.inputs)

    @property
    def t(self) -> float:
        return float(self.solver.t)

    @property
    def y(self) -> F:
        return np.asarray(self.solver.y)

    def set_inputs(self, inputs: dict[str, float]) -> None:
        if inputs != self.inputs:
            self.inputs = dict(inputs)
            self._refresh()

    def _refresh(self) -> None:
        if hasattr(self.solver, "f"):  # explicit RK: first stage of the next step
            self.solver.f = self._fun(self.solver.t, self.solver.y)

    def advance_to(self, t_end: float) -> None:
        """Integrate to exactly ``t_end``; raises :class:`SolverFailure` on numerical failure."""
        s = self.solver
        if t_end <= s.t:
            return
        s.t_bound, s.status = t_end, "running"
        n = self.dyn.n
        taken = 0
        while s.status == "running":
            taken += 1
            if taken > self.opts.max_steps:
                raise SolverFailure(f"integration failed at t={s.t:.9g} s: more than {self.opts.max_steps} internal "
                                    "steps in one call (a runaway or very stiff motion)", time=float(s.t))
            try:
                with np.errstate(over="ignore", invalid="ignore"):  # trial stages may overflow: rejected
                    msg = s.step()
            except (np.linalg.LinAlgError, FloatingPointError, ValueError) as exc:
                raise SolverFailure(f"integration failed at t={s.t:.9g} s: {exc}", time=float(s.t)) from exc
            if s.status == "failed" or not np.isfinite(s.y).all():
                raise SolverFailure(f"integration failed at t={s.t:.9g} s: {msg or 'non-finite state'}",
                                    time=float(s.t))
            self.steps += 1
            if self.opts.drift == "projection":
                q, v = self.dyn.project(float(s.t), s.y[:n], s.y[n:2 * n])
                s.y = np.concatenate([q, v, s.y[2 * n:]])
                self._refresh()

    def reset_state(self, t: float, y: F, inputs: dict[str, float] | None = None, streaming: bool = False) -> None:
        """Restart the integrator from (t, y), with new ``inputs`` if given (``streaming``: see the
        compiled stepper; this stepper ends its steps at every communication point anyway)."""
        if inputs is not None:
            self.inputs = dict(inputs)
        self._start(t, y)

    def export(self) -> dict[str, object]:
        s = self.solver
        return {"t": float(s.t), "y": [float(x) for x in s.y], "h_abs": float(getattr(s, "h_abs", 0.0) or 0.0),
                "f": [float(x) for x in getattr(s, "f", [])], "steps": self.steps, "inputs": dict(self.inputs)}

    def snapshot(self) -> dict[str, object]:
        """A copy of the integrator state for :meth:`restore_snapshot` (what :meth:`export` holds)."""
        return self.export()

    def restore_snapshot(self, snap: dict[str, object]) -> None:
        self.restore(snap)

    def restore(self, data: dict[str, object]) -> None:
        s = self.solver
        s.t = float(data["t"])  # type: ignore[arg-type]
        s.y = np.array(data["y"], dtype=float)
        s.status = "running"
        self.inputs = dict(data["inputs"])  # type: ignore[call-overload]
        self.steps = int(data["steps"])  # type: ignore[call-overload]
        if hasattr(s, "h_abs"):
            s.h_abs = float(data["h_abs"])  # type: ignore[arg-type]
        if hasattr(s, "f") and data["f"]:
            s.f = np.array(data["f"], dtype=float)
