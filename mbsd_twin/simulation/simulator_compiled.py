"""The Simulator's calls for compiled code and sequences: :meth:`advance_held` (rows of held inputs
in one compiled call) and the arrays a compiled extension steps and re-initialises the Simulator
through (:meth:`buffers` … :meth:`buffers_done`, with :meth:`state_index` and
:meth:`parameter_index` saying where things are in them). A part of :class:`~mbsd_twin.Simulator`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ..compiled.fastpath import Buffers, CompiledStepper
from ..errors import PortError
from .live_parameters import Slot, live_slot
from .work import close_call, meter, metered, open_call

if TYPE_CHECKING:
    from ..physics.system import System

F = NDArray[Any]


class CompiledAccess:
    """Mixed into :class:`~mbsd_twin.Simulator` (its state, declared here for the type checker)."""

    _stepper: Any
    _work_mark: tuple[int, float, float] | None  # an open metered compiled call (simulation/work.py)
    _inputs: dict[str, float]
    _cache: Any
    _e0: float
    _react_idx: NDArray[np.int64]
    _effort_rows: NDArray[np.int64]
    _index: dict[str, int]
    _table: dict[str, Any]
    _slots: dict[str, Slot | None]
    _state_only: dict[str, int]
    system: System

    def _set_live(self, name: str, v: float) -> bool:
        raise NotImplementedError

    def advance_held(self, times: F, inputs: F) -> None:
        """Integrate through the end times ``times`` [s] (increasing), the inputs of row k of
        ``inputs`` (one column per input port, in ``input_ports`` order) held until ``times[k]``:
        the same as ``set_input`` for each port and ``advance_to(times[k])`` row by row, bit for
        bit, in one compiled call (a sampled input reproduced by held pieces, a twin's prediction).
        :class:`PortError` for a wrong shape or a non-finite input; on a numerical failure
        :class:`~mbsd_twin.solvers.dynamics.SolverFailure` as from :meth:`advance_to`."""
        names = list(self._inputs)
        times = np.ascontiguousarray(times, dtype=np.float64).reshape(-1)
        U = np.ascontiguousarray(inputs, dtype=np.float64).reshape(times.shape[0], -1)
        if U.shape[1] != len(names):
            raise PortError(f"advance_held: {U.shape[1]} input columns for {len(names)} input ports "
                            f"({', '.join(names) or 'none'})", name="inputs")
        if not np.isfinite(U).all() or not np.isfinite(times).all():
            raise PortError("advance_held: the inputs and times must be finite", name="inputs")
        self._cache = None
        if isinstance(self._stepper, CompiledStepper):
            metered(self._stepper, self._stepper.advance_held, times, U if names else np.zeros((times.shape[0], 1)))
            self._inputs.update(self._stepper.inputs)
            return
        for t, row in zip(times.tolist(), U.tolist(), strict=True):
            self._inputs.update(zip(names, row, strict=True))
            self._stepper.set_inputs(self._inputs)
            metered(self._stepper, self._stepper.advance_to, t)

    def buffers(self) -> Buffers | None:
        """The compiled model and integrator state as arrays (:class:`~mbsd_twin.compiled.fastpath.Buffers`)
        for compiled code that steps and re-initialises this Simulator in one call, as the
        estimator does per sample; None on the numpy path. Hand them back with
        :meth:`buffers_done` before any other call."""
        if not isinstance(self._stepper, CompiledStepper):
            return None
        self._stepper.set_inputs(self._inputs)  # inputs set since the last step take effect, as in advance_to
        m = meter()
        if m is not None:  # the compiled call's steps are charged in buffers_done
            self._work_mark = open_call(m, self._stepper)
        return self._stepper.buffers(self._react_idx, self._effort_rows, self._index["energy.total"], self._e0)

    def buffers_done(self, b: Buffers, e0: float | None = None, parameters: Mapping[str, float] | None = None) -> None:
        """After compiled code changed the arrays of :meth:`buffers`: take up its inputs and flags;
        when it re-initialised the state (``e0``: the energy there [J]), the new baseline of
        ``energy.balance_error``; the live ``parameters`` it wrote at :meth:`parameter_index` (the
        rest of the model takes them up, as from :meth:`set_parameter`, without a restart)."""
        assert isinstance(self._stepper, CompiledStepper)
        for name, v in (parameters or {}).items():
            self._set_live(name, v)
        self._stepper.buffers_done(b)
        self._inputs.update(self._stepper.inputs)
        if e0 is not None:
            self._e0 = e0
        self._cache = None
        m, mark = meter(), getattr(self, "_work_mark", None)
        if m is not None and mark is not None:
            self._work_mark = None
            close_call(m, self._stepper, mark)

    def parameter_index(self, name: str) -> int | None:
        """Where the value of a live physical parameter (``piston.mass``) sits in the packed model
        ``fb`` of :meth:`buffers` (compiled code may change it there for a moment and must put it
        back); None when it is not live or the path is not compiled."""
        if not isinstance(self._stepper, CompiledStepper) or name not in self._table:
            return None
        if name not in self._slots:
            self._slots[name] = live_slot(self.system, name)
        slot = self._slots[name]
        return None if slot is None else self._stepper.model_index(slot.packed, slot.row, slot.col)

    def state_index(self, name: str) -> int:
        """Where a coordinate output (``crank.theta``) sits in the positions q, or a velocity output
        (``crank.omega``) in the velocities v, of the state: for compiled code on :meth:`buffers`."""
        idx = self._state_only.get(name)
        if idx is None:
            raise PortError(f"{name!r} is not a coordinate or velocity output", name=name)
        return idx % self.system.n_coord
