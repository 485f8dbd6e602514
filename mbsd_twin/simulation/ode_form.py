"""The state-space (ODE) form of a mechanism by coordinate partitioning: what a Model Exchange FMU
exposes (issue #34), and what any ODE integrator can integrate.

    ode = OdeForm(sim)                    # at the Simulator's time, state, inputs and parameters
    x = ode.x0                            # free coordinates, free speeds, three energy integrals
    xdot = ode.derivatives(t, x)          # the saddle-point accelerations at the solved state
    y = ode.outputs(t, x)                 # every Simulator output, in output_ports order
    if ode.completed_step(t, x):          # the partition's conditioning has degraded
        x = ode.repartition(t, x)         # new free coordinates, the state re-mapped

**State.** x = [q_F, v_G, E_diss, W_in, W_con]: the free coordinates F and free speeds G the
Simulator chose (its ``*_start`` parameters, ``start_values.free_coordinates``; G = F unless a
knife edge constrains speeds only), then the energy integrals the Simulator's state carries
(dissipated energy, input work and the constraint forces' work, J), so that every energy output
— ``energy.balance_error`` included — is a function of (t, x).

**Evaluation at (t, x).** The dependent coordinates come from Newton on the position constraints
with q_F held, warm-started from the last evaluation's solution, to ``tol`` (about round-off);
the dependent speeds from the velocity constraints with v_G held — both by the engine's
``Dynamics.constrained_state`` (the compiled stepper's on a compiled Simulator), whose least-change
steps are exact Newton steps here (the dependent block of the Jacobian is square and invertible
while the partition is well conditioned). A residual left above ``fail_tol`` raises
:class:`AssemblyError` naming the constraints. The accelerations and energy rates come from the
engine's saddle-point solve — the compiled stepper's right-hand side (:func:`compiled_rates`) on a
compiled Simulator, else ``Dynamics.evaluate`` and ``dynamics.energy_rates``: ẋ = [v_F, a_G, rates];
the outputs are the Simulator's (its compiled output vector on a copy of its stepper, else
``physics.outputs.evaluated_outputs``).

**Re-partitioning.** ``solvers/partition.py`` defines the conditioning c ∈ [0, 1] of the free
coordinates (σ_min of their rows of an orthonormal basis of the scaled tangent space) and the best
choice. :meth:`completed_step` is True when c < ``threshold`` and the best choice is at least
``partition.HYSTERESIS`` times better; :meth:`repartition` then re-chooses the free coordinates
and speeds and returns the same mechanical state in the new coordinates (``changes`` logs each).
The directional derivatives of ẋ and the outputs (:meth:`directional`, :meth:`jacobians`):
``ode_derivatives.py``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ..compiled import nb_solve
from ..compiled.fastpath import CompiledStepper
from ..errors import AssemblyError, PortError, SolverFailure
from ..physics.outputs import evaluated_outputs
from ..solvers import partition
from ..solvers.dynamics import Evaluation, energy_rates
from ..solvers.newton import coordinate_scale, length_scale
from . import ode_derivatives
from .start_values import NO_SLIP

if TYPE_CHECKING:
    from .simulator import Simulator

F = NDArray[Any]
log = logging.getLogger(__name__)
ENERGY_STATES = ("energy.dissipated", "energy.input_work", "energy.constraint_work")
_SPEED = {"x": "vx", "y": "vy", "theta": "omega"}


@dataclass(frozen=True)
class PartitionChange:
    """One re-partition: time [s], the free coordinates and speeds before and after (state names)
    and the conditioning c of the partition before and after."""

    time: float
    before: tuple[str, ...]
    after: tuple[str, ...]
    conditioning_before: float
    conditioning_after: float


@dataclass
class Solved:
    """The full state at one (t, x, inputs): positions, velocities, accelerations and energy rates,
    and the numpy path's saddle-point evaluation once the outputs needed it."""

    key: tuple[float, bytes, tuple[float, ...]]
    q: F
    v: F
    y: F  # [q, v, E_diss, W_in, W_con] as the Simulator's state
    a: F
    rates: tuple[float, float, float]
    ev: Evaluation | None


def compiled_rates(stepper: CompiledStepper, t: float, q: F, v: F,
                   inputs: Mapping[str, float]) -> tuple[F, tuple[float, float, float]]:
    """The accelerations and energy rates (dissipated, input, constraint power) of the compiled
    stepper's right-hand side (``nb_dop853._rhs``) at (t, q, v), by ``nb_solve.accelerations``
    on its packed model: what ``Dynamics.evaluate`` and ``energy_rates`` give on the numpy path."""
    u = np.array([float(inputs.get(k, 0.0)) for k in stepper.names] or [0.0])
    a, lam, _, di, pin, _, Jv, _, ok = nb_solve.accelerations(t, q, v, u, stepper.model)
    if not ok:
        raise SolverFailure(f"the saddle-point solve failed at t={t:.9g} s", time=t)
    Jc = stepper.model[3]
    vj = np.where(Jc >= 0, v[np.maximum(Jc, 0)], 0.0)
    return np.asarray(a), (float(di), float(pin), float(-(lam * (Jv * vj).sum(axis=1)).sum()))


class OdeForm:
    """A Simulator's mechanism as an ODE in its free coordinates (module docstring)."""

    def __init__(self, sim: Simulator, threshold: float = partition.THRESHOLD, tol: float = 1e-14) -> None:
        """``threshold``: the conditioning below which :meth:`completed_step` asks for a
        re-partition; ``tol``: Newton's tolerance on max|C| relative to the length scale (above
        round-off, so the dependent coordinates are as smooth in x as the arithmetic allows)."""
        self.system, self.dyn = sim.system, sim._dyn
        s, n = self.system, self.system.n_coord
        self.n = n
        L = max(1.0, length_scale(s))
        self.tol, self.fail_tol, self.threshold = tol * L, 1e-9 * L, threshold
        self.rows_v = np.asarray(self.dyn.rows, dtype=np.intp)
        self.rows_q = np.array([r for r in self.rows_v if not s.constraint_names[int(r)].endswith(NO_SLIP)],
                               dtype=np.intp)
        self.scale = coordinate_scale(s)
        nb = s.n_body
        self.candidates = np.array([3 * b + 2 for b in range(nb)] + [3 * b for b in range(nb)]
                                   + [3 * b + 1 for b in range(nb)], dtype=np.intp)
        stepper = sim._stepper
        self._compiled = stepper if isinstance(stepper, CompiledStepper) else None  # its kernels, not its state
        # the outputs on the compiled path: a copy of the stepper holds the state they are read from
        self._out_stepper = copy.deepcopy(stepper) if self._compiled is not None else None
        self._react_idx, self._effort_rows = sim._react_idx, sim._effort_rows
        free = sim._free
        assert free is not None
        self.free_q, self.free_v = (np.array(f, dtype=np.intp) for f in free)
        y = np.array(sim._stepper.y, dtype=float)
        self.t0, self._q, self._v = sim.time, y[:n].copy(), y[n:2 * n].copy()
        self.x0 = np.concatenate([self._q[self.free_q], self._v[self.free_v], y[2 * n:2 * n + 3]])
        self.inputs = {p.name: sim.get_input(p.name) for p in sim.input_ports}
        self.output_names = sim.output_names()
        self._tail = self.output_names[sim._n_kin:]
        self._load_names, self._e0 = list(sim._load_names), float(sim._e0)
        self.changes: list[PartitionChange] = []
        self._last: Solved | None = None

    # ------------------------------------------------------------ layout
    @property
    def n_states(self) -> int:
        return len(self.free_q) + len(self.free_v) + 3

    @property
    def state_names(self) -> list[str]:
        """The state components' names: the free coordinates' and speeds' outputs, the integrals'."""
        names = self.system.coordinate_names
        speeds = []
        for k in self.free_v:
            body, _, axis = names[int(k)].rpartition(".")
            speeds.append(f"{body}.{_SPEED[axis]}")
        return [names[int(k)] for k in self.free_q] + speeds + list(ENERGY_STATES)

    def state_of(self, q: F, v: F, energies: F) -> F:
        """x for the full positions q, velocities v (consistent) and the three energy integrals."""
        return np.concatenate([q[self.free_q], v[self.free_v], energies])

    def set_input(self, name: str, value: float) -> None:
        if name not in self.inputs:
            raise PortError(f"unknown input port {name!r}; inputs are: {', '.join(self.inputs) or 'none'}",
                            name=name)
        self.inputs[name] = float(value)

    def set_inputs(self, values: Mapping[str, float]) -> None:
        for name, value in values.items():
            self.set_input(name, value)

    # ---------------------------------------------------------- evaluation
    def solve(self, t: float, x: F) -> Solved:
        """The full state at (t, x) with the current inputs (cached for the last point)."""
        x = np.asarray(x, dtype=float)
        key = (float(t), x.tobytes(), tuple(self.inputs.values()))
        if self._last is not None and self._last.key == key:
            return self._last
        fq, fv = len(self.free_q), len(self.free_v)
        q, v = self._q.copy(), self._v.copy()
        q[self.free_q], v[self.free_v] = x[:fq], x[fq:fq + fv]
        q, v, left = (self._compiled or self.dyn).constrained_state(float(t), q, v, self.free_q, self.free_v,
                                                                    self.tol)
        if not left <= self.fail_tol:
            self._fail(float(t), q, v, left)
        self._q, self._v = q, v
        y = np.concatenate([q, v, x[fq + fv:fq + fv + 3]])
        if self._compiled is None:
            ev = self.dyn.evaluate(float(t), q, v, self.inputs)
            self._last = Solved(key, q, v, y, ev.a, energy_rates(ev, v), ev)
        else:
            a, rates = compiled_rates(self._compiled, float(t), q, v, self.inputs)
            self._last = Solved(key, q, v, y, a, rates, None)
        return self._last

    def evaluation(self, t: float, x: F) -> tuple[Solved, Evaluation]:
        """The solved state at (t, x) and the numpy path's evaluation there (for the outputs)."""
        sol = self.solve(t, x)
        if sol.ev is None:
            sol.ev = self.dyn.evaluate(float(t), sol.q, sol.v, self.inputs)
        return sol, sol.ev

    def _fail(self, t: float, q: F, v: F, left: float) -> None:
        """Raise :class:`AssemblyError` naming the constraint rows with the largest residuals."""
        s = self.system
        C, Cq, Ct = s.evaluate_batch(q[None, :], np.array([t]))
        assert Cq is not None
        res = np.abs(C[0])
        res[self.rows_v] = np.maximum(res[self.rows_v], np.abs(Cq[0][self.rows_v] @ v + Ct[0][self.rows_v]))
        worst = [(s.constraint_names[int(r)], float(res[r])) for r in np.argsort(-res)[:3]]
        raise AssemblyError(f"{s.mechanism.source}: the dependent coordinates cannot be found from the free "
                            f"ones ({', '.join(self.state_names[:len(self.free_q)])})", residual=float(left),
                            iterations=30, time=t, worst=worst)

    def derivatives(self, t: float, x: F) -> F:
        """ẋ = [v_F, a_G, dissipated power, input power, constraint power] at (t, x)."""
        sol = self.solve(t, x)
        return np.concatenate([sol.v[self.free_q], sol.a[self.free_v], sol.rates])

    def outputs(self, t: float, x: F) -> F:
        """Every Simulator output at (t, x), in ``output_names`` (the output ports') order: as the
        Simulator gives them, by its compiled output vector on a compiled Simulator."""
        if self._out_stepper is None:
            sol, ev = self.evaluation(t, x)
            return self.outputs_at(t, sol.y, ev)
        sol = self.solve(t, x)
        self._out_stepper.reset_state(float(t), sol.y, self.inputs)
        return np.array(self._out_stepper.output_vector(self._react_idx, self._effort_rows, self._e0))

    def outputs_at(self, t: float, y: F, ev: Evaluation, inputs: Mapping[str, float] | None = None) -> F:
        """The outputs at the Simulator state y with its evaluation ``ev`` (under ``inputs``,
        default the current ones)."""
        return evaluated_outputs(self.system, float(t), y, ev, dict(self.inputs if inputs is None else inputs),
                                 self._tail, self._load_names, self._e0)

    def directional(self, t: float, x: F, dx: F, du: Mapping[str, float] | None = None) -> tuple[F, F]:
        """(dẋ, dy): the derivatives of ẋ and of every output at (t, x) along the seed ``dx``
        (states) and ``du`` (inputs by port name); ``ode_derivatives.directional``."""
        return ode_derivatives.directional(self, t, x, dx, du)

    def jacobians(self, t: float, x: F) -> tuple[F, F, F, F]:
        """(∂ẋ/∂x, ∂ẋ/∂u, ∂y/∂x, ∂y/∂u) at (t, x), inputs in port order."""
        return ode_derivatives.jacobians(self, t, x)

    # ---------------------------------------------------------------- state
    def export(self) -> dict[str, Any]:
        """What :meth:`restore` needs to continue bit-identically (JSON-able): the partition, the
        Newton warm start, the inputs, the number of re-partitions and the cached solution."""
        last = self._last
        cached = None if last is None else {
            "t": last.key[0], "x": np.frombuffer(last.key[1]).tolist(), "u": list(last.key[2]), "q": last.q.tolist(),
            "v": last.v.tolist(), "y": last.y.tolist(), "a": last.a.tolist(), "rates": list(last.rates)}
        return {"free_q": self.free_q.tolist(), "free_v": self.free_v.tolist(), "q": self._q.tolist(),
                "v": self._v.tolist(), "inputs": dict(self.inputs), "changes": len(self.changes), "last": cached}

    def restore(self, data: dict[str, Any]) -> None:
        self.free_q, self.free_v = (np.array(data[k], dtype=np.intp) for k in ("free_q", "free_v"))
        self._q, self._v = np.array(data["q"], dtype=float), np.array(data["v"], dtype=float)
        self.set_inputs(data["inputs"])
        del self.changes[int(data["changes"]):]
        self._last, d = None, data["last"]
        if d is not None:
            key = (float(d["t"]), np.array(d["x"], dtype=float).tobytes(), tuple(float(u) for u in d["u"]))
            q, v, y, a = (np.array(d[k], dtype=float) for k in ("q", "v", "y", "a"))
            r = [float(x) for x in d["rates"]]
            self._last = Solved(key, q, v, y, a, (r[0], r[1], r[2]), None)

    # ------------------------------------------------------ partitioning
    def _bases(self, q: F, t: float) -> tuple[F, F]:
        """Orthonormal scaled tangent bases (positions' over the position rows, speeds' over all)."""
        _, Cq, _ = self.system.evaluate_batch(q[None, :], np.array([t]))
        assert Cq is not None
        Nq = partition.tangent_basis(Cq[0][self.rows_q], self.scale, len(self.free_q))
        Nv = Nq if len(self.rows_q) == len(self.rows_v) else \
            partition.tangent_basis(Cq[0][self.rows_v], self.scale, len(self.free_v))
        return Nq, Nv

    def conditioning(self, t: float, x: F) -> float:
        """The partition's conditioning c at (t, x) (``solvers/partition.py``): the smaller of the
        free coordinates' and the free speeds'."""
        Nq, Nv = self._bases(self.solve(t, x).q, float(t))
        return min(partition.conditioning(Nq, self.free_q), partition.conditioning(Nv, self.free_v))

    def _best(self, t: float, x: F) -> tuple[float, NDArray[np.intp], NDArray[np.intp], float]:
        """(current c, best free coordinates, best free speeds, their c) at (t, x)."""
        Nq, Nv = self._bases(self.solve(t, x).q, float(t))
        now = min(partition.conditioning(Nq, self.free_q), partition.conditioning(Nv, self.free_v))
        bq, bv = partition.best_free(Nq, self.candidates), partition.best_free(Nv, self.candidates)
        return now, bq, bv, min(partition.conditioning(Nq, bq), partition.conditioning(Nv, bv))

    def completed_step(self, t: float, x: F) -> bool:
        """After an accepted integrator step: True when the partition should change (c below the
        threshold and a choice at least ``partition.HYSTERESIS`` times better exists)."""
        if self.conditioning(t, x) >= self.threshold:
            return False
        now, _, _, best = self._best(t, x)
        return best >= partition.HYSTERESIS * now

    def repartition(self, t: float, x: F) -> F:
        """Re-choose the free coordinates and speeds at (t, x) (the best-conditioned choice) and
        return the state in them; the mechanical state is unchanged."""
        sol = self.solve(t, x)
        now, bq, bv, best = self._best(t, x)
        before = tuple(self.state_names[:len(self.free_q) + len(self.free_v)])
        self.free_q, self.free_v = bq, bv
        self._last = None
        new = self.state_of(sol.q, sol.v, sol.y[2 * self.n:])
        change = PartitionChange(float(t), before, tuple(self.state_names[:len(bq) + len(bv)]), now, best)
        self.changes.append(change)
        log.info("re-partition at t=%.9g s: %s (c=%.3g) -> %s (c=%.3g)", t, ", ".join(change.before), now,
                 ", ".join(change.after), best)
        return new
