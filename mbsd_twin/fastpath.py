"""The compiled stepper: the same interface as ``dynamics.Stepper`` over the numba kernels and
the compiled DOP853 integrator. Chosen by ``SolverOptions(backend="auto")`` when the mechanism and
options are supported (``compiled_model.Unsupported`` otherwise)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import nb_dop853 as nd
from .compiled_model import Unsupported, pack
from .nb_solve import accelerations, output_vector, reactions

F = NDArray[Any]
_FAILURES = {nd.FAIL_STEP: "required step size became too small",
             nd.FAIL_SOLVE: "the saddle-point system became singular or the state non-finite",
             nd.FAIL_PROJECT: "projection onto the constraints failed (singular configuration)",
             nd.FAIL_MAX_STEPS: "too many internal steps in one call (a runaway or very stiff motion)"}


class CompiledStepper:
    """Persistent compiled integration; inputs held constant over each ``advance_to``."""

    def __init__(self, dyn: Any, t0: float, y0: F, inputs: dict[str, float]) -> None:
        opts = dyn.opts
        if opts.method != "DOP853":
            raise Unsupported(f"method {opts.method} (the compiled path integrates with DOP853)")
        baum = (opts.baumgarte_alpha, opts.baumgarte_beta) if opts.drift == "baumgarte" else None
        self.model, self.joints = pack(dyn.system, dyn.rows, baum)
        self.dyn, self.opts = dyn, opts
        self._advance_opts = (float(opts.rtol), float(opts.atol), float(opts.max_step), opts.drift == "projection",
                              float(opts.projection_tol), int(opts.max_steps))
        self.names = list(dyn.system.input_names)
        self.inputs = dict(inputs)
        self._u = self._input_array()
        self.t, self.y = float(t0), np.array(y0, dtype=float)
        self.f = self._rhs()
        self.h_abs = float(nd.initial_step(self.t, self.y, self.f, self._u, self.model, opts.rtol, opts.atol,
                                           opts.max_step))
        self.steps = 0

    def _input_array(self) -> F:
        return np.array([float(self.inputs.get(k, 0.0)) for k in self.names] or [0.0])

    def _rhs(self) -> F:
        dy, _ = nd.rhs(self.t, self.y, self._u, self.model)
        return np.asarray(dy)

    def set_inputs(self, inputs: dict[str, float]) -> None:
        if inputs != self.inputs:
            self.inputs = dict(inputs)
            self._u = self._input_array()
            self.f = self._rhs()

    def advance_to(self, t_end: float) -> None:
        if t_end <= self.t:
            return
        t, y, f, h, steps, status = nd.advance(self.t, self.y, self.f, self.h_abs, float(t_end), self._u,
                                               self.model, *self._advance_opts)
        self.t, self.y, self.f, self.h_abs = t, y, f, h
        self.steps += steps
        if status != nd.OK:
            from .dynamics import SolverFailure

            raise SolverFailure(f"integration failed at t={self.t:.9g} s: {_FAILURES[status]}", time=self.t)

    def evaluate(self) -> tuple[F, F, F, float, F]:
        """a, λ, joint reactions (n_joints, 3), elastic energy and C at the current point."""
        n = self.model[0]
        q, v = self.y[:n], self.y[n:2 * n]
        a, lam, el, _, _, C, Jv, _, _ = accelerations(self.t, q, v, self._u, self.model)
        return a, lam, reactions(q, lam, Jv, self.model[3], self.joints, n), float(el), C

    def output_vector(self, react_idx: NDArray[np.intp], effort_rows: NDArray[np.intp], e0: float) -> F:
        """Every Simulator output at the current point, in port order (see nb_solve.output_vector)."""
        return np.asarray(output_vector(self.t, self.y, self._u, self.model, self.joints,
                                        np.asarray(react_idx, dtype=np.int64),
                                        np.asarray(effort_rows, dtype=np.int64), float(e0)))

    def export(self) -> dict[str, object]:
        return {"t": self.t, "y": [float(x) for x in self.y], "f": [float(x) for x in self.f],
                "h_abs": self.h_abs, "steps": self.steps, "inputs": dict(self.inputs)}

    def restore(self, data: dict[str, Any]) -> None:
        self.t, self.y = float(data["t"]), np.array(data["y"], dtype=float)
        self.f, self.h_abs = np.array(data["f"], dtype=float), float(data["h_abs"])
        self.steps, self.inputs = int(data["steps"]), dict(data["inputs"])
        self._u = self._input_array()

    def reset_state(self, t: float, y: F) -> None:
        """Restart from (t, y) with a fresh initial step (the model stays packed)."""
        o = self.opts
        self.t, self.y = float(t), np.array(y, dtype=float)
        self.f = self._rhs()
        self.h_abs = float(nd.initial_step(self.t, self.y, self.f, self._u, self.model, o.rtol, o.atol, o.max_step))
