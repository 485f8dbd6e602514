"""The functions behind the stepper's address table (``nb_indirect``): the right-hand side and the
projection as C function pointers (numba ``cfunc``), compiled — or loaded from numba's disk cache —
once per process, on first use. Each takes the table's address, finds the arrays of the context
there and reads the context that ``nb_stepper.bind`` pinned behind the table."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import carray, cfunc, njit, types
from numpy.typing import NDArray

from . import nb_dop853 as nd
from .nb_indirect import CB, FB, IB, N_FN, PROJECT, RHS, WB, U, f64_at, i64_at, pinned_context
from .nb_solve import _project
from .nb_stepper import _context_value

__all__ = ["PROJECT", "RHS", "addresses", "compile_entry", "fill_table"]

_F64P = types.CPointer(types.float64)
_SIGNATURES = {RHS: types.intp(types.float64, _F64P, _F64P, types.intp, types.voidptr),
               PROJECT: types.intp(types.float64, _F64P, types.intp, types.float64, types.voidptr)}
_COMPILED: dict[int, Any] = {}  # table entry → its cfunc (kept alive: the table holds its address)


@njit(cache=True, inline="always")
def _context(tb):  # noqa: ANN001
    """The typed pointer to the context pinned behind the table at ``tb``: its type is that of
    ``nb_stepper._context_value`` of the arrays the table names (which the compiler only types)."""
    head = carray(i64_at(tb), N_FN)
    cb = carray(i64_at(head[CB]), head[CB + 1])
    u, fb, wb = carray(f64_at(head[U]), head[U + 1]), carray(f64_at(head[FB]), head[FB + 1]), \
        carray(f64_at(head[WB]), head[WB + 1])
    return pinned_context(cb, _context_value(u, carray(i64_at(head[IB]), head[IB + 1]), fb, wb))


def _rhs_entry(t, yp, dyp, n, tb):  # noqa: ANN001, ANN202
    return 1 if nd._rhs(t, carray(yp, n), carray(dyp, n), _context(tb)) else 0


def _project_entry(t, yp, n, tol, tb):  # noqa: ANN001, ANN202
    return 1 if _project(t, carray(yp, n), tol, _context(tb)) else 0


def compile_entry(k: int) -> Any:
    """The cfunc of table entry ``k`` (:data:`nb_indirect.RHS` or :data:`nb_indirect.PROJECT`)."""
    if k not in _COMPILED:
        _COMPILED[k] = cfunc(_SIGNATURES[k], cache=True)(_rhs_entry if k == RHS else _project_entry)
    return _COMPILED[k]


def addresses() -> NDArray[np.int64]:
    """The functions' addresses, in the order of ``nb_indirect`` (compiling what is not compiled)."""
    return np.array([compile_entry(RHS).address, compile_entry(PROJECT).address], dtype=np.int64)


def fill_table(cb: NDArray[np.int64], u: NDArray[np.float64], ib: NDArray[np.int64], fb: NDArray[np.float64],
               wb: NDArray[np.float64]) -> None:
    """Write the table at the head of ``cb``: the functions and the arrays of the context (their
    owner keeps them, unchanged in place, while ``cb`` is in use)."""
    cb[RHS:PROJECT + 1] = addresses()
    for k, a in ((CB, cb), (U, u), (IB, ib), (FB, fb), (WB, wb)):
        if not a.flags.c_contiguous:
            raise ValueError("the context's arrays must be contiguous")
        cb[k], cb[k + 1] = a.ctypes.data, a.shape[0]
