"""Unilateral penalty contact: Hertz normal force with damping, tanh-regularised Coulomb friction.

A ``contact`` load acts between a *profile* on its first body (any curve of
:mod:`mbsd_twin.model.surfaces`, or a :class:`Polyline`; on ``ground`` it is a terrain) and a circle or
the vertices of a polygon on its second body. For every probe (the circle, or each vertex as a
circle of radius 0) with centre X, the nearest profile point F and the unit normal n towards the
profile's free side (left of its direction, see ``surfaces``):

    d = n·(X − F)                    signed distance of the centre
    δ = R − d                        penetration (contact when δ > 0)
    δ̇ = −n·v_rel                     penetration rate (v_rel: velocity of the contact point on the
                                     second body relative to the first, at P = X − R·n)
    Fn = max(0, K·δ^1.5 + C·δ̇·δ)     normal force, pushes only
    Ft = −μ·Fn·tanh(v_slip / v_lim)  friction along t = −R90·n (the profile direction),
                                     v_slip = t·v_rel

The second body receives Fn·n + Ft·t at P, the first body the opposite. Energy terms: elastic
0.4·K·δ^2.5; dissipated power (Fn − K·δ^1.5)·δ̇ + μ·Fn·tanh(v_slip/v_lim)·v_slip ≥ 0.

Outputs per contact load (see ``output_specs``): ``<load>.normal_force`` [N] (sum over probes),
``<load>.friction_force`` [N] (sum of Ft, on the second body along t), ``<load>.penetration``
[m] (largest δ, 0 when apart) and ``<load>.slip_velocity`` [m/s] (Fn-weighted mean of v_slip).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..model.model import ContactSpec, Load, Polyline
from ..model.surfaces import Surface
from .load_base import Group, LoadContext
from .output_spec import OutputSpec

F = NDArray[Any]
NEWTON_STEPS = 8  # the final Newton iterations from the nearest sample or search point, on both paths


def _r90(a: F) -> F:
    return np.stack([-a[..., 1], a[..., 0]], axis=-1)


_GRIDS: dict[int, tuple[Surface, F, F]] = {}


def _grid(curve: Surface) -> tuple[F, F] | None:
    """Parameter samples of a curve and their points, computed once per curve object."""
    hit = _GRIDS.get(id(curve))
    if hit is None or hit[0] is not curve:
        samples = curve.samples()
        if samples is None:
            return None
        hit = (curve, samples, curve.curve(samples)[0])
        _GRIDS[id(curve)] = hit
    return hit[1], hit[2]


def nearest_on_curve(curve: Surface, x: F) -> tuple[F, F]:
    """Nearest point F (…, 2) of a smooth curve to points x (…, 2) and the unit normal n = R90·t̂:
    the closest sample (or the projection for lines and graphs), then Newton on the stationarity
    of the distance, g(s) = (p − x)·p' = 0."""
    grid = _grid(curve)
    if grid is None:
        s = curve.project(x)
    else:
        s = grid[0][np.argmin(((x[..., None, :] - grid[1]) ** 2).sum(axis=-1), axis=-1)]
    for _ in range(NEWTON_STEPS):
        p, d1, d2, _ = curve.curve(s)
        g = ((p - x) * d1).sum(axis=-1)
        dg = (d1 * d1).sum(axis=-1) + ((p - x) * d2).sum(axis=-1)
        step = g / np.where(dg > 1e-12, dg, (d1 * d1).sum(axis=-1))
        s = s - step
        if np.abs(step).max(initial=0.0) < 1e-13:
            break
    p, d1, _, _ = curve.curve(s)
    return p, _r90(d1) / np.linalg.norm(d1, axis=-1, keepdims=True)


def nearest_on_polyline(line: Polyline, x: F) -> tuple[F, F]:
    """Nearest point of a polyline and the normal towards the point's side (the segment normal
    where the nearest point is inside a segment)."""
    pts = np.asarray(line.points, float)
    a, seg = pts[:-1], np.diff(pts, axis=0)
    rel = x[..., None, :] - a
    t = np.clip((rel * seg).sum(axis=-1) / (seg * seg).sum(axis=-1), 0.0, 1.0)
    foot = a + t[..., None] * seg
    dist2 = ((x[..., None, :] - foot) ** 2).sum(axis=-1)
    k = np.argmin(dist2, axis=-1)
    foot_k = np.take_along_axis(foot, k[..., None, None], axis=-2)[..., 0, :]
    seg_n = _r90(seg[k]) / np.linalg.norm(seg[k], axis=-1, keepdims=True)
    d = x - foot_k
    dn = np.linalg.norm(d, axis=-1, keepdims=True)
    side = np.sign((d * seg_n).sum(axis=-1, keepdims=True))
    n = np.where(dn > 1e-12, np.where(side < 0, -1.0, 1.0) * d / np.maximum(dn, 1e-300), seg_n)
    return foot_k, n


def nearest(profile: Any, x: F) -> tuple[F, F]:
    return nearest_on_polyline(profile, x) if isinstance(profile, Polyline) else nearest_on_curve(profile, x)


def _rot(c: F, s: F, p: F) -> F:
    """A(θ)·p for c, s (B, 1) and p (B, P, 2) or (P, 2)."""
    return np.stack([c * p[..., 0] - s * p[..., 1], s * p[..., 0] + c * p[..., 1]], axis=-1)


class PenaltyContacts(Group):
    """All ``contact`` loads of a mechanism (see the module docstring)."""

    def __init__(self, col: dict[str, int], loads: Sequence[Load]) -> None:
        super().__init__(col, loads)
        self.specs: list[ContactSpec] = [ld.contact for ld in loads]
        self.K = np.array([ld.stiffness for ld in loads], float)
        self.C = np.array([ld.damping for ld in loads], float)
        self.probes = [np.asarray([sp.center] if sp.radius > 0 else sp.vertices, float).reshape(-1, 2)
                       for sp in self.specs]

    def _one(self, ctx: LoadContext, k: int) -> dict[str, F]:
        """Forces and energy terms of contact k for the batch: arrays (B, P) or (B, P, 2)."""
        sp, ci, cj = self.specs[k], self.ci[k], self.cj[k]
        qx, vx = ctx.qx, ctx.vx
        th_i, th_j = qx[:, ci + 2][:, None], qx[:, cj + 2][:, None]
        ri, rj = qx[:, None, ci:ci + 2], qx[:, None, cj:cj + 2]
        X = rj + _rot(np.cos(th_j), np.sin(th_j), self.probes[k])               # world (B, P, 2)
        ci_, si_ = np.cos(th_i), np.sin(th_i)
        local = _rot(ci_, -si_, X - ri)                                           # profile frame
        foot, n_loc = nearest(sp.surface, local)
        n = _rot(ci_, si_, n_loc)
        d = ((local - foot) * n_loc).sum(axis=-1)
        delta = sp.radius - d
        P = X - sp.radius * n
        vel = [vx[:, None, c:c + 2] + vx[:, c + 2][:, None, None] * _r90(P - r) for c, r in ((ci, ri), (cj, rj))]
        v_rel = vel[1] - vel[0]
        t = -_r90(n)
        ddelta, v_slip = -(n * v_rel).sum(axis=-1), (t * v_rel).sum(axis=-1)
        pen = np.maximum(delta, 0.0)
        fe = self.K[k] * pen**1.5
        fn = np.where(delta > 0, np.maximum(0.0, fe + self.C[k] * ddelta * pen), 0.0)
        th = np.tanh(v_slip / sp.slip_velocity)
        ft = -sp.friction * fn * th
        return {"P": P, "force": fn[..., None] * n + ft[..., None] * t, "fn": fn, "ft": ft, "delta": pen,
                "v_slip": v_slip, "elastic": 0.4 * self.K[k] * pen**2.5,
                "dissipation": (fn - fe) * ddelta + sp.friction * fn * th * v_slip}

    def apply(self, Q: F, ctx: LoadContext) -> tuple[F, F, F]:
        B = len(ctx.t)
        elastic, dissipation = np.zeros(B), np.zeros(B)
        for k in range(len(self.specs)):
            r = self._one(ctx, k)
            f, P = r["force"], r["P"]
            for c, sign in ((self.cj[k], 1.0), (self.ci[k], -1.0)):
                arm = P - ctx.qx[:, None, c:c + 2]
                Q[:, c] += sign * f[..., 0].sum(axis=1)
                Q[:, c + 1] += sign * f[..., 1].sum(axis=1)
                Q[:, c + 2] += sign * (arm[..., 0] * f[..., 1] - arm[..., 1] * f[..., 0]).sum(axis=1)
            elastic += r["elastic"].sum(axis=1)
            dissipation += r["dissipation"].sum(axis=1)
        return elastic, dissipation, np.zeros(B)

    def output_specs(self) -> list[OutputSpec]:
        out = []
        for ld in self.loads:
            out += [OutputSpec(f"{ld.name}.normal_force", "N", f"contact normal force of {ld.name} (pushing)"),
                    OutputSpec(f"{ld.name}.friction_force", "N",
                               f"friction force of {ld.name} on {ld.bodies[1]} along the profile direction"),
                    OutputSpec(f"{ld.name}.penetration", "m", f"largest penetration of {ld.name} (0 when apart)"),
                    OutputSpec(f"{ld.name}.slip_velocity", "m/s",
                               f"slip velocity of {ld.bodies[1]} along the profile direction (force-weighted)")]
        return out

    def outputs(self, ctx: LoadContext) -> dict[str, F]:
        out: dict[str, F] = {}
        for k, ld in enumerate(self.loads):
            r = self._one(ctx, k)
            fn = r["fn"].sum(axis=1)
            out[f"{ld.name}.normal_force"] = fn
            out[f"{ld.name}.friction_force"] = r["ft"].sum(axis=1)
            out[f"{ld.name}.penetration"] = r["delta"].max(axis=1)
            out[f"{ld.name}.slip_velocity"] = np.where(
                fn > 0, (r["fn"] * r["v_slip"]).sum(axis=1) / np.where(fn > 0, fn, 1.0), r["v_slip"].mean(axis=1))
        return out
