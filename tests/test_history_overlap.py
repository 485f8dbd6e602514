"""A sample time is stored once (docs/history.md, "A sample written twice"): two writers of the same
asset — two instances of a twin during a fencing hand-over — write the same messages, interleaved
or at the same moment from two threads, each on its own connection to one database; every sample
is read back once, with the values of the writer that stored it first. A block that shares part of
its samples with a stored one keeps the others bit for bit (times, values, σ), split where the
stored samples cut it, each piece with its own aggregates. Both backends.

Expectations are derived from the messages as a subscriber reads them (``t0 + k·dt`` per message,
the first write of a time wins), not from the store's code."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from test_history import pg_db  # noqa: F401  (fixture)

from mbsd_twin.storage.history.pg import PostgresStore
from mbsd_twin.storage.history.rows import convert
from mbsd_twin.storage.history.stores import SqliteStore, _block_rows
from mbsd_twin.storage.history.writer import HistoryWriter
from mbsd_twin.twin.config.sections import HistoryConfig

T0 = 1_767_225_600.0000005  # Unix rig time half a µs past a µs: a time written twice has one µs floor
DT = 1e-3
Msg = tuple[str, float, str]  # (topic leaf, wall, payload) as the writer hands them to convert


def msg(t0: float, values: list[float | None], sigma: list[float] | None = None, dt: float = DT) -> Msg:
    ch: dict[str, Any] = {"x": values}
    if sigma is not None:
        ch["x.sd"] = sigma
    return "state", 0.0, orjson.dumps({"asset": "a1", "t0": t0, "dt": dt, "n": len(values), "ch": ch}).decode()


def times(t0: float, n: int) -> list[float]:
    """A message's sample times as its subscriber computes them."""
    return [t0 + k * DT for k in range(n)]


def stream(k0: int, k1: int, sign: float) -> list[Msg]:
    """Messages k0 … k1-1 of a 10-sample stream; values ±(1000 k + j) tell the writers apart."""
    return [msg(T0 + 10 * k * DT, [sign * (1000.0 * k + j + 1) for j in range(10)]) for k in range(k0, k1)]


def read(store: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return store.query("a1", "state.x", -math.inf, math.inf)


def rows(store: Any) -> list[tuple[Any, ...]]:
    sql = "SELECT t0_us, t1_us, t0, n, vmin, vmax, vsum, vn, ssum, sn FROM blocks ORDER BY t0_us"
    return [tuple(r) for r in store._call("reading", lambda c: store._fetch(c, sql, ()))]


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Callable[[], Any], HistoryConfig]]:
    """(name, a factory of store objects on one database — each its own connection — and a writer's
    configuration for that database)."""
    made: list[Any] = []
    if request.param == "sqlite":
        path = str(tmp_path / "h.sqlite")
        cfg = HistoryConfig(path=path, spool_dir=str(tmp_path / "spool"))

        def new() -> Any:
            made.append(SqliteStore(path))
            return made[-1]
    else:
        dsn = request.getfixturevalue("pg_db")[0]
        cfg = HistoryConfig(backend="postgresql", dsn=dsn, spool_dir=str(tmp_path / "spool"))

        def new() -> Any:
            made.append(PostgresStore(dsn))
            return made[-1]
    yield request.param, new, cfg
    for s in made:
        s.close()


def test_two_writers_interleaved_store_each_sample_once_first_write_wins(backend: Any) -> None:
    _, new, _ = backend
    a, b = new(), new()
    schedule = [(a, stream(0, 10, 1)), (b, stream(5, 15, -1)), (a, stream(10, 20, 1)),
                (b, stream(15, 25, -1) + stream(22, 23, -1)),  # 22 twice in one batch
                (b, stream(0, 5, -1))]
    first: dict[float, float] = {}
    for store, msgs in schedule:
        before = len(first)
        offered = 0
        for _, _, text in msgs:
            m = orjson.loads(text)
            for t, v in zip(times(m["t0"], m["n"]), m["ch"]["x"], strict=True):
                first.setdefault(t, v)
                offered += 1
        blocks, events, _ = convert(msgs)
        assert store.write(blocks, events) == offered - (len(first) - before)  # the samples dropped
    t, v, _ = read(new())
    assert len(first) == 250 and len(t) == 250
    np.testing.assert_array_equal(t, sorted(first))
    np.testing.assert_array_equal(v, [first[x] for x in sorted(first)])
    assert (v < 0).sum() == 100  # the second writer's first: messages 10 … 14 and 20 … 24
    spans = [(r[0], r[1]) for r in rows(a)]
    assert all(s1[1] < s2[0] for s1, s2 in zip(spans, spans[1:], strict=False)), spans  # no two blocks overlap


def test_two_writers_at_once_store_each_sample_once(backend: Any) -> None:
    """Two threads write the same 40 batches at the same moment (a barrier before each): the check for
    stored samples and the insert are one step per asset, so per batch one writer stores all its
    samples and the other none — never both, never an error."""
    _, new, _ = backend
    stores = [new(), new()]
    assert [s.channels("a1") for s in stores] == [[], []]  # both connected, as two running twins are
    batches = [[(stream(5 * i, 5 * i + 5, sign)) for i in range(40)] for sign in (1.0, -1.0)]
    dropped = [0, 0]
    errors: list[BaseException] = []
    go = threading.Barrier(2)

    def run(w: int) -> None:
        try:
            for msgs in batches[w]:
                go.wait(10)
                blocks, events, _ = convert(msgs)
                dropped[w] += stores[w].write(blocks, events)
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)
            go.abort()

    threads = [threading.Thread(target=run, args=(w,)) for w in (0, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    t, v, _ = read(new())
    expect = np.array(times(T0, 2000))  # 200 messages of 10 samples continue one another
    expect_v = np.array([1000.0 * (i // 10) + i % 10 + 1 for i in range(2000)])
    np.testing.assert_array_equal(t, [x for k in range(200) for x in times(T0 + 10 * k * DT, 10)])
    assert len(t) == 2000 and np.allclose(t, expect, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(np.abs(v), expect_v)
    per_batch = np.sign(v).reshape(40, 50)
    assert (np.abs(per_batch.sum(axis=1)) == 50).all()  # each batch all the first writer's
    assert dropped[0] + dropped[1] == 2000 and (v > 0).sum() == 2000 - dropped[0]
    print(f"{backend[0]}: the first writer stored {(per_batch[:, 0] > 0).sum()} of 40 batches")


def test_a_block_sharing_its_first_samples_keeps_the_others_bit_for_bit(backend: Any) -> None:
    """Stored: 10 samples at T0. New: 20 samples from T0 + 5·dt (its first 5 in the stored samples'
    µs, a float64 step off some of them): those 5 are dropped, the other 15 stored at the new
    message's own t0 + j·dt with its values and σ — though t(5) + i·dt differs from them."""
    _, new, _ = backend
    rng = np.random.default_rng(3)
    va, vb = rng.normal(size=10).tolist(), rng.normal(size=20).tolist()
    sb = rng.uniform(0.1, 0.2, size=20).tolist()
    vb[12] = None  # a null published
    sa = [0.5] * 10
    tb0 = T0 + 5 * DT
    tb = times(tb0, 20)
    us = [math.floor(x * 1e6) for x in tb[:5]]
    assert us == [math.floor(x * 1e6) for x in times(T0, 10)[5:]] and tb[:5] != times(T0, 10)[5:]
    assert any(tb[5] + i * DT != tb[5 + i] for i in range(15))
    store = new()
    assert store.write(*convert([msg(T0, va, sa)])[:2]) == 0
    assert store.write(*convert([msg(tb0, vb, sb)])[:2]) == 5
    t, v, s = read(new())
    np.testing.assert_array_equal(t, times(T0, 10) + tb[5:])
    np.testing.assert_array_equal(v, va + [math.nan if x is None else x for x in vb[5:]])
    np.testing.assert_array_equal(s, sa + sb[5:])
    kept = np.array([math.nan if x is None else x for x in vb[5:]])
    ok = np.isfinite(kept)
    (a0, a1, *_), (b0, b1, bt0, bn, vmin, vmax, vsum, vn, ssum, sn) = rows(store)
    assert (a0, a1) == (math.floor(T0 * 1e6), math.floor(times(T0, 10)[-1] * 1e6))
    assert (b0, b1, bt0, bn) == (math.floor(tb[5] * 1e6), math.floor(tb[-1] * 1e6), tb[5], 15)
    assert (vmin, vmax, vn, sn) == (kept[ok].min(), kept[ok].max(), 14, 15)
    assert vsum == pytest.approx(math.fsum(kept[ok]), rel=1e-12) and ssum == pytest.approx(math.fsum(sb[5:]),
                                                                                             rel=1e-12)


def test_a_merged_block_cut_in_the_middle_becomes_two_blocks(backend: Any) -> None:
    """New: one merged block of six 10-sample messages. Stored before: 11 samples from sample 3 of
    the third message to sample 3 of the fourth. Written: messages 1-2 and 3's first three samples,
    then 4's last six and 5-6 — two blocks, each sample at its own message's t0 + j·dt; the
    downsampled range (from the blocks' stored aggregates) agrees with the samples read back."""
    _, new, _ = backend
    rng = np.random.default_rng(5)
    msgs = [msg(T0 + 10 * k * DT, rng.normal(size=10).tolist()) for k in range(6)]
    blocks, _, _ = convert(msgs)
    assert len(blocks) == 1 and blocks[0].parts is not None and blocks[0].n == 60
    t_new = [x for k in range(6) for x in times(T0 + 10 * k * DT, 10)]
    v_new = [x for _, _, text in msgs for x in orjson.loads(text)["ch"]["x"]]
    ts = t_new[23]  # the stored message's t0: the time of the third message's sample 3
    vs = rng.normal(size=11).tolist()
    assert [math.floor(x * 1e6) for x in times(ts, 11)] == [math.floor(x * 1e6) for x in t_new[23:34]]
    store = new()
    store.write(*convert([msg(ts, vs)])[:2])
    assert store.write(blocks, []) == 11
    t, v, _ = read(new())
    np.testing.assert_array_equal(t, t_new[:23] + times(ts, 11) + t_new[34:])
    np.testing.assert_array_equal(v, v_new[:23] + vs + v_new[34:])
    got = rows(store)
    assert [(r[2], r[3]) for r in got] == [(T0, 23), (ts, 11), (t_new[34], 26)]
    for r, part in zip(got, (v_new[:23], vs, v_new[34:]), strict=True):
        assert (r[4], r[5], r[7]) == (min(part), max(part), len(part)) and r[6] == pytest.approx(math.fsum(part))
    d = store.downsample("a1", "state.x", T0, t_new[-1], 1)
    assert d["n"] == 60 and d["min"] == [min(v)] and d["max"] == [max(v)]
    assert d["value"][0] == pytest.approx(math.fsum(v) / 60, rel=1e-12)


def test_the_writer_counts_duplicates_and_says_so_once(backend: Any, caplog: pytest.LogCaptureFixture) -> None:
    from prometheus_client import generate_latest

    from mbsd_twin.twin.metrics import Metrics

    name, _, cfg = backend
    first, second = HistoryWriter(cfg), HistoryWriter(cfg)
    try:
        topic = "dt/v1/a1/twin/state"
        for _, _, text in stream(0, 10, 1):
            first.offer(topic, text)
        for _, _, text in stream(0, 10, -1):
            second.offer(topic, text)
        first.cycle()
        with caplog.at_level(logging.WARNING, logger="mbsd_twin.history"):
            second.cycle()
            for _, _, text in stream(8, 12, -1):  # 2 messages stored, 2 new
                second.offer(topic, text)
            second.cycle()
        assert (first.counts["samples"], first.counts["duplicates"]) == (100, 0)
        st = second.status()
        assert (st["samples"], st["duplicates"], st["written"], st["errors"]) == (20, 120, 14, 0)
        said = [r for r in caplog.records if r.name == "mbsd_twin.history"]
        assert len(said) == 1 and "100 sample(s) not stored again" in said[0].getMessage(), said
        m = Metrics()
        m.history_figures(st)
        assert 'twin_history{figure="duplicates"} 120.0' in generate_latest(m.registry).decode()
    finally:
        first.close()
        second.close()
    print(f"{name}: {st}")



def test_a_long_stored_block_is_found_before_the_new_one(backend: Any) -> None:
    """A stored message of 20 s (longer than the writer merges): a new message inside it is found as
    the last block starting before it; one after a short block that an earlier version stored
    inside the long one (two blocks overlapping: inserted here without the check) through the
    partial index ``blocks_long``."""
    _, new, _ = backend
    store = new()
    long = [float(k) for k in range(21)]
    assert store.write(*convert([msg(T0 + 200.0, long, dt=1.0), msg(T0 + 300.0, [30.0])])[:2]) == 0
    assert store.write(*convert([msg(T0 + 205.0, [7.0, 8.0])])[:2]) == 2
    legacy = convert([msg(T0 + 210.5, [9.0])])[0]
    store._call("", lambda c: store._insert_blocks(c.cursor(), _block_rows(legacy, store.ids)) or c.commit())
    assert store.write(*convert([msg(T0 + 215.0, [7.0])])[:2]) == 1
    t, v, _ = read(new())
    np.testing.assert_array_equal(t, [T0 + 200.0 + k * 1.0 for k in range(21)] + [T0 + 210.5, T0 + 300.0])
    np.testing.assert_array_equal(v, long + [9.0, 30.0])  # (block by block: the legacy one after the long one)


def test_new_sqlite_file_opened_by_three_at_once(tmp_path: Path) -> None:
    """Three writers opening one new SQLite file together: each gets it (switching a new file to
    WAL had failed as 'database is locked' in 3 of 40 such starts, before its busy timeout)."""
    import threading

    for i in range(40):
        path = str(tmp_path / f"h{i}.sqlite")
        errors: list[BaseException] = []

        def open_and_read(path: str = path, errors: list[BaseException] = errors) -> None:
            try:
                store = SqliteStore(path)
                store.channels("a1")
                store.close()
            except BaseException as exc:
                errors.append(exc)
        threads = [threading.Thread(target=open_and_read) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, (i, errors)
