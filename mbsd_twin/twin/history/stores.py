"""The history backends: SQLite (embedded, one file) and PostgreSQL (psycopg 3; a TimescaleDB
hypertable when the extension is available). Same schema in both (docs/history.md):

* ``series`` (id, asset, channel): one row per asset and channel;
* ``blocks`` (series, t0_us, t1_us, t0, dt, n, value, sigma, parts): a run of one channel's samples
  (:mod:`.rows`) — ``n`` samples at rig time ``t0 + k·dt`` (per merged message: ``parts``),
  ``value``/``sigma`` little-endian float64 arrays (``sigma`` null when the channel has none);
  indexed on (series, t0_us), µs of the first and last
  sample's rig time;
* ``events`` (asset, kind, t, wall, body): alarms, re-initialisations, health and status messages.

Every call raises :class:`StoreError` (naming the store) on any database or file failure; the
connection is dropped then and re-opened by the next call, so a store that comes back is used again.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np

from .rows import MERGE_SPAN_S, Block, Event

DAY_US = 86_400_000_000
LONG_US = round(MERGE_SPAN_S * 1e6)  # a block spanning more than this (one long message) is "long"
LONG_BLOCK = f"b.t1_us - b.t0_us > {LONG_US}"
LONG_INDEX = f"CREATE INDEX IF NOT EXISTS blocks_long ON blocks (series, t0_us) WHERE t1_us - t0_us > {LONG_US};"


class StoreError(Exception):
    """The store failed (unreachable, locked, read-only, full); the message names it."""


def _us(t: float) -> int:
    return math.floor(t * 1e6)


def _block_rows(blocks: Sequence[Block], ids: dict[tuple[str, str], int]) -> list[tuple[Any, ...]]:
    return [(ids[(b.asset, b.channel)], _us(b.t0), _us(b.t1), b.t0, b.dt, b.n, b.value, b.sigma, b.parts)
            for b in blocks]


def _event_rows(events: Sequence[Event]) -> list[tuple[Any, ...]]:
    return [(e.asset, e.kind, e.t, e.wall, e.body) for e in events]


Row = tuple[float, float, int, bytes, bytes | None, bytes | None]  # t0, dt, n, value, sigma, parts


def _times(rows: Sequence[Row]) -> np.ndarray:
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


def decode(rows: Sequence[Row], t_from: float, t_to: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


class _SqlStore:
    """What the two backends share: the series ids, the write transaction, query and retention."""

    name = ""
    P = "?"  # parameter placeholder

    def __init__(self) -> None:
        self.conn: Any = None
        self.ids: dict[tuple[str, str], int] = {}

    # --- backend specifics
    def _open(self) -> Any:
        raise NotImplementedError

    def _insert_blocks(self, cur: Any, rows: list[tuple[Any, ...]]) -> None:
        cur.executemany(f"INSERT INTO blocks VALUES ({', '.join([self.P] * 9)})", rows)

    def _errors(self) -> tuple[type[BaseException], ...]:
        raise NotImplementedError

    @staticmethod
    def _tx(conn: Any) -> Any:
        """A transaction: committed at the end of the block, rolled back on an exception."""
        return conn  # sqlite3's connection is that context manager

    @staticmethod
    def _read_cursor(conn: Any) -> Any:
        return conn.cursor()

    # --- shared
    def _call(self, what: str, fn: Any) -> Any:
        try:
            if self.conn is None:
                self.conn = self._open()
            return fn(self.conn)
        except self._errors() as exc:
            from ..redaction import redact

            self.drop()
            why = redact(str(exc).strip(), getattr(self, "dsn", "")) or type(exc).__name__  # never a password
            raise StoreError(f"{what} {self.name}: {why}") from exc

    def drop(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        self.conn = None

    close = drop

    def _series(self, conn: Any, keys: set[tuple[str, str]]) -> None:
        new = sorted(keys - self.ids.keys())
        if not new:
            return
        p = self.P
        with self._tx(conn):  # committed on its own: the ids cached are always in the database
            cur = conn.cursor()
            cur.executemany(f"INSERT INTO series (asset, channel) VALUES ({p}, {p}) ON CONFLICT DO NOTHING", new)
            for key in new:
                cur.execute(f"SELECT id FROM series WHERE asset = {p} AND channel = {p}", key)
                self.ids[key] = int(cur.fetchone()[0])

    def write(self, blocks: Sequence[Block], events: Sequence[Event]) -> None:
        """Blocks and events in one transaction (all or nothing)."""
        def run(conn: Any) -> None:
            self._series(conn, {(b.asset, b.channel) for b in blocks})
            with self._tx(conn):
                cur = conn.cursor()
                if blocks:
                    self._insert_blocks(cur, _block_rows(blocks, self.ids))
                if events:
                    cur.executemany(f"INSERT INTO events VALUES ({', '.join([self.P] * 5)})", _event_rows(events))
        self._call("writing to", run)

    def channels(self, asset: str) -> list[str]:
        return self._call("reading", lambda conn: [r[0] for r in self._fetch(
            conn, f"SELECT channel FROM series WHERE asset = {self.P} ORDER BY channel", (asset,))])

    def query(self, asset: str, channel: str, t_from: float, t_to: float
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(t, value, sigma) of one channel in [t_from, t_to] (rig time, s), in time order. The blocks
        are found by index ranges: those starting at most ``MERGE_SPAN_S`` before ``t_from`` (the
        index (series, t0_us)) and the rare longer ones starting earlier (the partial index
        ``blocks_long``) — never a scan of the channel's whole history."""
        p = self.P
        sql = ("SELECT b.t0_us, b.t0, b.dt, b.n, b.value, b.sigma, b.parts FROM blocks b JOIN series s "
               f"ON s.id = b.series WHERE s.asset = {p} AND s.channel = {p} AND b.t0_us <= {p} AND b.t1_us >= {p} AND ")
        sql = f"{sql}b.t0_us >= {p} UNION ALL {sql}b.t0_us < {p} AND {LONG_BLOCK} ORDER BY 1"
        lo = _us(t_from) - 1 if math.isfinite(t_from) else -(1 << 62)
        hi = _us(t_to) + 1 if math.isfinite(t_to) else 1 << 62
        args = (asset, channel, hi, lo, lo - LONG_US) * 2
        rows = self._call("reading", lambda conn: self._fetch(conn, sql, args))
        return decode([r[1:] for r in rows], t_from, t_to)

    def span(self, asset: str) -> list[float] | None:
        """[first, last] rig time (s) of the asset's stored blocks; None when it has none."""
        sql = (f"SELECT min(b.t0), max(b.t1_us) FROM blocks b JOIN series s ON s.id = b.series "
               f"WHERE s.asset = {self.P}")
        lo, hi = self._call("reading", lambda conn: self._fetch(conn, sql, (asset,)))[0]
        return None if lo is None else [float(lo), (hi + 1) / 1e6]

    def last_time(self, asset: str, channel: str = "state.theta") -> float | None:
        """Rig time [s] of the newest stored sample of a channel (µs, floor), None when there is none."""
        sql = (f"SELECT MAX(b.t1_us) FROM blocks b JOIN series s ON s.id = b.series "
               f"WHERE s.asset = {self.P} AND s.channel = {self.P}")
        rows = self._call("reading", lambda conn: self._fetch(conn, sql, (asset, channel)))
        return None if not rows or rows[0][0] is None else rows[0][0] / 1e6

    def events(self, asset: str) -> list[tuple[str, float | None, float, str]]:
        sql = f"SELECT kind, t, wall, body FROM events WHERE asset = {self.P} ORDER BY wall"
        return self._call("reading", lambda conn: self._fetch(conn, sql, (asset,)))

    def _fetch(self, conn: Any, sql: str, args: tuple[Any, ...]) -> list[Any]:
        cur = self._read_cursor(conn)
        cur.execute(sql, args)
        return list(cur.fetchall())  # (sqlite3 opens no transaction for a SELECT; psycopg runs in autocommit)

    def retain(self, days: float, now: float) -> int:
        """Delete blocks more than ``days`` older (rig time) than their channel's newest block, and
        events published more than ``days`` ago; the number of rows deleted."""
        keep_us = int(days * DAY_US)
        p = self.P

        def run(conn: Any) -> int:
            with self._tx(conn):
                cur = conn.cursor()
                cur.execute("SELECT series, max(t0_us) FROM blocks GROUP BY series")
                newest = cur.fetchall()
                deleted = 0
                for sid, t_max in newest:
                    cur.execute(f"DELETE FROM blocks WHERE series = {p} AND t1_us < {p}", (sid, t_max - keep_us))
                    deleted += max(cur.rowcount, 0)
                cur.execute(f"DELETE FROM events WHERE wall < {p}", (now - days * 86400.0,))
                return deleted + max(cur.rowcount, 0)
        return int(self._call("deleting old rows from", run))


SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS series (id INTEGER PRIMARY KEY, asset TEXT NOT NULL, channel TEXT NOT NULL,
                                   UNIQUE (asset, channel));
CREATE TABLE IF NOT EXISTS blocks (series INTEGER NOT NULL REFERENCES series (id), t0_us INTEGER NOT NULL,
                                   t1_us INTEGER NOT NULL, t0 REAL NOT NULL, dt REAL NOT NULL, n INTEGER NOT NULL,
                                   value BLOB NOT NULL, sigma BLOB, parts BLOB);
CREATE INDEX IF NOT EXISTS blocks_series_t ON blocks (series, t0_us);
CREATE TABLE IF NOT EXISTS events (asset TEXT NOT NULL, kind TEXT NOT NULL, t REAL, wall REAL NOT NULL,
                                   body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_asset_wall ON events (asset, wall);
""" + LONG_INDEX


class SqliteStore(_SqlStore):
    """One SQLite file (WAL: ``twin history`` reads while the twin writes)."""

    def __init__(self, path: str, timeout: float = 5.0, create: bool = True) -> None:
        super().__init__()
        self.path, self.timeout, self.create = path, timeout, create
        self.name = f"SQLite history {path}"

    def _errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.Error, OSError)

    def _open(self) -> sqlite3.Connection:
        uri = f"file:{self.path}" + ("" if self.create else "?mode=ro")
        conn = sqlite3.connect(uri, uri=True, timeout=self.timeout, check_same_thread=False)
        try:
            if self.create:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(SQLITE_SCHEMA)
        except BaseException:
            conn.close()
            raise
        return conn

