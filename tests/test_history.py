"""The twin's history store (issue #19 item 1): what the twin publishes lands in SQLite or
PostgreSQL exactly; a store outage (a locked SQLite file, a PostgreSQL database that refuses
connections, a port nobody listens on) spools to disk and every message arrives after recovery;
retention; ``mbsd-twin twin history`` exports what was written; a real twin through mosquitto."""

from __future__ import annotations

import csv
import math
import os
import sqlite3
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from conftest import free_port

from mbsd_twin import load_mechanism
from mbsd_twin.cli import main
from mbsd_twin.rig.synthetic import RigConfig, stream
from mbsd_twin.storage.history.pg import PostgresStore
from mbsd_twin.storage.history.rows import convert
from mbsd_twin.storage.history.stores import SqliteStore
from mbsd_twin.storage.history.writer import HistoryWriter
from mbsd_twin.twin.config.file import load_config
from mbsd_twin.twin.config.sections import AlarmConfig, ConfigError, CoreConfig, HistoryConfig
from mbsd_twin.twin.core import TwinCore
from mbsd_twin.twin.protocol import encode, parse_sensor

MECH = "examples/mechanisms/slider_crank.toml"
PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
Msg = tuple[str, str]  # (topic, payload)


@pytest.fixture(scope="module")
def outputs() -> list[Msg]:
    """1 s of a slider-crank twin's outputs (50 batches of 20 samples), with alarm events; without the
    retained ``latest`` messages (a copy of the newest sample, not stored)."""
    mech = load_mechanism(MECH)
    alarm = AlarmConfig("theta_residual", "theta", "residual", high=5e-4, low=1e-4, min_duration=0.001)
    core = TwinCore(CoreConfig(alarms=(alarm,), alarm_max_events_per_minute=1000), mech)
    out: list[Msg] = []
    for m in stream(mech, RigConfig(), 1.0):
        batch = parse_sensor(encode(m).encode(), "sc-01", 1 << 20)
        out += [(o.topic, o.payload) for o in core.step(batch, 1) if not o.topic.endswith("/latest")]  # type: ignore[arg-type]
    out.append(("dt/v1/sc-01/twin/health", encode({"v": 1, "asset": "sc-01", "lag_s": 0.001})))
    return out


def expected(outputs: list[Msg]) -> dict[str, tuple[list[float], list[float], list[float]]]:
    """channel → (t, value, σ) as a consumer of the messages reads them (NaN: null or no σ)."""
    exp: dict[str, tuple[list[float], list[float], list[float]]] = {}
    for topic, payload in outputs:
        leaf = topic.rsplit("/", 1)[-1]
        if leaf not in ("state", "residuals", "virtual", "estimates"):
            continue
        m = orjson.loads(payload)
        ch = m["ch"]
        for name, values in ch.items():
            if any(name == base + sfx for base in ch for sfx in (".sd", "_sd")):
                continue  # the σ of another channel
            sd = ch.get(name + ".sd", ch.get(name + "_sd", [math.nan] * m["n"]))
            e = exp.setdefault(f"{leaf}.{name}", ([], [], []))
            e[0].extend(m["t0"] + k * m["dt"] for k in range(m["n"]))
            e[1].extend(math.nan if v is None else v for v in values)
            e[2].extend(math.nan if s is None else s for s in sd)
    return exp


def assert_store_holds(store: Any, outputs: list[Msg]) -> int:
    """Every channel of every message in the store, bit for bit; the number of samples."""
    exp = expected(outputs)
    assert store.channels("sc-01") == sorted(exp)
    total = 0
    for channel, (t, v, s) in exp.items():
        got_t, got_v, got_s = store.query("sc-01", channel, -math.inf, math.inf)
        np.testing.assert_array_equal(got_t, t, err_msg=channel)
        np.testing.assert_array_equal(got_v, v, err_msg=channel)
        np.testing.assert_array_equal(got_s, s, err_msg=channel)
        total += len(t)
    return total


def offer_all(writer: HistoryWriter, outputs: list[Msg]) -> None:
    for topic, payload in outputs:
        writer.offer(topic, payload)


# ------------------------------------------------------------------- the rows
def test_messages_become_blocks_with_sigma_and_events(outputs: list[Msg]) -> None:
    msgs = [(t.rsplit("/", 1)[-1], 1.0, p) for t, p in outputs]
    short = encode({"asset": "sc-01", "t0": 0.0, "dt": 0.001, "n": 3, "ch": {"theta": [1.0, 2.0]}})
    blocks, events, bad = convert(msgs + [("state", 1.0, "{not json"), ("latest", 1.0, "{}"), ("state", 1.0, short)])
    assert bad == 2 and convert([("latest", 1.0, msgs[0][2])]) == ([], [], 0)
    by = {b.channel: b for b in blocks}
    assert "estimates.piston.mass" in by and "estimates.piston.mass.sd" not in by
    assert by["estimates.piston.mass"].sigma is not None and by["state.theta"].sigma is None
    assert "virtual.motor_torque.estimate_sd" not in by and by["virtual.motor_torque.estimate"].sigma is not None
    assert "estimates.crank.theta.sd" in by  # a filter state's σ without its value in the message: a channel
    n_ch = len(expected(outputs))  # the channels a consumer of the messages reads (34 for this twin)
    assert by["state.theta"].n == 1000 and len(blocks) == n_ch  # each channel's second in one block
    split = convert(msgs[:8] + msgs[12:])[0]  # a batch's messages missing: two runs per channel
    assert len(split) == 2 * n_ch and sum(b.n for b in split if b.channel == "state.theta") == 980
    kinds = {e.kind for e in events}
    assert {"alarm", "health", "resync"} <= kinds
    alarm = next(e for e in events if e.kind == "alarm")
    assert alarm.t == orjson.loads(alarm.body)["t"]


# ------------------------------------------------------------------- SQLite
def test_sqlite_holds_exactly_what_was_published(tmp_path: Path, outputs: list[Msg]) -> None:
    w = HistoryWriter(HistoryConfig(path=str(tmp_path / "h.sqlite")))
    offer_all(w, outputs)
    w.cycle()
    st = w.status()
    assert st["state"] == "ok" and st["written"] == len(outputs) and st["spooled"] == 0 and st["queue"] == 0
    n = assert_store_holds(w.store, outputs)
    assert n == len(expected(outputs)) * 1000  # every channel of a slider-crank twin at 1 kHz for 1 s
    kinds = [e[0] for e in w.store.events("sc-01")]
    assert kinds.count("alarm") == sum(t.endswith("/alarms") for t, _ in outputs) > 0
    w.close()


def test_sqlite_locked_spools_and_every_message_arrives_after(tmp_path: Path, outputs: list[Msg]) -> None:
    path = str(tmp_path / "h.sqlite")
    cfg = HistoryConfig(path=path, timeout=0.2, retry_min=0.05, retry_max=0.1, batch_messages=50)
    w = HistoryWriter(cfg)
    half = len(outputs) // 2
    offer_all(w, outputs[:40])
    w.cycle()  # the store works: schema made, first messages in
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")  # another process holds the write lock: the store is out
    offer_all(w, outputs[40:half])
    w.cycle()
    st = w.status()
    assert st["state"] == "spooling" and "database is locked" in st["last_error"] and path in st["last_error"]
    assert st["spooled"] == half - 40 and st["spool_pending"] == half - 40 and st["spool_bytes"] > 0
    time.sleep(0.15)
    offer_all(w, outputs[half:])
    w.cycle()  # the retry fails too: still spooling, nothing lost
    assert w.status()["spooled"] == len(outputs) - 40 and w.status()["errors"] >= 2
    locker.execute("ROLLBACK")
    locker.close()
    st = _after_outage(w, outputs)
    assert st["lost"] == 0 and st["spool_files"] == 0
    assert_store_holds(w.store, outputs)
    w.close()


def test_spool_outlives_the_process_and_is_written_at_the_next_start(tmp_path: Path, outputs: list[Msg]) -> None:
    path = tmp_path / "h.sqlite"
    path.mkdir()  # the database cannot be opened: every write fails
    cfg = HistoryConfig(path=str(path), spool_dir=str(tmp_path / "spool"), retry_min=0.05)
    w = HistoryWriter(cfg)
    offer_all(w, outputs)
    w.close()  # stops with the store out: everything in the spool
    assert w.status()["spooled"] == len(outputs) and "unable to open" in w.status()["last_error"]
    path.rmdir()
    w2 = HistoryWriter(cfg)
    assert w2.status()["spool_pending"] == len(outputs)
    for _ in range(20):
        w2.cycle()
    assert w2.status()["replayed"] == len(outputs) and w2.status()["spool_pending"] == 0
    assert_store_holds(w2.store, outputs)
    w2.close()


def test_refused_postgresql_port_spools(tmp_path: Path, outputs: list[Msg]) -> None:
    """No server on the port (connection refused): spooled, the twin's side never blocks."""
    cfg = HistoryConfig(backend="postgresql", dsn=f"host=127.0.0.1 port={free_port()} user=postgres dbname=x",
                        spool_dir=str(tmp_path / "spool"), timeout=1.0)
    w = HistoryWriter(cfg)
    t = time.perf_counter()
    offer_all(w, outputs)
    assert time.perf_counter() - t < 0.5  # offering is an append
    w.cycle()
    st = w.status()
    assert st["state"] == "spooling" and st["spooled"] == len(outputs) and "refused" in st["last_error"]
    assert "port=" in st["last_error"] and "PostgreSQL history" in st["last_error"]
    w.close()


def test_unusable_spool_directory_counts_lost_messages_and_never_raises(tmp_path: Path, outputs: list[Msg]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")  # the spool directory would have to be made inside a file
    cfg = HistoryConfig(path=str(tmp_path / "no" / "h.sqlite"), spool_dir=str(blocker / "spool"))
    w = HistoryWriter(cfg)  # the store's directory does not exist either: every write fails
    offer_all(w, outputs[:10])
    w.cycle()
    st = w.status()
    assert st["state"] == "spooling" and st["lost"] == 10 and st["spooled"] == 0
    assert "spooling to" in st["last_error"] and "Not a directory" in st["last_error"]
    w.close()


def test_a_store_hanging_at_stop_is_reported_not_waited_for(tmp_path: Path, outputs: list[Msg]) -> None:
    class Hanging:  # a store call that does not return (a server that stopped answering)
        name = "hanging store"

        def write(self, blocks: Any, events: Any) -> None:
            time.sleep(3.0)

        def close(self) -> None:
            pass

    events: list[tuple[str, str]] = []
    w = HistoryWriter(HistoryConfig(path="x", spool_dir=str(tmp_path / "s"), batch_interval=0.05),
                      report=lambda e, m: events.append((e, m)), store=Hanging())
    w.start()
    offer_all(w, outputs[:5])
    time.sleep(0.3)  # the writer is inside write()
    offer_all(w, outputs[5:8])
    t = time.perf_counter()
    w.close(0.3)
    assert time.perf_counter() - t < 1.0
    assert events and events[-1][0] == "stop" and "3 queued message(s) may not be written" in events[-1][1]


def _message(t0: float, value: float) -> str:
    return encode({"v": 1, "asset": "sc-01", "seq": 1, "t0": t0, "dt": 0.001, "n": 2,
                   "ch": {"theta": [value, value]}, "stride": 1})


def _retention(cfg: HistoryConfig) -> None:
    day = 86400.0
    wall = [10 * day]
    w = HistoryWriter(cfg, wall=lambda: wall[0])
    for d in (0, 1, 2, 3):
        w.offer("dt/v1/sc-01/twin/state", _message(d * day, float(d)))
    w.offer("dt/v1/sc-01/twin/health", encode({"asset": "sc-01"}))
    wall[0] = 20 * day
    w.offer("dt/v1/sc-01/twin/health", encode({"asset": "sc-01"}))  # published 10 days after the first
    w.cycle()  # written, then the first retention pass
    t, v, _ = w.store.query("sc-01", "state.theta", -math.inf, math.inf)
    assert list(v) == [2.0, 2.0, 3.0, 3.0]  # 3 d - 1.5 d: days 2 and 3 stay
    assert [e[2] for e in w.store.events("sc-01")] == [20 * day]
    w.close()


def test_retention_deletes_blocks_older_than_the_newest_by_rig_time(tmp_path: Path) -> None:
    _retention(HistoryConfig(path=str(tmp_path / "h.sqlite"), retention_days=1.5))


def test_health_figures_reach_prometheus(tmp_path: Path, outputs: list[Msg]) -> None:
    from prometheus_client import generate_latest

    from mbsd_twin.twin.metrics import Metrics

    w = HistoryWriter(HistoryConfig(path=str(tmp_path / "x" / "h.sqlite"), spool_dir=str(tmp_path / "spool")))
    offer_all(w, outputs[:7])
    w.cycle()  # the store's directory does not exist: spooled
    m = Metrics()
    m.history_figures(w.status())
    text = generate_latest(m.registry).decode()
    assert 'twin_history{figure="spooled"} 7.0' in text and 'twin_history{figure="spool_pending"} 7.0' in text
    w.close()



def _after_outage(w: Any, outputs: list[Msg]) -> dict[str, Any]:
    """Let the writer retry after the store is back: its status, everything spooled written back."""
    time.sleep(0.15)
    for _ in range(20):
        w.cycle()
    st = w.status()
    print("history after the outage", st)
    assert st["state"] == "ok" and st["replayed"] == len(outputs) - 40 and st["spool_pending"] == 0
    return dict(st)

# ----------------------------------------------------------------- PostgreSQL
@pytest.fixture
def pg_db() -> Iterator[tuple[str, Any]]:
    """A test database of its own on the local server (dropped after); skipped without a server."""
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(PG_ADMIN, autocommit=True)
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL server reachable on 127.0.0.1:5432 ({exc})")
    name = f"mbsd_history_{uuid.uuid4().hex[:10]}"
    admin.execute(f"CREATE DATABASE {name}")
    try:
        yield f"host=127.0.0.1 port=5432 user=postgres dbname={name}", (admin, name)
    finally:
        admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


def test_postgresql_outage_spools_and_every_message_arrives_after(tmp_path: Path, outputs: list[Msg],
                                                                   pg_db: tuple[str, Any]) -> None:
    dsn, (admin, name) = pg_db
    cfg = HistoryConfig(backend="postgresql", dsn=dsn, spool_dir=str(tmp_path / "spool"), timeout=2.0,
                        retry_min=0.05, retry_max=0.1, batch_messages=50)
    w = HistoryWriter(cfg)
    offer_all(w, outputs[:40])
    w.cycle()
    assert w.status()["written"] == 40
    has_ts = admin.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'timescaledb'").fetchone()
    assert isinstance(w.store, PostgresStore) and w.store.timescale == bool(has_ts)
    # the store goes away: no new connections, the writer's connection terminated
    admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
    offer_all(w, outputs[40:200])
    w.cycle()
    time.sleep(0.15)
    offer_all(w, outputs[200:])
    w.cycle()  # the retry: the database refuses connections
    st = w.status()
    print("history during the outage", st)
    assert st["state"] == "spooling" and st["spooled"] == len(outputs) - 40 and st["errors"] >= 2
    assert "not currently accepting connections" in st["last_error"] and name in st["last_error"]
    admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
    st = _after_outage(w, outputs)
    assert_store_holds(w.store, outputs)
    w.close()


def test_postgresql_retention(tmp_path: Path, pg_db: tuple[str, Any]) -> None:
    _retention(HistoryConfig(backend="postgresql", dsn=pg_db[0], spool_dir=str(tmp_path / "s"), retention_days=1.5))


def test_postgresql_export_through_the_cli(tmp_path: Path, outputs: list[Msg], pg_db: tuple[str, Any]) -> None:
    dsn, _ = pg_db
    w = HistoryWriter(HistoryConfig(backend="postgresql", dsn=dsn, spool_dir=str(tmp_path / "spool")))
    offer_all(w, outputs)
    w.close()
    toml = tmp_path / "twin.toml"
    toml.write_text(f'[history]\nbackend = "postgresql"\ndsn = "{dsn}"\n')
    out = tmp_path / "theta.csv"
    assert main(["twin", "history", "--config", str(toml), "--channel", "estimates.piston.mass",
                 "--from", "0.2505", "--to", "0.5005", "--out", str(out)]) == 0
    assert _check_csv(out, outputs, ["estimates.piston.mass"], 0.2505, 0.5005) == 250


# --------------------------------------------------------------------- export
def _check_csv(path: Path, outputs: list[Msg], channels: list[str], t_from: float, t_to: float) -> int:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    exp = expected(outputs)
    n = 0
    for channel in channels:
        t, v, s = (np.array(x) for x in exp[channel])
        keep = (t >= t_from) & (t <= t_to)
        got = [r for r in rows if r["channel"] == channel]
        assert len(got) == int(keep.sum()) > 0
        assert all(r["asset"] == "sc-01" for r in got)
        np.testing.assert_array_equal([float(r["t"]) for r in got], t[keep])
        np.testing.assert_array_equal([float(r["value"] or "nan") for r in got], v[keep])
        np.testing.assert_array_equal([float(r["sigma"] or "nan") for r in got], s[keep])
        n += len(got)
    assert n == len(rows)
    return n


def test_export_csv_has_what_was_written_and_errors_name_the_problem(tmp_path: Path, outputs: list[Msg],
                                                                     capsys: Any) -> None:
    db = tmp_path / "h.sqlite"
    w = HistoryWriter(HistoryConfig(path=str(db)))
    offer_all(w, outputs)
    w.close()
    toml = tmp_path / "twin.toml"
    toml.write_text(f'[history]\npath = "{db}"\n')
    out = tmp_path / "x.csv"
    chans = ["state.theta", "estimates.piston.mass", "residuals.f_x"]
    assert main(["twin", "history", "--config", str(toml), "--channel", ",".join(chans[:2]), "--channel", chans[2],
                 "--from", "0.1", "--to", "0.6005", "--asset", "sc-01", "--out", str(out)]) == 0
    assert _check_csv(out, outputs, chans, 0.1, 0.6005) == 3 * 501
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".history-")]  # no temporary file left
    capsys.readouterr()
    assert main(["twin", "history", "--config", str(toml), "--channel", "state.nope", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no channel 'state.nope'" in err and "state.theta" in err and str(db) in err
    assert main(["twin", "history", "--config", str(toml), "--from", "yesterday", "--out", str(out)]) == 2
    assert "--from 'yesterday'" in capsys.readouterr().err
    parquet = main(["twin", "history", "--config", str(toml), "--format", "parquet", "--out", str(tmp_path / "x.pq")])
    try:
        import pyarrow.parquet as pq
    except ImportError:
        assert parquet == 2 and "needs pyarrow" in capsys.readouterr().err
    else:
        assert parquet == 0 and pq.read_table(tmp_path / "x.pq").num_rows == len(expected(outputs)) * 1000


def test_history_config_defaults_and_problems(tmp_path: Path) -> None:
    cfg = load_config(None, env={})
    assert cfg.history == HistoryConfig() and cfg.history.backend == "sqlite" and not cfg.history.enabled
    assert load_config(None, env={"MBSD_TWIN_HISTORY_PATH": "/x/h.sqlite"}).history.enabled
    toml = tmp_path / "t.toml"
    toml.write_text('[history]\nbackend = "mongo"\ndsn = "host=db password=hunter2"\nbatch_interval = 0\n'
                    'retention_days = -1\n')
    with pytest.raises(ConfigError) as e:
        load_config(str(toml), env={})
    text = str(e.value)
    assert "[history] backend must be one of sqlite, postgresql, none, got 'mongo'" in text
    assert "[history] dsn must not carry a password" in text and "hunter2" not in text
    assert "[history] batch_interval" in text and "[history] retention_days" in text


# ------------------------------------------------------------- the real twin
def test_twin_through_mosquitto_spools_a_locked_store_and_the_cli_exports_all(broker: Any, tmp_path: Path) -> None:
    """A real twin (rig → mosquitto → twin serve's service): the history file is locked by another
    process for the first 0.8 s of the stream, so the writer spools; after the lock is released every
    state message the twin published (its recording's ``out`` records: what it handed to the broker)
    is in the history, and ``twin history`` exports exactly them."""
    import subprocess

    from test_twin_broker import Collector, _config, _wait

    from mbsd_twin.rig.client import Rig
    from mbsd_twin.rig.synthetic import Trajectory
    from mbsd_twin.twin.recorder import read_records
    from mbsd_twin.twin.service import TwinService

    traj = Trajectory(load_mechanism(MECH), RigConfig())
    traj.samples(0, 1600)
    db = tmp_path / "h.sqlite"
    locker = sqlite3.connect(db, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")  # the store is out from the start
    col = Collector(broker.url, broker.mqtt5)
    cfg = _config(broker, tmp_path, history={"path": str(db), "batch_interval": 0.2, "timeout": 0.2,
                                             "retry_min": 0.2, "retry_max": 0.4},
                  service={"health_interval": 0.3}, record={"path": str(tmp_path / "rec.jsonl")})
    with TwinService(cfg) as svc:
        assert _wait(svc.connected.is_set, 5)
        rig = Rig(svc.mech, RigConfig(), broker.url, traj=traj, protocol=broker.protocol)
        rig.run(0.8)
        _wait(lambda: svc.history is not None and svc.history.status()["spooled"] > 0, 5)
        during = svc.health()["sinks"]["history"]
        locker.execute("ROLLBACK")
        locker.close()
        rig.run(0.7, seq0=40)
        _wait(lambda: not svc.batches, 10)
        assert _wait(lambda: svc.health()["sinks"]["history"]["spool_pending"] == 0, 10)
        time.sleep(0.5)
        health = svc.health()
    time.sleep(0.3)
    col.close()
    states = [orjson.loads(r["p"]) for r in read_records(str(tmp_path / "rec.jsonl"))
              if r["k"] == "out" and r["t"].endswith("/twin/state")]
    hist = health["sinks"]["history"]
    print("history sink during the outage", during, "after", hist, "states", len(states))
    assert during["state"] == "spooling" and "database is locked" in during["last_error"]
    # 75 batches sent: at least 50 answered with a state, counting those the overload policy shed on a
    # loaded machine (dropped_overload) as answered
    assert len(states) + health["counters"]["dropped_overload"] >= 50
    assert hist["errors"] >= 1 and hist["spooled"] > 0 and hist["lost"] == 0
    assert hist["replayed"] == hist["spooled"] and hist["spool_pending"] == 0
    assert health["counters"].get("internal_error", 0) == 0
    published = col.get("twin/health")
    assert any(m["sinks"]["history"]["state"] == "spooling" for m in published)
    toml = tmp_path / "twin.toml"
    toml.write_text(f'[history]\npath = "{db}"\n')
    out = tmp_path / "state.csv"
    proc = subprocess.run([sys.executable, "-m", "mbsd_twin.cli", "twin", "history", "--config", str(toml),
                           "--channel", "state.theta,state.piston.x", "--out", str(out)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == 0, proc.stderr
    n = _check_csv(out, [("dt/v1/sc-01/twin/state", orjson.dumps(m).decode()) for m in states],
                   ["state.theta", "state.piston.x"], -math.inf, math.inf)
    assert n == 2 * sum(m["n"] for m in states) and "wrote" in proc.stdout
    store = SqliteStore(str(db), create=False)
    kinds = {e[0] for e in store.events("sc-01")}
    assert "health" in kinds and "resync" in kinds
    store.close()
