"""The compiled system: index maps and vectorised evaluation of C, Cq, Ct, γ, M and Q.

``compile_mechanism(mech)`` is the only step that looks at names; everything after works on
arrays. All evaluators accept a single configuration (q of shape (n,), t a float) or a batch
(q of shape (B, n), t of shape (B,)) and return arrays with the matching leading shape.
Coordinates are ordered body by body: x, y, θ of each non-ground body, in file order; then the
extra coordinates of joints that have them (a cam joint's two surface parameters ``<joint>.s1``,
``<joint>.s2``), which carry no mass. Ground's three zero columns follow all of them in the
extended coordinates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from ..model.model import GROUND, Joint, Mechanism
from . import cam, nonholonomic
from . import kernels as kn
from .load_base import LoadTotals
from .loads import LoadSet

F = NDArray[Any]


@dataclass(frozen=True)
class JointInfo:
    """Where a joint's rows are and how its reaction is reported (see ``outputs``)."""

    name: str
    type: str
    col_i: int
    col_j: int
    rows: tuple[int, ...]
    point_j: tuple[float, float]
    point_i: tuple[float, float]
    components: tuple[str, ...]


@dataclass(frozen=True)
class DriverInfo:
    name: str
    type: str
    row: int
    unit: str


_JOINT_COMPONENTS = {"revolute": ("fx", "fy"), "point_on_line": ("fx", "fy"),
                     "prismatic": ("fx", "fy", "mz"), "fixed": ("fx", "fy", "mz"), "gear": ("mz",),
                     "cam": ("fx", "fy"), "knife_edge": ("fx", "fy")}
_DRIVER_UNITS = {"angle": "N·m", "distance": "N"}


class System:
    """A mechanism compiled to index maps and constraint kernels. Build with ``compile_mechanism``."""

    def __init__(self, mech: Mechanism) -> None:
        self.mechanism = mech
        self.bodies = mech.bodies
        self.body_names = [b.name for b in mech.bodies]
        nb = len(self.bodies)
        self.n_body = nb
        extra_names, extra_q0 = cam.extra_coordinates(mech)
        self.n_coord = 3 * nb + len(extra_names)
        self.col = {b.name: 3 * k for k, b in enumerate(mech.bodies)}
        self.col[GROUND] = self.n_coord  # ground's zero coordinates sit after q in the extended q
        self._frame_nb = nb if extra_names else None
        self.coordinate_names = [f"{b}.{c}" for b in self.body_names for c in ("x", "y", "theta")]
        self.coordinate_names += extra_names
        self.q0 = np.array([v for b in mech.bodies for v in (*b.position, b.angle)] + extra_q0, dtype=float)
        self.v0 = np.array([v for b in mech.bodies for v in (*b.velocity, b.omega)] + [0.0] * len(extra_names),
                           dtype=float)
        self.mass = np.array([b.mass for b in mech.bodies], dtype=float)
        self.inertia = np.array([b.inertia for b in mech.bodies], dtype=float)
        self.cg = np.array([b.cg for b in mech.bodies], dtype=float).reshape(nb, 2)
        self.gravity = np.asarray(mech.gravity, dtype=float)
        self.kernels: list[kn.Kernel] = []
        self._rows_of: dict[str, list[int]] = {}
        self._build_kernels()
        self.n_constraints = sum(len(k.rows) for k in self.kernels)
        self.constraint_names = [r.label for k in self.kernels for r in k.rows]
        self.constraint_owners = [r.owner for k in self.kernels for r in k.rows]
        self._build_scatter()
        self._pattern: tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.intp]] | None = None
        self.joints = [self._joint_info(j) for j in mech.joints]
        self.drivers = [DriverInfo(d.name, d.type, self._rows_of[d.name][0],
                                   _DRIVER_UNITS.get(d.type, "N·m" if d.coordinate == "theta" else "N"))
                        for d in mech.drivers]
        self.loads = LoadSet(mech, self.col, self.q0, self.coordinate_names, (self.mass, self.cg))
        self.input_names = self.loads.input_names
        self.pinned = np.array([self.col[b.name] + ("x", "y", "theta").index(c) for b in mech.bodies
                                for c in b.pin], dtype=np.intp)  # columns held by the initial assembly
        self.reference_pose: F | None = None  # set by the first assembly from the guess

    def set_reference_pose(self, q: F) -> None:
        """The assembled initial pose: unset spring free lengths and angles are taken from it
        (until then, from the guess ``q0``). The first assembly from the guess calls it."""
        self.reference_pose = np.array(q, dtype=float)
        self.loads.set_reference(self.reference_pose)

    # ----------------------------------------------------------------- build
    def _angle0(self, name: str) -> float:
        if name == GROUND:
            return 0.0
        angles = getattr(self, "_angles", None)
        if angles is None:  # by name, once: a search per joint would be quadratic in the bodies
            angles = self._angles = {b.name: b.angle for b in self.mechanism.bodies}
        return angles[name] if name in angles else self.mechanism.body(name).angle

    def _arr(self, rows: Sequence[Any], fn: Callable[[Any], Any]) -> F:
        return np.array([fn(r) for r in rows], dtype=float)

    def _cols(self, items: Sequence[Any], k: int) -> NDArray[np.intp]:
        return np.array([self.col[it.bodies[k]] for it in items], dtype=np.intp)

    def _build_kernels(self) -> None:
        js = self.mechanism.joints
        by = {t: [j for j in js if j.type == t] for t in ("revolute", "prismatic", "point_on_line",
                                                         "gear", "fixed")}
        coinc = by["revolute"] + by["fixed"]
        if coinc:
            self._add(kn.CoincidentPoints([j.name for j in coinc], self._cols(coinc, 0), self._cols(coinc, 1),
                                          self._arr(coinc, lambda j: j.points[0]).reshape(-1, 2),
                                          self._arr(coinc, lambda j: j.points[1]).reshape(-1, 2)))
        rel = by["prismatic"] + by["fixed"]
        if rel:
            phi0 = self._arr(rel, lambda j: j.angle if j.angle is not None
                             else self._angle0(j.bodies[1]) - self._angle0(j.bodies[0]))
            self._add(kn.RelativeAngle([j.name for j in rel], self._cols(rel, 0), self._cols(rel, 1), phi0))
        line = by["prismatic"] + by["point_on_line"]
        if line:
            self._add(kn.PointOnLine([j.name for j in line], self._cols(line, 0), self._cols(line, 1),
                                     self._arr(line, lambda j: j.points[0]).reshape(-1, 2),
                                     self._arr(line, lambda j: j.points[1]).reshape(-1, 2),
                                     self._arr(line, lambda j: j.axis).reshape(-1, 2)))
        gears = by["gear"]
        if gears:
            self._add(self._gear_kernel(gears))
        cam_kernel = cam.cam_kernel(self.mechanism, self.col, 3 * self.n_body)
        if cam_kernel is not None:
            self._add(cam_kernel)
        knife = nonholonomic.knife_edge_kernel(self.mechanism, self.col)
        if knife is not None:
            self._add(knife)
        self._build_driver_kernels()

    def _gear_kernel(self, gears: Sequence[Joint]) -> kn.GearRatio:
        carrier = [j.carrier or GROUND for j in gears]
        tau = self._arr(gears, gear_factor)
        rel = [[self._angle0(b) - self._angle0(c) for b in j.bodies] for j, c in zip(gears, carrier, strict=True)]
        c0 = np.array([j.offset if j.offset is not None else r[0] - f * r[1]
                       for j, r, f in zip(gears, rel, tau, strict=True)], dtype=float)
        col_c = np.array([self.col[c] for c in carrier], dtype=np.intp)
        return kn.GearRatio([j.name for j in gears], self._cols(gears, 0), self._cols(gears, 1), col_c, tau, c0)

    def _build_driver_kernels(self) -> None:
        ds = self.mechanism.drivers
        coord = [d for d in ds if d.type in ("angle", "coordinate")]
        if coord:
            axis = np.array([2 if d.type == "angle" else {"x": 0, "y": 1, "theta": 2}[d.coordinate]
                             for d in coord], dtype=np.intp)
            self._add(kn.CoordinateDriver([d.name for d in coord], self._cols(coord, 0), axis,
                                          self._arr(coord, lambda d: d.points[0]).reshape(-1, 2),
                                          [d.profile for d in coord]))
        dist = [d for d in ds if d.type == "distance"]
        if dist:
            self._add(kn.DistanceDriver([d.name for d in dist], self._cols(dist, 0), self._cols(dist, 1),
                                        self._arr(dist, lambda d: d.points[0]).reshape(-1, 2),
                                        self._arr(dist, lambda d: d.points[1]).reshape(-1, 2),
                                        [d.profile for d in dist]))

    def _add(self, kernel: kn.Kernel) -> None:
        start = sum(len(k.rows) for k in self.kernels)
        for i, r in enumerate(kernel.rows):
            self._rows_of.setdefault(r.owner, []).append(start + i)
        self.kernels.append(kernel)

    def _build_scatter(self) -> None:
        """Flat indices into the extended (m, n + 3) Jacobian for every kernel's entries."""
        nx = self.n_coord + 3
        self._scatter: list[tuple[slice, NDArray[np.intp]]] = []
        start = 0
        for k in self.kernels:
            r = len(k.rows)
            rows = np.arange(start, start + r)[:, None]
            self._scatter.append((slice(start, start + r), (rows * nx + k.cols).ravel()))
            start += r

    def _joint_info(self, j: Joint) -> JointInfo:
        return JointInfo(j.name, j.type, self.col[j.bodies[0]], self.col[j.bodies[1]],
                         tuple(self._rows_of[j.name]), j.points[1], j.points[0], _JOINT_COMPONENTS[j.type])

    def rows_of(self, owner: str) -> list[int]:
        """Global constraint rows of a joint or driver."""
        return list(self._rows_of[owner])

    # ------------------------------------------------------------ evaluate
    def extend(self, q: F) -> F:
        """Append the ground's three zero coordinates: (B, n) → (B, n + 3)."""
        return np.concatenate([q, np.zeros((q.shape[0], 3))], axis=1)

    def evaluate_batch(self, q: F, t: F, jacobian: bool = True) -> tuple[F, F | None, F]:
        """C (B, m), Cq (B, m, n) or None, Ct (B, m) for q (B, n) and t (B,)."""
        fr = kn.Frame(self.extend(q), self._frame_nb)
        B, m, nx = q.shape[0], self.n_constraints, self.n_coord + 3
        C = np.empty((B, m))
        Ct = np.empty((B, m))
        Jx = np.zeros((B, m * nx)) if jacobian else None
        for k, (rows, flat) in zip(self.kernels, self._scatter, strict=True):
            c, j, ct = k.evaluate(fr, t)
            C[:, rows], Ct[:, rows] = c, ct
            if Jx is not None:
                Jx[:, flat] = j.reshape(B, -1)
        Cq = None if Jx is None else Jx.reshape(B, m, nx)[:, :, : self.n_coord]
        return C, Cq, Ct

    def evaluate_sparse(self, q: F, t: float) -> tuple[F, Any]:
        """C (m,) and Cq (m, n) as a scipy CSR array at one point: the entries
        :meth:`evaluate_batch` scatters into a dense Jacobian, without the dense array."""
        fr = kn.Frame(self.extend(q[None, :]), self._frame_nb)
        C = np.empty(self.n_constraints)
        parts = []
        for k, (rows, _) in zip(self.kernels, self._scatter, strict=True):
            c, j, _ = k.evaluate(fr, np.array([t]))
            C[rows] = c[0]
            parts.append(np.asarray(j, dtype=float).reshape(-1))
        keep, r, c = self._sparse_pattern()
        data = np.concatenate(parts)[keep] if parts else np.zeros(0)
        return C, sp.csr_array((data, (r, c)), shape=(self.n_constraints, self.n_coord))

    def _sparse_pattern(self) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.intp]]:
        """(entries kept, their rows, their columns): the body coordinates' entries of the kernels'
        flat Jacobian, the last of any repeated position (as the dense scatter leaves it)."""
        if self._pattern is None:
            nx = self.n_coord + 3
            flat = np.concatenate([f for _, f in self._scatter]) if self._scatter else np.zeros(0, np.intp)
            _, last = np.unique(flat[::-1], return_index=True)
            keep = np.sort(len(flat) - 1 - last)
            keep = keep[flat[keep] % nx < self.n_coord]
            self._pattern = (keep, flat[keep] // nx, flat[keep] % nx)
        return self._pattern

    def gamma_batch(self, q: F, v: F, t: F) -> F:
        fr, vx = kn.Frame(self.extend(q), self._frame_nb), self.extend(v)
        return np.concatenate([k.gamma(fr, vx, t) for k in self.kernels], axis=1) if self.kernels \
            else np.zeros((q.shape[0], 0))

    def mass_matrix_batch(self, q: F) -> F:
        """M (B, n, n): per body [[m, 0, m·bx], [0, m, m·by], [m·bx, m·by, I + m|rG|²]], b = A'(θ)·rG."""
        B, n = q.shape[0], self.n_coord
        bx, by, _, _ = self._cg_terms(q)
        M = np.zeros((B, n, n))
        i = 3 * np.arange(self.n_body)
        M[:, i, i] = self.mass
        M[:, i + 1, i + 1] = self.mass
        M[:, i + 2, i + 2] = self.inertia + self.mass * (self.cg**2).sum(axis=1)
        M[:, i, i + 2] = M[:, i + 2, i] = self.mass * bx
        M[:, i + 1, i + 2] = M[:, i + 2, i + 1] = self.mass * by
        return M

    def _cg_terms(self, q: F) -> tuple[F, F, F, F]:
        """b = A'(θ)·rG and g = A(θ)·rG per body, each component (B, nb)."""
        th = q[:, 2::3][:, : self.n_body]
        c, s = np.cos(th), np.sin(th)
        gx = c * self.cg[:, 0] - s * self.cg[:, 1]
        gy = s * self.cg[:, 0] + c * self.cg[:, 1]
        return -gy, gx, gx, gy

    def forces_batch(self, q: F, v: F, t: F, inputs: dict[str, float] | None = None) -> F:
        """Q (B, n): gravity (with its torque about the reference point), the velocity-product
        term m·A(θ)·rG·ω² of offset centres of mass, and every applied load."""
        return self.forces_and_power(q, v, t, inputs).Q

    def forces_and_power(self, q: F, v: F, t: F, inputs: dict[str, float] | None = None) -> LoadTotals:
        """Q (B, n) with the loads' elastic energy, dissipated power and input power (B,)."""
        B = q.shape[0]
        bx, by, gx, gy = self._cg_terms(q)
        w2 = v[:, 2::3][:, : self.n_body] ** 2
        Q = np.zeros((B, self.n_coord))
        m = self.mass
        nb3 = 3 * self.n_body
        Q[:, 0:nb3:3] = m * self.gravity[0] + m * gx * w2
        Q[:, 1:nb3:3] = m * self.gravity[1] + m * gy * w2
        Q[:, 2:nb3:3] = m * (bx * self.gravity[0] + by * self.gravity[1])
        return self.loads.evaluate(Q, q, v, t, inputs or {})

    def kinetic_energy_batch(self, q: F, v: F) -> F:
        """T = ½·vᵀ·M(q)·v [J] (B,)."""
        return 0.5 * np.einsum("bi,bij,bj->b", v, self.mass_matrix_batch(q), v)

    def gravitational_energy_batch(self, q: F) -> F:
        """V_g = −Σ m·g·R_G [J] (B,), zero with every centre of mass at the world origin."""
        _, _, gx, gy = self._cg_terms(q)
        xg, yg = q[:, 0::3][:, : self.n_body] + gx, q[:, 1::3][:, : self.n_body] + gy
        return -(self.mass * (self.gravity[0] * xg + self.gravity[1] * yg)).sum(axis=1)

    # ------------------------------------------------- single-or-batch facade
    def constraints(self, q: F, t: float | F = 0.0) -> F:
        qb, tb, single = _batch(q, t)
        C = self.evaluate_batch(qb, tb, jacobian=False)[0]
        return C[0] if single else C

    def jacobian(self, q: F, t: float | F = 0.0) -> F:
        qb, tb, single = _batch(q, t)
        Cq = self.evaluate_batch(qb, tb)[1]
        assert Cq is not None
        return Cq[0] if single else Cq

    def ct(self, q: F, t: float | F = 0.0) -> F:
        qb, tb, single = _batch(q, t)
        Ct = self.evaluate_batch(qb, tb, jacobian=False)[2]
        return Ct[0] if single else Ct

    def gamma(self, q: F, v: F, t: float | F = 0.0) -> F:
        qb, tb, single = _batch(q, t)
        g = self.gamma_batch(qb, np.atleast_2d(np.asarray(v, float)), tb)
        return g[0] if single else g

    def mass_matrix(self, q: F) -> F:
        qb, _, single = _batch(q, 0.0)
        M = self.mass_matrix_batch(qb)
        return M[0] if single else M

    def forces(self, q: F, v: F, t: float | F = 0.0, inputs: dict[str, float] | None = None) -> F:
        qb, tb, single = _batch(q, t)
        Q = self.forces_batch(qb, np.atleast_2d(np.asarray(v, float)), tb, inputs)
        return Q[0] if single else Q


def gear_factor(j: Joint) -> float:
    """τ of a gear joint, (θ1 − θc) − τ·(θ2 − θc) = offset: −ratio for an external mesh, +ratio for
    an internal one, the signed ratio as written without a mesh (the legacy form)."""
    r = float(j.ratio if j.ratio is not None else 0.0)
    return -r if j.mesh == "external" else r


def _batch(q: F, t: float | F) -> tuple[F, F, bool]:
    q = np.asarray(q, dtype=float)
    single = q.ndim == 1
    qb = q[None, :] if single else q
    tb = np.broadcast_to(np.asarray(t, dtype=float), (qb.shape[0],)).copy()
    return qb, tb, single


def compile_mechanism(mech: Mechanism) -> System:
    """Compile a validated mechanism into a :class:`System`."""
    return System(mech)
