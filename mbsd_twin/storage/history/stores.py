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
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .buckets import AGG_COLUMNS, CHUNK_ROWS, MARGIN_US, Buckets, block_aggregates, decode, last_sample
from .overlap import Key, Span, keep_new, span
from .overlap import us as _us
from .rows import MERGE_SPAN_S, Block, Event

DAY_US = 86_400_000_000
LONG_US = round(MERGE_SPAN_S * 1e6)  # a block spanning more than this (one long message) is "long"
LONG_BLOCK = f"b.t1_us - b.t0_us > {LONG_US}"
LONG_INDEX = f"CREATE INDEX IF NOT EXISTS blocks_long ON blocks (series, t0_us) WHERE t1_us - t0_us > {LONG_US};"
OVERLAP_CHUNK = 300  # new blocks per query for the stored blocks they overlap (3 parameters each)


class StoreError(Exception):
    """The store failed (unreachable, locked, read-only, full); the message names it."""


BLOCK_COLUMNS = ("series", "t0_us", "t1_us", "t0", "dt", "n", "value", "sigma", "parts", *AGG_COLUMNS)


def _block_rows(blocks: Sequence[Block], ids: dict[tuple[str, str], int]) -> list[tuple[Any, ...]]:
    return [(ids[(b.asset, b.channel)], _us(b.t0), _us(b.t1), b.t0, b.dt, b.n, b.value, b.sigma, b.parts,
             *block_aggregates(b.value, b.sigma)) for b in blocks]


def _event_rows(events: Sequence[Event]) -> list[tuple[Any, ...]]:
    return [(e.asset, e.kind, e.t, e.wall, e.body) for e in events]


def overlapping(tables: str, union: str) -> str:
    """SELECT (series, t0_us, t1_us) of the blocks ``b`` overlapping ``q``'s (s, lo, hi), each part a range
    or a step in the index (series, t0_us): the blocks starting within [lo, hi]; the last one starting
    before ``lo`` (an earlier one reaching ``lo`` would overlap it: blocks of a series do not
    overlap); and, for blocks stored before that was enforced, the long ones before ``lo`` (the
    partial index ``blocks_long``)."""
    sql = f"SELECT b.series, b.t0_us, b.t1_us FROM {tables} WHERE b.series = q.s AND "
    last = "(SELECT c.t0_us FROM blocks c WHERE c.series = q.s AND c.t0_us < q.lo ORDER BY c.t0_us DESC LIMIT 1)"
    return (f"{sql}b.t0_us >= q.lo AND b.t0_us <= q.hi {union} {sql}b.t0_us = {last} AND b.t1_us >= q.lo "
            f"{union} {sql}b.t0_us < q.lo AND b.t1_us >= q.lo AND {LONG_BLOCK}")


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
        cur.executemany(f"INSERT INTO blocks ({', '.join(BLOCK_COLUMNS)}) "
                        f"VALUES ({', '.join([self.P] * len(BLOCK_COLUMNS))})", rows)

    def _errors(self) -> tuple[type[BaseException], ...]:
        raise NotImplementedError

    def _lock(self, cur: Any, assets: set[str]) -> None:
        """First in a write transaction: from here until its commit no other writer of these assets
        writes (the check for stored samples and the insert are one step). SQLite: the database's
        write lock, taken at once (``BEGIN IMMEDIATE``; a deferred transaction would check first and
        lock only at its first insert)."""
        cur.execute("BEGIN IMMEDIATE")

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
            from ...twin.redaction import redact

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

    def write(self, blocks: Sequence[Block], events: Sequence[Event]) -> int:
        """Blocks and events in one transaction (all or nothing). A sample time is stored once
        (:mod:`.overlap`: first write wins); the number of samples not written because their times
        were stored already."""
        def run(conn: Any) -> int:
            self._series(conn, {(b.asset, b.channel) for b in blocks})
            dropped = 0
            with self._tx(conn):
                cur = conn.cursor()
                self._lock(cur, {b.asset for b in blocks})
                if blocks:
                    keys = [(self.ids[(b.asset, b.channel)], *span(b)) for b in blocks]
                    new, dropped = keep_new(blocks, keys, self._stored_spans(cur, keys))
                    if new:
                        self._insert_blocks(cur, _block_rows(new, self.ids))
                if events:
                    cur.executemany(f"INSERT INTO events VALUES ({', '.join([self.P] * 5)})", _event_rows(events))
            return dropped
        return int(self._call("writing to", run))

    def _stored_spans(self, cur: Any, keys: Sequence[Key]) -> dict[int, list[Span]]:
        """series → (t0_us, t1_us) of its stored blocks that overlap a block of the batch (``keys``: each
        one's series and span): one query per ``OVERLAP_CHUNK`` blocks (:func:`overlapping`)."""
        unique = sorted(set(keys))
        found: dict[int, set[Span]] = {}
        for k in range(0, len(unique), OVERLAP_CHUNK):
            chunk = unique[k:k + OVERLAP_CHUNK]
            cur.execute(*self._overlap_sql(chunk))
            for sid, lo, hi in cur.fetchall():
                found.setdefault(sid, set()).add((lo, hi))
        return {sid: sorted(spans) for sid, spans in found.items()}

    def _overlap_sql(self, keys: list[Key]) -> tuple[str, list[int]]:
        """(series, t0_us, t1_us) of the stored blocks overlapping each key's (series, lo, hi): SQLite, a
        VALUES table joined to the indexes."""
        p = self.P
        q = f"WITH q (s, lo, hi) AS (VALUES {', '.join([f'({p}, {p}, {p})'] * len(keys))}) "
        return q + overlapping("q, blocks b", "UNION"), [x for key in keys for x in key]

    def channels(self, asset: str) -> list[str]:
        return self._call("reading", lambda conn: [r[0] for r in self._fetch(
            conn, f"SELECT channel FROM series WHERE asset = {self.P} ORDER BY channel", (asset,))])

    def query(self, asset: str, channel: str, t_from: float, t_to: float
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(t, value, sigma) of one channel in [t_from, t_to] (rig time, s), in time order. The blocks
        are found by index ranges: those starting at most ``MERGE_SPAN_S`` before ``t_from`` (the
        index (series, t0_us)) and the rare longer ones starting earlier (the partial index
        ``blocks_long``) — never a scan of the channel's whole history."""
        sql, args = self._range_sql("b.t0_us, b.t0, b.dt, b.n, b.value, b.sigma, b.parts", asset, channel,
                                    t_from, t_to)
        rows = self._call("reading", lambda conn: self._fetch(conn, f"{sql} ORDER BY 1", args))
        return decode([r[1:] for r in rows], t_from, t_to)

    def _range_sql(self, cols: str, asset: str, channel: str, t_from: float, t_to: float,
                   join: str = "") -> tuple[str, tuple[Any, ...]]:
        """SELECT ``cols`` of the channel's blocks that may hold samples in [t_from, t_to]: by the index
        (series, t0_us) and, for blocks longer than ``MERGE_SPAN_S``, the partial index ``blocks_long``."""
        p = self.P
        sql = (f"SELECT {cols} FROM blocks b JOIN series s ON s.id = b.series {join} WHERE s.asset = {p} "
               f"AND s.channel = {p} AND b.t0_us <= {p} AND b.t1_us >= {p} AND ")
        sql = f"{sql}b.t0_us >= {p} UNION ALL {sql}b.t0_us < {p} AND {LONG_BLOCK}"
        lo = _us(t_from) - 1 if math.isfinite(t_from) else -(1 << 62)
        hi = _us(t_to) + 1 if math.isfinite(t_to) else 1 << 62
        return sql, (asset, channel, hi, lo, lo - LONG_US) * 2

    def channel_span(self, asset: str, channel: str) -> tuple[float, float] | None:
        """(first, last) sample time of one channel (None without samples): two lookups in the index
        (series, t0_us), whatever the channel's length (blocks of a channel do not overlap)."""
        p = self.P
        first = (f"SELECT b.t0, b.dt, b.n, b.parts FROM blocks b JOIN series s ON s.id = b.series "
                 f"WHERE s.asset = {p} AND s.channel = {p} ORDER BY b.t0_us")
        rows = self._call("reading", lambda conn: (self._fetch(conn, f"{first} LIMIT 1", (asset, channel)),
                                                   self._fetch(conn, f"{first} DESC LIMIT 1", (asset, channel))))
        if not rows[0]:
            return None
        return float(rows[0][0][0]), last_sample(rows[1][0])

    def range_total(self, asset: str, channel: str, t_from: float, t_to: float) -> int:
        """Samples of the blocks a range query of [t_from, t_to] reads (at least those in the range)."""
        sql, args = self._range_sql("b.n", asset, channel, t_from, t_to)
        rows = self._call("reading", lambda conn: self._fetch(conn, f"SELECT coalesce(sum(n), 0) FROM ({sql}) q", args))
        return int(rows[0][0])

    FLOOR = "CAST({} AS INTEGER)"  # floor of a number >= 0 (SQLite has no floor() in every build)

    HAS_AGGREGATES = "SELECT count(*) FROM pragma_table_info('blocks') WHERE name = 'vn'"

    def _bucket_sql(self, asset: str, channel: str, b: Buckets, stored: bool) -> tuple[str, tuple[Any, ...]]:
        """The blocks of a downsampled range as :data:`.buckets.Row`, in time order: a block whose
        samples all lie in one bucket (with ``MARGIN_US`` to spare) comes as its stored aggregates,
        without its arrays (``stored``: the table has them; a store of an earlier schema that no
        writer has opened since sends every block whole)."""
        if not stored:
            sql, args = self._range_sql("b.t0, b.dt, b.n, b.parts, b.value, b.sigma, NULL, NULL, NULL, NULL, NULL, "
                                        "NULL, b.t0_us", asset, channel, b.lo, b.hi)
            return f"{sql} ORDER BY 13", args
        lo_us, hi_us = b.lo * 1e6, b.hi * 1e6
        w_us = (hi_us - lo_us) / b.points
        first, last = f"b.t0_us - {MARGIN_US} - {lo_us!r}", f"b.t1_us + {MARGIN_US} - {lo_us!r}"
        inside = (f"b.vn IS NOT NULL AND {first} >= 0 AND b.t1_us + {MARGIN_US} <= {hi_us!r} AND "
                  f"{self.FLOOR.format(f'({first}) / {w_us!r}')} = {self.FLOOR.format(f'({last}) / {w_us!r}')}")
        cols = (f"b.t0, b.dt, b.n, b.parts, CASE WHEN {inside} THEN NULL ELSE b.value END, "
                f"CASE WHEN {inside} THEN NULL ELSE b.sigma END, {', '.join(f'b.{c}' for c in AGG_COLUMNS)}, b.t0_us")
        sql, args = self._range_sql(cols, asset, channel, b.lo, b.hi)
        return f"{sql} ORDER BY 13", args

    def _stream(self, conn: Any, sql: str, args: tuple[Any, ...]) -> Iterator[list[Any]]:
        cur = conn.cursor()
        cur.execute(sql, args)
        while rows := cur.fetchmany(CHUNK_ROWS):
            yield rows

    def downsample(self, asset: str, channel: str, t_from: float, t_to: float, points: int) -> dict[str, Any]:
        """One channel's [t_from, t_to] as at most ``points`` buckets (:mod:`.buckets`), streamed: the
        memory used does not grow with the range."""
        b = Buckets(t_from, t_to, points)

        def run(conn: Any) -> None:
            stored = bool(self._fetch(conn, self.HAS_AGGREGATES, ())[0][0])
            sql, args = self._bucket_sql(asset, channel, b, stored)
            for rows in self._stream(conn, sql, args):
                b.add_rows(rows)
        self._call("reading", run)
        return b.result()

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
                                   value BLOB NOT NULL, sigma BLOB, parts BLOB, vmin REAL, vmax REAL, vsum REAL,
                                   vn INTEGER, ssum REAL, sn INTEGER);
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
                _wal(conn, self.timeout)
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(SQLITE_SCHEMA)
                _add_aggregates(conn)
        except BaseException:
            conn.close()
            raise
        return conn



def _wal(conn: sqlite3.Connection, timeout: float) -> None:
    """WAL mode, retried for up to ``timeout`` s: switching a new file's journal mode needs it to
    itself, and SQLite reports a second connection opening it at that moment as locked at once,
    without its busy timeout (3 of 40 simultaneous opens of a new file)."""
    end = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= end:
                raise
            time.sleep(0.02)


def _add_aggregates(conn: sqlite3.Connection) -> None:
    """A store of an earlier schema gets the aggregate columns (its older blocks keep them NULL and
    are reduced from their values when read)."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(blocks)")}
    for col in AGG_COLUMNS:
        if col not in have:
            conn.execute(f"ALTER TABLE blocks ADD COLUMN {col} {'INTEGER' if col in ('vn', 'sn') else 'REAL'}")
    conn.commit()
