"""Rank decisions on a sparse constraint Jacobian in time about linear in its size.

:func:`pivot_columns` is Gaussian elimination with threshold (row) pivoting on the columns of a
matrix taken in a *given* order: a column is a pivot column when, after eliminating the pivot
columns before it, some not yet used row still holds an entry above the tolerance. The pivot
columns are the greedy column basis in that order (each independent of those before it, together
spanning all columns). Rows are kept as dictionaries of their non-zero entries, so a mechanism's
Jacobian (two bodies, six columns per row) is eliminated with little fill: a chain of N links in
O(N), where one dense factorisation costs O(N³).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

F = NDArray[Any]


def _sparse_rows(a: Any) -> tuple[list[dict[int, float]], dict[int, set[int]], float]:
    """(entries of each row, rows holding each column, max |entry|) of the non-zeros of ``a``
    (a dense array or a scipy sparse matrix, its entries taken in row-major order either way)."""
    if sp.issparse(a):
        csr = sp.csr_array(a, copy=True)
        csr.eliminate_zeros()
        csr.sort_indices()
        ii = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
        jj, vv = csr.indices, csr.data
    else:
        ii, jj = np.nonzero(a)
        vv = a[ii, jj]
    rows: list[dict[int, float]] = [{} for _ in range(a.shape[0])]
    holders: dict[int, set[int]] = {}
    for i, j, v in zip(ii.tolist(), jj.tolist(), vv.tolist(), strict=True):
        rows[i][j] = v
        holders.setdefault(j, set()).add(i)
    return rows, holders, float(np.abs(vv).max()) if len(vv) else 0.0


def _eliminate(rows: list[dict[int, float]], holders: dict[int, set[int]], pivot: int, col: int,
               others: set[int], drop: float) -> None:
    """Subtract multiples of row ``pivot`` from the rows ``others`` to clear column ``col``."""
    prow = rows[pivot]
    p = prow[col]
    for r in others:
        row = rows[r]
        f = row.pop(col) / p
        holders[col].discard(r)
        for j, v in prow.items():
            if j == col:
                continue
            w = row.get(j, 0.0) - f * v
            if abs(w) > drop:
                if j not in row:
                    holders.setdefault(j, set()).add(r)
                row[j] = w
            elif j in row:
                del row[j]
                holders[j].discard(r)


def _pivot_row(rows: list[dict[int, float]], live: set[int], col: int, big: float) -> int:
    """Threshold pivoting: of the rows whose entry is at least a tenth of the largest, the one
    with the fewest entries (the least fill), then the largest entry, then the first."""
    fit = [r for r in live if abs(rows[r][col]) >= 0.1 * big]
    return min(fit, key=lambda r: (len(rows[r]), -abs(rows[r][col]), r))


def pivot_columns(a: Any, order: Sequence[int], rel_tol: float = 1e-9) -> list[int]:
    """The columns of ``a`` (dense or scipy sparse; in ``order``, which may leave columns out) that are independent of
    the pivot columns before them: an entry of magnitude above ``rel_tol`` times max(1, max|a|)
    remains in an unused row after their elimination."""
    rows, holders, biggest = _sparse_rows(a)
    scale = max(1.0, biggest)
    tol, drop = rel_tol * scale, 1e-3 * rel_tol * scale
    pivots: list[int] = []
    for col in order:
        live = holders.get(int(col))
        if not live:
            continue
        big = max(abs(rows[r][int(col)]) for r in live)
        if big <= tol:
            continue
        best = _pivot_row(rows, live, int(col), big)
        pivots.append(int(col))
        live.discard(best)
        _eliminate(rows, holders, best, int(col), set(live), drop)
        for j in rows[best]:  # the pivot row is used up: no later column sees it
            if j != col:
                holders[j].discard(best)
    return pivots
