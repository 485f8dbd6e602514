"""What a :class:`~.ekf.StateEstimator` is asked to do: its augmented unknowns (:class:`Augment`)
and its configuration (:class:`FilterConfig`: coordinates, measurements and their σ, noise,
refresh policy), checked against a Simulator before the filter is built; :func:`speed_of` names a
coordinate's speed output."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..simulation.simulator import Simulator

SPEED = {"x": "vx", "y": "vy", "theta": "omega"}


def speed_of(coordinate: str) -> str:
    """The velocity output of a position output: ``crank.theta`` → ``crank.omega``."""
    body, _, c = coordinate.rpartition(".")
    if c not in SPEED or not body:
        raise ValueError(f"{coordinate!r} is not a body coordinate (<body>.x, <body>.y or <body>.theta)")
    return f"{body}.{SPEED[c]}"



@dataclass(frozen=True)
class Augment:
    """An augmented unknown: a model parameter (``piston.mass``) or an input bias
    (``<input port>.bias``), with its prior σ, random-walk rate [unit/√s], prior mean (default:
    the model's value, 0 for a bias) and the plausible range its estimate is clamped to."""

    name: str
    sigma: float
    rate: float = 0.0
    value: float | None = None
    low: float = -math.inf  # the estimate is kept within [low, high] (a mass stays positive …)
    high: float = math.inf

    @property
    def bias_port(self) -> str | None:
        return self.name[:-5] if self.name.endswith(".bias") else None


@dataclass(frozen=True)
class FilterConfig:
    """``coordinates``: independent position outputs; ``measurements``: output → σ (its unit);
    ``accel_noise``: white-acceleration density per coordinate [rad/s²/√Hz for angles, m/s²/√Hz for
    lengths]; ``initial_sigma``: σ of unmeasured coordinates and speeds at (re)initialisation;
    ``fd_scale``: finite-difference step as a fraction of each component's prior σ; ``input_noise``:
    σ of each measured input's samples (process noise through the input's effect on the step);
    ``jacobian_every``: reuse F, H and Q for at most this many steps of the same length (the state
    itself is propagated by the full model at every step; the covariance with a slightly older
    linearisation); ``jacobian_tolerance``: refresh them sooner, by the coordinates' travel, so that
    the measurement Jacobian's change between two refreshes moves no predicted measurement by more
    than this many of its σ per σ of state uncertainty (:func:`.linearisation.adopt`);
    ``prediction_step``: 0 (default) predicts with the Simulator's own integrator (DOP853 under
    error control, the reference); a step [s] > 0 predicts, on a compiled Simulator, in classic
    Runge–Kutta steps of at most that length in each held input row (:func:`.nb_filter._predict_fixed`,
    a third of the right-hand sides; the finite-difference runs take the same steps), while the
    numpy path and the prediction across a gap keep the error-controlled integrator."""

    coordinates: tuple[str, ...]
    measurements: Mapping[str, float]
    accel_noise: float = 2.0
    augment: tuple[Augment, ...] = ()
    initial_sigma: tuple[float, float] = (0.01, 0.5)
    fd_scale: float = 1e-3
    input_noise: Mapping[str, float] = field(default_factory=dict)  # input port → σ of its samples
    jacobian_every: int = 1  # most steps between finite-difference Jacobians (the state is stepped every time)
    jacobian_tolerance: float = math.inf  # σ: the Jacobian change allowed between refreshes (inf: by count only)
    prediction_step: float = 0.0  # s: > 0, fixed Runge–Kutta steps of the compiled prediction; 0: DOP853

    def problems(self, sim: Simulator) -> list[str]:
        outs, params = set(sim.output_names()), {p.name for p in sim.parameters}
        inputs = {p.name for p in sim.input_ports}
        out = [f"estimator coordinate {c!r}: {exc}" for c in self.coordinates for exc in _coord_problem(c, outs)]
        out += [f"measured output {m!r} is not a model output" for m in self.measurements if m not in outs]
        out += [f"measurement σ of {m!r} must be > 0, got {s!r}" for m, s in self.measurements.items()
                if not (math.isfinite(s) and s > 0)]
        for a in self.augment:
            port = a.bias_port
            if port is not None and port not in inputs:
                out.append(f"augmented {a.name!r}: no input port {port!r} (inputs: {', '.join(sorted(inputs))})")
            elif port is None and a.name not in params:
                out.append(f"augmented {a.name!r} is not a model parameter or an input bias (<port>.bias)")
            if not (a.sigma > 0 and a.rate >= 0 and a.low < a.high):
                out.append(f"augmented {a.name!r}: need sigma > 0, rate >= 0 and low < high")
        if not (isinstance(self.jacobian_every, int) and self.jacobian_every >= 1):
            out.append(f"jacobian_every must be a whole number >= 1, got {self.jacobian_every!r}")
        if not self.jacobian_tolerance > 0:
            out.append(f"jacobian_tolerance must be > 0 (inf: refresh by count only), got {self.jacobian_tolerance!r}")
        if not (math.isfinite(self.prediction_step) and self.prediction_step >= 0):
            out.append(f"prediction_step must be a finite step >= 0 (0: the error-controlled integrator), "
                       f"got {self.prediction_step!r}")
        if not self.coordinates or not self.measurements:
            out.append("the estimator needs at least one coordinate and one measured output")
        return out


def _coord_problem(c: str, outs: set[str]) -> list[str]:
    try:
        sp = speed_of(c)
    except ValueError as exc:
        return [str(exc)]
    return [] if c in outs and sp in outs else ["not an output of this mechanism"]
