"""The filter's linearisation: the finite-difference runs of its step, the Jacobians assembled
from them, and when to refresh them — by the coordinates' travel under step-size control, with
``jacobian_every`` corrections at the most (docs/twin-estimation.md, "Linearisation that follows
the motion"). Used by both paths of :class:`~.ekf.StateEstimator`: the Python reference
(``StateEstimator._linearise``) and the compiled one (:mod:`.fused`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import nb_jacobians
from .holds import Step, mean_step
from .records import Linearisation

StateEstimator = Any  # an .ekf.StateEstimator (which imports this module: no import back)
F64 = NDArray[np.float64]
H_CHANGE = 1e-3  # relative change of the prediction interval that calls for new Jacobians


def jacobian_change(old: Linearisation, new: Linearisation, P: F64, r: F64) -> float:
    """How far two linearisations of the filter's step differ, applied to the state's uncertainty P:
    the larger of maxᵢ √(ΔHᵢ·P·ΔHᵢᵀ)/rᵢ (the measurement Jacobian's change, in σ of each measured
    channel) and maxᵢ √((ΔF·P·ΔFᵀ)ᵢᵢ/(F·P·Fᵀ)ᵢᵢ) (the transition's change, in σ of each propagated
    state component); compiled (:func:`.nb_jacobians.change`)."""
    return float(nb_jacobians.change(old.H, new.H, old.F, new.F, P, r))


def stale(est: StateEstimator, h: float, n_steps: int) -> bool:
    """Whether the next prediction needs new Jacobians: every ``jacobian_every`` predictions, when
    the number of steps or the interval changes (by more than ``H_CHANGE``: sample times given as
    seconds since the epoch carry about 2e-7 s of rounding, which must not count), and when the
    coordinates will have travelled ``next_travel`` from the last linearisation's end point."""
    lin = est.lin
    if lin is None or est.age + 1 >= est.cfg.jacobian_every or abs(lin.h - h) > H_CHANGE * h \
            or lin.n_steps != n_steps:
        return True
    return lin.z is not None and _travel(est, lin.z, h) >= est.next_travel

def _travel(est: StateEstimator, z_lin: F64, h: float) -> float:
    """Distance of the coordinates at the end of the next ``h`` s (extrapolated with the current
    speeds) from ``z_lin`` (rad or m, Euclidean over the coordinates)."""
    d, x = est.d, est.x.tolist()  # per sample: Python floats, no numpy arithmetic's overhead (same IEEE operations)
    return math.dist([x[i] + h * x[d + i] for i in range(d)], z_lin.tolist())


def adopt(est: StateEstimator, lin: Linearisation, h: float) -> Linearisation:
    """Take a fresh linearisation of the next ``h`` s; schedule the next one by travel.

    Step-size control for the Jacobians: E = maxᵢ √(ΔHᵢ·P·ΔHᵢᵀ)/σᵢ, the change of the
    measurement Jacobian since the last refresh, applied to the state's current uncertainty, in
    σ of each measured channel, grows about linearly with the coordinates' travel s between
    the two. The next refresh comes after the travel s·tol/E (``jacobian_tolerance``, at most
    2·s: a mechanism leaving a quiet stretch of its cycle is caught within two refreshes), so
    the refresh rate follows the motion — dense at a slider crank's dead centres, where the
    bearing forces turn fastest, sparse elsewhere, and the same in crank travel at every speed
    and hold level; ``jacobian_every`` bounds the count in between (a mechanism at rest)."""
    old, tol = est.lin, est.cfg.jacobian_tolerance
    lin.z = est.x[:est.d] + h * est.x[est.d:2 * est.d]
    if old is None or old.z is None or not math.isfinite(tol):
        est.next_travel = 0.0 if math.isfinite(tol) else math.inf  # the rate needs two refreshes
    else:
        s = math.dist(lin.z.tolist(), old.z.tolist())
        e = jacobian_change(old, lin, est.P, est.r)
        if s > 0.0:
            est.next_travel = 2.0 * s if e * 2.0 <= tol else s * tol / e
    est.lin, est.age = lin, 0
    est.refreshes += 1
    return lin


@dataclass(frozen=True)
class Runs:
    """The finite-difference runs of an estimator's linearisation (:func:`runs`) and what their
    assembly needs: ``perts`` (kind, target) — kind 0 moves component ``target`` of the state, 1 the
    parameter named ``target``, 2 the input port ``target`` over the interval; ``fixed``, the steps of
    the runs after the state's n (inputs); the inputs' effects B by port (``ports``) with their
    sources (``b_src``: a state column of F, or −1 − run) and sample-noise variances (``noise_var``,
    0.5·σ²: each interval value is the mean of two samples)."""

    perts: tuple[tuple[int, Any], ...]
    fixed: F64
    ports: tuple[str, ...]
    b_src: NDArray[np.int64]
    noise_var: F64


def runs(est: StateEstimator, extra: tuple[str, ...] = ()) -> Runs:
    """The finite-difference runs of a linearisation: one per state component (kind 0 for [z, ż], an
    augmented parameter's kind 1, an input bias's kind 2 over the interval), then each other noisy
    input, then the ports of ``extra`` that neither covers (the inputs whose effect a gap's noise
    needs). Built once per estimator and ``extra``: its structure does not change; the steps do
    (:func:`steps_of`)."""
    cache = est.__dict__.setdefault("_runs", {})
    if extra in cache:
        return cache[extra]
    perts: list[tuple[int, Any]] = []
    for j in range(est.n):
        aug = est.aug[j - 2 * est.d] if j >= 2 * est.d else None
        perts.append((0, j) if aug is None else (1, aug.name) if aug.bias_port is None else (2, aug.bias_port))
    noisy = [(port, max(sig, 1e-9)) for port, sig in est.cfg.input_noise.items() if port not in est.bias]
    known = set(est.bias) | set(est.cfg.input_noise)
    more = noisy + [(port, 1e-3) for port in extra if port not in known]
    perts += [(2, port) for port, _ in more]
    sigma = dict(est.cfg.input_noise)
    ports = (*est.bias, *(port for port, _ in more))
    src = [est.bias[port] for port in est.bias] + [-1 - (est.n + k) for k in range(len(more))]
    var = [0.5 * sigma[port] * sigma[port] if port in sigma else 0.0 for port in ports]
    out = Runs(tuple(perts), np.array([step for _, step in more]), ports, np.array(src, dtype=np.int64),
               np.array(var))
    cache[extra] = out
    return out


def steps_of(est: StateEstimator, r: Runs) -> F64:
    """The runs' step sizes now: the state's from its σ (``fd_scale`` of it), then the fixed."""
    return nb_jacobians.fd_steps(est.P, est.cfg.fd_scale, r.fixed)


def assembled(est: StateEstimator, h: float, n_steps: int, D: F64, r: Runs, delta: F64) -> Linearisation:
    """The linearisation from the runs' differences ``D`` (perturbed − nominal [z, ż, y], one row
    per run of ``r``, of the sizes ``delta``): transition F, measurement Jacobian H = G·F⁻¹, each
    input's effect B (the state's change per unit offset of the input held over the interval) and
    the process noise of the inputs' sample noise (:func:`.nb_jacobians.assemble`)."""
    F, H, B, Q = nb_jacobians.assemble(D, delta, est.n, est.d, est.angular, r.b_src, r.noise_var)
    return Linearisation(h, n_steps, F, H, Q, B=dict(zip(r.ports, B, strict=True)))


def stepwise(est: StateEstimator, start: Any, h: float, steps: Sequence[Step], at_next: Mapping[str, float],
             extra: tuple[str, ...] = ()) -> Linearisation:
    """``StateEstimator._linearise`` through the Simulator's API from the snapshot ``start``, each
    run under the integrator's error control: the numpy path's, and the independent reference of
    the compiled runs in fixed steps (tests/test_filter_kernels.py)."""
    sim, r, D = est.sim, runs(est, extra), []
    delta = steps_of(est, r)
    one = mean_step(start.time, list(steps))
    sim.restore(start)
    base = est._run(one, at_next, None)
    for (kind, target), dv in zip(r.perts, delta.tolist(), strict=True):
        sim.restore(start)
        if kind == 0:
            x = est.x.copy()
            x[target] += dv
            est._write(x, params=False)  # the parameters as in the nominal step
        elif kind == 1:
            sim.set_parameter(target, est.applied[target] + dv, keep_state=True)
        D.append(est._run(one, at_next, (target, dv) if kind == 2 else None) - base)
    return assembled(est, h, len(steps), np.array(D), r, delta)
