"""The PostgreSQL history store (psycopg 3): blocks written by binary COPY, a TimescaleDB hypertable
on ``blocks.t0_us`` when the server offers the extension, and the ``samples`` view that Grafana (or
any SQL client) reads.

In PostgreSQL ``value``, ``sigma`` and ``parts`` are ``double precision[]`` (readable by plain SQL),
not BYTEA: the store's blocks still carry little-endian float64 bytes in Python, and this module's
psycopg adapters turn them into PostgreSQL's binary array format for COPY (and back on reading)
with numpy, never through Python lists. NaN (a null value) stays NaN in the arrays; the view shows
it as NULL.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..pg_schema import lock_schema
from .buckets import CHUNK_ROWS
from .overlap import Key
from .stores import BLOCK_COLUMNS, DAY_US, LONG_INDEX, _SqlStore, overlapping

FLOAT8_ARRAY_OID, FLOAT8_OID = 1022, 701
HISTORY_LOCK = 0x6D627368  # "mbsh": first key of the write transactions' per-asset advisory locks
_ELEMENT = np.dtype([("len", ">i4"), ("v", ">f8")])  # one array element in the binary format
_HEADER = struct.Struct(">iiiii")  # ndim, has nulls, element type, length, lower bound

PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS series (id SERIAL PRIMARY KEY, asset TEXT NOT NULL, channel TEXT NOT NULL,
                                   UNIQUE (asset, channel));
CREATE TABLE IF NOT EXISTS blocks (series INTEGER NOT NULL REFERENCES series (id), t0_us BIGINT NOT NULL,
                                   t1_us BIGINT NOT NULL, t0 DOUBLE PRECISION NOT NULL, dt DOUBLE PRECISION NOT NULL,
                                   n INTEGER NOT NULL, value DOUBLE PRECISION[] NOT NULL,
                                   sigma DOUBLE PRECISION[], parts DOUBLE PRECISION[]);
ALTER TABLE blocks ADD COLUMN IF NOT EXISTS vmin DOUBLE PRECISION, ADD COLUMN IF NOT EXISTS vmax DOUBLE PRECISION,
    ADD COLUMN IF NOT EXISTS vsum DOUBLE PRECISION, ADD COLUMN IF NOT EXISTS vn INTEGER,
    ADD COLUMN IF NOT EXISTS ssum DOUBLE PRECISION, ADD COLUMN IF NOT EXISTS sn INTEGER;
CREATE INDEX IF NOT EXISTS blocks_series_t ON blocks (series, t0_us);
CREATE TABLE IF NOT EXISTS events (asset TEXT NOT NULL, kind TEXT NOT NULL, t DOUBLE PRECISION,
                                   wall DOUBLE PRECISION NOT NULL, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_asset_wall ON events (asset, wall);
""" + LONG_INDEX

# One row per sample: each merged message's own t0 + j·dt (parts: its (t0, n) pairs), NaN as NULL.
# t0_us / t1_us are the block's first and last sample (µs): a WHERE on them uses the index
# (series, t0_us) — see docs/history.md for the Grafana query.
SAMPLES_VIEW = """
CREATE OR REPLACE VIEW samples AS
SELECT s.asset, s.channel, to_timestamp(x.t) AS time, x.t, NULLIF(x.value, 'NaN') AS value,
       NULLIF(x.sigma, 'NaN') AS sigma, b.t0_us, b.t1_us
FROM blocks b
JOIN series s ON s.id = b.series
CROSS JOIN LATERAL (
    SELECT m.t0 + g.j * b.dt AS t, b.value[m.off + g.j + 1] AS value, b.sigma[m.off + g.j + 1] AS sigma
    FROM (SELECT coalesce(b.parts[2 * i - 1], b.t0) AS t0, coalesce(b.parts[2 * i]::int, b.n) AS n,
                 coalesce(sum(b.parts[2 * i]) OVER (ORDER BY i) - b.parts[2 * i], 0)::int AS off
          FROM generate_series(1, coalesce(array_length(b.parts, 1) / 2, 1)) AS i) AS m
    CROSS JOIN LATERAL generate_series(0, m.n - 1) AS g (j)
) AS x;
"""


def _loader_dumper() -> tuple[type, type]:
    """psycopg adapters of ``double precision[]`` (binary) ↔ little-endian float64 bytes."""
    from psycopg.adapt import Dumper, Loader
    from psycopg.pq import Format

    class Float8ArrayDumper(Dumper):
        format = Format.BINARY
        oid = FLOAT8_ARRAY_OID

        def dump(self, obj: Any) -> bytes:
            v = np.frombuffer(obj, dtype="<f8")
            out = np.empty(len(v), dtype=_ELEMENT)
            out["len"] = 8
            out["v"] = v
            return _HEADER.pack(1, 0, FLOAT8_OID, len(v), 1) + out.tobytes()

    class Float8ArrayLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> bytes:
            ndim, nulls, _ = struct.unpack_from(">iii", data)
            if ndim == 0:
                return b""
            if ndim != 1 or nulls:
                raise ValueError(f"history array of {ndim} dimensions{' with NULLs' if nulls else ''}: "
                                 "the store writes one-dimensional arrays without NULL")
            return np.frombuffer(data, dtype=_ELEMENT, offset=_HEADER.size)["v"].astype("<f8").tobytes()

    return Float8ArrayLoader, Float8ArrayDumper


class PostgresStore(_SqlStore):
    """PostgreSQL through psycopg 3: blocks by COPY; a TimescaleDB hypertable on ``blocks.t0_us``
    (one-day chunks) when the server offers the extension, a plain table otherwise."""

    P = "%s"

    def __init__(self, dsn: str, timeout: float = 5.0, create: bool = True) -> None:
        super().__init__()
        self.dsn, self.timeout, self.create = dsn, timeout, create
        self.name = f"PostgreSQL history ({_describe(dsn)})"
        self.timescale = False

    def _errors(self) -> tuple[type[BaseException], ...]:
        import psycopg

        return (psycopg.Error, OSError)

    def _open(self) -> Any:
        import psycopg

        options = f"-c statement_timeout={round(self.timeout * 1000)}"
        if not self.create:  # a reader (export, the dashboard): read-only transactions
            options += " -c default_transaction_read_only=on -c jit=off"  # (a range's row estimate is large)
        conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=max(1, round(self.timeout)),
                               options=options)
        loader, dumper = _loader_dumper()
        conn.adapters.register_loader(FLOAT8_ARRAY_OID, loader)
        conn.adapters.register_dumper(None, dumper)  # by oid only: COPY after set_types
        try:
            if self.create:
                with conn.transaction():  # twins starting together: one creates the schema, the others wait
                    lock_schema(conn)
                    conn.execute(PG_SCHEMA)
                    _check_arrays(conn)
                    conn.execute(SAMPLES_VIEW)
                    self.timescale = _hypertable(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _tx(conn: Any) -> Any:
        return conn.transaction()

    def _lock(self, cur: Any, assets: set[str]) -> None:
        """PostgreSQL: a transaction-scoped advisory lock per asset, key (``HISTORY_LOCK``,
        ``hashtext(asset)``), taken in key order (two writers of several assets never wait for each
        other crosswise); released at commit or rollback. The check that follows reads what the
        previous holder committed (READ COMMITTED: a snapshot per statement)."""
        if assets:
            cur.execute("SELECT pg_advisory_xact_lock(%s, o.k) FROM (SELECT DISTINCT hashtext(a) AS k "
                        "FROM unnest(%s::text[]) AS a ORDER BY 1) AS o", (HISTORY_LOCK, sorted(assets)))

    @staticmethod
    def _read_cursor(conn: Any) -> Any:
        return conn.cursor(binary=True)  # arrays in binary (decoded by numpy: Float8ArrayLoader)

    def _overlap_sql(self, keys: list[Key]) -> tuple[str, Any]:
        """PostgreSQL: a lateral subquery per key (the planner would hash-join a VALUES table against
        a sequential scan of ``blocks``); ``OFFSET 0`` keeps it from being flattened into a join."""
        arrays = tuple("{" + ",".join(map(str, c)) + "}" for c in zip(*keys, strict=True))  # (3x less CPU than lists)
        return (f"SELECT x.* FROM unnest(%s::int4[], %s::int8[], %s::int8[]) AS q (s, lo, hi) CROSS JOIN LATERAL "
                f"({overlapping('blocks b', 'UNION ALL')} OFFSET 0) AS x", arrays)

    FLOOR = "floor({})"
    HAS_AGGREGATES = ("SELECT count(*) FROM information_schema.columns WHERE table_name = 'blocks' "
                      "AND column_name = 'vn' AND table_schema = current_schema()")

    def _stream(self, conn: Any, sql: str, args: tuple[Any, ...]) -> Iterator[list[Any]]:
        """Rows as the server produces them, ``CHUNK_ROWS`` at a time (libpq's chunked-rows mode:
        the server keeps sending while the client folds; never the whole result in memory)."""
        cur = conn.cursor(binary=True)
        chunk: list[Any] = []
        for row in cur.stream(sql, args, size=CHUNK_ROWS):
            chunk.append(row)
            if len(chunk) == CHUNK_ROWS:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def _insert_blocks(self, cur: Any, rows: list[tuple[Any, ...]]) -> None:
        with cur.copy(f"COPY blocks ({', '.join(BLOCK_COLUMNS)}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int4", "int8", "int8", "float8", "float8", "int4", "float8[]", "float8[]", "float8[]",
                            "float8", "float8", "float8", "int4", "float8", "int4"])
            for row in rows:
                copy.write_row(row)


def _check_arrays(conn: Any) -> None:
    """A ``blocks`` table of an earlier schema (BYTEA samples) is named, not silently misread."""
    row = conn.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                       "WHERE attrelid = 'blocks'::regclass AND attname = 'value'").fetchone()
    if row is not None and row[0] != "double precision[]":
        raise OSError(f"table blocks has value {row[0]}, expected double precision[] (a history database of an "
                      "earlier schema: export it with an earlier mbsd-twin, or use a new database)")


def _hypertable(conn: Any) -> bool:
    """Make ``blocks`` a TimescaleDB hypertable when the extension is available; False when it is not."""
    if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'timescaledb'").fetchone() is None:
        return False
    conn.execute("CREATE EXTENSION IF NOT EXISTS timescaledb")
    conn.execute(f"SELECT create_hypertable('blocks', 't0_us', chunk_time_interval => {DAY_US}, "
                 "if_not_exists => TRUE, migrate_data => TRUE)")
    return True


def _describe(dsn: str) -> str:
    """The DSN's host, port and database for messages (never a password)."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        d = conninfo_to_dict(dsn)
    except Exception:
        return "dsn not readable"
    return f"host={d.get('host', '')} port={d.get('port', '')} dbname={d.get('dbname', '')}".strip()
