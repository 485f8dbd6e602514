"""Compiled (numba) time profiles f(t) and cam curves p(s), one value at a time, with their
derivatives: the same functions as ``profiles.py`` and ``surfaces.py`` (whose numpy and scipy
versions the tests compare these with), coded as parameter arrays by ``compiled_model``.

Piecewise cubics (a table profile, a spline curve, a polar spline) are stored as blocks
[k, x_0 … x_{k−1}, then per segment the coefficients c0 … c3 of c0·d³ + c1·d² + c2·d + c3 with
d = s − x_seg] (scipy's ``PPoly`` coefficients): the segment is the one scipy evaluates, the last
breakpoint at or below s, the end segments extended beyond the breakpoints.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .nb_cache import guard as guard_cache

TWO_PI = 2.0 * math.pi

# profile codes: 0 constant(p0), 1 constant speed(speed p0, start p1), 2 polynomial(p0..),
# 3 harmonic(amplitude p0, frequency p1 [Hz], phase p2, offset p3), 4 table (a piecewise cubic
# block, the end values held outside it)


@njit(cache=True)
def polynomial(p: np.ndarray, s: float) -> tuple[float, float, float, float]:
    """f(s) = Σ p[k]·s^k and its first three derivatives (Horner with derivatives)."""
    f, d1, d2, d3 = 0.0, 0.0, 0.0, 0.0
    for k in range(p.shape[0] - 1, -1, -1):
        d3 = d3 * s + 3.0 * d2
        d2 = d2 * s + 2.0 * d1
        d1 = d1 * s + f
        f = f * s + p[k]
    return f, d1, d2, d3


@njit(cache=True, inline="always")
def _segment(p: np.ndarray, o: int, s: float) -> int:
    """The segment of the piecewise cubic block at p[o] that s falls in: the largest i ≤ k − 2
    with x_i ≤ s (0 below x_0)."""
    lo, hi = 0, int(p[o]) - 2
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if p[o + 1 + mid] <= s:
            lo = mid
        else:
            hi = mid - 1
    return lo


@njit(cache=True, inline="always")
def _cubic(p: np.ndarray, o: int, i: int, s: float) -> tuple[float, float, float, float]:
    """Segment i of the block at p[o] and its first three derivatives at s."""
    k = int(p[o])
    d = s - p[o + 1 + i]
    c = o + 1 + k + 4 * i
    c0, c1, c2, c3 = p[c], p[c + 1], p[c + 2], p[c + 3]
    return ((c0 * d + c1) * d + c2) * d + c3, (3.0 * c0 * d + 2.0 * c1) * d + c2, 6.0 * c0 * d + 2.0 * c1, 6.0 * c0


@njit(cache=True)
def piecewise(p: np.ndarray, o: int, s: float) -> tuple[float, float, float, float]:
    """The piecewise cubic block starting at p[o] and its first three derivatives at s."""
    return _cubic(p, o, _segment(p, o, s), s)


@njit(cache=True)
def profile(code: int, p: np.ndarray, t: float) -> tuple[float, float, float]:
    if code == 0:
        return p[0], 0.0, 0.0
    if code == 1:
        return p[1] + p[0] * t, p[0], 0.0
    if code == 2:
        f, d1, d2, _ = polynomial(p, t)
        return f, d1, d2
    if code == 4:
        first, last = p[1], p[int(p[0])]
        f, d1, d2, _ = piecewise(p, 0, min(max(t, first), last))
        return (f, d1, d2) if first <= t <= last else (f, 0.0, 0.0)
    w = 2.0 * math.pi * p[1]
    s, c = math.sin(w * t + p[2]), math.cos(w * t + p[2])
    return p[3] + p[0] * s, p[0] * w * c, -p[0] * w * w * s


# surface codes: 0 circle [R, cx, cy], 1 line [px, py, ux, uy] (u of unit length), 2 polynomial graph
# [a0, a1, …], 3 polar Fourier [a0, a1, b1, a2, b2, …], 4 spline [closed 0/1, block of x(s), block
# of y(s)], 5 polar spline [φ_0, block of r(φ)]; parameters padded with zeros


@njit(cache=True)
def _fourier(p: np.ndarray, s: float) -> tuple[float, float, float, float]:
    """r(φ) = a0 + Σ_k (a_k cos kφ + b_k sin kφ) and its first three derivatives."""
    r, r1, r2, r3 = p[0], 0.0, 0.0, 0.0
    for k in range(1, (p.shape[0] - 1) // 2 + 1):
        ak, bk = p[2 * k - 1], p[2 * k]
        c, sn = math.cos(k * s), math.sin(k * s)
        x, y = ak * c + bk * sn, -ak * sn + bk * c
        r += x
        r1 += k * y
        r2 -= k * k * x
        r3 -= k * k * k * y
    return r, r1, r2, r3


@njit(cache=True)
def _polar(s, r, r1, r2, r3):  # noqa: ANN001
    """p = r(φ)·e(φ) and its derivatives in φ = s, with f(φ) = R90·e = (−ey, ex)."""
    ex, ey = math.cos(s), math.sin(s)
    return (r * ex, r * ey, r1 * ex - r * ey, r1 * ey + r * ex, (r2 - r) * ex - 2.0 * r1 * ey,
            (r2 - r) * ey + 2.0 * r1 * ex, (r3 - 3.0 * r1) * ex - (3.0 * r2 - r) * ey,
            (r3 - 3.0 * r1) * ey + (3.0 * r2 - r) * ex)


@njit(cache=True)
def _spline(p: np.ndarray, s: float) -> tuple[float, float, float, float, float, float, float, float]:
    """A spline curve [closed, block x(s), block y(s)]; a closed one is periodic in its length."""
    k = int(p[1])
    if p[0] > 0.0:
        s = s % p[1 + k]  # the length, the last breakpoint (Python's modulo: as np.mod)
    i = _segment(p, 1, s)  # both blocks have the same breakpoints
    x, x1, x2, x3 = _cubic(p, 1, i, s)
    y, y1, y2, y3 = _cubic(p, 1 + 1 + k + 4 * (k - 1), i, s)
    return x, y, x1, y1, x2, y2, x3, y3


@njit(cache=True)
def curve(code: int, p: np.ndarray, s: float) -> tuple[float, float, float, float, float, float, float, float]:
    """p(s), p'(s), p''(s), p'''(s) (body frame, as x, y pairs) of surface ``code`` with
    parameters ``p``."""
    if code == 0:
        R, c, sn = p[0], math.cos(s), math.sin(s)
        return p[1] + R * c, p[2] + R * sn, -R * sn, R * c, -R * c, -R * sn, R * sn, -R * c
    if code == 1:
        return p[0] + s * p[2], p[1] + s * p[3], p[2], p[3], 0.0, 0.0, 0.0, 0.0
    if code == 2:
        f, d1, d2, d3 = polynomial(p, s)
        return s, f, 1.0, d1, 0.0, d2, 0.0, d3
    if code == 4:
        return _spline(p, s)
    if code == 5:
        r, r1, r2, r3 = piecewise(p, 1, p[0] + (s - p[0]) % TWO_PI)
        return _polar(s, r, r1, r2, r3)
    r, r1, r2, r3 = _fourier(p, s)
    return _polar(s, r, r1, r2, r3)


# imported first by every compiled module (through nb_kernels): drop cached code from older sources now
guard_cache(profile)
