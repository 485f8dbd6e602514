"""The PostgreSQL history read by plain SQL, as Grafana reads it: the ``samples`` view returns
exactly what the twin published and its time filter uses the blocks' index; the Grafana provisioning
under services/ parses, its dashboard's queries run on a database filled by the history writer
(Grafana's macros replaced by the SQL they expand to), and the compose file names existing files.
Needs the local PostgreSQL server (skipped without one, as tests/test_history.py)."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from test_history import Msg, expected, outputs, pg_db  # noqa: F401  (fixtures)

from mbsd_twin.storage.history.pg import PostgresStore
from mbsd_twin.storage.history.rows import Block, convert
from mbsd_twin.storage.history.stores import StoreError

SERVICES = Path(__file__).resolve().parents[1] / "services"
GRAFANA = SERVICES / "grafana"
WALL = 0.5  # the wall time given to every message (health events inside the test's time range)


def fill(dsn: str, outputs: list[Msg]) -> PostgresStore:  # noqa: F811
    store = PostgresStore(dsn)
    blocks, events, bad = convert([(t.rsplit("/", 1)[-1], WALL, p) for t, p in outputs])
    assert bad == 0
    store.write(blocks, events)
    return store


def grafana_sql(sql: str, t_from: float, t_to: float, **variables: str) -> str:
    """``sql`` with Grafana's PostgreSQL macros and the dashboard variables expanded as Grafana does."""
    iso = [datetime.fromtimestamp(x, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") for x in (t_from, t_to)]
    sql = re.sub(r"\$__timeFilter\(([^)]*)\)", rf"\1 BETWEEN '{iso[0]}' AND '{iso[1]}'", sql)
    sql = sql.replace("$__unixEpochFrom()", str(math.floor(t_from))).replace("$__unixEpochTo()", str(math.ceil(t_to)))
    for name, value in sorted(variables.items(), key=lambda kv: -len(kv[0])):
        sql = sql.replace(f"${name}", value)
    assert "$" not in sql, f"a macro or variable left in {sql}"
    return sql


def test_samples_view_returns_exactly_what_was_published(outputs: list[Msg], pg_db: tuple[str, Any]) -> None:  # noqa: F811
    dsn, (admin, _) = pg_db
    store = fill(dsn, outputs)
    exp = expected(outputs)
    conn = store.conn
    for channel, lo, hi in (("state.theta", 0.2505, 0.5005), ("estimates.piston.mass", 0.1, 0.9),
                            ("residuals.theta", -1.0, 2.0)):
        rows = conn.execute(
            "SELECT t, value, sigma, time FROM samples WHERE asset = 'sc-01' AND channel = %s "
            "AND t0_us BETWEEN %s AND %s AND t BETWEEN %s AND %s ORDER BY t",
            (channel, math.floor((lo - 10) * 1e6), math.ceil(hi * 1e6), lo, hi)).fetchall()
        t, v, s = (np.array(x) for x in exp[channel])
        keep = (t >= lo) & (t <= hi)
        assert len(rows) == keep.sum() > 0, channel
        nan = lambda xs: np.array([math.nan if x is None else x for x in xs], dtype=float)  # noqa: E731
        np.testing.assert_array_equal([r[0] for r in rows], t[keep], err_msg=channel)  # bit for bit
        np.testing.assert_array_equal(nan(r[1] for r in rows), v[keep], err_msg=channel)
        np.testing.assert_array_equal(nan(r[2] for r in rows), s[keep], err_msg=channel)
        assert abs(rows[0][3].timestamp() - rows[0][0]) < 1e-6
    store.write([Block("sc-02", "residuals.x", 5.0, 0.5, 3, np.array([1.0, math.nan, 3.0]).tobytes(),
                       np.array([0.1, 0.2, math.nan]).tobytes())], [])  # a null published: NaN stored, NULL shown
    assert conn.execute("SELECT t, value, sigma FROM samples WHERE asset = 'sc-02' ORDER BY t").fetchall() == [
        (5.0, 1.0, 0.1), (5.5, None, 0.2), (6.0, 3.0, None)]
    reader = PostgresStore(dsn, create=False)  # the export's and the dashboard's: read-only
    assert reader.query("sc-02", "residuals.x", 5.2, 6.0)[0].tolist() == [5.5, 6.0]
    with pytest.raises(StoreError, match="read-only transaction"):
        reader.write([Block("sc-02", "residuals.x", 7.0, 0.5, 1, np.zeros(1).tobytes(), None)], [])
    store.close()


def _explain(conn: Any, sql: str) -> str:
    conn.execute("ANALYZE")
    return "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql).fetchall())


def test_grafana_time_filter_uses_the_block_index(pg_db: tuple[str, Any]) -> None:  # noqa: F811
    """Six hours of 20 channels in 3 s blocks (144,000 rows): the value panel's query of one channel and
    ten minutes reads its blocks through the index (series, t0_us), not the whole table, and returns
    exactly the samples in the range."""
    store = PostgresStore(pg_db[0])
    t0 = np.arange(0.0, 21600.0, 3.0)
    value = np.arange(10.0).tobytes()
    for c in range(20):
        store.write([Block("sc-01", f"state.c{c:02d}", float(x), 0.3, 10, value, None) for x in t0], [])
    panel = _dashboard()["panels"][0]
    sql = grafana_sql(panel["targets"][0]["rawSql"], 10000.05, 10600.05, asset="sc-01", channel="state.c07")
    plan = _explain(store.conn, sql)
    assert "blocks_series_t" in plan and "Seq Scan on blocks" not in plan, plan
    cond = next(line for line in plan.splitlines() if "Index Cond" in line)
    assert "t0_us >= '9990000000'" in cond and "t0_us <= '10601000000'" in cond, plan  # a range, not a scan
    t = (t0[:, None] + 0.3 * np.arange(10)).ravel()
    rows = store.conn.execute(sql).fetchall()
    assert len(rows) == np.count_nonzero((t >= 10000.05) & (t <= 10600.05)) == 2000
    store.close()


def _dashboard() -> dict[str, Any]:
    return json.loads((GRAFANA / "dashboards" / "mbsd-twin-history.json").read_text(encoding="utf-8"))


def test_grafana_provisioning_parses_and_names_the_compose_database() -> None:
    compose = yaml.safe_load((SERVICES / "docker-compose.yml").read_text(encoding="utf-8"))
    ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "postgres.yaml").read_text(encoding="utf-8"))
    prov = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "provider.yaml").read_text(encoding="utf-8"))
    source = ds["datasources"][0]
    pg = compose["services"]["postgres"]["environment"]
    assert source["url"] == "postgres:5432" and source["jsonData"]["database"] == pg["POSTGRES_DB"]
    assert "password" not in source  # from the environment (secureJsonData), never in the file
    dash = _dashboard()
    uids = {t["datasource"]["uid"] for p in dash["panels"] for t in p["targets"]}
    assert uids == {source["uid"]}
    grafana = compose["services"]["grafana"]["volumes"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in grafana}
    assert mounted["/var/lib/grafana/dashboards"] == "./grafana/dashboards"
    assert prov["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    twin_env = compose["services"]["twin"]["environment"]
    assert twin_env["MBSD_TWIN_HISTORY_BACKEND"] == "postgresql"
    assert "host=postgres" in twin_env["MBSD_TWIN_HISTORY_DSN"]
    for name, service in compose["services"].items():  # every file the compose file mounts exists
        for v in service.get("volumes", []):
            src = v.split(":")[0]
            if src.startswith("."):
                assert (SERVICES / src).exists(), f"services/docker-compose.yml: {name} mounts {src}: no such file"


def test_grafana_dashboard_queries_run_on_the_history(outputs: list[Msg], pg_db: tuple[str, Any]) -> None:  # noqa: F811
    store = fill(pg_db[0], outputs)
    conn, dash = store.conn, _dashboard()
    v = {"asset": "sc-01", "channel": "estimates.piston.mass"}
    assets = conn.execute(grafana_sql(dash["templating"]["list"][0]["query"], 0, 1)).fetchall()
    channels = conn.execute(grafana_sql(dash["templating"]["list"][1]["query"], 0, 1, **v)).fetchall()
    assert assets == [("sc-01",)] and ("estimates.piston.mass",) in channels \
        and len(channels) == len(expected(outputs))
    queries = {p["title"]: p["targets"][0]["rawSql"] for p in dash["panels"]}
    queries["annotations"] = dash["annotations"]["list"][0]["target"]["rawSql"]
    got = {}
    for title, sql in queries.items():
        cur = conn.execute(grafana_sql(sql, 0.0, 1.0, **v))
        got[title] = ([c.name for c in cur.description], cur.fetchall())
        assert got[title][1], f"{title}: no rows"
    cols, rows = got["$channel with ±σ"]
    assert cols == ["time", "estimates.piston.mass", "-σ", "+σ"]
    t, value, sigma = (np.array(x) for x in expected(outputs)["estimates.piston.mass"])
    np.testing.assert_array_equal([r[1] for r in rows], value)
    np.testing.assert_allclose([r[3] for r in rows], value + sigma, rtol=1e-15)
    np.testing.assert_allclose([r[0].timestamp() for r in rows], t, atol=1e-6)
    cols, rows = got["Health: lag and queue depth"]
    assert cols == ["time", "lag [s]", "queue depth"] and rows[0][1] == 0.001
    anno_cols, anno = got["annotations"]
    assert anno_cols == ["time", "text", "tags"] and any(r[1].startswith("alarm: theta_residual raised") for r in anno)
    assert {r[1] for r in got["Alarms and re-initialisations"][1]} >= {"alarm"}
    store.close()


def test_merged_blocks_span_at_most_the_lookback() -> None:
    """The indexed range query looks back by MERGE_SPAN_S: a merged block never spans more."""
    from mbsd_twin.storage.history.rows import MERGE_SPAN_S

    msgs = [("state", 1.0, json.dumps({"asset": "a", "t0": float(k), "dt": 1.0, "n": 1, "ch": {"x": [k]}}))
            for k in range(30)]
    blocks = convert(msgs)[0]
    assert [(b.t0, b.n) for b in blocks] == [(0.0, 11), (11.0, 11), (22.0, 8)] and MERGE_SPAN_S == 10.0
    assert all(b.t1 - b.t0 <= MERGE_SPAN_S for b in blocks)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_query_finds_a_long_block_through_the_partial_index(backend: str, tmp_path: Path, request: Any) -> None:
    """A range query reads the blocks starting up to MERGE_SPAN_S before it through the index and a
    longer block (one message of 20 s) starting earlier through ``blocks_long``."""
    from mbsd_twin.storage.history.stores import SqliteStore

    store: Any = SqliteStore(str(tmp_path / "h.sqlite")) if backend == "sqlite" else \
        PostgresStore(request.getfixturevalue("pg_db")[0])
    short = [Block("a", "x", 100.0 + k, 0.5, 2, np.array([k, k + 0.5]).tobytes(), None) for k in range(40)]
    store.write([Block("a", "x", 0.0, 1.0, 21, np.arange(21.0).tobytes(), None), *short], [])
    assert store.query("a", "x", 15.0, 16.0)[1].tolist() == [15.0, 16.0]
    t, v, _ = store.query("a", "x", 119.6, 121.0)
    assert t.tolist() == [120.0, 120.5, 121.0] and v.tolist() == [20.0, 20.5, 21.0]
    assert len(store.query("a", "x", -math.inf, math.inf)[0]) == 21 + 80
    sql = ("SELECT b.t0 FROM blocks b WHERE b.series = 1 AND b.t0_us < 5 AND b.t1_us - b.t0_us > 10000000")
    plan = str(store._call("", lambda c: store._fetch(c, "EXPLAIN QUERY PLAN " + sql if backend == "sqlite"
                                                      else "EXPLAIN " + sql, ())))
    assert "blocks_long" in plan, plan
    store.close()
