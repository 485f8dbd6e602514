"""Flat buffers for the compiled path: the packed model in one int64 and one float64 array.

Calling a compiled function from Python costs a type dispatch and an unboxing per argument; the
packed model is a nested tuple of some forty arrays, which made each call cost about 2.5 µs — more
than a right-hand side. :func:`flatten` copies the model and the joint table into two buffers
(``ib``, ``fb``); the compiled entry points rebuild the tuple inside numba with
:func:`unflatten` (array views, no copy), so a call passes a handful of arrays.

``ib`` layout: ``HEAD`` scalars (n, m, band width, the eight constraint groups' first rows, the
projection's band width), then
(start, rows, columns) of each int array and of each float array, then the int data; the float
data fill ``fb``. Scratch arrays come from one float buffer too (:func:`workspace_size`,
:func:`workspace_in`), allocated once per stepper instead of once per call.

The 2-D and 3-D views are made by ``nb_kernels.shaped``, not ``reshape``: numba's reshape calls a C
helper per view, an opaque call that also kept LLVM from keeping shapes and strides in registers
across the inlined stepper. Replacing the ~30 reshapes per entry call took the Simulator's 1 ms
step on the slider crank from 13.6 to 8.3–11.9 µs (best of 5; this machine's runs vary that much).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from .nb_kernels import shaped

HEAD = 12
N_INT, N_FLOAT = 28, 21


def flatten(model: tuple[Any, ...], joints: tuple[Any, ...]) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """(ib, fb) holding ``model`` and ``joints`` (see ``compiled_model.pack``)."""
    n, m, cons, Jc, bodies, loads, sd, baum, sdp = model
    ints = [g[1] for g in cons] + [Jc] + [g[0] for g in loads] + list(sd[:4]) + list(joints[:4]) + list(sdp[:4])
    floats = [g[2] for g in cons] + list(bodies) + [g[1] for g in loads] + [baum, joints[4]]
    assert len(ints) == N_INT and len(floats) == N_FLOAT
    head = [int(n), int(m), int(sd[4]), *(int(g[0]) for g in cons), int(sdp[4])]
    table: list[int] = []
    start = HEAD + 3 * (N_INT + N_FLOAT)
    for a in ints:
        table += [start, a.shape[0], a.size // max(a.shape[0], 1) if a.ndim == 2 else 1]
        start += a.size
    fstart = 0
    for a in floats:
        table += [fstart, a.shape[0], a.size // max(a.shape[0], 1) if a.ndim == 2 else 1]
        fstart += a.size
    ib = np.concatenate([np.array(head + table, dtype=np.int64)] + [np.ravel(a).astype(np.int64) for a in ints])
    fb = np.concatenate([np.zeros(0)] + [np.ravel(a).astype(float) for a in floats])
    return ib, fb


@njit(cache=True, inline="always")
def _i2(ib, k):  # noqa: ANN001
    e = HEAD + 3 * k
    s, r, c = ib[e], ib[e + 1], ib[e + 2]
    return shaped(ib, s, (r, c))


@njit(cache=True, inline="always")
def _i1(ib, k):  # noqa: ANN001
    e = HEAD + 3 * k
    return ib[ib[e]:ib[e] + ib[e + 1]]


@njit(cache=True, inline="always")
def _f2(ib, fb, k):  # noqa: ANN001
    e = HEAD + 3 * (N_INT + k)
    s, r, c = ib[e], ib[e + 1], ib[e + 2]
    return shaped(fb, s, (r, c))


@njit(cache=True, inline="always")
def _f1(ib, fb, k):  # noqa: ANN001
    e = HEAD + 3 * (N_INT + k)
    return fb[ib[e]:ib[e] + ib[e + 1]]


@njit(cache=True, inline="always")
def unflatten(ib, fb):  # noqa: ANN001
    """(model, joints) as views into the buffers; the same structure as ``compiled_model.pack``."""
    cons = ((ib[3], _i2(ib, 0), _f2(ib, fb, 0)), (ib[4], _i2(ib, 1), _f2(ib, fb, 1)),
            (ib[5], _i2(ib, 2), _f2(ib, fb, 2)), (ib[6], _i2(ib, 3), _f2(ib, fb, 3)),
            (ib[7], _i2(ib, 4), _f2(ib, fb, 4)), (ib[8], _i2(ib, 5), _f2(ib, fb, 5)),
            (ib[9], _i2(ib, 6), _f2(ib, fb, 6)), (ib[10], _i2(ib, 7), _f2(ib, fb, 7)))
    bodies = (_f1(ib, fb, 8), _f1(ib, fb, 9), _f2(ib, fb, 10), _f1(ib, fb, 11))
    loads = ((_i2(ib, 9), _f2(ib, fb, 12)), (_i2(ib, 10), _f2(ib, fb, 13)), (_i2(ib, 11), _f2(ib, fb, 14)),
             (_i2(ib, 12), _f2(ib, fb, 15)), (_i2(ib, 13), _f2(ib, fb, 16)), (_i2(ib, 14), _f2(ib, fb, 17)),
             (_i2(ib, 15), _f2(ib, fb, 18)))
    sd = (_i1(ib, 16), _i1(ib, 17), _i1(ib, 18), _i2(ib, 19), ib[2])
    sdp = (_i1(ib, 24), _i1(ib, 25), _i1(ib, 26), _i2(ib, 27), ib[11])
    model = (ib[0], ib[1], cons, _i2(ib, 8), bodies, loads, sd, _f1(ib, fb, 19), sdp)
    joints = (_i1(ib, 20), _i1(ib, 21), _i1(ib, 22), _i1(ib, 23), _f2(ib, fb, 20))
    return model, joints


@njit(cache=True)
def workspace_size(n, nb, m, width, n_active, bw, n_entries, n_active_p, bw_p, n_entries_p):  # noqa: ANN001
    """Length of the float buffer :func:`workspace_in` carves (same order, same sizes): ``n``
    coordinates, ``nb`` bodies, ``m`` rows of ``width`` slots, and for the dynamics solve and the
    projection (``_p``) the active rows, band width and body entries of their solve data."""
    return (4 * (n + 3) + 4 * m + m * width + 9 * nb + 3 * n + n_active * (bw + 2) + 3 * n_entries
            + n_active_p * (bw_p + 2) + 3 * n_entries_p)


@njit(cache=True, inline="always")
def workspace_in(wb, model):  # noqa: ANN001
    """The scratch arrays of ``nb_solve.workspace`` as views into ``wb``."""
    n, m, Jc, sd, sdp = model[0], model[1], model[3], model[6], model[8]
    ma, bw, w, nb = sd[0].shape[0], sd[4], Jc.shape[1], model[4][0].shape[0]
    mp, bwp = sdp[0].shape[0], sdp[4]
    o1, o2, o3 = n + 3, 2 * (n + 3), 3 * (n + 3)
    o4 = o3 + m
    o5 = o4 + m * w
    o6, o7 = o5 + m, o5 + 2 * m
    o8 = o7 + 9 * nb
    o9 = o8 + n + 3
    o10 = o9 + m
    o11, o12, o13 = o10 + n, o10 + 2 * n, o10 + 3 * n
    o14 = o13 + ma
    o15 = o14 + ma * (bw + 1)
    o16 = o15 + 3 * sd[2].shape[0]
    o17 = o16 + mp
    o18 = o17 + mp * (bwp + 1)
    return (wb[0:o1], wb[o1:o2], wb[o2:o3], wb[o3:o4], shaped(wb, o4, (m, w)), wb[o5:o6], wb[o6:o7],
            shaped(wb, o7, (nb, 3, 3)), wb[o8:o9], wb[o9:o10], wb[o10:o11], wb[o11:o12], wb[o12:o13],
            wb[o13:o14], shaped(wb, o14, (ma, bw + 1)), shaped(wb, o15, (sd[2].shape[0], 3)), wb[o16:o17],
            shaped(wb, o17, (mp, bwp + 1)), shaped(wb, o18, (sdp[2].shape[0], 3)))
