"""Pack a compiled :class:`System` into the flat arrays the numba kernels read.

``pack(system, rows, opts)`` returns the model tuple, or raises :class:`Unsupported` naming the
feature the compiled path lacks (a callable profile, load or curve); the caller then uses the numpy
path, which supports everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray
from scipy.sparse.csgraph import reverse_cuthill_mckee

from ..model.model import Load
from ..model.profiles import Constant, ConstantSpeed, Harmonic, Polynomial, Profile, Table
from ..model.surfaces import Circle, Line, Polar, Spline
from ..model.surfaces import Polynomial as PolynomialCurve
from ..physics import kernels as kn
from ..physics import loads as ld
from ..physics.cam import CamContact
from ..physics.contact import PenaltyContacts
from ..physics.frames import RotatingFrames
from ..physics.nonholonomic import KnifeEdge
from ..physics.system import System
from .contact_search import POLYLINE, blocks, segments

F = NDArray[Any]
I64 = np.int64
WIDTH, CAM_WIDTH = 6, 8  # Jacobian slots per row: bodies i and j; a cam adds its two parameters


class Unsupported(Exception):
    """The compiled path cannot run this mechanism; the message says which feature."""


def _i(x: Any) -> NDArray[np.int64]:
    return np.ascontiguousarray(np.asarray(x, dtype=I64).reshape(-1))


def _f2(x: Any) -> F:
    return np.ascontiguousarray(np.asarray(x, dtype=float).reshape(-1, 2))


def _f(x: Any) -> F:
    return np.ascontiguousarray(np.asarray(x, dtype=float).reshape(-1))


def cubic_block(spline: Any, component: int | None = None) -> list[float]:
    """A scipy cubic spline (``PPoly``; one ``component`` of a vector-valued one) as the block
    ``nb_curves.piecewise`` reads: [k, breakpoints, then c0 … c3 per segment]."""
    c = spline.c if component is None else spline.c[..., component]
    return [float(len(spline.x)), *map(float, spline.x), *map(float, np.asarray(c).T.ravel())]


def profile_code(p: Profile | None) -> tuple[int, list[float]]:
    if isinstance(p, Constant):
        return 0, [p.value]
    if isinstance(p, ConstantSpeed):
        return 1, [p.speed, p.start]
    if isinstance(p, Polynomial):
        return 2, list(p.coefficients)
    if isinstance(p, Harmonic):
        return 3, [p.amplitude, p.frequency, p.phase, p.offset]
    if isinstance(p, Table):
        return 4, cubic_block(p._spline)
    raise Unsupported(f"{getattr(p, 'kind', type(p).__name__)} profile")


def _profiles(profiles: Sequence[Profile | None]) -> tuple[NDArray[np.int64], F]:
    codes = [profile_code(p) if p is not None else (0, [0.0]) for p in profiles]
    width = max([len(c[1]) for c in codes] + [4])
    pp = np.zeros((len(codes), width))
    for k, (_, par) in enumerate(codes):
        pp[k, : len(par)] = par
    return _i([c[0] for c in codes]), pp


def group(ints: Sequence[Any], floats: Sequence[Any], k: int) -> tuple[NDArray[np.int64], F]:
    """One kind's records as an int64 (k, ·) and a float64 (k, ·) array, one row per element:
    each entry of ``ints``/``floats`` is a column (length k) or a block of columns (k × c)."""
    if k == 0:
        return np.zeros((0, len(ints)), I64), np.zeros((0, len(floats)))
    ic = [np.asarray(x, dtype=I64).reshape(k, -1) for x in ints]
    fc = [np.asarray(x, dtype=float).reshape(k, -1) for x in floats]
    return np.ascontiguousarray(np.hstack(ic)), np.ascontiguousarray(np.hstack(fc))


# columns (see nb_kernels): co I[ci, cj] F[s_i, s_j]; ra I[ci, cj] F[phi0]; pl I[ci, cj] F[s_i, s_j, n̂];
# gr I[ci, cj, c_carrier] F[ratio, c0]; cd I[ci, axis, profile] F[s_i, profile params]; dd I[ci, cj, profile]
# F[s_i, s_j, profile params]; ke I[ci, cj] F[p_j, n̂] (see nb_joints); cm I[ci, cj, column of s1,
# surface code i, surface code j, reduced row] F[surface parameters i, j]
_EMPTY = {"co": (2, 4), "ra": (2, 1), "pl": (2, 6), "gr": (3, 2), "cd": (3, 6), "dd": (3, 8),
          "ke": (2, 4), "cm": (6, 2)}  # (ints, floats)
GROUPS = tuple(_EMPTY)


def surface_code(surf: Any, what: str = "cam surface") -> tuple[int, list[float]]:
    """The compiled code and parameters of a cam curve or contact profile (``nb_curves.curve``)."""
    if isinstance(surf, Circle):
        return 0, [surf.radius, *surf.center]
    if isinstance(surf, Line):
        u = np.asarray(surf.direction, float)
        return 1, [*surf.point, *(u / np.linalg.norm(u))]
    if isinstance(surf, PolynomialCurve):
        return 2, [float(c) for c in surf.coefficients]
    if isinstance(surf, Polar) and not surf.angles:
        return 3, [float(c) for c in surf.fourier] or [0.0]
    if isinstance(surf, Polar):
        return 5, [float(surf.angles[0]), *cubic_block(surf._spline)]
    if isinstance(surf, Spline):
        return 4, [float(surf.closed), *cubic_block(surf._spline, 0), *cubic_block(surf._spline, 1)]
    raise Unsupported(f"{getattr(surf, 'kind', type(surf).__name__)} {what}")


def _cam_group(k: CamContact, first_reduced: int) -> tuple[Any, ...]:
    codes = [surface_code(s) for pair in k.surfaces for s in pair]
    w = max(len(c[1]) for c in codes)
    par = np.zeros((len(codes), w))
    for e, (_, p) in enumerate(codes):
        par[e, : len(p)] = p
    n = len(k.col_i)
    return group([k.col_i, k.col_j, k.col_s[:, 0], [c[0] for c in codes[0::2]], [c[0] for c in codes[1::2]],
                  first_reduced + np.arange(n)], [par[0::2], par[1::2]], n)


def _constraint_group(k: Any, m: int) -> tuple[str, tuple[Any, ...]]:
    n = len(k.col_i)
    if isinstance(k, kn.CoincidentPoints):
        return "co", group([k.col_i, k.col_j], [k.s_i, k.s_j], n)
    if isinstance(k, kn.RelativeAngle):
        return "ra", group([k.col_i, k.col_j], [k.phi0], n)
    if isinstance(k, kn.PointOnLine):
        return "pl", group([k.col_i, k.col_j], [k.s_i, k.s_j, k.nhat], n)
    if isinstance(k, kn.GearRatio):
        return "gr", group([k.col_i, k.col_j, k.col_c], [k.ratio, k.c0], n)
    if isinstance(k, kn.CoordinateDriver):
        pk, pp = _profiles(k.profiles)
        return "cd", group([k.col_i, k.axis, pk], [k.s_i, pp], n)
    if isinstance(k, kn.DistanceDriver):
        pk, pp = _profiles(k.profiles)
        return "dd", group([k.col_i, k.col_j, pk], [k.s_i, k.s_j, pp], n)
    if isinstance(k, KnifeEdge):
        return "ke", group([k.col_i, k.col_j], [k.p_j, k.nhat], n)
    if isinstance(k, CamContact):
        return "cm", _cam_group(k, m)
    raise Unsupported(f"constraint kind {type(k).__name__}")


def _constraints(system: System) -> tuple[tuple[Any, ...], NDArray[np.int64]]:
    """The constraint groups and the Jacobian's columns: one row per constraint row, then each
    cam's reduced row (``nb_joints``: the cam's body columns)."""
    parts = {key: (0, *group([[]] * ni, [[]] * nf, 0)) for key, (ni, nf) in _EMPTY.items()}
    cams = [k for k in system.kernels if isinstance(k, CamContact)]
    m = system.n_constraints
    Jc = -np.ones((m + sum(len(k.col_i) for k in cams), CAM_WIDTH if cams else WIDTH), dtype=I64)
    off = 0
    for k in system.kernels:
        r = len(k.rows)
        cols = np.where(k.cols < system.n_coord, k.cols, -1)
        Jc[off:off + r, : k.cols.shape[1]] = cols
        key, (gi, gf) = _constraint_group(k, m)
        parts[key] = (off, gi, gf)
        if isinstance(k, CamContact):
            Jc[gi[:, 5], :WIDTH] = cols[0::3, :WIDTH]
        off += r
    return tuple(parts[key] for key in GROUPS), Jc


def _rows(system: System, rows: NDArray[np.intp], cm: tuple[Any, ...]) -> NDArray[np.intp]:
    """The rows the dynamics solve uses: the active rows with each cam's three replaced by its
    reduced row (``nb_joints``)."""
    off, gi, _ = cm
    cam_rows = {off + 3 * k + i for k in range(gi.shape[0]) for i in range(3)}
    if not cam_rows <= set(rows.tolist()):
        raise Unsupported("a cam joint with a redundant row")
    return np.array([r for r in rows if r not in cam_rows] + list(gi[:, 5]), dtype=np.intp)


# the float arrays in the order nb_flat.flatten stores them in its float buffer: the constraint
# groups' floats, the bodies (mass, inertia, cg, gravity), the load groups' floats, Baumgarte, the
# joints' second points
FLOAT_ARRAYS = (*GROUPS, "mass", "inertia", "cg", "gravity",
                "fo", "to", "sd", "rs", "pf", "ct", "rf", "baumgarte", "joint_point")


def _magnitudes(loads: Sequence[Load], inputs: Sequence[str]) -> tuple[list[Any], list[Any]]:
    """Magnitude columns: ints [kind, input index, profile code], floats [value, profile params]."""
    kind = [1 if x.input else 2 if x.profile is not None else 0 for x in loads]
    idx = [inputs.index(x.input) if x.input else 0 for x in loads]
    pk, pp = _profiles([x.profile for x in loads])
    return [kind, idx, pk], [[x.value for x in loads], pp]


# columns: fo I[ci, body_frame, kind, idx, profile] F[p, d, value, profile params];
# to I[ci, cj, kind, idx, profile] F[value, profile params]; sd I[ci, cj] F[p_i, p_j, k, c, L0];
# rs I[ci, cj] F[k, c, phi0]; pf I[ci, cj] F[p_i, p_j, u, c]; ct (penalty contact, see nb_contact)
# I[ci, cj, profile code, probes, curve params, segments, block size]
# F[K, C, R, μ, v_lim, probes (x, y each), curve params, segments, blocks] (contact_search);
# rf (rotating frames, one row per frame and body; mass and cg read from the bodies) I[ci] F[Ω, c]
def contact_profile(surf: Any) -> tuple[int, list[float], F, int, F]:
    """A contact profile as ``nb_contact.nearest`` reads it: code, curve parameters, segment table,
    block size and blocks (``contact_search``)."""
    code, par = (POLYLINE, []) if getattr(surf, "kind", "") == "polyline" else surface_code(surf, "contact profile")
    seg = segments(surf)
    size, blk = blocks(seg)
    return code, par, seg, size, blk


def _contacts(g: PenaltyContacts) -> tuple[Any, ...]:
    ints, rows = [], []
    for k, spec in enumerate(g.specs):
        code, par, seg, size, blk = contact_profile(spec.surface)
        probes = g.probes[k]
        ints.append([g.ci[k], g.cj[k], code, len(probes), len(par), len(seg), size])
        rows.append([g.K[k], g.C[k], spec.radius, spec.friction, spec.slip_velocity, *probes.ravel(), *par,
                     *seg.ravel(), *blk.ravel()])
    table = np.zeros((len(rows), max(len(r) for r in rows)))
    for k, r in enumerate(rows):
        table[k, : len(r)] = r
    return group([np.asarray(ints)], [table], len(rows))


def _loads(system: System) -> tuple[Any, ...]:
    fo, to = group([[]] * 5, [[]] * 9, 0), group([[]] * 5, [[]] * 5, 0)
    sd, rs, pf = group([[]] * 2, [[]] * 7, 0), group([[]] * 2, [[]] * 3, 0), group([[]] * 2, [[]] * 7, 0)
    ct, rf = group([[]] * 7, [[]] * 5, 0), group([[]], [[]] * 3, 0)
    names = list(system.input_names)
    kinds = (ld.Forces, ld.Torques, ld.SpringDampers, ld.RotationalSpringDampers, ld.PrismaticFriction,
             PenaltyContacts, RotatingFrames)
    for g in system.loads.groups:
        if not isinstance(g, kinds):
            raise Unsupported(f"load kind {type(g).__name__}")
        if isinstance(g, RotatingFrames):
            rf = group([g.c], [g.rate, g.center], len(g.c))
            continue
        n = len(g.ci)
        if isinstance(g, ld.Forces):
            mi, mf = _magnitudes(g.loads, names)
            fo = group([g.ci, np.asarray(g.body_frame, dtype=bool), *mi], [g.p, g.d, *mf], n)
        elif isinstance(g, ld.Torques):
            mi, mf = _magnitudes(g.loads, names)
            to = group([g.ci, g.cj, *mi], mf, n)
        elif isinstance(g, ld.SpringDampers):
            sd = group([g.ci, g.cj], [g.pi, g.pj, g.k, g.c, g.L0], n)
        elif isinstance(g, ld.RotationalSpringDampers):
            rs = group([g.ci, g.cj], [g.k, g.c, g.phi0], n)
        elif isinstance(g, PenaltyContacts):
            ct = _contacts(g)
        else:
            pf = group([g.ci, g.cj], [g.pi, g.pj, g.u, g.c], n)
    return fo, to, sd, rs, pf, ct, rf


def _pairs(Jc: NDArray[np.int64], rows: NDArray[np.intp], nb: int) -> tuple[NDArray[np.intp], ...]:
    """(position p in ``rows``, slot column k, body b) of every entry Jc[rows[p], k] on a body
    below ``nb``, in the order (b, p, k)."""
    sub = Jc[rows] if len(rows) else np.zeros((0, Jc.shape[1]), dtype=I64)
    p, k = np.nonzero(sub >= 0)
    b = sub[p, k] // 3
    keep = b < nb
    p, k, b = p[keep], k[keep], b[keep]
    o = np.argsort(b, kind="stable")
    return p[o], k[o], b[o]


def _band_order(p: NDArray[np.intp], b: NDArray[np.intp], m: int, nb: int) -> NDArray[np.intp]:
    """Reverse Cuthill-McKee order of the rows, two rows adjacent when they touch one body."""
    if not m:
        return np.zeros(0, int)
    inc = sp.csr_array((np.ones(len(p)), (b, p)), shape=(max(nb, 1), m))
    pattern = sp.csr_array(inc.T @ inc)
    pattern.sum_duplicates()
    pattern.sort_indices()
    pattern.data[:] = 1.0
    return reverse_cuthill_mckee(pattern, symmetric_mode=True)


def _solve_data(Jc: NDArray[np.int64], rows: NDArray[np.intp], nb: int) -> tuple[Any, ...]:
    """Band ordering of the active rows and, per body, the rows touching it with their slots."""
    m = len(rows)
    p, k, b = _pairs(Jc, rows, nb)
    order = _band_order(p, b, m, nb)
    where = np.empty(m, dtype=I64)
    where[order] = np.arange(m)
    perm = _i(rows[order])
    band, slot_of = where[p], Jc[rows[p], k] - 3 * b
    o = np.lexsort((k, band, b))  # by body, then band position; a later k wins a repeated slot
    band, bo, ko, so = band[o], b[o], k[o], slot_of[o]
    first = np.ones(len(o), dtype=bool)
    first[1:] = (bo[1:] != bo[:-1]) | (band[1:] != band[:-1])
    group = np.cumsum(first) - 1
    slot = np.full((int(first.sum()), 3), -1, dtype=I64)
    slot[group, so] = ko
    pos = band[first]
    ptr = np.searchsorted(bo[first], np.arange(nb + 1))
    bw = 0
    if len(o):
        starts = np.flatnonzero(np.r_[True, bo[1:] != bo[:-1]])
        bw = int((np.maximum.reduceat(band, starts) - np.minimum.reduceat(band, starts)).max())
    return perm, _i(ptr), _i(pos), slot.reshape(-1, 3), bw


def _joints(system: System) -> tuple[Any, ...]:
    ptr, rows = [0], []
    for j in system.joints:
        rows += list(j.rows)
        ptr.append(len(rows))
    return (_i(ptr), _i(rows), _i([j.col_i for j in system.joints]), _i([j.col_j for j in system.joints]),
            _f2([j.point_j for j in system.joints]))


def pack(system: System, rows: NDArray[np.intp], baumgarte: tuple[float, float] | None) -> tuple[Any, ...]:
    """(model tuple for the numba kernels, joints tuple for reactions). The model holds two solve
    data: ``sd`` for the dynamics (bodies, a cam's reduced row) and ``sdp`` for the projections (the
    active rows over every coordinate, extra ones as groups of three like bodies)."""
    cons, Jc = _constraints(system)
    bodies = (_f(system.mass), _f(system.inertia), _f2(system.cg), _f(system.gravity))
    rows = np.asarray(rows, dtype=np.intp)
    sd = _solve_data(Jc, _rows(system, rows, cons[GROUPS.index("cm")]), system.n_body)
    sdp = _solve_data(Jc, rows, -(-system.n_coord // 3))
    baum = _f([1.0, *baumgarte] if baumgarte else [0.0, 0.0, 0.0])
    model = (int(system.n_coord), int(Jc.shape[0]), cons, Jc, bodies, _loads(system), sd, baum, sdp)
    return model, _joints(system)
