"""The Simulator's state as a value: :meth:`get_state` / :meth:`set_state` (JSON bytes that continue
bit-identically, also in a new process) and :meth:`snapshot` / :meth:`restore` (in memory, a few
µs). A part of :class:`~mbsd_twin.Simulator`."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from ..solvers.dynamics import SolverOptions
from .snapshot import Snapshot

STATE_FORMAT = "mbsd-twin-state/2"


class StateAccess:
    """Mixed into :class:`~mbsd_twin.Simulator` (its state, declared here for the type checker)."""

    _stepper: Any
    _inputs: dict[str, float]
    _cache: Any
    _e0: float
    _model_id: str
    _options: SolverOptions
    _overrides: dict[str, float]
    _table: dict[str, Any]

    @property
    def time(self) -> float:
        raise NotImplementedError

    def _build(self) -> None:
        raise NotImplementedError

    def _set_live(self, name: str, v: float) -> bool:
        raise NotImplementedError

    def get_state(self) -> bytes:
        """Everything needed to continue bit-identically, as UTF-8 JSON bytes."""
        data = {"format": STATE_FORMAT, "model": self._model_id, "overrides": self._overrides,
                "options": {k: v for k, v in asdict(self._options).items()},
                "e0": self._e0, "inputs": self._inputs, "stepper": self._stepper.export()}
        return json.dumps(data).encode()

    def set_state(self, blob: bytes) -> None:
        try:
            data = json.loads(blob.decode())
            ok = data.get("format") == STATE_FORMAT
        except (UnicodeDecodeError, ValueError, AttributeError):
            ok = False
        if not ok:
            raise ValueError(f"not a {STATE_FORMAT} state")
        if data["model"] != self._model_id:
            raise ValueError("the state belongs to a different mechanism")
        self._apply_settings(SolverOptions(**data["options"]), dict(data["overrides"]))
        self._e0 = float(data["e0"])
        self._inputs = dict(data["inputs"])
        self._stepper.restore(data["stepper"])
        self._cache = None

    def snapshot(self) -> Snapshot:
        """An in-memory copy of the state — what :meth:`get_state` holds: time, integrator state,
        inputs, energy baseline, solver options and parameters — for :meth:`restore`. A few µs
        on the compiled path (no serialisation)."""
        return Snapshot(self._model_id, self.time, self._options, tuple(self._overrides.items()),
                        tuple(self._inputs.items()), self._e0, self._stepper.snapshot())

    def restore(self, snap: Snapshot) -> None:
        """Return to the state of ``snap`` (made by this Simulator or another of the same
        mechanism): the integration continues bit-identically from there. Parameters changed
        since are set back (in place when live, else by a rebuild); ``ValueError`` for a snapshot
        of another mechanism."""
        if not isinstance(snap, Snapshot) or snap.model != self._model_id:
            raise ValueError("the snapshot belongs to a different mechanism")
        self._apply_settings(snap.options, dict(snap.overrides))
        self._e0 = snap.e0
        self._inputs = dict(snap.inputs)
        self._stepper.restore_snapshot(snap.stepper)
        self._cache = None

    def _apply_settings(self, options: SolverOptions, overrides: dict[str, float]) -> None:
        """Make the solver options and parameter overrides these: live parameters in place, any
        other difference by a rebuild (which also resets the state)."""
        if options is not self._options and options != self._options:
            self._options, self._overrides = options, overrides
            self._build()
            return
        if overrides == self._overrides:
            return
        changed = [k for k in set(overrides) | set(self._overrides) if overrides.get(k) != self._overrides.get(k)]
        live = all(k in self._table and self._set_live(k, overrides.get(k, self._table[k][0].value))
                   for k in changed)
        self._overrides = overrides
        if not live:
            self._build()
