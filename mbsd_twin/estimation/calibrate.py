"""Offline calibration: named model parameters fitted to measured motion by nonlinear least squares
over Simulator runs (``scipy.optimize.least_squares``), by multiple shooting.

The time range is split into segments (default 0.5 s, and at every gap in the samples). Each
segment starts from its own initial state — the angle and speed of the body of the first measured
angle output (e.g. ``crank.theta`` / ``crank.omega``), imposed with
:meth:`Simulator.set_configuration` — which is fitted along with the parameters (a nuisance
unknown, initialised from polynomial fits to the segment's first samples); the parameters are shared
by all segments. Between samples the measured inputs drive the model through
:func:`~mbsd_twin.estimation.holds.interval_steps`, sample by sample (first-order hold: two half
steps keeping the line's impulse and first moment).

Residuals (measured − model, angles wrapped to (−π, π]) are weighted by 1/σ per output and taken
at every ``stride``-th sample of each segment (the model still advances sample by sample). σ is the
given noise, or — for outputs without one — the RMS residual of a first pass (itself weighted by a
model-free noise estimate from second differences), refitted in a second pass.

Positive masses, inertias, frictions, stiffnesses and dampings are fitted as logarithms, other
parameters scaled by their start value. The Jacobian is by forward differences, all segments'
initial angles (speeds) perturbed in one run (each segment depends only on its own). Standard
errors: cov = s²·(JᵀJ)⁻¹ of the weighted Jacobian at the solution, s² = Σr²/(m − n), parameter
block (the initial states marginalised).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import least_squares

from ..errors import AssemblyError, MechanismError, PortError
from ..model.model import Mechanism
from ..simulation.simulator import Simulator
from ..solvers.dynamics import SolverFailure, SolverOptions
from .holds import HOLDS, Step, interval_steps

F = NDArray[np.float64]
LOG_KINDS = (".mass", ".inertia", ".viscous_friction", ".stiffness", ".damping")
STEPS = {"param": 1e-4, "theta": 1e-5, "omega": 1e-4}  # forward-difference steps (log/scaled, rad, rad/s)
DEFAULT_OPTIONS = SolverOptions(method="DOP853", rtol=1e-8, atol=1e-10, initial_velocity="project")


@dataclass(frozen=True)
class Calibration:
    """The fit: ``values`` and ``stderr`` in the order of ``names``; ``correlation`` P×P."""

    names: list[str]
    start: F
    values: F
    stderr: F
    correlation: F
    sigma: dict[str, float]  # output → σ used in the final pass
    sigma_source: dict[str, str]  # output → "given" or "first-pass residuals"
    rms: dict[str, float]  # output → RMS residual at the solution (unweighted)
    noise_floor: dict[str, float]  # output → model-free noise estimate of the data (noise_estimate)
    reduced_chi2: float
    segments: int
    residuals: int
    stride: int
    passes: int
    evaluations: int
    wall_time: float
    success: bool
    message: str
    initial_states: F = field(repr=False)  # (segments, 2): fitted angle and speed at each start

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.names, self.values.tolist(), strict=True))

    def to_json(self) -> dict[str, Any]:
        return {"parameters": {n: {"start": float(s), "value": float(v), "stderr": float(e)}
                               for n, s, v, e in zip(self.names, self.start, self.values, self.stderr, strict=True)},
                "correlation": self.correlation.tolist(),
                **{k: getattr(self, k) for k in ("sigma", "sigma_source", "rms", "noise_floor", "reduced_chi2",
                                                 "segments", "residuals", "stride", "passes", "evaluations",
                                                 "wall_time", "success", "message")}}


def check_parameters(sim: Simulator, names: Sequence[str]) -> None:
    """Raise :class:`PortError` naming the first name that is not a fixed parameter (listing the
    valid ones)."""
    fixed = [p.name for p in sim.parameters if p.variability == "fixed"]
    if not names:
        raise PortError(f"no parameter to calibrate; fixed parameters: {', '.join(fixed)}", name="")
    for n in names:
        if n not in fixed:
            raise PortError(f"{n!r} is not a fixed model parameter; fixed parameters: {', '.join(fixed)}", name=n)
    if len(set(names)) != len(names):
        raise PortError(f"parameter listed twice in {', '.join(names)}", name=names[0])


def shooting_segments(times: F, length: float) -> list[tuple[int, int]]:
    """[start, end) sample ranges of about ``length`` seconds, split at gaps (a step other than the
    median sample period); a remainder shorter than half a segment joins the one before."""
    dt = float(np.median(np.diff(times)))
    if not dt > 0:
        raise ValueError("the sample times must increase")
    if not length > 0:
        raise ValueError(f"segment length must be positive, got {length!r}")
    steps = np.diff(times)
    cuts = [0, *(np.flatnonzero(np.abs(steps - dt) > 0.5 * dt) + 1).tolist(), len(times)]
    n_seg = max(1, round(length / dt))
    out: list[tuple[int, int]] = []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        starts = list(range(a, b, n_seg))
        if len(starts) > 1 and b - starts[-1] < n_seg // 2:
            starts.pop()
        out += [(s, e) for s, e in zip(starts, [*starts[1:], b], strict=True) if e - s >= 3]
    return out


def noise_estimate(y: F) -> float:
    """Model-free σ of white noise on a smooth signal: robust spread of second differences / √6
    (at least 1e-12 of the signal's size, so that noise-free data still gets a weight)."""
    d2 = np.diff(y, 2)
    sd = float(1.4826 * np.median(np.abs(d2 - np.median(d2))) / math.sqrt(6.0)) if len(d2) else 0.0
    return max(sd, _tiny(y))


def _tiny(y: F) -> float:
    """The smallest σ used for a signal: 1e-12 of its size."""
    return 1e-12 * max(1.0, float(np.max(np.abs(y))))


def _wrap(x: F) -> F:
    return np.asarray(np.remainder(x + np.pi, 2 * np.pi) - np.pi)


class ShootingProblem:
    """Weighted residuals and their Jacobian for parameters plus per-segment initial states."""

    def __init__(self, sim: Simulator, names: Sequence[str], times: F, inputs: Mapping[str, F],
                 measured: Mapping[str, F], segments: list[tuple[int, int]], stride: int, hold: str) -> None:
        self.sim, self.names, self.t = sim, list(names), times
        self.u_at = dict(inputs)
        holds = {port: hold for port in inputs}
        sample = [{port: float(v[k]) for port, v in inputs.items()} for k in range(len(times))]
        self.steps: list[list[Step]] = [interval_steps(times[k], times[k + 1], sample[k], sample[k + 1], holds)
                                        for k in range(len(times) - 1)]
        self.outs = list(measured)
        self.y = np.column_stack([measured[o] for o in self.outs])
        self.is_angle = np.array([o.endswith(".theta") for o in self.outs])
        angle = next((o for o in self.outs if o.endswith(".theta")), None)
        if angle is None:
            raise ValueError("calibration needs a measured angle output (BODY.theta) for the segments' "
                             f"initial states; measured: {', '.join(self.outs)}")
        self.angle, self.speed = angle, angle[:-len("theta")] + "omega"
        names_all = sim.output_names()
        self.cols = np.array([names_all.index(o) for o in self.outs])
        self.segs, self.stride = segments, stride
        self.idx = [np.arange(a, e, stride) for a, e in segments]
        self.nrow = [len(i) * len(self.outs) for i in self.idx]
        self.sigma = np.ones(len(self.outs))
        order = {p.name: p.value for p in sim.parameters}
        self.start = np.array([order[n] for n in self.names])
        self.log = np.array([n.endswith(LOG_KINDS) and order[n] > 0 for n in self.names])
        self.scale = np.where(self.start != 0, np.abs(self.start), 1.0)
        self.evaluations = 0
        self.failure = ""
        self._last: tuple[F, F, F] | None = None  # (x, σ, weighted residuals) of the last evaluation
        self._piece_cache: dict[int, list[tuple[F, F]]] = {}
        self.progress: Callable[[float | None, str], None] | None = None
        self.passes = 1  # the fit's pass (the second re-weights by the first's residuals)

    # ------------------------------------------------------------ variables
    def to_params(self, x: F) -> F:
        return np.where(self.log, self.start * np.exp(x), self.start + self.scale * x)

    def initial_guess(self, values: F) -> F:
        """x for parameter ``values`` with each segment's state from polynomial fits to its first
        samples (angle: quadratic; speed: linear fit of the speed output, else the angle's slope)."""
        xp = np.where(self.log, np.log(np.maximum(values, 1e-300) / np.where(self.start > 0, self.start, 1.0)),
                      (values - self.start) / self.scale)
        th, om = [], []
        ka = self.outs.index(self.angle)
        for a, e in self.segs:
            m = min(e - a, 11)
            tk = self.t[a:a + m] - self.t[a]
            c = np.polyfit(tk, np.unwrap(self.y[a:a + m, ka]), 2)
            th.append(c[2])
            if self.speed in self.outs:
                om.append(np.polyfit(tk, self.y[a:a + m, self.outs.index(self.speed)], 1)[1])
            else:
                om.append(c[1])
        return np.concatenate([xp, th, om])

    # ------------------------------------------------------------ residuals
    def _set_params(self, values: F) -> None:
        current = {p.name: p.value for p in self.sim.parameters}
        for n, v in zip(self.names, values, strict=True):
            if current[n] != v:
                self.sim.set_parameter(n, float(v))

    def _outputs_at(self, k: int) -> F:
        """The compared outputs at sample k, with the inputs' values at that instant (the sample)."""
        for port, u in self.u_at.items():
            self.sim.set_input(port, u[k])
        return self.sim.output_vector()[self.cols]

    def _pieces(self, s: int) -> list[tuple[F, F]]:
        """Segment s's held-input pieces between its residual samples, as :meth:`Simulator.advance_held`
        takes them (end times, one input row each in ``input_ports`` order): the steps of
        :func:`interval_steps` with the inputs as ``set_input`` would leave them (each residual sample
        sets the measured inputs to their sampled values; other ports keep the Simulator's). Built once
        per segment: one compiled call per interval instead of one Python call per step."""
        cached = self._piece_cache.get(s)
        if cached is not None:
            return cached
        names = [p.name for p in self.sim.input_ports]
        current = {n: self.sim.get_input(n) for n in names}
        idx = self.idx[s]
        current.update({port: float(u[idx[0]]) for port, u in self.u_at.items()})
        pieces = []
        for k0, k1 in zip(idx[:-1].tolist(), idx[1:].tolist(), strict=True):
            times, rows = [], []
            for k in range(k0, k1):
                for t_end, values in self.steps[k]:
                    current.update(values)
                    times.append(t_end)
                    rows.append([current[n] for n in names])
            pieces.append((np.array(times), np.array(rows, dtype=np.float64).reshape(len(times), len(names))))
            current.update({port: float(u[k1]) for port, u in self.u_at.items()})
        self._piece_cache[s] = pieces
        return pieces

    def _segment(self, s: int, theta0: float, omega0: float) -> F:
        """Model outputs at the segment's residual samples, (len(idx[s]), outputs)."""
        sim, t, idx = self.sim, self.t, self.idx[s]
        sim.set_configuration({self.angle: theta0}, {self.speed: omega0}, time=t[idx[0]])
        rows = np.empty((len(idx), len(self.outs)))
        rows[0] = self._outputs_at(int(idx[0]))
        for i, (times, inputs) in enumerate(self._pieces(s), start=1):
            sim.advance_held(times, inputs)
            rows[i] = self._outputs_at(int(idx[i]))
        return rows

    def model(self, x: F) -> list[F] | None:
        """Model outputs per segment at ``x``; None (the reason in ``failure``) when the model
        cannot be built or run there."""
        P, S = len(self.names), len(self.segs)
        self.evaluations += 1
        if self.progress is not None:
            self.progress(None, f"pass {self.passes}: model run {self.evaluations} ({S} segments)")
        try:
            self._set_params(self.to_params(x[:P]))
            return [self._segment(s, x[P + s], x[P + S + s]) for s in range(S)]
        except (SolverFailure, MechanismError, AssemblyError) as exc:
            self.failure = str(exc).splitlines()[0]
            return None

    def raw(self, model: list[F]) -> list[F]:
        """Unweighted residuals per segment (measured − model; angles wrapped)."""
        out = []
        for s, m in enumerate(model):
            r = self.y[self.idx[s]] - m
            r[:, self.is_angle] = _wrap(r[:, self.is_angle])
            out.append(r)
        return out

    def residuals(self, x: F) -> F:
        """Weighted residuals at ``x`` (NaN where the model fails: the optimiser then shortens its
        step); the last evaluation is kept."""
        last = self._last
        if last is not None and np.array_equal(last[0], x) and np.array_equal(last[1], self.sigma):
            return last[2]
        model = self.model(x)
        r = (np.full(sum(self.nrow), np.nan) if model is None
             else np.concatenate([(r / self.sigma).ravel() for r in self.raw(model)]))
        self._last = (x.copy(), self.sigma.copy(), r)
        return r

    def jacobian(self, x: F) -> F:
        """Forward differences from the residuals at ``x`` (kept from the last evaluation there):
        one run per parameter, one for all initial angles and one for all initial speeds."""
        P, S = len(self.names), len(self.segs)
        J = np.zeros((sum(self.nrow), P + 2 * S))
        bounds = np.cumsum([0, *self.nrow])
        groups = [(STEPS["param"], [j]) for j in range(P)]
        groups += [(STEPS["theta"], list(range(P, P + S))), (STEPS["omega"], list(range(P + S, P + 2 * S)))]
        f0 = self.residuals(x)
        for h, cols in groups:
            xp = x.copy()
            xp[cols] += h
            d = (self.residuals(xp) - f0) / h
            if len(cols) == 1:
                J[:, cols[0]] = d
            else:
                for s, c in enumerate(cols):
                    J[bounds[s]:bounds[s + 1], c] = d[bounds[s]:bounds[s + 1]]
        return J


def _arrays(sim: Simulator, times: ArrayLike, inputs: Mapping[str, ArrayLike], measured: Mapping[str, ArrayLike],
            noise: Mapping[str, float]) -> tuple[F, dict[str, F], dict[str, F]]:
    """The data as float arrays, checked: names exist, lengths agree, values finite."""
    t = np.asarray(times, dtype=float)
    if t.ndim != 1 or len(t) < 3 or not np.all(np.isfinite(t)):
        raise ValueError(f"times must be a 1-D array of at least 3 finite values, got shape {t.shape}")
    ports, outs = [p.name for p in sim.input_ports], sim.output_names()
    data: list[dict[str, F]] = [{}, {}]
    for d, given, valid, what in ((data[0], inputs, ports, "input port"), (data[1], measured, outs, "output")):
        for name, v in given.items():
            if name not in valid:
                raise PortError(f"unknown {what} {name!r}; {what}s: {', '.join(valid) or 'none'}", name=name)
            a = np.asarray(v, dtype=float)
            if a.shape != t.shape or not np.all(np.isfinite(a)):
                raise ValueError(f"{what} {name!r}: expected {len(t)} finite values, got shape {a.shape}")
            d[name] = a
    if not data[1]:
        raise ValueError("no measured output to fit")
    for name, sd in noise.items():
        if name not in data[1] or not (sd > 0 and math.isfinite(sd)):
            raise ValueError(f"noise {name}={sd!r}: needs a measured output and a positive finite σ; "
                             f"measured: {', '.join(data[1])}")
    return t, data[0], data[1]


def _solve(prob: ShootingProblem, x0: F, max_nfev: int) -> Any:
    if not np.all(np.isfinite(prob.residuals(x0))):
        raise ValueError(f"the model cannot be run from the start values: {prob.failure}")
    return least_squares(prob.residuals, x0, jac=prob.jacobian, method="trf", x_scale="jac", max_nfev=max_nfev)


def calibrate(mech: Mechanism, params: Sequence[str], times: ArrayLike, inputs: Mapping[str, ArrayLike],
              measured: Mapping[str, ArrayLike], *, noise: Mapping[str, float] | None = None,
              start: Mapping[str, float] | None = None, segment: float = 0.5, stride: int = 5,
              hold: str = "foh", options: SolverOptions | None = None, max_nfev: int = 30,
              progress: Callable[[float | None, str], None] | None = None) -> Calibration:
    """Fit the fixed parameters ``params`` of ``mech`` to measurements.

    ``times`` [s] are the sample instants (simulation time), ``inputs`` the sampled input ports,
    ``measured`` the sampled model outputs (``crank.theta``, ``main_bearing.fx`` …; one must be
    an angle ``BODY.theta``), ``noise`` σ per output (others: estimated from a first pass),
    ``start`` starting values (default: the mechanism's); ``progress`` is told ``(None, note)`` after
    each model run (the number of runs is not known ahead). Raises :class:`PortError` for a bad name."""
    wall = time.perf_counter()
    sim = Simulator(mech, options or DEFAULT_OPTIONS)
    check_parameters(sim, params)
    for name, value in (start or {}).items():
        if name not in params:
            raise PortError(f"start value for {name!r}, which is not calibrated ({', '.join(params)})", name=name)
        sim.set_parameter(name, value)
    noise = dict(noise or {})
    t, u, y = _arrays(sim, times, inputs, measured, noise)
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    if hold not in HOLDS:
        raise ValueError(f"unknown input hold {hold!r}; holds: {', '.join(HOLDS)}")
    prob = ShootingProblem(sim, params, t, u, y, shooting_segments(t, segment), stride, hold)
    prob.progress = progress
    floor = {o: noise_estimate(prob.y[:, i]) for i, o in enumerate(prob.outs)}
    prob.sigma = np.array([noise.get(o) or floor[o] for o in prob.outs])
    sol = _solve(prob, prob.initial_guess(prob.start), max_nfev)
    passes = 1
    if len(noise) < len(prob.outs):
        rms = np.sqrt(np.mean((sol.fun.reshape(-1, len(prob.outs)) * prob.sigma) ** 2, axis=0))
        prob.sigma = np.array([noise.get(o) or max(float(r), _tiny(prob.y[:, i]))
                               for i, (o, r) in enumerate(zip(prob.outs, rms, strict=True))])
        prob.passes = passes = 2
        sol = _solve(prob, sol.x, max_nfev)
    return _result(prob, sol, noise, floor, passes, time.perf_counter() - wall)


def _result(prob: ShootingProblem, sol: Any, noise: Mapping[str, float], floor: dict[str, float], passes: int,
            wall: float) -> Calibration:
    P = len(prob.names)
    J = np.asarray(sol.jac)
    m, n = J.shape
    s2 = 2.0 * float(sol.cost) / max(m - n, 1)
    cov = s2 * np.linalg.pinv(J.T @ J)[:P, :P]
    sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
    values = prob.to_params(sol.x[:P])
    stderr = np.where(prob.log, values * sd, prob.scale * sd)
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = cov / np.outer(sd, sd)
    rms = np.sqrt(np.mean((sol.fun.reshape(-1, len(prob.outs)) * prob.sigma) ** 2, axis=0))
    S = len(prob.segs)
    return Calibration(
        names=list(prob.names), start=prob.start, values=values, stderr=stderr, correlation=corr,
        sigma={o: float(s) for o, s in zip(prob.outs, prob.sigma, strict=True)},
        sigma_source={o: "given" if o in noise else "first-pass residuals" for o in prob.outs},
        rms={o: float(r) for o, r in zip(prob.outs, rms, strict=True)}, noise_floor=floor, reduced_chi2=s2, segments=S,
        residuals=m, stride=prob.stride,
        passes=passes, evaluations=prob.evaluations, wall_time=wall, success=bool(sol.success),
        message=str(sol.message), initial_states=np.column_stack([sol.x[P:P + S], sol.x[P + S:]]))


def format_report(cal: Calibration) -> str:
    """Estimates with standard errors, the correlation matrix and the fit's figures, as text."""
    w = max(len(n) for n in cal.names)
    lines = [f"{'parameter':<{w}}  {'start':>12}  {'estimate':>12}  {'std error':>10}  {'rel':>7}"]
    for n, s, v, e in zip(cal.names, cal.start, cal.values, cal.stderr, strict=True):
        rel = f"{100 * e / abs(v):6.3f}%" if v else "      -"
        lines.append(f"{n:<{w}}  {s:12.6g}  {v:12.6g}  {e:10.3g}  {rel}")
    lines.append("correlation:")
    for n, row in zip(cal.names, cal.correlation, strict=True):
        lines.append(f"  {n:<{w}}  " + "  ".join(f"{c:+.3f}" for c in row))
    lines.append("noise σ used, RMS residual, sensor noise estimated from the data alone:")
    for o, sd in cal.sigma.items():
        lines.append(f"  {o}: σ = {sd:.4g} ({cal.sigma_source[o]}), RMS residual {cal.rms[o]:.4g}, "
                     f"sensor noise {cal.noise_floor[o]:.4g}")
    high = [o for o in cal.rms if cal.rms[o] > 1.5 * cal.noise_floor[o]]
    if high:
        lines.append(f"warning: the residuals of {', '.join(high)} exceed 1.5x the sensor noise: a model or "
                     "input-hold error remains (try --hold, more parameters or other channels); the standard "
                     "errors are optimistic")
    lines.append(f"{cal.segments} segments, {cal.residuals} residuals (1 in {cal.stride} samples), "
                 f"reduced χ² {cal.reduced_chi2:.3f}, {cal.passes} pass(es), {cal.evaluations} runs, "
                 f"{cal.wall_time:.1f} s; {cal.message}")
    return "\n".join(lines)
