"""Where fleet twins keep their last checkpoint: one row per asset in its own table
``twin_checkpoints`` (asset, saved_at [s since the epoch], rig_time [s], config_hash, state), in a
SQLite file (default) or PostgreSQL (psycopg 3). Each save replaces the asset's row in one
transaction (atomic: a reader sees the old row or the new one, never a torn one).

Ownership of an asset (docs/fleet.md, "Fencing"): the table ``twin_leases`` (asset, generation,
instance, pid, node, taken_at) says which instance of a twin owns the asset. A starting twin takes
the lease (``acquire``: the generation counts up in one statement); a save with ``generation``
checks, in the same transaction as the write, that the lease is still that generation and raises
:class:`LeaseLost` otherwise. What anyone publishes on MQTT never decides it.

Kept apart from the twin's history store on purpose (its own module and table); once that lands
the table can move into the history database by pointing ``[fleet] store`` at the same URL.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...twin.redaction import redact
from ..pg_schema import lock_schema

TABLE = "twin_checkpoints"
_DDL = (f"CREATE TABLE IF NOT EXISTS {TABLE} (asset TEXT PRIMARY KEY, saved_at DOUBLE PRECISION NOT NULL, "
        "rig_time DOUBLE PRECISION, config_hash TEXT NOT NULL, state {blob} NOT NULL)")
_SAVE = (f"INSERT INTO {TABLE} (asset, saved_at, rig_time, config_hash, state) VALUES (?, ?, ?, ?, ?) "
         "ON CONFLICT (asset) DO UPDATE SET saved_at = excluded.saved_at, rig_time = excluded.rig_time, "
         "config_hash = excluded.config_hash, state = excluded.state")
LEASES = "twin_leases"
_LEASE_DDL = (f"CREATE TABLE IF NOT EXISTS {LEASES} (asset TEXT PRIMARY KEY, generation BIGINT NOT NULL, "
              "instance TEXT NOT NULL, pid BIGINT, node TEXT, taken_at DOUBLE PRECISION NOT NULL)")


@dataclass(frozen=True)
class Checkpoint:
    asset: str
    saved_at: float  # wall clock, s since the epoch
    rig_time: float | None  # the rig time of the last batch in it (None: before the first batch)
    config_hash: str
    state: bytes


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url


@dataclass(frozen=True)
class Lease:
    """Who owns an asset: the ``generation``-th instance to take it, ``instance`` (its id), its
    ``pid`` and Ray ``node`` (None: a local process), ``taken_at`` (its start, wall time in s)."""

    asset: str
    generation: int
    instance: str
    pid: int | None
    node: str | None
    taken_at: float


class LeaseLost(RuntimeError):
    """A newer instance took the asset's lease: this one must stop (``holder``: the newer one)."""

    def __init__(self, asset: str, mine: int, holder: Lease | None) -> None:
        self.holder = holder
        who = "nobody" if holder is None else (f"instance {holder.instance} (generation {holder.generation}, pid "
                                              f"{holder.pid}, node {holder.node}, started at {holder.taken_at})")
        super().__init__(f"the lease of asset {asset!r} (generation {mine}) is held by {who}")


class BadRow(ValueError):
    """A row of the table whose columns are not of their types (the state itself is checked by
    :mod:`.check`)."""


def _row(asset: Any, saved: Any, rig: Any, h: Any, state: Any) -> Checkpoint:
    def number(name: str, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise BadRow(f"checkpoint row of {asset!r}: {name}: expected a finite number, got {repr(v)[:60]}")
        return float(v)

    if not isinstance(h, str) or len(h) > 128:
        raise BadRow(f"checkpoint row of {asset!r}: config_hash: expected a text, got {repr(h)[:60]}")
    if not isinstance(state, bytes | bytearray | memoryview):  # bytes(10**12) would allocate a terabyte
        raise BadRow(f"checkpoint row of {asset!r}: state: expected bytes, got {type(state).__name__}")
    return Checkpoint(str(asset), number("saved_at", saved), None if rig is None else number("rig_time", rig), h,
                      bytes(state))


def _lease(asset: Any, gen: Any, inst: Any, pid: Any, node: Any, taken: Any) -> Lease:
    """A lease row, type-checked (it is read by the fleet process too: nothing unbounded passes)."""
    def text(name: str, v: Any, none: bool) -> Any:
        if (v is None and none) or (isinstance(v, str) and len(v) <= 128):
            return v
        raise BadRow(f"lease row of {asset!r}: {name}: expected a short text, got {repr(v)[:60]}")

    if isinstance(gen, bool) or not isinstance(gen, int) or (pid is not None and (isinstance(pid, bool) or not
                                                                                  isinstance(pid, int))):
        raise BadRow(f"lease row of {asset!r}: generation/pid: expected integers, got {gen!r}, {pid!r}")
    if isinstance(taken, bool) or not isinstance(taken, int | float) or not math.isfinite(taken):
        raise BadRow(f"lease row of {asset!r}: taken_at: expected a finite number, got {repr(taken)[:60]}")
    return Lease(str(asset), gen, text("instance", inst, False), pid, text("node", node, True), float(taken))


class CheckpointStore:
    """``save`` / ``load`` / ``delete`` of each asset's last checkpoint; safe across threads and
    processes (SQLite in WAL mode with a busy timeout; PostgreSQL upserts). An unreachable store
    raises ``OSError`` naming it (never its password) and is retried at the next call."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.lock = threading.Lock()
        self.pg = is_postgres(url)
        self.conn: Any = None  # connected at the first use, again after a failure

    def _connect(self) -> Any:
        if self.pg:
            import psycopg

            pg: Any = psycopg.connect(self.url, autocommit=True)
            try:
                with pg.transaction():  # twins starting together: one creates the table, the others wait
                    lock_schema(pg)
                    pg.execute(_DDL.format(blob="BYTEA"))
                    pg.execute(_LEASE_DDL)
            except BaseException:
                pg.close()
                raise
            return pg
        path = sqlite_path(self.url)
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        conn: Any = sqlite3.connect(path, timeout=10.0, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(_DDL.format(blob="BLOB"))
        conn.execute(_LEASE_DDL)
        return conn

    def _run(self, sql: str, args: tuple[Any, ...]) -> list[Any]:
        """Run one statement; on a failure the connection is dropped (the next call reconnects) and
        the error raised naming the store."""
        return self._tx(lambda run: run(sql, args), tx=False)

    def _tx(self, body: Callable[[Callable[[str, tuple[Any, ...]], list[Any]]], Any], tx: bool = True) -> Any:
        """``body(run)`` in one transaction (``tx``; SQLite: ``BEGIN IMMEDIATE``, the write lock
        first; PostgreSQL: a transaction block), ``run(sql, args)`` giving a statement's rows.
        :class:`LeaseLost` passes through (the transaction rolled back); any other failure drops
        the connection and is raised as ``OSError`` naming the store."""
        with self.lock:
            try:
                if self.conn is None:
                    self.conn = self._connect()
                conn = self.conn

                def run(sql: str, args: tuple[Any, ...]) -> list[Any]:
                    cur = conn.execute(sql.replace("?", "%s") if self.pg else sql, args)
                    return list(cur.fetchall()) if cur.description else []

                if not tx:
                    return body(run)
                if self.pg:
                    with conn.transaction():
                        return body(run)
                conn.execute("BEGIN IMMEDIATE")
                try:
                    out = body(run)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                return out
            except LeaseLost:
                raise
            except Exception as exc:
                self._drop()
                raise OSError(redact(f"checkpoint store {self.shown()}: {type(exc).__name__}: {exc}", self.url)) \
                    from exc

    def shown(self) -> str:
        """The store's URL without a password (in its user-info or a ``password=`` parameter)."""
        return redact(self.url, self.url)

    def _drop(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        self.conn = None

    def save(self, cp: Checkpoint, generation: int | None = None) -> None:
        """Replace the asset's row; with ``generation``, only while that generation holds the
        asset's lease (checked in the same transaction: :class:`LeaseLost` otherwise)."""
        def body(run: Callable[[str, tuple[Any, ...]], list[Any]]) -> None:
            if generation is not None:
                rows = run(f"SELECT asset, generation, instance, pid, node, taken_at FROM {LEASES} WHERE asset = ?"
                           + (" FOR UPDATE" if self.pg else ""), (cp.asset,))
                if not rows or rows[0][1] != generation:
                    raise LeaseLost(cp.asset, generation, _lease(*rows[0]) if rows else None)
            run(_SAVE, (cp.asset, cp.saved_at, cp.rig_time, cp.config_hash, cp.state))
        self._tx(body, tx=generation is not None)

    def acquire(self, asset: str, instance: str, pid: int | None, node: str | None, started_at: float,
                only_if_newer: bool = False) -> int:
        """Take the asset's lease for ``instance`` (started at ``started_at``, wall time): its new
        generation, one more than the last holder's (one transaction). ``only_if_newer``: not when
        the holder started later than ``started_at`` (:class:`LeaseLost` naming it) — a twin that
        could not take the lease at its start does not take it from a successor afterwards."""
        def body(run: Callable[[str, tuple[Any, ...]], list[Any]]) -> int:
            rows = run(f"SELECT asset, generation, instance, pid, node, taken_at FROM {LEASES} WHERE asset = ?"
                       + (" FOR UPDATE" if self.pg else ""), (asset,))
            held = _lease(*rows[0]) if rows else None
            if held is not None and only_if_newer and held.taken_at > started_at:
                raise LeaseLost(asset, 0, held)
            # a row inserted by a concurrent first taker (no row to lock above): counted up all the same
            return run(f"INSERT INTO {LEASES} (asset, generation, instance, pid, node, taken_at) VALUES "
                       f"(?, 1, ?, ?, ?, ?) ON CONFLICT (asset) DO UPDATE SET generation = {LEASES}.generation + 1, "
                       "instance = excluded.instance, pid = excluded.pid, node = excluded.node, "
                       "taken_at = excluded.taken_at RETURNING generation",
                       (asset, instance, pid, node, started_at))[0][0]
        return int(self._tx(body))

    def holder(self, asset: str) -> Lease | None:
        """The asset's lease (None: nobody took it yet); :class:`BadRow` when the row is not of its types."""
        rows = self._run(f"SELECT asset, generation, instance, pid, node, taken_at FROM {LEASES} WHERE asset = ?",
                         (asset,))
        return _lease(*rows[0]) if rows else None

    def load(self, asset: str) -> Checkpoint | None:
        rows = self._run(f"SELECT asset, saved_at, rig_time, config_hash, state FROM {TABLE} WHERE asset = ?",
                         (asset,))
        if not rows:
            return None
        return _row(*rows[0])

    def delete(self, asset: str) -> None:
        self._run(f"DELETE FROM {TABLE} WHERE asset = ?", (asset,))

    def close(self) -> None:
        with self.lock:
            self._drop()
