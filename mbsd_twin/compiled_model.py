"""Pack a compiled :class:`System` into the flat arrays the numba kernels read.

``pack(system, rows, opts)`` returns the model tuple, or raises :class:`Unsupported` naming the
feature the compiled path lacks (a table or callable profile, a callable load, extra
coordinates); the caller then uses the numpy path, which supports everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray
from scipy.sparse.csgraph import reverse_cuthill_mckee

from . import kernels as kn
from . import loads as ld
from .model import Load
from .profiles import Constant, ConstantSpeed, Harmonic, Polynomial, Profile
from .system import System

F = NDArray[Any]
I64 = np.int64
WIDTH = 6


class Unsupported(Exception):
    """The compiled path cannot run this mechanism; the message says which feature."""


def _i(x: Any) -> NDArray[np.int64]:
    return np.ascontiguousarray(np.asarray(x, dtype=I64).reshape(-1))


def _f2(x: Any) -> F:
    return np.ascontiguousarray(np.asarray(x, dtype=float).reshape(-1, 2))


def _f(x: Any) -> F:
    return np.ascontiguousarray(np.asarray(x, dtype=float).reshape(-1))


def profile_code(p: Profile | None) -> tuple[int, list[float]]:
    if isinstance(p, Constant):
        return 0, [p.value]
    if isinstance(p, ConstantSpeed):
        return 1, [p.speed, p.start]
    if isinstance(p, Polynomial):
        return 2, list(p.coefficients)
    if isinstance(p, Harmonic):
        return 3, [p.amplitude, p.frequency, p.phase, p.offset]
    raise Unsupported(f"{getattr(p, 'kind', type(p).__name__)} profile")


def _profiles(profiles: Sequence[Profile | None]) -> tuple[NDArray[np.int64], F]:
    codes = [profile_code(p) if p is not None else (0, [0.0]) for p in profiles]
    width = max([len(c[1]) for c in codes] + [4])
    pp = np.zeros((len(codes), width))
    for k, (_, par) in enumerate(codes):
        pp[k, : len(par)] = par
    return _i([c[0] for c in codes]), pp


def _constraints(system: System) -> tuple[tuple[Any, ...], NDArray[np.int64]]:
    empty2, emptyi, emptyf = np.zeros((0, 2)), _i([]), _f([])
    parts: dict[str, tuple[Any, ...]] = {
        "co": (0, emptyi, emptyi, empty2, empty2), "ra": (0, emptyi, emptyi, emptyf),
        "pl": (0, emptyi, emptyi, empty2, empty2, empty2), "gr": (0, emptyi, emptyi, emptyf, emptyf),
        "cd": (0, emptyi, emptyi, empty2, emptyi, np.zeros((0, 4))),
        "dd": (0, emptyi, emptyi, empty2, empty2, emptyi, np.zeros((0, 4)))}
    Jc = -np.ones((system.n_constraints, WIDTH), dtype=I64)
    off = 0
    for k in system.kernels:
        r = len(k.rows)
        Jc[off:off + r, : k.cols.shape[1]] = np.where(k.cols < system.n_coord, k.cols, -1)
        if isinstance(k, kn.CoincidentPoints):
            parts["co"] = (off, _i(k.col_i), _i(k.col_j), _f2(k.s_i), _f2(k.s_j))
        elif isinstance(k, kn.RelativeAngle):
            parts["ra"] = (off, _i(k.col_i), _i(k.col_j), _f(k.phi0))
        elif isinstance(k, kn.PointOnLine):
            parts["pl"] = (off, _i(k.col_i), _i(k.col_j), _f2(k.s_i), _f2(k.s_j), _f2(k.nhat))
        elif isinstance(k, kn.GearRatio):
            parts["gr"] = (off, _i(k.col_i), _i(k.col_j), _f(k.ratio), _f(k.c0))
        elif isinstance(k, kn.CoordinateDriver):
            parts["cd"] = (off, _i(k.col_i), _i(k.axis), _f2(k.s_i), *_profiles(k.profiles))
        elif isinstance(k, kn.DistanceDriver):
            parts["dd"] = (off, _i(k.col_i), _i(k.col_j), _f2(k.s_i), _f2(k.s_j), *_profiles(k.profiles))
        else:
            raise Unsupported(f"constraint kind {type(k).__name__}")
        off += r
    return tuple(parts[key] for key in ("co", "ra", "pl", "gr", "cd", "dd")), Jc


def _magnitudes(loads: Sequence[Load], inputs: Sequence[str]) -> tuple[Any, ...]:
    kind = [1 if x.input else 2 if x.profile is not None else 0 for x in loads]
    idx = [inputs.index(x.input) if x.input else 0 for x in loads]
    pk, pp = _profiles([x.profile for x in loads])
    return _i(kind), _f([x.value for x in loads]), _i(idx), pk, pp


def _loads(system: System) -> tuple[Any, ...]:
    e2, ei, ef = np.zeros((0, 2)), _i([]), _f([])
    mags_empty = (ei, ef, ei, ei, np.zeros((0, 4)))
    fo: tuple[Any, ...] = (ei, e2, e2, np.zeros(0, dtype=np.bool_), *mags_empty)
    to: tuple[Any, ...] = (ei, ei, *mags_empty)
    sd: tuple[Any, ...] = (ei, ei, e2, e2, ef, ef, ef)
    rs: tuple[Any, ...] = (ei, ei, ef, ef, ef)
    pf: tuple[Any, ...] = (ei, ei, e2, e2, e2, ef)
    names = list(system.input_names)
    for g in system.loads.groups:
        if isinstance(g, ld.Forces):
            fo = (_i(g.ci), _f2(g.p), _f2(g.d), np.asarray(g.body_frame, np.bool_), *_magnitudes(g.loads, names))
        elif isinstance(g, ld.Torques):
            to = (_i(g.ci), _i(g.cj), *_magnitudes(g.loads, names))
        elif isinstance(g, ld.SpringDampers):
            sd = (_i(g.ci), _i(g.cj), _f2(g.pi), _f2(g.pj), _f(g.k), _f(g.c), _f(g.L0))
        elif isinstance(g, ld.RotationalSpringDampers):
            rs = (_i(g.ci), _i(g.cj), _f(g.k), _f(g.c), _f(g.phi0))
        elif isinstance(g, ld.PrismaticFriction):
            pf = (_i(g.ci), _i(g.cj), _f2(g.pi), _f2(g.pj), _f2(g.u), _f(g.c))
        else:
            raise Unsupported(f"load kind {type(g).__name__}")
    return fo, to, sd, rs, pf


def _solve_data(Jc: NDArray[np.int64], rows: NDArray[np.intp], nb: int) -> tuple[Any, ...]:
    """Band ordering of the active rows and, per body, the rows touching it with their slots."""
    m = len(rows)
    touch = [[(p, k) for p, r in enumerate(rows) for k in range(WIDTH) if Jc[r, k] >= 0 and Jc[r, k] // 3 == b]
             for b in range(nb)]
    pattern = sp.lil_array((m, m))
    for lst in touch:
        ps = {p for p, _ in lst}
        for p1 in ps:
            for p2 in ps:
                pattern[p1, p2] = 1
    order = reverse_cuthill_mckee(sp.csr_array(pattern), symmetric_mode=True) if m else np.zeros(0, int)
    where = np.empty(m, dtype=I64)
    where[order] = np.arange(m)
    perm = _i(rows[order])
    ptr, pos, slot = [0], [], []
    for b, lst in enumerate(touch):
        by_row: dict[int, list[int]] = {}
        for p, k in lst:
            by_row.setdefault(int(where[p]), [-1, -1, -1])[int(Jc[rows[p], k]) - 3 * b] = k
        for p_band, slots in sorted(by_row.items()):
            pos.append(p_band)
            slot.append(slots)
        ptr.append(len(pos))
    bw = max([abs(int(a) - int(b)) for lst in touch for a in {where[p] for p, _ in lst}
              for b in {where[p] for p, _ in lst}] + [0])
    return perm, _i(ptr), _i(pos), np.asarray(slot, dtype=I64).reshape(-1, 3), int(bw)


def _joints(system: System) -> tuple[Any, ...]:
    ptr, rows = [0], []
    for j in system.joints:
        rows += list(j.rows)
        ptr.append(len(rows))
    return (_i(ptr), _i(rows), _i([j.col_i for j in system.joints]), _i([j.col_j for j in system.joints]),
            _f2([j.point_j for j in system.joints]))


def pack(system: System, rows: NDArray[np.intp], baumgarte: tuple[float, float] | None) -> tuple[Any, ...]:
    """(model tuple for the numba kernels, joints tuple for reactions)."""
    if system.n_coord != 3 * system.n_body:
        raise Unsupported("extra (non-body) coordinates")
    cons, Jc = _constraints(system)
    bodies = (_f(system.mass), _f(system.inertia), _f2(system.cg), _f(system.gravity))
    sd = _solve_data(Jc, np.asarray(rows, dtype=np.intp), system.n_body)
    baum = _f([1.0, *baumgarte] if baumgarte else [0.0, 0.0, 0.0])
    model = (int(system.n_coord), int(system.n_constraints), cons, Jc, bodies, _loads(system), sd, baum)
    return model, _joints(system)
