"""Applied loads as generalised forces, vectorised per load kind, with their energy terms.

Every load group adds its generalised force to Q (B, n) and reports, per configuration,
- ``elastic``: stored potential energy [J] (springs),
- ``dissipation``: power dissipated [W] (dampers, viscous joint friction), ≥ 0,
- ``input``: power delivered by external loads [W] (forces, torques, callables).
Gravity and the velocity-product term of offset centres of mass live in ``System.forces_batch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import PortError
from ..model.model import Joint, Load, Mechanism
from .contact import PenaltyContacts
from .frames import RotatingFrames
from .load_base import F, Group, Idx, LoadContext, LoadTotals


def _rot(c: F, s: F, p: F) -> tuple[F, F]:
    return c * p[:, 0] - s * p[:, 1], s * p[:, 0] + c * p[:, 1]


def _add(Q: F, col: Idx, fx: F, fy: F, mz: F) -> None:
    """Scatter-add body generalised forces (B, K) at extended columns ``col`` (repeats allowed)."""
    for off, val in ((0, fx), (1, fy), (2, mz)):
        np.add.at(Q, (slice(None), col + off), val)  # type: ignore[arg-type]


def two_point_geometry(ctx: LoadContext, ci: Idx, cj: Idx, pi: F, pj: F) -> tuple[F, ...]:
    """World attachment vectors a_i, a_j, separation d = P_j − P_i and its rate ḋ, each (B, K)."""
    q, v = ctx.qx, ctx.vx
    c_i, s_i = ctx.pose(ci)
    c_j, s_j = ctx.pose(cj)
    aix, aiy = _rot(c_i, s_i, pi)
    ajx, ajy = _rot(c_j, s_j, pj)
    dx = q[:, cj] + ajx - q[:, ci] - aix
    dy = q[:, cj + 1] + ajy - q[:, ci + 1] - aiy
    wi, wj = v[:, ci + 2], v[:, cj + 2]
    ddx = v[:, cj] - wj * ajy - v[:, ci] + wi * aiy
    ddy = v[:, cj + 1] + wj * ajx - v[:, ci + 1] - wi * aix
    return aix, aiy, ajx, ajy, dx, dy, ddx, ddy


class _Magnitudes:
    """m(t) per load: constant ``value``, a profile of time, or an input port."""

    def __init__(self, loads: Sequence[Load]) -> None:
        self.loads = loads

    def __call__(self, ctx: LoadContext) -> F:
        cols = []
        for ld in self.loads:
            if ld.input is not None:
                try:
                    val = ctx.inputs[ld.input]
                except KeyError:
                    raise PortError(f"input port {ld.input!r} of load {ld.name!r} has no value",
                                    name=ld.input) from None
                cols.append(np.full(len(ctx.t), float(val)))
            elif ld.profile is not None:
                cols.append(ld.profile.evaluate(ctx.t)[0])
            else:
                cols.append(np.full(len(ctx.t), ld.value))
        return np.stack(cols, axis=1)


class Forces(Group):
    """m(t)·d at a body point; d a unit direction in the world or the body frame."""

    def __init__(self, col: dict[str, int], loads: Sequence[Load]) -> None:
        super().__init__(col, loads)
        self.mag = _Magnitudes(loads)
        d = np.array([ld.direction for ld in loads], float).reshape(-1, 2)
        self.d = d / np.linalg.norm(d, axis=1, keepdims=True)
        self.body_frame = np.array([ld.frame == "body" for ld in loads])
        self.p = np.array([ld.points[0] for ld in loads], float).reshape(-1, 2)

    def apply(self, Q: F, ctx: LoadContext) -> tuple[F, F, F]:
        c, s = ctx.pose(self.ci)
        m = self.mag(ctx)
        dxb, dyb = _rot(c, s, self.d)
        dx = np.where(self.body_frame, dxb, self.d[:, 0]) * m
        dy = np.where(self.body_frame, dyb, self.d[:, 1]) * m
        ax, ay = _rot(c, s, self.p)
        mz = ax * dy - ay * dx
        _add(Q, self.ci, dx, dy, mz)
        v = ctx.vx
        w = v[:, self.ci + 2]
        power = dx * (v[:, self.ci] - w * ay) + dy * (v[:, self.ci + 1] + w * ax)
        zero = np.zeros(len(ctx.t))
        return zero, zero, power.sum(axis=1)


class Torques(Group):
    """m(t) about +z on the first body, −m(t) on the reaction body (if any)."""

    def __init__(self, col: dict[str, int], loads: Sequence[Load]) -> None:
        super().__init__(col, loads)
        self.mag = _Magnitudes(loads)

    def apply(self, Q: F, ctx: LoadContext) -> tuple[F, F, F]:
        m = self.mag(ctx)
        zero2 = np.zeros_like(m)
        _add(Q, self.ci, zero2, zero2, m)
        _add(Q, self.cj, zero2, zero2, -m)
        dw = ctx.vx[:, self.ci + 2] - ctx.vx[:, self.cj + 2]
        zero = np.zeros(len(ctx.t))
        return zero, zero, (m * dw).sum(axis=1)


class SpringDampers(Group):
    """Tension T = k·(L − L0) + c·dL/dt between two body points, pulling them together."""

    def __init__(self, col: dict[str, int], loads: Sequence[Load], L0: F) -> None:
        super().__init__(col, loads)
        self.pi = np.array([ld.points[0] for ld in loads], float).reshape(-1, 2)
        self.pj = np.array([ld.points[1] for ld in loads], float).reshape(-1, 2)
        self.k = np.array([ld.stiffness for ld in loads], float)
        self.c = np.array([ld.damping for ld in loads], float)
        self.L0 = L0

    def geometry(self, ctx: LoadContext) -> tuple[F, ...]:
        return two_point_geometry(ctx, self.ci, self.cj, self.pi, self.pj)

    def apply(self, Q: F, ctx: LoadContext) -> tuple[F, F, F]:
        aix, aiy, ajx, ajy, dx, dy, ddx, ddy = self.geometry(ctx)
        L = np.maximum(np.hypot(dx, dy), 1e-12)
        ux, uy = dx / L, dy / L
        Ldot = ux * ddx + uy * ddy
        T = self.k * (L - self.L0) + self.c * Ldot
        fx, fy = T * ux, T * uy  # on body i, towards j; −f on body j
        _add(Q, self.ci, fx, fy, aix * fy - aiy * fx)
        _add(Q, self.cj, -fx, -fy, -(ajx * fy - ajy * fx))
        return ((0.5 * self.k * (L - self.L0) ** 2).sum(axis=1), (self.c * Ldot**2).sum(axis=1),
                np.zeros(len(ctx.t)))


class RotationalSpringDampers(Group):
    """Torque −k·(θj − θi − φ0) − c·(ωj − ωi) on body j, the opposite on body i."""

    def __init__(self, col: dict[str, int], loads: Sequence[Load], phi0: F) -> None:
        super().__init__(col, loads)
        self.k = np.array([ld.stiffness for ld in loads], float)
        self.c = np.array([ld.damping for ld in loads], float)
        self.phi0 = phi0

    def apply(self, Q: F, ctx: LoadContext) -> tuple[F, F, F]:
        dphi = ctx.qx[:, self.cj + 2] - ctx.qx[:, self.ci + 2] - self.phi0
        dw = ctx.vx[:, self.cj + 2] - ctx.vx[:, self.ci + 2]
        tau = -self.k * dphi - self.c * dw
        zero2 = np.zeros_like(tau)
        _add(Q, self.cj, zero2, zero2, tau)
        _add(Q, self.ci, zero2, zero2, -tau)
        return ((0.5 * self.k * dphi**2).sum(axis=1), (self.c * dw**2).sum(axis=1), np.zeros(len(ctx.t)))


class Generalized(Group):
    """Python callables Q(t, q, v) on named coordinates (evaluated per configuration)."""

    def __init__(self, loads: Sequence[Load], coord_index: dict[str, int]) -> None:
        self.loads = list(loads)
        self.idx = [np.array([coord_index[c] for c in ld.coordinates], dtype=np.intp) for ld in loads]

    def apply(self, Q: F, ctx: LoadContext) -> tuple[F, F, F]:
        n = Q.shape[1] - 3
        power = np.zeros(len(ctx.t))
        for ld, idx in zip(self.loads, self.idx, strict=True):
            assert ld.function is not None
            for b in range(len(ctx.t)):
                f = np.asarray(ld.function(float(ctx.t[b]), ctx.qx[b, :n], ctx.vx[b, :n]), float).reshape(-1)
                Q[b, idx] += f
                power[b] += f @ ctx.vx[b, idx]
        zero = np.zeros(len(ctx.t))
        return zero, zero, power


class PrismaticFriction(Group):
    """Viscous friction −c·ṡ along a prismatic joint's axis; s = u·(P_j − P_i), u the world axis,
    as the generalised force −c·ṡ·∂s/∂q (dissipates exactly c·ṡ²)."""

    def __init__(self, col: dict[str, int], joints: Sequence[Joint]) -> None:
        self.names = [j.name for j in joints]
        self.ci = np.array([col[j.bodies[0]] for j in joints], dtype=np.intp)
        self.cj = np.array([col[j.bodies[1]] for j in joints], dtype=np.intp)
        self.pi = np.array([j.points[0] for j in joints], float).reshape(-1, 2)
        self.pj = np.array([j.points[1] for j in joints], float).reshape(-1, 2)
        u = np.array([j.axis for j in joints], float).reshape(-1, 2)
        self.u = u / np.linalg.norm(u, axis=1, keepdims=True)
        self.c = np.array([j.viscous_friction for j in joints], float)

    def apply(self, Q: F, ctx: LoadContext) -> tuple[F, F, F]:
        aix, aiy, ajx, ajy, dx, dy, ddx, ddy = two_point_geometry(ctx, self.ci, self.cj, self.pi, self.pj)
        ci, si = ctx.pose(self.ci)
        ux, uy = _rot(ci, si, self.u)
        ds_dthi = (-uy * dx + ux * dy) - (-ux * aiy + uy * aix)
        ds_dthj = -ux * ajy + uy * ajx
        wi = ctx.vx[:, self.ci + 2]
        sdot = wi * (-uy * dx + ux * dy) + ux * ddx + uy * ddy
        f = -self.c * sdot
        _add(Q, self.ci, -f * ux, -f * uy, f * ds_dthi)
        _add(Q, self.cj, f * ux, f * uy, f * ds_dthj)
        zero = np.zeros(len(ctx.t))
        return zero, (self.c * sdot**2).sum(axis=1), zero


class LoadSet:
    """All applied loads of a mechanism, grouped by kind; ``input_names`` are the input ports."""

    def __init__(self, mech: Mechanism, col: dict[str, int], q0: F, coordinate_names: Sequence[str],
                 mass_cg: tuple[F, F]) -> None:
        """``mass_cg``: the System's body mass and centre-of-mass arrays (shared, see
        :class:`.frames.RotatingFrames`)."""
        self.n = len(coordinate_names)
        self.input_names = mech.input_names
        by = {k: [ld for ld in mech.loads if ld.type == k] for k in
              ("force", "torque", "spring_damper", "rotational_spring_damper", "generalized")}
        groups: list[Group] = []
        self._springs: SpringDampers | None = None
        self._rotational: RotationalSpringDampers | None = None
        if by["force"]:
            groups.append(Forces(col, by["force"]))
        if by["torque"]:
            groups.append(Torques(col, by["torque"]))
        if by["spring_damper"]:
            self._springs = SpringDampers(col, by["spring_damper"], np.zeros(len(by["spring_damper"])))
            groups.append(self._springs)
        rot = by["rotational_spring_damper"]
        rev = [j for j in mech.joints if j.type == "revolute" and j.viscous_friction > 0]
        rot_all = rot + [Load(j.name, "rotational_spring_damper", j.bodies, damping=j.viscous_friction,
                              free_angle=0.0) for j in rev]
        if rot_all:
            self._rotational = RotationalSpringDampers(col, rot_all, np.zeros(len(rot_all)))
            groups.append(self._rotational)
        pri = [j for j in mech.joints if j.type == "prismatic" and j.viscous_friction > 0]
        if pri:
            groups.append(PrismaticFriction(col, pri))
        if by["generalized"]:
            groups.append(Generalized(by["generalized"], {c: k for k, c in enumerate(coordinate_names)}))
        self.groups = groups + _extension_groups(mech, col, mass_cg)
        self.set_reference(q0)

    def set_reference(self, q: F) -> None:
        """Take the free lengths and angles left unset (None) from the configuration q (n,): the
        System calls it with the guess, then the assembly with the assembled initial pose."""
        qx = np.concatenate([q, np.zeros(3)])
        sp, rs = self._springs, self._rotational
        if sp is not None:
            g = sp.geometry(LoadContext(qx[None, :], np.zeros_like(qx)[None, :], np.zeros(1), {}))
            now = np.hypot(g[4], g[5])[0]
            sp.L0 = np.array([ld.free_length if ld.free_length is not None else now[k]
                              for k, ld in enumerate(sp.loads)])
        if rs is not None:
            now = qx[rs.cj + 2] - qx[rs.ci + 2]
            rs.phi0 = np.array([ld.free_angle if ld.free_angle is not None else now[k]
                                for k, ld in enumerate(rs.loads)])

    def output_specs(self) -> list[Any]:
        """Outputs reported by load groups (e.g. contact forces), as ``outputs.OutputSpec``."""
        return [spec for g in self.groups for spec in g.output_specs()]

    def outputs(self, q: F, v: F, t: F, inputs: dict[str, float]) -> dict[str, F]:
        """Values of ``output_specs`` for q, v (B, n), t (B,): each (B,)."""
        ctx = self._context(q, v, t, inputs)
        return {k: x for g in self.groups for k, x in g.outputs(ctx).items()}

    @staticmethod
    def _context(q: F, v: F, t: F, inputs: dict[str, float]) -> LoadContext:
        z = np.zeros((q.shape[0], 3))
        return LoadContext(np.concatenate([q, z], axis=1), np.concatenate([v, z], axis=1), t, inputs)

    def evaluate(self, Q: F, q: F, v: F, t: F, inputs: dict[str, float]) -> LoadTotals:
        """Add every load's generalised force into Q (B, n); return the energy terms."""
        B = q.shape[0]
        ctx = self._context(q, v, t, inputs)
        Qx = np.zeros((B, self.n + 3))
        el, di, pin = np.zeros(B), np.zeros(B), np.zeros(B)
        for g in self.groups:
            e, d, p = g.apply(Qx, ctx)
            el, di, pin = el + e, di + d, pin + p
        Q += Qx[:, : self.n]
        return LoadTotals(Q, el, di, pin)


def _extension_groups(mech: Mechanism, col: dict[str, int], mass_cg: tuple[F, F]) -> list[Group]:
    """Load kinds implemented in their own modules."""
    out: list[Group] = []
    contacts = [ld for ld in mech.loads if ld.type == "contact"]
    if contacts:
        out.append(PenaltyContacts(col, contacts))
    frames = [ld for ld in mech.loads if ld.type == "rotating_frame"]
    if frames:
        out.append(RotatingFrames(col, frames, [b.name for b in mech.bodies], *mass_cg))
    return out
