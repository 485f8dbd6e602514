"""The twin core's per-sample Python, cut down (issue 31, item 1, first stage): what the reference
path builds per sample from scratch is here prepared once per batch or once per filter, with
the same values in the same order, so that every output text is bit-identical to the reference
path's (``TwinCore(..., reference=True)``; tests/test_twin_batchpath.py compares the two on the
field rig's streams, healthy and with faults, at holds 1, 5 and 20).

- :class:`BatchView`: a batch's samples and input values as one dict per sample, built in one
  pass per batch instead of one comprehension per use.
- :class:`RowMaker`: a Kalman tracker's output row from the output vector and the state as
  Python lists, by indices worked out once per filter (instead of an output dict, an estimate
  dict and their unions per sample).
- :func:`change_values`, :func:`change_statistics`: the change tests' inputs and published
  sums without a numpy scalar per statistic and with their keys formatted once.
- :func:`columns`: a batch's output columns when every row has the same keys.
"""

from __future__ import annotations

import math
from typing import Any

Row = dict[str, dict[str, float]]


class BatchView:
    """One batch's samples (channel → value) and inputs (port → value) per sample index, as the
    core's ``_sample`` and ``_inputs_at`` give them."""

    def __init__(self, ch: dict[str, tuple[float, ...]], inputs: dict[str, str]) -> None:
        self.ch = ch  # held: the view belongs to this dict (``is``), never to a later one at its address
        names = list(ch)
        self.meas = [dict(zip(names, vals, strict=True)) for vals in zip(*ch.values(), strict=True)]
        ports = list(inputs.values())
        self.inputs = [dict(zip(ports, vals, strict=True))
                       for vals in zip(*(ch[c] for c in inputs), strict=True)] if ports else [{} for _ in self.meas]


def batch_view(core: Any, ch: dict[str, tuple[float, ...]]) -> BatchView:
    """The core's view of the batch with the channels ``ch`` (built at its first use)."""
    if core.view is None or core.view.ch is not ch:
        core.view = BatchView(ch, core.cfg.inputs)
    return core.view


class RowMaker:
    """:meth:`.tracking.EkfTracker.row` of a corrected sample (with its innovation) by precomputed
    indices (same keys, order and values)."""

    def __init__(self, tracker: Any) -> None:
        self.tracker = tracker
        self.picker: Any = None  # the Picker the indices below were worked out for

    def _plan(self, picker: Any, est: Any) -> None:
        c, idx = self.tracker.cfg, picker.index
        self.picker = picker
        self.state = list(({ch: idx[p] for ch, p in c.compare.items()} | {p: idx[p] for p in c.state_extra}).items())
        self.virtual = [(p, idx[p]) for p in self.tracker.virtual]
        self.ports = list(c.inputs.values())
        names = est.names()
        where = {k: j for j, k in enumerate(names)}
        self.bias = [(port, f"{port}.estimate", f"{port}.estimate_sd", where[f"{port}.bias"]) for port in est.bias]
        self.sd_keys = [(f"{k}.sd", j) for k, j in where.items()]
        self.values = [(k, j) for k, j in where.items() if k not in idx]
        self.by_output = self.tracker.by_output

    def __call__(self, at: dict[str, float], meas: dict[str, float], inn: Any) -> Row:
        tr = self.tracker
        est = tr.est
        if self.picker is not tr.picker:
            self._plan(tr.picker, est)
        vec = est.sim.output_vector().tolist()
        state = {k: vec[i] for k, i in self.state}
        resid = dict(zip([self.by_output[m] for m in inn.names], inn.nu.tolist(), strict=True))
        virtual = {p: vec[i] for p, i in self.virtual}
        for p in self.ports:
            virtual[p] = at.get(p, 0.0)
        x, sd = est.x.tolist(), est.sd().tolist()
        for port, k_est, k_sd, j in self.bias:
            virtual[k_est] = at.get(port, 0.0) + x[j]
            virtual[k_sd] = sd[j]
        filt = {"nis": inn.nis}
        for k, j in self.sd_keys:
            filt[k] = sd[j]
        for k, j in self.values:
            filt[k] = x[j]
        return {"state": state, "residual": resid, "virtual": virtual, "filter": filt}


def change_values(changes: Any, inn: Any) -> dict[str, tuple[float, float]] | None:
    """:meth:`.alarms.ChangeAlarms._values` from Python floats (None when a σ is 0, where numpy's
    and Python's division differ: the reference then)."""
    nu, sd = _floats(inn.nu), _floats(inn.sd)
    if 0.0 in sd:
        return None
    values = {changes.channel[m]: (v / s, v) for m, v, s in zip(inn.names, nu, sd, strict=True)}
    o = changes.offset
    dx, dx_sd = _floats(inn.dx), _floats(inn.dx_sd)
    for j, name in enumerate(changes.aug):
        d, s = dx[o + j], dx_sd[o + j]
        values[name] = (d / s if s > 0 else 0.0, d)
    return values


def _floats(a: Any) -> list[float]:
    """An array's (or a sequence's) values as Python floats."""
    return a.tolist() if hasattr(a, "tolist") else [float(v) for v in a]


def change_statistics(changes: Any) -> dict[str, float]:
    """:meth:`.alarms.ChangeAlarms.statistics` with the keys formatted once (the CUSUMs and drift
    tests are kept for the detector's life; their sums are read at each call)."""
    keys = changes.__dict__.get("_stat_keys")
    if keys is None:
        keys = [(f"cusum.{n}", c) for n, c in changes.detector.tests.items()] + \
            [(f"drift.{n}", d.cusum) for n, d in changes.drift.items()]
        changes._stat_keys = keys
    out = {}
    for k, c in keys:
        up, down = c.sides
        out[k] = max(up.g, down.g)
    return out


def columns(rows: list[Row], part: str) -> dict[str, list[float | None]] | None:
    """:func:`.outbox.batch_messages`' columns of ``part`` when every row has the first row's keys
    (None otherwise: the reference then); NaN and ±inf as None (:func:`.outbox.finite`)."""
    parts = [r[part] for r in rows]
    keys = parts[0].keys()
    if any(p.keys() != keys for p in parts):
        return None
    isfinite = math.isfinite
    return {k: [v if isfinite(v) else None for v in (p[k] for p in parts)] for k in keys}
