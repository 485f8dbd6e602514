"""Directional derivatives of the ODE form (``ode_form.py``): of the state derivatives ẋ and every
output y with respect to the states x and the inputs u, along any seed (dx, du) — what FMI's
``fmi2GetDirectionalDerivative`` / ``fmi3GetDirectionalDerivative`` ask for.

Method: the implicit-function theorem for the partition, and differences of the engine's smooth
functions of the full state (no Newton inside them):

1. Positions. On the manifold C(q) = 0 with the free coordinates q_F = x_q, the dependent ones
   move along the tangent: dq_F = dx_q, A_d·dq_d = −A_f·dx_q (A = Cq on the position rows, split
   into the dependent and free columns; exact, from the Jacobian at the solved point).
2. Speeds. B(q)·v + Ct(q) = 0 over every velocity row, with v_G = x_v: dv_G = dx_v and
   B_d·dv_d = −B_f·dx_v − ∂(B·v + Ct)/∂q·dq, the last term the derivative of the velocity
   residual along dq at fixed v.
3. The right-hand side. With (dq, dv, du) and dE = dx_E, ẋ = [v_F, a_G, energy rates] and y are
   smooth functions of the full state (q, v, E) and u through the engine's saddle-point solve
   (``Dynamics.evaluate``) and output columns (``evaluated_outputs``); their derivative along the
   direction is taken by Richardson's extrapolation of central differences (fourth order, steps
   of 1e-3 in the scaled coordinates and h/2), as is the derivative in step 2.

So the constraint manifold is differentiated analytically and the Newton solve — the source of
noise in differences of the whole map — is not differenced at all; the remaining differences are
of the engine's closed-form kernels, accurate to about 1e-10 relative. A fully analytic version
needs the kernels' second derivatives (∂Cq/∂q, ∂γ/∂q, ∂Q/∂q) that the engine does not form.
``constraints.position_residual`` (max |C|, zero on the manifold up to round-off) has derivative 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from ..solvers.dynamics import Evaluation, energy_rates

F = NDArray[Any]


class Solved(Protocol):
    """What this module reads of :class:`.ode_form.Solved` (the full state at one evaluation)."""

    q: F
    v: F
    y: F


class OdeForm(Protocol):
    """What this module reads of :class:`.ode_form.OdeForm` (a Protocol, so that the form may call
    this module without an import cycle)."""

    dyn: Any
    system: Any
    n: int
    free_q: NDArray[np.intp]
    free_v: NDArray[np.intp]
    rows_q: F
    rows_v: F
    scale: F
    inputs: dict[str, float]
    output_names: list[str]

    def solve(self, t: float, x: F) -> Solved: ...

    def outputs_at(self, t: float, y: F, ev: Evaluation, inputs: Mapping[str, float] | None = None) -> F: ...
H_SCALED = 1e-3  # the larger Richardson step, in scaled coordinates (m/ℓ, rad), speeds and inputs
RESIDUAL = "constraints.position_residual"


def richardson(g: Callable[[float], F], h: float) -> F:
    """g'(0) by Richardson's extrapolation of the central differences with steps h and h/2
    (error O(h⁴))."""
    d1 = (g(h) - g(-h)) / (2.0 * h)
    d2 = (g(0.5 * h) - g(-0.5 * h)) / h
    return (4.0 * d2 - d1) / 3.0


def _dependent(n: int, free: NDArray[np.intp]) -> NDArray[np.intp]:
    return np.setdiff1d(np.arange(n), free)


def tangent(ode: OdeForm, t: float, sol: Solved, dx: F) -> tuple[F, F]:
    """(dq, dv): the full positions' and velocities' change along the state seed ``dx`` (steps 1
    and 2 of the module docstring)."""
    s, n, fq, fv = ode.system, ode.n, ode.free_q, ode.free_v
    tb = np.array([t])
    _, Cq, _ = s.evaluate_batch(sol.q[None, :], tb)
    assert Cq is not None
    A, B = Cq[0][ode.rows_q], Cq[0][ode.rows_v]
    dq, dv = np.zeros(n), np.zeros(n)
    dq[fq], dv[fv] = dx[:len(fq)], dx[len(fq):len(fq) + len(fv)]
    dep_q, dep_v = _dependent(n, fq), _dependent(n, fv)
    if len(dep_q):
        dq[dep_q] = -np.linalg.lstsq(A[:, dep_q], A[:, fq] @ dq[fq], rcond=None)[0]
    if len(dep_v):
        def residual(eps: float) -> F:
            _, Cq_e, Ct_e = s.evaluate_batch((sol.q + eps * dq)[None, :], tb)
            assert Cq_e is not None
            return np.asarray(Cq_e[0][ode.rows_v] @ sol.v + Ct_e[0][ode.rows_v])

        moved = richardson(residual, _step(dq * ode.scale)) if np.any(dq) else np.zeros(len(ode.rows_v))
        dv[dep_v] = -np.linalg.lstsq(B[:, dep_v], B[:, fv] @ dv[fv] + moved, rcond=None)[0]
    return dq, dv


def _step(*parts: F) -> float:
    """The Richardson step: H_SCALED over the largest scaled component of the direction."""
    size = max([float(np.abs(p).max(initial=0.0)) for p in parts] + [1e-300])
    return H_SCALED / size


def directional(ode: OdeForm, t: float, x: F, dx: F, du: Mapping[str, float] | None = None) -> tuple[F, F]:
    """(dẋ, dy): the derivatives of ẋ and of every output (``ode.output_names`` order) at (t, x)
    with the current inputs along the seed ``dx`` (states) and ``du`` (inputs by port name)."""
    t = float(t)
    sol = ode.solve(t, x)
    dx = np.asarray(dx, dtype=float)
    dq, dv = tangent(ode, t, sol, dx)
    dE = dx[len(ode.free_q) + len(ode.free_v):]
    du = dict(du or {})
    unknown = set(du) - set(ode.inputs)
    if unknown:
        raise KeyError(f"unknown input ports: {', '.join(sorted(unknown))}")
    names, base = list(ode.inputs), dict(ode.inputs)
    dvec = np.array([float(du.get(k, 0.0)) for k in names])
    n = ode.n

    def g(eps: float) -> F:
        q, v = sol.q + eps * dq, sol.v + eps * dv
        inputs = {k: base[k] + eps * d for k, d in zip(names, dvec.tolist(), strict=True)}
        ev = ode.dyn.evaluate(t, q, v, inputs)
        y = np.concatenate([q, v, sol.y[2 * n:] + eps * dE])
        xdot = np.concatenate([v[ode.free_q], ev.a[ode.free_v], energy_rates(ev, v)])
        return np.concatenate([xdot, ode.outputs_at(t, y, ev, inputs)])

    scale = ode.scale
    both = richardson(g, _step(dq * scale, dv * scale, dvec, dE))
    k = len(ode.free_q) + len(ode.free_v) + 3
    dxdot, dy = both[:k], both[k:]
    if RESIDUAL in ode.output_names:
        dy[ode.output_names.index(RESIDUAL)] = 0.0
    return dxdot, dy


def jacobians(ode: OdeForm, t: float, x: F) -> tuple[F, F, F, F]:
    """The linearisation (A, B, C, D) at (t, x): ∂ẋ/∂x, ∂ẋ/∂u, ∂y/∂x, ∂y/∂u (inputs in port order),
    one :func:`directional` per state and input."""
    nx, names = len(x), list(ode.inputs)
    cols_x = [directional(ode, t, x, np.eye(nx)[k]) for k in range(nx)]
    cols_u = [directional(ode, t, x, np.zeros(nx), {name: 1.0}) for name in names]
    ny = len(ode.output_names)

    def stack(cols: list[tuple[F, F]], i: int, rows: int) -> F:
        return np.array([c[i] for c in cols]).T if cols else np.zeros((rows, 0))

    return stack(cols_x, 0, nx), stack(cols_u, 0, nx), stack(cols_x, 1, ny), stack(cols_u, 1, ny)
