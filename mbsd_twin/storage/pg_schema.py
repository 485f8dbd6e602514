"""Creating tables on a PostgreSQL database that several twins open at once.

``CREATE TABLE IF NOT EXISTS`` is not safe against a concurrent creation of the same table: the
second of two sessions that both find it missing fails with a unique violation on the catalogue
(``pg_type_typname_nsp_index``). A fleet starts its twins together, each opening the checkpoint
store and the history on the same database, so their schema statements run one session at a time
under a transaction-scoped advisory lock (released at commit or rollback)."""

from __future__ import annotations

from typing import Any

__all__ = ["SCHEMA_LOCK", "lock_schema"]

SCHEMA_LOCK = 0x6D627364_74776E  # "mbsdtwn": the advisory-lock key of mbsd-twin's schema statements


def lock_schema(conn: Any) -> None:
    """Inside a transaction of the psycopg connection ``conn``: wait until no other session creates
    mbsd-twin's tables, and hold that until the transaction ends."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
