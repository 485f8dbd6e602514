"""Where fleet twins keep their last checkpoint: one row per asset in its own table
``twin_checkpoints`` (asset, saved_at [s since the epoch], rig_time [s], config_hash, state), in a
SQLite file (default) or PostgreSQL (psycopg 3). Each save replaces the asset's row in one
transaction (atomic: a reader sees the old row or the new one, never a torn one).

Kept apart from the twin's history store on purpose (its own module and table); once that lands
the table can move into the history database by pointing ``[fleet] store`` at the same URL.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any

from .pg_schema import lock_schema
from .redaction import redact

TABLE = "twin_checkpoints"
_DDL = (f"CREATE TABLE IF NOT EXISTS {TABLE} (asset TEXT PRIMARY KEY, saved_at DOUBLE PRECISION NOT NULL, "
        "rig_time DOUBLE PRECISION, config_hash TEXT NOT NULL, state {blob} NOT NULL)")


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


class BadRow(ValueError):
    """A row of the table whose columns are not of their types (the state itself is checked by
    :mod:`.checkpoint_check`)."""


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
        return conn

    def _run(self, sql: str, args: tuple[Any, ...]) -> list[Any]:
        """Run one statement; on a failure the connection is dropped (the next call reconnects) and
        the error raised naming the store."""
        q = sql.replace("?", "%s") if self.pg else sql
        with self.lock:
            try:
                if self.conn is None:
                    self.conn = self._connect()
                cur = self.conn.execute(q, args)
                return list(cur.fetchall()) if cur.description else []
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

    def save(self, cp: Checkpoint) -> None:
        self._run(f"INSERT INTO {TABLE} (asset, saved_at, rig_time, config_hash, state) VALUES (?, ?, ?, ?, ?) "
                  "ON CONFLICT (asset) DO UPDATE SET saved_at = excluded.saved_at, rig_time = excluded.rig_time, "
                  "config_hash = excluded.config_hash, state = excluded.state",
                  (cp.asset, cp.saved_at, cp.rig_time, cp.config_hash, cp.state))

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
