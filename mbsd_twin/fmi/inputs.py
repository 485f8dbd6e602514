"""Input profiles for the validation harness (``--input NAME=PROFILE``) and the communication grid.

PROFILE syntax (numbers in SI units, ``:``-separated, nothing is evaluated):

==============================  =============================================================
``2.0``                         constant
``step:T:V0:V1``                V0 before T [s], V1 from T on
``pwc:V0:T1:V1:T2:V2…``         piecewise constant: V0, then V1 from T1, V2 from T2 … (T rising)
``ramp:T0:T1:V0:V1``            V0 until T0, linear to V1 at T1, then V1
``sine:A:F[:OFFSET[:PHASE]]``   OFFSET + A·sin(2π·F·t + PHASE), F in Hz, PHASE in rad
==============================  =============================================================

A switch at T takes effect at the first communication point t ≥ T (within 1e-9 relative): an FMI
master samples the inputs at the start of each step and holds them over it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

KINDS = ("constant", "step", "pwc", "ramp", "sine")


def _reached(t: float, switch: float) -> bool:
    return t >= switch or math.isclose(t, switch, rel_tol=1e-9, abs_tol=1e-12)


@dataclass(frozen=True)
class InputProfile:
    """A parsed PROFILE: ``kind`` and its numbers; call it with a time [s]."""

    kind: str
    args: tuple[float, ...]
    text: str = ""

    @property
    def spec(self) -> str:
        """The PROFILE text that parses back to this profile (numbers written exactly)."""
        nums = ":".join(repr(float(a)) for a in self.args)
        return nums if self.kind == "constant" else f"{self.kind}:{nums}"

    def __call__(self, t: float) -> float:
        a = self.args
        if self.kind == "constant":
            return a[0]
        if self.kind == "step":
            return a[2] if _reached(t, a[0]) else a[1]
        if self.kind == "pwc":
            value = a[0]
            for k in range(1, len(a), 2):
                if _reached(t, a[k]):
                    value = a[k + 1]
            return value
        if self.kind == "ramp":
            t0, t1, v0, v1 = a
            if not _reached(t, t0):
                return v0
            return v1 if _reached(t, t1) else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
        amp, freq, offset, phase = (*a, 0.0, 0.0)[:4]
        return offset + amp * math.sin(2.0 * math.pi * freq * t + phase)


def _numbers(parts: Sequence[str], text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        raise ValueError(f"input profile {text!r}: {':'.join(parts)!r} are not all numbers") from None
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"input profile {text!r}: numbers must be finite")
    return values


def parse_profile(text: str) -> InputProfile:
    """Parse a PROFILE (see the module docstring); raises ValueError with the expected form."""
    head, _, rest = text.strip().partition(":")
    if not rest:
        return InputProfile("constant", _numbers([head], text), text)
    args = _numbers(rest.split(":"), text)
    forms = {"step": "step:T:V0:V1", "ramp": "ramp:T0:T1:V0:V1", "sine": "sine:A:F[:OFFSET[:PHASE]]",
             "pwc": "pwc:V0:T1:V1:T2:V2..."}
    ok = {"step": len(args) == 3, "ramp": len(args) == 4 and args[1] > args[0],
          "sine": 2 <= len(args) <= 4,
          "pwc": len(args) % 2 == 1 and all(b > a for a, b in zip(args[1::2], args[3::2], strict=False))}
    if head not in ok:
        raise ValueError(f"input profile {text!r}: unknown kind {head!r}; use a number or one of "
                         f"{', '.join(forms.values())}")
    if not ok[head]:
        raise ValueError(f"input profile {text!r}: expected {forms[head]} (times rising)")
    return InputProfile(head, args, text)


def parse_assignment(item: str) -> tuple[str, InputProfile]:
    """``NAME=PROFILE`` → (name, profile)."""
    name, sep, profile = item.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--input expects NAME=PROFILE, got {item!r}")
    return name.strip(), parse_profile(profile)


def communication_points(start: float, stop: float, step: float) -> NDArray[np.float64]:
    """The communication points fmpy's co-simulation loop visits for a regular grid (and no input
    events): ``start + (n+1)·step`` until ``stop``, the last step shortened to end at ``stop``."""
    if not (step > 0 and stop > start):
        raise ValueError(f"need step > 0 and stop > start, got step={step!r}, start={start!r}, stop={stop!r}")
    times = [start]
    time, n = start, 0
    while not (time > stop or math.isclose(time, stop)):
        regular = start + (n + 1) * step
        nxt = regular
        if nxt > stop and not math.isclose(nxt, stop):
            nxt = stop
        time = nxt
        times.append(time)
        if math.isclose(time, regular):
            n += 1
    return np.array(times)
