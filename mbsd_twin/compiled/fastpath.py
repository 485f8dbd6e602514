"""The compiled stepper: the same interface as ``dynamics.Stepper`` over the numba kernels and the
continuous DOP853 integration of ``nb_stepper``. Chosen by ``SolverOptions(backend="auto")`` when
the mechanism and options are supported (``compiled_model.Unsupported`` otherwise).

While the inputs stay the same the integrator keeps its own step sizes across calls and serves
communication points from its dense output (projected onto the constraints); a changed input
restarts it at the current point. Inputs that change at every call (a twin streaming measured
torque) make the stepper clip its steps to the communication points instead, so that no step runs
past a point where the next input takes over. An input change that is not followed by another at
the next call leaves the step sequence independent of the communication grid: the same internal
steps, bit for bit, for 1 ms and 0.1 s points. The whole integrator state is one float array
(``nb_stepper``) and two flags, exported bit for bit.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numba
import numpy as np
from numpy.typing import NDArray

from ..errors import SolverFailure
from ..solvers.error_norm import controlled_integrals
from . import nb_config as nc
from . import nb_dop853 as nd
from . import nb_entries as ne
from . import nb_solve as nsolve
from . import nb_stepper as ns
from .compiled_model import FLOAT_ARRAYS, Unsupported, pack
from .nb_cache import cached, compile_aside, compile_notice, join_aside, wait_cached
from .nb_flat import HEAD, N_INT, flatten
from .nb_indirect import PROJECT, RHS

F = NDArray[Any]
_FAILURES = {nd.FAIL_STEP: "required step size became too small",
             nd.FAIL_SOLVE: "the saddle-point system became singular or the state non-finite",
             nd.FAIL_PROJECT: "projection onto the constraints failed (singular configuration)",
             nd.FAIL_MAX_STEPS: "too many internal steps in one call (a runaway or very stiff motion)"}


def failure_text(status: int) -> str:
    """What a compiled integration's FAIL_* status means."""
    return _FAILURES.get(status, f"status {status}")


def advance_signature() -> tuple[Any, ...]:
    """The numba types of ``nb_stepper.advance``'s arguments as the stepper passes them (the same
    for every mechanism: the model is in flat buffers)."""
    f, i = np.zeros(1), np.zeros(1, dtype=np.int64)
    return tuple(numba.typeof(a) for a in (f, 0.0, False, f, f, i))


def restart_signature() -> tuple[Any, ...]:
    """The numba types of ``nb_stepper.restart``'s arguments as the stepper passes them."""
    f, i = np.zeros(1), np.zeros(1, dtype=np.int64)
    return tuple(numba.typeof(a) for a in (f, f, i, f, f, i))


def bind_signature() -> tuple[Any, ...]:
    """The numba types of ``nb_stepper.bind``'s arguments as the stepper passes them."""
    f, i = np.zeros(1), np.zeros(1, dtype=np.int64)
    return tuple(numba.typeof(a) for a in (i, f, i, f, f))


def start_signature() -> tuple[Any, ...]:
    """The numba types of ``nb_stepper.start``'s arguments as the stepper passes them."""
    f, i = np.zeros(1), np.zeros(1, dtype=np.int64)
    return tuple(numba.typeof(a) for a in (f, 0.0, f, f, i, f, f, f, i, False))


def outputs_signature() -> tuple[Any, ...]:
    """The numba types of ``nb_stepper.outputs``'s arguments as the stepper passes them."""
    f, i, pairs = np.zeros(1), np.zeros(1, dtype=np.int64), np.zeros((0, 2), dtype=np.int64)
    return tuple(numba.typeof(a) for a in (f, f, i, f, f, i, pairs, pairs[:, 0].copy(), 0.0))


def compile_aside_kernels() -> None:
    """What a cold start compiles into numba's disk cache in a second process
    (``nb_cache.compile_aside``) while the first compiles the right-hand side's entry (the longest
    chain: constraint rows, then accelerations), ``start`` and ``restart`` (:func:`compile_kernels`):
    first ``advance`` and ``bind``, which need no physics; then the projection's table entry, whose
    constraint rows the first process has cached by then (else this one compiles its own copy);
    then ``outputs``, which needs the accelerations: it waits for the first process to cache them
    rather than compile them a second time. On a 2-core machine: 26 s instead of 30 s when the
    projection came first and both processes compiled the constraint rows."""
    ns.advance.compile(advance_signature())
    ns.bind.compile(bind_signature())
    ne.compile_entry(PROJECT)
    wait_cached(nsolve._accelerate, 60.0)
    ns.outputs.compile(outputs_signature())


def compile_kernels() -> None:
    """What the first process compiles on a cold start (see :func:`compile_aside_kernels`)."""
    ne.compile_entry(RHS)
    ns.start.compile(start_signature())
    ns.restart.compile(restart_signature())


_ASIDE = "from mbsd_twin.compiled.fastpath import compile_aside_kernels; compile_aside_kernels()"


def _entry(dispatcher: Any, args: tuple[Any, ...]) -> Any:
    """The compiled function behind a numba ``dispatcher`` for the types of ``args``, to be called
    directly: it skips the dispatcher's type resolution on every call (0.13 of the 0.40 µs that
    calling ``nb_stepper.advance`` costs). The caller must keep passing arguments of those types.
    Falls back to the dispatcher itself if numba does not offer the entry point."""
    try:
        sig = tuple(numba.typeof(a) for a in args)
        dispatcher.compile(sig)
        return dispatcher.overloads[sig].entry_point
    except (AttributeError, KeyError, TypeError):  # another numba's internals: dispatch per call
        return dispatcher


class Buffers(NamedTuple):
    """A compiled Simulator's live arrays, for compiled code that steps and re-initialises it in
    one call (``estimation.nb_filter``): the integrator state ``S``, the inputs ``u`` (input port
    order) the context ``cb`` is bound to, the packed model ``ib``/``fb``, scratch ``wb``, options
    ``ob``, the input-change flags (int64: this call, the previous one), the output vector's
    reaction and effort rows, the index of ``energy.total`` in it and the energy baseline. Hand them back with
    ``Simulator.buffers_done``."""

    S: F
    u: F
    ib: F
    fb: F
    wb: F
    ob: F
    cb: F
    flags: NDArray[np.int64]
    react_idx: NDArray[np.int64]
    effort_rows: NDArray[np.int64]
    i_energy: int
    e0: float  # the energy baseline [J] of energy.balance_error


class CompiledStepper:
    """Persistent compiled integration; inputs held constant over each ``advance_to``."""

    def __init__(self, dyn: Any, t0: float, y0: F, inputs: dict[str, float]) -> None:
        opts = dyn.opts
        if opts.method != "DOP853":
            raise Unsupported(f"method {opts.method} (the compiled path integrates with DOP853)")
        baum = (opts.baumgarte_alpha, opts.baumgarte_beta) if opts.drift == "baumgarte" else None
        self.model, joints = pack(dyn.system, dyn.rows, baum)
        self._ib, self._fb = flatten(self.model, joints)
        n, m, cons, Jc, bodies, loads, sd, baum_f, _ = self.model  # the float arrays, as FLOAT_ARRAYS
        self._floats = [g[2] for g in cons] + list(bodies) + [g[1] for g in loads] + [baum_f, joints[4]]
        ny = len(y0)
        self._wb = np.zeros(ns.scratch_size(self.model, ny))
        self._ob = np.array([opts.rtol, opts.atol, opts.max_step, float(opts.drift == "projection"),
                             opts.projection_tol, float(opts.max_steps), float(controlled_integrals(dyn.system, opts)),
                             float(opts.error_norm == "max"), float(ns.workspace_words(self.model))])
        self.names = list(dyn.system.input_names)
        self.inputs = dict(inputs)
        self._u = self._input_array()
        self._S = np.zeros(ns.state_size(ny))
        self._changed = self._changed_before = False  # inputs changed for this call / the previous one
        with compile_notice("the engine's kernels"):
            if not cached(ns.advance):  # a cold start: compile on two CPUs (compile_aside_kernels)
                aside = compile_aside(_ASIDE)
                compile_kernels()
                join_aside(aside)
            need = int(ns.bind(np.zeros(0, dtype=np.int64), self._u, self._ib, self._fb, self._wb))
            self._cb = np.zeros(-(-need // 8), dtype=np.int64)
            self._bind()
            self.reset_state(t0, y0)

    def _bind(self) -> None:
        """Make ``y`` the view of the state at t (q, v, energy integrals) in _S, pin the compiled
        context (views of _u, _ib, _fb and _wb, which therefore stay these arrays: the inputs are
        written into _u in place) and find advance's entry point."""
        self.y = ns.output_state(self._S)
        if ns.bind(self._cb, self._u, self._ib, self._fb, self._wb) > 8 * len(self._cb):
            raise ValueError("context buffer too small")
        ne.fill_table(self._cb, self._u, self._ib, self._fb, self._wb)
        self._advance_held: Any = None  # on first use (the twin's): a fresh install compiles it then
        self._outputs: Any = None  # outputs' entry point, found at its first use
        self._find_advance()

    def _find_advance(self) -> None:
        """advance's entry point (safe: its arguments are always the stepper's own arrays, of fixed
        dtype and layout, a float and a bool)."""
        self._advance = _entry(ns.advance, (self._S, 0.0, False, self._wb, self._ob, self._cb))

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_advance", "_advance_held", "_outputs", "y")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy (copy.deepcopy, pickle) gets its own arrays: its views and context must point at
        those."""
        self.__dict__.update(state)
        self._bind()

    @property
    def t(self) -> float:
        return float(self._S[0])

    @property
    def steps(self) -> int:
        return int(self._S[4])

    def _input_array(self) -> F:
        return np.array([float(self.inputs.get(k, 0.0)) for k in self.names] or [0.0])

    def set_inputs(self, inputs: dict[str, float]) -> None:
        if inputs != self.inputs:
            self.inputs = dict(inputs)
            self._u[:] = self._input_array()
            self._changed = True
            ns.restart(self._S, self._u, self._ib, self._fb, self._wb, self._cb)

    def advance_to(self, t_end: float) -> None:
        if t_end <= self._S[0]:
            return
        clip = self._changed and self._changed_before  # inputs streaming: end the steps at t_end
        status = self._advance(self._S, float(t_end), clip, self._wb, self._ob, self._cb)
        self._changed_before, self._changed = self._changed, False
        if status != nd.OK:
            raise SolverFailure(f"integration failed at t={self.t:.9g} s: {_FAILURES[status]}", time=self.t)

    def advance_held(self, times: F, U: F) -> None:
        """:meth:`set_inputs` + :meth:`advance_to` for each row of ``U`` (inputs in ``names`` order,
        one column of zeros without inputs) and end time in ``times``, in one compiled call: the
        same steps, bit for bit."""
        flags = np.array([self._changed, self._changed_before], dtype=np.int64)
        if self._advance_held is None:
            with compile_notice("the held-input stepper"):
                self._advance_held = _entry(ns.advance_held, (self._S, np.zeros(1), np.zeros((1, self._u.shape[0])),
                                                              self._u, self._ib, self._fb, self._wb, self._ob,
                                                              self._cb, np.zeros(2, dtype=np.int64)))
        status, done = self._advance_held(self._S, times, U, self._u, self._ib, self._fb, self._wb, self._ob,
                                          self._cb, flags)
        self._changed, self._changed_before = bool(flags[0]), bool(flags[1])
        if self.names:
            self.inputs = dict(zip(self.names, self._u.tolist(), strict=True))
        if status != nd.OK:
            raise SolverFailure(f"integration failed at t={self.t:.9g} s (input row {done}): {_FAILURES[status]}",
                                time=self.t)

    def buffers(self, react_idx: NDArray[np.int64], effort_rows: NDArray[np.int64], i_energy: int,
                e0: float) -> Buffers:
        flags = np.array([self._changed, self._changed_before], dtype=np.int64)
        return Buffers(self._S, self._u, self._ib, self._fb, self._wb, self._ob, self._cb, flags, react_idx,
                       effort_rows, i_energy, e0)

    def buffers_done(self, b: Buffers) -> None:
        """Take up what compiled code did to the arrays of :meth:`buffers`: flags and inputs."""
        self._changed, self._changed_before = bool(b.flags[0]), bool(b.flags[1])
        if self.names:
            self.inputs = dict(zip(self.names, self._u.tolist(), strict=True))

    def output_vector(self, react_idx: NDArray[np.int64], effort_rows: NDArray[np.int64], e0: float) -> F:
        """Every Simulator output at the current point, in port order (see nb_solve.output_vector):
        ``react_idx`` (joint, component) pairs and ``effort_rows``, int64 arrays."""
        if self._outputs is None:  # no per-call type dispatch (about 0.2 µs): the caller, the Simulator,
            # passes the same two arrays (int64, C order) every time
            self._outputs = _entry(ns.outputs, (self._S, self._u, self._ib, self._fb, self._wb, self._cb, react_idx,
                                                effort_rows, 0.0))
        return self._outputs(self._S, self._u, self._ib, self._fb, self._wb, self._cb, react_idx, effort_rows,
                             float(e0))

    def export(self) -> dict[str, object]:
        return {"S": self._S.tolist(), "changed": [self._changed, self._changed_before], "inputs": dict(self.inputs)}

    def restore(self, data: dict[str, Any]) -> None:
        S = np.array(data["S"], dtype=float)
        if S.shape != self._S.shape:
            raise ValueError("the saved integrator state does not fit this mechanism")
        self._S[:] = S
        self._changed, self._changed_before = (bool(x) for x in data["changed"])
        self.inputs = dict(data["inputs"])
        self._u[:] = self._input_array()

    def model_index(self, array: str, row: int, col: int) -> int:
        """Where row ``row``, column ``col`` of the packed float array ``array`` sits in ``fb``."""
        e = HEAD + 3 * (N_INT + FLOAT_ARRAYS.index(array))
        return int(self._ib[e]) + row * int(self._ib[e + 2]) + col

    def set_model_value(self, array: str, row: int, col: int, value: float) -> None:
        """Overwrite one number of the packed model in place: row ``row``, column ``col`` of the
        float array ``array`` (a name of ``compiled_model.FLOAT_ARRAYS``; a 1-D array has one
        column), in the buffer the kernels read and in ``model``. The integrator state is left as
        it is: restart it (:meth:`reset_state`) before stepping on."""
        k = FLOAT_ARRAYS.index(array)
        i = self.model_index(array, row, col)
        self._fb[i] = value
        self._floats[k].reshape(-1)[i - int(self._ib[HEAD + 3 * (N_INT + k)])] = value

    def constrained_state(self, t: float, q: F, v: F, fixed_q: NDArray[np.int64], fixed_v: NDArray[np.int64],
                          tol: float = 1e-12) -> tuple[F, F, float]:
        """``Dynamics.constrained_state`` on the packed model (``nb_config``): q, v [m, rad and
        m/s, rad/s] nearest to the given ones that satisfy the constraints with the coordinates
        ``fixed_q`` and velocities ``fixed_v`` held, and the largest residual left."""
        q, v = np.array(q, dtype=float), np.array(v, dtype=float)
        left = nc.constrained_state(float(t), q, v, fixed_q, fixed_v, float(tol), self._ib, self._fb)
        return q, v, float(left)

    def snapshot(self) -> tuple[Any, ...]:
        """An in-memory copy of the integrator state (what :meth:`export` holds) for
        :meth:`restore_snapshot`."""
        return self._S.copy(), self._changed, self._changed_before, dict(self.inputs), self._u.copy()

    def restore_snapshot(self, snap: tuple[Any, ...]) -> None:
        S, changed, changed_before, inputs, u = snap
        if S.shape != self._S.shape or u.shape != self._u.shape:
            raise ValueError("the snapshot's integrator state does not fit this mechanism")
        self._S[:] = S
        self._u[:] = u
        self._changed, self._changed_before, self.inputs = changed, changed_before, dict(inputs)

    def reset_state(self, t: float, y: F, inputs: dict[str, float] | None = None, streaming: bool = False) -> None:
        """Restart from (t, y) (the model stays packed), with new ``inputs`` if given. With
        ``streaming`` — a re-initialisation amid a run — the restart keeps the step size the error
        control last proposed and the record that the inputs have been changing (the next call with
        new inputs again ends its steps at the communication point); else it starts with a fresh
        initial step and the inputs count as settled."""
        if inputs is not None and inputs != self.inputs:
            self.inputs = dict(inputs)
            self._u[:] = self._input_array()
        ns.start(self._S, float(t), np.ascontiguousarray(y, dtype=float), self._u, self._ib, self._fb, self._wb,
                 self._ob, self._cb, streaming)
        self._changed_before = streaming and (self._changed or self._changed_before)
        self._changed = False
