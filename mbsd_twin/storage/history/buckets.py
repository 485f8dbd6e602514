"""A channel's stored range reduced to at most ``points`` equal time buckets, without ever holding
the range: blocks are read a few at a time (a server-side cursor in PostgreSQL, SQLite's stepping
cursor) and folded into per-bucket aggregates — the first sample's time, the count of samples, the
mean, min and max of the values and the mean σ (NaN ignored; a bucket of only NaN reads NaN).

A block whose samples all fall into one bucket is folded as a whole: the database sends the
aggregates stored with it at write time (:func:`block_aggregates`, ``AGG_COLUMNS``) instead of its
arrays, so the values of such blocks are never read (a block written before the columns existed is
reduced here from its values). A block across a bucket edge or an end of the range is read sample
by sample. A read therefore costs the number of blocks in the range plus the samples of at most
two blocks per bucket, not the number of samples. Bucket ``i`` holds the samples with
``edges[i] <= t < edges[i + 1]`` of ``edges = linspace(t_from, t_to, points + 1)``, the last one
closed at ``t_to`` — the same buckets as :func:`mbsd_twin.dashboard.history.downsample` of the whole
range.

Memory: ``CHUNK_ROWS`` blocks at a time (a merged block holds at most 10 s of samples), the times
of ``SPLIT_SAMPLES`` samples at a time, and arrays of ``points``; nothing grows with the range.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

CHUNK_ROWS = 64  # blocks fetched and folded at a time
SPLIT_SAMPLES = 65_536  # samples whose times are computed at a time (blocks across bucket edges)
MARGIN_US = 10  # a block this close (µs) to a bucket edge is never reduced as a whole by the database

StoredRow = tuple[float, float, int, bytes, bytes | None, bytes | None]  # t0, dt, n, value, sigma, parts


def _times(rows: Sequence[StoredRow]) -> np.ndarray:
    """The sample times of the blocks: each message's ``t0 + k·dt`` (as its subscribers compute them)."""
    t0s: list[float] = []
    ns: list[float] = []
    dts: list[float] = []
    for t0, dt, n, _, _, parts in rows:
        if parts is None:
            t0s.append(t0)
            ns.append(n)
            dts.append(dt)
        else:
            pairs = np.frombuffer(parts, dtype="<f8")
            t0s.extend(pairs[0::2].tolist())
            ns.extend(pairs[1::2].tolist())
            dts.extend([dt] * (len(pairs) // 2))
    counts = np.array(ns, dtype=np.int64)
    k = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(np.array(t0s), counts) + k * np.repeat(np.array(dts), counts)


def decode(rows: Sequence[StoredRow], t_from: float, t_to: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t, value, sigma) of one channel's blocks (ordered by t0) within [t_from, t_to]; NaN: null."""
    if not rows:
        return np.empty(0), np.empty(0), np.empty(0)
    _, _, ns, values, sigmas, _ = zip(*rows, strict=True)
    value = np.frombuffer(b"".join(values), dtype="<f8")
    if all(s is None for s in sigmas):
        sigma = np.full(len(value), np.nan)
    else:
        nan = {k: np.full(k, np.nan).tobytes() for k in set(ns)}
        sigma = np.frombuffer(b"".join(s if s is not None else nan[k] for s, k in zip(sigmas, ns, strict=True)),
                              dtype="<f8")
    t = _times(rows)
    if t_from <= t[0] and t[-1] <= t_to:
        return t, value, sigma
    keep = (t >= t_from) & (t <= t_to)
    return t[keep], value[keep], sigma[keep]


AGG_COLUMNS = ("vmin", "vmax", "vsum", "vn", "ssum", "sn")  # a block's aggregates, stored with it


def block_aggregates(value: bytes, sigma: bytes | None) -> tuple[float | None, float | None, float, int, float, int]:
    """What a bucket needs of a whole block (stored with it: ``AGG_COLUMNS``): min and max of its
    values (NaN ignored; None when all are NaN), the sum and count of its finite values, the sum and
    count of its finite σ."""
    v = np.frombuffer(value, dtype="<f8")
    ok = np.isfinite(v)
    lo, hi = float(np.fmin.reduce(v)) if len(v) else math.nan, float(np.fmax.reduce(v)) if len(v) else math.nan
    ssum, sn = 0.0, 0
    if sigma is not None:
        s = np.frombuffer(sigma, dtype="<f8")
        s_ok = np.isfinite(s)
        ssum, sn = float(s[s_ok].sum()), int(s_ok.sum())
    return (None if math.isnan(lo) else lo, None if math.isnan(hi) else hi, float(v[ok].sum()), int(ok.sum()),
            ssum, sn)


# A streamed row: t0, dt, n, parts, value, sigma (bytes; None when the database reduced the block),
# then the database's aggregates of a block it reduced (else None): vmin, vmax, vsum, vn, ssum, sn.
Row = Sequence[Any]


class Buckets:
    """Per-bucket aggregates of [t_from, t_to] in ``points`` equal buckets, fed by :meth:`add_rows`."""

    def __init__(self, t_from: float, t_to: float, points: int) -> None:
        self.lo, self.hi, self.points = t_from, t_to, points
        self.edges = np.linspace(t_from, t_to, points + 1)
        self.first = np.full(points, np.inf)
        self.count = np.zeros(points, dtype=np.int64)
        self.vmin, self.vmax = np.full(points, np.inf), np.full(points, -np.inf)
        self.vsum, self.vn = np.zeros(points), np.zeros(points, dtype=np.int64)
        self.ssum, self.sn = np.zeros(points), np.zeros(points, dtype=np.int64)

    def bucket(self, t: np.ndarray) -> np.ndarray:
        return np.clip(np.searchsorted(self.edges, t, side="right") - 1, 0, self.points - 1)

    def _fold(self, ids: np.ndarray, first: np.ndarray, count: np.ndarray, vmin: np.ndarray, vmax: np.ndarray,
              vsum: np.ndarray, vn: np.ndarray, ssum: np.ndarray, sn: np.ndarray) -> None:
        np.minimum.at(self.first, ids, first)
        np.add.at(self.count, ids, count)
        np.fmin.at(self.vmin, ids, vmin)
        np.fmax.at(self.vmax, ids, vmax)
        np.add.at(self.vsum, ids, vsum)
        np.add.at(self.vn, ids, vn)
        np.add.at(self.ssum, ids, ssum)
        np.add.at(self.sn, ids, sn)

    @staticmethod
    def _aggregate(starts: np.ndarray, value: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, ...]:
        """count, min, max, sum and count of the finite values, sum and count of the finite σ of the
        segments ``[starts[j], starts[j + 1])``."""
        ok, s_ok = np.isfinite(value), np.isfinite(sigma)
        return (np.diff(np.append(starts, len(value))), np.fmin.reduceat(value, starts),
                np.fmax.reduceat(value, starts), np.add.reduceat(np.where(ok, value, 0.0), starts),
                np.add.reduceat(ok.astype(np.int64), starts), np.add.reduceat(np.where(s_ok, sigma, 0.0), starts),
                np.add.reduceat(s_ok.astype(np.int64), starts))

    def _reduce(self, ids: np.ndarray, first: np.ndarray, starts: np.ndarray, value: np.ndarray,
                sigma: np.ndarray) -> None:
        """Fold segments ``[starts[j], starts[j + 1])`` of the samples into buckets ``ids[j]``."""
        self._fold(ids, first, *self._aggregate(starts, value, sigma))

    def add_samples(self, t: np.ndarray, value: np.ndarray, sigma: np.ndarray) -> None:
        """Samples in time order (those outside [t_from, t_to] are skipped)."""
        a, b = np.searchsorted(t, self.lo, side="left"), np.searchsorted(t, self.hi, side="right")
        t, value, sigma = t[a:b], value[a:b], sigma[a:b]
        if not len(t):
            return
        starts = np.searchsorted(t, self.edges[:-1], side="left")
        starts = np.unique(starts[starts < len(t)])
        self._reduce(self.bucket(t[starts]), t[starts], starts, value, sigma)

    def add_rows(self, rows: Iterable[Row]) -> None:
        """Fold one fetched chunk of blocks (time order)."""
        rows = list(rows)
        if not rows:
            return
        first = np.array([float(r[0]) for r in rows])
        last = np.array([last_sample(r) for r in rows])
        b0, b1 = self.bucket(first), self.bucket(last)
        reduced = np.array([r[4] is None for r in rows])  # the database sent the block's aggregates
        whole = ~reduced & (b0 == b1) & (first >= self.lo) & (last <= self.hi)  # values reduced here
        if reduced.any():
            k = np.flatnonzero(reduced)
            agg = np.array([[np.nan if v is None else float(v) for v in rows[j][6:12]] for j in k]).reshape(-1, 6)
            self._fold(b0[k], first[k], np.array([int(rows[j][2]) for j in k]), agg[:, 0], agg[:, 1],
                       np.nan_to_num(agg[:, 2]), agg[:, 3].astype(np.int64), np.nan_to_num(agg[:, 4]),
                       agg[:, 5].astype(np.int64))
        if whole.any():
            k = np.flatnonzero(whole)
            rs = [rows[j] for j in k]
            value = np.frombuffer(b"".join(r[4] for r in rs), dtype="<f8")
            starts = np.cumsum([0] + [int(r[2]) for r in rs[:-1]])
            self._reduce(b0[k], first[k], starts, value, _sigma(rs))
        batch: list[Row] = []
        for j in np.flatnonzero(~reduced & ~whole):  # sample by sample, SPLIT_SAMPLES at a time at most
            batch.append(rows[j])
            if sum(int(r[2]) for r in batch) >= SPLIT_SAMPLES:
                self._split(batch)
                batch = []
        if batch:
            self._split(batch)

    def _split(self, rows: list[Row]) -> None:
        """Blocks across a bucket edge or an end of the range, message by message (``parts``): a
        message inside one bucket is folded whole; only the samples of the few messages across an
        edge get their times (``t0 + k·dt`` of their message, as :func:`decode` computes them)."""
        pt0 = np.concatenate([np.frombuffer(r[3], dtype="<f8")[0::2] if r[3] is not None
                              else np.array([float(r[0])]) for r in rows])
        pn = np.concatenate([np.frombuffer(r[3], dtype="<f8")[1::2] if r[3] is not None
                             else np.array([float(r[2])]) for r in rows]).astype(np.int64)
        pdt = np.repeat([float(r[1]) for r in rows], [len(r[3]) // 16 if r[3] is not None else 1 for r in rows])
        value = np.frombuffer(b"".join(r[4] for r in rows), dtype="<f8")
        sigma = _sigma(rows)
        starts = np.cumsum(pn) - pn
        plast = pt0 + (pn - 1) * pdt
        b0, b1 = self.bucket(pt0), self.bucket(plast)
        inside = (b0 == b1) & (pt0 >= self.lo) & (plast <= self.hi)
        if inside.any():
            agg = self._aggregate(starts, value, sigma)
            self._fold(b0[inside], pt0[inside], *(a[inside] for a in agg))
        cross = np.flatnonzero(~inside)
        if len(cross):
            n = pn[cross]
            k = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
            idx = np.repeat(starts[cross], n) + k
            self.add_samples(np.repeat(pt0[cross], n) + k * np.repeat(pdt[cross], n), value[idx], sigma[idx])

    def result(self) -> dict[str, Any]:
        """``n`` (samples in the range) and, per non-empty bucket: ``t`` (its first sample's time),
        ``value`` (mean), ``min``, ``max``, ``sigma`` (mean σ) — NaN where a bucket has none."""
        used = self.count > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = self.vsum / self.vn
            s_mean = self.ssum / self.sn
        vmin = np.where(self.vn > 0, self.vmin, np.nan)
        vmax = np.where(self.vn > 0, self.vmax, np.nan)
        return {"n": int(self.count.sum()), "t": self.first[used].tolist(), "value": mean[used].tolist(),
                "min": vmin[used].tolist(), "max": vmax[used].tolist(), "sigma": s_mean[used].tolist()}


def last_sample(r: Row) -> float:
    """The time of a block's last sample, as its message gives it (:attr:`.rows.Block.t1`)."""
    t0, dt, n, parts = float(r[0]), float(r[1]), int(r[2]), r[3]
    if parts is None:
        return t0 + (n - 1) * dt
    p0, pn = np.frombuffer(parts[-16:], dtype="<f8")
    return float(p0 + (pn - 1) * dt)


def _sigma(rows: list[Row]) -> np.ndarray:
    if all(r[5] is None for r in rows):
        return np.full(sum(int(r[2]) for r in rows), np.nan)
    return np.frombuffer(b"".join(r[5] if r[5] is not None else np.full(int(r[2]), np.nan).tobytes() for r in rows),
                         dtype="<f8")
