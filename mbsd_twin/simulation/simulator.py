"""The co-simulation core: a mechanism with named, typed ports, a persistent stepper and a state.

    sim = Simulator(mech, options=SolverOptions())
    sim.set_input("motor_torque", 2.0)
    sim.advance_to(0.001)
    sim.get_output("main_bearing.fx")
    blob = sim.get_state(); ...; sim.set_state(blob)

Inputs are held constant between calls (zero-order hold). The integrator persists across calls;
``get_state`` holds everything needed to continue bit-identically (JSON bytes, also in a new
process); ``reset`` returns to the initial state.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..compiled.fastpath import CompiledStepper
from ..errors import AssemblyError, MechanismError, PortError, Problem
from ..model.model import Mechanism
from ..model.plausibility import numerical
from ..model.validation import item_problems
from ..physics.output_spec import OutputSpec
from ..physics.outputs import evaluated_outputs
from ..physics.system import compile_mechanism
from ..solvers.dynamics import Dynamics, SolverOptions, Stepper
from ..solvers.initial_velocity import InitialVelocityReport, VelocityChange
from .live_parameters import Slot, live_slot
from .ports import (
    TUNABLE,
    Parameter,
    Port,
    apply_parameters,
    input_ports,
    model_parameters,
    output_specs,
    solver_parameters,
)
from .simulator_compiled import CompiledAccess
from .simulator_state import StateAccess
from .start_values import StartValues, free_coordinates
from .work import metered

F = NDArray[Any]


class Simulator(CompiledAccess, StateAccess):
    """A mechanism ready to be stepped. Build → (set parameters) → run."""

    def __init__(self, mech: Mechanism, options: SolverOptions | None = None, t0: float = 0.0) -> None:
        self._base = mech
        self._table = model_parameters(mech)
        self._model_id = hashlib.sha256(repr(mech).encode()).hexdigest()[:16]
        self._overrides: dict[str, float] = {}
        self._options = options or SolverOptions()
        self._t0 = float(t0)
        self._free: tuple[list[int], list[int]] | None = None  # the free coordinates, chosen at the first build
        problems = self._options.problems()
        if problems:
            raise MechanismError([Problem("SolverOptions", p) for p in problems], source=mech.source)
        with numerical(mech, "building the simulator"):
            self._build()

    # ------------------------------------------------------------------ build
    def _build(self) -> None:
        model = {k: v for k, v in self._overrides.items() if k in self._table}  # the others: start values
        mech = apply_parameters(self._base, model) if model else self._base
        self.mechanism = mech
        self.system = compile_mechanism(mech)
        self._dyn = Dynamics(self.system, self._options, self._t0)
        self._start_inputs = {p.name: p.start for p in input_ports(mech)}
        self._inputs = dict(self._start_inputs)
        self._y0 = self._dyn.initial_state(self._t0)
        if self._free is None:  # on the mechanism as written: the start parameters' names stay
            self._free = free_coordinates(self.system, self._y0[:self.system.n_coord], self._t0, self._dyn.rows)
        self._starts = StartValues(self.system, self._free, self._y0)
        self._y0 = self._starts.impose(self._dyn, self._t0, self._overrides)
        self._stepper = self._dyn.make_stepper(self._t0, self._y0.copy(), self._inputs)
        self._slots: dict[str, Slot | None] = {}
        self._specs = output_specs(self.system)
        self._prepare_outputs()
        self._set_baseline()

    def _set_baseline(self) -> None:
        """e0 ← the total energy [J] at the current state: ``energy.balance_error`` counts from it."""
        self._cache: tuple[float, bytes, F] | None = None
        self._e0 = 0.0
        self._e0 = float(self.output_vector()[self._index["energy.total"]])
        self._cache = None  # computed with e0 = 0

    def _restart(self) -> None:
        """Back to the initial state and start inputs under the current model (what a rebuild with
        the current parameters starts from)."""
        self._inputs = dict(self._start_inputs)
        if isinstance(self._stepper, CompiledStepper):
            self._stepper.reset_state(self._t0, self._y0, self._inputs)
        else:
            self._stepper = Stepper(self._dyn, self._t0, self._y0.copy(), self._inputs)
        self._set_baseline()

    def _restart_at(self, t: float, q: F, v: F) -> None:
        """Continue from time t [s], positions q and velocities v with the current inputs: an
        integrator restart (on the compiled path with the step size its error control last
        proposed), the energy integrals at zero and the balance counted from here."""
        self._stepper.reset_state(t, np.concatenate([q, v, np.zeros(3)]), self._inputs, streaming=True)
        self._set_baseline()

    @property
    def options(self) -> SolverOptions:
        return self._options

    @property
    def input_ports(self) -> list[Port]:
        return [replace(p, start=self._inputs[p.name]) for p in input_ports(self.mechanism)]

    @property
    def output_ports(self) -> list[Port]:
        return [Port(s.name, s.unit, s.description, "output") for s in self._specs]

    @property
    def output_specs(self) -> list[OutputSpec]:
        return list(self._specs)

    @property
    def parameters(self) -> list[Parameter]:
        fixed = [replace(p, value=self._overrides.get(p.name, p.value)) for p, _ in self._table.values()]
        return fixed + self._starts.parameters(self._overrides) + solver_parameters(self._options)

    @property
    def time(self) -> float:
        return self._stepper.t

    @property
    def redundant_constraints(self) -> list[str]:
        return list(self._dyn.redundant)

    @property
    def initial_velocity_changes(self) -> list[VelocityChange]:
        """The initial velocities ``initial_velocity="project"`` moved onto the constraints (name,
        unit, given, value); empty when the mechanism's were consistent. The violated joints and
        drivers: ``initial_velocity_report.violations``."""
        return list(self._dyn.initial_report.changes)

    @property
    def initial_velocity_report(self) -> InitialVelocityReport:
        """The velocities changed and the constraint rows (joints, drivers) the given ones violated."""
        return self._dyn.initial_report

    @property
    def backend(self) -> str:
        """"compiled" (the numba path) or "numpy": where this Simulator runs (``SolverOptions.backend``)."""
        return "compiled" if isinstance(self._stepper, CompiledStepper) else "numpy"

    # ------------------------------------------------------------ inputs
    def set_input(self, name: str, value: float) -> None:
        if name not in self._inputs:
            raise PortError(f"unknown input port {name!r}; inputs are: {', '.join(self._inputs) or 'none'}",
                            name=name)
        v = float(value)
        if not math.isfinite(v):
            raise PortError(f"input {name!r} must be finite, got {value!r}", name=name)
        self._inputs[name] = v
        self._cache = None  # accelerations and reactions feel the input at once (direct feedthrough)

    def get_input(self, name: str) -> float:
        if name not in self._inputs:
            raise PortError(f"unknown input port {name!r}", name=name)
        return self._inputs[name]

    # ---------------------------------------------------------- parameters
    def set_parameter(self, name: str, value: float, *, keep_state: bool = False) -> None:
        """Change a parameter.

        A fixed parameter (``crank.mass``, ``guide.p1_x``, …) by default restarts the simulation
        from the initial state and start inputs under the new value. With ``keep_state`` the time,
        positions, velocities and inputs are kept and the integration continues from the current
        point under the new value; the energy integrals restart at zero and
        ``energy.balance_error`` counts from the new model's energy there (as after
        :meth:`set_configuration`). Positions that a geometry parameter (a joint point) makes
        inconsistent are moved onto the new constraints as little as possible (least squares);
        :class:`AssemblyError` if that is impossible. Physical parameters (mass, inertia, cg,
        stiffness, damping, viscous friction: see ``live_parameters``) change in place in
        microseconds; the others rebuild the model. A tunable parameter (``solver.rtol``,
        ``solver.max_step``) always keeps the state. A start value (``<body>.theta_start``,
        ``<body>.omega_start`` … of the free coordinates, see ``start_values``) changes the
        initial state. Unknown name: :class:`PortError`; a rejected
        value (:class:`MechanismError` naming it) or an impossible projection leaves the
        simulator as it was."""
        if name in TUNABLE:
            self._set_tunable(name, value)
            return
        if name in self._starts.params:
            self._set_start(name, value, keep_state)
            return
        if name not in self._table:
            raise PortError(f"unknown parameter {name!r}", name=name)
        v = float(value)
        if self._set_live(name, v):  # checked before anything is written: a rejected value changes nothing
            if keep_state:
                self._continue_at(self.time, self._stepper.y, project=False)
            else:
                self._restart()
            return
        before, t, y = self.snapshot(), self.time, self._stepper.y.copy()
        try:  # a rebuild
            self._overrides[name] = v
            self._build()
            if keep_state:
                self._inputs = dict(before.inputs)
                self._continue_at(t, y, project=True)
        except Exception:
            self.restore(before)
            raise

    def _set_start(self, name: str, value: float, keep_state: bool) -> None:
        """A free coordinate's or speed's start value (``start_values``): the initial state is
        assembled again with it (an impossible value raises and changes nothing); the simulation
        restarts from there unless ``keep_state``."""
        overrides = {**self._overrides, name: self._starts.check(name, value)}
        self._y0 = self._starts.impose(self._dyn, self._t0, overrides)
        self._overrides = overrides
        if not keep_state:
            self._restart()

    def _set_tunable(self, name: str, value: float) -> None:
        key = name.split(".")[1]
        v = math.inf if key == "max_step" and float(value) <= 0 else float(value)
        change: dict[str, Any] = {key: v}
        opts = replace(self._options, **change)
        problems = opts.problems()
        if problems:
            raise PortError(f"parameter {name}: {'; '.join(problems)}", name=name)
        saved, e0, inputs = self._stepper.export(), self._e0, dict(self._inputs)
        self._options = opts
        self._build()
        self._e0, self._inputs = e0, inputs
        self._stepper.restore(saved)
        self._cache = None

    def _set_live(self, name: str, v: float) -> bool:
        """Change a live parameter in place in the mechanism, the numpy system and the compiled
        model (the integrator is not restarted); False if ``name`` is not live here."""
        if name not in self._slots:
            self._slots[name] = live_slot(self.system, name)
        slot = self._slots[name]
        if slot is None:
            return False
        mech = self._table[name][1](self.mechanism, v)
        problems = item_problems(mech, name.rpartition(".")[0])
        if problems:
            raise MechanismError(problems, source=f"{mech.source} (parameters {name})")
        slot.write(v)
        if isinstance(self._stepper, CompiledStepper):
            self._stepper.set_model_value(slot.packed, slot.row, slot.col, v)
        self.mechanism = self.system.mechanism = mech
        self.system.bodies = mech.bodies
        self._overrides[name] = v
        self._cache = None
        return True

    def _continue_at(self, t: float, y: F, project: bool) -> None:
        """Continue from time t [s] and the state y (q, v, …) of the model before a parameter
        change; with ``project``, q and v are first moved onto the constraints (least change)."""
        n = self.system.n_coord
        q, v = y[:n].copy(), y[n:2 * n].copy()
        if project:
            q, v, left = self._constrained_state(t, q, v, [], [])
            if left > 1e-8:
                raise AssemblyError(f"{self.mechanism.source}: the state cannot be kept: the positions do not "
                                    "fit the new geometry", residual=left, iterations=30, time=t, worst=[])
        self._restart_at(t, q, v)

    # ------------------------------------------------------------ stepping
    def advance_to(self, t: float) -> None:
        """Integrate to time ``t`` [s] with the current inputs held constant.

        Raises :class:`~mbsd_twin.solvers.dynamics.SolverFailure` on numerical failure; the state is then
        that of the last successful internal step."""
        self._stepper.set_inputs(self._inputs)
        metered(self._stepper, self._stepper.advance_to, float(t))
        self._cache = None

    def step(self, h: float) -> None:
        self.advance_to(self.time + float(h))

    # ------------------------------------------------------------- outputs
    def _prepare_outputs(self) -> None:
        s = self.system
        self._names = [sp.name for sp in self._specs]
        self._index = {name: k for k, name in enumerate(self._names)}
        n_kin = 9 * s.n_body
        self._react_idx = np.array([(k, "xyz".index(c[1])) for k, j in enumerate(s.joints)
                                    for c in j.components], dtype=np.int64).reshape(-1, 2)
        self._effort_rows = np.array([d.row for d in s.drivers], dtype=np.int64)
        self._n_kin = n_kin
        self._load_names = [sp.name for sp in s.loads.output_specs()]
        # state-only outputs (positions and velocities) need no solve
        self._state_only = {f"{b}.{c}": off * s.n_coord + 3 * k + i for k, b in enumerate(s.body_names)
                            for off, chans in ((0, ("x", "y", "theta")), (1, ("vx", "vy", "omega")))
                            for i, c in enumerate(chans)}  # name → index in the state vector y

    def output_names(self) -> list[str]:
        return list(self._names)

    def output_vector(self) -> F:
        """Every output at the current time, in ``output_ports`` order."""
        y = self._stepper.y
        key = (self.time, y.tobytes())
        if self._cache is not None and self._cache[:2] == key:
            return self._cache[2]
        n, s, t = self.system.n_coord, self.system, self.time
        q, v = y[:n], y[n:2 * n]
        if isinstance(self._stepper, CompiledStepper):
            self._stepper.set_inputs(self._inputs)
            vec = self._stepper.output_vector(self._react_idx, self._effort_rows, self._e0)
            self._cache = (key[0], key[1], vec)
            return vec
        ev = self._dyn.evaluate(t, q, v, self._inputs)
        vec = evaluated_outputs(s, t, y, ev, self._inputs, self._names[self._n_kin:], self._load_names, self._e0)
        self._cache = (key[0], key[1], vec)
        return vec

    def outputs(self) -> dict[str, float]:
        """Every output at the current time, by name."""
        return dict(zip(self._names, self.output_vector().tolist(), strict=True))

    def get_output(self, name: str) -> float:
        idx = self._state_only.get(name)
        if idx is not None:
            return float(self._stepper.y.item(idx))
        if name not in self._index:
            raise PortError(f"unknown output port {name!r}", name=name)
        return float(self.output_vector()[self._index[name]])

    # --------------------------------------------------------------- state
    def __reduce__(self) -> tuple[Any, ...]:
        """Copies (copy.deepcopy, pickle) go through :meth:`get_state`: a new Simulator of the same
        mechanism continues bit-identically, with integrator objects of its own."""
        return _from_state, (self._base, self._options, self.get_state())

    def set_configuration(self, positions: Mapping[str, float] | None = None,
                          velocities: Mapping[str, float] | None = None, time: float | None = None) -> None:
        """Re-initialise the state from measured values (digital-twin re-synchronisation).

        ``positions`` holds coordinate outputs (``crank.theta``, ``piston.x``, …) and ``velocities``
        velocity outputs (``crank.omega``, ``piston.vx``, …) to impose exactly; every other
        coordinate and velocity is moved as little as possible (least squares) from the current
        state to satisfy the constraints. ``time`` [s] sets the simulation time (default: kept).
        The energy integrals restart at zero and the balance from the new state. Raises
        :class:`PortError` for an unknown name and :class:`AssemblyError` if the imposed values
        contradict the constraints."""
        n = self.system.n_coord
        y = self._stepper.y.copy()
        q, v = y[:n], y[n:2 * n]
        fq: list[int] = []
        fv: list[int] = []
        for values, off, kind in ((positions or {}, 0, "position"), (velocities or {}, 1, "velocity")):
            for name, val in values.items():
                idx = self._state_only.get(name)
                if idx is None or idx // n != off:
                    raise PortError(f"{name!r} is not a {kind} output", name=name)
                k = idx - off * n
                (q if off == 0 else v)[k] = float(val)
                (fq if off == 0 else fv).append(k)
        t = self.time if time is None else float(time)
        q, v, left = self._constrained_state(t, q, v, fq, fv)
        if left > 1e-8:
            raise AssemblyError(f"{self.mechanism.source}: the imposed values contradict the constraints",
                                residual=left, iterations=30, time=t, worst=[])
        self._restart_at(t, q, v)

    def _constrained_state(self, t: float, q: F, v: F, fixed_q: list[int], fixed_v: list[int]) -> tuple[F, F, float]:
        """``Dynamics.constrained_state``, compiled on the compiled path (``nb_config``)."""
        solver = self._stepper if isinstance(self._stepper, CompiledStepper) else self._dyn
        return solver.constrained_state(t, q, v, np.array(fixed_q, dtype=np.int64), np.array(fixed_v, dtype=np.int64))

    def reset(self) -> None:
        """Back to the initial state (parameters kept, inputs back to their start values)."""
        self._restart()


def _from_state(mech: Mechanism, options: SolverOptions, blob: bytes) -> Simulator:
    sim = Simulator(mech, options)
    sim.set_state(blob)
    return sim
