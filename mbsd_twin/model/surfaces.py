"""Parameterised plane curves p(s) in a body frame, with analytic derivatives up to the third.

Used by the ``cam`` joint (two curves in tangent contact, their parameters extra coordinates) and
by penalty contact (a circle or polygon against a profile). Every curve evaluates a whole array of
parameters at once: ``curve(s)`` returns ``(p, p', p'', p''')``, each of shape ``s.shape + (2,)``.

Side convention: the normal ``R90·p'`` (the tangent turned +90°) points to the curve's *free*
side. For a graph y(x) parameterised by x (``Polynomial``, ``Spline.graph``) that is "above"; for a
counter-clockwise closed curve (``Circle``, ``Polar``, a closed ``Spline`` through CCW points) it
points inwards. Penalty contact uses it; the cam joint's tangency equation is side-neutral.

Kinds (``kind`` names them in files):

- ``circle``: p = c + R·(cos s, sin s); s is an angle [rad].
- ``line``: p = p0 + s·u (u normalised); s is a length [m].
- ``polynomial``: the graph p = (s, Σ a_k s^k); s is the body x [m].
- ``Graph`` (Python API only): the graph p = (s, f(s)) of a function returning f and its first
  three derivatives; s is the body x [m].
- ``spline``: a C² cubic spline through points, parameterised by chord length [m]; ``closed``
  makes it periodic.
- ``polar``: p = r(φ)·(cos φ, sin φ) with r(φ) a Fourier series
  a0 + Σ (a_k cos kφ + b_k sin kφ) or a periodic C² spline through (φ_k, r_k); s = φ [rad].
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray
from scipy.interpolate import CubicSpline

F = NDArray[Any]
Curve = tuple[F, F, F, F]
TWO_PI = 2.0 * math.pi


@runtime_checkable
class Surface(Protocol):
    """A plane curve in a body frame; ``samples()`` (a parameter grid) or ``project(points)``
    gives initial guesses of the contact parameter."""

    @property
    def kind(self) -> str: ...

    def curve(self, s: F) -> Curve: ...

    def samples(self) -> F | None: ...

    def project(self, points: F) -> F: ...


def _xy(x: F, y: F) -> F:
    return np.stack(np.broadcast_arrays(x, y), axis=-1)


@dataclass(frozen=True)
class Circle:
    radius: float
    center: tuple[float, float] = (0.0, 0.0)
    kind: str = field(default="circle", init=False)

    def curve(self, s: F) -> Curve:
        s = np.asarray(s, float)
        c, sn, R = np.cos(s), np.sin(s), self.radius
        e, f = _xy(c, sn), _xy(-sn, c)
        return np.asarray(self.center) + R * e, R * f, -R * e, -R * f

    def samples(self) -> F:
        return np.linspace(0.0, TWO_PI, 720, endpoint=False)

    def project(self, points: F) -> F:
        d = np.asarray(points, float) - np.asarray(self.center)
        return np.arctan2(d[..., 1], d[..., 0])


@dataclass(frozen=True)
class Line:
    point: tuple[float, float] = (0.0, 0.0)
    direction: tuple[float, float] = (1.0, 0.0)
    kind: str = field(default="line", init=False)

    def _u(self) -> F:
        u = np.asarray(self.direction, float)
        return u / np.linalg.norm(u)

    def curve(self, s: F) -> Curve:
        s = np.asarray(s, float)[..., None]
        u = self._u()
        z = np.zeros(s.shape[:-1] + (2,))
        return np.asarray(self.point) + s * u, z + u, z, z.copy()

    def samples(self) -> None:
        return None

    def project(self, points: F) -> F:
        return np.asarray((np.asarray(points, float) - np.asarray(self.point)) @ self._u())


@dataclass(frozen=True)
class Polynomial:
    """The graph y = Σ a_k x^k (coefficients in increasing power), parameter s = x."""

    coefficients: tuple[float, ...]
    kind: str = field(default="polynomial", init=False)

    def curve(self, s: F) -> Curve:
        s = np.asarray(s, float)
        p = np.polynomial.Polynomial(np.asarray(self.coefficients, float))
        one, zero = np.ones_like(s), np.zeros_like(s)
        return (_xy(s, p(s)), _xy(one, p.deriv(1)(s)), _xy(zero, p.deriv(2)(s)), _xy(zero, p.deriv(3)(s)))

    def samples(self) -> None:
        return None

    def project(self, points: F) -> F:
        return np.asarray(points, float)[..., 0]


@dataclass(frozen=True)
class Graph:
    """The graph y = f(x) of a Python function (API only), parameter s = x. ``function(x)`` takes
    an array and returns f and its first three derivatives, as the cam joint and contact need."""

    function: Callable[[F], tuple[F, F, F, F]]
    kind: str = field(default="graph", init=False)

    def curve(self, s: F) -> Curve:
        s = np.asarray(s, float)
        f, d1, d2, d3 = (np.broadcast_to(np.asarray(v, float), s.shape) for v in self.function(s))
        one, zero = np.ones_like(s), np.zeros_like(s)
        return _xy(s, f), _xy(one, d1), _xy(zero, d2), _xy(zero, d3)

    def samples(self) -> None:
        return None

    def project(self, points: F) -> F:
        return np.asarray(points, float)[..., 0]


@dataclass(frozen=True)
class Spline:
    """C² cubic spline through ``points`` (at least 3; for ``closed`` the first point is not
    repeated), parameterised by cumulative chord length; open splines use not-a-knot ends and
    are extended by their end cubics, closed ones are periodic."""

    points: tuple[tuple[float, float], ...]
    closed: bool = False
    kind: str = field(default="spline", init=False)
    _spline: CubicSpline = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pts = np.asarray(self.points, float).reshape(-1, 2)
        if self.closed:
            pts = np.vstack([pts, pts[:1]])
        s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(pts, axis=0).T))])
        spline = CubicSpline(s, pts, axis=0, bc_type="periodic" if self.closed else "not-a-knot")
        object.__setattr__(self, "_spline", spline)

    @classmethod
    def graph(cls, x: Sequence[float], y: Sequence[float]) -> Spline:
        """An open spline through (x_k, y_k): a terrain profile when x increases."""
        return cls(tuple((float(a), float(b)) for a, b in zip(x, y, strict=True)))

    @property
    def length(self) -> float:
        return float(self._spline.x[-1])

    def curve(self, s: F) -> Curve:
        s = np.asarray(s, float)
        if self.closed:
            s = np.mod(s, self.length)
        sp = self._spline
        return sp(s), sp(s, 1), sp(s, 2), sp(s, 3)

    def samples(self) -> F:
        return np.linspace(0.0, self.length, 800, endpoint=not self.closed)

    def project(self, points: F) -> F:
        raise NotImplementedError  # samples() is used instead


@dataclass(frozen=True)
class Polar:
    """A polar cam profile p = r(φ)·(cos φ, sin φ), s = φ.

    r(φ) = a0 + Σ_k (a_k cos kφ + b_k sin kφ) from ``fourier`` = (a0, a1, b1, a2, b2, …), or the
    periodic C² spline through ``angles`` (increasing, within one turn) and ``radii``."""

    fourier: tuple[float, ...] = ()
    angles: tuple[float, ...] = ()
    radii: tuple[float, ...] = ()
    kind: str = field(default="polar", init=False)
    _spline: CubicSpline | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.angles:
            phi = np.r_[np.asarray(self.angles, float), self.angles[0] + TWO_PI]
            r = np.r_[np.asarray(self.radii, float), self.radii[0]]
            object.__setattr__(self, "_spline", CubicSpline(phi, r, bc_type="periodic"))

    def radius(self, phi: F) -> tuple[F, F, F, F]:
        """r and its first three derivatives in φ."""
        phi = np.asarray(phi, float)
        if self._spline is not None:
            x = self.angles[0] + np.mod(phi - self.angles[0], TWO_PI)
            sp = self._spline
            return sp(x), sp(x, 1), sp(x, 2), sp(x, 3)
        a = np.asarray(self.fourier, float)
        out = [np.full_like(phi, a[0] if a.size else 0.0), *(np.zeros_like(phi) for _ in range(3))]
        for k in range(1, (a.size - 1) // 2 + 1):
            ak, bk = a[2 * k - 1], a[2 * k]
            c, s = np.cos(k * phi), np.sin(k * phi)
            out[0] = out[0] + ak * c + bk * s
            out[1] = out[1] + k * (-ak * s + bk * c)
            out[2] = out[2] - k * k * (ak * c + bk * s)
            out[3] = out[3] - k**3 * (-ak * s + bk * c)
        return out[0], out[1], out[2], out[3]

    def curve(self, s: F) -> Curve:
        s = np.asarray(s, float)
        r, r1, r2, r3 = (x[..., None] for x in self.radius(s))
        e = _xy(np.cos(s), np.sin(s))
        f = _xy(-np.sin(s), np.cos(s))
        return r * e, r1 * e + r * f, (r2 - r) * e + 2 * r1 * f, (r3 - 3 * r1) * e + (3 * r2 - r) * f

    def samples(self) -> F:
        return np.linspace(0.0, TWO_PI, 720, endpoint=False)

    def project(self, points: F) -> F:
        p = np.asarray(points, float)
        return np.arctan2(p[..., 1], p[..., 0])


SURFACE_KINDS = ("circle", "line", "polynomial", "spline", "polar")


def rotate(theta: F, p: F) -> F:
    """A(θ)·p for θ (B,) and p (B, 2) or (B, K, 2) (θ broadcast over K)."""
    c, s = np.cos(theta), np.sin(theta)
    if p.ndim == 3:
        c, s = c[:, None], s[:, None]
    return np.stack([c * p[..., 0] - s * p[..., 1], s * p[..., 0] + c * p[..., 1]], axis=-1)


def closest_pair(a: Surface, b: Surface, pose_a: tuple[float, float, float],
                 pose_b: tuple[float, float, float]) -> tuple[float, float]:
    """Parameters (s_a, s_b) of the closest pair of points of two curves at the given body poses
    (x, y, θ): the default initial guess of a cam joint's extra coordinates."""

    def world(surf: Surface, pose: tuple[float, float, float], s: F) -> F:
        p = surf.curve(s)[0]
        return rotate(np.full(len(s), pose[2]), p) + np.asarray(pose[:2])

    def local(surf_pose: tuple[float, float, float], pts: F) -> F:
        d = pts - np.asarray(surf_pose[:2])
        c, s = math.cos(surf_pose[2]), math.sin(surf_pose[2])
        return np.stack([c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1]], axis=1)

    sa, sb = a.samples(), b.samples()
    if sa is None and sb is None:
        return 0.0, 0.0
    if sa is not None and sb is not None:
        pa, pb = world(a, pose_a, sa), world(b, pose_b, sb)
        d = np.linalg.norm(pa[:, None, :] - pb[None, :, :], axis=2)
        i, j = np.unravel_index(int(np.argmin(d)), d.shape)
        return float(sa[i]), float(sb[j])
    # one curve sampled, the other (a line or a graph) found by projection
    flip = sa is None
    grid = sb if flip else sa
    assert grid is not None
    g_surf, g_pose, f_surf, f_pose = (b, pose_b, a, pose_a) if flip else (a, pose_a, b, pose_b)
    pts = world(g_surf, g_pose, grid)
    sf = f_surf.project(local(f_pose, pts))
    k = int(np.argmin(np.linalg.norm(world(f_surf, f_pose, sf) - pts, axis=1)))
    return (float(sf[k]), float(grid[k])) if flip else (float(grid[k]), float(sf[k]))
