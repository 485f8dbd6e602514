"""Plausible |value| of every channel the twin reads, derived from the mechanism at start-up.

The rule (docs/service-config.md, "Plausibility limits"): the model is evaluated — no integration —
on an envelope of states: each angle coordinate of the filter (``[core] coordinates``, default the
``resync_angle``'s output) at ``SWEEP`` poses over a full turn (a length coordinate at its assembled
value), each at speeds −``max_speed``, 0 and +``max_speed``, with every input at 0 and at one unit.
From these:

* an input channel's envelope is the largest value needed to hold the motion steady in the
  envelope (the input that cancels the model's own acceleration there) plus the value that
  accelerates the coordinates by ``max_speed``² per unit of the coordinate (from rest to
  ``max_speed`` within one radian): |α₀·s|/|s|² + max_speed²/|s|, with s the coordinates'
  acceleration per unit of the input;
* a speed channel's envelope is its largest |value| over the envelope states; a force, moment or
  any other output's is its largest |value| with every input at its envelope (|y₀| + Σ u·|∂y/∂u|);
* an angle channel (``<body>.theta``) is bounded only by resolution: ``ANGLE_LIMIT`` (2³⁹ rad, where
  doubles are coarser than 1e-4 rad — 17 years of rotation at 1000 rad/s); positions (``.x``,
  ``.y``) by the largest over the sweep (unbounded when a coordinate is a length).

The limit is ``limit_factor`` × envelope + 10 σ of the channel's noise (``[core] noise``). A channel
whose envelope is 0, not finite or not derivable is left unbounded and named in a warning (log and
health). ``[core] channel_limits`` wins over the derived limit; ``input_limit`` > 0 replaces the
derivation by one fixed limit for every channel (inf: none).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import MbsdError
from ..estimation.ekf import speed_of
from ..model.model import Mechanism
from ..simulation.simulator import Simulator
from .config.sections import CoreConfig
from .guard import Limits

SWEEP = 16  # poses over a turn of an angle coordinate
ANGLE_LIMIT = 2.0 ** 39  # rad: beyond, the spacing of doubles exceeds 1e-4 rad
ACCEL = {"theta": "alpha", "x": "ax", "y": "ay"}


def plausible_limits(cfg: CoreConfig, mech: Mechanism) -> Limits:
    """The limit of every channel the core reads (inputs, compared channels), by the module's rule."""
    out = Limits()
    channels = dict.fromkeys([*cfg.inputs, *cfg.compare])
    derived: dict[str, tuple[float, str]] = {}
    units: dict[str, str] = {}
    if not cfg.input_limit > 0:
        try:
            derived, units = _derive(cfg, mech)
        except (MbsdError, ValueError, KeyError, FloatingPointError, np.linalg.LinAlgError) as exc:
            derived = {ch: (math.inf, f"not derivable: {exc}") for ch in channels}
    for ch in channels:
        out.units[ch] = units.get(ch, "")
        if ch in cfg.channel_limits:
            out[ch], out.how[ch] = float(cfg.channel_limits[ch]), "[core] channel_limits"
        elif cfg.input_limit > 0:
            out[ch], out.how[ch] = float(cfg.input_limit), "[core] input_limit"
        else:
            env, how = derived.get(ch, (math.inf, "no rule for this output"))
            sd = cfg.noise.get(ch, 0.0)
            angle = cfg.compare.get(ch, "").endswith(".theta")  # its bound is no envelope: no factor
            lim = (env if angle else cfg.limit_factor * env + 10.0 * sd) if math.isfinite(env) and env > 0 \
                else math.inf
            out[ch], out.how[ch] = lim, how if math.isfinite(lim) else f"{how}; left unbounded"
        if not math.isfinite(out[ch]) and out.how[ch] != "[core] input_limit":
            out.unbounded.append(ch)
    return out


def _derive(cfg: CoreConfig, mech: Mechanism) -> tuple[dict[str, tuple[float, str]], dict[str, str]]:
    """Envelope (before the factor and the noise) and its rule per channel; units per channel."""
    from .tracking import solver_options

    sim = Simulator(mech, solver_options(cfg))
    units = {p.name: p.unit for p in sim.output_ports} | {p.name: p.unit for p in sim.input_ports}
    coords = tuple(cfg.coordinates or (cfg.compare[cfg.resync_angle],))
    ports = list(cfg.inputs.values())
    rows = _states(sim, coords, ports, cfg.max_speed)
    if not rows:
        raise ValueError("the mechanism assembles at none of the envelope's poses")
    names = sim.output_names()
    acc = [names.index(f"{c.rpartition('.')[0]}.{ACCEL.get(c.rpartition('.')[2], '?')}") for c in coords]
    scale = np.array([cfg.max_speed ** 2] * len(coords))
    u_env: dict[str, float] = {}
    for i, port in enumerate(ports):
        need = 0.0
        for y0, dy in rows:
            s = dy[i][acc]
            ns = float(np.linalg.norm(s))
            if not ns > 1e-12 * (1.0 + float(np.abs(y0[acc]).max())):
                need = math.inf
                break
            need = max(need, abs(float(y0[acc] @ s)) / ns ** 2 + float(np.linalg.norm(scale)) / ns)
        u_env[port] = need
    out: dict[str, tuple[float, str]] = {}
    speed = f"max_speed {cfg.max_speed:g}"
    for ch, port in cfg.inputs.items():
        out[ch] = (u_env[port], f"holds and accelerates the model at {speed}" if math.isfinite(u_env[port])
                   else "moves no coordinate at some pose of the envelope")
    lengths = any(c.rpartition(".")[2] != "theta" for c in coords)
    for ch, port in cfg.compare.items():
        out[ch] = _output_envelope(port, names, rows, [u_env[p] for p in ports], lengths, speed)
    return out, {ch: units.get(p, "") for ch, p in [*cfg.inputs.items(), *cfg.compare.items()]}


def _states(sim: Simulator, coords: tuple[str, ...], ports: list[str], vmax: float) -> list[tuple[Any, list[Any]]]:
    """Per envelope state: the outputs with every input at 0, and their change per unit of each input."""
    q0 = {c: sim.get_output(c) for c in coords}
    rows = []
    for k in range(SWEEP):
        pos = {c: q0[c] + (2 * math.pi * k / SWEEP if c.endswith(".theta") else 0.0) for c in coords}
        for sign in (-1.0, 0.0, 1.0):
            try:
                sim.set_configuration(pos, {speed_of(c): sign * vmax for c in coords})
                y0 = sim.output_vector().copy()
            except MbsdError:
                continue  # a pose the mechanism cannot take
            dy = []
            for p in ports:
                sim.set_input(p, 1.0)
                dy.append(sim.output_vector() - y0)
                sim.set_input(p, 0.0)
            rows.append((y0, dy))
    return rows


def _output_envelope(port: str, names: list[str], rows: list[tuple[Any, list[Any]]], u_env: list[float],
                     lengths: bool, speed: str) -> tuple[float, str]:
    """One compared output's envelope and its rule (see the module's docstring)."""
    kind = port.rpartition(".")[2]
    if kind == "theta":
        return ANGLE_LIMIT, "an angle: bounded by the resolution of doubles"
    if port not in names:
        return math.inf, "not a model output"
    j = names.index(port)
    if kind in ("x", "y"):
        if lengths:
            return math.inf, "a position, and a coordinate is a length"
        return max(abs(float(y0[j])) for y0, _ in rows), "largest over the poses of a turn"
    if kind in ("omega", "vx", "vy"):
        return max(abs(float(y0[j])) for y0, _ in rows), f"largest at {speed}"
    if any(not math.isfinite(u) for u in u_env):
        return math.inf, "an input it depends on is unbounded"
    env = max(abs(float(y0[j])) + sum(u * abs(float(d[j])) for u, d in zip(u_env, dy, strict=True))
              for y0, dy in rows)
    return env, f"largest at {speed} with the inputs at their envelope"
