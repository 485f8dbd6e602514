"""What a checkpoint row may contain (:func:`checked`): every key known, every value of its type,
finite where a number must be, arrays of this filter's shapes, names of this twin's channels,
parameters and inputs. A row is checked whole before anything of it is applied, so a tampered or
corrupt but parsable row (``"stats": "owned"``, a string for a number, an unknown or a missing key,
a NaN, a covariance of another shape) is refused with a :class:`CheckpointError` naming the key
and the twin starts fresh (:mod:`mbsd_twin.fleet.member`); nothing is ever set by the row's own key names.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

Spec = Callable[[Any, str], Any]  # (value, its path) → the value converted, or CheckpointError

NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,200}$")  # a channel, port, parameter, alarm or reason name
EST = ("x", "P", "applied", "clamped", "inputs", "age", "lin", "step", "next_travel", "initialised")  # the filter's
OBSOLETE_EST = ("jacobian_change",)  # filter keys of earlier checkpoints, no longer read (dropped)


class CheckpointError(ValueError):
    """A checkpoint that is not used: the message names the key and what is wrong with it."""


def _shown(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _fail(path: str, want: str, v: Any) -> CheckpointError:
    return CheckpointError(f"checkpoint key {path}: expected {want}, got {_shown(v)}")


def number(finite: bool = True, low: float = -math.inf) -> Spec:
    def check(v: Any, path: str) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or (finite and not math.isfinite(v)) \
                or v < low:
            bound = f" >= {low}" if low > -math.inf else ""
            raise _fail(path, ("a finite number" if finite else "a number") + bound, v)
        return float(v)
    return check


def integer(low: int = -(1 << 62)) -> Spec:
    def check(v: Any, path: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v < 1 << 62:
            raise _fail(path, f"an integer >= {low}", v)
        return v
    return check


def boolean(v: Any, path: str) -> bool:
    if not isinstance(v, bool):
        raise _fail(path, "true or false", v)
    return v


def name(v: Any, path: str) -> str:
    if not isinstance(v, str) or not NAME.match(v):
        raise _fail(path, "a name (1-200 printable characters)", v)
    return v


def const(value: str) -> Spec:
    def check(v: Any, path: str) -> str:
        if v != value:
            raise _fail(path, repr(value), v)
        return value
    return check


def optional(spec: Spec) -> Spec:
    return lambda v, path: None if v is None else spec(v, path)


def seq(spec: Spec, length: int | None = None) -> Spec:
    def check(v: Any, path: str) -> list[Any]:
        if not isinstance(v, list) or (length is not None and len(v) != length):
            raise _fail(path, "a list" + (f" of {length}" if length is not None else ""), v)
        return [spec(x, f"{path}[{i}]") for i, x in enumerate(v)]
    return check


def row(*specs: Spec) -> Spec:
    def check(v: Any, path: str) -> list[Any]:
        if not isinstance(v, list) or len(v) != len(specs):
            raise _fail(path, f"a list of {len(specs)}", v)
        return [s(x, f"{path}[{i}]") for i, (s, x) in enumerate(zip(specs, v, strict=True))]
    return check


def mapping(spec: Spec, keys: Callable[[str], bool] | None = None, what: str = "") -> Spec:
    """A JSON object of names to ``spec`` values; ``keys`` says which names belong (``what`` them)."""
    def check(v: Any, path: str) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise _fail(path, "an object", v)
        out = {}
        for k, x in v.items():
            name(k, f"{path} (a key)")
            if keys is not None and not keys(k):
                raise CheckpointError(f"checkpoint key {_at(path, k)}: unknown{' (' + what + ')' if what else ''}")
            out[k] = spec(x, _at(path, k))
        return out
    return check


def all_or_none(names: set[str], what: str) -> Spec:
    """Numbers for every one of ``names`` or for none (before the first batch)."""
    def check(v: Any, path: str) -> dict[str, float]:
        out = mapping(number(), names.__contains__, what)(v, path)
        if out and set(out) != names:
            raise CheckpointError(f"checkpoint key {path}: lacks {sorted(names - set(out))}")
        return out
    return check


def record(fields: dict[str, Spec], optional_keys: tuple[str, ...] = (), dropped: tuple[str, ...] = ()) -> Spec:
    """A JSON object with exactly these keys (``optional_keys`` may be absent, ``dropped`` ones are
    known leftovers of earlier formats and left out)."""
    def check(v: Any, path: str) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise _fail(path, "an object", v)
        unknown = sorted(set(v) - set(fields) - set(dropped))
        if unknown:
            raise CheckpointError(f"checkpoint key {_at(path, unknown[0])}: unknown key")
        missing = [k for k in fields if k not in v and k not in optional_keys]
        if missing:
            raise CheckpointError(f"checkpoint key {_at(path, missing[0])}: missing")
        return {k: s(v[k], _at(path, k)) for k, s in fields.items() if k in v}
    return check


def array(shape: tuple[int, ...]) -> Spec:
    """A float64 array as :func:`.state._plain` writes it, of exactly ``shape``, finite."""
    def check(v: Any, path: str) -> np.ndarray:
        if not isinstance(v, dict) or set(v) != {"__ndarray__", "dtype", "shape"} or v["dtype"] != "float64" \
                or v["shape"] != list(shape):
            raise _fail(path, f"a float64 array of shape {list(shape)}", v if not isinstance(v, dict) else
                        {k: x for k, x in v.items() if k != "__ndarray__"})
        try:
            a = np.array(v["__ndarray__"], dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise _fail(path, "an array of numbers", str(exc)) from None
        if a.shape != shape or not np.isfinite(a).all():
            raise _fail(path, f"finite numbers in shape {list(shape)}", list(a.shape))
        return a
    return check


def like(template: Any) -> Spec:
    """A value of the same structure as ``template`` (the live Simulator's own state): the same keys,
    list lengths and kinds of values; numbers finite unless the template's is not."""
    def check(v: Any, path: str) -> Any:
        if isinstance(template, dict):
            return record({k: like(x) for k, x in template.items()})(v, path)
        if isinstance(template, list):
            if not isinstance(v, list) or (template and len(v) != len(template)):
                raise _fail(path, f"a list of {len(template)}", v if not isinstance(v, list) else f"{len(v)} items")
            return [like(template[min(i, len(template) - 1)] if template else 0.0)(x, f"{path}[{i}]")
                    for i, x in enumerate(v)]
        if isinstance(template, bool) or template is None or isinstance(template, str):
            if type(v) is not type(template):
                raise _fail(path, type(template).__name__, v)
            return v
        if isinstance(template, int | float):
            return number(finite=math.isfinite(template))(v, path)
        raise _fail(path, type(template).__name__, v)
    return check


def sim_state(template: dict[str, Any], parameter: Callable[[str], bool]) -> Spec:
    """The Simulator's state (a JSON text): its own structure, parameter overrides of known names."""
    def check(v: Any, path: str) -> str:
        try:
            data = json.loads(v) if isinstance(v, str) else None
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise _fail(path, "the Simulator's state (JSON text)", v)
        fields = {k: like(t) for k, t in template.items()}
        fields["overrides"] = mapping(number(), parameter, "not a parameter of this mechanism")
        record(fields)(data, path)
        return v
    return check


def _options_ok(opts: dict[str, Any], path: str) -> None:
    from ...solvers.dynamics import SolverOptions

    try:
        problems = SolverOptions(**opts).problems()
    except (TypeError, ValueError) as exc:
        problems = [str(exc)]
    if problems:
        raise CheckpointError(f"checkpoint key {path}.options: {problems[0]}")


F, F0, NAN_OK = number(), optional(number()), number(finite=False)
SIDE = row(F, F0, F, integer(0))  # a CUSUM side: statistic, onset, total, samples


def _changes(fmt: str) -> Spec:
    drift = row(NAN_OK, NAN_OK, seq(F), row(F, F), row(SIDE, SIDE))
    rates = row(seq(row(F, F)), seq(row(F, F)), row(F, F), F0)
    return optional(record({"rate": number(low=1e-9), "detector": mapping(row(SIDE, SIDE)), "last": mapping(F),
                            "events": seq(F), "suppressed": integer(0), "crossed": seq(name), "armed_at": F0,
                            "drift": mapping(drift), "rates": mapping(rates)},
                           optional_keys=("drift", "rates") if fmt.endswith("/2") else ()))


def _core(core: Any) -> Spec:
    from ...twin.guard import TUNABLE, check_param, model_parameters

    cfg = core.cfg
    settable = {*model_parameters(core.mech), *TUNABLE}
    ports, need = set(cfg.inputs.values()), {*cfg.inputs, cfg.resync_angle, cfg.resync_speed, "_t"}

    def params(v: Any, path: str) -> dict[str, float]:
        out = mapping(F, settable.__contains__, "not a parameter set_param takes")(v, path)
        for k, x in out.items():
            try:
                check_param(cfg, core.mech, k, x)
            except ValueError as exc:
                raise CheckpointError(f"checkpoint key {_at(path, k)}: {exc}") from None
        return out

    def meas(v: Any, path: str) -> dict[str, float]:
        out = mapping(F)(v, path)
        if out and not need <= set(out):
            raise CheckpointError(f"checkpoint key {path}: lacks {sorted(need - set(out))}")
        return out

    return record({"started": boolean, "pending": optional(name), "last_t": F0,
                   "prev_inputs": all_or_none(ports, "not an input port of [core] inputs"),
                   "last_meas": meas, "last_seq": integer(-1), "paused": boolean, "good_params": params,
                   "next_latest": F0, "nis_sum": row(number(low=0.0), number(low=0.0)), "hold": integer(1)})


def _filter(core: Any) -> dict[str, Spec]:
    """``t_offset``, ``sim`` and ``est`` of a Kalman filter twin, shaped by this filter."""
    est = core.tracker.est
    n, m, d = est.n, len(est.meas), est.d
    template = json.loads(est.sim.get_state())
    known = {p.name for p in est.sim.parameters}
    lin = record({"__record__": const("Linearisation"),
                  "h": number(low=0.0), "n_steps": integer(1), "F": array((n, n)), "H": array((m, n)),
                  "Q": array((n, n)), "Qa": optional(array((n, n))), "z": optional(array((d,))),
                  "B": mapping(array((n,)), set(est.ports).__contains__, "not an input port")},
                 optional_keys=("B",))  # a format-3 row before the gaps' input effects: none
    step = record({"__record__": const("Prediction"),
                   "H": array((m, n)), "y": array((m,))})
    fields: dict[str, Spec] = {"x": array((n,)), "P": array((n, n)),
                               "applied": record({k: F for k in est.applied}), "clamped": integer(0),
                               "inputs": all_or_none(set(core.cfg.inputs.values()), "not an input of [core] inputs"),
                               "age": integer(0), "lin": optional(lin), "step": optional(step), "next_travel": F,
                               "initialised": boolean}

    def sim(v: Any, path: str) -> str:
        out = sim_state(template, known.__contains__)(v, path)
        _options_ok(json.loads(out)["options"], path)
        return out

    assert set(fields) == set(EST)
    return {"t_offset": F, "sim": sim, "est": record(fields, dropped=OBSOLETE_EST)}


def checked(core: Any, data: Any, formats: tuple[str, ...]) -> dict[str, Any]:
    """The checkpoint ``data`` (parsed JSON) with every value checked and converted for ``core``;
    :class:`CheckpointError` naming the first key that does not fit."""
    if not isinstance(data, dict) or data.get("format") not in formats:
        raise CheckpointError(f"not a {' or '.join(formats)} checkpoint")
    alarm = row(boolean, F0, seq(F), F)
    timing = record({"anchor": F0, "dt": number(low=0.0), "k_end": integer(), "seq": integer(-1), "n": integer(0),
                     "mean": F, "var": number(low=0.0), "accepted": integer(0), "candidates": seq(F),
                     "counts": mapping(integer(0)), "gap_pending": boolean})
    fields: dict[str, Spec] = {
        "format": lambda v, p: v, "core": _core(core), "out_seq": mapping(integer(0)),  # format: checked above
        "nis": seq(row(number(low=0.0), integer(0))),
        "alarms": record({"state": mapping(alarm), "suppressed": integer(0)}),
        "changes": _changes(data["format"]), "timing": timing}
    ekf = "sim" in data
    if ekf != hasattr(core.tracker, "est"):
        raise CheckpointError("the checkpoint was taken with another estimator")
    if ekf:
        fields.update(_filter(core))
    older = ("alarms", "changes") if data["format"].endswith("/1") else ()  # format 1: without them
    return record(fields, optional_keys=("timing", *older))(data, "")  # timing: since 2026-11-27
