"""How the twin follows the rig between its sensor samples: the Kalman filter (default) or the
open-loop model (kept for comparison).

Both take, per output sample, the input values held over the interval since the previous one (see
:mod:`mbsd_twin.estimation.holds`), the inputs at the sample instant and the measured channels, and
return one row: the twin's value of every compared channel (``state``), measured − twin
(``residual``: the filter's innovations, i.e. measured − predicted), virtual sensors, and filter
figures (NIS, σ). Rig times are kept relative to the first synchronisation (``t_offset``) so the
Simulator's time stays small.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from ..estimation.ekf import Augment, FilterConfig, Innovation, StateEstimator, speed_of
from ..estimation.holds import Step
from ..estimation.records import GapNoise
from ..estimation.warm import load_kernels
from ..model.model import Mechanism
from ..simulation.ports import TUNABLE, apply_parameters
from ..simulation.simulator import Simulator
from ..solvers.dynamics import SolverOptions
from .batchpath import RowMaker
from .config.sections import AugmentConfig, CoreConfig
from .model import tuned, wrap_angle

Row = dict[str, dict[str, float]]


def solver_options(cfg: CoreConfig) -> SolverOptions:
    return SolverOptions(method=cfg.solver_method, rtol=cfg.solver_rtol, atol=cfg.solver_atol,
                         initial_velocity="project")


def _augment(a: AugmentConfig, sim: Simulator) -> Augment:
    """The filter's unknown for a configured one: prior from the model where not given, plausible
    range [prior/10, 10·prior] for a positive parameter where not given."""
    value = None if math.isnan(a.value) else a.value
    prior = value if value is not None else next((p.value for p in sim.parameters if p.name == a.name), 0.0)
    positive = not a.name.endswith(".bias") and prior > 0
    low = a.low if not math.isnan(a.low) else (0.1 * prior if positive else -math.inf)
    high = a.high if not math.isnan(a.high) else (10.0 * prior if positive else math.inf)
    return Augment(a.name, a.sigma, a.rate, value, low, high)


class Picker:
    """The few outputs a row needs, read from the Simulator's output vector by index (building the
    dict of every output at every sample cost more than the rest of the row)."""

    def __init__(self, sim: Simulator, names: list[str]) -> None:
        full = {n: i for i, n in enumerate(sim.output_names())}
        self.index = {n: full[n] for n in dict.fromkeys(names)}

    def __call__(self, sim: Simulator) -> dict[str, float]:
        vec = sim.output_vector()
        return {n: float(vec[i]) for n, i in self.index.items()}


class EkfTracker:
    """The twin as a state estimator (:class:`~mbsd_twin.estimation.ekf.StateEstimator`)."""

    def __init__(self, cfg: CoreConfig, mech: Mechanism, fast: bool = True) -> None:
        self.cfg, self.base = cfg, mech
        self.fast_row = RowMaker(self) if fast else None  # :mod:`.batchpath` (None: the reference path)
        self.params: dict[str, float] = {}
        self.options = solver_options(cfg)
        self.coords = cfg.coordinates or (cfg.compare[cfg.resync_angle],)
        self.by_output = {p: c for c, p in cfg.compare.items()}  # model output → channel
        self.t_offset = 0.0
        self._build()

    def _build(self) -> None:
        mech = apply_parameters(self.base, self.params) if self.params else self.base
        sim = Simulator(mech, self.options)
        c = self.cfg
        meas = {p: c.noise[ch] for ch, p in c.compare.items() if ch in c.noise}
        aug = tuple(_augment(a, sim) for a in c.augment)
        fc = FilterConfig(tuple(self.coords), meas, c.accel_noise, aug,
                          input_noise={p: c.noise[ch] for ch, p in c.inputs.items() if ch in c.noise},
                          jacobian_every=c.jacobian_every, jacobian_tolerance=c.jacobian_tolerance,
                          prediction_step=c.prediction_step)
        if sim.backend == "compiled":
            load_kernels()  # the filter's compiled kernels now, not on the first samples of the stream
        self.est = StateEstimator(sim, fc)
        self.virtual = virtual_outputs(c, sim.output_names())
        self.picker = Picker(sim, [*c.compare.values(), *c.state_extra, *self.virtual])

    def mechanism(self) -> Mechanism:
        return self.est.sim.mechanism

    def checkpoint(self) -> tuple[Any, ...]:
        """The tracker's whole state (the Simulator's snapshot, the filter's x, P, inputs, applied
        parameters, …; the parameters set) for :meth:`restore`."""
        est = self.est
        return est, est.sim.snapshot(), _copied(vars(est)), _copied(vars(self))

    def restore(self, cp: tuple[Any, ...]) -> None:
        """Return to the state of :meth:`checkpoint` (also after a ``set_param`` rebuilt the filter)."""
        est, snap, est_state, own = cp
        vars(self).update(_copied(own))
        self.est = est
        vars(est).update(_copied(est_state))
        est.sim.restore(snap)

    def mechanism_outputs(self) -> list[str]:
        return self.est.sim.output_names()

    def set_param(self, name: str, value: float) -> None:
        """A model parameter (rebuilds the model: re-initialise next) or a tunable solver setting."""
        if name in TUNABLE:
            self.options = tuned(self.options, name, value)
        else:
            apply_parameters(self.base, {**self.params, name: value})  # validates
            self.params[name] = value
        self._build()

    def start(self, t_rig: float, meas: dict[str, float], inputs: dict[str, float], first: bool,
              reset_unknowns: bool = False) -> None:
        """(Re)initialise at rig time ``t_rig`` from the measured channels (the augmented unknowns
        back to their prior with ``reset_unknowns``: after a divergence or a solver failure)."""
        if first:
            self.t_offset = t_rig
        pos = {o: meas[self.by_output[o]] for o in self.coords if self.by_output.get(o) in meas}
        vel = {speed_of(o): meas[self.by_output[speed_of(o)]] for o in self.coords
               if self.by_output.get(speed_of(o)) in meas}
        self.est.initialize(t_rig - self.t_offset, pos, vel, inputs, reset_unknowns)

    def step(self, steps: list[Step], at: dict[str, float], meas: dict[str, float],
             gap: GapNoise | None = None) -> tuple[Row, Innovation | None]:
        """Predict through ``steps`` (rig times) and correct with ``meas``; the row."""
        inn = self.est.sample([(t - self.t_offset, v) for t, v in steps], at,
                              {p: meas[c] for c, p in self.cfg.compare.items() if c in meas}, gap)
        return self.row(at, meas, inn), inn

    def out_of_bounds(self, row: Row) -> bool:
        return False

    def gap_spread(self) -> float:
        """The largest σ of a coordinate the last prediction across a gap gave (its unit)."""
        return self.est.gap_sd

    def undo_gap_correction(self) -> None:
        """Back to the prediction across the last gap, before its (refused) correction: a
        re-initialisation that keeps the unknowns then keeps them as they were, not as a
        correction that found no state explaining the measurements moved them."""
        self.est.undo_gap_correction()

    def shift_time(self, shift: float) -> None:
        """Rig time moves by ``shift`` s against the model's (a clock step of the rig)."""
        self.t_offset += shift

    def row(self, at: dict[str, float], meas: dict[str, float], inn: Innovation | None) -> Row:
        """The outputs at the current estimate; residuals: the innovations (right after a start,
        without one: measured − estimate)."""
        if self.fast_row is not None and inn is not None:
            return self.fast_row(at, meas, inn)
        return self.reference_row(at, meas, inn)

    def reference_row(self, at: dict[str, float], meas: dict[str, float], inn: Innovation | None) -> Row:
        """:meth:`row` on the per-sample reference path (also the fast path's after a start)."""
        c = self.cfg
        o = self.picker(self.est.sim)
        state = {ch: o[p] for ch, p in c.compare.items()} | {p: o[p] for p in c.state_extra}
        resid = {self.by_output[m]: float(v) for m, v in zip(inn.names, inn.nu, strict=True)} if inn else \
            residuals(c, meas, o)
        virtual = {p: o[p] for p in self.virtual} | {p: at.get(p, 0.0) for p in c.inputs.values()}
        est = self.est.estimates()
        for port in self.est.bias:  # measured (or 0 when unmeasured) + bias: the input that acts
            b = est[f"{port}.bias"]
            virtual[f"{port}.estimate"] = at.get(port, 0.0) + b[0]
            virtual[f"{port}.estimate_sd"] = b[1]
        filt = {"nis": inn.nis if inn else math.nan} | {f"{k}.sd": v[1] for k, v in est.items()}
        filt |= {k: v[0] for k, v in est.items() if k not in self.picker.index}
        return {"state": state, "residual": resid, "virtual": virtual, "filter": filt}


class OpenLoopTracker:
    """The model driven by the measured inputs alone, re-synchronised from the measured angle and
    speed of one body (at a start, a gap, or when a residual leaves its ``resync_bounds``)."""

    def __init__(self, cfg: CoreConfig, mech: Mechanism) -> None:
        from .model import ModelRunner

        self.cfg = cfg
        body = cfg.compare[cfg.resync_angle].split(".")[0]
        self.runner = ModelRunner(mech, body, solver_options(cfg))
        self.runner.resync(0.0, mech.body(body).angle, mech.body(body).omega)  # builds and checks the model
        self.virtual = virtual_outputs(cfg, self.mechanism_outputs())

    def mechanism(self) -> Mechanism:
        return self.runner.mechanism()

    def mechanism_outputs(self) -> list[str]:
        return list(self.runner.outputs())

    def set_param(self, name: str, value: float) -> None:
        self.runner.set_param(name, value)

    def start(self, t_rig: float, meas: dict[str, float], inputs: dict[str, float], first: bool,
              reset_unknowns: bool = False) -> None:
        c = self.cfg
        self.runner.resync(t_rig, meas[c.resync_angle], meas[c.resync_speed])
        self.runner.set_inputs(inputs)

    def row(self, at: dict[str, float], meas: dict[str, float], inn: None) -> Row:
        return self.step_outputs(at, meas)

    def step(self, steps: list[Step], at: dict[str, float], meas: dict[str, float],
             gap: GapNoise | None = None) -> tuple[Row, None]:
        for t, values in steps:
            self.runner.advance(t, values)
        return self.step_outputs(at, meas), None

    def step_outputs(self, at: dict[str, float], meas: dict[str, float]) -> Row:
        self.runner.set_inputs(at)
        o = self.runner.outputs()
        c = self.cfg
        state = {ch: o[p] for ch, p in c.compare.items()} | {p: o[p] for p in c.state_extra}
        resid = residuals(c, meas, o)
        virtual = {p: o[p] for p in self.virtual} | {p: at.get(p, 0.0) for p in c.inputs.values()}
        return {"state": state, "residual": resid, "virtual": virtual, "filter": {}}

    def shift_time(self, shift: float) -> None:
        self.runner.t_offset += shift

    def out_of_bounds(self, row: Row) -> bool:
        return any(abs(row["residual"].get(ch, 0.0)) > b for ch, b in self.cfg.resync_bounds.items())


def residuals(cfg: CoreConfig, meas: dict[str, float], outputs: dict[str, float]) -> dict[str, float]:
    """Measured − model per compared channel (angles wrapped to (−π, π])."""
    return {ch: (wrap_angle(meas[ch] - outputs[p]) if p.endswith(".theta") else meas[ch] - outputs[p])
            for ch, p in cfg.compare.items() if ch in meas}


def virtual_outputs(cfg: CoreConfig, outputs: list[str]) -> tuple[str, ...]:
    """The outputs published as virtual sensors: ``cfg.virtual``, or every joint reaction."""
    return cfg.virtual or tuple(n for n in sorted(outputs) if n.endswith((".fx", ".fy", ".mz")))


def _copied(d: dict[str, Any]) -> dict[str, Any]:
    """A copy of an object's attributes whose arrays, dicts and lists are copied too (the filter
    changes some in place); other attributes are shared (replaced, never changed in place)."""
    return {k: copy.copy(v) if isinstance(v, dict | list) or hasattr(v, "copy") and hasattr(v, "shape") else v
            for k, v in d.items()}


def make_tracker(cfg: CoreConfig, mech: Mechanism, fast: bool = True) -> EkfTracker | OpenLoopTracker:
    """The configured tracker (``fast``: its rows by :mod:`.batchpath`, else the reference path)."""
    return EkfTracker(cfg, mech, fast) if cfg.estimator == "ekf" else OpenLoopTracker(cfg, mech)
