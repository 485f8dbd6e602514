"""The dashboard's read endpoints as an outsider meets them (issue #30 item 6), through real HTTP
requests to a twin service whose history store — SQLite and PostgreSQL (a database of its own on
127.0.0.1:5432, created and dropped here) — holds two 1 kHz channels of 1 M samples each:

- the history range is clamped to what the channels hold, a channel named many times is read once,
  and requests beyond the ``[dashboard]`` bounds are refused with 400 and JSON naming the parameter
  and the bound;
- a range of 1 M samples is streamed: the buckets equal numpy's over the export's samples, and the
  request's traced memory (tracemalloc, all threads) stays a small fraction of the range's size;
- ``data`` replies are cached per cursor and served without the store's lock (the one the twin's
  worker takes); every read route is rate-limited per client address (429, ``Retry-After``).

Each test talks from a loopback address of its own (127.0.0.N), so the rate limit of one test
never touches another's."""

from __future__ import annotations

import dataclasses
import http.client
import json
import math
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mbsd_twin.demo.procs import EmbeddedBroker, free_port
from mbsd_twin.demo.run import DemoOptions, twin_config
from mbsd_twin.storage.history import export
from mbsd_twin.storage.history.backends import open_store
from mbsd_twin.storage.history.rows import Block
from mbsd_twin.twin.config.sections import DashboardConfig, HistoryConfig

PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
T0, DT, PER_MSG, MSGS, BLOCKS = 1_700_000_000.0, 1e-3, 20, 25, 2000  # 2000 blocks of 500 = 1 M samples
N = BLOCKS * PER_MSG * MSGS
THETA, MASS = "state.theta", "estimates.piston.mass"
# the bounds of the service under test: a range of both whole channels (2 M) is above history_samples;
# a client address gets 40 read requests, then one every 100 s
LIMITS = DashboardConfig(history_samples=1_500_000, rate=0.01, burst=40, data_cache_s=3600.0)


def _fill(store: Any) -> None:
    """THETA: sin with NaN runs and spikes; MASS: the same shifted, with σ = 0.1 + k·1e-6."""
    rng = np.random.default_rng(11)
    k_msg = np.arange(MSGS)
    for c, name in enumerate((THETA, MASS)):
        v = np.sin(2 * np.pi * np.arange(N) * DT / 60.0 + c) + 0.01 * rng.standard_normal(N)
        v[rng.integers(0, N, 40)] = 5.0 + c
        v[300_000:300_070] = np.nan
        sigma = 0.1 + np.arange(N) * 1e-6
        per = PER_MSG * MSGS
        blocks = []
        for k in range(BLOCKS):
            t0 = T0 + k * per * DT
            parts = np.column_stack([t0 + k_msg * PER_MSG * DT, np.full(MSGS, PER_MSG)]).ravel()
            blocks.append(Block("sc-01", name, t0, DT, per, v[k * per:(k + 1) * per].tobytes(),
                                sigma[k * per:(k + 1) * per].tobytes() if c else None, parts.astype("<f8").tobytes()))
        for i in range(0, BLOCKS, 500):
            store.write(blocks[i:i + 500], [])
    store.close()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def twin(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, int, Any]]:
    """(service, HTTP port, a reader of the store) for each backend."""
    from mbsd_twin.twin.service import TwinService

    admin = None
    if request.param == "sqlite":
        cfg_h = HistoryConfig(path=str(tmp_path_factory.mktemp("limits") / "h.sqlite"))
    else:
        psycopg = pytest.importorskip("psycopg")
        admin = psycopg.connect(PG_ADMIN, autocommit=True)
        name = f"mbsd_dash_{uuid.uuid4().hex[:10]}"
        admin.execute(f"CREATE DATABASE {name}")
        cfg_h = HistoryConfig(backend="postgresql", dsn=f"host=127.0.0.1 port=5432 user=postgres dbname={name}",
                              spool_dir=str(tmp_path_factory.mktemp("spool")))
    try:
        _fill(open_store(cfg_h.backend, cfg_h.path, cfg_h.dsn, 30.0))
        with EmbeddedBroker() as broker:
            port = free_port()
            cfg = dataclasses.replace(twin_config(DemoOptions(), broker.url, port), history=cfg_h, dashboard=LIMITS)
            with TwinService(cfg) as svc:
                assert svc.connected.wait(15)
                reader = open_store(cfg_h.backend, cfg_h.path, cfg_h.dsn, 30.0, create=False)
                yield svc, port, reader
                reader.close()
    finally:
        if admin is not None:
            admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
            admin.execute(f"DROP DATABASE IF EXISTS {name}")
            admin.close()


def _get(port: int, client: str, path: str, timeout: float = 60.0) -> tuple[int, dict[str, str], Any]:
    """GET from the loopback address ``client`` (127.0.0.N: the rate limit's client)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(client, 0))
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read()
        return r.status, dict(r.getheaders()), json.loads(body) if r.getheader("Content-Type", "").startswith(
            "application/json") else body
    finally:
        conn.close()


def _last_sample() -> float:
    """The newest stored sample: the last block's last message's t0 + 19 dt, as the twin's subscribers
    compute it."""
    per = PER_MSG * MSGS
    t0_last_msg = (T0 + (BLOCKS - 1) * per * DT) + (MSGS - 1) * PER_MSG * DT
    return t0_last_msg + (PER_MSG - 1) * DT


def test_the_range_is_clamped_to_what_is_stored(twin: tuple[Any, int, Any]) -> None:
    _, port, _ = twin
    status, _, d = _get(port, "127.0.0.2", f"/dashboard/api/history?from=0&to=1e12&channel={THETA}")
    assert status == 200, d
    assert d["from"] == T0 and d["to"] == _last_sample() and d["requested"] == {"from": 0, "to": 1e12}
    assert d["channels"][THETA]["n"] == N and len(d["channels"][THETA]["t"]) == 2000
    status, _, e = _get(port, "127.0.0.2", f"/dashboard/api/history?channel={THETA}")  # no from/to: all
    assert status == 200 and (e["from"], e["to"], e["channels"][THETA]["n"]) == (T0, _last_sample(), N)
    assert e["requested"] == {"from": None, "to": None}  # -inf and inf, as JSON null
    status, _, f = _get(port, "127.0.0.2", f"/dashboard/api/history?from=1&to=2&channel={THETA}")
    assert status == 200 and f["channels"][THETA] == {"n": 0, "t": [], "value": [], "min": [], "max": [], "sigma": []}


def test_bounds_are_refused_naming_the_parameter_and_the_bound(twin: tuple[Any, int, Any]) -> None:
    _, port, _ = twin
    others = ",".join(f"residuals.c{k}" for k in range(8))  # 9 distinct channels with THETA
    cases = [(f"channel={THETA},{others}", "channel", 8), (f"channel={THETA}&points=2001", "points", 2000),
             (f"channel={THETA},{MASS}", "from", 1_500_000)]  # 2 M stored samples
    for query, parameter, bound in cases:
        status, _, d = _get(port, "127.0.0.3", f"/dashboard/api/history?{query}")
        assert status == 400 and d["parameter"] == parameter and d["bound"] == bound, d
    assert "2000000 stored samples" in d["error"] and "history_samples" in d["error"]
    # a channel named 100 times is one channel, read once
    status, _, d = _get(port, "127.0.0.3", f"/dashboard/api/history?from={T0}&to={T0 + 100}&channel="
                        + ",".join([THETA] * 100) + "&points=50")
    assert status == 200 and list(d["channels"]) == [THETA] and d["channels"][THETA]["n"] == 100_001


def _envelope(t: np.ndarray, v: np.ndarray, s: np.ndarray, lo: float, hi: float, points: int) -> dict[str, Any]:
    """Per non-empty bucket of [lo, hi]: first time, mean, min, max (NaN ignored), mean σ — by np.*.at."""
    edges = np.linspace(lo, hi, points + 1)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, points - 1)
    first, low, high = np.full(points, np.inf), np.full(points, np.inf), np.full(points, -np.inf)
    np.minimum.at(first, b, t)
    ok, s_ok = np.isfinite(v), np.isfinite(s)
    np.minimum.at(low, b[ok], v[ok])
    np.maximum.at(high, b[ok], v[ok])
    n_ok, total = np.bincount(b[ok], minlength=points), np.bincount(b[ok], v[ok], minlength=points)
    s_n, s_total = np.bincount(b[s_ok], minlength=points), np.bincount(b[s_ok], s[s_ok], minlength=points)
    used = np.bincount(b, minlength=points) > 0
    with np.errstate(invalid="ignore"):
        return {"t": first[used], "min": np.where(n_ok > 0, low, np.nan)[used],
                "max": np.where(n_ok > 0, high, np.nan)[used], "value": (total / n_ok)[used],
                "sigma": (s_total / s_n)[used]}


def test_a_large_range_is_streamed_into_exact_buckets(twin: tuple[Any, int, Any]) -> None:
    """Both channels over 1,000,001 samples less a few: the buckets equal numpy's over the export's
    samples, and the request's traced peak stays under 12 MB (the range is 1 M samples of 8-byte
    values, times and σ: reading it whole takes tens of MB)."""
    _, port, reader = twin
    lo, hi, points = T0 + 0.0105, T0 + 999.99, 1499
    tracemalloc.start()
    try:
        status, _, d = _get(port, "127.0.0.4", f"/dashboard/api/history?from={lo}&to={hi}&channel={THETA}"
                            f"&points={points}")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert status == 200, d
    (_, t, v, s), = export.query(reader, "sc-01", [THETA], lo, hi)
    got, exp = d["channels"][THETA], _envelope(t, v, s, lo, hi, points)
    assert got["n"] == len(t) == 999_980 and len(got["t"]) == points
    nan = lambda xs: np.array([math.nan if x is None else x for x in xs])  # noqa: E731
    np.testing.assert_array_equal(got["t"], exp["t"])
    np.testing.assert_array_equal(nan(got["min"]), exp["min"])
    np.testing.assert_array_equal(nan(got["max"]), exp["max"])
    np.testing.assert_allclose(nan(got["value"]), exp["value"], rtol=1e-12, atol=1e-15)
    assert peak < 12e6, f"{peak / 1e6:.1f} MB traced while answering"
    # σ: MASS over a range whose edges cut blocks and messages
    status, _, d = _get(port, "127.0.0.4", f"/dashboard/api/history?from={lo}&to={hi}&channel={MASS}&points=777")
    (_, t, v, s), = export.query(reader, "sc-01", [MASS], lo, hi)
    exp = _envelope(t, v, s, lo, hi, 777)
    np.testing.assert_allclose(d["channels"][MASS]["sigma"], exp["sigma"], rtol=1e-12)
    np.testing.assert_array_equal(d["channels"][MASS]["max"], exp["max"])


def test_data_replies_are_cached_per_cursor_without_the_workers_lock(twin: tuple[Any, int, Any]) -> None:
    svc, port, _ = twin
    first = _get(port, "127.0.0.5", "/dashboard/api/data?since=0")
    assert first[0] == 200 and first[1]["X-Cache"] == "miss"
    with svc.dashboard.store._lock:  # the lock the twin's worker takes in the tap: held by this test
        again = _get(port, "127.0.0.5", "/dashboard/api/data?since=0", timeout=20)
        # a history range read meanwhile needs no lock of the twin's either
        hist = _get(port, "127.0.0.5", f"/dashboard/api/history?from={T0}&to={T0 + 500}&channel={MASS}")
    assert again[0] == 200 and again[1]["X-Cache"] == "hit" and again[2] == first[2]
    assert hist[0] == 200 and hist[2]["channels"][MASS]["n"] == 500_001
    # the twin has no rows yet: every cursor asks for the same (empty) rows and shares the entry
    other = _get(port, "127.0.0.5", "/dashboard/api/data?since=7")
    assert other[0] == 200 and other[1]["X-Cache"] == "hit" and other[2]["rows"] == [] and other[2]["cursor"] == 0


def test_read_routes_are_rate_limited_per_client(twin: tuple[Any, int, Any]) -> None:
    """40 requests (the burst) pass, the 41st is refused with 429 and Retry-After (one token per
    100 s); another client address is still served."""
    _, port, _ = twin
    routes = ["/dashboard/api/config", "/dashboard/api/data?since=0", "/dashboard/api/history"]
    answers = [_get(port, "127.0.0.6", routes[k % 3]) for k in range(41)]
    assert [a[0] for a in answers[:40]] == [200] * 40
    status, headers, body = answers[40]
    assert status == 429 and body["parameter"] == "rate" and body["bound"] == 0.01
    assert 0 < body["retry_after"] <= 100 and 1 <= int(headers["Retry-After"]) <= 100
    assert _get(port, "127.0.0.7", routes[2])[0] == 200


def test_the_bounds_are_configured_in_dashboard(tmp_path: Path) -> None:
    from mbsd_twin.twin.config.file import load_config
    from mbsd_twin.twin.config.sections import ConfigError

    path = tmp_path / "twin.toml"
    path.write_text("[dashboard]\nhistory_channels = 3\nrate = 5\n")
    cfg = load_config(str(path), env={})
    assert (cfg.dashboard.history_channels, cfg.dashboard.rate, cfg.dashboard.history_points) == (3, 5.0, 2000)
    path.write_text("[dashboard]\nhistory_points = 0\n")
    with pytest.raises(ConfigError, match=r"\[dashboard\] history_points must be >= 1"):
        load_config(str(path), env={})
