"""Opening the configured history store: SQLite (:mod:`.stores`) or PostgreSQL (:mod:`.pg`, which
builds on :mod:`.stores`; kept here so that ``stores`` never imports ``pg``)."""

from __future__ import annotations

from .pg import PostgresStore
from .stores import SqliteStore, _SqlStore


def open_store(backend: str, path: str, dsn: str, timeout: float, create: bool = True) -> _SqlStore:
    """The configured store (not yet connected: the first call connects)."""
    if backend == "sqlite":
        return SqliteStore(path, timeout, create)
    if backend == "postgresql":
        return PostgresStore(dsn, timeout, create)
    raise ValueError(f"[history] backend {backend!r} has no store")
