"""Time profiles f(t) with analytic first and second derivatives.

A profile drives a rheonomic constraint (a driver) or scales a load. Every profile evaluates a
whole array of times at once and returns ``(f, df/dt, d2f/dt2)`` with the shape of ``t``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray
from scipy.interpolate import CubicSpline

FloatArray = NDArray[np.float64]
ProfileValues = tuple[FloatArray, FloatArray, FloatArray]


@runtime_checkable
class Profile(Protocol):
    """Anything with ``evaluate(t) -> (f, f', f'')``; ``kind`` names it in files and errors."""

    @property
    def kind(self) -> str: ...

    def evaluate(self, t: FloatArray) -> ProfileValues: ...


@dataclass(frozen=True)
class Constant:
    """f(t) = value."""

    value: float
    kind: str = field(default="constant", init=False)

    def evaluate(self, t: FloatArray) -> ProfileValues:
        t = np.asarray(t, dtype=float)
        return np.full_like(t, self.value), np.zeros_like(t), np.zeros_like(t)


@dataclass(frozen=True)
class ConstantSpeed:
    """f(t) = start + speed·t (for an angle: rad and rad/s)."""

    speed: float
    start: float = 0.0
    kind: str = field(default="constant_speed", init=False)

    def evaluate(self, t: FloatArray) -> ProfileValues:
        t = np.asarray(t, dtype=float)
        return self.start + self.speed * t, np.full_like(t, self.speed), np.zeros_like(t)


@dataclass(frozen=True)
class Polynomial:
    """f(t) = c0 + c1·t + c2·t² + … (coefficients in increasing power)."""

    coefficients: tuple[float, ...]
    kind: str = field(default="polynomial", init=False)

    def evaluate(self, t: FloatArray) -> ProfileValues:
        t = np.asarray(t, dtype=float)
        c = np.asarray(self.coefficients, dtype=float)
        p = np.polynomial.Polynomial(c)
        return p(t), p.deriv(1)(t), p.deriv(2)(t)


@dataclass(frozen=True)
class Harmonic:
    """f(t) = offset + amplitude·sin(2π·frequency·t + phase); frequency in Hz, phase in rad."""

    amplitude: float
    frequency: float
    phase: float = 0.0
    offset: float = 0.0
    kind: str = field(default="harmonic", init=False)

    def evaluate(self, t: FloatArray) -> ProfileValues:
        t = np.asarray(t, dtype=float)
        w = 2.0 * np.pi * self.frequency
        arg = w * t + self.phase
        s, c = np.sin(arg), np.cos(arg)
        return self.offset + self.amplitude * s, self.amplitude * w * c, -self.amplitude * w * w * s


@dataclass(frozen=True)
class Table:
    """C2 cubic spline through (times, values), clamped (zero slope) at both ends.

    Outside ``[times[0], times[-1]]`` the end value is held (zero derivatives), so the profile is
    C2 inside the table and C1 across its ends.
    """

    times: tuple[float, ...]
    values: tuple[float, ...]
    kind: str = field(default="table", init=False)
    _spline: CubicSpline = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        spline = CubicSpline(np.asarray(self.times, float), np.asarray(self.values, float),
                             bc_type="clamped", extrapolate=False)
        object.__setattr__(self, "_spline", spline)

    def evaluate(self, t: FloatArray) -> ProfileValues:
        t = np.asarray(t, dtype=float)
        tc = np.clip(t, self.times[0], self.times[-1])
        inside = (t >= self.times[0]) & (t <= self.times[-1])
        f = self._spline(tc)
        d1 = np.where(inside, self._spline(tc, 1), 0.0)
        d2 = np.where(inside, self._spline(tc, 2), 0.0)
        return np.asarray(f, float), np.asarray(d1, float), np.asarray(d2, float)


@dataclass(frozen=True)
class FunctionProfile:
    """A Python callable ``fn(t) -> (f, f', f'')`` (API only; not expressible in a file)."""

    fn: Callable[[FloatArray], tuple[Sequence[float] | FloatArray | float, ...]]
    kind: str = field(default="callable", init=False)

    def evaluate(self, t: FloatArray) -> ProfileValues:
        t = np.asarray(t, dtype=float)
        out = self.fn(t)
        if len(out) != 3:
            raise ValueError("a callable profile must return (value, first derivative, second derivative)")
        f, d1, d2 = (np.broadcast_to(np.asarray(x, dtype=float), t.shape).copy() for x in out)
        return f, d1, d2


PROFILE_KINDS: dict[str, type] = {
    "constant": Constant,
    "constant_speed": ConstantSpeed,
    "polynomial": Polynomial,
    "harmonic": Harmonic,
    "table": Table,
}
